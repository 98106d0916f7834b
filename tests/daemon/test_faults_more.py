"""More fault injection against the real local Slurm lab (follow-up to test_faults_slurm.py).

- slurmctld SIGKILLed *during* a running daemon's apply phase, restarted: the daemon never
  exits, the failed cycles are logged and journaled, its back-off stays within
  ``backoff_max``, and once Slurm is back one cycle converges (one reservation per held job,
  no orphans; a job whose registration with slurmdbd the kill cut short is left to Slurm,
  daemon/unregistered.py) and the next applies nothing;
- the daemon SIGKILLed in the middle of its SIGTERM hand-back (``hand_back_on_exit``, via
  ``crashing_daemon.py``, whose wrapped backend counts hand-back's writes like any other):
  a later hand-back leaves no attentived reservation and no daemon pin.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from attentived.daemon.cycle import CycleRunner
from attentived.daemon.journal import Journal

from .test_daemon_slurm import busy_cluster, config_for, jobs_now, ours, wait_until
from .test_faults_slurm import CRASHING_DAEMON, _restart_slurmctld, _slurmctld_pid, nodes_responding

pytestmark = [pytest.mark.slurm, pytest.mark.faults]
ROOT = Path(__file__).parents[2]
PREFIX = "attentived-"


class Daemon:
    """``attentived start`` in a subprocess; its JSON log lines (stderr) collected live.
    ``crash_after=N``: the same daemon from ``crashing_daemon.py``, SIGKILLed right after its
    Nth Slurm write (job updates sent one per ``scontrol``)."""

    def __init__(self, conf: Path, crash_after: int | None = None) -> None:
        if crash_after is None:
            argv = [sys.executable, "-m", "attentived", "start"]
        else:
            argv = [sys.executable, str(CRASHING_DAEMON), "--crash-after", str(crash_after)]
        self.p = subprocess.Popen([*argv, "--config", str(conf)], cwd=ROOT, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.PIPE, text=True)
        self.events: list[dict] = []
        self.raw: list[str] = []
        self.cond = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.p.stderr is not None
        for line in self.p.stderr:
            try:
                ev = json.loads(line)
            except ValueError:
                ev = {"event": "raw", "line": line}
            ev["_t"] = time.monotonic()
            with self.cond:
                self.raw.append(line)
                self.events.append(ev)
                self.cond.notify_all()

    def wait_event(self, pred, timeout: float, after: int = 0, what: str = "event") -> int:
        """Index of the first event at or after ``after`` that satisfies ``pred``."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                for i in range(after, len(self.events)):
                    if pred(self.events[i]):
                        return i
                left = deadline - time.monotonic()
                if left <= 0 or self.p.poll() is not None:
                    # whole in the report's captured output: pytest shortens an assertion's message
                    print(f"waited for {what}; the daemon's last lines:\n" + "".join(self.raw[-60:]))
                assert left > 0 and self.p.poll() is None, (what, self.p.poll(), "".join(self.raw[-30:]))
                self.cond.wait(min(left, 0.2))

    def named(self, name: str, after: int = 0) -> list[dict]:
        with self.cond:
            return [e for e in self.events[after:] if e.get("event") == name]


def _conf(lab, tmp_path, state: Path, **extra) -> Path:
    p = tmp_path / "c.toml"
    lines = ['partitions = ["main"]', f'state_dir = "{state}"', f'slurm_conf = "{lab.slurm_conf}"', "metrics_port = 0",
             'log_format = "json"', 'log_level = "info"']
    lines += [f"{k} = {json.dumps(v) if isinstance(v, str) else str(v).lower()}" for k, v in extra.items()]
    p.write_text("\n".join(lines) + "\n")
    return p


def _pending_ids(lab) -> set[str]:
    return {j for j, d in jobs_now(lab).items() if d["JobState"] == "PENDING"}


def _assert_no_orphans(lab) -> None:
    pending = _pending_ids(lab)
    names = list(ours(lab))
    assert len(names) == len(set(names))
    for name in names:  # one reservation per held job (the name carries the job id), none for gone jobs
        assert name[len(PREFIX):] in pending, (name, sorted(pending))


# ---- 1. slurmctld SIGKILLed mid-apply ---------------------------------------------------------


def test_slurmctld_killed_mid_apply(clean_lab, tmp_path):
    lab = clean_lab
    try:
        _slurmctld_killed_mid_apply(lab, tmp_path)
    finally:
        lab.stop()  # a restarted controller leaves the lab unsettled: give later tests a fresh one
        lab.start()


def _slurmctld_killed_mid_apply(lab, tmp_path):
    nodes_responding(lab)
    busy_cluster(lab)
    users = ("alice", "bob", "carol")
    for i in range(12):  # many fresh pending jobs: the first cycle issues one priority update per job
        lab.submit(users[i % 3], 1 + i % 2, script="sleep 120")
    state = tmp_path / "state"
    backoff_max = 2.0
    # above the 5 s for which Slurm 22.05 holds, then refuses, an update of a job whose
    # registration with slurmdbd the kill cut short (daemon/unregistered.py): the daemon
    # must see that refusal, not a timeout
    command_timeout = 8
    conf = _conf(lab, tmp_path, state, interval=0.5, backoff_max=backoff_max, command_timeout=command_timeout)
    # the crashing backend with a count it never reaches: apply runs one ``scontrol update``
    # per job and so is long enough to be hit
    d = Daemon(conf, crash_after=1_000_000)
    try:
        i_plan = d.wait_event(lambda e: e.get("event") == "cycle.plan" and e.get("actions", 0) >= 8, timeout=30,
                              what="a cycle.plan with many actions")
        os.kill(_slurmctld_pid(lab), signal.SIGKILL)
        cycle_id = d.events[i_plan].get("cycle_id")
        wait_until(lambda: not lab.is_running(), timeout=10, what="slurmctld gone")
        # the cycle that was applying ends failed (some actions failed), logged with its id
        i_done = d.wait_event(lambda e: e.get("event") == "cycle.done", after=i_plan, timeout=60, what="cycle.done")
        hit = d.events[i_done]
        assert hit.get("cycle_id") == cycle_id
        # each action left after the kill waits out command_timeout (apply does not abort early)
        print("cycle hit by the kill:", hit)
        assert hit["ok"] is False and hit["failed"] >= 1 and hit["actions"] >= 8, hit
        # later cycles fail at the snapshot and back off
        slurm_error = lambda e: e.get("event") == "cycle.error" and e.get("kind") == "slurm"  # noqa: E731
        i_err = d.wait_event(slurm_error, after=i_done, timeout=30, what="a failed snapshot")
        d.wait_event(slurm_error, after=i_err + 1, timeout=30, what="a second failed snapshot")
        time.sleep(backoff_max)
        errors = [e for e in d.named("cycle.error", i_done) if e.get("kind") == "slurm"]
        skipped = d.named("cycle.skipped", i_done)
        assert len(errors) >= 2, errors
        assert skipped and max(e["seconds_left"] for e in skipped) <= backoff_max
        gaps = [b["_t"] - a["_t"] for a, b in zip(errors, errors[1:])]
        # consecutive failed cycles are at most backoff_max (+ one interval tick, + scontrol's own timeout) apart
        assert max(gaps) <= backoff_max + 0.5 + command_timeout + 1.0, gaps
        assert d.p.poll() is None
        _restart_slurmctld(lab)
        nodes_responding(lab)
        mark = len(d.events)
        # jobs the kill left unregistered cost 5 s each once (one by one through the crashing
        # backend), then are left to Slurm
        i_ok = d.wait_event(lambda e: e.get("event") == "cycle.done" and e.get("ok") is True, after=mark, timeout=120,
                            what="a good cycle after the restart")
        i_zero = d.wait_event(lambda e: e.get("event") == "cycle.done", after=i_ok + 1, timeout=30,
                              what="the cycle after")
        zero = d.events[i_zero]
        assert zero["ok"] is True and zero["actions"] == 0, (d.events[i_ok], zero)
        left = d.named("slurm.unregistered", mark)
        print("left to Slurm after the restart:", [e["jobs"] for e in left])
        _assert_no_orphans(lab)
        assert d.p.poll() is None
        d.p.send_signal(signal.SIGTERM)
        assert d.p.wait(timeout=30) == 0
    finally:
        if d.p.poll() is None:
            d.p.kill()
            d.p.wait()
    # the journal has the failed cycle (apply failures) and the slurm-error cycles
    j = Journal.in_state_dir(state)
    rows = j.cycles(limit=1000)
    j.close()
    by_id = {r["cycle_id"]: r for r in rows}
    assert cycle_id in by_id and by_id[cycle_id]["status"] == "apply" and by_id[cycle_id]["failed"] >= 1
    assert any(r["status"] == "slurm" for r in rows)


# ---- 2. SIGKILL during hand-back ---------------------------------------------------------------


def test_sigkill_during_hand_back_then_hand_back_again(clean_lab, tmp_path):
    lab = clean_lab
    nodes_responding(lab)
    busy_cluster(lab)
    for user, gpus in (("alice", 8), ("bob", 4), ("alice", 2), ("bob", 1), ("alice", 3), ("carol", 2)):
        lab.submit(user, gpus, script="sleep 120")
    state = tmp_path / "state"
    # bring Slurm to the daemon's plan first: the crashing daemon's own cycle then has nothing to do
    eng = CycleRunner(config_for(lab, tmp_path, state_dir=str(state), hold_mode="attach"))  # holds as reservations
    assert eng.run_cycle().ok
    r = eng.run_cycle()
    assert r.ok and r.updates == 0
    eng.journal.close()
    held = set(ours(lab))
    # hand-back = reservation deletes then hold + release of the daemon's priorities, all
    # Slurm writes the crashing backend counts: a crash after the 1st always lands half way
    assert held, "no hold to hand back"
    conf = _conf(lab, tmp_path, state, interval=60, hand_back_on_exit=True, hold_mode="attach")
    d = Daemon(conf, crash_after=1)
    try:
        i = d.wait_event(lambda e: e.get("event") == "cycle.done", timeout=30, what="first cycle")
        assert d.events[i]["ok"] is True and d.events[i]["actions"] == 0, d.events[i]
        d.p.send_signal(signal.SIGTERM)
        rc = d.p.wait(timeout=30)
    finally:
        if d.p.poll() is None:
            d.p.kill()
            d.p.wait()
    assert rc == -signal.SIGKILL, (rc, "".join(d.raw[-20:]))
    assert not d.named("service.handed_back")  # killed half way
    print("left after the killed hand-back:", sorted(ours(lab)), "of", sorted(held))
    # a restarted daemon's hand-back finishes the job
    d2 = Daemon(_conf(lab, tmp_path, state, interval=60, hand_back_on_exit=True, hold_mode="attach"))
    try:
        d2.wait_event(lambda e: e.get("event") == "cycle.done", timeout=30, what="first cycle")
        d2.p.send_signal(signal.SIGTERM)
        assert d2.p.wait(timeout=30) == 0, "".join(d2.raw[-20:])
    finally:
        if d2.p.poll() is None:
            d2.p.kill()
            d2.p.wait()
    done = d2.named("service.handed_back")
    assert done and done[0]["failed"] == 0, done
    wait_until(lambda: not ours(lab), timeout=15, what="no attentived reservation")
    j = Journal.in_state_dir(state)
    assert j.pins() == {}
    j.close()
    band = config_for(lab, tmp_path)
    for jid, info in jobs_now(lab).items():
        if info["JobState"] == "PENDING":
            assert info.get("ReqNodeList", "(null)") in ("(null)", ""), (jid, info["ReqNodeList"])
            assert not info.get("Reservation", "(null)").startswith(PREFIX), (jid, info["Reservation"])
            # priorities given back to priority/multifactor (hold + release), out of the daemon's band
            assert not band.priority_floor <= int(info["Priority"]) <= band.priority_ceiling, (jid, info["Priority"])
