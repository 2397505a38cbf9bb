"""``manage.py relay_next JOB``: ``relay next`` on the store ``settings.RELAY`` names."""

from relay.contrib.django.management.commands._relay_cli import RelayCLICommand


class Command(RelayCLICommand):
    """``relay next --backend <settings.RELAY's backend> JOB [--count N] [--json]`` (read-only)."""

    help = "`relay next` on the store settings.RELAY names (its options but --backend)."
    relay_command = "next"
