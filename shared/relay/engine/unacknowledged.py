"""What a step the store's replicas did not confirm means, decided once for every host.

A store that replicates raises :class:`~relay.errors.NotAcknowledged` for a step its primary did
but too few replicas confirmed in time. A failover could lose such a step, so it counts as not
done, and nothing may be lost or done twice because of it:

* A run won (``acquire``) or started (``start``) without confirmation is not run. It is handed
  back (``release``): a run not started spends no attempt, and any instance, this one included,
  leases it again at its next sweep. If the hand-back is not confirmed either and the store fails
  over, the new primary has neither write, or the lease alone (which then expires and is taken
  over): the run is decided again either way.
* A finish without confirmation is sent again by the runner's finish loop, which retries every
  ``BackendUnavailable``: the same finish by the same token is harmless on every lease backend,
  and the new primary after a failover records it if it lacked it.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from relay.contract import LeaseBackend
from relay.errors import LeasedRun, RelayError

__all__ = ["hand_back"]

log = logging.getLogger("relay.engine")


def hand_back(backend: LeaseBackend, runs: Sequence[LeasedRun], step: str, why: str) -> None:
    """Release ``runs``, whose ``step`` counts as not done (``why``): they are not run here."""
    for run in runs:
        try:
            backend.release(run.id, run.token)
        except RelayError as exc:
            log.warning(
                "%s of %s counts as not done (%s) and it could not be handed back (%s): it is "
                "not run here; its lease expires and another instance takes it",
                step, run.id, why, exc,
            )  # fmt: skip
        else:
            log.warning(
                "%s of %s counts as not done (%s): not run here, handed back", step, run.id, why
            )
