"""Copy a training run's best model into the package, with its provenance record.

Writes ``attentived/data/models/<agent>-default.pt`` (the run's ``best.pt``) and
``<agent>-default.json``: the file's SHA-256 and size, parameter count, the command that
trained it and the code commit it was trained at (both from the run's ``provenance.json``,
which `attentived train` writes when it starts; ``--command`` and ``--commit`` for runs
without one; the command run at that commit reproduces the model), the selected update
and its validation score, the validation history, wall time, machine, reward weights and
the full `PPOConfig`. The ``.md`` model card next to it is written by hand from these
figures.

    .venv/bin/python bench/ship_model.py RUN_DIR [--command "attentived train --agent deeprm ..."] [--commit SHA]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import shutil
import subprocess
from pathlib import Path

MODELS = Path(__file__).resolve().parent.parent / "attentived" / "data" / "models"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run_dir", type=Path, help="an `attentived train` output folder (best.pt, summary.json)")
    ap.add_argument("--command", default=None,
                    help="the exact command that trained it (default: the run's provenance.json, which the run wrote)")
    ap.add_argument("--commit", default=None,
                    help="the commit it was trained at (default: the run's provenance.json; without one, HEAD, which must "
                         "be clean)")
    args = ap.parse_args()
    root = MODELS.parent.parent.parent
    started = args.run_dir / "provenance.json"
    recorded = json.loads(started.read_text()) if started.exists() else {}
    if recorded.get("dirty") and args.commit is None:
        ap.error(f"{started}: the run started on a working tree with uncommitted changes, so its commit does not "
                 "reproduce it: name the commit that does with --commit")
    command = args.command or recorded.get("command")
    if not command:
        ap.error("no --command, and the run recorded none (runs from before 2026-12-06 did not)")
    commit = args.commit or recorded.get("commit")
    if commit is None:
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root, capture_output=True,
                               text=True, check=True).stdout.strip()
        if dirty:
            ap.error("the working tree has uncommitted changes: commit them, or name the training commit with --commit")
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, check=True).stdout.strip()

    import torch

    from attentived.agents.checkpoint import load_model

    best, summary = args.run_dir / "best.pt", json.loads((args.run_dir / "summary.json").read_text())
    model = load_model(best)
    meta = model.meta
    name = f"{model.agent}-default.pt"
    MODELS.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(best, MODELS / name)
    data = (MODELS / name).read_bytes()
    cfg = summary["config"]
    record = {
        "model": name,
        "agent": model.agent,
        "sha256": hashlib.sha256(data).hexdigest(),
        "bytes": len(data),
        "parameters": sum(p.numel() for p in model.net.parameters()),
        "network": model.net.spec(),
        "command": command,
        "commit": commit,
        "seed": cfg["seed"],
        "selected_update": meta.get("update"),
        "selected_global_step": meta.get("global_step"),
        "selected_val_score": meta.get("val_score"),
        "updates_run": summary["updates"],
        "steps_run": summary["global_step"],
        "wall_s": summary["wall_s"],
        "machine": {"cpu_cores": os.cpu_count(), "torch_threads": cfg["torch_threads"], "device": summary["device"],
                    "torch": torch.__version__, "python": platform.python_version()},
        "reward": cfg["reward"],
        "train_trace": cfg["train_trace"], "train_days": cfg["train_days"], "val_days": cfg["val_days"],
        "curriculum": cfg["curriculum"],
        "validation_history": summary["validation"],
        "config": cfg,
    }
    (MODELS / f"{model.agent}-default.json").write_text(json.dumps(record, indent=2) + "\n")
    print(f"wrote {MODELS / name} and {MODELS / f'{model.agent}-default.json'} (sha256 {record['sha256'][:12]})")


if __name__ == "__main__":
    main()
