"""Modelled time limits: never below the run time, on the menu, reproducible per job."""

from __future__ import annotations

import math
import random
import statistics
from dataclasses import dataclass

import pytest
from hypothesis import given
from hypothesis import strategies as st

from attentived.simulator.limits import (
    LIMIT_MENU,
    MEDIAN_FACTOR,
    MIN_FACTOR,
    time_limit,
    time_limits,
)
from attentived.simulator.trace import TraceJob

DAY = 86400.0


@dataclass(frozen=True)
class Job:
    job_id: str
    duration: float


def on_menu(limit: float) -> bool:
    return limit in LIMIT_MENU or (limit > LIMIT_MENU[-1] and limit % DAY == 0)


def test_menu_is_the_documented_round_limits() -> None:
    minute, hour = 60.0, 3600.0
    assert LIMIT_MENU == (
        15 * minute, 30 * minute, hour, 2 * hour, 4 * hour, 8 * hour, 12 * hour,
        DAY, 2 * DAY, 3 * DAY, 7 * DAY, 14 * DAY, 30 * DAY,
    )  # fmt: skip


@given(
    job_id=st.text(max_size=20),
    duration=st.floats(min_value=1e-3, max_value=1e8, allow_nan=False, allow_infinity=False),
    seed=st.integers(min_value=-(2**63), max_value=2**63),
)
def test_limit_covers_the_run_and_is_on_the_menu(job_id: str, duration: float, seed: int) -> None:
    limit = time_limit(job_id, duration, seed)
    assert limit >= MIN_FACTOR * duration
    assert on_menu(limit)


def test_examples() -> None:
    assert time_limit("short", 120.0, 0) == 15 * 60  # any factor rounds a 2-minute job up to 15m
    # A 25-day job asks for at least 26.25 days: 30d, or whole days beyond.
    limit = time_limit("long", 25 * DAY, 0)
    assert limit >= 27 * DAY and limit % DAY == 0


def test_deterministic_per_seed_and_job() -> None:
    assert time_limit("philly-42", 5000.0, 7) == time_limit("philly-42", 5000.0, 7)
    jobs = [Job(f"j{i}", 100.0 + 997 * i) for i in range(500)]
    by_seed = [time_limits(jobs, seed) for seed in (1, 2)]
    assert by_seed[0] != by_seed[1]
    assert time_limits(jobs, 1) == by_seed[0]


def test_order_and_subset_do_not_change_a_jobs_limit() -> None:
    jobs = [Job(f"job-{i}", 30.0 * (i + 1)) for i in range(300)]
    shuffled = jobs[:]
    random.Random(3).shuffle(shuffled)
    assert time_limits(shuffled, 11) == time_limits(jobs, 11)
    assert time_limits(jobs[100:150], 11) == {j.job_id: time_limits(jobs, 11)[j.job_id] for j in jobs[100:150]}


def test_factor_distribution_before_rounding() -> None:
    # Beyond 30 days limits are whole days, so for 1000-day jobs rounding moves the factor by
    # at most 1/1000 and the drawn factor shows through.
    factors = [time_limit(f"j{i}", 1000 * DAY, 5) / (1000 * DAY) for i in range(4000)]
    assert statistics.median(factors) == pytest.approx(MEDIAN_FACTOR, rel=0.03)
    clipped = sum(f < MIN_FACTOR + 0.002 for f in factors) / len(factors)
    assert clipped == pytest.approx(0.20, abs=0.03)  # P(lognormal(ln 1.6, 0.5) < 1.05)
    generous = sum(f > 2.6 for f in factors) / len(factors)
    assert generous == pytest.approx(1 / 6, abs=0.03)  # P(lognormal(ln 1.6, 0.5) > 2.6)


def test_median_ratio_over_realistic_durations_is_sane() -> None:
    rng = random.Random(0)
    jobs = [Job(f"r{i}", math.exp(rng.uniform(math.log(60), math.log(30 * DAY)))) for i in range(5000)]
    limits = time_limits(jobs, 0)
    ratios = sorted(limits[j.job_id] / j.duration for j in jobs)
    median = statistics.median(ratios)
    assert 1.8 < median < 4.0, median  # the 1.6 drawn factor, raised by rounding up
    assert ratios[0] >= MIN_FACTOR


def test_time_limits_of_trace_jobs() -> None:
    jobs = [TraceJob("a", 0.0, "u", 1, 3000.0, None, 2), TraceJob("b", 5.0, "u", 2, 50.0, None, 3)]
    assert time_limits(jobs, 4) == {"a": time_limit("a", 3000.0, 4), "b": time_limit("b", 50.0, 4)}


@pytest.mark.parametrize("duration", [0.0, -1.0, math.nan, math.inf])
def test_rejects_durations_that_are_not_positive_and_finite(duration: float) -> None:
    with pytest.raises(ValueError, match="duration must be a positive number"):
        time_limit("j", duration, 0)


def test_duplicate_job_ids_are_an_error() -> None:
    with pytest.raises(ValueError, match="duplicate job id 'a'"):
        time_limits([Job("a", 10.0), Job("a", 20.0)], 0)
