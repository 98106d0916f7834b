"""The job speed model: slowdown semantics, monotonicity in spread, the calibration against
Pollux's measured testbed, the shipped profiles, and the model assignment of trace jobs."""

from __future__ import annotations

import csv
from collections import Counter
from importlib import resources
from types import ModuleType

import numpy as np
import pytest

from attentived.topology import uniform
from attentived.topology.speed import (
    POLLUX_TESTBED_BANDWIDTHS,
    REFERENCE_BANDWIDTHS,
    ModelProfile,
    SpeedModel,
    assign_model,
    load_profiles,
    pollux_testbed,
    rebase,
    resolve_model,
)
from tests.bench_scripts import load_bench

PROFILES = load_profiles()
POLLUX_APPS = ("bert", "cifar10", "deepspeech2", "imagenet", "ncf", "yolov3")


@pytest.fixture(scope="module")
def cluster() -> SpeedModel:
    """8 nodes x 8 GPUs (two NVLink islands of 4 per node), 4 nodes per leaf switch."""
    return SpeedModel(uniform(8, 8))


def on_testbed(app: str) -> SpeedModel:
    """The shipped profile put back on the testbed it was measured on."""
    profile = rebase(PROFILES[app], REFERENCE_BANDWIDTHS, POLLUX_TESTBED_BANDWIDTHS)
    return SpeedModel(pollux_testbed(2), {app: profile})


# --- slowdown semantics ----------------------------------------------------------------


@pytest.mark.parametrize("model", sorted(PROFILES))
def test_slowdown_is_one_at_the_ideal_placement_and_for_one_gpu(cluster: SpeedModel, model: str) -> None:
    for n in (1, 2, 3, 4, 8, 16, 64):
        assert cluster.slowdown(model, cluster.topology.ideal_gpus(n)) == 1.0
    assert cluster.slowdown(model, (63,)) == 1.0
    assert cluster.slowdown(model, [17]) == 1.0


def test_step_seconds_is_compute_plus_allreduce(cluster: SpeedModel) -> None:
    p = PROFILES["bert"]
    gpus = (0, 8)
    assert cluster.step_seconds("bert", gpus) == pytest.approx(
        p.compute_s + cluster.topology.allreduce_seconds(gpus, p.grad_gbytes)
    )
    assert cluster.step_seconds("bert", (5,)) == p.compute_s


def test_runtime_scales_the_ideal_duration(cluster: SpeedModel) -> None:
    spread = (0, 8, 32)
    s = cluster.slowdown("yolov3", spread)
    assert s > 1.5
    for duration in (0.0, 1.0, 3600.0, 86400.5):
        assert cluster.runtime("yolov3", duration, spread) == pytest.approx(duration * s)
    assert cluster.runtime("yolov3", 3600.0, cluster.topology.ideal_gpus(3)) == 3600.0
    assert cluster.runtime("yolov3", 3600.0, (40,)) == 3600.0


def test_gpu_arrays_are_accepted(cluster: SpeedModel) -> None:
    assert cluster.slowdown("bert", np.array([0, 8])) == cluster.slowdown("bert", (0, 8))


def test_unknown_model_and_bad_profiles_are_refused(cluster: SpeedModel) -> None:
    with pytest.raises(KeyError, match="resolve_model"):
        cluster.slowdown("transformer", (0, 8))
    with pytest.raises(ValueError, match="compute_s"):
        ModelProfile("x", 0.0, 1.0)
    with pytest.raises(ValueError, match="grad_gbytes"):
        ModelProfile("x", 1.0, -0.1)


def test_custom_profiles_replace_the_shipped_ones() -> None:
    model = SpeedModel(uniform(2, 8), {"tiny": ModelProfile("tiny", 1.0, 0.0)})
    assert set(model.profiles) == {"tiny"}
    assert model.slowdown("tiny", (0, 8)) == 1.0  # nothing to communicate, nothing to lose


# --- monotone in spread ----------------------------------------------------------------

# Chains of placements of the same size on uniform(8, 8), each more spread than the last: one
# NVLink island < two islands or two nodes under one leaf switch < two leaf switches. The
# larger jobs start from half-nodes (one island each); whole nodes are checked below.
SPREAD_CHAINS = (
    ((0, 1), (0, 8), (0, 32)),
    ((0, 1), (0, 4), (0, 32)),
    ((0, 1, 2, 3), (0, 1, 4, 5), (0, 1, 32, 33)),
    ((0, 1, 2, 3), (0, 1, 8, 9), (0, 1, 32, 33)),
    ((0, 1, 2, 3, 8, 9, 10, 11), (0, 1, 8, 9, 16, 17, 24, 25), (0, 1, 2, 3, 32, 33, 34, 35)),
    (
        (0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27),
        (0, 1, 2, 3, 8, 9, 10, 11, 32, 33, 34, 35, 40, 41, 42, 43),
    ),
)


@pytest.mark.parametrize("model", sorted(PROFILES))
@pytest.mark.parametrize("chain", SPREAD_CHAINS, ids=lambda c: f"{len(c[0])}gpus:{c[1]}")
def test_more_spread_is_never_faster(cluster: SpeedModel, model: str, chain: tuple[tuple[int, ...], ...]) -> None:
    slowdowns = [cluster.slowdown(model, gpus) for gpus in chain]
    assert slowdowns == sorted(slowdowns), slowdowns


def test_a_full_node_is_not_slower_than_two_half_nodes(cluster: SpeedModel) -> None:
    assert cluster.slowdown("bert", (0, 1, 2, 3, 8, 9, 10, 11)) >= 1.0


# --- calibration against the measured testbed --------------------------------------------


@pytest.mark.parametrize(
    ("app", "measured_split_over_local"),
    [
        ("bert", 1.40 / 0.71),  # the documented fact: 0.71 s on one node, 1.40 s over two
        ("yolov3", 2.3),  # "about 2.3x slower when split"
    ],
)
def test_two_gpus_split_over_two_testbed_nodes_matches_pollux(app: str, measured_split_over_local: float) -> None:
    model = on_testbed(app)
    assert model.topology.ideal_gpus(2) == (0, 1)  # one node of the testbed
    predicted = model.slowdown(app, (0, 4))
    assert predicted == pytest.approx(measured_split_over_local, rel=0.15)


def test_imagenet_is_nearly_insensitive_to_placement() -> None:
    model = on_testbed("imagenet")
    assert 1.0 <= model.slowdown("imagenet", (0, 4)) < 1.15
    assert SpeedModel(uniform(8, 8)).slowdown("imagenet", (0, 8)) < 1.15


def test_rebase_keeps_the_cross_node_ratio() -> None:
    testbed = on_testbed("bert").slowdown("bert", (0, 4))
    cluster = SpeedModel(uniform(2, 8)).slowdown("bert", (0, 8))
    # Both split 2 GPUs over two nodes; they differ only in how cheap the ideal (intra-node)
    # all-reduce is: PCIe on the testbed, NVLink on the cluster.
    assert cluster == pytest.approx(testbed, rel=0.05)
    back = rebase(rebase(PROFILES["bert"], REFERENCE_BANDWIDTHS, POLLUX_TESTBED_BANDWIDTHS),
                  POLLUX_TESTBED_BANDWIDTHS, REFERENCE_BANDWIDTHS)
    assert back.grad_gbytes == pytest.approx(PROFILES["bert"].grad_gbytes)


def _calibration_script(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    return load_bench("calibrate_speed", monkeypatch)


def test_shipped_profiles_are_what_the_calibration_produces(monkeypatch: pytest.MonkeyPatch) -> None:
    script = _calibration_script(monkeypatch)
    testbed = pollux_testbed()
    produced = [script.fit_pollux(app, testbed).shipped for app in POLLUX_APPS]
    produced += [c.profile for c in script.cnn_profiles()]
    assert sorted(p.name for p in produced) == sorted(PROFILES)
    for p in produced:
        assert PROFILES[p.name].compute_s == pytest.approx(p.compute_s, rel=1e-5), p.name
        assert PROFILES[p.name].grad_gbytes == pytest.approx(p.grad_gbytes, rel=1e-5), p.name


# --- shipped profiles and model names ----------------------------------------------------


def _tiresias_models() -> set[str]:
    text = resources.files("attentived.data").joinpath("traces/tiresias-60.csv").read_text(encoding="utf-8")
    return {row["model_name"].strip().lower() for row in csv.DictReader(text.splitlines())}


def test_shipped_profiles_load_and_cover_pollux_and_tiresias() -> None:
    names = set(load_profiles())
    tiresias = _tiresias_models()
    assert len(tiresias) == 10
    assert tiresias <= names
    assert set(POLLUX_APPS) <= names
    for name in names:
        assert resolve_model(name, "j", 4, 0) == name
    assert load_profiles() is not load_profiles()  # callers may mutate their copy


@pytest.mark.parametrize(
    ("spelling", "profile"),
    [
        ("ResNet-50", "resnet50"),
        ("RESNET152", "resnet152"),
        ("Inception_V3", "inception3"),
        ("inception-v4", "inception4"),
        ("VGG16", "vgg16"),
        (" bert ", "bert"),
        ("YOLO", "yolov3"),
        ("DeepSpeech", "deepspeech2"),
        ("ImageNet", "imagenet"),
    ],
)
def test_known_names_resolve_case_insensitively(spelling: str, profile: str) -> None:
    assert resolve_model(spelling, "job-1", 2, 0) == profile


def test_missing_names_are_assigned_and_unknown_names_map_consistently() -> None:
    assert resolve_model(None, "j7", 4, 3) == assign_model("j7", 4, 3)
    assert resolve_model("", "j7", 4, 3) == assign_model("j7", 4, 3)
    stand_ins = {resolve_model("Transformer", f"job{i}", 1 + i % 8, 0) for i in range(50)}
    assert len(stand_ins) == 1
    (stand_in,) = stand_ins
    assert stand_in in PROFILES and stand_in != "ncf"
    assert resolve_model("transformer", "other", 16, 0) == stand_in
    assert len({resolve_model(f"mystery{i}", "j", 2, 0) for i in range(200)}) > 1  # names differ, draws differ


def test_assign_model_is_deterministic_and_order_independent() -> None:
    jobs = [(f"job{i}", 1 + i % 8) for i in range(2000)]
    forward = {job: assign_model(job, n, 7) for job, n in jobs}
    backward = {job: assign_model(job, n, 7) for job, n in reversed(jobs)}
    assert forward == backward
    assert assign_model(12345, 2, 7) == assign_model("12345", 2, 7)
    other_seed = {job: assign_model(job, n, 8) for job, n in jobs}
    assert 0.3 < sum(forward[j] != other_seed[j] for j in forward) / len(jobs) < 0.9
    assert set(forward.values()) <= set(PROFILES)


def test_assign_model_follows_the_pollux_mix() -> None:
    single = Counter(assign_model(f"s{i}", 1, 0) for i in range(20000))
    multi = Counter(assign_model(f"m{i}", 4, 0) for i in range(20000))
    assert single["ncf"] / 20000 == pytest.approx(263 / 640, abs=0.02)
    assert single["imagenet"] / 20000 == pytest.approx(11 / 640, abs=0.01)
    assert "ncf" not in multi  # NCF only runs on one GPU in the Pollux workloads
    assert multi["cifar10"] / 20000 == pytest.approx(242 / 377, abs=0.02)
    assert set(multi) == {"cifar10", "deepspeech2", "bert", "yolov3", "imagenet"}
    with pytest.raises(ValueError):
        assign_model("j", 0, 0)
