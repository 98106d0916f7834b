"""Slurm 24.11 live: the lab on Slurm 24.11 (``start.sh --slurm 24.11``: the host's packages on
Debian 13; on Debian 12 every daemon and client runs in a cached Debian 13 root, see
docs/slurm-lab.md), with the project's parser, backend and daemon against it.

The lab is the session fixture ``slurm_lab_2411`` (tests/conftest.py, its own run dir and
ports): it skips saying why when the root cannot be built here (not root, no debootstrap, no
network to the Debian mirror), and fails instead under CI or ATTENTIVED_LAB_REQUIRED=1.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from attentived.daemon import slurm_json
from attentived.daemon.cli_backend import CliBackend
from attentived.ops.lab import Lab, LabError, parse_scontrol_line, scripts_dir

from ..daemon.test_daemon_slurm import wait_until

ROOT = Path(__file__).parents[2]
BASE_PATH = "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"


def mounts_under(path: Path) -> list[str]:
    prefix = f"{path}/"
    with open("/proc/self/mountinfo") as fh:
        return [f.split()[4] for f in fh if f.split()[4].startswith(prefix)]


@pytest.fixture
def lab(slurm_lab_2411: Lab, monkeypatch) -> Lab:
    """The 24.11 lab, reset, with its client commands first on this process's PATH for the
    test (the session's 22.05 lab keeps the host's clients for the other tests)."""
    slurm_lab_2411.reset()
    monkeypatch.setenv("PATH", slurm_lab_2411.env()["PATH"])
    return slurm_lab_2411


@pytest.mark.slurm
def test_env_sh_puts_the_lab_clients_first(lab):
    """After ``. RUN/env.sh`` a plain shell's ``sinfo`` is the lab's 24.11, not the host's."""
    proc = subprocess.run(["bash", "-c", f'. "{lab.run_dir}/env.sh" && command -v sinfo && sinfo --version'],
                          env={"PATH": BASE_PATH}, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    where, version = proc.stdout.splitlines()
    assert version.split()[-1].startswith("24.11."), version
    if lab.info().get("root"):  # a Debian root: its clients are the wrappers in the run dir
        assert where == str(lab.client_bin / "sinfo")


@pytest.mark.slurm
def test_gpu_job_as_alice_runs_and_sacct_shows_it(lab):
    """A user's job (runuser -u alice -- sbatch, through the wrapper when not root) gets its
    two GPUs, its own Slurm commands reach the lab, and slurmdbd records it."""
    job = lab.submit("alice", 2, script='echo "$(id -un) $CUDA_VISIBLE_DEVICES"; squeue --version')
    lab.wait_for_state(job, "COMPLETED")
    who, version = lab.output(job).splitlines()
    assert who == "alice 0,1"
    assert version.split()[-1].startswith("24.11.")

    def accounted() -> list[str] | None:
        out = lab.run(["sacct", "-n", "-P", "-X", "-j", str(job), "-o", "JobID,User,State,AllocTRES"]).stdout
        fields = out.strip().split("|")
        return fields if len(fields) == 4 and fields[2] == "COMPLETED" else None

    fields = wait_until(accounted, what=f"job {job} in sacct")
    assert fields[:3] == [str(job), "alice", "COMPLETED"]
    assert "gres/gpu=2" in fields[3].split(","), fields[3]


@pytest.mark.slurm
def test_squeue_json_parses_and_the_backend_reads_the_lab(lab):
    job = lab.submit("bob", 8, script="sleep 300", hold=True)
    parsed = slurm_json.parse_squeue(lab.run(["squeue", "--json", "-t", "all"]).stdout)
    assert parsed.version is not None and (parsed.version.major, parsed.version.minor) == (24, 11)
    mine = {j.job_id: j for j in parsed.jobs}[str(job)]
    assert (mine.user, mine.state, mine.gpus, mine.partition) == ("bob", "PENDING", 8, "main")
    # the daemon's backend, as `attentived start` runs it: the lab's clients first on PATH
    backend = CliBackend(slurm_conf=str(lab.slurm_conf))
    try:
        snap = backend.snapshot()
    finally:
        backend.close()
    assert snap.version.has_scontrol_json  # nodes and reservations as scontrol --json
    assert snap.job(str(job)) is not None
    assert sorted(n.name for n in snap.nodes) == lab.node_names()
    assert {n.gpus for n in snap.nodes} == {8}
    if lab.client_bin.is_dir():  # or the daemon's slurm_bin_dir pointed at the lab's clients
        direct = CliBackend(slurm_conf=str(lab.slurm_conf), bin_dir=str(lab.client_bin))
        try:
            assert direct.version() == snap.version
        finally:
            direct.close()


def priorities(lab: Lab, jobs: list[int]) -> list[int]:
    return [int(parse_scontrol_line(lab.scontrol("-o", "show", "job", str(j)))["Priority"]) for j in jobs]


@pytest.mark.slurm
def test_daemon_cycle_orders_pending_jobs(lab, tmp_path):
    """``attentived start --once`` against the 24.11 lab sets the pending jobs' priorities."""
    blockers = [lab.submit(None, 7, script="sleep 600", name=f"blocker{i}", extra_args=["--nodelist", node])
                for i, node in enumerate(lab.node_names(), start=1)]
    for b in blockers:
        lab.wait_for_state(b, "RUNNING")
    pending = [lab.submit(user, 2, script="sleep 600", extra_args=["--time", "30"])
               for user in ("alice", "bob", "carol")]
    for j in pending:
        lab.wait_for_state(j, "PENDING")
    before = priorities(lab, pending)
    conf = tmp_path / "attentived.toml"
    conf.write_text(f'partitions = ["main"]\nslurm_conf = "{lab.slurm_conf}"\nstate_dir = "{tmp_path / "state"}"\n'
                    'metrics_port = 0\npolicy = "fifo+consolidate"\nlog_level = "info"\n')
    proc = subprocess.run([sys.executable, "-m", "attentived", "start", "--config", str(conf), "--once"],
                          cwd=ROOT, env=lab.env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    events = [json.loads(x) for x in proc.stderr.splitlines() if x.startswith("{")]
    assert any(e.get("event") == "cycle.plan" for e in events), proc.stderr[-3000:]
    after = priorities(lab, pending)
    assert after != before
    assert after == sorted(after, reverse=True) and len(set(after)) == len(after), (before, after)


@pytest.mark.slurm
def test_gpu_reservation_holds_gpus_on_24_11(lab):
    """On 24.11 with slurmdbd a reservation can hold GPUs by count (22.05 refuses
    TRES=gres/gpu): its user's job runs on the reserved GPUs, more than that does not."""
    out = lab.scontrol("create", "reservation", "ReservationName=gpu4", "Users=alice", "StartTime=now",
                       "Duration=10", "TRES=gres/gpu=4")
    assert "Reservation created: gpu4" in out
    resv = lab.reservations()["gpu4"]
    assert "gres/gpu=4" in resv["TRES"].split(","), resv
    fits = lab.submit("alice", 4, script="sleep 300", extra_args=["--reservation", "gpu4"])
    too_big = lab.submit("alice", 5, script="sleep 300", extra_args=["--reservation", "gpu4"])
    lab.wait_for_state(fits, "RUNNING")
    assert lab.job(fits)["NodeList"] == resv["Nodes"]
    time.sleep(1.5)  # a scheduling pass
    assert lab.job_state(too_big) == "PENDING"


def _release_without_root_here() -> str | None:
    """A Slurm version whose Debian root this host would have to build, if any."""
    suite = ""
    with open("/etc/os-release") as fh:
        for line in fh:
            if line.startswith("VERSION_CODENAME="):
                suite = line.split("=", 1)[1].strip().strip('"')
    return {"bookworm": "24.11", "trixie": "22.05"}.get(suite)


def test_start_that_cannot_build_the_root_says_why_and_leaves_nothing(tmp_path, monkeypatch):
    """No mirror to build from: start.sh names the failed step and leaves no half-built root,
    no mount and no process behind; Lab.prepare() raises with the same reason. Needs root, not
    Slurm, network or debootstrap."""
    version = _release_without_root_here()
    if os.geteuid() != 0 or version is None:
        pytest.skip("needs root on Debian 12 or 13")
    roots, run = tmp_path / "roots", tmp_path / "run"
    monkeypatch.setenv("ATTENTIVED_LAB_ROOTS", str(roots))
    monkeypatch.setenv("ATTENTIVED_LAB_MIRROR", "http://127.0.0.1:9/debian")  # nothing listens there
    proc = subprocess.run(["bash", str(scripts_dir() / "start.sh"), "--slurm", version, "--run", str(run),
                           "--port-base", "17717"], capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    assert "failed while: reaching http://127.0.0.1:9/debian" in proc.stderr, proc.stderr
    assert f"no Debian root with Slurm {version}" in proc.stderr
    assert [p.name for p in roots.iterdir() if not p.name.endswith((".lock", ".build.log"))] == []
    assert mounts_under(tmp_path) == []
    assert Lab(run, slurm=version).processes() == []
    with pytest.raises(LabError, match="reaching http://127.0.0.1:9/debian"):
        Lab(run, slurm=version).prepare(timeout=120)
