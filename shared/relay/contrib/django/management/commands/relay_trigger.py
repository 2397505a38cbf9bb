"""``manage.py relay_trigger JOB``: ``relay trigger`` on the store settings.RELAY names."""

from relay.contrib.django.management.commands._relay_cli import RelayCLICommand


class Command(RelayCLICommand):
    """``relay trigger --backend <settings.RELAY's backend> JOB [OPTIONS]`` (the control plane)."""

    help = "`relay trigger JOB` on the store settings.RELAY names (its options but --backend)."
    relay_command = "trigger"
