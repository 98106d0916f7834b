"""``attentived demo``: the workload builder, the job script's placement reading, the
measurement from Slurm's records (fast, no Slurm), and one short real demo on the lab
(marker ``slurm``)."""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
from pathlib import Path

import numpy as np
import pytest

from attentived.ops.demo.jobscript import job_script, parse_job_output
from attentived.ops.demo.measure import (
    Allocations,
    LiveClocks,
    _alloc_from_output,
    extra_metrics,
    mean_summary,
    measure,
    predict,
    summary_of,
)
from attentived.ops.demo.runs import (
    EXIT_BAD_INPUT,
    EXIT_INTERRUPTED,
    EXIT_UNSUPPORTED,
    FALLBACK_POLICY,
    RUN_TITLES,
    Demo,
    DemoError,
    DemoOptions,
    DemoResult,
    RunResult,
    check_policy,
    default_policy,
    model_identity,
    run_demo,
)
from attentived.ops.demo.workload import (
    DEMO_USERS,
    JOB_PREFIX,
    Workload,
    build_workload,
    demo_topology,
    placement_signature,
    slowdown_table,
)
from attentived.simulator.engine import JobRecord
from attentived.simulator.metrics import summarize
from attentived.topology.speed import SpeedModel

TOPO = demo_topology()
SPEED = SpeedModel(TOPO)


# ---- the workload ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def workload() -> Workload:
    return build_workload(40, 3, None, 0)


def test_workload_shape(workload):
    jobs = workload.jobs
    assert len(jobs) == 40
    assert {j.user for j in jobs} <= set(DEMO_USERS)
    assert [j.index for j in jobs] == list(range(40))
    assert len({j.name for j in jobs}) == 40 and all(j.name.startswith(JOB_PREFIX) for j in jobs)
    submits = [j.submit for j in jobs]
    assert submits[0] == 0 and submits == sorted(submits)
    for j in jobs:
        assert 1 <= j.num_gpus <= 16
        assert j.num_gpus % j.num_nodes == 0 and j.num_gpus // j.num_nodes <= 8
        assert j.num_nodes == max(1, -(-j.num_gpus // 8))
        assert 4.0 <= j.duration <= 40.0
        assert j.time_limit % 60 == 0 and j.time_limit >= j.duration * j.worst_slowdown + 30
        assert bool(j.slowdowns) == (j.num_gpus > 1)
        assert j.model in SPEED.profiles
    # multi-GPU jobs are kept, 1-GPU jobs never outnumber them
    assert sum(j.num_gpus > 1 for j in jobs) >= sum(j.num_gpus == 1 for j in jobs)
    assert workload.offered_load == pytest.approx(1.6, rel=1e-3)
    assert workload.window_hours[0] <= workload.window_hours[1]


def test_workload_is_deterministic_and_seeded(workload):
    again = build_workload(40, 3, None, 0)
    assert again == workload
    other = build_workload(40, 3, None, 1)
    assert [j.trace_id for j in other.jobs] != [j.trace_id for j in workload.jobs]


def test_workload_users_and_time_scale():
    one = build_workload(12, 1, None, 3)
    assert {j.user for j in one.jobs} == {"alice"}
    two = build_workload(12, 2, None, 3)
    assert {j.user for j in two.jobs} <= {"alice", "bob"}
    # the busiest tenant goes to alice
    tenants = [j.tenant for j in two.jobs]
    busiest = min(set(tenants), key=lambda t: (-tenants.count(t), t))
    assert all(j.user == "alice" for j in two.jobs if j.tenant == busiest)
    slow = build_workload(12, 3, 100.0, 3)
    fast = build_workload(12, 3, 200.0, 3)
    assert [j.trace_id for j in slow.jobs] == [j.trace_id for j in fast.jobs]
    for a, b in zip(slow.jobs, fast.jobs):
        if 8.0 < a.duration < 40.0:  # neither clipped
            assert b.duration == pytest.approx(a.duration / 2, abs=0.02)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"num_jobs": 0}, "--jobs"),
        ({"users": 4}, "--users"),
        ({"users": 0}, "--users"),
        ({"time_scale": 0.0}, "--time-scale"),
        ({"time_scale": float("nan")}, "--time-scale"),
        ({"seed": -1}, "--seed"),
        ({"load": 0.0}, "--load"),
        ({"load": float("inf")}, "--load"),
    ],
)
def test_workload_bad_options(kwargs, message):
    with pytest.raises(ValueError, match=message):
        build_workload(**kwargs)


def test_sim_jobs_match_the_workload(workload):
    sims = workload.sim_jobs()
    for s, j in zip(sims, workload.jobs):
        assert (s.job.job_id, s.job.user, s.job.num_gpus, s.job.submit_time, s.job.duration) == (
            j.name, j.user, j.num_gpus, j.submit, j.duration)
        assert s.time_limit == j.time_limit and s.model == j.model


# ---- placement signatures and slowdown tables -----------------------------------------------------


def _random_placement(rng, gpus: int, nodes: int) -> list[int]:
    per = gpus // nodes
    chosen = rng.choice(len(TOPO.nodes), size=nodes, replace=False)
    out = []
    for n in chosen:
        local = rng.choice(8, size=per, replace=False)
        out += [TOPO.gpu_id(TOPO.nodes[int(n)].name, int(i)) for i in local]
    return out


@pytest.mark.parametrize("model", ["bert", "cifar10", "yolov3", "imagenet", "deepspeech2"])
@pytest.mark.parametrize("gpus, nodes", [(2, 1), (3, 1), (4, 1), (6, 1), (8, 1), (12, 2), (16, 2), (4, 2)])
def test_slowdown_table_prices_every_placement(model, gpus, nodes):
    table = slowdown_table(TOPO, SPEED, model, gpus, nodes)
    rng = np.random.default_rng(gpus * 100 + nodes)
    for _ in range(60):
        placement = _random_placement(rng, gpus, nodes)
        sig = placement_signature(TOPO, placement)
        assert sig in table, (sig, sorted(table))
        assert table[sig] == pytest.approx(SPEED.slowdown(model, placement), abs=1e-4)


def test_signatures():
    g = TOPO.gpu_id
    assert placement_signature(TOPO, [g("node1", 0), g("node1", 1)]) == "1:2+0"
    assert placement_signature(TOPO, [g("node2", 3), g("node2", 4)]) == "1:1+1"
    assert placement_signature(TOPO, [g("node1", i) for i in range(6)]) == "1:4+2"
    both = [g(n, i) for n in ("node1", "node3") for i in range(8)]
    assert placement_signature(TOPO, both) == "2:4+4,4+4"
    same = [g(n, i) for n in ("node3", "node4") for i in range(8)]
    assert placement_signature(TOPO, same) == "1:4+4,4+4"
    assert slowdown_table(TOPO, SPEED, "bert", 2, 1)["1:2+0"] == 1.0


# ---- the job script, with a stand-in scontrol ------------------------------------------------------

# what `scontrol -o -d show job` printed on the lab (Slurm 22.05.8) for a 12-GPU job
SHOW_JOB_12 = (
    "JobId=3 JobName=demo-003 UserId=bob(1002) GroupId=bob(1002) JobState=RUNNING Reason=None "
    "NodeList=node[1-2] BatchHost=node1 NumNodes=2 NumCPUs=2 NumTasks=2 CPUs/Task=1 "
    "TRES=cpu=2,node=2,billing=2 JOB_GRES=gpu:h100:12   Nodes=node1 CPU_IDs=1 Mem=0 "
    "GRES=gpu:h100:6(IDX:2-7)   Nodes=node2 CPU_IDs=0 Mem=0 GRES=gpu:h100:6(IDX:0-5) MinCPUsNode=1 "
    "Features=(null) Comment=model=bert TresPerNode=gres:gpu:6"
)
SHOW_JOB_16 = (
    "JobId=7 JobName=demo-007 UserId=bob(1002) JobState=RUNNING NodeList=node[3-4] NumNodes=2 "
    "JOB_GRES=gpu:h100:16   Nodes=node[3-4] CPU_IDs=0 Mem=0 GRES=gpu:h100:8(IDX:0-7) MinCPUsNode=1"
)
SHOW_JOB_3 = (
    "JobId=9 JobName=demo-009 JobState=RUNNING NodeList=node2 NumNodes=1 JOB_GRES=gpu:h100:3   "
    "Nodes=node2 CPU_IDs=0 Mem=0 GRES=gpu:h100:3(IDX:3-4,6) MinCPUsNode=1"
)


def _run_job_script(tmp_path: Path, show_job: str, table: str, env: dict[str, str] | None = None) -> dict:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    fake = bin_dir / "scontrol"
    fake.write_text(textwrap.dedent(f"""\
        #!/bin/bash
        if [ "$1" = show ] && [ "$2" = hostnames ]; then
            case "$3" in
                "node[1-2]") printf 'node1\\nnode2\\n';;
                "node[3-4]") printf 'node3\\nnode4\\n';;
                *) echo "$3";;
            esac
            exit 0
        fi
        [ -n "{show_job}" ] || exit 1
        echo '{show_job}'
        """))
    fake.chmod(0o755)
    script = tmp_path / "job.sh"
    script.write_text(job_script(TOPO))
    full_env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "SLURM_JOB_ID": "3", **(env or {})}
    out = subprocess.run(["bash", str(script), "0", table], env=full_env, capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    return parse_job_output(out.stdout)


def test_job_script_reads_scontrol(tmp_path):
    g = TOPO.gpu_id
    twelve = [g("node1", i) for i in range(2, 8)] + [g("node2", i) for i in range(6)]
    table = slowdown_table(TOPO, SPEED, "bert", 12, 2)
    info = _run_job_script(tmp_path, SHOW_JOB_12, " ".join(f"{k}={v:g}" for k, v in table.items()))
    assert info["sig"] == placement_signature(TOPO, twelve) == "1:4+2,4+2"
    assert info["known"] and info["done"] and info["source"] == "scontrol"
    assert info["slowdown"] == pytest.approx(SPEED.slowdown("bert", twelve), abs=1e-4)
    assert _alloc_from_output(info) == {"node1": (2, 3, 4, 5, 6, 7), "node2": (0, 1, 2, 3, 4, 5)}

    info = _run_job_script(tmp_path, SHOW_JOB_16, "1:4+4,4+4=1.1 2:4+4,4+4=1.3")
    assert info["sig"] == "1:4+4,4+4" and info["slowdown"] == 1.1

    three = [g("node2", 3), g("node2", 4), g("node2", 6)]
    info = _run_job_script(tmp_path, SHOW_JOB_3, "1:3+0=1 1:2+1=1.5")
    assert info["sig"] == placement_signature(TOPO, three) == "1:2+1"
    assert info["slowdown"] == 1.5


def test_job_script_falls_back_to_the_environment(tmp_path):
    info = _run_job_script(tmp_path, "", "1:2+0=1 1:1+1=1.2",
                           {"SLURM_JOB_NODELIST": "node4", "CUDA_VISIBLE_DEVICES": "3,4"})
    assert info["source"] == "env" and info["sig"] == "1:1+1" and info["slowdown"] == 1.2
    # a 1-GPU job has no table: slowdown 1
    info = _run_job_script(tmp_path, "", "", {"SLURM_JOB_NODELIST": "node1", "CUDA_VISIBLE_DEVICES": "5"})
    assert info["sig"] == "1:1+0" and info["slowdown"] == 1.0 and info["known"]


# ---- measuring from Slurm's records ------------------------------------------------------------------


def _squeue_doc(workload: Workload, t0: int, *, v24: bool = False, shift: float = 1.0) -> tuple[str, dict]:
    """A ``squeue --json -t all`` document as Slurm 22.05 (or 24.11) prints it once every job of
    ``workload`` ran on the lowest free GPUs, each ``shift`` s late, plus root's warm-up job."""
    def num(v):
        return {"set": True, "infinite": False, "number": v} if v24 else v

    jobs = [{"job_id": num(1), "name": "warmup", "user_name": "root", "job_state": ["COMPLETED"] if v24 else "COMPLETED",
             "nodes": "node1", "node_count": num(1), "tres_per_node": "gres/gpu:1" if v24 else "gres:gpu:1",
             "submit_time": num(t0 - 5), "start_time": num(t0 - 4), "end_time": num(t0 - 4), "gres_detail": []}]
    live_idx = {}
    free = {n.name: list(range(8)) for n in TOPO.nodes}
    for k, j in enumerate(workload.jobs):
        per = j.num_gpus // j.num_nodes
        nodes = [n for n in free if len(free[n]) >= per][: j.num_nodes]
        idx = {n: tuple(free[n][:per]) for n in nodes}
        free = {n: list(range(8)) for n in free}  # jobs are sequential in this record: all free again
        live_idx[j.name] = idx
        start = t0 + int(j.submit) + int(shift)
        end = start + int(round(j.duration))
        jobs.append({
            "job_id": num(k + 2), "name": j.name, "user_name": j.user,
            "job_state": ["COMPLETED"] if v24 else "COMPLETED", "nodes": ",".join(nodes),
            "node_count": num(j.num_nodes), "tres_per_node": f"gres{'/' if v24 else ':'}gpu:{per}",
            "submit_time": num(t0 + int(j.submit)), "start_time": num(start), "end_time": num(end),
            "time_limit": num(int(j.time_limit // 60)), "comment": f"model={j.model}", "gres_detail": [],
        })
    return json.dumps({"meta": {}, "errors": [], "jobs": jobs}), live_idx


@pytest.mark.parametrize("v24", [False, True])
def test_measure_builds_records_from_slurm(v24):
    w = build_workload(10, 3, None, 2)
    t0 = 1_800_000_000
    raw, idx = _squeue_doc(w, t0, v24=v24)
    allocs = Allocations()
    allocs.by_name.update(idx)
    m = measure(raw, w, TOPO, t0, allocs)
    assert not m.missing and set(m.states.values()) == {"COMPLETED"}
    assert len(m.records) == 10 and "warmup" not in m.states
    by = {r.job_id: r for r in m.records}
    doc = json.loads(raw)
    for rec in doc["jobs"][1:]:
        r = by[rec["name"]]
        get = (lambda v: v["number"]) if v24 else (lambda v: v)
        assert r.submit_time == get(rec["submit_time"]) - t0
        assert r.start_time == get(rec["start_time"]) - t0 and r.end_time == get(rec["end_time"]) - t0
        assert r.user == rec["user_name"] and r.time_limit == get(rec["time_limit"]) * 60
        assert len(r.gpus) == r.num_gpus
        assert set(TOPO.nodes[int(TOPO.gpu_node[g])].name for g in r.gpus) == set(rec["nodes"].split(","))
    s = summary_of(m.records, TOPO)
    assert s["avg_wait"] == pytest.approx(1.0)
    assert s == {**summarize(m.records, TOPO.num_gpus), **extra_metrics(m.records, TOPO),
                 "user_mean_wait": s["user_mean_wait"]}


def test_a_job_split_more_than_needed_crossed_an_island_node_or_switch_it_did_not_need():
    def rec(name, gpus):
        return JobRecord(job_id=name, user="u", num_gpus=len(gpus), model="resnet50", submit_time=0.0,
                         start_time=0.0, end_time=10.0, ideal_duration=10.0, time_limit=60.0, gpus=gpus)

    records = [
        rec("one-island", (0, 1, 2, 3)),
        rec("two-islands", (2, 3, 4, 5)),  # 4 GPUs fit one island
        rec("one-node", tuple(range(8))),
        rec("two-nodes-one-switch", (0, 1, 2, 3, 8, 9, 10, 11)),  # 8 GPUs fit one node
        rec("two-nodes-as-needed", tuple(range(16))),
        rec("two-switches", tuple(range(8)) + tuple(range(16, 24))),  # 16 GPUs fit one switch
        rec("single", (5,)),
    ]
    m = extra_metrics(records, TOPO)
    assert m["multi_gpu_jobs"] == 6
    assert m["split_more_than_needed"] == 3
    assert m["cross_node"] == 3 and m["cross_switch"] == 1


def test_measure_uses_the_jobs_reading_when_squeue_lost_the_indices():
    w = build_workload(6, 2, None, 5)
    t0 = 1_800_000_000
    raw, idx = _squeue_doc(w, t0)
    outputs = {name: {"alloc": "".join(f"{n}:{':'.join(map(str, ix))};" for n, ix in nodes.items())}
               for name, nodes in idx.items()}
    m = measure(raw, w, TOPO, t0, Allocations(), outputs)
    assert set(m.alloc_source.values()) == {"job"}
    assert all(len(r.gpus) == r.num_gpus for r in m.records)


def test_measure_reports_missing_and_failed_jobs():
    w = build_workload(5, 3, None, 4)
    t0 = 1_800_000_000
    raw, _ = _squeue_doc(w, t0)
    doc = json.loads(raw)
    doc["jobs"][2]["job_state"] = "TIMEOUT"
    doc["jobs"][3]["job_state"] = "RUNNING"
    doc["jobs"][3]["end_time"] = 0
    del doc["jobs"][4]
    m = measure(json.dumps(doc), w, TOPO, t0)
    names = [j.name for j in w.jobs]
    assert m.states[names[1]] == "TIMEOUT" and m.states[names[2]] == "RUNNING"
    assert set(m.missing) == {names[2], names[3]}
    # a job of another user with a demo name is not the demo's
    doc = json.loads(raw)
    doc["jobs"][1]["user_name"] = "mallory"
    m = measure(json.dumps(doc), w, TOPO, t0)
    assert names[0] in m.missing


def test_predictions_use_the_same_metrics(workload):
    p = predict(workload, "slurm", TOPO)
    assert sorted(r.job_id for r in p.records) == sorted(j.name for j in workload.jobs)
    s = summary_of(p.records, TOPO)
    assert p.summary == s
    assert s["jobs"] == 40 and 0 < s["jain_fairness"] <= 1
    assert s["placement_slowdown"] >= 1.0


def test_a_prediction_is_the_mean_over_slurms_phases(workload):
    """Slurm's pass falls at a phase unknown before the run: the summary is the mean of
    one replay per phase, the records are the first phase's."""
    clocks = LiveClocks(phases=3)
    p = predict(workload, "slurm", TOPO, clocks=clocks)
    per_phase = [summary_of(r, TOPO) for r in (_replay_at(workload, clocks, phase) for phase, _ in clocks.offsets())]
    assert p.records == _replay_at(workload, clocks, clocks.offsets()[0][0])
    assert p.summary["avg_wait"] == pytest.approx(sum(s["avg_wait"] for s in per_phase) / 3)
    assert len({s["avg_wait"] for s in per_phase}) > 1, "the phases should matter on this workload"
    assert p.summary["jobs"] == 40 and isinstance(p.summary["jobs"], int)


def _replay_at(workload, clocks, phase):
    from attentived.agents.registry import make_policy
    from attentived.simulator.engine import MainPasses, Simulation

    slurm = make_policy("slurm", 0)
    return list(Simulation(workload.sim_jobs(), TOPO, slurm, cadence=clocks.slurm_pass, phase=phase,
                           overhead=clocks.job_overhead, main=MainPasses(clocks.main_offset, slurm)).run().records)


def test_a_job_of_whole_seconds_frees_its_gpus_for_the_drifting_pass_only_if_long_enough(workload):
    """Slurm's passes come a little over a second apart and a job's record runs 0.03 s
    beyond its sleep: a 40 s job ends before the pass 40 passes after its start, a 4 s
    job just after the pass 4 passes later, so the job behind it waits for the main
    scheduler's pass after that one (`MainPasses`)."""
    from dataclasses import replace

    from attentived.topology.shape import uniform

    one_node = uniform(1, 8)
    clocks = LiveClocks(slurm_pass=1.0025, job_overhead=0.03, phases=1)
    base = replace(workload.jobs[0], num_gpus=8, num_nodes=1, slowdowns={})
    for first, later in ((40.0, 40 * 1.0025), (4.0, 4 * 1.0025 + clocks.main_offset)):
        jobs = (replace(base, index=0, submit=0.0, duration=first), replace(base, index=1, submit=0.1))
        a, b = predict(replace(workload, jobs=jobs), "slurm", one_node, clocks=clocks).records
        assert a.end_time - a.start_time == pytest.approx(first + 0.03)
        assert b.start_time - a.start_time == pytest.approx(later)


def test_mean_summary():
    got = mean_summary([{"jobs": 4, "avg": 1.0, "users": {"a": 1.0, "b": 2.0}, "x": None, "n": 2},
                        {"jobs": 4, "avg": 2.0, "users": {"a": 3.0, "b": 2.0}, "x": None, "n": 3}])
    assert got == {"jobs": 4, "avg": 1.5, "users": {"a": 2.0, "b": 2.0}, "x": None, "n": 2.5}


def test_jobs_start_at_slurms_passes_and_the_daemons_wait_for_its_updates(workload):
    """Slurm never starts a batch job at submission (a test-only job_allocate): Slurm
    alone's replay starts a job that finds the queue empty at the next pass. The daemon
    decides it at once, alone, and Slurm starts it at its first pass after the daemon's
    updates land: the same pass, unless the job came too close before it."""
    from dataclasses import replace

    clocks = LiveClocks(slurm_pass=1.0, job_overhead=0.0, phases=1)
    assert clocks.offsets() == [(0.5, 0.3)]  # Slurm's passes at 0.5, 1.5, ...; the daemon 0.3 s ahead
    for submit, daemon_start in ((0.1, 0.5), (0.3, 1.5)):
        one = replace(workload, jobs=(replace(workload.jobs[0], submit=submit),))
        (alone,) = predict(one, "slurm", TOPO, clocks=clocks).records
        (pinned,) = predict(one, "fifo+consolidate", TOPO, clocks=clocks, pinned=True).records
        assert (alone.start_time, pinned.start_time) == (0.5, daemon_start)


def test_the_daemon_replans_until_its_last_cycle_before_slurms_pass(workload):
    """The daemon re-plans every cycle, so what starts at a pass is what its last cycle
    in time decided: a job that ends before that cycle frees its GPUs for the pass; one
    that ends after it, only for the pass after."""
    from dataclasses import replace

    from attentived.topology.shape import uniform

    one_node = uniform(1, 8)
    clocks = LiveClocks(slurm_pass=1.0, job_overhead=0.0, phases=1)  # passes at 0.5, 1.5, ...; decided at 0.2, 1.2, ...
    base = replace(workload.jobs[0], num_gpus=8, num_nodes=1, slowdowns={})
    for first_end, second_start in ((1.1, 1.5), (1.3, 2.5)):
        jobs = (replace(base, index=0, submit=0.0, duration=first_end - 0.5), replace(base, index=1, submit=0.05))
        recs = predict(replace(workload, jobs=jobs), "fifo", one_node, clocks=clocks, pinned=True).records
        assert [(r.start_time, r.end_time) for r in recs][0] == pytest.approx((0.5, first_end))
        assert recs[1].start_time == pytest.approx(second_start)


def test_default_policy():
    from attentived.agents.learned import default_model_path

    assert default_policy() == ("attentive" if default_model_path("attentive").is_file() else FALLBACK_POLICY)


def test_demo_json_names_the_model_that_ran(tmp_path):
    import hashlib
    import shutil

    from attentived.agents.learned import default_model_path

    assert model_identity("fifo+consolidate") is None
    shipped = default_model_path("attentive")
    assert model_identity("attentive") == {"path": str(shipped), "sha256": hashlib.sha256(shipped.read_bytes()).hexdigest()}
    other = tmp_path / "other.pt"
    shutil.copy(shipped, other)
    with open(other, "ab") as f:
        f.write(b"\0")  # another file: another identity
    named = model_identity(f"attentive:model={other},fairness=0.5")
    assert named is not None and named["path"] == str(other)
    assert named["sha256"] == hashlib.sha256(other.read_bytes()).hexdigest() != model_identity("attentive")["sha256"]


def test_cli_rejects_bad_options_before_touching_anything():
    from typer.testing import CliRunner

    from attentived.cli import app

    res = CliRunner().invoke(app, ["demo", "--users", "7"])
    assert res.exit_code == 2 and "--users" in res.output
    res = CliRunner().invoke(app, ["demo", "--policy", "nope"])
    assert res.exit_code == 2 and "unknown policy" in res.output
    for args, why in ((["--seeds", "1,x"], "'x' is not a whole number"), (["--seeds", "1,2", "--seed", "3"], "not both"),
                      (["--seeds", "1,2", "--keep-cluster"], "give one seed"), (["--load", "-1"], "--load must be a positive")):
        res = CliRunner().invoke(app, ["demo", *args])
        assert res.exit_code == 2 and why in res.output, res.output


def test_not_root_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    d = Demo(DemoOptions())
    with pytest.raises(DemoError) as e:
        d.check_machine()
    assert e.value.code == EXIT_UNSUPPORTED and "root" in str(e.value)


# ---- several seeds -----------------------------------------------------------------------------------


def test_seeds_are_parsed_strictly():
    from attentived.ops.demo.seeds import parse_seeds

    assert parse_seeds("1, 2,3") == [1, 2, 3]
    for bad, why in (("1,x", "'x' is not a whole number"), ("1,1", "seed 1 given twice"), ("-1", "'-1'")):
        with pytest.raises(ValueError, match=why):
            parse_seeds(bad)


def test_seeds_summary_gives_prediction_errors_and_the_spread_of_the_change(tmp_path):
    from types import SimpleNamespace

    from attentived.ops.demo.seeds import seeds_summary

    def result(seed, slurm, attentived):  # (live avg JCT, predicted avg JCT, live wait, predicted wait)
        def run(v):
            return SimpleNamespace(summary={"avg_jct": v[0], "avg_wait": v[2]}, predicted={"avg_jct": v[1], "avg_wait": v[3]})
        return SimpleNamespace(options=SimpleNamespace(seed=seed), runs={"slurm": run(slurm), "attentived": run(attentived)})

    s = seeds_summary([result(1, (20.0, 22.0, 10.0, 9.0), (16.0, 16.0, 6.0, 6.0)),
                       result(2, (30.0, 30.0, 20.0, 20.0), (27.0, 24.3, 15.0, 12.0))])
    assert s["seeds"] == [1, 2]
    first = s["per_seed"][0]
    assert first["runs"]["slurm"]["avg_jct"]["error"] == pytest.approx(0.1)
    assert first["runs"]["slurm"]["avg_wait"]["error"] == pytest.approx(-0.1)
    assert first["jct_change"] == pytest.approx(-0.2) and s["per_seed"][1]["jct_change"] == pytest.approx(-0.1)
    change = s["overall"]["jct_change"]
    assert change["mean"] == pytest.approx(-0.15) and change["std"] == pytest.approx(0.0707, abs=1e-4)
    assert s["overall"]["attentived.avg_wait.error"]["min"] == pytest.approx(-0.2)
    assert s["overall"]["worst_prediction_error"] == pytest.approx(0.2)
    from attentived.render_demo import seeds_table, write_seeds

    assert json.loads(write_seeds(s, tmp_path).read_text())["per_seed"][1]["seed"] == 2
    from rich.console import Console

    console = Console(record=True, width=160)
    seeds_table(s, console)
    assert "-15.0%, is larger than its seed-to-seed spread (7.1%)" in console.export_text()


# ---- the real thing ------------------------------------------------------------------------------------

TEST_RUN_DIR = "/tmp/attentived-demo-test"
TEST_PORT_BASE = 18717


@pytest.mark.slurm
def test_short_demo_on_the_lab(slurm_installed_or_skip, tmp_path):
    from attentived.daemon.slurm_json import parse_squeue
    from attentived.ops.lab import Lab
    from attentived.render_demo import result_table, write_outputs

    events: list[tuple[str, dict]] = []
    options = DemoOptions(jobs=8, users=3, seed=1, run_dir=TEST_RUN_DIR, port_base=TEST_PORT_BASE,
                             target_span=6.0, max_duration=8.0)
    result = run_demo(options, lambda kind, **data: events.append((kind, data)))

    lab = Lab(TEST_RUN_DIR, port_base=TEST_PORT_BASE)
    # nothing left running: no daemons of the demo's cluster, no job processes, no attentived
    assert lab.processes() == []
    assert not lab.is_running()
    daemon_pid = result.runs["attentived"].daemon["pid"]
    assert not Path(f"/proc/{daemon_pid}").exists() or "attentived" not in Path(f"/proc/{daemon_pid}/cmdline").read_text(errors="replace")
    assert not _job_processes(TEST_RUN_DIR)
    for name, run in result.runs.items():
        # every job completed, and the figures come from Slurm's records
        assert run.complete, (name, run.states, run.missing)
        assert run.leftover_reservations == []
        assert len(run.records) == 8
        slurm = {j.name: j for j in parse_squeue(run.squeue_raw).jobs if j.name.startswith(JOB_PREFIX)}
        assert set(slurm) == {j.name for j in result.workload.jobs}
        for r in run.records:
            j = slurm[r.job_id]
            assert j.state == "COMPLETED" and j.user == r.user
            assert r.submit_time == j.submit_time - run.started_at
            assert r.start_time == j.start_time - run.started_at and r.end_time == j.end_time - run.started_at
            assert len(r.gpus) == r.num_gpus
            assert {TOPO.nodes[int(TOPO.gpu_node[g])].name for g in r.gpus} == set(j.nodes)
            # the job slept for the slowdown of the GPUs Slurm gave it
            read = run.job_outputs[r.job_id]
            assert read["known"] and read["done"]
            assert read["slowdown"] == pytest.approx(SPEED.slowdown(r.model, r.gpus), abs=1e-3)
            assert r.runtime >= r.ideal_duration * read["slowdown"] - 1.5
        assert run.summary == {**summarize(run.records, 32), **extra_metrics(run.records, TOPO),
                               "user_mean_wait": run.summary["user_mean_wait"]}
        assert run.predicted["jobs"] == 8
    d = result.runs["attentived"].daemon
    # (a cycle may fail when Slurm starts a job between its snapshot and its pin: not the demo's concern)
    assert d["exit_code"] == 0 and d["cycles"] >= 3 and d["cycle_errors"] < d["cycles"]
    assert d["policy"] == result.policy
    kinds = [k for k, _ in events]
    assert "workload" in kinds and kinds.count("run_done") == 2 and "progress" in kinds
    written = {p.name for p in write_outputs(result, tmp_path / "out")}
    assert {"demo.json", "jobs.csv", "squeue-slurm.json", "squeue-attentived.json", "jct_cdf.png",
            "timeline.png", "wait_per_user.png", "attentived.log", "slurmctld-slurm.log", "slurmctld-attentived.log"} <= written
    # each run's own slurmctld log, which saw every job of that run
    for name, run in result.runs.items():
        log = (tmp_path / "out" / f"slurmctld-{name}.log").read_text()
        assert all(f"JobId={i} " in log for i in run.slurm_ids.values()), name
    doc = json.loads((tmp_path / "out" / "demo.json").read_text())
    assert set(doc["runs"]) == {"slurm", "attentived"} and doc["comparison"]["avg_jct"]["slurm"] > 0
    # Slurm alone as a site with accounting runs it, as its slurmctld reported
    alone = doc["runs"]["slurm"]["scheduler"]["slurm_conf"]
    assert (alone["SchedulerType"], alone["PriorityType"], alone["AccountingStorageType"]) == (
        "sched/backfill", "priority/multifactor", "accounting_storage/slurmdbd")
    assert (alone["PriorityWeightFairShare"], alone["PriorityWeightAge"], alone["PriorityWeightJobSize"]) == (
        "10000", "1000", "1000")
    # its replay charges fair-share as a Slurm without limits enforcement does, with its ticks
    assert "limits" not in alone["AccountingStorageEnforce"]
    # ... and the backfill's will-run windows where slurmctld's clock put them
    t0 = doc["runs"]["slurm"]["started_at"]
    assert doc["runs"]["slurm"]["predicted_by"].startswith(
        f"slurm:bf_resolution=1,calc_period=60,usage_at_end=0,bf_clock_phase={t0 % 30:.1f},calc_offset=")
    assert doc["model"] == model_identity(result.policy)  # the model a saved demo is predicted with again
    from rich.console import Console

    console = Console(record=True, width=160)
    result_table(result, console)
    assert "Slurm alone" in console.export_text()


def _job_processes(run_dir: str) -> list[int]:
    needle = f"SLURM_CONF={run_dir}/etc/slurm.conf".encode()
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                env = (proc / "environ").read_bytes().split(b"\0")
            except OSError:
                continue
            if needle in env and any(e.startswith(b"SLURM_JOB_ID=") for e in env):
                found.append(int(proc.name))
    return found


@pytest.fixture
def slurm_installed_or_skip():
    """Root and Slurm (installed when missing, as the lab fixture does), else skip (or fail
    under CI / ATTENTIVED_LAB_REQUIRED=1)."""
    from attentived.ops.lab import LabError, install, slurm_installed

    required = os.environ.get("ATTENTIVED_LAB_REQUIRED", "1" if os.environ.get("CI") else "0") == "1"

    def unavailable(reason: str):
        if required:
            pytest.fail(f"Slurm lab required but {reason}", pytrace=False)
        pytest.skip(reason)

    if os.geteuid() != 0:
        unavailable("the demo runs slurmd/munged as root")
    if not slurm_installed():
        if os.environ.get("ATTENTIVED_LAB_INSTALL") == "0":
            unavailable("Slurm is not installed")
        try:
            install()
        except LabError as e:
            unavailable(f"Slurm is not installed and installing it failed: {e}")


INT_RUN_DIR = "/tmp/attentived-demo-test-int"
INT_PORT_BASE = 18767


@pytest.mark.slurm
def test_ctrl_c_stops_the_daemon_the_jobs_and_the_cluster(slurm_installed_or_skip):
    """``attentived demo`` interrupted while attentived steers the second run: exit 130 and
    nothing of the demo left (daemons, jobs, the attentived process)."""
    import signal
    import sys
    import threading
    import time

    from attentived.ops.lab import Lab

    env = dict(os.environ, ATTENTIVED_DEMO_RUN=INT_RUN_DIR, ATTENTIVED_DEMO_PORT_BASE=str(INT_PORT_BASE))
    proc = subprocess.Popen(
        [sys.executable, "-m", "attentived", "demo", "--jobs", "12", "--time-scale", "2e4", "--seed", "2"],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        # As from a terminal: a suite started in the background (`cmd &`) inherits SIGINT
        # ignored, and Python then never turns Ctrl-C into KeyboardInterrupt.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    lines: list[str] = []
    steering = threading.Event()

    def read() -> None:
        for line in proc.stderr:
            lines.append(line)
            if "attentived: running" in line:
                steering.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert steering.wait(240), "".join(lines)
        # Interrupt once a demo job is in Slurm (so there is something to cancel) and well
        # before the steered run ends (time scale 2e4: it lasts 10-20 s; a SIGINT after it
        # lands in the clean-up, which ignores a second Ctrl-C by design).
        lab = Lab(INT_RUN_DIR, port_base=INT_PORT_BASE)
        deadline = time.time() + 60
        while not lab.run(["squeue", "-h", "-o", "%i"], check=False).stdout.strip() and time.time() < deadline:
            time.sleep(0.1)
        assert lab.is_running() and _daemons(INT_RUN_DIR)
        proc.send_signal(signal.SIGINT)
        rc = proc.wait(120)
    finally:
        if proc.poll() is None:
            proc.kill()
    reader.join(10)
    err = "".join(lines)
    assert rc == EXIT_INTERRUPTED, err
    assert "interrupted" in err and "cluster stopped" in err
    assert lab.processes() == [] and not lab.is_running()
    assert not _job_processes(INT_RUN_DIR)
    assert not _daemons(INT_RUN_DIR)
    # the jobs were cancelled (not merely abandoned when the cluster stopped)
    log = (Path(INT_RUN_DIR) / "log" / "slurmctld.log").read_text(errors="replace")
    assert "REQUEST_KILL_JOB" in log


def _daemons(run_dir: str) -> list[int]:
    """PIDs of ``attentived start`` processes of the demo in ``run_dir``."""
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                cmd = (proc / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"start" in cmd and any(c.startswith(f"{run_dir}/demo/".encode()) for c in cmd):
                found.append(int(proc.name))
    return found


def test_policy_names_are_checked_cheaply():
    check_policy("fifo+consolidate")
    check_policy("sjf+consolidate+backfill")
    from attentived.agents.learned import default_model_path

    if default_model_path("attentive").is_file():
        check_policy("attentive")
    with pytest.raises(DemoError) as e:
        check_policy("fifo+nowhere")
    assert e.value.code == EXIT_BAD_INPUT
    check_policy("portfolio:fairness=0.3")
    for bad, words in (("portfolio:fairness=3", "fairness='3'"), ("fifo:fairness=0.5", "no parameter 'fairness'")):
        with pytest.raises(DemoError) as e:
            check_policy(bad)
        assert e.value.code == EXIT_BAD_INPUT and words in str(e.value)


def _fake_result(workload: Workload) -> DemoResult:
    """A DemoResult whose 'live' records are simulator records (rendering tests, no Slurm)."""
    runs = {}
    for name, policy in (("slurm", "slurm"), ("attentived", "fifo+consolidate")):
        live = predict(workload, "fifo" if name == "slurm" else "sjf+consolidate", TOPO).records
        pred = predict(workload, policy, TOPO)
        runs[name] = RunResult(
            name=name, title=RUN_TITLES[name], scheduler="test", policy=policy, records=live,
            summary=summary_of(live, TOPO), predicted_records=pred.records, predicted=pred.summary,
            states={r.job_id: "COMPLETED" for r in live}, slurm_ids={r.job_id: str(k + 2) for k, r in enumerate(live)},
            alloc_source={}, job_outputs={}, missing=[], wall_seconds=100.0, started_at=0.0, squeue_raw='{"jobs": []}',
            daemon={"cycles": 3, "actions": 5, "failed_actions": 0, "overtaken_actions": 2, "placements": {"exact": 2}}
            if name == "attentived" else None)
    return DemoResult(workload, TOPO, "fifo+consolidate", runs, 200.0, DemoOptions())


def test_table_and_outputs(tmp_path):
    from rich.console import Console

    from attentived.render_demo import result_table, write_outputs

    w = build_workload(12, 3, None, 1)
    result = _fake_result(w)
    console = Console(record=True, width=160)
    result_table(result, console)
    text = console.export_text()
    for label in ("avg JCT", "p99 JCT", "avg wait", "Jain fairness", "comm. slowdown", "makespan", "Slurm alone",
                  "attentived (fifo+consolidate)", "12/12 jobs completed",
                  "5 Slurm updates (0 failed, 2 overtaken: the job left the queue first)"):
        assert label in text
    a = result.runs["slurm"].summary["avg_jct"]
    assert f"{a:.1f}s" in text
    names = {p.name for p in write_outputs(result, tmp_path)}
    assert {"demo.json", "jobs.csv", "squeue-slurm.json", "jct_cdf.png", "wait_per_user.png", "timeline.png"} <= names
    doc = json.loads((tmp_path / "demo.json").read_text())
    assert doc["comparison"]["avg_jct"]["slurm"] == pytest.approx(a)
    assert len(doc["runs"]["attentived"]["jobs"]) == 12 and doc["workload"]["jobs"][0]["name"] == "demo-000"
    rows = (tmp_path / "jobs.csv").read_text().splitlines()
    assert len(rows) == 1 + 2 * 2 * 12


def test_cleanup_after_a_ctrl_c_that_lands_before_the_submitter_starts(tmp_path):
    """Ctrl-C between creating the submitter and starting it: the clean-up must still run to
    the end (it used to raise on joining an unstarted thread, leaving the daemon running)."""
    import threading

    demo = Demo(DemoOptions(run_dir=str(tmp_path / "run")))
    demo.submitter = threading.Thread(target=lambda: None)
    stopped = []
    demo._stop_daemon = lambda: stopped.append(True)
    demo.cleanup(stop_cluster=True)
    assert stopped == [True] and demo.stop.is_set()
