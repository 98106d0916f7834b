"""Hand-back: give Slurm its scheduling back when the daemon stops (``hand_back_on_exit``).

Whatever the daemon leaves behind keeps steering Slurm after it is gone: pins keep jobs off
other nodes, hold reservations keep GPUs idle, plan-order priorities outrank users' own.
``daemon/apply.py`` says what undoes them (``hand_back_actions``); this module carries that
out on one snapshot, resets priorities by hold + release (Slurm recomputes them), forgets
the pins it removed and journals the lot as a ``hand-back`` row, so an exit is auditable
like a cycle.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Collection, Sequence
from typing import Any

from .apply import Action, Outcome, Settings, execute, hand_back_actions
from .backend import Backend
from .journal import Journal
from .ownership import ReservationBook
from .records import Snapshot, job_number
from .snapshot import own_reservations

#: Jobs per ``scontrol hold`` / ``release`` when priorities are reset.
CHUNK = 200


def hand_back(snap: Snapshot, *, backend: Backend, journal: Journal, settings: Settings,
              partitions: Sequence[str], policy_name: str, seq: int, log: Any, pins_only: bool = False,
              left_to_slurm: Collection[str] = ()) -> list[Outcome]:
    """Undo the daemon's pins, reservations and priorities seen in ``snap``; every outcome.
    ``pins_only``: only the pins (``clear_pins_on_exit``: reservations expire by themselves,
    priorities stay for the next start). ``left_to_slurm``: the jobs Slurm refuses updates
    of now (daemon/unregistered.py), named in no job action: a pin or exclusion of the
    daemon's on one stays (a reservation one waits in is ended), and the log names them."""
    owned = journal.pins()
    own = own_reservations(snap, ReservationBook(journal).owned(snap))
    actions, reset = hand_back_actions(snap, settings, partitions, owned, own, priorities=not pins_only,
                                       owned_exclusions=journal.exclusions(), left_to_slurm=left_to_slurm)
    left = sorted((j for j in left_to_slurm if j in snap.jobs_by_id), key=job_number)  # not those gone since
    if left:
        log.warning("handback.left_to_slurm", jobs=left)
    if pins_only:
        actions = [a for a in actions if a.kind in ("unpin", "unexclude")]
    outcomes = execute(actions, backend)
    if reset:
        for chunk in range(0, len(reset), CHUNK):
            ids = reset[chunk : chunk + CHUNK]
            for kind, fn in (("hold", backend.hold), ("release", backend.release)):
                r = fn(ids)
                outcomes.append(Outcome(Action(kind, ",".join(ids), reason="hand back priorities"), r.ok, r.error, r.argv))
    journal.drop_pins([o.action.job_id for o in outcomes if o.action.kind == "unpin" and o.ok])
    journal.drop_exclusions([o.action.job_id for o in outcomes if o.action.kind == "unexclude" and o.ok])
    journal.drop_reservations([o.action.reservation for o in outcomes if o.action.kind == "reservation_delete" and o.ok])
    for o in outcomes:
        log.info("handback.action", kind=o.action.kind, job=o.action.job_id or None,
                 reservation=o.action.reservation or None, ok=o.ok, error=o.error or None)
    try:
        journal.record_cycle(
            f"handback-{seq}-{secrets.token_hex(2)}", started=time.time(), duration=0.0,
            policy=policy_name, mode="unpin" if pins_only else "hand-back", status="ok" if all(o.ok for o in outcomes) else "apply",
            actions=len(outcomes), failed=sum(1 for o in outcomes if not o.ok),
            outcomes=[{**o.action.as_dict(), "argv": o.argv, "ok": o.ok, "error": o.error} for o in outcomes])
    except Exception:  # the hand-back happened; a journal that cannot say so must not hide it
        pass
    return outcomes
