"""Shared fixtures. The Slurm lab (attentived/slurmlab, attentived.ops.lab) for tests marked
``slurm``:

- ``slurm_lab`` (session): the 4-node lab in $ATTENTIVED_LAB_RUN (default /tmp/attentived-lab),
  started once and stopped at the end of the session; a lab that was already running (started
  by hand) is reused and left running. Installs Slurm when it is missing and this is root.
  Skips when the lab cannot run here (not root, Slurm missing and not installable), unless
  ATTENTIVED_LAB_REQUIRED=1 or CI is set: then that is a test error instead.
  ATTENTIVED_LAB_INSTALL=0 forbids the automatic install.
- ``clean_lab`` (function): the same lab after ``reset()`` (no jobs, no reservations, all
  nodes idle and in service).
"""

from __future__ import annotations

import os

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


@pytest.fixture(scope="session")
def slurm_lab():
    if os.geteuid() != 0:
        _unavailable("the Slurm lab runs slurmd/munged as root: run the slurm tests as root")
    if not slurm_installed():
        if os.environ.get("ATTENTIVED_LAB_INSTALL") == "0":
            _unavailable("Slurm is not installed (bash attentived/slurmlab/install.sh)")
        try:
            install()
        except LabError as exc:
            _unavailable(f"Slurm is not installed and installing it failed: {exc}")
    lab = Lab()
    with lab.exclusive():
        started = False
        if lab.is_running() and lab.info().get("nodes") == str(lab.nodes) and lab.info().get("accounting") == "1":
            lab.reset()
        else:
            if lab.is_running():
                lab.stop()
            lab.start()
            started = True
        try:
            yield lab
        finally:
            if started:
                lab.stop()


@pytest.fixture
def clean_lab(slurm_lab):
    slurm_lab.reset()
    return slurm_lab
