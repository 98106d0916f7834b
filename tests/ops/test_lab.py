"""The project's Slurm lab (attentived/slurmlab + attentived.ops.lab).

Tests marked ``slurm`` run against the real lab (see tests/conftest.py); the others check the
rendered configuration and the argv building without Slurm.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from attentived.daemon import scontrol_text
from attentived.daemon.checks import keeps_accounting
from attentived.ops.lab import (
    DEFAULT_PORT_BASE,
    Lab,
    LabError,
    parse_scontrol_line,
    scripts_dir,
)

SCRIPTS = ("install.sh", "start.sh", "stop.sh", "reset.sh", "users.sh", "common.sh", "root.sh")


def _conf_lines(path: Path) -> list[str]:
    return [ln for ln in path.read_text().splitlines() if ln.strip() and not ln.startswith("#")]


# ---- without Slurm ---------------------------------------------------------------------------
def test_scripts_are_package_data():
    here = scripts_dir()
    for name in (*SCRIPTS, "slurm.conf.in", "gres.conf.in", "client.in", "daemon.in", "topology.conf", "cgroup.conf"):
        assert (here / name).is_file(), name
    for name in SCRIPTS:
        subprocess.run(["bash", "-n", str(here / name)], check=True, timeout=10)


def test_render_default_four_nodes(tmp_path):
    etc = Lab(run_dir=tmp_path / "lab").render()
    conf = (etc / "slurm.conf").read_text()
    assert not re.search(r"@[A-Z_]+@", "\n".join(_conf_lines(etc / "slurm.conf")))
    nodes = [ln for ln in conf.splitlines() if ln.startswith("NodeName=")]
    assert [ln.split()[0] for ln in nodes] == ["NodeName=node[1-2]", "NodeName=node[3-4]"]
    assert f"Port=[{DEFAULT_PORT_BASE + 1}-{DEFAULT_PORT_BASE + 2}]" in nodes[0]
    assert all("Gres=gpu:h100:8" in ln for ln in nodes)
    assert "PartitionName=main Nodes=ALL Default=YES" in conf
    assert "PartitionName=other Nodes=ALL" in conf
    assert "SchedulerType=sched/builtin" in conf and "PriorityType=priority/multifactor" in conf
    # the shipped topology.conf documents the layout start.sh writes for 4 nodes
    assert _conf_lines(etc / "topology.conf") == _conf_lines(scripts_dir() / "topology.conf")
    gres = _conf_lines(etc / "gres.conf")
    assert len([g for g in gres if g.startswith("NodeName=node[1-4] Name=gpu Type=h100")]) == 8
    assert "Links=-1,4,4,4,0,0,0,0" in gres[1] and "Links=0,0,0,0,4,4,4,-1" in gres[-1]
    assert all((etc.parent / "dev" / f"nvidia{i}").is_symlink() for i in range(8))


def test_render_without_accounting_bills_nothing(tmp_path):
    # slurmctld tracks GRES only with slurmdbd and refuses billing weights on an untracked TRES
    with_dbd = "\n".join(_conf_lines(Lab(run_dir=tmp_path / "a").render() / "slurm.conf"))
    without = "\n".join(_conf_lines(Lab(run_dir=tmp_path / "b", accounting=False).render() / "slurm.conf"))
    assert "TRESBillingWeights=CPU=0,GRES/gpu=1" in with_dbd and "accounting_storage/slurmdbd" in with_dbd
    assert "TRESBilling" not in without and "AccountingStorageTRES" not in without
    assert "AccountingStorageType=accounting_storage/none" in without
    assert not re.search(r"@[A-Z_]+@", without)


def test_render_sixteen_nodes(tmp_path):
    etc = Lab(run_dir=tmp_path / "lab", nodes=16, nodes_per_switch=4, port_base=20000).render()
    conf = (etc / "slurm.conf").read_text()
    ports = re.findall(r"Port=\[(\d+)-(\d+)\]", conf)
    assert ports == [("20001", "20004"), ("20005", "20008"), ("20009", "20012"), ("20013", "20016")]
    assert "SlurmctldPort=20000" in conf
    assert _conf_lines(etc / "topology.conf") == [
        "SwitchName=sw1 Nodes=node[1-4]", "SwitchName=sw2 Nodes=node[5-8]",
        "SwitchName=sw3 Nodes=node[9-12]", "SwitchName=sw4 Nodes=node[13-16]",
        "SwitchName=spine Switches=sw[1-4]"]
    assert "NodeName=node[1-16] Name=gpu" in (etc / "gres.conf").read_text()


def test_start_refuses_foreign_dir(tmp_path):
    (tmp_path / "precious.txt").write_text("keep me")
    with pytest.raises(LabError, match="not wiping"):
        Lab(run_dir=tmp_path).render()
    assert (tmp_path / "precious.txt").exists()


def test_sbatch_argv_never_builds_a_shell_line():
    lab = Lab(run_dir="/tmp/x-lab")
    script = "echo $CUDA_VISIBLE_DEVICES; rm -rf / # stays one argv element"
    argv = lab.sbatch_argv("alice", 16, script=script, name="a b", hold=True, partition="other")
    assert argv[:4] == ["runuser", "-u", "alice", "--"]
    assert argv[-2:] == ["--wrap", script]
    assert argv[argv.index("--nodes") + 1] == "2" and argv[argv.index("--gres") + 1] == "gpu:8"
    assert "--hold" in argv and argv[argv.index("--job-name") + 1] == "a b"
    assert lab.sbatch_argv(None, 0)[0] == "sbatch"
    with pytest.raises(ValueError):
        lab.sbatch_argv("alice", 3, nodes=2)
    with pytest.raises(ValueError):
        lab.sbatch_argv("alice; rm", 1)


def test_parse_scontrol_line():
    d = parse_scontrol_line("NodeName=node1 Arch=x86_64 CoresPerSocket=4  OS=Linux 6.1 #1 SMP State=IDLE "
                            "AllocNode:Sid=localhost:12 Reason=cable cut [root@2024]")
    assert d["NodeName"] == "node1" and d["CoresPerSocket"] == "4" and d["OS"] == "Linux 6.1 #1 SMP"
    assert d["AllocNode:Sid"] == "localhost:12" and d["Reason"] == "cable cut [root@2024]"


FIXTURES = Path(__file__).parent.parent / "daemon" / "fixtures"


@pytest.mark.parametrize("version", ["22.05", "24.11"])
def test_recorded_fixtures_match_their_scenario(version):
    rec = FIXTURES / f"slurm-{version}"
    scenario = json.loads((rec / "scenario.json").read_text())
    assert scenario["slurm"].startswith(version)
    jobs = {j["job_id"]: j for j in json.loads((rec / "squeue.json").read_text())["jobs"]}
    want = {"warmup": ("root", "COMPLETED"), "done_a": ("alice", "COMPLETED"), "failed": ("carol", "FAILED"),
            "run_b": ("bob", "RUNNING"), "run_c": ("carol", "RUNNING"), "held": ("carol", "PENDING"),
            "pinned": ("bob", "PENDING"), "cancelled": ("bob", "CANCELLED")}
    for name, (user, state) in want.items():
        job = jobs[scenario["jobs"][name]]
        job_state = job["job_state"] if isinstance(job["job_state"], str) else job["job_state"][0]  # 24.11: a list
        assert (job["name"], job["user_name"], job_state) == (name, user, state)
    assert jobs[scenario["jobs"]["run_c"]]["partition"] == "other"
    lines = (rec / "scontrol-show-job.txt").read_text().splitlines()
    by_id = {int(d["JobId"]): d for d in map(parse_scontrol_line, lines)}
    assert by_id[scenario["jobs"]["pinned"]]["ReqNodeList"] == "node4"
    assert by_id[scenario["jobs"]["admin_held"]]["Reason"] == "JobHeldAdmin"
    nodes = {d["NodeName"]: d for d in map(parse_scontrol_line, (rec / "scontrol-show-nodes.txt").read_text().splitlines())}
    assert nodes["node2"]["State"].startswith("IDLE+DRAIN") and nodes["node2"]["Reason"].startswith("lab: bad gpu")
    res = (rec / "scontrol-show-reservation.txt").read_text()
    assert "ReservationName=alice_now" in res and "ReservationName=maint_later" in res
    meta = "Slurm" if version == "22.05" else "slurm"  # 24.11 renamed the key
    for f in rec.glob("*.json"):
        if not f.name.startswith("scenario"):  # which job is which, written by hand
            assert json.loads(f.read_text())["meta"][meta]["release"].startswith(version), f


# ---- against the running lab -------------------------------------------------------------------
@pytest.mark.slurm
def test_four_idle_nodes_with_eight_h100(clean_lab):
    nodes = clean_lab.nodes_info()
    assert sorted(nodes) == ["node1", "node2", "node3", "node4"]
    for name, n in nodes.items():
        assert n["State"] == "IDLE", (name, n["State"])
        assert n["Gres"].startswith("gpu:h100:8"), n["Gres"]
        assert n["Partitions"] == "main,other"
        assert n["CPUTot"] == "8"
    assert nodes["node1"]["AvailableFeatures"] == "rack1,sw1"
    assert nodes["node4"]["AvailableFeatures"] == "rack2,sw2"
    out = clean_lab.run(["sinfo", "--json"]).stdout
    data = json.loads(out)
    if "nodes" in data:  # 22.05: one entry per node
        names = {n["name"] for n in data["nodes"]}
    else:  # 23.02+: grouped entries
        names = {n for e in data["sinfo"] for n in e["nodes"]["nodes"]}
    assert names == {"node1", "node2", "node3", "node4"}
    topo = clean_lab.scontrol("show", "topology")
    assert "SwitchName=spine" in topo and "SwitchName=sw1" in topo


def _state(job: dict) -> str:
    s = job["job_state"]
    return s if isinstance(s, str) else s[0]  # 22.05 "RUNNING", 23.02+ ["RUNNING"]


@pytest.mark.slurm
def test_gpu_job_runs_as_alice_and_sees_two_gpus(clean_lab):
    lab = clean_lab
    job = lab.submit("alice", 2, script='id -un; echo "$SLURMD_NODENAME $CUDA_VISIBLE_DEVICES"; sleep 1')
    assert lab.wait_for_state(job, {"RUNNING", "COMPLETED"}) in {"RUNNING", "COMPLETED"}
    lab.wait_for_state(job, "COMPLETED", timeout=30)
    user, placed = lab.output(job).splitlines()[:2]
    assert user == "alice"
    node, gpus = placed.split()
    assert node in lab.node_names()
    assert len(gpus.split(",")) == 2
    info = lab.job(job)
    assert info["UserId"].startswith("alice(")
    rec = next(j for j in lab.squeue_json()["jobs"] if j["job_id"] == job)
    assert rec["user_name"] == "alice" and _state(rec) == "COMPLETED"


@pytest.mark.slurm
def test_other_partition_job_runs(clean_lab):
    job = clean_lab.submit("carol", 1, partition="other", script="true")
    clean_lab.wait_for_state(job, "COMPLETED")
    assert clean_lab.job(job)["Partition"] == "other"


@pytest.mark.slurm
def test_admin_priorities_decide_start_order(clean_lab):
    lab = clean_lab
    blocker = lab.submit("bob", 32, nodes=4, script="sleep 2", name="blocker")
    lab.wait_for_state(blocker, "RUNNING")  # holds the whole cluster before A, B, C arrive
    jobs = {name: lab.submit(user, 32, nodes=4, script="sleep 0.5", name=name)
            for name, user in (("A", "alice"), ("B", "bob"), ("C", "carol"))}
    for name, prio in (("A", 100), ("B", 500), ("C", 1000)):
        lab.scontrol("update", f"JobId={jobs[name]}", f"Priority={prio}")
    assert lab.job(jobs["C"])["Priority"] == "1000"
    assert lab.job_state(blocker) == "RUNNING", "the blocker ended before the priorities were set"
    for job in jobs.values():
        lab.wait_for_state(job, "COMPLETED", timeout=60)
    # order by end time: 24.11 may report a StartTime up to ~1 s before the real allocation
    ends = {name: lab.job(job)["EndTime"] for name, job in jobs.items()}
    assert sorted(ends, key=lambda n: (ends[n], -int(lab.job(jobs[n])["JobId"]))) == ["C", "B", "A"], ends


@pytest.mark.slurm
def test_reqnodelist_pins_a_pending_job(clean_lab):
    lab = clean_lab
    job = lab.submit("carol", 4, hold=True, script='echo "$SLURMD_NODENAME"')
    lab.scontrol("update", f"JobId={job}", "ReqNodeList=node3")
    assert lab.job(job)["ReqNodeList"] == "node3"
    lab.scontrol("release", str(job))
    lab.wait_for_state(job, "COMPLETED")
    assert lab.output(job).split() == ["node3"]
    assert lab.job(job)["NodeList"] == "node3"


@pytest.mark.slurm
def test_reservation_create_use_delete(clean_lab):
    lab = clean_lab
    lab.scontrol("create", "reservation", "ReservationName=lab_r1", "Nodes=node2", "Users=alice",
                 "StartTime=now", "Duration=10")
    res = lab.reservations()
    assert res["lab_r1"]["Nodes"] == "node2" and res["lab_r1"]["Users"] == "alice"
    job = lab.submit("alice", 1, script='echo "$SLURMD_NODENAME $SLURM_JOB_RESERVATION"',
                     extra_args=["--reservation", "lab_r1"])
    lab.wait_for_state(job, "COMPLETED")
    assert lab.output(job).split() == ["node2", "lab_r1"]
    # bob is not in the reservation: his job cannot use it
    with pytest.raises(LabError):
        lab.submit("bob", 1, extra_args=["--reservation", "lab_r1"])
    lab.scontrol("delete", "ReservationName=lab_r1")
    assert "lab_r1" not in lab.reservations()


@pytest.mark.slurm
def test_reset_cancels_jobs_and_resumes_nodes(clean_lab):
    lab = clean_lab
    running = lab.submit("alice", 8, script="sleep 300")
    held = lab.submit("bob", 1, hold=True)
    lab.wait_for_state(running, "RUNNING")
    lab.scontrol("update", "NodeName=node4", "State=DRAIN", "Reason=lab test")
    lab.scontrol("create", "reservation", "ReservationName=lab_r2", "Nodes=node1", "Users=bob",
                 "StartTime=now", "Duration=10", "Flags=IGNORE_JOBS")
    lab.reset()
    assert lab.job_state(running) == "CANCELLED" and lab.job_state(held) == "CANCELLED"
    assert lab.reservations() == {}
    assert {n["State"] for n in lab.nodes_info().values()} == {"IDLE"}


@pytest.mark.slurm
def test_lab_without_accounting_runs_gpu_jobs(slurm_lab, tmp_path):
    lab = Lab(run_dir=tmp_path / "lab", port_base=DEFAULT_PORT_BASE + 300, accounting=False)
    try:
        lab.start()
        job = lab.submit(None, 2, script="sleep 1")  # root: alice cannot read pytest's tmp_path
        lab.wait_for_state(job, "COMPLETED", timeout=30)
        conf = scontrol_text.parse_config(lab.scontrol("show", "config"))
        assert not keeps_accounting(conf["AccountingStorageType"]), conf["AccountingStorageType"]
    finally:
        lab.stop()
    assert slurm_lab.is_running()


@pytest.mark.slurm
def test_second_lab_starts_and_stop_leaves_nothing(slurm_lab, tmp_path):
    """A private lab next to the session one: start time, refusal to double-start, clean stop."""
    lab = Lab(run_dir=tmp_path / "lab", port_base=DEFAULT_PORT_BASE + 200, users=())
    try:
        seconds = lab.start()
        assert lab.is_running()
        assert seconds < 30
        assert len(lab.processes()) >= 6  # munged, slurmctld (+ scriptd), 4 slurmd
        with pytest.raises(LabError, match="already running"):
            lab.start()
        job = lab.submit(None, 8, script="sleep 300")
        lab.wait_for_state(job, "RUNNING")
        assert len(lab.squeue_json()["jobs"]) >= 2  # warmup + ours
    finally:
        lab.stop()
    assert not lab.is_running()
    assert lab.processes() == []
    needle = str(lab.run_dir).encode()
    leftovers = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if needle in (proc / "cmdline").read_bytes() or \
                        f"SLURM_CONF={lab.slurm_conf}".encode() in (proc / "environ").read_bytes():
                    leftovers.append(proc.name)
            except OSError:
                pass
    assert leftovers == []
    # the session lab was not touched
    assert slurm_lab.is_running()
