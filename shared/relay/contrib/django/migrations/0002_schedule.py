"""The unmanaged model (no table) that carries the permissions of stored schedules:
``relay.view_schedule`` and ``relay.change_schedule``."""

from typing import ClassVar

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies: ClassVar[list[tuple[str, str]]] = [("relay", "0001_initial")]

    operations: ClassVar[list[migrations.operations.base.Operation]] = [
        migrations.CreateModel(
            name="Schedule",
            fields=[("id", models.AutoField(primary_key=True, serialize=False))],
            options={
                "managed": False,
                "default_permissions": ("view", "change"),
                "verbose_name": "stored schedule",
            },
        ),
    ]
