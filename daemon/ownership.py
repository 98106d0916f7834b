"""Which reservations are the daemon's: by the journal's record, never by name alone.

A name prefix proves nothing: an operator may create ``attentived-maint`` for maintenance, a
user ``attentived-team``, and a reservation the daemon once made may have been deleted and
re-created by someone else under the same name. Deleting any of those would be a production
incident. So the daemon journals each reservation *before* creating it (an intent, as it does
for pins: a crash between the command and the journal cannot orphan one), confirms it with
Slurm's own start time the first time a snapshot shows it, and treats as its own only a
reservation whose name is journalled, whose start time matches (or, before confirmation, is
not older than the intent) and that is not a maintenance reservation
(``snapshot.owns``). Records of reservations Slurm no longer shows are forgotten.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from .apply import Action, Outcome
from .journal import Journal
from .records import Snapshot
from .snapshot import CLOCK_SLACK, owns


class ReservationBook:
    """The daemon's reservations as the journal records them."""

    def __init__(self, journal: Journal) -> None:
        self.journal = journal

    def owned(self, snap: Snapshot) -> dict[str, Mapping[str, Any]]:
        """The journal's records, reconciled with ``snap``: first sightings are confirmed
        with Slurm's start time; records of reservations that are gone are dropped."""
        records = self.journal.reservations()
        shown = {r.name: r for r in snap.reservations}
        gone: list[str] = []
        for name, rec in records.items():
            r = shown.get(name)
            if r is None:
                if rec["created"] < snap.taken_at - CLOCK_SLACK:
                    gone.append(name)
                continue
            if rec["start_time"] is None and r.start_time is not None:
                if not owns(r, rec):
                    gone.append(name)  # older than our request, or MAINT: someone else's under this name
                    continue
                self.journal.confirm_reservation(name, r.start_time)
                rec = {**rec, "start_time": r.start_time}
                records[name] = rec
        if gone:
            self.journal.drop_reservations(gone)
        return {n: rec for n, rec in records.items() if n not in gone}

    def record_intents(self, actions: Iterable[Action], now: float) -> None:
        """Before applying: the reservations about to be created are the daemon's (``now``:
        the cycle's snapshot time; Slurm's start time for them cannot be earlier)."""
        for a in actions:
            if a.kind == "reservation_create":
                self.journal.add_reservation(a.reservation, a.job_id, now)

    def settle(self, outcomes: Iterable[Outcome]) -> None:
        """After applying: forget creations Slurm refused (the name may be someone else's)
        and reservations deleted."""
        drop = [o.action.reservation for o in outcomes
                if (o.action.kind == "reservation_create" and not o.ok and "no answer" not in o.error
                    and "timed out" not in o.error)
                or (o.action.kind == "reservation_delete" and o.ok)]
        if drop:
            self.journal.drop_reservations(drop)
