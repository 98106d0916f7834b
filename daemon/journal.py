"""The decision journal: every cycle, every plan and every Slurm action with its result, in
SQLite (``<state_dir>/journal.sqlite``, WAL mode so readers never block the daemon).

Tables (``attentived decisions`` and ``explain`` read them):

- ``cycles``: one row per cycle (id, start, duration, policy, mode, status, error, counts).
- ``plans``: the plan of a cycle as JSON (order, starts with GPUs and nodes, holds, waits).
- ``actions``: each Slurm action (kind, job, reservation, value, argv, ok, error, dry run).
- ``placements``: each planned start, and once the job runs, the nodes and GPU indices
  Slurm gave it (``match``: exact / same_nodes / other_nodes / unplanned).
- ``pins``: which ``ReqNodeList`` values the daemon set (so that user pins are never taken
  for its own, across restarts). Written before the action (intent), removed when done.
- ``exclusions``: which ``ExcNodeList`` values the daemon set to keep a held job on its
  held nodes (every other node excluded), kept like pins.
- ``reservations``: the reservations the daemon created, with Slurm's start time once
  seen. Ownership is by this record, not by name: a reservation that merely carries the
  prefix (an operator's, or one re-created by someone else) is never changed or deleted.

The database and the state dir are private to the daemon's user (0600 / 0700): plans name
users and jobs.

Size is bounded: each table keeps its newest ``max_rows`` rows (plans: ``max_plans``);
rotation runs after every cycle and costs one indexed DELETE per table.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

SCHEMA = """
CREATE TABLE IF NOT EXISTS cycles (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    cycle_id TEXT UNIQUE NOT NULL,
    started REAL NOT NULL,
    duration REAL,
    policy TEXT,
    mode TEXT,
    status TEXT,
    error TEXT,
    pending INTEGER,
    running INTEGER,
    actions INTEGER,
    failed INTEGER,
    timings TEXT
);
CREATE TABLE IF NOT EXISTS plans (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    cycle_id TEXT NOT NULL,
    created REAL NOT NULL,
    plan TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS plans_cycle ON plans(cycle_id);
CREATE TABLE IF NOT EXISTS actions (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    cycle_id TEXT NOT NULL,
    ts REAL NOT NULL,
    kind TEXT NOT NULL,
    job_id TEXT,
    reservation TEXT,
    value TEXT,
    reason TEXT,
    argv TEXT,
    ok INTEGER NOT NULL,
    error TEXT,
    dry_run INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS actions_job ON actions(job_id);
CREATE INDEX IF NOT EXISTS actions_cycle ON actions(cycle_id);
CREATE TABLE IF NOT EXISTS placements (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id TEXT UNIQUE NOT NULL,
    cycle_id TEXT,
    planned_at REAL,
    planned_gpus TEXT,
    planned_nodes TEXT,
    started_at REAL,
    actual_nodes TEXT,
    actual_gpus TEXT,
    match TEXT
);
CREATE TABLE IF NOT EXISTS pins (
    job_id TEXT PRIMARY KEY,
    nodes TEXT NOT NULL,
    cycle_id TEXT,
    ts REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS exclusions (
    job_id TEXT PRIMARY KEY,
    nodes TEXT NOT NULL,
    ts REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS reservations (
    name TEXT PRIMARY KEY,
    job_id TEXT,
    created REAL NOT NULL,
    start_time REAL
);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT);
"""


def private_dir(path: Path) -> None:
    """Create ``path`` (0700) if needed; tighten it when this process created it or owns it."""
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    if path.stat().st_uid == os.geteuid() and path.stat().st_mode & 0o077:
        os.chmod(path, 0o700)


class Journal:
    """A thread-safe handle on the journal database (one connection, one lock)."""

    def __init__(self, path: str | Path, *, max_rows: int = 200_000, max_plans: int = 2000) -> None:
        self.path = Path(path)
        private_dir(self.path.parent)
        self.max_rows = int(max_rows)
        self.max_plans = int(max_plans)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(str(self.path), check_same_thread=False, timeout=10, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(SCHEMA)
        os.chmod(self.path, 0o600)

    @classmethod
    def in_state_dir(cls, state_dir: str | Path, **kw: Any) -> Journal:
        return cls(Path(state_dir) / "journal.sqlite", **kw)

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def _tx(self, statements: Iterable[tuple[str, tuple[Any, ...]]]) -> None:
        statements = list(statements)
        if not statements:
            return
        with self._lock:
            self._db.execute("BEGIN")
            try:
                for sql, args in statements:
                    self._db.execute(sql, args)
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise

    def _query(self, sql: str, args: tuple[Any, ...] = ()) -> list[dict[str, Any]]:
        with self._lock:
            cur = self._db.execute(sql, args)
            cols = [c[0] for c in cur.description or ()]
            return [dict(zip(cols, row)) for row in cur.fetchall()]

    # ---- writing --------------------------------------------------------------------------
    def record_cycle(self, cycle_id: str, *, started: float, duration: float, policy: str, mode: str,
                     status: str, error: str = "", pending: int = 0, running: int = 0, actions: int = 0,
                     failed: int = 0, timings: Mapping[str, float] | None = None,
                     plan: Mapping[str, Any] | None = None,
                     outcomes: Iterable[Mapping[str, Any]] = ()) -> None:
        stmts: list[tuple[str, tuple[Any, ...]]] = [(
            "INSERT OR REPLACE INTO cycles(cycle_id, started, duration, policy, mode, status, error, pending, running, actions, failed, timings)"
            " VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
            (cycle_id, started, duration, policy, mode, status, error, pending, running, actions, failed,
             json.dumps(dict(timings or {}))),
        )]
        if plan is not None:
            stmts.append(("INSERT INTO plans(cycle_id, created, plan) VALUES (?,?,?)",
                          (cycle_id, started, json.dumps(plan, separators=(",", ":")))))
        now = time.time()
        for o in outcomes:
            stmts.append((
                "INSERT INTO actions(cycle_id, ts, kind, job_id, reservation, value, reason, argv, ok, error, dry_run)"
                " VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                (cycle_id, o.get("ts", now), o["kind"], o.get("job") or None, o.get("reservation") or None,
                 o.get("value") or None, o.get("reason") or None, json.dumps(list(o.get("argv") or ())),
                 1 if o.get("ok") else 0, o.get("error") or None, 1 if o.get("dry_run") else 0),
            ))
        self._tx(stmts)

    def record_planned(self, cycle_id: str, job_id: str, gpus: Iterable[str], nodes: Iterable[str]) -> None:
        self.record_planned_many(cycle_id, [(job_id, gpus, nodes)])

    def record_planned_many(self, cycle_id: str, rows: Iterable[tuple[str, Iterable[str], Iterable[str]]]) -> None:
        """A cycle's planned starts and holds, (job, GPU names, nodes) each, in one
        transaction (a large cluster plans hundreds per cycle)."""
        now = time.time()
        self._tx([(
            "INSERT INTO placements(job_id, cycle_id, planned_at, planned_gpus, planned_nodes) VALUES (?,?,?,?,?)"
            " ON CONFLICT(job_id) DO UPDATE SET cycle_id=excluded.cycle_id, planned_at=excluded.planned_at,"
            " planned_gpus=excluded.planned_gpus, planned_nodes=excluded.planned_nodes"
            " WHERE placements.started_at IS NULL",
            (job_id, cycle_id, now, json.dumps(list(gpus)), json.dumps(list(nodes))),
        ) for job_id, gpus, nodes in rows])

    def record_started(self, job_id: str, nodes: Iterable[str], gpus: Iterable[str], match: str,
                       started_at: float | None = None) -> None:
        self.record_started_many([(job_id, nodes, gpus, match, started_at)])

    def record_started_many(self, rows: Iterable[tuple[str, Iterable[str], Iterable[str], str, float | None]]) -> None:
        """Jobs seen running for the first time, (job, nodes, GPU names, match, start) each,
        in one transaction."""
        now = time.time()
        self._tx([(
            "INSERT INTO placements(job_id, started_at, actual_nodes, actual_gpus, match) VALUES (?,?,?,?,?)"
            " ON CONFLICT(job_id) DO UPDATE SET started_at=excluded.started_at, actual_nodes=excluded.actual_nodes,"
            " actual_gpus=excluded.actual_gpus, match=excluded.match",
            (job_id, started_at or now, json.dumps(list(nodes)), json.dumps(list(gpus)), match),
        ) for job_id, nodes, gpus, match, started_at in rows])

    def planned(self, job_ids: Iterable[str]) -> dict[str, dict[str, Any]]:
        ids = list(job_ids)
        out: dict[str, dict[str, Any]] = {}
        for start in range(0, len(ids), 500):
            chunk = ids[start : start + 500]
            rows = self._query(
                f"SELECT * FROM placements WHERE job_id IN ({','.join('?' * len(chunk))})", tuple(chunk))
            out.update({r["job_id"]: r for r in rows})
        return out

    # ---- pins (ownership) -----------------------------------------------------------------
    def pins(self) -> dict[str, tuple[str, ...]]:
        return {r["job_id"]: tuple(json.loads(r["nodes"])) for r in self._query("SELECT job_id, nodes FROM pins")}

    def pins_set_at(self) -> dict[str, tuple[tuple[str, ...], float]]:
        """Job -> (the daemon's pin, when it set it)."""
        return {r["job_id"]: (tuple(json.loads(r["nodes"])), r["ts"]) for r in self._query("SELECT job_id, nodes, ts FROM pins")}

    def set_pin(self, job_id: str, nodes: Iterable[str], cycle_id: str = "") -> None:
        self.set_pins({job_id: nodes}, cycle_id)

    def set_pins(self, pins: Mapping[str, Iterable[str]], cycle_id: str = "") -> None:
        """Job -> nodes the daemon pins it to, in one transaction."""
        now = time.time()
        self._tx([("INSERT OR REPLACE INTO pins(job_id, nodes, cycle_id, ts) VALUES (?,?,?,?)",
                   (job_id, json.dumps(list(nodes)), cycle_id, now)) for job_id, nodes in pins.items()])

    def drop_pins(self, job_ids: Iterable[str]) -> None:
        self._tx([("DELETE FROM pins WHERE job_id = ?", (j,)) for j in job_ids])

    # ---- exclusions (ownership of hold pins) -----------------------------------------------
    def exclusions(self) -> dict[str, tuple[str, ...]]:
        """Job -> the ``ExcNodeList`` the daemon set on it (a journal older than the table: none)."""
        try:
            return {r["job_id"]: tuple(json.loads(r["nodes"])) for r in self._query("SELECT job_id, nodes FROM exclusions")}
        except sqlite3.OperationalError:
            return {}

    def set_exclusion(self, job_id: str, nodes: Iterable[str]) -> None:
        self.set_exclusions({job_id: nodes})

    def set_exclusions(self, exclusions: Mapping[str, Iterable[str]]) -> None:
        """Job -> the ``ExcNodeList`` the daemon sets on it, in one transaction."""
        now = time.time()
        self._tx([("INSERT OR REPLACE INTO exclusions(job_id, nodes, ts) VALUES (?,?,?)",
                   (job_id, json.dumps(list(nodes)), now)) for job_id, nodes in exclusions.items()])

    def drop_exclusions(self, job_ids: Iterable[str]) -> None:
        self._tx([("DELETE FROM exclusions WHERE job_id = ?", (j,)) for j in job_ids])

    # ---- reservations (ownership) ---------------------------------------------------------
    def reservations(self) -> dict[str, dict[str, Any]]:
        """The daemon's reservations: name -> {job_id, created, start_time} (none in a journal
        older than the table, opened read-only)."""
        try:
            return {r["name"]: r for r in self._query("SELECT name, job_id, created, start_time FROM reservations")}
        except sqlite3.OperationalError:
            return {}

    def add_reservation(self, name: str, job_id: str, created: float) -> None:
        """Before creating it (an intent, as pins are): a crash cannot orphan it.
        ``created``: the snapshot time of the cycle that asks for it (Slurm's clock domain)."""
        self._tx([("INSERT OR REPLACE INTO reservations(name, job_id, created, start_time) VALUES (?,?,?,NULL)",
                   (name, job_id, created))])

    def confirm_reservation(self, name: str, start_time: float) -> None:
        """Slurm's own start time, the first time a snapshot shows the reservation."""
        self._tx([("UPDATE reservations SET start_time = ? WHERE name = ? AND start_time IS NULL", (start_time, name))])

    def drop_reservations(self, names: Iterable[str]) -> None:
        self._tx([("DELETE FROM reservations WHERE name = ?", (n,)) for n in names])

    # ---- reading --------------------------------------------------------------------------
    def cycles(self, limit: int = 20) -> list[dict[str, Any]]:
        return self._query("SELECT * FROM cycles ORDER BY seq DESC LIMIT ?", (limit,))

    def last_plan(self) -> dict[str, Any] | None:
        rows = self._query("SELECT cycle_id, created, plan FROM plans ORDER BY seq DESC LIMIT 1")
        if not rows:
            return None
        row = rows[0]
        return {"cycle_id": row["cycle_id"], "created": row["created"], **json.loads(row["plan"])}

    def actions(self, *, since: float | None = None, job: str | None = None, cycle: str | None = None,
                limit: int = 1000) -> list[dict[str, Any]]:
        where: list[str] = []
        args: list[Any] = []
        if since is not None:
            where.append("ts >= ?")
            args.append(since)
        if job is not None:
            where.append("job_id = ?")
            args.append(str(job))
        if cycle is not None:
            where.append("cycle_id = ?")
            args.append(cycle)
        sql = "SELECT * FROM actions" + (" WHERE " + " AND ".join(where) if where else "") + " ORDER BY seq DESC LIMIT ?"
        return self._query(sql, (*args, limit))

    def counts(self) -> dict[str, int]:
        return {t: self._query(f"SELECT COUNT(*) AS n FROM {t}")[0]["n"]
                for t in ("cycles", "plans", "actions", "placements", "pins")}

    def iter_placements(self) -> Iterator[dict[str, Any]]:
        yield from self._query("SELECT * FROM placements ORDER BY seq")

    # ---- reading, for the inspection commands (read-only helpers) ------------------------
    @classmethod
    def open_readonly(cls, path: str | Path) -> Journal:
        """Open an existing journal for reading only: no directory, table or WAL setting is
        created, so inspecting never changes the daemon's state. ``FileNotFoundError`` when
        there is no journal. Falls back to SQLite's ``immutable`` mode when the WAL's shared
        memory file cannot be opened (a reader without write access to the state dir)."""
        p = Path(path)
        if not p.is_file():
            raise FileNotFoundError(2, "no journal", str(p))
        self = cls.__new__(cls)
        self.path, self.max_rows, self.max_plans = p, 0, 0
        self._lock = threading.Lock()
        uri = p.resolve().as_uri()
        try:
            self._db = sqlite3.connect(f"{uri}?mode=ro", uri=True, check_same_thread=False, timeout=10,
                                       isolation_level=None)
            self._db.execute("SELECT 1 FROM cycles LIMIT 1").fetchall()
        except sqlite3.OperationalError:
            self._db = sqlite3.connect(f"{uri}?immutable=1", uri=True, check_same_thread=False, isolation_level=None)
        return self

    def cycles_between(self, since: float | None = None, until: float | None = None,
                       limit: int = 100) -> list[dict[str, Any]]:
        """Cycles started in [since, until), newest first."""
        where, args = ["started >= ?", "started < ?"], [since if since is not None else 0.0,
                                                       until if until is not None else float("inf")]
        return self._query(f"SELECT * FROM cycles WHERE {' AND '.join(where)} ORDER BY seq DESC LIMIT ?",
                           (*args, limit))

    def plans_between(self, since: float | None = None, until: float | None = None,
                      limit: int = 100) -> list[dict[str, Any]]:
        """Plans (decoded) created in [since, until), newest first."""
        rows = self._query("SELECT cycle_id, created, plan FROM plans WHERE created >= ? AND created < ?"
                           " ORDER BY seq DESC LIMIT ?",
                           (since if since is not None else 0.0, until if until is not None else float("inf"), limit))
        return [{"cycle_id": r["cycle_id"], "created": r["created"], **json.loads(r["plan"])} for r in rows]


    # ---- bounds ---------------------------------------------------------------------------
    def rotate(self) -> int:
        """Delete the oldest rows beyond the bounds; returns how many went."""
        removed = 0
        with self._lock:
            for table, keep in (("cycles", self.max_rows), ("actions", self.max_rows),
                                ("placements", self.max_rows), ("plans", self.max_plans)):
                cur = self._db.execute(
                    f"DELETE FROM {table} WHERE seq <= (SELECT seq FROM {table} ORDER BY seq DESC LIMIT 1 OFFSET ?)",
                    (keep,))
                removed += cur.rowcount or 0
        return removed
