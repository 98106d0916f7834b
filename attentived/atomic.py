"""All-or-nothing output: a report, file or folder, is either complete or not written at all."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path


def write_folder(out: Path, fill: Callable[[Path], None]) -> list[Path]:
    """Let ``fill`` write its files into a temporary folder beside ``out``, then move them
    all into ``out``. An exception in ``fill`` leaves ``out`` as it was (created if
    missing, but with none of this run's files)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".attentived-", dir=out))
    try:
        fill(tmp)
        written = []
        for f in sorted(tmp.iterdir()):
            os.replace(f, out / f.name)
            written.append(out / f.name)
        return written
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def write_file(path: Path, write: Callable[[Path], object]) -> None:
    """Let ``write`` fill a temporary file beside ``path`` (``path`` plus ``.tmp``; what it
    returns is ignored), then rename it over ``path``: a reader, or a run stopped half-way,
    never sees half a file; a failed write leaves the old file and no temporary one."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        write(tmp)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_text(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` (`write_file`)."""
    write_file(path, lambda tmp: tmp.write_text(text))
