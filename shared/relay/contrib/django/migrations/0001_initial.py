"""Two unmanaged models (no table) that carry Relay's admin permissions."""

from typing import ClassVar

from django.db import migrations, models


class Migration(migrations.Migration):
    initial = True
    dependencies: ClassVar[list[tuple[str, str]]] = []

    operations: ClassVar[list[migrations.operations.base.Operation]] = [
        migrations.CreateModel(
            name="Job",
            fields=[("id", models.AutoField(primary_key=True, serialize=False))],
            options={
                "managed": False,
                "default_permissions": ("view",),
                "permissions": (("control_job", "Can pause, resume and trigger Relay jobs"),),
                "verbose_name": "job",
            },
        ),
        migrations.CreateModel(
            name="Run",
            fields=[("id", models.AutoField(primary_key=True, serialize=False))],
            options={"managed": False, "default_permissions": ("view",), "verbose_name": "run"},
        ),
    ]
