"""``manage.py relay_pause JOB``: ``relay pause`` on the store settings.RELAY names."""

from relay.contrib.django.management.commands._relay_cli import RelayCLICommand


class Command(RelayCLICommand):
    """``relay pause --backend <settings.RELAY's backend> JOB [OPTIONS]`` (the control plane)."""

    help = (
        "Relay's `relay pause JOB` on the store settings.RELAY names (its options, but --backend)."
    )
    relay_command = "pause"
