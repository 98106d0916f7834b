"""The read-back after a slow decision: the cli backend's light path (``squeue`` alone,
keyed without full records) answers as a whole snapshot would (``records.moved``), and the
cycle decides again only when jobs started, ended, came or went."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest

from attentived.agents.registry import make_policy
from attentived.daemon import slurm_json
from attentived.daemon.cycle import CycleRunner
from attentived.daemon.records import job_states, queue_key

from .test_apply import TOPO, pending
from .test_backend import _argv_log, _stubs
from .test_engine import cfg, mix

FIX = Path(__file__).parent / "fixtures"


@pytest.mark.parametrize("recording", ["slurm-22.05/squeue.json", "slurm-22.05/squeue-requests.json",
                                       "slurm-22.05/squeue-sample.json", "slurm-24.11/squeue.json"])
@pytest.mark.parametrize("partitions", [("main",), ("main", "other"), ("other",)])
def test_light_states_key_as_full_records_do(recording, partitions):
    raw = (FIX / recording).read_text()
    full = slurm_json.parse_squeue(raw).jobs
    assert queue_key(slurm_json.job_states(raw), partitions) == queue_key(job_states(full), partitions)


def test_cli_read_back_runs_only_squeue_when_nothing_moved(tmp_path, monkeypatch):
    be, log = _stubs(tmp_path, "24.11.5", FIX / "slurm-24.11", monkeypatch)
    snap = be.snapshot()
    before = len(_argv_log(log))
    assert be.read_back(snap, ["main"]) is None
    assert _argv_log(log)[before:] == [["squeue", "--json", "-t", "all"]]


def test_cli_read_back_is_a_whole_snapshot_when_a_job_ended(tmp_path, monkeypatch):
    fix = tmp_path / "fixtures"
    shutil.copytree(FIX / "slurm-22.05", fix)
    be, _log = _stubs(tmp_path, "22.05.8", fix, monkeypatch)
    snap = be.snapshot()
    data = json.loads((fix / "squeue.json").read_text())
    data["jobs"] = [j for j in data["jobs"] if j["job_id"] != 5]  # run_a ended and was purged
    (fix / "squeue.json").write_text(json.dumps(data))
    fresh = be.read_back(snap, ["main"])
    assert fresh is not None and "5" in snap.jobs_by_id and "5" not in fresh.jobs_by_id
    again = be.snapshot()
    assert (fresh.jobs, fresh.nodes, fresh.reservations) == (again.jobs, again.nodes, again.reservations)
    assert {"read", "read_jobs", "read_nodes", "read_reservations", "parse"} <= set(fresh.timings)


class SlowPolicy:
    """FIFO that takes 0.6 s to decide (past the read-back threshold) and runs ``during``
    once while it thinks, as Slurm moving on would."""

    name = "slow-fifo"

    def __init__(self) -> None:
        self.inner = make_policy("fifo+consolidate")
        self.during = None
        self.calls = 0

    def decide(self, state):
        if all(j.job_id.startswith("warm-up") for j in state.pending):  # PolicySlot.warm_up's made-up jobs
            return self.inner.decide(state)
        self.calls += 1
        time.sleep(0.6)
        if self.during is not None:
            during, self.during = self.during, None
            during()
        return self.inner.decide(state)


def test_a_slow_decision_is_made_again_only_when_jobs_moved(tmp_path):
    fake = mix()
    policy = SlowPolicy()
    e = CycleRunner(cfg(tmp_path), backend=fake, topology=TOPO, policy=policy)
    first = e.run_cycle()
    assert first.ok and "read_back" in first.timings and "stale_replans" not in first.counts and policy.calls == 1
    policy.during = lambda: fake.submit(pending("20", "bob", 1, t=9))  # arrives while the policy thinks
    second = e.run_cycle()
    assert second.ok and second.counts.get("stale_replans") == 1 and policy.calls == 3
    assert "20" in second.plan_doc["priority_order"]
