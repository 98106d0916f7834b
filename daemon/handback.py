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
from .records import Snapshot, in_partitions, job_number
from .snapshot import own_reservations

#: Jobs per ``scontrol hold`` / ``release`` when priorities are reset.
CHUNK = 200
#: Releases tried after a hold before the jobs are reported as left held.
RELEASE_TRIES = 3


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
    reset_outcomes, held = reset_priorities(backend, reset, reason="hand back priorities")
    outcomes = execute(actions, backend) + reset_outcomes
    if held:
        log.error("handback.left_held", jobs=held, message="Slurm took the hold but refused every release: "
                  "these jobs stay held until someone runs `scontrol release`")
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


def reset_priorities(backend: Backend, job_ids: Sequence[str], *, reason: str) -> tuple[list[Outcome], list[str]]:
    """Give priority/multifactor back the priorities of ``job_ids``: ``scontrol hold`` then
    ``release`` (Slurm's documented way to drop an admin-set priority), in chunks. A failed
    release is tried again (`RELEASE_TRIES` in all): a job left held would never start.
    Returns every outcome and the jobs still held by the daemon's hold (to release later)."""
    outcomes: list[Outcome] = []
    held: list[str] = []
    for chunk in range(0, len(job_ids), CHUNK):
        ids = list(job_ids[chunk : chunk + CHUNK])
        r = backend.hold(ids)
        outcomes.append(Outcome(Action("hold", ",".join(ids), reason=reason), r.ok, r.error, r.argv))
        for _ in range(RELEASE_TRIES):
            r = backend.release(ids)
            outcomes.append(Outcome(Action("release", ",".join(ids), reason=reason), r.ok, r.error, r.argv))
            if r.ok:
                break
        else:
            held += ids
    return outcomes, held


def release_partitions(snap: Snapshot, before: Sequence[str], now: Sequence[str], *, backend: Backend,
                       settings: Settings, own: Collection[str],
                       left_to_slurm: Collection[str] = ()) -> tuple[list[Outcome], list[str]]:
    """Give Slurm back the pending jobs that ``before``'s partitions made the daemon's and
    ``now``'s do not (a reload dropped their partition): out of the daemon's reservations
    (``own``) and back to Slurm's priorities. Left alone, they would keep priorities above
    every user's with nobody ordering them. Their pins and exclusions need nothing here:
    a cycle removes every one of the daemon's that its plan does not want. Returns the
    outcomes and the jobs left held (`reset_priorities`)."""
    left = frozenset(left_to_slurm)
    jobs = [j for j in snap.jobs if j.pending and j.job_id not in left
            and in_partitions(j, before) and not in_partitions(j, now)]
    detach = [Action("detach", j.job_id, reservation=j.reservation, reason="partition no longer managed")
              for j in jobs if j.reservation in own]
    reset = [j.job_id for j in jobs if not j.held and settings.in_band(j.priority)]
    outcomes, held = reset_priorities(backend, reset, reason="partition no longer managed")
    return execute(detach, backend) + outcomes, held
