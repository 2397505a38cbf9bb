"""Relay: periodic tasks that any number of instances can run, each run happening once, on purpose.

The public surface: :class:`Scheduler` and its ``job`` decorator, the :class:`Run` a handler
receives, the errors, the backend contract, the fencing helpers, and :class:`Control` (pause,
resume, trigger, backfill and prune jobs from anywhere; add, change and remove stored
schedules, :class:`Schedule` and :class:`ScheduleChange`).
"""

from relay.backends import open_backend
from relay.contract import (
    AcquireRequest,
    AcquireResult,
    ClaimBackend,
    JobInfo,
    LeaseBackend,
    Outcome,
)
from relay.control import Control, JobStatus
from relay.engine import current_run
from relay.errors import (
    BackendError,
    BackendUnavailable,
    ConfigurationError,
    Conflict,
    InvalidArgument,
    InvalidSchedule,
    LeaseLost,
    MissingDependency,
    RelayError,
    UnknownBackend,
    UnknownSchedule,
    UnsupportedOption,
)
from relay.jobs import Job
from relay.runs import Run, RunRecord, RunState, run_id
from relay.scheduler import Scheduler
from relay.stored import Schedule, ScheduleChange

__all__ = [
    "AcquireRequest",
    "AcquireResult",
    "BackendError",
    "BackendUnavailable",
    "ClaimBackend",
    "ConfigurationError",
    "Conflict",
    "Control",
    "InvalidArgument",
    "InvalidSchedule",
    "Job",
    "JobInfo",
    "JobStatus",
    "LeaseBackend",
    "LeaseLost",
    "MissingDependency",
    "Outcome",
    "RelayError",
    "Run",
    "RunRecord",
    "RunState",
    "Schedule",
    "ScheduleChange",
    "Scheduler",
    "UnknownBackend",
    "UnknownSchedule",
    "UnsupportedOption",
    "__version__",
    "current_run",
    "open_backend",
    "run_id",
]

__version__ = "0.2.0"
"""This Relay's version: the package's one source of it (``pyproject.toml`` reads it here)."""
