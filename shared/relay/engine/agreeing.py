"""One definition per job across a fleet: declare ours with the heartbeat, defer to a peer's.

A rolling deploy runs instances with the old code beside instances with the new: a job whose
schedule changed in it would fire on both definitions. An :class:`Agreement` puts this instance's
job definitions (:func:`relay.definitions.definition_of`) into its heartbeat's record, and after
each beat the store recorded, reads every instance's record once (no read per job, no read
between beats), picks the definition deciding each job (:func:`relay.definitions.deciding`: the
newest Relay release, then the latest started instance) and has the decider defer the jobs it
holds another definition of (:meth:`Decider.defer`), reporting
:class:`~relay.events.DefinitionDeferred`, and fire them again (reporting
:class:`~relay.events.DefinitionResumed`) once its own definition decides.

A peer's declaration is heeded within one heartbeat interval of its first beat: until then, an
instance fires its own definition's slots.
"""

from __future__ import annotations

import logging
from dataclasses import replace

from relay.contract import is_lease
from relay.definitions import Choice, Definition, deciding, definition_of
from relay.engine.deciding import Decider
from relay.errors import BackendUnavailable
from relay.events import DefinitionDeferred, DefinitionResumed
from relay.health import InstanceHeartbeat
from relay.instances import is_healthy
from relay.jobs import Job

__all__ = ["Agreement"]

log = logging.getLogger("relay.engine")


class Agreement:
    """Declares ``decider``'s job definitions in ``heartbeat``'s record, and defers to peers."""

    def __init__(self, decider: Decider, heartbeat: InstanceHeartbeat) -> None:
        self.decider = decider
        self.heartbeat = heartbeat
        self._declared: dict[str, tuple[Job, Definition]] = {}
        self._revision = -1
        self._deferred: dict[str, str] = {}
        """Each deferred job, with the hash of the definition deciding it."""
        self.checked = False
        """Whether the fleet's definitions were read at least once."""
        self.watching = False
        """Whether the last read found another live instance declaring one of our jobs: only
        then does the host need to beat on time (a fake clock wakes it for that)."""

    def unchecked(self) -> bool:
        """Whether this instance declares jobs (:meth:`declare` first) and has not read the
        fleet's definitions yet."""
        self.declare()
        return not self.checked and bool(self._declared)

    def declare(self) -> None:
        """Put the decider's job definitions into the heartbeat's record (recomputed only after
        jobs were added, replaced or removed)."""
        jobs = self.decider.jobs
        if self.decider.revision == self._revision:
            return
        self._revision = self.decider.revision
        declared = {}
        for name, job in jobs.items():
            known = self._declared.get(name)
            if known is not None and known[0] is job:
                declared[name] = known
                continue
            definition = definition_of(job)
            if definition is not None:
                declared[name] = (job, definition)
        self._declared = declared
        for name in [n for n in self._deferred if n not in declared]:
            del self._deferred[name]  # removed, or now a stored schedule's job
        self.heartbeat.info = replace(
            self.heartbeat.info,
            definitions={name: d.hash for name, (_, d) in declared.items()},
            definition_texts={d.hash: d.text for _, d in declared.values()},
        )

    def check(self) -> bool:
        """Read every instance's declarations and defer or fire again each job of ours;
        ``True`` if a job is fired again (the decider then has it to plan at once).

        Called right after this instance's beat was recorded: its own record's beat is the
        store's clock, so no other read is needed. A store that does not answer is logged; the
        jobs stay as they were until the next beat.
        """
        if not self._declared:
            return False
        backend = self.heartbeat.backend
        if not is_lease(backend):
            return False
        try:
            instances = backend.instances()
        except BackendUnavailable as exc:
            log.warning("could not read the instances' job definitions: %s", exc)
            return False
        self.checked = True
        owner = self.heartbeat.info.owner
        ours = next((i for i in instances if i.owner == owner), None)
        if ours is None or ours.beat_at is None:
            return False  # expired between the beat and the read: judged at the next beat
        self.watching = any(
            i.owner != owner and not self._declared.keys().isdisjoint(i.definitions)
            for i in instances
        )  # alive or not: an idle peer in fake time beats late, and is alive again when stepped
        live = [i for i in instances if i.definitions and is_healthy(i, ours.beat_at)]
        if all(i.definitions == ours.definitions for i in live):
            # The usual case, outside a rollout that changed a job: every live instance declares
            # what we do (one comparison of maps each), so nothing is deferred.
            if not self._deferred:
                return False
            choices = {}
        else:
            choices = deciding(live, ours.beat_at, self._declared)
        changed = False
        for name, (_, definition) in self._declared.items():
            choice = choices.get(name)
            if choice is None or choice.definition.hash == definition.hash:
                changed |= self._fire(name, definition)
            else:
                self._defer(name, definition, choice)
        return changed

    def _defer(self, name: str, ours: Definition, choice: Choice) -> None:
        if self._deferred.get(name) == choice.definition.hash and name in self.decider.deferred:
            return  # reported already (a job replaced since is deferred and reported again)
        self._deferred[name] = choice.definition.hash
        self.decider.defer(name)
        self.decider.events.emit(
            DefinitionDeferred(
                job=name, owner=self.heartbeat.info.owner, ours=ours.text, ours_hash=ours.hash,
                deciding=choice.definition.text, deciding_hash=choice.definition.hash,
                deciding_owner=choice.owner, deciding_version=choice.version,
            )
        )  # fmt: skip

    def _fire(self, name: str, ours: Definition) -> bool:
        if self._deferred.pop(name, None) is None:
            return False
        self.decider.undefer(name)
        self.decider.events.emit(
            DefinitionResumed(
                job=name, owner=self.heartbeat.info.owner, ours=ours.text, ours_hash=ours.hash
            )
        )
        return True
