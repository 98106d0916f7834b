"""Is Slurm's accounting answering? The watch on slurmdbd and its database.

The daemon schedules from what slurmctld answers (``squeue``, ``sinfo``, ``scontrol``);
slurmctld keeps working while slurmdbd or its MariaDB is down and queues what it owes the
database. So an accounting outage must not stop cycles, but an operator must hear of it:
``trace export`` (sacct), the start-up permission probe (``sacctmgr``), fair-share and
the site's own reports all depend on it, and a long outage fills slurmctld's queue. Every
``accounting_check_interval`` seconds ``sacctmgr show cluster`` (which goes through slurmdbd to
the database, and fails at once when either is down) says whether it answers; ``status``
names an outage and when it began.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .records import SlurmError

#: The only accounting storage that has a daemon to watch.
SLURMDBD = "accounting_storage/slurmdbd"
PROBE = ("sacctmgr", "-n", "-P", "show", "cluster", "format=Cluster")
#: Seconds the probe may take: a down slurmdbd or database fails it at once, and a hung one
#: must not hold up a cycle for the full command timeout.
PROBE_TIMEOUT = 5.0


@dataclass
class AccountingHealth:
    """What the last probe said. ``down_since``: when the current outage was first seen."""

    storage: str
    reachable: bool = True
    error: str = ""
    checked: float = 0.0
    down_since: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"storage": self.storage, "reachable": self.reachable, "error": self.error or None,
                "checked": self.checked or None, "down_since": self.down_since}


class AccountingWatch:
    """Probes accounting at most every ``interval`` seconds; ``health`` is None when Slurm
    keeps no accounting database (nothing to watch) or the check is off (``interval`` 0)."""

    def __init__(self, interval: float, log: Any, clock: Callable[[], float] = time.time,
                 timer: Callable[[], float] = time.monotonic) -> None:
        self.interval = interval
        self.log = log
        self.clock = clock  # what status shows (wall time)
        self.timer = timer  # when the next probe is due: a clock step must not stop them
        self._due = -float("inf")
        self.health: AccountingHealth | None = None

    def configure(self, storage: str, interval: float) -> None:
        """From the Slurm config read at (re)start: which storage, how often."""
        self.interval = interval
        if storage != SLURMDBD or interval <= 0:
            self.health = None
        elif self.health is None or self.health.storage != storage:
            self.health = AccountingHealth(storage)

    def check(self, run: Callable[..., Any] | None) -> None:
        """Probe when due. ``run``: the backend's command runner (None: no commands to ask)."""
        h = self.health
        if h is None or run is None or self.timer() < self._due:
            return
        self._due = self.timer() + self.interval
        now = self.clock()
        try:
            proc = run(list(PROBE), check=False, timeout=PROBE_TIMEOUT)
            if proc.returncode != 0:
                error = _last_line(proc.stderr) or f"sacctmgr exit {proc.returncode}"
            else:  # slurmdbd answered; no cluster at all means it could not ask its database
                error = "" if proc.stdout.strip() else _last_line(proc.stderr) or "sacctmgr listed no cluster"
        except SlurmError as e:
            error = str(e)
        h.checked = now
        if error and h.reachable:
            h.down_since = now
            self.log.warning("accounting.unreachable", storage=h.storage, error=error)
        elif not error and not h.reachable:
            self.log.info("accounting.restored", storage=h.storage, down_seconds=round(now - (h.down_since or now), 1))
            h.down_since = None
        h.reachable, h.error = not error, error

    def warning(self) -> str:
        """The line ``status`` shows during an outage ("" otherwise)."""
        h = self.health
        if h is None or h.reachable:
            return ""
        since = time.strftime("%H:%M:%S", time.localtime(h.down_since or h.checked))
        return (f"Slurm accounting (slurmdbd or its database) has not answered since {since}: {h.error}. "
                "Scheduling goes on with what slurmctld answers, which keeps the records until it is back; "
                "`trace export`, fair-share and the permission probe need it")


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in (text or "").splitlines() if ln.strip()]
    return lines[-1] if lines else ""
