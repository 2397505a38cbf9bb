"""The queues of RabbitMQ consumer mode: each job's run queue and dead queue, and dead letters.

Every instance must declare a queue with the same arguments, or the broker refuses; a refusal is
turned into a message that names the fix.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from dataclasses import dataclass
from typing import Any

import pika
from pika.adapters.blocking_connection import BlockingChannel

from relay.jobs import DEFAULT_MAX_ATTEMPTS, Job
from relay.runs import HEADER, Run

__all__ = [
    "DELIVERY_COUNT", "MAX_ATTEMPTS", "DeadRun", "RunQueues", "dead_run", "delivered",
    "refused_queue",
]  # fmt: skip

_MAX_QUEUE_NAME = 255
_OUTCOMES = {"delivery_limit": "failed", "rejected": "failed", "expired": "skipped"}
MAX_ATTEMPTS = 1000
"""The most attempts a job may have here: a token base leaves room for this many deliveries."""
_INEQUIVALENT = re.compile(r"inequivalent arg '([^']+)' for queue '([^']+)'.*current is (.*)$")
DELIVERY_COUNT = "x-delivery-count"
"""The header a quorum queue adds to a redelivered message: how many times it came back."""


def delivered(run: Run, headers: dict[str, Any]) -> Run:
    """The run a delivery carries: its published attempt and token base, each plus the broker's
    ``x-delivery-count`` (0 on a first delivery, + 1 on each redelivery)."""
    count = int(headers.get(DELIVERY_COUNT) or 0)
    return dataclasses.replace(run, attempt=run.attempt + count, token=run.token + count)


@dataclass(frozen=True)
class RunQueues:
    """The run queue and dead queue of each job; every instance must declare them alike."""

    prefix: str = "relay"
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    consumer_timeout: float | None = None

    def run_queue(self, job: str) -> str:
        """Where the job's runs wait for the active consumer."""
        return self._name(f"{self.prefix}.run.{job}")

    def dead_queue(self, job: str) -> str:
        """Where the job's failed and stale runs are dead-lettered."""
        return self._name(f"{self.prefix}.dead.{job}")

    def arguments(self, job: str, max_attempts: int | None = None) -> dict[str, Any]:
        """The run queue's arguments; ``max_attempts`` is the job's (default: the URL's)."""
        attempts = self.max_attempts if max_attempts is None else max_attempts
        arguments: dict[str, Any] = {
            "x-queue-type": "quorum",
            "x-single-active-consumer": True,
            "x-delivery-limit": attempts - 1,
            "x-dead-letter-exchange": "",
            "x-dead-letter-routing-key": self.dead_queue(job),
            "x-dead-letter-strategy": "at-least-once",
            "x-overflow": "reject-publish",  # at-least-once dead-lettering needs it
        }
        if self.consumer_timeout is not None:
            arguments["x-consumer-timeout"] = int(self.consumer_timeout * 1000)
        return arguments

    def declare(self, channel: BlockingChannel, job: str, max_attempts: int | None = None) -> str:
        """Declare the job's dead queue, then its run queue; return the run queue's name."""
        channel.queue_declare(
            self.dead_queue(job), durable=True, arguments={"x-queue-type": "quorum"}
        )
        name = self.run_queue(job)
        channel.queue_declare(name, durable=True, arguments=self.arguments(job, max_attempts))
        return name

    @staticmethod
    def _name(name: str) -> str:
        if len(name.encode()) <= _MAX_QUEUE_NAME:
            return name
        return f"{name[:180]}.{hashlib.sha256(name.encode()).hexdigest()}"


@dataclass(frozen=True)
class DeadRun:
    """A run dead-lettered from its job's run queue: ``outcome`` is failed or skipped."""

    run_id: str
    outcome: str
    reason: str


def refused_queue(reply: str, job: Job | None) -> str:
    found = _INEQUIVALENT.search(reply)
    if job is not None and found and found.group(1) == "x-delivery-limit":
        current = re.search(r"'(-?\d+)'", found.group(3))
        wanted = f"max_attempts={int(current.group(1)) + 1}" if current else "no max_attempts"
        return (
            f"job {job.name!r} has max_attempts={job.max_attempts}, but its run queue "
            f"{found.group(2)!r} already exists with {found.group(1)} {found.group(3)}: set "
            f"{wanted} on the job, or delete the queue to change it (rabbitmqctl delete_queue "
            f"{found.group(2)}; runs waiting in it are lost)"
        )
    return (
        f"RabbitMQ refused a run queue ({reply}): every instance must use the same prefix, "
        "max_attempts and consumer_timeout; delete the old queue to change them"
    )


def dead_run(properties: pika.BasicProperties, body: bytes) -> DeadRun:
    headers = properties.headers or {}
    deaths = headers.get("x-death") or [{}]
    reason = str(deaths[0].get("reason", "unknown"))
    run = headers.get(HEADER) or {}
    return DeadRun(
        str(run.get("id", body.decode(errors="replace"))), _OUTCOMES.get(reason, reason), reason
    )
