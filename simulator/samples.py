"""Traces shipped with attentived, so a replay or demo runs on a fresh install.

The files live in the package data (``attentived/data/traces/``, provenance in
``attentived/data/ATTRIBUTION.md``); the CLI's ``--sample NAME`` resolves them here.
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

from .trace import TraceError

__all__ = ["SAMPLES", "sample_path"]

SAMPLES: dict[str, str] = {
    "philly-sample": "philly-sample.csv",
    "philly": "philly-2017-sep-oct.csv.gz",
    "tiresias-60": "tiresias-60.csv",
}
"""Bundled trace names and their files: ``philly-sample`` is 300 Philly jobs (32.5 hours,
1-8 GPUs, 6 virtual clusters) that load a 4 x 8-GPU cluster to about 1.6x; ``philly`` is
the whole Sep-Oct 2017 Philly trace (52,849 jobs); ``tiresias-60`` is the 60-job list of
the Tiresias simulator (1-8 GPUs, CNN model names)."""


def sample_path(name: str) -> Path:
    """The file of a bundled trace, for `load_trace`; a `TraceError` (an input error the CLI
    reports in one line, exit 2) naming the choices."""
    if name not in SAMPLES:
        raise TraceError("--sample", f"unknown sample trace {name!r}; choose one of: {', '.join(SAMPLES)}")
    # attentived is installed as plain files (setuptools never zips it), so this is a Path.
    return Path(str(files("attentived.data") / "traces" / SAMPLES[name]))
