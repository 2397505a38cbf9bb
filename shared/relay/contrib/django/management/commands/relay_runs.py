"""``manage.py relay_runs``: ``relay runs`` on the store ``settings.RELAY`` names."""

from relay.contrib.django.management.commands._relay_cli import RelayCLICommand


class Command(RelayCLICommand):
    """``relay runs --backend <settings.RELAY's backend> [OPTIONS]``."""

    help = "Relay's `relay runs` on the store settings.RELAY names (its options, but --backend)."
    relay_command = "runs"
