"""Shadow mode's record of what Slurm did: one row per GPU job in
``<state_dir>/shadow.sqlite``, written by the daemon's cycle (``attentived start --shadow``)
only when something about the job changed, and read back by the shadow report and the
trace export (``attentived.ops``)."""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

from .records import Snapshot
from .snapshot import Built, in_partitions, job_model

SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    job_id TEXT PRIMARY KEY,
    user TEXT NOT NULL,
    partition TEXT,
    managed INTEGER NOT NULL,
    gpus INTEGER NOT NULL,
    num_nodes INTEGER,
    time_limit REAL,
    model TEXT,
    submit REAL,
    first_seen REAL NOT NULL,
    first_cycle TEXT,
    start REAL,
    end REAL,
    state TEXT NOT NULL,
    nodes TEXT,
    gpu_names TEXT,
    last_seen REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS jobs_submit ON jobs(submit);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT);
"""

_COLUMNS = ("job_id", "user", "partition", "managed", "gpus", "num_nodes", "time_limit", "model", "submit",
            "first_seen", "first_cycle", "start", "end", "state", "nodes", "gpu_names", "last_seen")
_TRACKED = ("state", "start", "end", "nodes", "gpu_names", "gpus", "time_limit", "submit", "managed", "partition")


def store_path(state_dir: str | os.PathLike[str]) -> Path:
    return Path(state_dir) / "shadow.sqlite"


class ShadowError(RuntimeError):
    """No observations to report on (or they cannot be read)."""


# ---- recording ------------------------------------------------------------------------------


class Observer:
    """Records what Slurm does with GPU jobs, one row per job, written on change only."""

    def __init__(self, path: str | Path, *, max_rows: int = 200_000) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.max_rows = int(max_rows)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(str(self.path), check_same_thread=False, timeout=10, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(SCHEMA)
        self._db.execute("INSERT OR IGNORE INTO meta(key, value) VALUES ('first_observation', ?)", (str(time.time()),))
        self._known: dict[str, dict[str, Any]] = {}
        cur = self._db.execute(f"SELECT {', '.join(_COLUMNS)} FROM jobs")
        for row in cur.fetchall():
            rec = dict(zip(_COLUMNS, row))
            self._known[rec["job_id"]] = rec
        self._writes = 0

    @classmethod
    def in_state_dir(cls, state_dir: str | os.PathLike[str], **kw: Any) -> Observer:
        return cls(store_path(state_dir), **kw)

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def observe(self, snap: Snapshot, built: Built, cycle_id: str = "") -> int:
        """Record this snapshot's GPU jobs; returns how many rows changed."""
        now = snap.taken_at
        topo = built.topology
        rows: list[dict[str, Any]] = []
        for job in snap.jobs:
            if job.gpus <= 0 or job.array:
                continue
            old = self._known.get(job.job_id)
            started = job.active or (job.finished and job.start_time is not None and bool(job.nodes))
            names: list[str] = []
            if job.job_id in built.running_gpus:
                names = [topo.gpu_name(g) for g in built.running_gpus[job.job_id]]
            elif old and old.get("gpu_names"):
                names = json.loads(old["gpu_names"])
            rec = {
                "job_id": job.job_id,
                "user": job.user,
                "partition": job.partition,
                "managed": 1 if in_partitions(job, built.partitions) else 0,
                "gpus": int(job.gpus),
                "num_nodes": job.num_nodes if job.per_node_fixed else None,
                "time_limit": job.time_limit,
                "model": job_model(job),
                "submit": job.submit_time,
                "first_seen": old["first_seen"] if old else now,
                "first_cycle": old["first_cycle"] if old else cycle_id,
                "start": job.start_time if started else None,
                "end": job.end_time if job.finished else None,
                "state": job.state,
                "nodes": json.dumps(list(job.nodes)) if started and job.nodes else (old or {}).get("nodes"),
                "gpu_names": json.dumps(names) if names else None,
                "last_seen": now,
            }
            if old is not None and all(old.get(k) == rec[k] for k in _TRACKED):
                old["last_seen"] = now
                continue
            rows.append(rec)
            self._known[job.job_id] = rec
        if rows:
            sql = (f"INSERT OR REPLACE INTO jobs({', '.join(_COLUMNS)}) VALUES ({', '.join('?' * len(_COLUMNS))})")
            with self._lock:
                self._db.execute("BEGIN")
                try:
                    self._db.executemany(sql, [tuple(r[c] for c in _COLUMNS) for r in rows])
                    self._db.execute("COMMIT")
                except BaseException:
                    self._db.execute("ROLLBACK")
                    raise
            self._writes += 1
            if self._writes % 50 == 0:
                self.rotate()
        return len(rows)

    def rotate(self) -> int:
        with self._lock:
            cur = self._db.execute(
                "DELETE FROM jobs WHERE job_id IN (SELECT job_id FROM jobs ORDER BY first_seen DESC LIMIT -1 OFFSET ?)",
                (self.max_rows,))
            removed = cur.rowcount or 0
        if removed:
            keep = {r[0] for r in self._db.execute("SELECT job_id FROM jobs").fetchall()}
            self._known = {k: v for k, v in self._known.items() if k in keep}
        return removed


def read_observations(state_dir: str | os.PathLike[str]) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """All observed jobs (read-only) and the store's meta values; ``ShadowError`` when the
    daemon never ran in shadow mode with this state directory."""
    path = store_path(state_dir)
    if not path.is_file():
        raise ShadowError(f"{path}: no shadow observations; run `attentived start --shadow` for a while first")
    uri = path.resolve().as_uri()
    try:
        db = sqlite3.connect(f"{uri}?mode=ro", uri=True, timeout=10)
        rows = db.execute(f"SELECT {', '.join(_COLUMNS)} FROM jobs").fetchall()
    except sqlite3.OperationalError:
        db = sqlite3.connect(f"{uri}?immutable=1", uri=True)
        rows = db.execute(f"SELECT {', '.join(_COLUMNS)} FROM jobs").fetchall()
    try:
        meta = dict(db.execute("SELECT key, value FROM meta").fetchall())
    finally:
        db.close()
    return [dict(zip(_COLUMNS, r)) for r in rows], meta
