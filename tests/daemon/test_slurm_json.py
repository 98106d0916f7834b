"""Slurm JSON parsers against the recorded 22.05 and 24.11 outputs, hostile strings, and
malformed / truncated input (fast, no Slurm)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attentived.daemon.records import SlurmParseError, SlurmVersion
from attentived.daemon.slurm_json import (
    gpu_indices,
    number,
    parse_gres,
    parse_nodes,
    parse_reservations,
    parse_sinfo,
    parse_squeue,
    state_of,
    tres_gpus,
)

FIX = Path(__file__).parent / "fixtures"
R22 = FIX / "slurm-22.05"
R24 = FIX / "slurm-24.11"
R26 = FIX / "slurm-26.05"
RECORDINGS = {"22.05": R22, "24.11": R24, "26.05": R26}  # the same mix, recorded live on each (record.sh)


def _mix(version):
    """The recorded mix of ``version`` by scenario name (``run_a``, ``held``...), parsed."""
    rec = RECORDINGS[version]
    jobs = {j.job_id: j for j in parse_squeue((rec / "squeue.json").read_text()).jobs}
    return {name: jobs[str(i)] for name, i in json.loads((rec / "scenario.json").read_text())["jobs"].items()}


def test_version_from_meta_both_generations():
    assert parse_squeue((R22 / "squeue.json").read_text()).version == SlurmVersion(22, 5, 8)
    assert parse_squeue((R24 / "squeue.json").read_text()).version == SlurmVersion(24, 11, 5)
    assert parse_squeue((R26 / "squeue.json").read_text()).version == SlurmVersion(26, 5, 5)
    assert SlurmVersion.parse("slurm-wlm 22.05.8").has_scontrol_json is False
    assert SlurmVersion.parse("slurm 24.11.5").has_scontrol_json is True
    assert SlurmVersion.parse("23.02.0").has_scontrol_json is True
    with pytest.raises(SlurmParseError):
        SlurmVersion.parse("no version here")


@pytest.mark.parametrize("version", sorted(RECORDINGS))
def test_job_mix(version):
    mix = _mix(version)
    run_a, run_b, run_c = mix["run_a"], mix["run_b"], mix["run_c"]
    assert (run_a.user, run_a.state, run_a.gpus, run_a.nodes) == ("alice", "RUNNING", 4, ("node1",))
    assert dict(run_a.gpu_indices) == {"node1": (0, 1, 2, 3)}
    assert run_b.gpus == 16 and run_b.gpus_per_node == 8 and run_b.num_nodes == 2 and run_b.per_node_fixed
    assert dict(run_b.gpu_indices) == {"node3": tuple(range(8)), "node4": tuple(range(8))}
    assert run_c.partition == "other" and dict(run_c.gpu_indices) == {"node1": (4, 5)}
    pend_a, pend_b = mix["pend_a"], mix["pend_b"]
    assert pend_a.pending and pend_a.eligible and pend_a.gpus == 8 and pend_a.num_nodes == 1
    assert pend_b.priority == 5000 and pend_b.eligible
    assert mix["held"].held and not mix["held"].eligible
    assert mix["admin_held"].held and mix["admin_held"].reason == "JobHeldAdmin"
    pinned = mix["pinned"]
    assert pinned.required_nodes == ("node4",) and pinned.excluded_nodes == ("node1",)
    multi = mix["multi"]
    assert multi.gpus == 16 and multi.num_nodes == 2 and multi.gpus_per_node == 8
    done_b = mix["done_b"]
    assert done_b.finished and done_b.gpus == 2 and done_b.start_time and done_b.end_time
    assert mix["failed"].state == "FAILED" and mix["cancelled"].state == "CANCELLED"
    assert mix["warmup"].time_limit is None  # UNLIMITED


@pytest.mark.parametrize("version", ["24.11", "26.05"])
def test_wrapped_numbers_and_list_states_since_23_02(version):
    """What 24.11 and 26.05 print differently from 22.05, read to the same records: list
    states, numbers wrapped in {set, infinite, number}, "hold": true; `scontrol show job
    --json` is squeue's twin."""
    rec_dir = RECORDINGS[version]
    raw = json.loads((rec_dir / "squeue.json").read_text())
    ids = json.loads((rec_dir / "scenario.json").read_text())["jobs"]
    rec = {j["job_id"]: j for j in raw["jobs"]}
    assert rec[ids["run_a"]]["job_state"] == ["RUNNING"] and rec[ids["held"]]["hold"] is True
    assert rec[ids["pend_b"]]["priority"] == {"set": True, "infinite": False, "number": 5000}
    assert rec[ids["warmup"]]["time_limit"] == {"set": False, "infinite": True, "number": 0}
    assert rec[ids["run_a"]]["tres_per_node"] == "gres/gpu:4"
    run_a = _mix(version)["run_a"]
    assert run_a.start_time == float(rec[ids["run_a"]]["start_time"]["number"]) and run_a.priority == 1
    one = parse_squeue((rec_dir / "scontrol-show-job.json").read_text(), source="scontrol show job --json").jobs
    assert {j.job_id: j for j in one} == {j.job_id: j for j in parse_squeue(json.dumps(raw)).jobs}


def test_nodes_22_05_sinfo_and_24_11_scontrol():
    n22 = {n.name: n for n in parse_sinfo((R22 / "sinfo.json").read_text())}
    assert n22["node1"].used_indices == (0, 1, 2, 3, 4, 5) and n22["node1"].gpus == 8 and n22["node1"].usable
    assert n22["node2"].flags == ("DRAIN",) and not n22["node2"].usable and n22["node2"].reason == "lab: bad gpu"
    assert n22["node3"].gpus_used == 8 and n22["node1"].features == ("rack1", "sw1")
    assert n22["node1"].partitions == ("main", "other") and n22["node1"].gpu_type == "h100"
    for rec in (R24, R26):  # the same mix: the per-node view of scontrol is 22.05's sinfo
        assert {n.name: n for n in parse_nodes((rec / "scontrol-show-nodes.json").read_text())} == n22
        with pytest.raises(SlurmParseError, match="grouped sinfo"):
            parse_sinfo((rec / "sinfo.json").read_text())


@pytest.mark.parametrize("version", ["24.11", "26.05"])
def test_reservations_json(version):
    now, later = parse_reservations((RECORDINGS[version] / "scontrol-show-reservation.json").read_text())
    assert (now.name, now.nodes, now.users, now.flags) == ("alice_now", ("node1",), ("alice",), ("IGNORE_JOBS", "SPEC_NODES"))
    assert (later.name, later.nodes, later.flags) == ("maint_later", ("node3", "node4"), ("MAINT", "IGNORE_JOBS", "SPEC_NODES"))
    # the JSON has no state: active() goes by the times (2 h apart)
    assert now.state == "" and now.active(now.start_time + 1) and not now.active(now.end_time + 1)
    assert not later.active(now.start_time + 1)
    assert parse_reservations('{"reservations": []}') == ()


def test_small_parsers():
    assert parse_gres("gpu:h100:8(S:0-1)") == [("gpu", "h100", 8, None)]
    assert parse_gres("gpu:h100:3(IDX:0-2),shard:2") == [("gpu", "h100", 3, (0, 1, 2)), ("shard", "", 2, None)]
    assert gpu_indices("gpu:a100:2(IDX:0,3),gpu:v100:1(IDX:5)") == ((0, 3, 5), 3)
    assert gpu_indices("gpu:h100:0(IDX:N/A)") == ((), 0)
    assert gpu_indices("gpu:2") == (None, 2)
    assert tres_gpus("gres:gpu:3") == 3 and tres_gpus("gres/gpu:3") == 3 and tres_gpus("gres/gpu:h100:2") == 2
    assert tres_gpus("gres/gpu=4") == 4 and tres_gpus("gres:shard:2") == 0 and tres_gpus("") == 0
    assert number({"set": True, "infinite": False, "number": 7}) == 7
    assert number({"set": False, "infinite": True, "number": 0}) is None and number(None) is None
    assert number(4294967294) is None
    assert state_of("idle", ["DRAIN"]) == ("IDLE", ("DRAIN",))
    assert state_of(["MIXED", "DRAIN"]) == ("MIXED", ("DRAIN",))
    assert state_of("idle+drain") == ("IDLE", ("DRAIN",))
    with pytest.raises(ValueError):
        parse_gres("gpu:h100:3(IDX:5-2)")


HOSTILE = [
    'quote " and \' and `back`', "semi; rm -rf / ;", "$(reboot) `id` ${HOME}", "new\nline\r\nand\ttab",
    "JobState=COMPLETED Priority=99999 JobId=1", "ünïcödé 名前 🚀", "\x00nul\x1bESC", "a" * 5000, "",
]


@pytest.mark.parametrize("hostile", HOSTILE)
def test_hostile_strings_come_back_verbatim(hostile):
    data = json.loads((R22 / "squeue.json").read_text())
    for job in data["jobs"]:
        job["name"] = hostile
        job["comment"] = hostile
        job["account"] = hostile
        job["admin_comment"] = hostile
    jobs = parse_squeue(json.dumps(data)).jobs
    assert all(j.name == hostile and j.comment == hostile and j.account == hostile for j in jobs)
    assert [j.state for j in jobs] == [j.state for j in parse_squeue((R22 / "squeue.json").read_text()).jobs]
    # Slurm has printed raw control characters inside strings: still parsed (strict=False)
    raw = json.dumps(data, ensure_ascii=False).replace("\\n", "\n").replace("\\t", "\t")
    if "\\u0000" not in raw:
        assert {j.state for j in parse_squeue(raw).jobs} == {j.state for j in jobs}


def test_hostile_user_and_partition_values_stay_data():
    data = json.loads((R22 / "squeue.json").read_text())
    data["jobs"][0]["user_name"] = "bob; scancel -u alice"
    data["jobs"][0]["partition"] = "main,$(x)"
    job = parse_squeue(json.dumps(data)).jobs[0]
    assert job.user == "bob; scancel -u alice" and job.partition == "main,$(x)"


@pytest.mark.parametrize("text,match", [
    ("", "empty output"),
    ("   \n", "empty output"),
    ('{"jobs": [', "truncated"),
    ('{"jobs": [{"job_id": 1, "job_state": "RUNNING"', "truncated"),
    ("<html>proxy error</html>", "malformed JSON"),
    ("[1, 2]", "expected a JSON object"),
    ('{"meta": {}}', "no 'jobs' list"),
    ('{"jobs": {"a": 1}}', "no 'jobs' list"),
    ('{"jobs": [5]}', "job #0: expected an object"),
    ('{"jobs": [{"name": "x"}]}', "no job_id"),
    ('{"jobs": [{"job_id": "abc", "job_state": "RUNNING"}]}', "job_id"),
    ('{"jobs": [{"job_id": 3, "job_state": 7}]}', "job_state"),
    ('{"jobs": [{"job_id": 3, "job_state": []}]}', "job_state"),
    ('{"jobs": [{"job_id": 3, "job_state": "PENDING", "priority": true}]}', "priority"),
    ('{"jobs": [{"job_id": 3, "job_state": "PENDING", "priority": {"set": true}}]}', "priority"),
    ('{"jobs": [{"job_id": 3, "job_state": "RUNNING", "nodes": "node[1-", "gres_detail": []}]}', "bad host list"),
    ('{"jobs": [{"job_id": 3, "job_state": "RUNNING", "nodes": "n1", "gres_detail": ["gpu:1(IDX:0)", "gpu:1(IDX:1)"]}]}', "gres_detail has 2"),
    ('{"jobs": [{"job_id": 3, "job_state": "RUNNING", "nodes": "n1", "gres_detail": ["gpu:h:1(IDX:x)"]}]}', "gres_detail"),
    ('{"jobs": [{"job_id": 3, "job_state": "RUNNING", "name": ["x"]}]}', "name"),
])
def test_malformed_squeue_gives_clear_parse_error(text, match):
    with pytest.raises(SlurmParseError, match=match) as info:
        parse_squeue(text)
    assert str(info.value).startswith("squeue --json")


def test_malformed_nodes_and_reservations():
    with pytest.raises(SlurmParseError, match="no 'nodes' list"):
        parse_nodes('{"meta": {}}')
    with pytest.raises(SlurmParseError, match="node #0: no name"):
        parse_nodes('{"nodes": [{"state": "idle"}]}')
    with pytest.raises(SlurmParseError, match="node n1"):
        parse_nodes('{"nodes": [{"name": "n1", "state": "idle", "gres": "gpu:h100:8(IDX:9-1)"}]}')
    with pytest.raises(SlurmParseError, match="not a list"):
        parse_reservations('{"reservations": {}}')


_FIXTURE_TEXTS = [(rec / "squeue.json").read_text() for rec in RECORDINGS.values()]


@settings(max_examples=150, deadline=None)
@given(which=st.integers(0, len(_FIXTURE_TEXTS) - 1), cut=st.floats(0, 1), flip=st.integers(0, 10**6), ch=st.characters())
def test_fuzzed_squeue_gives_a_result_or_a_parse_error(which, cut, flip, ch):
    text = _FIXTURE_TEXTS[which]
    text = text[: int(len(text) * cut)]
    if text:
        pos = flip % len(text)
        text = text[:pos] + ch + text[pos + 1 :]
    try:
        parse_squeue(text)
    except SlurmParseError:
        pass


_JOB_KEYS = sorted(json.loads((R24 / "squeue.json").read_text())["jobs"][0]
                   | json.loads((R26 / "squeue.json").read_text())["jobs"][0])


@settings(max_examples=400, deadline=None)
@given(st.sampled_from(_JOB_KEYS),
       st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=20) | st.floats(allow_nan=False),
                    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=12), kids, max_size=4),
                    max_leaves=20))
def test_any_value_in_any_job_field_is_handled(key, value):
    data = json.loads((R24 / "squeue.json").read_text())
    data["jobs"][0][key] = value
    try:
        parse_squeue(json.dumps(data))
    except SlurmParseError:
        pass


@pytest.mark.parametrize("reason", ["JobHoldMaxRequeue", "BurstBufferOperation", "BadConstraints"])
def test_a_22_05_job_at_priority_0_is_held_whatever_its_reason(reason):
    """22.05's JSON has no `hold` field: a pending job at priority 0 is held (Slurm refuses
    a new priority for it, and a pin would stay on it), not only under JobHeld* reasons."""
    doc = json.loads((R22 / "squeue.json").read_text())
    scenario = json.loads((R22 / "scenario.json").read_text())["jobs"]
    rec = next(j for j in doc["jobs"] if j["job_id"] == scenario["pend_a"])
    assert "hold" not in rec
    doc["jobs"] = [{**rec, "state_reason": reason, "priority": 0}]
    (job,) = parse_squeue(json.dumps(doc)).jobs
    assert job.pending and job.held and not job.eligible


@pytest.mark.parametrize("version", sorted(RECORDINGS))
def test_a_heterogeneous_jobs_components_are_left_to_slurm(version):
    """Slurm starts all components of a heterogeneous job or none: a plan that pins one
    component would keep its GPUs idle while another waits (docs/daemon.md, Limits)."""
    doc = json.loads((RECORDINGS[version] / "squeue.json").read_text())
    scenario = json.loads((RECORDINGS[version] / "scenario.json").read_text())["jobs"]
    rec = next(j for j in doc["jobs"] if (j["job_id"]["number"] if isinstance(j["job_id"], dict) else j["job_id"])
               == scenario["pend_a"])
    het = rec["het_job_id"]
    doc["jobs"] = [rec, {**rec, "het_job_id": {**het, "number": 700} if isinstance(het, dict) else 700}]
    plain, component = parse_squeue(json.dumps(doc)).jobs
    assert plain.eligible and not plain.heterogeneous
    assert component.heterogeneous and component.pending and not component.eligible


@pytest.mark.parametrize(("reason", "eligible"), [
    ("Priority", True), ("Resources", True), ("None", True), ("Prolog", True), ("Cleaning", True),
    ("ReqNodeNotAvail, Reserved for maintenance", True), ("SchedDefer", True),
    ("Licenses", False), ("BurstBufferStageIn", False), ("JobArrayTaskLimit", False), ("AccountingPolicy", False),
    ("MaxMemoryPerAccount", False), ("MaxGRESRunMinsPerUser", False), ("MaxPoweredUpNodes", True),
    ("QOSMaxGRESPerUser", False), ("AssocGrpGRES", False), ("DeadLine", False),
])
def test_a_job_waiting_on_what_no_placement_changes_is_left_to_slurm(reason, eligible):
    """A job waiting for licenses, a burst buffer or an account limit is not planned: pinned,
    slurmctld would refuse it wherever it went, and each refusal is a stall that idles the
    GPUs the plan gave it for a cycle. Waiting for GPUs, or for a node the pin chose, is the
    daemon's to plan."""
    doc = json.loads((R22 / "squeue.json").read_text())
    scenario = json.loads((R22 / "scenario.json").read_text())["jobs"]
    rec = next(j for j in doc["jobs"] if j["job_id"] == scenario["pend_a"])
    doc["jobs"] = [{**rec, "state_reason": reason}]
    (job,) = parse_squeue(json.dumps(doc)).jobs
    assert job.pending and job.eligible is eligible
