"""The long-running service behind ``attentived start``.

- Cycles run on APScheduler 3.x (``BackgroundScheduler`` + ``IntervalTrigger``,
  ``max_instances=1``, ``coalesce=True``): never two at once, a late one is not repeated.
  The first cycle runs at once.
- ``READY=1`` goes to systemd after the first good Slurm snapshot, ``WATCHDOG=1`` after
  every cycle, ``STOPPING=1`` at shutdown (``daemon/notify.py``).
- SIGTERM / SIGINT: no new cycle starts, the running one finishes, then the daemon removes
  its pins (``clear_pins_on_exit``, default) or hands all control back to Slurm
  (``hand_back_on_exit``) and exits 0.
- SIGHUP: the config file is read again; an invalid one is rejected with a logged error and
  the old one stays in force. ``--dry-run`` given on the command line stays in force.
- Prometheus metrics on ``metrics_address:metrics_port`` (``daemon/prom.py``).
"""

from __future__ import annotations

import datetime as _dt
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import structlog

from . import config as cfgmod
from . import heap
from . import log as dlog
from .backend import Backend
from .cycle import CycleRunner
from .notify import Notifier
from .prom import Metrics, MetricsServer

EXIT_OK, EXIT_FAILED, EXIT_CONFIG = 0, 1, 2


class _StdlibToStructlog(logging.Handler):
    """APScheduler logs through the stdlib: send those lines through structlog too.

    During a hung Slurm command APScheduler says "maximum number of running instances
    reached" at every interval; one line a minute (with how many were folded) says it."""

    QUIET = 60.0

    def __init__(self) -> None:
        super().__init__()
        self._last_skip = -self.QUIET
        self._folded = 0

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = record.getMessage()
            extra: dict[str, int] = {}
            if "maximum number of running instances" in message:
                now = time.monotonic()
                if now - self._last_skip < self.QUIET:
                    self._folded += 1
                    return
                extra, self._folded, self._last_skip = {"folded": self._folded}, 0, now
            structlog.get_logger(record.name).log(record.levelno, message, logger=record.name, **extra)
        except Exception:  # pragma: no cover - logging must never raise
            pass


RESTART_ONLY = ("state_dir", "reservation_prefix")
"""Keys a reload refuses to change: the open journal lives in ``state_dir`` and the
daemon knows its reservations by ``reservation_prefix``; changed under a running daemon,
its pins and reservations would be left behind, owned by nobody."""


class Service:
    def __init__(self, config_path: str | os.PathLike[str] | None = None, *, dry_run: bool | None = None,
                 config: cfgmod.Config | None = None, backend: Backend | None = None,
                 notifier: Notifier | None = None, runner_factory: Callable[..., CycleRunner] | None = None,
                 shadow: bool = False, overrides: dict[str, Any] | None = None) -> None:
        self.config_path = None if config_path is None else str(config_path)
        # Keys set on the command line: they win over the file, and over it again at each reload.
        self.overrides: dict[str, Any] = dict(overrides or {})
        if dry_run is not None:
            self.overrides["dry_run"] = bool(dry_run)
        if shadow:  # shadow = plan + journal + observe, never apply
            self.overrides["dry_run"] = True
        base = config if config is not None else cfgmod.load(self.config_path)
        self.config = base.with_overrides(**self.overrides)
        dlog.configure(self.config.log_level, self.config.log_format)
        handler = _StdlibToStructlog()
        for name in ("apscheduler",):
            lg = logging.getLogger(name)
            lg.handlers[:] = [handler]
            lg.setLevel(logging.WARNING)
            lg.propagate = False
        self.log = dlog.get()
        self.notifier = notifier or Notifier()
        self.metrics = Metrics()
        self.metrics_server: MetricsServer | None = None
        self.runner = (runner_factory or CycleRunner)(self.config, backend=backend, metrics=self.metrics, notifier=self.notifier)
        self.runner.shadow = bool(shadow)
        self._stop = threading.Event()
        self._reload = threading.Event()
        self._scheduler: Any = None
        self.cycles = 0
        self._settle = True  # after the first good snapshot, and after each reload (daemon/heap.py)

    # ---- one cycle ------------------------------------------------------------------------
    def tick(self) -> None:
        """One scheduled cycle plus the systemd notifications that go with it."""
        if self._stop.is_set():
            return
        res = self.runner.run_cycle()
        self.cycles += 1
        if res.snapshot_ok and self._settle:
            heap.settle()
            self._settle = False
        if res.snapshot_ok and not self.notifier.ready_sent:
            self.notifier.ready(status=f"first cycle {'ok' if res.ok else 'failed'}")
            self.log.info("service.ready", notify=self.notifier.enabled)
        self.notifier.watchdog()
        if not res.skipped:
            self.notifier.status(
                f"{'ok' if res.ok else 'error: ' + res.error[:80]}; {res.counts.get('managed', 0)} queued, "
                f"{len(res.outcomes)} actions, {res.duration:.2f}s")

    def permissions_ok(self) -> bool:
        """Live mode only: refuse to start without the Slurm rights the daemon's writes need."""
        problem = self.runner.permission_problem()
        if problem:
            self.log.error("startup.permission_denied", error=problem)
            print(f"attentived: error: {problem}", file=sys.stderr)
        return not problem

    def run_once(self) -> int:
        self.log.info("service.once", config=self.config.source, dry_run=self.config.dry_run, mode=self.runner.mode)
        if not self.permissions_ok():
            self._close()
            return EXIT_FAILED
        try:
            res = self.runner.run_cycle()
            if res.snapshot_ok:
                self.notifier.ready(status="once")
        finally:
            self._close()
        if not res.ok:
            print(f"attentived: error: {_once_failure(res, self.config)}", file=sys.stderr)
        return EXIT_OK if res.ok else EXIT_FAILED

    # ---- forever ------------------------------------------------------------------------
    def run_forever(self) -> int:
        from apscheduler.schedulers.background import BackgroundScheduler
        from apscheduler.triggers.interval import IntervalTrigger

        if not self.permissions_ok():
            self._close()
            return EXIT_FAILED
        self._install_signals()
        self._start_metrics()
        self.log.info("service.start", config=self.config.source, policy=self.runner.policy_name,
                      interval=self.config.interval, dry_run=self.config.dry_run, mode=self.runner.mode,
                      partitions=list(self.config.partitions), hold_mode=self.config.hold_mode,
                      metrics=f"{self.config.metrics_address}:{self.metrics_server.port}" if self.metrics_server else None,
                      pid=os.getpid())
        sched = BackgroundScheduler(timezone=_dt.UTC)
        sched.add_job(self.tick, IntervalTrigger(seconds=self.config.interval), id="cycle", max_instances=1,
                      coalesce=True, misfire_grace_time=max(1, int(self.config.interval)),
                      next_run_time=_dt.datetime.now(_dt.UTC))
        self._scheduler = sched
        sched.start()
        try:
            while not self._stop.is_set():
                self._stop.wait(0.2)
                if self._reload.is_set():
                    self._reload.clear()
                    self.reload()
        finally:
            self.log.info("service.stopping", cycles=self.cycles)
            self.notifier.stopping()
            sched.shutdown(wait=True)  # the running cycle finishes
            if (self.config.hand_back_on_exit or self.config.clear_pins_on_exit) and not self.config.dry_run:
                outcomes = self.runner.hand_back(pins_only=not self.config.hand_back_on_exit)
                self.log.info("service.handed_back", what="all" if self.config.hand_back_on_exit else "pins",
                              actions=len(outcomes), failed=sum(1 for o in outcomes if not o.ok))
            self._close()
            self.log.info("service.stopped")
        return EXIT_OK

    def stop(self) -> None:
        self._stop.set()


    def reload(self) -> bool:
        """Re-read the config file; keep the old config when the new one is invalid."""
        self.notifier.reloading()
        try:
            # Without --config the file read at start must still be there: a default path
            # removed (or renamed mid-edit) must not turn into the built-in defaults.
            required = self.config_path is not None or self.config.source != "(defaults)"
            new = cfgmod.load(self.config_path, required=required).with_overrides(**self.overrides)
            fixed = [k for k in RESTART_ONLY if getattr(new, k) != getattr(self.config, k)]
            if fixed:
                raise cfgmod.ConfigError(f"{new.source}: {', '.join(fixed)}: changes only at a restart (the journal "
                                         "and the reservations the daemon owns are found by them)")
        except cfgmod.ConfigError as e:
            self.log.error("config.reload_rejected", error=str(e), keeping=self.config.source)
            self.metrics.errors.inc(kind="config")
            self.notifier.send("READY=1", "STATUS=config reload rejected; old config kept")
            return False
        old = self.config
        self.runner.reload(new)
        self.config = new
        self._settle = True
        if (new.log_level, new.log_format) != (old.log_level, old.log_format):
            dlog.configure(new.log_level, new.log_format)
        if self._scheduler is not None and new.interval != old.interval:
            from apscheduler.triggers.interval import IntervalTrigger

            self._scheduler.reschedule_job("cycle", trigger=IntervalTrigger(seconds=new.interval))
        if (new.metrics_address, new.metrics_port) != (old.metrics_address, old.metrics_port):
            if self.metrics_server:
                self.metrics_server.stop()
                self.metrics_server = None
            self._start_metrics()
        changed = sorted(k for k, v in new.as_dict().items() if old.as_dict().get(k) != v)
        self.log.info("config.reloaded", config=new.source, changed=changed)
        self.notifier.send("READY=1", "STATUS=config reloaded")
        return True

    # ---- plumbing -----------------------------------------------------------------------
    def _install_signals(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return

        def on_stop(signum: int, _frame: Any) -> None:
            self.log.info("signal", signal=signal.Signals(signum).name, action="finish the cycle and exit")
            self._stop.set()

        def on_hup(_signum: int, _frame: Any) -> None:
            self.log.info("signal", signal="SIGHUP", action="reload config")
            self._reload.set()

        signal.signal(signal.SIGTERM, on_stop)
        signal.signal(signal.SIGINT, on_stop)
        signal.signal(signal.SIGHUP, on_hup)

    def _start_metrics(self) -> None:
        if self.config.metrics_port and self.metrics_server is None:
            try:
                self.metrics_server = MetricsServer(self.metrics, self.config.metrics_address, self.config.metrics_port).start()
            except OSError as e:
                self.log.error("metrics.unavailable", address=self.config.metrics_address, port=self.config.metrics_port,
                               error=str(e))
                self.metrics.errors.inc(kind="metrics")

    def _close(self) -> None:
        if self.metrics_server:
            self.metrics_server.stop()
            self.metrics_server = None
        close = getattr(self.runner.backend, "close", None)
        if close:
            close()
        observer = getattr(self.runner, "_observer", None)
        if observer is not None:
            observer.close()
        self.runner.journal.close()


def _once_failure(res: Any, cfg: cfgmod.Config) -> str:
    """One plain line for a failed ``--once`` cycle: the error, and what to check."""
    error = " ".join(res.error.split())
    if res.snapshot_ok:
        return f"the cycle failed ({res.error_kind}): {error}"
    where = "built-in defaults, no config file" if cfg.source == "(defaults)" else cfg.source
    conf = f"'{cfg.slurm_conf}'" if cfg.slurm_conf else "not set"
    env = f"'{os.environ['SLURM_CONF']}'" if os.environ.get("SLURM_CONF") else "not set"
    what = {"slurm": "could not read Slurm", "topology": "could not read the cluster's topology"}
    return (f"{what.get(res.error_kind, f'the cycle failed ({res.error_kind})')}: {error}; check slurm_conf in the "
            f"config ({where}: {conf}), the SLURM_CONF environment variable ({env}), and that slurmctld is running "
            f"(scontrol ping)")


def main(config_path: str | os.PathLike[str] | None = None, *, dry_run: bool = False, once: bool = False,
         shadow: bool = False, log_level: str | None = None, log_format: str | None = None,
         backend: Backend | None = None) -> int:
    """``attentived start``: exit 0 on a clean stop (or a good ``--once`` cycle), 1 when the
    cycle failed, 2 for an invalid config. ``shadow``: plan and record beside Slurm's own
    scheduler, change nothing (``attentived shadow-report`` reads what it recorded).
    ``log_level`` / ``log_format``: given on the command line, they win over the config's.
    ``backend``: talk to Slurm through this instead of the config's (as `Service` takes it)."""
    try:
        base = cfgmod.load(None if config_path is None else Path(config_path))
    except cfgmod.ConfigError as e:
        print(f"attentived: error: {e}", file=sys.stderr)
        return EXIT_CONFIG
    try:
        given = {k: v for k, v in (("log_level", log_level), ("log_format", log_format)) if v is not None}
        service = Service(config_path, dry_run=True if dry_run else None, config=base, shadow=shadow, overrides=given,
                          backend=backend)
    except (OSError, ValueError) as e:
        print(f"attentived: error: {e}", file=sys.stderr)
        return EXIT_FAILED
    return service.run_once() if once else service.run_forever()
