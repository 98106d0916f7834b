"""``attentived start`` with a backend that SIGKILLs the daemon after its Nth Slurm write.

    python tests/daemon/crashing_daemon.py --crash-after N [--config FILE] [--dry-run] [--once] [--shadow]
    python -m tests.daemon.crashing_daemon --crash-after N ...        (from the repository root)

Everything after ``--crash-after N`` is what ``attentived start`` takes. The daemon runs
through ``attentived start``'s own entry point (daemon/service.py ``main``) with ``backend=``
the config's own backend (``connect.make_backend``) wrapped in ``crashing.CrashingBackend``. A separate
process, so that tests can watch it die and restart a daemon on the same state. Test code
only: production code has no fault-injection hook.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from attentived.daemon import config as cfgmod
from attentived.daemon.connect import make_backend
from attentived.daemon.service import EXIT_CONFIG
from attentived.daemon.service import main as start

if __package__:
    from .crashing import CrashingBackend
else:  # run as a script: this folder is sys.path[0]
    from crashing import CrashingBackend  # type: ignore[import-not-found, no-redef]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="crashing_daemon", description=__doc__.split("\n\n")[0])
    ap.add_argument("--crash-after", type=int, required=True, metavar="N",
                    help="SIGKILL the daemon right after its Nth Slurm write (one count per job update)")
    ap.add_argument("--config", "-c", type=Path, default=None)
    ap.add_argument("--dry-run", action="store_true")
    ap.add_argument("--once", action="store_true")
    ap.add_argument("--shadow", action="store_true")
    args = ap.parse_args(argv)
    try:
        base = cfgmod.load(args.config)  # only for the backend's settings; start() loads it again
    except cfgmod.ConfigError as e:
        print(f"attentived: error: {e}", file=sys.stderr)
        return EXIT_CONFIG
    inner = make_backend(base.backend, slurm_conf=base.slurm_conf or None, timeout=base.command_timeout,
                         bin_dir=base.slurm_bin_dir or None)
    return start(args.config, dry_run=args.dry_run, once=args.once, shadow=args.shadow,
                 backend=CrashingBackend(inner, args.crash_after))


if __name__ == "__main__":
    sys.exit(main())
