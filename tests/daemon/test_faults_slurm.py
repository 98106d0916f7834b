"""Fault injection and hostile input against the real local Slurm lab (issue 7).

- hostile job names/comments from alice and bob never reach a shell, the cycle plans and
  applies, and Slurm still has the names unchanged;
- slurmctld SIGKILLed between cycles and restarted later (state kept): the daemon fails
  cycles, backs off within its bound, resumes, and re-applies nothing;
- the daemon SIGKILLed after its Nth Slurm write (``crashing_daemon.py``: ``attentived start``
  with its backend wrapped in ``crashing.CrashingBackend``): a restarted daemon's first cycle
  reconciles (no orphan reservations, no stale pins, priorities in plan order);
- jobs cancelled between snapshot and apply: "Invalid job id" for that job, the rest applies.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from attentived.daemon.cycle import CycleRunner
from attentived.daemon.records import SlurmVersion

from .test_daemon_slurm import (
    busy_cluster,
    config_for,
    jobs_now,
    ours,
    runner_for,
    skip_unless_start_as,
    start_as,
    wait_until,
)

pytestmark = [pytest.mark.slurm, pytest.mark.faults]
ROOT = Path(__file__).parents[2]
#: ``attentived start`` whose backend SIGKILLs the daemon after its Nth Slurm write (test seam)
CRASHING_DAEMON = Path(__file__).with_name("crashing_daemon.py")

HOSTILE = [
    ("alice", "q'uo\"te", "it's \"quoted\""),
    ("bob", "semi;colon && echo pwned", "a;b|c>d"),
    ("alice", "dollar$(touch /tmp/attentived-canary)", "$(id) ${HOME}"),
    ("bob", "back`touch /tmp/attentived-canary`tick", "`id`"),
    ("alice", "ünï-cödé-名前-🚀", "kommentär ✓"),
    ("bob", "new\\nline -o /etc/passwd", "tab\there"),
]


def test_hostile_names_never_reach_a_shell(clean_lab, tmp_path, monkeypatch):
    lab = clean_lab
    canary = Path("/tmp/attentived-canary")
    canary.unlink(missing_ok=True)
    busy_cluster(lab)
    ids = {}
    for user, name, comment in HOSTILE:
        jid = lab.submit(user, 2, name=name, script="sleep 30", extra_args=["--comment", comment])
        ids[str(jid)] = name
    # every process the daemon starts gets an argv list, never a shell
    real_popen = subprocess.Popen.__init__
    seen: list[list[str]] = []

    def checked(self, args, *a, **kw):
        assert not kw.get("shell"), args
        assert isinstance(args, (list, tuple)), args
        seen.append(list(args))
        return real_popen(self, args, *a, **kw)

    monkeypatch.setattr(subprocess.Popen, "__init__", checked)
    eng = runner_for(lab, tmp_path)
    r = eng.run_cycle()
    monkeypatch.undo()
    assert r.ok, r.error
    assert r.counts.get("managed", 0) >= len(HOSTILE) and r.updates > 0
    assert seen and all(name not in " ".join(argv) for argv in seen for name in ids.values())
    names = {j["job_id"]: j["name"] for j in _squeue(lab)}
    assert {jid: names[jid] for jid in ids} == ids  # unchanged in Slurm
    assert not canary.exists()
    # the journal and status keep the jobs; a second cycle changes nothing
    assert eng.run_cycle().updates == 0
    eng.journal.close()


def _squeue(lab) -> list[dict]:
    out = []
    for j in lab.squeue_json()["jobs"]:
        out.append({"job_id": str(j["job_id"]), "name": j["name"]})
    return out


def _slurmctld_pid(lab) -> int:
    return int((lab.run_dir / "pid" / "slurmctld.pid").read_text().strip())


def _mtime_ns(path: Path) -> int | None:
    try:
        return path.stat().st_mtime_ns
    except FileNotFoundError:
        return None


def lab_version(lab) -> SlurmVersion:
    return SlurmVersion.parse(lab.run(["scontrol", "--version"]).stdout)


def _restart_slurmctld(lab) -> None:
    argv = [str(lab.run_dir / "bin" / "slurmctld"), "-f", str(lab.slurm_conf)]
    if lab_version(lab).tuple >= (26, 5) and not (lab.run_dir / "state" / "assoc_usage").exists():
        # 26.05 will not start from a saved state without it ("fatal: No Assoc usage file",
        # assoc_mgr.c), which it writes only every 5 minutes and at shutdown: a controller
        # killed sooner is started as an admin would have to, ignoring that error (-i)
        argv.append("-i")
    subprocess.run(argv, env=lab.env(), check=True, timeout=30)
    try:
        wait_until(lambda: "UP" in lab.run(["scontrol", "ping"], check=False).stdout, timeout=30, what="slurmctld up")
    except AssertionError as e:  # say why: the controller's own last words
        log = (lab.run_dir / "log" / "slurmctld.log").read_text(errors="replace").splitlines()
        raise AssertionError("\n".join([str(e), *log[-25:]])) from None
    nodes_responding(lab)


def nodes_responding(lab, timeout: float = 60) -> None:
    """After a slurmctld restart the slurmds re-register; until then nodes read NOT_RESPONDING
    and the daemon (rightly) plans around them. Later tests need them back."""
    wait_until(lambda: all("NOT_RESPONDING" not in d.get("State", "") and "*" not in d.get("State", "")
                           for d in lab.nodes_info().values()), timeout=timeout, poll=0.5, what="all nodes responding")


def _daemon_config(lab, tmp_path, state) -> Path:
    p = tmp_path / "c.toml"
    p.write_text(f'partitions = ["main"]\nstate_dir = "{state}"\nslurm_conf = "{lab.slurm_conf}"\n'
                 "metrics_port = 0\ninterval = 0.5\n")
    return p


@pytest.mark.parametrize("crash_after", [1, 2, 4])
def test_sigkill_mid_apply_then_one_cycle_reconciles(clean_lab, tmp_path, crash_after):
    lab = clean_lab
    nodes_responding(lab)
    busy_cluster(lab)
    for user, gpus in (("alice", 8), ("bob", 4), ("alice", 2), ("bob", 1), ("alice", 3)):
        lab.submit(user, gpus, script="sleep 120")
    state = tmp_path / "state"
    conf = _daemon_config(lab, tmp_path, state)
    p = subprocess.run([sys.executable, str(CRASHING_DAEMON), "--crash-after", str(crash_after), "--config", str(conf),
                        "--once"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert p.returncode == -signal.SIGKILL, (p.returncode, p.stderr[-2000:])
    # restart: one cycle reconciles
    eng = CycleRunner(config_for(lab, tmp_path, state_dir=str(state)))
    r = eng.run_cycle()
    assert r.ok, r.error
    r2 = eng.run_cycle()
    assert r2.ok and r2.updates == 0, ([(o.action.kind, o.action.job_id, o.action.reservation) for o in r2.outcomes],
                                       r.plan_doc["unusable_nodes"], r2.plan_doc["unusable_nodes"], r2.counts)
    held = {h["reservation"] for h in r.plan_doc["holds"] if h["reservation"]}
    assert set(ours(lab)) == held  # no orphan reservations
    jobs = jobs_now(lab)
    pinned = {s["job"]: s["nodes"] for s in r.plan_doc["starts"] if s["pinned"]}
    for jid, d in jobs.items():
        if d["JobState"] == "PENDING" and d.get("ReqNodeList", "(null)") not in ("(null)", ""):
            assert jid in pinned, f"stale pin on {jid}: {d['ReqNodeList']}"
    order = [j for j in r.plan_doc["priority_order"] if jobs.get(j, {}).get("JobState") == "PENDING"]
    prios = [int(jobs[j]["Priority"]) for j in order]
    assert prios == sorted(prios, reverse=True) and len(set(prios)) == len(prios)
    eng.journal.close()


def test_job_cancelled_between_snapshot_and_apply(clean_lab, tmp_path):
    lab = clean_lab
    busy_cluster(lab)
    # every job needs more GPUs than a node has free (one each), so none can start when the
    # first is cancelled: a 1-GPU job would, at Slurm's next pass, racing the apply
    ids = [str(lab.submit(u, g, script="sleep 120")) for u, g in (("alice", 2), ("bob", 2), ("alice", 3))]
    eng = runner_for(lab, tmp_path)
    real = eng.backend.snapshot

    def racing_snapshot():
        snap = real()
        lab.run(["scancel", ids[0]], check=False)
        wait_until(lambda: jobs_now(lab).get(ids[0], {}).get("JobState") != "PENDING", what="cancel")
        return snap

    eng.backend.snapshot = racing_snapshot
    r = eng.run_cycle()
    eng.backend.snapshot = real
    bad = [o for o in r.outcomes if not o.ok]
    assert bad and all(o.action.job_id == ids[0] for o in bad), [(o.action, o.error) for o in bad]
    assert any(o.ok and o.action.job_id in ids[1:] for o in r.outcomes)
    # Slurm refused the updates because the job had left the queue: overtaken, not a fault
    assert all(o.overtaken for o in bad) and r.overtaken == len(bad)
    assert r.ok and r.failed == 0, r.error
    cycle = json.loads((tmp_path / "state" / "status.json").read_text())["last_cycle"]
    assert (cycle["failed"], cycle["overtaken"]) == (0, len(bad))
    r2 = eng.run_cycle()
    assert r2.ok, r2.error
    eng.journal.close()


def test_non_root_without_operator_rights_is_refused_at_start(clean_lab, config_for_user):
    lab = clean_lab
    skip_unless_start_as()
    busy_cluster(lab)
    bob = lab.submit("bob", 2, script="sleep 60")
    # what Slurm itself says to alice: the permission the probe names
    direct = lab.run(["scontrol", "update", f"JobId={bob}", "Priority=5"], user="alice", check=False)
    assert direct.returncode != 0 and ("Invalid user id" in direct.stderr
                                       or "Access/permission denied" in direct.stderr), direct.stderr
    conf = config_for_user(lab, "alice")
    probe = start_as("alice", conf, "--once", "--dry-run")
    assert probe.returncode == 0, probe.stderr[-2000:]  # dry-run needs no rights
    live = start_as("alice", conf, "--once")
    assert live.returncode == 1, live.stderr[-2000:]
    assert "operator rights" in live.stderr and "Invalid user id" in live.stderr
    assert "alice" in live.stderr and "SlurmUser" in live.stderr
    # the lab keeps accounting: alice is known there with no admin level, and the fix is named
    assert "AdminLevel=None" in live.stderr and "sacctmgr modify user alice set AdminLevel=Operator" in live.stderr
    assert "startup.permission_denied" in live.stderr
    assert jobs_now(lab)[str(bob)]["Priority"] != "5"
    assert ours(lab) == {}


# Last in the file: after a slurmctld SIGKILL + restart the lab's node/GPU view takes a while to settle.
def test_slurmctld_killed_then_restarted(clean_lab, tmp_path):
    lab = clean_lab
    try:
        _slurmctld_killed_then_restarted(lab, tmp_path)
    finally:
        # a controller restarted from its saved state leaves the lab's node and GPU accounting
        # unsettled for a while (see docs/reliability.md): give later tests a fresh lab
        lab.stop()
        lab.start()


def _slurmctld_killed_then_restarted(lab, tmp_path):
    busy_cluster(lab)
    for user, gpus in (("bob", 8), ("alice", 4), ("alice", 2)):
        lab.submit(user, gpus, script="sleep 120")
    # attach mode: the whole-node hold becomes a reservation, which the restart must keep
    eng = runner_for(lab, tmp_path, interval=0.2, backoff_max=1.0, command_timeout=3, hold_mode="attach")
    # a SIGKILLed slurmctld loses what it had not saved yet: wait for a state save that wrote
    # job_state and resv_state after this point, so that it holds the running blockers and this
    # cycle's reservation and job updates. slurmctld saves at most every 5 s, both files in one
    # pass; a pass from before the cycle (an mtime >= "now - 1 s" accepted one, with resv_state
    # written for reset.sh's reservation deletes or the 5-minute checkpoint) can predate the
    # blockers' start: restarted from it, slurmctld had them PENDING or not at all and killed the
    # batch steps their slurmds reported ("Registered PENDING JobId=..." / "Orphan StepId=...").
    state = lab.run_dir / "state"
    saved = {f: _mtime_ns(state / f) for f in ("resv_state", "job_state")}
    r = eng.run_cycle()
    assert r.ok, r.error
    before = dict(ours(lab))
    prios = {k: v["Priority"] for k, v in jobs_now(lab).items() if v["JobState"] == "PENDING"}
    wait_until(lambda: all(_mtime_ns(state / f) not in (None, saved[f]) for f in saved), timeout=20,
               what="slurmctld state save")
    os.kill(_slurmctld_pid(lab), signal.SIGKILL)
    wait_until(lambda: not lab.is_running(), timeout=10, what="slurmctld gone")
    failed, delays, t_end = 0, [], time.monotonic() + 6
    while time.monotonic() < t_end:
        res = eng.run_cycle()
        if not res.skipped:
            assert not res.ok and res.error_kind == "slurm", res.error
            failed += 1
            delays.append(eng.backoff_until - time.monotonic())
        time.sleep(0.1)
    assert failed >= 2 and max(delays) <= 1.0 + 0.05
    assert eng.status()["slurm_reachable"] is False and eng.metrics.up.value() == 0
    _restart_slurmctld(lab)
    kept = (ours(lab).keys() == before.keys() and
            {k: v["Priority"] for k, v in jobs_now(lab).items() if v["JobState"] == "PENDING"} == prios)
    res = wait_until(lambda: (lambda x: x if (x.ok and not x.skipped) else None)(eng.run_cycle()), timeout=30,
                     what="a good cycle after the restart")
    if kept:  # Slurm recovered its state: the daemon re-applies nothing
        assert res.updates == 0, [o.action for o in res.outcomes]
    # either way: no duplicate reservation, exactly the plan's holds, and the next cycle is empty
    assert set(ours(lab)) == {h["reservation"] for h in res.plan_doc["holds"] if h["reservation"]}
    again = eng.run_cycle()
    assert again.ok and again.updates == 0, [o.action for o in again.outcomes]
    print("slurm state kept across the restart:", kept)
    eng.journal.close()
