"""``manage.py relay_resume JOB``: ``relay resume`` on the store settings.RELAY names."""

from relay.contrib.django.management.commands._relay_cli import RelayCLICommand


class Command(RelayCLICommand):
    """``relay resume --backend <settings.RELAY's backend> JOB [OPTIONS]`` (the control plane)."""

    help = (
        "Relay's `relay resume JOB` on the store settings.RELAY names (its options, but --backend)."
    )
    relay_command = "resume"
