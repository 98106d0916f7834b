"""``scontrol`` text parsers (Slurm 22.05 has no ``scontrol --json``): recorded outputs,
hostile job names, newlines, durations and times."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attentived.daemon.records import SlurmParseError
from attentived.daemon.scontrol_text import (
    parse_config,
    parse_jobs,
    parse_line,
    parse_nodes,
    parse_reservations,
    records,
    slurm_duration,
    slurm_time,
)
from attentived.daemon.slurm_json import parse_squeue

R22 = Path(__file__).parent / "fixtures" / "slurm-22.05"


def test_jobs_text_agrees_with_squeue_json():
    text_jobs = {j.job_id: j for j in parse_jobs((R22 / "scontrol-show-job.txt").read_text())}
    json_jobs = {j.job_id: j for j in parse_squeue((R22 / "squeue.json").read_text()).jobs}
    assert set(text_jobs) == set(json_jobs)
    for jid, tj in text_jobs.items():
        jj = json_jobs[jid]
        assert (tj.name, tj.user, tj.state, tj.partition, tj.gpus, tj.num_nodes, tj.priority) == \
               (jj.name, jj.user, jj.state, jj.partition, jj.gpus, jj.num_nodes, jj.priority), jid
        assert dict(tj.gpu_indices) == dict(jj.gpu_indices), jid
        assert (tj.required_nodes, tj.excluded_nodes, tj.held) == (jj.required_nodes, jj.excluded_nodes, jj.held), jid
        if jj.submit_time:
            assert tj.submit_time == jj.submit_time


def test_nodes_and_reservations_text():
    nodes = {n.name: n for n in parse_nodes((R22 / "scontrol-show-nodes.txt").read_text())}
    assert nodes["node2"].state == "IDLE" and "DRAIN" in nodes["node2"].flags and not nodes["node2"].usable
    assert nodes["node2"].reason.startswith("lab: bad gpu") and nodes["node1"].gpus == 8
    resv = {r.name: r for r in parse_reservations((R22 / "scontrol-show-reservation.txt").read_text())}
    assert resv["alice_now"].nodes == ("node1",) and resv["alice_now"].users == ("alice",)
    assert "IGNORE_JOBS" in resv["alice_now"].flags and resv["alice_now"].state == "ACTIVE"
    assert resv["maint_later"].nodes == ("node3", "node4") and not resv["maint_later"].active(time.time())
    assert resv["alice_now"].end_time - resv["alice_now"].start_time == 3600
    assert parse_reservations("No reservations in the system\n") == ()


def test_config():
    conf = parse_config((R22 / "scontrol-show-config.txt").read_text())
    assert conf["SchedulerType"] == "sched/builtin" and conf["PriorityType"] == "priority/multifactor"
    assert conf["SLURM_CONF"].endswith("/etc/slurm.conf") and conf["GresTypes"] == "gpu"
    with pytest.raises(SlurmParseError):
        parse_config("nothing useful\n")


def test_durations_and_times():
    assert slurm_duration("UNLIMITED") is None
    assert slurm_duration("1-02:03:04") == 86400 + 7384
    assert slurm_duration("02:03:04") == 7384 and slurm_duration("10:00") == 600 and slurm_duration("5") == 300
    assert slurm_duration("2-03") == 2 * 86400 + 3 * 3600
    with pytest.raises(SlurmParseError):
        slurm_duration("soon")
    assert slurm_time("Unknown") is None and slurm_time("2026-11-29T22:16:22") == time.mktime((2026, 11, 29, 22, 16, 22, 0, 0, -1))
    with pytest.raises(SlurmParseError):
        slurm_time("yesterday")


def _job_line(name: str, comment: str = "x") -> str:
    line = (R22 / "scontrol-show-job.txt").read_text().splitlines()[4]  # job 5, run_a
    line = line.replace("JobName=run_a", f"JobName={name}")
    return line.rstrip() + f" Comment={comment} "


@pytest.mark.parametrize("name", [
    'quote " \' `x`', "semi; rm -rf /", "$(reboot) ${HOME}", "ünïcödé 名前",
    "spoof JobState=COMPLETED Priority=99999 UserId=root(0) Partition=other",
])
def test_hostile_job_names_cannot_spoof_fields(name):
    (job,) = parse_jobs(_job_line(name, comment="JobId=1 JobState=FAILED NodeList=node9"))
    assert job.job_id == "5" and job.state == "RUNNING" and job.user == "alice" and job.priority == 1
    assert job.partition == "main" and job.nodes == ("node1",)
    if "=" not in name:
        assert job.name == name


def test_newline_in_a_job_name_is_joined_back():
    text = _job_line("two\nlines") + "\n" + (R22 / "scontrol-show-job.txt").read_text().splitlines()[5]
    jobs = parse_jobs(text)
    assert [j.job_id for j in jobs] == ["5", "6"] and jobs[0].name == "two\nlines"


def test_records_and_line_basics():
    assert list(records("NodeName=a State=IDLE\ncontinued\nNodeName=b\n")) == ["NodeName=a State=IDLE\ncontinued", "NodeName=b"]
    with pytest.raises(SlurmParseError):
        list(records("garbage first\nNodeName=a"))
    d = parse_line("NodeName=n1 Reason=cable cut [root@2024] OS=Linux 6.1 #1 SMP")
    assert d["Reason"] == "cable cut [root@2024]" and d["OS"] == "Linux 6.1 #1 SMP"


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=300))
def test_fuzzed_text_never_crashes(text):
    for fn in (parse_jobs, parse_nodes, parse_reservations):
        try:
            fn("JobId=1 " + text if fn is parse_jobs else text)
        except SlurmParseError:
            pass
    try:
        parse_config(text)
    except SlurmParseError:
        pass


def test_recorded_scenario_ids():
    scenario = json.loads((R22 / "scenario.json").read_text())["jobs"]
    jobs = {j.job_id: j for j in parse_jobs((R22 / "scontrol-show-job.txt").read_text())}
    assert jobs[str(scenario["pinned"])].required_nodes == ("node4",)
    assert jobs[str(scenario["admin_held"])].held
