"""The backend a config names (``backend = "cli"`` or ``"pyslurm"``)."""

from __future__ import annotations

from .backend import Backend
from .cli_backend import CliBackend


def make_backend(name: str, *, slurm_conf: str | None = None, timeout: float = 30.0,
                 bin_dir: str | None = None) -> Backend:
    """``cli`` or ``pyslurm``; the latter raises ``SlurmUnavailable`` with the reason when
    pyslurm cannot be used here."""
    if name == "cli":
        return CliBackend(slurm_conf=slurm_conf, timeout=timeout, bin_dir=bin_dir)
    if name == "pyslurm":
        from .pyslurm_backend import PyslurmBackend

        return PyslurmBackend(slurm_conf=slurm_conf, timeout=timeout, bin_dir=bin_dir)
    raise ValueError(f"unknown backend {name!r}: use 'cli' or 'pyslurm'")
