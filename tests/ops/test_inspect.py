"""The inspection commands' data (ops/inspect.py, ops/explain.py): status and liveness,
queue, explain, decisions, topology --slurm, config check. Fast tests run on the in-memory
Slurm (daemon/testing.py) and the recorded 22.05 mix; the ``slurm`` test runs a real daemon
on the lab and checks every answer against Slurm."""

from __future__ import annotations

import dataclasses
import json
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from attentived.agents.plan import Hold, Plan
from attentived.agents.registry import make_policy
from attentived.agents.state import ClusterState, PendingJob, RunningJob
from attentived.daemon import config as C
from attentived.daemon.cycle import CycleRunner
from attentived.daemon.journal import Journal
from attentived.daemon.records import SlurmPartition
from attentived.daemon.testing import FakeBackend
from attentived.ops import inspect as ins
from attentived.ops.explain import explain
from attentived.ops.lab import Lab
from tests.daemon.test_apply import NOW, TOPO, cluster, pending, running
from tests.daemon.test_snapshot import snapshot22

ROOT = Path(__file__).parents[2]


@pytest.fixture(autouse=True)
def _logs_to_this_tests_stderr():
    """A CliRunner run elsewhere may leave structlog writing to its closed stream."""
    from attentived.daemon import log as dlog

    dlog.configure("warning", "json", stream=sys.stderr)


def cfg(tmp_path, **kw) -> C.Config:
    base: dict[str, Any] = dict(state_dir=str(tmp_path / "state"), partitions=("main",), interval=0.5, metrics_port=0)
    base.update(kw)
    return C.Config(**base)


def mix() -> FakeBackend:
    """Root's blockers hold 7 of 8 GPUs on each node; alice, bob and carol queue 1-4 GPUs; one
    job in partition other, one held."""
    held = dataclasses.replace(pending("20", "bob", 2, t=5), held=True, reason="JobHeldUser", priority=0)
    return cluster([pending("11", "alice", 4), pending("12", "bob", 1, t=1), pending("13", "carol", 2, t=2),
                    pending("14", "alice", 1, t=3), pending("19", "carol", 1, partition="other", t=4), held])


def live(c, fake) -> ins.Live:
    return ins.connect(c, backend=fake, topology=TOPO)


@pytest.fixture
def sleeper():
    """A live process whose command line names attentived (a stand-in for the daemon)."""
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "attentived-test"])
    yield p
    p.kill()
    p.wait()


def write_status(c, **kw):
    path = Path(c.state_dir) / "status.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {"pid": 1, "mode": "live", "policy": "fifo+consolidate", "partitions": ["main"], "interval": c.interval,
           "updated": time.time(), "errors_total": 0, "last_cycle": None}
    doc.update(kw)
    path.write_text(json.dumps(doc))


# ---- status and liveness -------------------------------------------------------------------------


def test_status_without_state_dir_says_so(tmp_path):
    doc = ins.status(cfg(tmp_path), probe=False)
    assert not doc["daemon"]["running"] and not doc["daemon"]["state_dir_exists"]
    assert "does not exist" in doc["daemon"]["reason"] and doc["from_config_only"]


def test_status_after_cycles_reads_heartbeat_journal_and_errors(tmp_path, sleeper):
    c = cfg(tmp_path)
    fake = mix()
    e = CycleRunner(c, backend=fake, topology=TOPO)
    assert e.run_cycle().ok
    fake.snapshot_error = ins.SlurmError("slurm_load_jobs error: Unable to contact slurm controller")
    assert not e.run_cycle().ok
    e.journal.close()
    # the process that wrote status.json (pytest) is not attentived: not running, says why
    doc = ins.status(c, backend=fake)
    assert not doc["daemon"]["running"] and "another program" in doc["daemon"]["reason"]
    assert doc["mode"] == "live" and doc["partitions"] == ["main"] and doc["errors_total"] == 1
    assert doc["recent_errors"][0]["status"] == "slurm" and "Unable to contact" in doc["recent_errors"][0]["error"]
    assert doc["journal"]["cycles"] == 2 and doc["last_ok_cycle"] is not None
    assert doc["slurm"]["reachable"] is False  # the fake still fails its snapshot
    status = json.loads((Path(c.state_dir) / "status.json").read_text())
    write_status(c, **{**status, "pid": sleeper.pid})
    fake.snapshot_error = None
    doc = ins.status(c, backend=fake)
    assert doc["daemon"]["running"] and not doc["daemon"]["stale"] and doc["slurm"]["reachable"]
    json.dumps(doc)


def test_liveness_dead_pid_and_stale_heartbeat(tmp_path, sleeper):
    c = cfg(tmp_path, interval=10, backoff_max=60)
    p = subprocess.Popen([sys.executable, "-c", "pass", "attentived"])
    p.wait()
    write_status(c, pid=p.pid)
    d = ins.daemon_state(c)
    assert not d["running"] and f"process {p.pid} is gone" in d["reason"]
    write_status(c, pid=sleeper.pid, updated=time.time() - 200)  # > max(3 x 10, 60 + 10)
    d = ins.daemon_state(c)
    assert d["running"] and d["stale"] and "no cycle for" in d["reason"]
    write_status(c, pid=sleeper.pid, updated=time.time() - 30)
    assert not ins.daemon_state(c)["stale"]
    (Path(c.state_dir) / "status.json").write_text("{not json")
    assert "unreadable" in ins.daemon_state(c)["reason"]


def test_parse_time():
    now = 1_000_000.0
    assert ins.parse_time("30m", now) == now - 1800
    assert ins.parse_time("2h", now) == now - 7200 and ins.parse_time("1.5d", now) == now - 1.5 * 86400
    assert ins.parse_time("now", now) == now and ins.parse_time("1795990580", now) == 1795990580.0
    assert ins.parse_time("2026-11-29T22:00", now) == ins.parse_time("2026-11-29 22:00:00", now)
    with pytest.raises(ValueError, match="not a time"):
        ins.parse_time("yesterday", now)


def test_journal_readonly_never_creates_anything(tmp_path):
    with pytest.raises(FileNotFoundError):
        Journal.open_readonly(tmp_path / "nothing" / "journal.sqlite")
    assert not (tmp_path / "nothing").exists()
    with pytest.raises(ins.InspectError, match="does not exist") as ei:
        ins.open_journal(cfg(tmp_path))
    assert ei.value.code == 1 and not (tmp_path / "state").exists()
    (tmp_path / "state").mkdir()
    with pytest.raises(ins.InspectError, match="no decision journal"):
        ins.open_journal(cfg(tmp_path))
    j = Journal.in_state_dir(tmp_path / "state")
    j.record_cycle("c1", started=1.0, duration=0.1, policy="fifo", mode="live", status="ok")
    j.close()
    r = Journal.open_readonly(tmp_path / "state" / "journal.sqlite")
    assert [c["cycle_id"] for c in r.cycles_between()] == ["c1"]
    with pytest.raises(sqlite3.OperationalError, match="readonly"):
        r._tx([("DELETE FROM cycles", ())])
    r.close()


# ---- queue ------------------------------------------------------------------------------------------


def test_queue_is_the_plan_with_scores_projection_and_slurms_view(tmp_path):
    c = cfg(tmp_path)
    fake = mix()
    fake.jobs["12"] = dataclasses.replace(fake.jobs["12"], priority=50)  # Slurm's own favourite
    doc = ins.queue(c, live(c, fake))
    plan = make_policy("fifo+consolidate").decide(live(c, fake).state)
    assert [r["job"] for r in doc["jobs"]] == list(plan.order) == ["11", "12", "13", "14"]
    assert {r["job"]: r["action"] for r in doc["jobs"]} == {"11": "hold", "12": "wait", "13": "wait", "14": "wait"}
    hold = plan.holds[0]
    assert doc["jobs"][0]["expected_start"] == hold.expected_start
    assert all(r["score_label"].startswith("waited") for r in doc["jobs"])
    assert doc["jobs"][0]["score"] > doc["jobs"][1]["score"]  # FIFO: the longest wait first
    assert doc["slurm_next"][0] == "12" and doc["jobs"][1]["slurm_rank"] == 1
    assert doc["not_managed"] == {"other_partitions": 1, "ineligible": 1, "no_gpu": 0}
    assert doc["free_gpus"] == 4 and doc["pending"] == 4 and not doc["daemon"]["running"]
    json.dumps(doc)


def test_queue_starts_have_gpus_now_and_empty_queue_is_an_answer(tmp_path):
    c = cfg(tmp_path)
    fake = cluster([pending("11", "alice", 1), pending("12", "bob", 1, t=1)], run=[])
    doc = ins.queue(c, live(c, fake))
    assert [r["action"] for r in doc["jobs"]] == ["start", "start"]
    assert all(r["expected_start"] == NOW and len(r["planned_gpus"]) == 1 for r in doc["jobs"])
    empty = ins.queue(c, live(c, cluster([])))
    assert empty["jobs"] == [] and empty["pending"] == 0


def test_projection_follows_plan_order_and_time_limits():
    state = ClusterState(
        now=0.0, topology=TOPO, free=np.zeros(32, bool),
        pending=(PendingJob("a", "u", 8, -10, time_limit=100), PendingJob("b", "u", 8, -5, time_limit=100),
                 PendingJob("c", "u", 4, -1, time_limit=None), PendingJob("d", "u", 1, 0, time_limit=10)),
        running=tuple(RunningJob(f"r{i}", "x", tuple(range(8 * i, 8 * i + 8)), -50, -50, 100 + 50 * i)
                      for i in range(4)))
    plan = Plan(order=("a", "b", "c", "d"), holds=(Hold("a", tuple(range(8)), 50.0),))
    proj = ins.project(plan, state, make_policy("fifo+consolidate").placer)
    assert proj["a"][0] == 50.0 and proj["b"][0] == 100.0 and proj["c"][0] == 150.0
    assert proj["d"][0] == 150.0  # strict order: never before a job ahead of it
    assert "d" in proj and len(proj["d"][1]) == 1


def test_scores_for_each_heuristic(tmp_path):
    st = live(cfg(tmp_path), mix()).state
    for name, prefix in (("fifo", "waited"), ("sjf", "est. run"), ("fair-share", "alice served"),
                         ("tiresias", "LAS queue"), ("slurm", "priority")):
        s = ins.scores(make_policy(name), st)
        assert set(s) == {"11", "12", "13", "14"}, name
        assert any(label.startswith(prefix) for _, label in s.values()), (name, s)


# ---- explain --------------------------------------------------------------------------------------


def test_explain_pending_heuristic_job(tmp_path):
    c = cfg(tmp_path)
    fake = cluster([pending("11", "alice", 4), pending("12", "bob", 2, t=1), pending("13", "alice", 1, t=2)],
                   run=[running("101", "root", "node1", range(7)), running("102", "root", "node2", range(4), limit=600)])
    doc = explain(c, "12", live(c, fake))
    assert doc["status"] == "pending" and doc["rank"] == 2 and doc["of"] == 3 and doc["probability"] is None
    assert doc["decision"]["action"] == "start" and doc["placement"]["source"] == "plan start"
    assert doc["placement"]["spread"] == {"islands": 1, "nodes": 1, "switches": 1}
    assert doc["competing"][0]["job"] == "11" and "waited" in doc["competing"][0]["relation"]
    # alternatives come from the other placers on the same free GPUs, each priced by the speed model
    assert doc["alternatives"] and all(o["slowdown"] >= doc["placement"]["slowdown"] - 1e-9 for o in doc["alternatives"])
    f = doc["fairness"]
    assert f["user"] == "bob" and f["user_pending_jobs"] == 1 and f["others_pending_jobs"] == 2
    assert 0 < f["jain_pending_waits"] <= 1 and f["users"] >= 3
    assert doc["slurm"]["rank"] == 2 and "is #2 of 3" in doc["summary"]
    json.dumps(doc)


def test_explain_running_other_partition_held_unknown_and_malformed(tmp_path):
    c = cfg(tmp_path)
    fake = mix()
    lv = live(c, fake)
    run = explain(c, "101", lv)
    assert run["status"] == "running" and run["job"]["nodes"] == ["node1"] and len(run["job"]["gpus_used"]) == 7
    other = explain(c, "19", lv)
    assert other["status"] == "not managed" and "partition other is not managed" in other["summary"]
    held = explain(c, "20", lv)
    assert held["status"] == "not managed" and "JobHeldUser" in held["summary"]
    with pytest.raises(ins.InspectError, match="unknown to Slurm") as ei:
        explain(c, "999", lv)
    assert ei.value.code == 1
    with pytest.raises(ins.InspectError, match="not a Slurm job id") as ei:
        explain(c, "12;rm", lv)
    assert ei.value.code == 2


def test_explain_job_only_the_journal_remembers(tmp_path):
    c = cfg(tmp_path)
    fake = cluster([pending("11", "alice", 1)], run=[])
    e = CycleRunner(c, backend=fake, topology=TOPO)
    assert e.run_cycle().ok
    e.journal.close()
    del fake.jobs["11"]
    doc = explain(c, "11", live(c, fake))
    assert doc["status"] == "gone" and doc["journal"]["placement"]["planned_gpus"]


def test_explain_attentive_gives_probability_attention_and_candidates(tmp_path):
    c = cfg(tmp_path, policy="attentive")
    fake = cluster([pending("11", "alice", 4), pending("12", "bob", 2, t=1), pending("13", "carol", 1, t=2),
                    pending("14", "alice", 8, t=3)],
                   run=[running("101", "root", "node1", range(6)), running("102", "root", "node2", range(2))])
    doc = explain(c, "12", live(c, fake))
    assert doc["learned"] and doc["policy"] == "attentive"
    assert 0 < doc["probability"] <= 1 and doc["top_jobs"]
    assert doc["competing"] and all(0 <= x["attention"] <= 1 for x in doc["competing"])
    assert {x["job"] for x in doc["competing"]} <= {"11", "13", "14"}
    assert doc["placement"]["source"] == "agent" and len(doc["placement"]["gpus"]) == 2
    q = ins.queue(c, live(c, fake))
    assert any(r["score_label"].startswith("p=") for r in q["jobs"])
    json.dumps(doc)


def test_explain_on_the_recorded_22_05_mix(tmp_path):
    """The recorded 22.05 outputs (tests/daemon/fixtures): held, pinned, multi-node jobs."""
    c = cfg(tmp_path)
    snap = snapshot22()
    fake = FakeBackend.from_snapshot(snap)
    scenario = json.loads((Path(__file__).parent.parent / "daemon" / "fixtures" / "slurm-22.05" / "scenario.json").read_text())["jobs"]
    lv = live(c, fake)
    pinned = explain(c, str(scenario["pinned"]), lv)
    assert pinned["status"] == "pending" and "own node constraints" in pinned["summary"]
    multi = explain(c, str(scenario["multi"]), lv)
    assert multi["job"]["nodes_requested"] == 2 and multi["rank"] >= 1
    held = explain(c, str(scenario["held"]), lv)
    assert held["status"] == "not managed" and "JobHeldUser" in held["summary"]
    q = ins.queue(c, lv)
    assert {r["job"] for r in q["jobs"]} == {"8", "9", "12", "13"}
    assert next(r for r in q["jobs"] if r["job"] == "12")["constrained"]


# ---- decisions ------------------------------------------------------------------------------------


def test_decisions_cycles_actions_and_one_jobs_history(tmp_path):
    c = cfg(tmp_path)
    fake = mix()
    e = CycleRunner(c, backend=fake, topology=TOPO)
    r1 = e.run_cycle()
    fake.finish("101")
    r2 = e.run_cycle()
    e.journal.close()
    doc = ins.decisions(c)
    assert [x["cycle_id"] for x in doc["cycles"]] == [r2.cycle_id, r1.cycle_id]
    assert {a["kind"] for a in doc["actions"]} >= {"priority", "pin"}  # a 4-GPU hold: pinned, no whole-node reservation
    assert all(a["ok"] and not a["dry_run"] for a in doc["actions"])
    one = ins.decisions(c, job="11")
    assert one["plans"] and one["plans"][0]["rank"] == 1 and all(a["job"] == "11" for a in one["actions"])
    later = ins.decisions(c, since=time.time() + 60)
    assert later["cycles"] == [] and later["actions"] == []
    with pytest.raises(ins.InspectError, match="not in the journal") as ei:
        ins.decisions(c, job="4242")
    assert ei.value.code == 1
    with pytest.raises(ins.InspectError) as ei:
        ins.decisions(c, job="abc")
    assert ei.value.code == 2
    with pytest.raises(ins.InspectError, match="does not exist") as ei:
        ins.decisions(cfg(tmp_path / "elsewhere"))
    assert ei.value.code == 1


# ---- topology and config check ----------------------------------------------------------------------


def test_topology_live_marks_used_gpus_and_their_jobs(tmp_path):
    c = cfg(tmp_path)
    fake = mix()
    fake.nodes["node4"] = dataclasses.replace(fake.nodes["node4"], state="DRAINED")
    doc = ins.topology_live(c, live(c, fake))
    n1 = next(n for n in doc["nodes"] if n["name"] == "node1")
    assert n1["used"] == list(range(7)) and n1["free"] == [7] and n1["jobs"][0]["job"] == "101"
    assert doc["unusable_nodes"]["node4"].startswith("DRAINED") and doc["free_gpus"] == 3 and doc["used_gpus"] == 28
    json.dumps(doc)


def test_config_check(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text('intervall = 5\n')
    with pytest.raises(ins.InspectError, match="did you mean 'interval'") as ei:
        ins.config_check(bad)
    assert ei.value.code == 2
    with pytest.raises(ins.InspectError, match="no such config file") as ei:
        ins.config_check(tmp_path / "missing.toml")
    assert ei.value.code == 2
    good = tmp_path / "good.toml"
    good.write_text(f'partitions = ["main", "nope"]\nstate_dir = "{tmp_path / "s"}"\ncluster_file = "{tmp_path / "c.toml"}"\n')
    fake = mix()
    fake._config = {**fake._config, "SchedulerType": "sched/backfill", "AccountingStorageType": "accounting_storage/none",
                    "JobCompType": "jobcomp/filetxt", "JobCompLoc": "/var/log/slurm/jobcomp.txt"}
    doc = ins.config_check(good, backend=fake)
    by = {x["check"]: x for x in doc["checks"]}
    assert not doc["ok"]
    assert by["SchedulerType"]["level"] == "warning" and by["PriorityType"]["level"] == "ok"
    assert by["partitions"]["level"] == "error" and "nope" in by["partitions"]["message"]
    assert by["topology"]["level"] == "error" and by["accounting"]["level"] == "info"
    assert by["state_dir"]["level"] == "info"  # created by the daemon
    offline = ins.config_check(good, slurm=False)
    assert offline["ok"] and not offline["slurm_checked"]
    # a topology.yaml whose default topology is not modelled: planned as one switch, said so
    etc = Lab(run_dir=tmp_path / "lab").render()
    ring = etc / "topology.yaml"
    ring.write_text("- topology: r\n  ring:\n    rings:\n      - ring: r1\n        nodes: node[1-4]\n")
    yaml_conf = tmp_path / "yaml.toml"
    yaml_conf.write_text(f'partitions = ["main"]\nstate_dir = "{tmp_path / "s"}"\ngres_conf = "{etc / "gres.conf"}"\n'
                         f'topology_conf = "{ring}"\n')
    by = {x["check"]: x for x in ins.config_check(yaml_conf, backend=fake)["checks"]}
    assert by["topology"]["level"] == "warning" and "1 leaf switches" in by["topology"]["message"]
    assert by["topology"]["message"].endswith("ring topologies are not modelled: planned as one switch")


# ---- the real Slurm ------------------------------------------------------------------------------


def _cli(*args, timeout=120):
    return subprocess.run([sys.executable, "-m", "attentived", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT)


@pytest.mark.slurm
def test_inspection_against_a_running_daemon_on_the_lab(clean_lab, tmp_path):
    from tests.daemon.test_daemon_slurm import (
        busy_cluster,
        jobs_now,
        lab_config_file,
        wait_until,
    )

    lab = clean_lab
    state = tmp_path / "state"
    conf = lab_config_file(lab, tmp_path)
    busy_cluster(lab)  # 7 of 8 GPUs per node held by root
    ids = {}
    for name, user, gpus in (("A", "alice", 2), ("B", "bob", 1), ("C", "carol", 4), ("D", "alice", 1)):
        ids[name] = str(lab.submit(user, gpus, script="sleep 600", name=name, extra_args=["--time", "30"]))
    daemon = subprocess.Popen([sys.executable, "-m", "attentived", "start", "--config", str(conf)], cwd=ROOT,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        wait_until(lambda: (state / "status.json").exists(), timeout=30, what="first cycle")
        r = _cli("status", "-c", str(conf), "--json")
        assert r.returncode == 0, r.stderr
        st = json.loads(r.stdout)
        assert st["daemon"]["running"] and st["daemon"]["pid"] == daemon.pid and st["mode"] == "live"
        assert st["slurm"]["reachable"] and st["partitions"] == ["main"] and st["policy"] == "fifo+consolidate"
        # the daemon has set Slurm's priorities in its plan order: the queue shows both, agreeing
        wait_until(lambda: all(int(jobs_now(lab)[j]["Priority"]) >= 1_000_000 for j in ids.values()), timeout=20,
                   what="priorities set")
        q = json.loads(_cli("queue", "-c", str(conf), "--json").stdout)
        order = [r["job"] for r in q["jobs"]]
        assert order == [ids[k] for k in "ABCD"]
        assert [r["slurm_rank"] for r in q["jobs"]] == [1, 2, 3, 4] and q["daemon"]["running"]
        prio = {j: int(v["Priority"]) for j, v in jobs_now(lab).items()}
        assert [prio[j] for j in order] == sorted((prio[j] for j in order), reverse=True)
        # explain: rank, competing jobs, fairness; the held job's GPUs are the reservation's nodes
        ex = json.loads(_cli("explain", ids["C"], "-c", str(conf), "--json").stdout)
        assert ex["rank"] == 3 and ex["job"]["user"] == "carol" and ex["fairness"]["user"] == "carol"
        assert {c["job"] for c in ex["competing"]} == {ids["A"], ids["B"]}
        r = _cli("explain", "987654", "-c", str(conf))
        assert r.returncode == 1 and "unknown to Slurm" in r.stderr
        d = json.loads(_cli("decisions", "-c", str(conf), "--json", "--job", ids["A"]).stdout)
        assert d["plans"] and all(a["job"] == ids["A"] for a in d["actions"]) and d["actions"]
        topo = json.loads(_cli("topology", "--slurm", "-c", str(conf), "--json").stdout)
        assert topo["used_gpus"] >= 28 and {n["name"] for n in topo["nodes"]} == set(lab.node_names())
        r = _cli("topology", "--slurm", "-c", str(conf))
        assert r.returncode == 0 and "node1" in r.stdout and "jobs on GPUs" in r.stdout
        r = _cli("config", "check", str(conf))
        assert r.returncode == 0 and "ready" in r.stdout and "SchedulerType" in r.stdout
        for cmd in (["status"], ["queue"], ["explain", ids["A"]], ["decisions"]):
            r = _cli(*cmd, "-c", str(conf))
            assert r.returncode == 0 and r.stdout.strip(), (cmd, r.stderr)
    finally:
        daemon.terminate()
        daemon.wait(timeout=30)
    r = _cli("status", "-c", str(conf))
    assert r.returncode == 3 and "not running" in r.stdout


def test_a_stalled_start_is_explained_and_in_status(tmp_path):
    """A planned start Slurm evaluated and refused: the next cycle keeps the job off those
    nodes, `status` warns and `explain` says why (in-memory Slurm; live: test_safety_slurm)."""
    c = cfg(tmp_path)
    fake = cluster([pending("1", "alice", 1)], run=[running("100", "root", "node1", range(6))])
    e = CycleRunner(c, backend=fake, topology=TOPO)
    first = e.run_cycle()
    (start,) = first.plan_doc["starts"]
    pinned = fake.jobs["1"]
    assert pinned.required_nodes == tuple(start["nodes"])
    fake.now = (fake.now or time.time()) + 5
    fake.jobs["1"] = dataclasses.replace(pinned, reason="Resources", last_evaluated=fake.now)  # Slurm refused it
    second = e.run_cycle()
    assert [s["job"] for s in second.plan_doc["stalls"]] == ["1"]
    assert not any(s["job"] == "1" and s["nodes"] == start["nodes"] for s in second.plan_doc["starts"])
    assert any("job 1: planned start on" in w for w in e.status()["warnings"])
    e.journal.close()
    doc = explain(c, "1", ins.connect(c, backend=fake, topology=TOPO))
    assert "did not happen (Slurm: Resources)" in doc["summary"] and doc["journal"]["stall"]["nodes"] == start["nodes"]


def test_explain_says_which_reservation_ahead_keeps_a_job_off_its_nodes(tmp_path):
    """node2's maintenance begins in two minutes: the 30-minute job is kept off it, and
    `explain` names the reservation, its nodes and when it begins."""
    from attentived.daemon.records import SlurmReservation
    c = cfg(tmp_path)
    fake = cluster([pending("1", "alice", 1, time_limit=1800)], run=[running("100", "root", "node1", range(6))])
    fake.reservations["maint"] = SlurmReservation("maint", ("node2",), ("root",), flags=("MAINT",),
                                                  start_time=NOW + 120, end_time=NOW + 720)
    doc = explain(c, "1", live(c, fake))
    assert doc["decision"]["action"] == "start" and "node2" not in doc["placement"]["nodes"]
    assert "its time limit reaches reservation maint (on node2, from " in doc["summary"], doc["summary"]
    assert "keeps it off those nodes" in doc["summary"]


def test_explain_says_when_slurm_will_allocate_more_memory_than_asked(tmp_path):
    """Where Slurm allocates memory, a job asking none gets whole nodes; with the cluster's
    DefMemPerGPU it gets that per GPU. `explain` shows the job as planned, and says why."""
    c = cfg(tmp_path)
    for job_defaults, want in (("(null)", (True, None, "CR_*_Memory")),
                               ("DefMemPerGPU=4096,DefCpuPerGPU=3", (False, 4096, "DefMemPerGPU"))):
        plain = cluster([pending("1", "alice", 1)])
        fake = FakeBackend.from_snapshot(plain.snapshot(), config={
            **plain.config(), "SelectTypeParameters": "CR_CORE_MEMORY", "JobDefaults": job_defaults})
        doc = explain(c, "1", live(c, fake))
        assert (doc["job"]["exclusive"], doc["job"]["mem_per_gpu"]) == want[:2]
        assert want[2] in doc["job"]["memory_from"]
        assert (doc["job"]["cpus"], "cpus_from" in doc["job"]) == ((3, True) if "Cpu" in job_defaults else (0, False))
    doc = explain(c, "1", live(c, cluster([pending("1", "alice", 1)])))
    assert "memory_from" not in doc["job"] and doc["job"]["exclusive"] is False
    plain = cluster([pending("1", "alice", 2)])
    fake = FakeBackend.from_snapshot(plain.snapshot(), partitions=[
        SlurmPartition("main", default=True, job_defaults="DefCpuPerGPU=3", select_type="CR_CORE_MEMORY")],
        config={**plain.config(), "SelectTypeParameters": "CR_CORE"})
    doc = explain(c, "1", live(c, fake))
    assert (doc["job"]["cpus"], doc["job"]["exclusive"]) == (6, True)
    assert doc["job"]["cpus_from"].startswith("partition main's DefCpuPerGPU"), doc["job"]
    assert "(partition main's CR_*_Memory)" in doc["job"]["memory_from"], doc["job"]
    plain = cluster([pending("1", "alice", 2, mem_per_gpu=2048, mem_per_cpu=500)])
    fake = FakeBackend.from_snapshot(plain.snapshot(), config={**plain.config(), "SelectTypeParameters": "CR_CORE_MEMORY"})
    doc = explain(c, "1", live(c, fake))
    assert "replaces a default" in doc["job"]["memory_from"] and not doc["job"]["mem_per_cpu"]
