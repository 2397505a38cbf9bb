"""``manage.py relay_migrate``: ``relay migrate`` on the store ``settings.RELAY`` names."""

from relay.contrib.django.management.commands._relay_cli import RelayCLICommand


class Command(RelayCLICommand):
    """``relay migrate --backend <settings.RELAY's backend>``: create or upgrade Relay's schema.

    Run it as the database role that owns Relay's schema (a deploy step beside Django's own
    ``migrate``); instances running as a role with only the documented grants never change it.
    """

    help = "`relay migrate` on the store settings.RELAY names: create or upgrade Relay's schema."
    relay_command = "migrate"
