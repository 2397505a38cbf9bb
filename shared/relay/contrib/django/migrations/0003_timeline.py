"""The timeline's entry in the admin index: a proxy of ``Run``, with no table and no permission
of its own (``relay.view_run`` shows it)."""

from typing import ClassVar

from django.db import migrations


class Migration(migrations.Migration):
    dependencies: ClassVar[list[tuple[str, str]]] = [("relay", "0002_schedule")]

    operations: ClassVar[list[migrations.operations.base.Operation]] = [
        migrations.CreateModel(
            name="Timeline",
            fields=[],
            options={
                "verbose_name": "timeline",
                "verbose_name_plural": "timeline",
                "proxy": True,
                "default_permissions": (),
                "indexes": [],
                "constraints": [],
            },
            bases=("relay.run",),
        ),
    ]
