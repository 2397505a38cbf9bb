"""``manage.py relay_jobs``: ``relay jobs`` on the store ``settings.RELAY`` names."""

from relay.contrib.django.management.commands._relay_cli import RelayCLICommand


class Command(RelayCLICommand):
    """``relay jobs --backend <settings.RELAY's backend> [--json]`` (read-only)."""

    help = "`relay jobs` on the store settings.RELAY names (its options but --backend)."
    relay_command = "jobs"
