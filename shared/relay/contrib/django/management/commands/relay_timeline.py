"""``manage.py relay_timeline``: ``relay timeline`` on the store ``settings.RELAY`` names."""

from relay.contrib.django.management.commands._relay_cli import RelayCLICommand


class Command(RelayCLICommand):
    """``relay timeline --backend <settings.RELAY's backend> [OPTIONS]``."""

    help = (
        "Relay's `relay timeline` on the store settings.RELAY names (same options, no --backend)."
    )
    relay_command = "timeline"
