"""The cron Relay accepts: the five fields people read, or an ``@`` nickname, and nothing random.

croniter also reads a sixth (seconds) and a seventh (year) field, ``R`` (a value drawn at random
when the expression is parsed, so each instance would fire at its own minute) and ``@`` nicknames
that, given a hash id, hash every field including seconds. Each of those would silently break
"every instance derives the same slots", so :func:`parse_cron` refuses them here, once, and hands
croniter only plain five-field expressions.

``H`` stays: it picks a value by hashing the job's name (croniter's ``hash_id``), the same in
every process, so every instance of a job agrees while different jobs spread over the hour.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from croniter import CroniterError, croniter

from relay.errors import InvalidSchedule

__all__ = ["NICKNAMES", "ParsedCron", "parse_cron"]

NICKNAMES = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
"""The ``@`` nicknames Relay accepts and the five fields each stands for (as in Vixie cron)."""

_FIELDS = (
    ("minute", "0-59"),
    ("hour", "0-23"),
    ("day-of-month", "1-31"),
    ("month", "1-12 or jan-dec"),
    ("day-of-week", "0-7 (0 and 7 are Sunday) or sun-sat"),
)
_SHAPE = "'minute hour day-of-month month day-of-week', such as '*/5 * * * *'"
# croniter splits fields on ASCII whitespace only; count them the same way.
_FIELD = re.compile(r"\S+", re.ASCII)
# croniter's hashed (H) and random (R) forms: H, H(0-29), H/15, H(0-29)/10; R likewise.
_HASHED = re.compile(r"^[hH](\(\d+-\d+\))?(/\d+)?$")
_RANDOM = re.compile(r"^[rR](\(\d+-\d+\))?(/\d+)?$")


@dataclass(frozen=True)
class ParsedCron:
    """A checked cron expression: five plain fields, and the hash id ``H`` needs (else None)."""

    fields: str
    hash_id: bytes | None


def parse_cron(expression: object, job: str | None = None) -> ParsedCron:
    """Check ``expression`` and return what croniter should be given.

    ``job`` is the name ``H`` hashes on; an expression using ``H`` without one is refused.
    Raises :class:`InvalidSchedule` naming what is wrong and what to write instead.
    """
    if not isinstance(expression, str):
        raise InvalidSchedule(
            f"cron expression {expression!r} is not valid: it must be a string of five fields "
            f"{_SHAPE}, not {type(expression).__name__}"
        )
    fields = _FIELD.findall(_expand_nickname(expression))
    _check_count(expression, fields)
    _refuse_randomness(expression, fields)
    hashed = any(_HASHED.match(part) for field in fields for part in field.split(","))
    if hashed and not job:
        raise InvalidSchedule(
            f"cron expression {expression!r} uses H, which hashes on the job's name so every "
            "instance picks the same minute; build it with the job's name (make_job, "
            "Scheduler.job) or write a fixed value"
        )
    hash_id = job.encode() if hashed and job else None
    plain = " ".join(fields)
    _check_with_croniter(expression, tuple(fields), hash_id)
    return ParsedCron(plain, hash_id)


def _expand_nickname(expression: str) -> str:
    text = expression.strip()
    if not text.startswith("@"):
        return expression
    nickname = text.lower()
    if nickname == "@reboot":
        raise InvalidSchedule(
            "cron expression '@reboot' is not valid: it fires when each instance starts, so "
            "every instance would run it and no two would agree on its slot. Run start-up work "
            "from your deployment (or before scheduler.run()), not as a periodic job"
        )
    if nickname not in NICKNAMES:
        raise InvalidSchedule(
            f"cron expression {expression!r} is not valid: unknown nickname; known: "
            f"{', '.join(NICKNAMES)}, or five fields {_SHAPE}"
        )
    return NICKNAMES[nickname]


def _check_count(expression: str, fields: list[str]) -> None:
    if len(fields) == 5:
        return
    if len(fields) == 6:
        raise InvalidSchedule(
            f"cron expression {expression!r} is not valid: it has six fields, and croniter would "
            "read the extra one as seconds (firing up to every second). Relay reads five fields "
            f"{_SHAPE}; for a schedule shorter than a minute use every= (seconds), such as every=5"
        )
    if len(fields) == 7:
        raise InvalidSchedule(
            f"cron expression {expression!r} is not valid: it has seven fields, and croniter would "
            "read seconds and a year. Relay reads five fields "
            f"{_SHAPE}: drop the seconds and year fields (every= for sub-minute schedules)"
        )
    raise InvalidSchedule(
        f"cron expression {expression!r} is not valid: expected five fields {_SHAPE}, "
        f"or a nickname such as @hourly; got {len(fields)}"
    )


def _refuse_randomness(expression: str, fields: list[str]) -> None:
    for index, field in enumerate(fields):
        if any(_RANDOM.match(part) for part in field.split(",")):
            name = _FIELDS[index][0]
            raise InvalidSchedule(
                f"cron expression {expression!r} is not valid: R in the {name} field picks a "
                "random value in each process, so each instance would fire at its own time and "
                f"the job would run once per instance. Use H (hashed on the job's name, the same "
                "in every instance) or a fixed value"
            )


@functools.lru_cache(maxsize=4096)  # many jobs share an expression: judge it once
def _check_with_croniter(expression: str, fields: tuple[str, ...], hash_id: bytes | None) -> None:
    """Let croniter judge each field alone (to name it), then the whole expression."""
    for index, field in enumerate(fields):
        probe = ["*"] * 5
        probe[index] = field
        reason = _croniter_refusal(" ".join(probe), hash_id)
        if reason is not None:
            name, allowed = _FIELDS[index]
            raise InvalidSchedule(
                f"cron expression {expression!r} is not valid: the {name} field {field!r} "
                f"{reason} ({name} takes {allowed})"
            )
    reason = _croniter_refusal(" ".join(fields), hash_id, strict=True)
    if reason is not None:
        raise InvalidSchedule(f"cron expression {expression!r} is not valid: it {reason}")


def _croniter_refusal(fields: str, hash_id: bytes | None, strict: bool = False) -> str | None:
    """croniter's reason for refusing ``fields``, without its echo of the expression.

    ``strict`` adds croniter's check of days against months (``30 2`` never occurs).
    """
    try:
        croniter.expand(fields, hash_id=hash_id, strict=strict)
    except CroniterError as exc:
        text = str(exc).strip().splitlines()[-1]  # a wrapped ValueError arrives as a traceback
        text = re.sub(r"^\[[^\]]*\]", "", text)  # croniter opens with "[expression]"
        text = re.sub(re.escape(fields), "", text, flags=re.IGNORECASE).strip(" .,")
        if "out of range" in text or "out of bands" in text:
            return "is out of range"
        detail = re.sub(r"^is not acceptable[.,]?", "", text).strip()
        return f"is refused by croniter: {detail}" if detail else "is not acceptable to croniter"
    return None
