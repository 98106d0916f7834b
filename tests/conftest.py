"""Shared fixtures. The Slurm lab (attentived/slurmlab, attentived.ops.lab) for tests marked
``slurm``:

- ``slurm_lab`` (session): the 4-node lab in $ATTENTIVED_LAB_RUN (default /tmp/attentived-lab),
  started once and stopped at the end of the session; a lab that was already running (started
  by hand) is reused and left running. Installs Slurm when it is missing and this is root.
  Skips when the lab cannot run here (not root, Slurm missing and not installable), unless
  ATTENTIVED_LAB_REQUIRED=1 or CI is set: then that is a test error instead.
  ATTENTIVED_LAB_INSTALL=0 forbids the automatic install. ATTENTIVED_LAB_SLURM=24.11 runs it
  on Slurm 24.11 (a Debian 13 root on a Debian 12 host; see docs/slurm-lab.md): its client
  commands then come first on this process's PATH for the session, so code that runs
  ``squeue`` itself (the daemon's backend) reaches that Slurm too.
- ``slurm_lab_2411`` (session): a second lab on Slurm 24.11 in its own run dir and ports
  ($ATTENTIVED_LAB_2411_RUN, default /tmp/attentived-lab-2411; $ATTENTIVED_LAB_2411_PORT_BASE,
  default 17717), for the tests of that version; skips (or fails, as above) with the reason
  when its Debian root cannot be built (not root, no debootstrap, no network to the mirror).
- ``clean_lab`` (function): the same lab after ``reset()`` (no jobs, no reservations, all
  nodes idle and in service).
- ``config_for_user`` (function): makes daemon configs a non-root lab user can run with.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from attentived.ops.lab import Lab, LabError, install, slurm_installed


def _lab_required() -> bool:
    if os.environ.get("ATTENTIVED_LAB_REQUIRED") is not None:
        return os.environ["ATTENTIVED_LAB_REQUIRED"] == "1"
    return bool(os.environ.get("CI"))


def _unavailable(reason: str):
    if _lab_required():
        pytest.fail(f"Slurm lab required (CI / ATTENTIVED_LAB_REQUIRED=1) but {reason}", pytrace=False)
    pytest.skip(reason)


def _ensure_slurm(lab: Lab) -> None:
    """The lab's Slurm is there: its Debian root built (lab.slurm not the host's own), or the
    host's packages installed; else skip (or fail) saying why."""
    if os.geteuid() != 0:
        _unavailable("the Slurm lab runs slurmd/munged as root: run the slurm tests as root")
    try:
        if lab.prepare() is not None:
            return
    except LabError as exc:
        _unavailable(f"no Debian root with Slurm {lab.slurm} for the lab: {exc}")
    if not slurm_installed():
        if os.environ.get("ATTENTIVED_LAB_INSTALL") == "0":
            _unavailable("Slurm is not installed (bash attentived/slurmlab/install.sh)")
        try:
            install()
        except LabError as exc:
            _unavailable(f"Slurm is not installed and installing it failed: {exc}")


def _lab_session(lab: Lab, own_path: bool) -> Iterator[Lab]:
    """The running lab for a test session: one already running with these settings is reset
    and left running, any other is (re)started and stopped at the end. ``own_path``: its
    clients come first on this process's PATH for the session (the session's main lab only:
    a second lab of another version must not take the first one's commands)."""
    _ensure_slurm(lab)
    with lab.exclusive():
        info = lab.info()
        started = False
        if (lab.is_running() and info.get("nodes") == str(lab.nodes) and info.get("accounting") == "1"
                and info.get("slurm", "").startswith(lab.slurm)):
            lab.reset()
        else:
            if lab.is_running():
                lab.stop()
            lab.start()
            started = True
        try:
            with pytest.MonkeyPatch.context() as mp:
                if own_path:
                    mp.setenv("PATH", lab.env()["PATH"])
                yield lab
        finally:
            if started:
                lab.stop()


@pytest.fixture(scope="session")
def slurm_lab():
    yield from _lab_session(Lab(), own_path=True)


@pytest.fixture(scope="session")
def slurm_lab_2411():
    run_dir = os.environ.get("ATTENTIVED_LAB_2411_RUN") or "/tmp/attentived-lab-2411"
    port_base = int(os.environ.get("ATTENTIVED_LAB_2411_PORT_BASE") or 17717)
    yield from _lab_session(Lab(run_dir, port_base=port_base, slurm="24.11"), own_path=False)


@pytest.fixture
def clean_lab(slurm_lab):
    slurm_lab.reset()
    return slurm_lab


@pytest.fixture
def config_for_user():
    """Makes daemon configs for the lab that a user can read, with a state dir it can write:
    outside pytest's tmp_path, which only root may enter; removed after the test."""
    made: list[Path] = []

    def make(lab: Lab, user: str) -> Path:
        work = Path(tempfile.mkdtemp(prefix=f"attentived-{user}-"))
        made.append(work)
        os.chmod(work, 0o777)
        conf = work / "c.toml"
        conf.write_text(f'partitions = ["main"]\nstate_dir = "{work / "state"}"\nslurm_conf = "{lab.slurm_conf}"\n'
                        "metrics_port = 0\n")
        conf.chmod(0o644)
        return conf

    yield make
    for work in made:
        shutil.rmtree(work)
