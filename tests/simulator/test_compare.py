"""`attentived compare`: the statistics, the JSON shape, parallel == serial, the files."""

from __future__ import annotations

import json
import math

import pytest
from typer.testing import CliRunner

from attentived.cli import app
from attentived.simulator import compare as cmp
from attentived.simulator.samples import sample_path
from attentived.topology import uniform

POLICIES = ["fifo", "sjf+consolidate", "fifo+random", "genetic"]


@pytest.fixture(scope="module")
def tiny():
    """Tiresias' 60 jobs on 2 x 8 GPUs (queues build up), first 40 jobs: under a second per run."""
    from attentived.simulator.trace import load_trace

    trace = load_trace(sample_path("tiresias-60"), max_jobs=40)
    return [cmp.Workload("tiresias-40", trace)], uniform(2, 8, nodes_per_switch=2)


# ---- statistics ----


@pytest.mark.parametrize(
    "df, expected",
    [(1, 12.7062047), (2, 4.3026527), (3, 3.1824463), (4, 2.7764451), (10, 2.2281389), (30, 2.0422725), (100, 1.9839715)],
)
def test_t_quantile_matches_tables(df, expected):
    assert cmp.t_quantile(0.975, df) == pytest.approx(expected, abs=1e-6)


def test_t_quantile_is_symmetric_and_central():
    assert cmp.t_quantile(0.025, 5) == pytest.approx(-cmp.t_quantile(0.975, 5))
    assert cmp.t_quantile(0.5, 7) == pytest.approx(0.0, abs=1e-9)
    assert cmp.t_quantile(0.95, 1) == pytest.approx(6.3137515, abs=1e-6)
    with pytest.raises(ValueError):
        cmp.t_quantile(0.975, 0)


def test_confidence_interval_on_known_numbers():
    s = cmp.Stat.of([1.0, 2.0, 3.0])  # mean 2, sd 1, n 3
    assert s.mean == 2.0 and s.n == 3
    assert s.ci95 == pytest.approx(4.3026527 / math.sqrt(3), rel=1e-7)
    s = cmp.Stat.of([10.0, 14.0])  # sd = 2 sqrt 2, t(1) = 12.706
    assert s.ci95 == pytest.approx(12.7062047 * 2 * math.sqrt(2) / math.sqrt(2), rel=1e-7)
    one = cmp.Stat.of([5.0])
    assert (one.mean, one.ci95, one.n) == (5.0, None, 1)
    assert cmp.Stat.of([3.0, 3.0, 3.0]).ci95 == 0.0


# ---- runs ----


def test_json_shape(tiny):
    workloads, topo = tiny
    res = cmp.compare(workloads, topo, ["fifo", "genetic"], [0, 1], workers=1)
    doc = json.loads(json.dumps(res.as_json()))
    assert set(doc) == {"cluster", "seeds", "policies", "workloads", "metrics", "results", "pareto", "knobs", "runs"}
    assert doc["cluster"] == {"nodes": 2, "gpus": 16}
    assert doc["seeds"] == [0, 1] and doc["policies"] == ["fifo", "genetic"]
    (w,) = doc["workloads"]
    assert w["label"] == "tiresias-40" and w["jobs"] == 40 and w["offered_load"] > 0
    assert len(doc["runs"]) == 2 * 2
    for policy in ("fifo", "genetic"):
        per = doc["results"]["tiresias-40"][policy]
        assert set(per) == set(cmp.METRICS)
        for _m, s in per.items():
            assert set(s) == {"mean", "ci95", "n", "values"} and s["n"] == 2 and len(s["values"]) == 2
            assert s["mean"] == pytest.approx(sum(s["values"]) / 2)
    for r in doc["runs"]:
        assert {"workload", "policy", "seed", "decisions", "avg_jct", "decision_p99_ms"} <= set(r)


def test_seeds_change_the_workload_not_the_policies_view(tiny):
    workloads, topo = tiny
    # Tiresias names its models, so a seed draws only time limits: SJF (which reads them)
    # sees a different workload per seed.
    res = cmp.compare(workloads, topo, ["sjf"], [0, 1, 2], workers=1)
    jcts = {r.seed: r.metrics["avg_jct"] for r in res.runs}
    assert len(set(jcts.values())) > 1


def _quality(res):
    return [
        (r.workload, r.policy, r.seed, {k: v for k, v in r.metrics.items() if k not in cmp.TIMING_METRICS}, r.jct)
        for r in res.runs
    ]


def test_parallel_equals_serial(tiny):
    workloads, topo = tiny
    serial = cmp.compare(workloads, topo, POLICIES, [0, 1], workers=1)
    parallel = cmp.compare(workloads, topo, POLICIES, [0, 1], workers=2)
    assert _quality(serial) == _quality(parallel)
    assert [(r.policy, r.seed) for r in parallel.runs] == [(p, s) for p in POLICIES for s in (0, 1)]


def test_progress_callback_sees_every_run(tiny):
    workloads, topo = tiny
    seen = []
    cmp.compare(workloads, topo, ["fifo", "sjf"], [0, 1], workers=1, on_done=seen.append)
    assert sorted((r.policy, r.seed) for r in seen) == [("fifo", 0), ("fifo", 1), ("sjf", 0), ("sjf", 1)]


def test_outputs_are_written_whole(tiny, tmp_path):
    workloads, topo = tiny
    res = cmp.compare(workloads, topo, ["fifo", "sjf"], [0, 1], workers=1)
    files = cmp.write_outputs(res, tmp_path / "out")
    names = sorted(f.name for f in files)
    assert names == ["bars_tiresias-40.png", "cdf_jct_tiresias-40.png", "compare.json", "pareto_tiresias-40.png",
                     "summary.csv"]
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == names  # no temporary folder left
    doc = json.loads((tmp_path / "out" / "compare.json").read_text())
    assert doc["policies"] == ["fifo", "sjf"]
    assert doc["pareto"]["tiresias-40"] and set(doc["pareto"]["tiresias-40"]) <= {"fifo", "sjf"}
    rows = (tmp_path / "out" / "summary.csv").read_text().splitlines()
    assert rows[0] == "workload,policy,metric,mean,ci95,n" and len(rows) == 1 + 2 * len(cmp.METRICS)
    for f in files:
        assert f.stat().st_size > 0


# ---- names and workloads ----


def test_all_expands_to_presets_and_registered_policies():
    from attentived.agents.registry import ALL

    names = cmp.policy_names(["all"])
    assert names[: len(ALL)] == list(ALL)
    assert {"genetic", "annealing", "portfolio"} <= set(names)
    assert cmp.policy_names(["fifo", "all", "sjf"])[:2] == ["fifo", "sjf"]
    with pytest.raises(cmp.CompareError, match="policy fifo given twice"):
        cmp.policy_names(["fifo", "fifo", "sjf"])


def test_unknown_policies_are_input_errors(tiny):
    from attentived.agents.registry import UnknownPolicy

    workloads, topo = tiny
    with pytest.raises(UnknownPolicy, match="genetic"):
        cmp.compare(workloads, topo, ["nope"], [0], workers=1)


def test_windows_and_labels():
    assert cmp.parse_window("40d:41d") == (40 * 86400.0, 41 * 86400.0)
    assert cmp.parse_window("36h:") == (36 * 3600.0, None)
    assert cmp.parse_window(":90m") == (None, 5400.0)
    for bad in ("40d", "2d:1d", "x:y"):
        with pytest.raises(cmp.CompareError):
            cmp.parse_window(bad)
    (w,) = cmp.load_workloads([sample_path("philly-sample")], ["2h:10h"], load_scale=2.0)
    assert w.label == "philly-sample[2h:10h]x2"
    with pytest.raises(cmp.CompareError):
        cmp.load_workloads([sample_path("philly-sample")], [], load_scale=0)


# ---- the command ----


def test_cli_compare_json_and_out(tmp_path):
    r = CliRunner().invoke(
        app,
        ["compare", "--sample", "tiresias-60", "--nodes", "2", "--policy", "fifo", "--policy", "sjf",
         "--seeds", "2", "--workers", "1", "--json", "--out", str(tmp_path / "o")],
    )
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["policies"] == ["fifo", "sjf"] and doc["seeds"] == [0, 1]
    assert (tmp_path / "o" / "compare.json").exists()


def test_cli_compare_table_says_n1():
    r = CliRunner().invoke(app, ["compare", "--sample", "tiresias-60", "--nodes", "2", "-p", "fifo", "--seeds", "1", "--workers", "1"])
    assert r.exit_code == 0, r.output
    assert "n=1" in r.stdout and "fifo" in r.stdout


@pytest.mark.parametrize(
    "args, message",
    [
        (["--policy", "nope"], "unknown policy"),
        (["--window", "5d"], "START:END"),
        (["--seeds", "0"], "--seeds"),
        (["--load-scale", "-1"], "load-scale"),
        (["--trace", "/no/such/file.csv"], "/no/such/file.csv"),
        (["--nodes", "1", "--gpus-per-node", "4"], "cluster has 4"),
    ],
)
def test_cli_compare_bad_input_exits_2(args, message):
    r = CliRunner().invoke(app, ["compare", "--sample", "tiresias-60", "--workers", "1", *args])
    assert r.exit_code == 2, r.output
    assert message in r.output


def test_all_drops_a_network_too_small_for_the_cluster_and_says_so():
    from attentived.topology import uniform

    notes: list[str] = []
    names = cmp.policy_names(["all"], uniform(20, 8), warn=notes.append)
    assert "deeprm" in names and "attentive" in names and "proximity-drl" not in names
    assert notes == ["skipping proximity-drl: its network reads at most 128 GPUs, the cluster has 160"]
    assert "proximity-drl" in cmp.policy_names(["all"], uniform(16, 8))
    with pytest.raises(cmp.CompareError, match="proximity-drl: its network reads at most 128"):
        cmp.policy_names(["fifo", "proximity-drl"], uniform(20, 8))



def test_a_fairness_knob_is_reported_against_every_other_policy(tiny, tmp_path):
    workloads, topo = tiny
    names = ["portfolio:fairness=0", "portfolio:fairness=1", "sjf"]
    res = cmp.compare(workloads, topo, names, [0], workers=1)
    doc = res.as_json()
    knob = doc["knobs"]["tiresias-40"]["portfolio"]
    assert knob["settings"] == {"0": "portfolio:fairness=0", "1": "portfolio:fairness=1"}
    sjf = knob["versus"]["sjf"]
    per = doc["results"]["tiresias-40"]
    covers = [w for w, n in ((0.0, names[0]), (1.0, names[1]))
              if all(per[n][m]["mean"] <= per["sjf"][m]["mean"] for m in ("avg_jct", "max_user_wait"))]
    assert sjf["covering"] == covers and set(knob["versus"]) == {"sjf"}
    cmp.write_outputs(res, tmp_path / "out")
    assert (tmp_path / "out" / "pareto_tiresias-40.png").stat().st_size > 0
