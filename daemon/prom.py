"""Prometheus metrics in the text exposition format, served on 127.0.0.1 by ``http.server``
in a daemon thread (no client library needed).

Metrics (all prefixed ``attentived_``):

- ``cycle_duration_seconds`` (histogram) and ``cycle_phase_seconds{phase}`` (last cycle's
  snapshot / state / decide / apply times)
- ``cycles_total{result}`` (ok, error, skipped), ``errors_total{kind}``
- ``actions_total{kind,result}`` (result: ok, failed, overtaken: refused because the job had
  just left the queue, unregistered: refused until slurmdbd has registered the job, dry_run)
- ``queue_length`` (managed pending jobs), ``pending_jobs``, ``running_jobs``,
  ``free_gpus``, ``held_reservations``
- ``placements_total{match}`` (exact, same_nodes, other_nodes, unplanned)
- ``last_cycle_timestamp_seconds``, ``up``, ``policy_info{policy,fallback}``
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0)


def _labels(names: tuple[str, ...], values: tuple[str, ...]) -> str:
    if not names:
        return ""
    esc = [str(v).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"') for v in values]
    return "{" + ",".join(f'{n}="{v}"' for n, v in zip(names, esc)) + "}"


class _Metric:
    kind = "untyped"

    def __init__(self, name: str, doc: str, labels: Iterable[str] = ()) -> None:
        self.name = name
        self.doc = doc
        self.label_names = tuple(labels)
        self._values: dict[tuple[str, ...], float] = {}
        self._lock = threading.Lock()

    def _key(self, labels: dict[str, str]) -> tuple[str, ...]:
        if set(labels) != set(self.label_names):
            raise ValueError(f"{self.name}: labels {sorted(labels)} != {sorted(self.label_names)}")
        return tuple(str(labels[n]) for n in self.label_names)

    def value(self, **labels: str) -> float:
        return self._values.get(self._key(labels), 0.0)

    def render(self) -> list[str]:
        out = [f"# HELP {self.name} {self.doc}", f"# TYPE {self.name} {self.kind}"]
        with self._lock:
            items = sorted(self._values.items())
        if not items and not self.label_names:
            items = [((), 0.0)]
        out += [f"{self.name}{_labels(self.label_names, k)} {_num(v)}" for k, v in items]
        return out


class Counter(_Metric):
    kind = "counter"

    def inc(self, amount: float = 1.0, **labels: str) -> None:
        key = self._key(labels)
        with self._lock:
            self._values[key] = self._values.get(key, 0.0) + amount


class Gauge(_Metric):
    kind = "gauge"

    def set(self, value: float, **labels: str) -> None:
        key = self._key(labels)
        with self._lock:
            self._values[key] = float(value)

    def clear(self) -> None:
        with self._lock:
            self._values.clear()


class Histogram(_Metric):
    kind = "histogram"

    def __init__(self, name: str, doc: str, buckets: Iterable[float] = _BUCKETS) -> None:
        super().__init__(name, doc)
        self.buckets = tuple(sorted(buckets))
        self._counts = [0] * len(self.buckets)
        self._sum = 0.0
        self._n = 0

    def observe(self, value: float) -> None:
        with self._lock:
            for i, b in enumerate(self.buckets):
                if value <= b:
                    self._counts[i] += 1
            self._sum += value
            self._n += 1

    @property
    def count(self) -> int:
        return self._n

    def render(self) -> list[str]:
        out = [f"# HELP {self.name} {self.doc}", f"# TYPE {self.name} histogram"]
        with self._lock:
            for b, c in zip(self.buckets, self._counts):
                out.append(f'{self.name}_bucket{{le="{_num(b)}"}} {c}')
            out.append(f'{self.name}_bucket{{le="+Inf"}} {self._n}')
            out.append(f"{self.name}_sum {_num(self._sum)}")
            out.append(f"{self.name}_count {self._n}")
        return out


def _num(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else repr(float(v))


class Metrics:
    """The daemon's metrics registry."""

    def __init__(self) -> None:
        p = "attentived_"
        self.cycle_duration = Histogram(p + "cycle_duration_seconds", "Duration of a whole cycle (snapshot, decide, apply).")
        self.phase = Gauge(p + "cycle_phase_seconds", "Duration of each phase of the last cycle.", ["phase"])
        self.cycles = Counter(p + "cycles_total", "Cycles by result.", ["result"])
        self.errors = Counter(p + "errors_total", "Errors by kind (slurm, parse, policy, apply, config, internal).", ["kind"])
        self.actions = Counter(p + "actions_total", "Slurm actions by kind and result.", ["kind", "result"])
        self.queue = Gauge(p + "queue_length", "Pending jobs the daemon manages (handed to the policy).")
        self.pending = Gauge(p + "pending_jobs", "Pending jobs Slurm shows (all partitions).")
        self.running = Gauge(p + "running_jobs", "Jobs holding GPUs.")
        self.free_gpus = Gauge(p + "free_gpus", "GPUs free for planning (managed partitions, nodes up).")
        self.holds = Gauge(p + "held_reservations", "Hold reservations the daemon keeps.")
        self.placements = Counter(p + "placements_total", "Started jobs by how their placement matched the plan.", ["match"])
        self.stalls = Counter(p + "stalled_starts_total", "Planned starts Slurm did not make by the next cycle (kept off those nodes).")
        self.idle_with_queue = Gauge(p + "idle_with_queue_seconds", "Seconds for which jobs that fit on idle GPUs have been waiting (0: none).")
        self.last_cycle = Gauge(p + "last_cycle_timestamp_seconds", "Unix time of the last finished cycle.")
        self.up = Gauge(p + "slurm_up", "1 when the last snapshot of Slurm succeeded.")
        self.accounting_up = Gauge(p + "accounting_up",
                                   "1 when slurmdbd and its database answered the last check, 0 when not; absent without slurmdbd.")
        self.policy = Gauge(p + "policy_info", "The policy in use (value 1); fallback=1 when the configured one failed to load.",
                            ["policy", "fallback"])
        self.dry_run = Gauge(p + "dry_run", "1 when the daemon changes nothing in Slurm.")
        # every metric above, in order (a hand-kept list once left out the stall and idle ones)
        self._all = [m for m in vars(self).values() if isinstance(m, _Metric)]

    def render(self) -> str:
        lines: list[str] = []
        for m in self._all:
            lines.extend(m.render())
        return "\n".join(lines) + "\n"


class MetricsServer:
    """``GET /metrics`` (and ``/``) on ``address:port`` in a daemon thread; port 0 picks a
    free port (see ``.port``)."""

    def __init__(self, metrics: Metrics, address: str = "127.0.0.1", port: int = 9817) -> None:
        self.metrics = metrics
        registry = metrics

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server API
                if self.path.split("?")[0] not in ("/metrics", "/"):
                    self.send_error(404)
                    return
                body = registry.render().encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:  # keep stderr for structured logs
                pass

        self._server = ThreadingHTTPServer((address, port), Handler)
        self._server.daemon_threads = True
        self.address = address
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, name="metrics", daemon=True)

    def start(self) -> MetricsServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
