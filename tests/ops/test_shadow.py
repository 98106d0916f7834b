"""Shadow mode (``attentived start --shadow``) and ``attentived shadow-report``: the cycle plans
and journals but changes nothing, every GPU job's arrival, start (with its GPUs) and end is
recorded, and the report compares Slurm as observed with the policy replayed on the same
arrivals. Fast tests on the in-memory Slurm; the ``slurm`` test on the lab."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from attentived.agents.registry import make_policy
from attentived.daemon import config as C
from attentived.daemon.cycle import CycleRunner
from attentived.daemon.notify import Notifier
from attentived.daemon.observe import ShadowError, read_observations
from attentived.daemon.service import Service
from attentived.ops import shadow as sh
from tests.daemon.test_apply import NOW, TOPO, cluster, pending, running

from .test_inspect import _logs_to_this_tests_stderr, cfg  # noqa: F401 (autouse fixture)

ROOT = Path(__file__).parents[2]


def shadow_runner(c, fake) -> CycleRunner:
    e = CycleRunner(c, backend=fake, topology=TOPO)
    e.shadow = True
    return e


def test_shadow_cycles_observe_arrivals_starts_ends_and_change_nothing(tmp_path):
    c = cfg(tmp_path)
    fake = cluster([pending("11", "alice", 4), pending("12", "bob", 8, t=1), pending("19", "carol", 1, partition="other")],
                   run=[running("101", "root", "node1", range(7))])
    e = shadow_runner(c, fake)
    r = e.run_cycle()
    assert r.ok and r.dry_run and r.plan_doc["starts"] and r.counts["observed_changes"] == 4
    assert fake.calls == []  # nothing reached Slurm
    assert e.run_cycle().counts["observed_changes"] == 0  # unchanged jobs are not rewritten
    fake.start("11", {"node2": [0, 1, 2, 3]}, at=NOW + 5)
    fake.start("19", {"node3": [0]}, at=NOW + 5)
    assert e.run_cycle().counts["observed_changes"] == 2
    fake.finish("11", at=NOW + 65)
    e.run_cycle()
    assert fake.calls == []
    rows, meta = read_observations(c.state_dir)
    by = {r["job_id"]: r for r in rows}
    assert set(by) == {"11", "12", "19", "101"} and "first_observation" in meta
    a = by["11"]
    assert (a["state"], a["start"], a["end"], a["managed"]) == ("COMPLETED", NOW + 5, NOW + 65, 1)
    assert json.loads(a["gpu_names"]) == ["node2:0", "node2:1", "node2:2", "node2:3"]  # kept after the end
    assert by["12"]["state"] == "PENDING" and by["12"]["start"] is None
    assert by["19"]["managed"] == 0 and by["101"]["managed"] == 1
    cycles = e.journal.cycles(10)
    assert {x["mode"] for x in cycles} == {"shadow"} and e.journal.last_plan()["order"]
    assert all(x["dry_run"] for x in e.journal.actions())
    status = json.loads((Path(c.state_dir) / "status.json").read_text())
    assert status["mode"] == "shadow"
    e.journal.close()


def test_observer_survives_a_restart_without_rewriting(tmp_path):
    c = cfg(tmp_path)
    fake = cluster([pending("11", "alice", 4)], run=[])
    shadow_runner(c, fake).run_cycle()
    e2 = shadow_runner(c, fake)  # a restarted daemon knows what it recorded
    assert e2.run_cycle().counts["observed_changes"] == 0


def test_service_shadow_forces_dry_run_and_start_shadow_once(tmp_path):
    c = cfg(tmp_path)
    fake = cluster([pending("11", "alice", 1)], run=[])
    def factory(config, **kw):
        return CycleRunner(config, topology=TOPO, **kw)

    svc = Service(config=c, backend=fake, notifier=Notifier(address=""), shadow=True, runner_factory=factory)
    assert svc.config.dry_run and svc.runner.shadow and svc.runner.mode == "shadow"
    assert svc.run_once() == 0 and fake.calls == []
    rows, _ = read_observations(c.state_dir)
    assert [r["job_id"] for r in rows] == ["11"]
    live = Service(config=c, backend=fake, notifier=Notifier(address=""), runner_factory=factory)
    assert live.runner.mode == "live" and not live.config.dry_run
    live._close()


def row(job_id, user, gpus, submit, start, end, names=(), nodes=(), state="COMPLETED", managed=1, limit=3600.0,
        model=None):
    return {"job_id": job_id, "user": user, "partition": "main", "managed": managed, "gpus": gpus, "num_nodes": None,
            "time_limit": limit, "model": model, "submit": submit, "first_seen": submit, "first_cycle": "c",
            "start": start, "end": end, "state": state, "nodes": json.dumps(list(nodes)) if nodes else None,
            "gpu_names": json.dumps(list(names)) if names else None, "last_seen": end or start or submit}


def rows_mix():
    t = 1_000_000.0
    spread = [f"node1:{i}" for i in range(4)] + [f"node3:{i}" for i in range(4)]  # 8 GPUs over two switches
    return [
        row("1", "alice", 8, t, t + 100, t + 1100, spread, ["node1", "node3"], model="bert"),
        row("2", "bob", 1, t + 1, t + 2, t + 602, ["node2:0"], ["node2"]),
        row("3", "carol", 2, t + 2, t + 300, t + 900, (), ["node4"]),  # ended between observations: guessed
        row("4", "carol", 4, t + 3, None, None, state="PENDING"),  # still waiting: left out
        row("5", "bob", 2, t + 4, None, t + 50, state="CANCELLED"),  # cancelled before starting
        row("6", "root", 8, t - 500, t - 400, t + 200, [f"node4:{i}" for i in range(8)], ["node4"], managed=0),
    ]


def test_report_compares_observed_slurm_with_the_replayed_policy():
    rep = sh.build_report(rows_mix(), TOPO, [make_policy("fifo+consolidate")], until=1_000_000.0 + 5000)
    obs, sim = rep.summaries[rep.OBSERVED], rep.summaries["fifo+consolidate"]
    assert rep.counts["compared"] == 3 and rep.counts["unfinished"] == 1 and rep.counts["never_started"] == 1
    assert rep.counts["background"] == 1 and rep.counts["background_gpu_hours"] > 0
    assert rep.guessed == {"3"}
    # Slurm spread the 8-GPU bert job over two switches: the speed model prices that
    assert obs["comm_cost"] > 0 and sim["comm_cost"] < obs["comm_cost"]
    assert obs["avg_wait"] == pytest.approx((100 + 1 + 298) / 3)
    assert sim["avg_wait"] < obs["avg_wait"]  # on an idle replay nothing waits this long
    d = rep.differences()["fifo+consolidate"]
    assert d["avg_jct"]["change"] == pytest.approx(sim["avg_jct"] - obs["avg_jct"])
    assert set(d) >= {"avg_jct", "jain_fairness", "comm_cost"}
    doc = rep.as_json()
    json.dumps(doc)
    assert doc["jobs"]["compared"] == 3 and set(doc["user_mean_wait"]) == {rep.OBSERVED, "fifo+consolidate"}
    assert any("idle cluster" in n for n in doc["notes"]) and any("assumed" in n for n in doc["notes"])
    # a window: only jobs submitted in it
    late = sh.build_report(rows_mix(), TOPO, [make_policy("fifo")], since=1_000_000.0 + 1, until=1_000_000.0 + 5000)
    assert late.counts["compared"] == 2


def test_report_errors(tmp_path):
    with pytest.raises(ShadowError, match="start --shadow"):
        read_observations(tmp_path)
    with pytest.raises(ShadowError, match="no finished job"):
        sh.build_report([row("4", "carol", 4, 1.0, None, None, state="PENDING")], TOPO, [make_policy("fifo")])


def test_write_report_is_all_or_nothing(tmp_path, monkeypatch):
    rep = sh.build_report(rows_mix(), TOPO, [make_policy("fifo+consolidate")], until=1_000_000.0 + 5000)
    files = sh.write_report(rep, tmp_path / "out")
    assert sorted(f.name for f in files) == ["jobs.csv", "report.json", "shadow-report.png"]
    assert (tmp_path / "out" / "shadow-report.png").stat().st_size > 10_000
    lines = (tmp_path / "out" / "jobs.csv").read_text().splitlines()
    assert len(lines) == 1 + 3 + 3 and lines[0].startswith("scheduler,job_id")

    def broken(*_a, **_k):
        raise RuntimeError("disk full")

    monkeypatch.setattr(sh, "plot", broken)
    with pytest.raises(RuntimeError):
        sh.write_report(rep, tmp_path / "out2")
    assert list((tmp_path / "out2").iterdir()) == []


@pytest.mark.slurm
def test_shadow_mode_on_the_lab_then_the_report(clean_lab, tmp_path):
    from tests.daemon.test_daemon_slurm import jobs_now, lab_config_file, ours

    lab = clean_lab
    state = tmp_path / "state"
    conf = lab_config_file(lab, tmp_path, 'policy = "fifo+consolidate"\n')
    c = C.load(conf)
    e = CycleRunner(c)
    e.shadow = True
    ids = []
    # 5 x 8 GPUs and 3 small jobs on 32 GPUs: Slurm's own scheduler makes some of them wait
    for user, gpus, secs in (("alice", 8, 3), ("bob", 8, 3), ("carol", 8, 4), ("alice", 8, 3), ("bob", 8, 2),
                             ("carol", 2, 2), ("alice", 1, 2), ("bob", 4, 3)):
        ids.append(str(lab.submit(user, gpus, script=f"sleep {secs}", extra_args=["--time", "5"])))
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        r = e.run_cycle()
        assert r.ok and r.dry_run, r.error
        jobs = jobs_now(lab)
        for j in ids:  # nothing of the daemon's reaches Slurm
            assert int(jobs[j]["Priority"]) < c.priority_floor and jobs[j].get("ReqNodeList") in (None, "(null)")
        assert ours(lab) == {}
        if all(jobs[j]["JobState"] == "COMPLETED" for j in ids):
            break
        time.sleep(0.4)
    e.run_cycle()
    e.journal.close()
    e._observer.close()
    rows, _ = read_observations(state)
    by = {r["job_id"]: r for r in rows}
    assert set(ids) <= set(by)
    for j in ids:
        assert by[j]["state"] == "COMPLETED" and by[j]["start"] >= by[j]["submit"] and by[j]["end"] >= by[j]["start"]
    seen_running = [j for j in ids if by[j]["gpu_names"]]
    assert len(seen_running) >= 4  # most were caught running, with the GPU indices Slurm gave them
    out = tmp_path / "report"
    p = subprocess.run([sys.executable, "-m", "attentived", "shadow-report", "-c", str(conf), "--out", str(out), "--json"],
                       capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert doc["jobs"]["compared"] >= len(ids)
    assert set(doc["summaries"]) == {"slurm (observed)", "fifo+consolidate"}
    assert doc["summaries"]["slurm (observed)"]["avg_wait"] > 0  # some of them waited in reality
    assert (out / "shadow-report.png").stat().st_size > 10_000 and (out / "report.json").exists()
    p = subprocess.run([sys.executable, "-m", "attentived", "shadow-report", "-c", str(conf)], capture_output=True,
                       text=True, timeout=120, cwd=ROOT)
    assert p.returncode == 0 and "avg JCT" in p.stdout and "wait fairness (Jain)" in p.stdout and "comm cost" in p.stdout
