"""Relay owns the retries of a scheduled run; a task framework must not retry it as well.

Each Relay attempt is a new message with a new fencing token, counted against ``max_attempts``. A
framework's own retry re-sends the old message, whose token the worker then refuses: the retry is
lost, or (with a claim backend) the run runs twice. Every integration refuses such settings with
the one message below, so a user reads the same fix whichever framework they use.
"""

from __future__ import annotations

from relay.errors import ConfigurationError

__all__ = ["foreign_retries"]


def foreign_retries(subject: str, setting: str, where: str) -> ConfigurationError:
    """The refusal of a task framework's own retries on a scheduled job, for every integration.

    ``subject`` names the job (``"periodic actor 'sync'"``), ``setting`` the framework's retry
    setting, ``where`` how to set ``max_attempts`` in that integration.
    """
    return ConfigurationError(
        f"{subject} sets {setting}, but Relay retries its runs itself: drop {setting} and set "
        f"max_attempts {where} instead. Each Relay attempt is a new message with a new fencing "
        "token; a framework retry would re-send the old token, which the worker drops"
    )
