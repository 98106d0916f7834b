"""The daemon's policy slot: which ``Policy`` decides, and why it is not the configured one.

A daemon must schedule even when its configured policy cannot: a learned model that does not
load, a network too small for the cluster, a policy that raises mid-cycle. This module is the
one place that decides what runs instead (``fallback_policy``) and says so (log line,
``attentived_errors_total{kind="policy"}``, ``attentived_policy_info``), so the cycle only
asks ``decide`` and the operator tools (``ops/inspect.py``) load exactly what the daemon would.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from attentived.agents.plan import Plan
from attentived.agents.policy import Policy
from attentived.agents.registry import make_policy, unsupported
from attentived.agents.state import ClusterState, PendingJob, RunningJob
from attentived.topology import Topology

from .config import Config, is_learned
from .prom import Metrics


def fallback_policy(cfg: Config) -> Policy:
    """The heuristic that runs when the configured policy cannot (``fallback_policy``)."""
    return make_policy(cfg.fallback_policy, seed=cfg.seed)


def load_policy(cfg: Config) -> tuple[Policy, str, str]:
    """(policy, its name, why the configured one was not used or "")."""
    try:
        model = (cfg.model or None) if is_learned(cfg.policy) else None
        return make_policy(cfg.policy, seed=cfg.seed, model=model), cfg.policy, ""
    except Exception as e:  # a corrupt model, a missing module: fall back, say so
        return fallback_policy(cfg), cfg.fallback_policy, f"{cfg.policy}: {e}"


class PolicySlot:
    """The policy in force, its name and the fallback reason ("" when the configured one runs).

    ``fixed`` (tests, benchmarks) pins a policy object: it is never reloaded from the config,
    only checked against the topology."""

    def __init__(self, config: Config, metrics: Metrics, log: Any, *, fixed: Policy | None = None) -> None:
        self.config = config
        self.metrics = metrics
        self.log = log
        self._fixed = fixed
        self.policy: Policy | None = fixed
        self.name = getattr(fixed, "name", "") if fixed else ""
        self.fallback = ""
        self._warmed: Topology | None = None
        self.load()

    def load(self) -> None:
        """(Re)load the configured policy, falling back when it cannot load."""
        if self._fixed is not None:
            return
        self.policy, self.name, self.fallback = load_policy(self.config)
        self._warmed = None
        if self.fallback:
            self._fell_back()
        elif self.config.model and not is_learned(self.config.policy):
            self.log.warning("config.model_unused", policy=self.config.policy, model=self.config.model)
        self._metric()

    def reload(self, config: Config) -> None:
        """Take a new config; load the policy again only when its settings changed."""
        old = self.config
        self.config = config
        if (config.policy, config.model, config.seed, config.fallback_policy) != (
                old.policy, old.model, old.seed, old.fallback_policy):
            self.load()

    def check_fits(self, topology: Topology | None) -> None:
        """A policy that cannot schedule this cluster (a fixed-size network on a larger one)
        is replaced by the fallback, as a model that does not load is."""
        reason = unsupported(self.policy, topology) if self.policy is not None and topology is not None else None
        if reason:
            self.fallback = f"{self.name}: {reason}"
            self.name = self.config.fallback_policy
            self.policy = fallback_policy(self.config)
            self._fell_back()
            self._metric()

    def warm_up(self, topology: Topology) -> None:
        """One decision on a made-up state before the first live cycle: a learned policy's
        first call (torch's lazy initialisation, the model's first pass) took 1.3 s on the
        lab, long enough for Slurm to start jobs under a plan already stale. The state is
        a queue of several sizes and users with limits, beside a running job, because one
        job on an idle cluster left paths cold: after that warm-up the first real decision
        still took 0.64 s on the lab (0.27 s alone), and the jobs submitted first waited a
        second cycle."""
        if self.policy is None or self._warmed is topology:
            return
        t = time.monotonic()
        self.decide(_warm_up_state(topology))
        self._warmed = topology
        self.log.info("policy.warmed_up", policy=self.name, seconds=round(time.monotonic() - t, 3))

    def decide(self, state: ClusterState) -> Plan:
        """The policy's plan; one that raises is replaced by the fallback for this cycle."""
        assert self.policy is not None
        try:
            return self.policy.decide(state)
        except Exception as e:
            self.metrics.errors.inc(kind="policy")
            fallback = fallback_policy(self.config)
            self.log.error("policy.error", policy=self.name, error=f"{type(e).__name__}: {e}",
                           using=self.config.fallback_policy)
            return fallback.decide(state)

    def _fell_back(self) -> None:
        self.log.error("policy.fallback", configured=self.config.policy, using=self.name, reason=self.fallback)
        self.metrics.errors.inc(kind="policy")

    def _metric(self) -> None:
        self.metrics.policy.clear()
        self.metrics.policy.set(1, policy=self.name, fallback="1" if self.fallback else "0")


def _warm_up_state(topology: Topology) -> ClusterState:
    """A quarter of the first node busy with a running job; pending: 1, 2 and 8 GPUs and the
    whole cluster, from two users, with time limits. Every made-up job id starts with
    ``warm-up``."""
    n = topology.num_gpus
    first = int(topology.node_first_gpu[1]) if len(topology.nodes) > 1 else n
    running = RunningJob("warm-up-running", "warm-up-a", tuple(range(max(1, first // 4))), 0.0, 0.0, 3600.0)
    free = np.ones(n, dtype=bool)
    free[list(running.gpus)] = False
    pending = tuple(PendingJob(f"warm-up-{i}", f"warm-up-{'ab'[i % 2]}", min(g, n), 0.0, time_limit=600.0 * (i + 1))
                    for i, g in enumerate((1, 2, 8, n)))
    return ClusterState(now=1.0, topology=topology, free=free, pending=pending, running=(running,))
