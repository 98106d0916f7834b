"""Reliability without a real Slurm (issue 7): a real ``attentived start`` process against
stand-in ``squeue``/``sinfo``/``scontrol`` programs (the recorded 22.05 outputs, see
test_backend.py) that the test corrupts while the daemon runs; invalid configs at start and
on SIGHUP; corrupt, truncated and mismatched model files; Slurm errors and changes between
snapshot and apply on the in-memory Slurm. Fast, no marker."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import torch

from attentived.agents.learned import default_model_path
from attentived.daemon import config as C
from attentived.daemon.cycle import CycleRunner
from attentived.daemon.journal import Journal
from attentived.daemon.records import SlurmUnavailable
from attentived.daemon.testing import FakeBackend

from .test_apply import TOPO, cluster, pending, running

ROOT = Path(__file__).resolve().parents[2]
FIX = Path(__file__).parent / "fixtures" / "slurm-22.05"
CLUSTER = ROOT / "tests" / "topology" / "fixtures" / "lab_cluster.toml"
_STUB = re.search(r'STUB = r"""(.*?)"""', (Path(__file__).parent / "test_backend.py").read_text(), re.S)
assert _STUB is not None, "test_backend.py defines the stub Slurm commands as STUB"
STUB = _STUB.group(1)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class FakeSlurm:
    """A bin dir of stand-in Slurm commands answering from a fixtures copy the test can edit."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.bin = root / "bin"
        self.fix = root / "fix"
        self.bin.mkdir(parents=True)
        shutil.copytree(FIX, self.fix)
        for name in ("squeue", "sinfo", "scontrol"):
            p = self.bin / name
            p.write_text(STUB)
            p.chmod(0o755)
        self.log = root / "argv.log"
        self.log.touch()

    def env(self) -> dict[str, str]:
        return {**os.environ, "STUB_LOG": str(self.log), "STUB_VERSION": "22.05.8", "STUB_FIX": str(self.fix)}

    def squeue(self, text: str) -> None:
        tmp = self.fix / "squeue.json.tmp"
        tmp.write_text(text)
        tmp.replace(self.fix / "squeue.json")

    def config(self, path: Path, **extra: object) -> Path:
        lines = ['partitions = ["main"]', f'state_dir = "{self.root / "state"}"', f'slurm_bin_dir = "{self.bin}"',
                 f'cluster_file = "{CLUSTER}"']
        lines += [f"{k} = {json.dumps(v)}" for k, v in extra.items()]
        path.write_text("\n".join(lines) + "\n")
        return path


def start(conf: Path, fake: FakeSlurm, *args: str, **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "attentived", "start", "--config", str(conf), *args], cwd=ROOT,
                            env=fake.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


def events(text: str) -> list[dict]:
    out = []
    for line in text.splitlines():
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except ValueError:
                pass
    return out


# ---- config ---------------------------------------------------------------------------------
@pytest.mark.parametrize("bad,key", [
    ('interval = "fast"', "interval"),
    ("intervall = 3", "intervall"),
    ('fallback_policy = "no-such-policy"', "fallback_policy"),
    ("priority_floor = -5", "priority_floor"),
    ('hold_mode = "grab"', "hold_mode"),
    ("interval = [", "config"),  # not TOML at all: the message names the file
])
def test_invalid_config_is_refused_at_start_naming_the_key(tmp_path, bad, key):
    fake = FakeSlurm(tmp_path)
    conf = fake.config(tmp_path / "c.toml")
    conf.write_text(conf.read_text() + bad + "\n")
    p = subprocess.run([sys.executable, "-m", "attentived", "start", "--config", str(conf), "--once", "--dry-run"],
                       cwd=ROOT, env=fake.env(), capture_output=True, text=True, timeout=60)
    assert p.returncode == 2, p.stderr[-2000:]
    assert key in p.stderr and str(conf) in p.stderr, p.stderr[-2000:]
    assert not (tmp_path / "state" / "journal.sqlite").exists()  # refused before touching anything


def _wait(pred, timeout=30.0, what="condition"):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        v = pred()
        if v:
            return v
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def test_running_daemon_survives_bad_slurm_json_and_a_bad_sighup(tmp_path):
    """Truncated, non-JSON and unexpected-version squeue output fail that cycle (journal +
    log), the daemon keeps running with a bounded back-off and recovers when the output is
    good again; an invalid config on SIGHUP is rejected and the old one stays in force."""
    fake = FakeSlurm(tmp_path)
    port = free_port()
    conf = fake.config(tmp_path / "c.toml", interval=0.2, backoff_max=1.0, metrics_port=port)
    good = (fake.fix / "squeue.json").read_text()
    proc = start(conf, fake, "--dry-run")
    journal = Journal.in_state_dir(tmp_path / "state")
    try:
        def statuses():
            try:
                return [c["status"] for c in journal.cycles(500)][::-1]
            except Exception:
                return []
        _wait(lambda: "ok" in statuses(), what="a good cycle")
        bad_outputs = {
            "truncated": good[: len(good) // 2],
            "not json": "slurm_load_jobs error: Unable to contact slurm controller (connect failure)\n",
            "unexpected version": json.dumps({**json.loads(good), "meta": {"Slurm": {"version": {"major": 99, "minor": 1, "micro": 0}}},
                                              "jobs": {"not": "a list"}}),
            "empty": "",
        }
        for label, text in bad_outputs.items():
            n_before = len(statuses())
            fake.squeue(text)
            _wait(lambda n_before=n_before: "parse" in statuses()[n_before:], what=f"a parse error for {label!r}")
            assert proc.poll() is None, f"daemon died on {label}"
            fake.squeue(good)
            n_bad = len(statuses())
            _wait(lambda n_bad=n_bad: "ok" in statuses()[n_bad:], timeout=10, what=f"recovery after {label!r}")
        metrics = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
        assert re.search(r'attentived_errors_total\{kind="parse"\} [1-9]', metrics), metrics[:2000]
        # SIGHUP with an invalid config: rejected, old config kept, daemon still cycling
        conf.write_text(conf.read_text().replace("interval = 0.2", 'interval = "soon"'))
        proc.send_signal(signal.SIGHUP)
        time.sleep(1.0)
        n = len(statuses())
        _wait(lambda: len(statuses()) > n + 2, what="cycles after the rejected reload")
        assert proc.poll() is None
        # a valid change is taken
        fake.config(conf, interval=0.2, backoff_max=1.0, metrics_port=port, policy="fifo")
        proc.send_signal(signal.SIGHUP)
        _wait(lambda: json.loads((tmp_path / "state" / "status.json").read_text())["policy"] == "fifo",
              what="the reloaded policy")
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
        journal.close()
    assert proc.returncode == 0, err[-2000:]
    ev = events(err)
    errors = [e for e in ev if e["event"] == "cycle.error"]
    assert errors and all(e["kind"] == "parse" and e["error"] for e in errors)
    assert any("squeue" in e["error"] for e in errors)
    rejected = [e for e in ev if e["event"] == "config.reload_rejected"]
    assert len(rejected) == 1 and "interval" in rejected[0]["error"]
    assert any(e["event"] == "config.reloaded" for e in ev)
    assert not any(e["event"] == "cycle.crash" for e in ev)


# ---- models -----------------------------------------------------------------------------------
def _bad_models(tmp_path: Path) -> dict[str, Path]:
    good = Path(default_model_path("attentive")).read_bytes()
    out = {"missing": tmp_path / "missing.pt"}
    (p := tmp_path / "truncated.pt").write_bytes(good[: len(good) // 3])
    out["truncated"] = p
    (p := tmp_path / "corrupt.pt").write_bytes(b"PK\x03\x04 definitely not a model" * 10)
    out["corrupt"] = p
    (p := tmp_path / "empty.pt").write_bytes(b"")
    out["empty"] = p
    payload = torch.load(default_model_path("attentive"), weights_only=True)
    wrong = dict(payload, dims={k: v + 3 for k, v in payload["dims"].items()})
    torch.save(wrong, p := tmp_path / "mismatched.pt")
    out["mismatched"] = p
    torch.save(dict(payload, version=99), p := tmp_path / "future.pt")
    out["future version"] = p
    torch.save({"hello": torch.zeros(2)}, p := tmp_path / "other.pt")
    out["other format"] = p
    return out


def test_bad_models_fall_back_in_logs_metrics_and_status(tmp_path):
    from attentived.daemon import log as dlog

    for label, path in _bad_models(tmp_path).items():
        fake = cluster([pending("1", "alice", 4), pending("2", "bob", 2, t=1)])
        e = CycleRunner(C.Config(state_dir=str(tmp_path / label), partitions=("main",), metrics_port=0, policy="attentive",
                            model=str(path), fallback_policy="sjf+consolidate"), backend=fake, topology=TOPO)
        assert e.policy_name == "sjf+consolidate" and e.policy_fallback, label
        assert str(path.name) in e.policy_fallback or label == "missing" and "missing" in e.policy_fallback
        assert e.metrics.errors.value(kind="policy") == 1
        assert 'fallback="1"' in e.metrics.render() and 'policy="sjf+consolidate"' in e.metrics.render()
        r = e.run_cycle()
        assert r.ok and r.updates > 0, label
        st = json.loads((tmp_path / label / "status.json").read_text())
        assert st["policy"] == "sjf+consolidate" and st["policy_configured"] == "attentive" and st["policy_fallback"], label
        e.journal.close()
    assert dlog  # the logs are checked by the subprocess test below


def test_bad_model_subprocess_says_fallback_in_the_log(tmp_path):
    fake = FakeSlurm(tmp_path)
    good = Path(default_model_path("attentive")).read_bytes()
    model = tmp_path / "truncated.pt"
    model.write_bytes(good[:1000])
    conf = fake.config(tmp_path / "c.toml", policy="attentive", model=str(model), fallback_policy="fifo", metrics_port=0)
    p = subprocess.run([sys.executable, "-m", "attentived", "start", "--config", str(conf), "--once", "--dry-run"],
                       cwd=ROOT, env=fake.env(), capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    fb = [e for e in events(p.stderr) if e["event"] == "policy.fallback"]
    assert fb and fb[0]["using"] == "fifo" and "truncated.pt" in fb[0]["reason"]
    st = json.loads((tmp_path / "state" / "status.json").read_text())
    assert st["policy"] == "fifo" and "truncated.pt" in st["policy_fallback"]


# ---- Slurm changing between snapshot and apply (in-memory Slurm) --------------------------------
class RacyBackend(FakeBackend):
    """Runs ``race`` (a callable on the backend) right after each snapshot is taken."""

    race = None

    def snapshot(self):
        snap = super().snapshot()
        if self.race is not None:
            race, self.race = self.race, None
            race(self)
        return snap


def racy_mix() -> RacyBackend:
    base = cluster([pending("1", "alice", 8), pending("2", "bob", 8, t=1), pending("3", "carol", 4, t=2),
                    pending("4", "alice", 2, t=3), pending("5", "bob", 1, t=4)],
                   run=[running("r1", "dave", "node1", range(8)), running("r2", "dave", "node2", range(8))])
    fake = RacyBackend(base.jobs.values(), base.nodes.values(), base.reservations.values(), now=base.now)
    return fake


def test_jobs_and_nodes_changing_between_snapshot_and_apply(tmp_path):
    import dataclasses

    fake = racy_mix()
    e = CycleRunner(C.Config(state_dir=str(tmp_path / "s"), partitions=("main",), metrics_port=0), backend=fake, topology=TOPO)

    def race(b):
        b.jobs.pop("2")                            # cancelled and purged: "Invalid job id"
        b.finish("r1")                             # completed: frees node1
        b.jobs["3"] = dataclasses.replace(b.jobs["3"], state="RUNNING")  # started by Slurm meanwhile
        n = b.nodes["node4"]
        b.nodes["node4"] = dataclasses.replace(n, state="DRAIN")  # drained mid-plan
    fake.race = race
    r = e.run_cycle()
    assert r.actions and r.error_kind in ("", "apply")
    failed = [o for o in r.outcomes if not o.ok]
    assert all(o.error for o in failed)
    assert any(o.ok for o in r.outcomes)  # the rest of the plan applied
    # the next cycle sees the new state and converges: no errors, nothing left to do after it
    r2 = e.run_cycle()
    assert r2.ok, r2.error
    r3 = e.run_cycle()
    assert r3.ok and r3.updates == 0
    assert all(not name.startswith("attentived-") or name[len("attentived-"):] in fake.jobs for name in fake.reservations)
    e.journal.close()


def test_a_cluster_file_that_loses_a_node_is_planned_afresh(tmp_path):
    """Last cycle's placements are GPU ids of the topology before: a plan on node4, then
    node4 leaves the cluster file, and every cycle after must still plan (it crashed)."""
    cf = tmp_path / "cluster.toml"

    def write(n):
        cf.write_text(f'[[nodes]]\nnames = "node[1-{n}]"\nswitch = "sw1"\ngpus = 8\n[switches]\nsw1 = "spine"\n')
        os.utime(cf, (time.time() + n, time.time() + n))

    write(4)
    full = [running(f"r{i}", "root", f"node{i}", range(8)) for i in (1, 2, 3)]
    fake = cluster([pending("7", "alice", 4)], run=[*full, running("r4", "root", "node4", range(4))])
    cfg = C.Config(partitions=("main",), state_dir=str(tmp_path / "s"), cluster_file=str(cf), metrics_port=0)
    e = CycleRunner(cfg, backend=fake)
    assert e.run_cycle().ok and e.topology is not None and e.topology.num_gpus == 32
    assert "node4" in json.dumps(e.journal.last_plan())  # job 7 planned on node4, the only room
    write(3)
    e.reload(cfg)
    for _ in range(2):
        r = e.run_cycle()
        assert r.ok, r.error
    assert e.topology.num_gpus == 24
    e.journal.close()


@pytest.mark.parametrize("error", ["Invalid job id specified", "Requested nodes are busy",
                                   "Access/permission denied", "Unexpected message received"])
def test_scontrol_errors_fail_one_action_the_rest_applies(tmp_path, error):
    fake = racy_mix()
    fake.fail[("update", "4")] = error
    fake.fail[("create", "*")] = error
    e = CycleRunner(C.Config(state_dir=str(tmp_path / "s"), partitions=("main",), metrics_port=0), backend=fake, topology=TOPO)
    r = e.run_cycle()
    failed = [o for o in r.outcomes if not o.ok]
    assert failed and all(error in o.error for o in failed)
    assert any(o.ok for o in r.outcomes)
    assert r.error_kind == "apply" and e.backoff_until == 0
    rows = e.journal.actions(cycle=r.cycle_id)
    assert any(not row["ok"] and error in (row["error"] or "") for row in rows)
    fake.fail.clear()
    assert e.run_cycle().ok
    e.journal.close()


def test_slurm_down_backs_off_with_a_bound_and_resumes(tmp_path):
    fake = racy_mix()
    e = CycleRunner(C.Config(state_dir=str(tmp_path / "s"), partitions=("main",), metrics_port=0, interval=0.05,
                        backoff_max=0.4), backend=fake, topology=TOPO)
    assert e.run_cycle().ok
    writes = len(fake.calls)
    fake.snapshot_error = SlurmUnavailable("squeue: error: Unable to contact slurm controller (connect failure)")
    delays = []
    t_end = time.monotonic() + 2.0
    while time.monotonic() < t_end:
        r = e.run_cycle()
        if not r.skipped:
            delays.append(max(0.0, e.backoff_until - time.monotonic()))
        time.sleep(0.02)
    assert len(fake.calls) == writes  # nothing applied while Slurm is away
    assert max(delays) <= 0.4 and e.metrics.up.value() == 0 and e.status()["slurm_reachable"] is False
    fake.snapshot_error = None
    time.sleep(0.45)
    r = e.run_cycle()
    assert r.ok and r.updates == 0 and e.status()["slurm_reachable"]  # resumed, nothing re-applied
    assert len([n for n in fake.reservations if n.startswith("attentived-")]) == len(set(fake.reservations))
    e.journal.close()


# ---- least privilege: the start-up permission probe -------------------------------------------
def test_operator_problem_names_the_missing_permission():
    from attentived.daemon.checks import operator_problem

    assert operator_problem("root", 0, "slurm(64030)", "accounting_storage/none", None) == ""
    assert operator_problem("slurm", 64030, "slurm(64030)", "accounting_storage/none", None) == ""
    assert operator_problem("sched", 1200, "slurm", "accounting_storage/slurmdbd", "Operator") == ""
    msg = operator_problem("alice", 1001, "root", "accounting_storage/none", None)
    assert "alice" in msg and "operator rights" in msg and "Access/permission denied" in msg and "no accounting" in msg
    msg = operator_problem("sched", 1200, "slurm", "accounting_storage/slurmdbd", "None")
    assert "AdminLevel=None" in msg and "sacctmgr modify user sched set AdminLevel=Operator" in msg


def test_permission_probe_refuses_live_start_but_not_dry_run(tmp_path, monkeypatch):
    """The cli backend as a non-root user (stubbed euid) that sacctmgr says is no operator."""
    import attentived.daemon.permissions as perm
    from attentived.daemon.service import Service

    fake = FakeSlurm(tmp_path)
    (fake.bin / "sacctmgr").write_text("#!/bin/bash\necho None\n")
    (fake.bin / "sacctmgr").chmod(0o755)
    for k, v in fake.env().items():
        monkeypatch.setenv(k, v)
    monkeypatch.setattr(perm.os, "geteuid", lambda: 4242)
    conf = fake.config(tmp_path / "c.toml", metrics_port=0)
    svc = Service(conf)
    assert svc.run_once() == 1
    assert "AdminLevel=None" in svc.runner.permission_problem()
    assert Service(conf, dry_run=True).runner.permission_problem() == ""
