"""The synthetic multi-GPU workload: seeded, the asked load, a valid generic trace."""

from __future__ import annotations

import pytest

from attentived.simulator.synthetic import GPU_MIX, generate, write_trace
from attentived.simulator.trace import load_trace


def test_same_seed_same_jobs_other_seed_other_jobs():
    assert generate(200, 64, 1.0, seed=3) == generate(200, 64, 1.0, seed=3)
    assert generate(200, 64, 1.0, seed=3) != generate(200, 64, 1.0, seed=4)


def test_mostly_multi_gpu_jobs_at_about_the_asked_load():
    jobs = generate(3000, 128, 1.2, seed=0)
    assert len(jobs) == 3000
    multi = sum(j.num_gpus >= 4 for j in jobs) / len(jobs)
    assert multi == pytest.approx(sum(p for g, p in GPU_MIX if g >= 4), abs=0.03)
    span = jobs[-1].submit_time - jobs[0].submit_time
    load = sum(j.num_gpus * j.duration for j in jobs) / (128 * span)
    assert load == pytest.approx(1.2, rel=0.15)
    assert all(300 <= j.duration <= 3 * 86400 for j in jobs)
    assert [j.submit_time for j in jobs] == sorted(j.submit_time for j in jobs)


def test_sizes_never_exceed_the_cluster():
    assert max(j.num_gpus for j in generate(500, 8, 1.0, seed=1)) <= 8


def test_written_trace_loads_as_generic(tmp_path):
    jobs = generate(50, 32, 0.8, seed=2)
    trace = load_trace(write_trace(tmp_path / "syn.csv", jobs))
    assert trace.format == "generic" and len(trace.jobs) == 50
    assert {j.user for j in trace.jobs} <= {f"user{k:02d}" for k in range(1, 13)}
    assert all(j.model is None for j in trace.jobs)


def test_bad_arguments():
    with pytest.raises(ValueError):
        generate(0, 8, 1.0)
    with pytest.raises(ValueError):
        generate(10, 8, -1.0)
