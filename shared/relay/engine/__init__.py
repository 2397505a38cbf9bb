"""The engine: the deciding and running halves of a run, written once against the contract."""

from relay.engine.deciding import Decider, Won
from relay.engine.running import ActiveRun, Runner, current_run, enter_run, leave_run

__all__ = ["ActiveRun", "Decider", "Runner", "Won", "current_run", "enter_run", "leave_run"]
