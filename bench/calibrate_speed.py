"""Calibrate the job speed model and write ``attentived/data/profiles/models.csv``.

Run from anywhere: ``python bench/calibrate_speed.py``. It reads only the repository's copies
of the measurements (``attentived/data/profiles/``, provenance in ATTRIBUTION.md there), writes
the profiles and prints the tables of ``docs/speed-model.md`` as Markdown.

1. Pollux applications (bert, cifar10, deepspeech2, imagenet, ncf, yolov3): step times measured
   per placement on Pollux's testbed. At one representative local batch size per application
   (the upper median of its measured sizes: a typical operating point, and the one at which
   the documented facts, BERT 0.71 s vs 1.40 s and YOLOv3 2.3x, were measured), compute_s is
   the measured 1-GPU step (a step with no communication) and grad_gbytes the least-squares
   fit of ``step = compute_s + allreduce(placement)`` over every multi-GPU placement, on
   `pollux_testbed()`. The fit is then rebased to the reference cluster (`rebase`).
2. The CNN models of the Tiresias trace: grad_gbytes = fp32 parameter size, compute_s =
   2 x GMACs x 3 (forward + backward) x batch 32 / 15 TFLOP/s.
3. Cross-check against Gavel's measured consolidated-vs-spread throughputs on V100s, and the
   resulting slowdowns on the default cluster.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from attentived.topology import Bandwidths, Node, Topology, uniform
from attentived.topology.speed import (
    POLLUX_TESTBED_BANDWIDTHS,
    REFERENCE_BANDWIDTHS,
    ModelProfile,
    SpeedModel,
    pollux_testbed,
    rebase,
)

ROOT = Path(__file__).resolve().parents[1]
PROFILES = ROOT / "attentived" / "data" / "profiles"
TIRESIAS_TRACE = ROOT / "attentived" / "data" / "traces" / "tiresias-60.csv"

POLLUX_APPS = ("bert", "cifar10", "deepspeech2", "imagenet", "ncf", "yolov3")

# Tiresias model_name -> row of cnn-properties.csv (or of the supplement, for the two models
# that table lacks).
TIRESIAS_CNNS = {
    "alexnet": "alexnet",
    "googlenet": "googlenet",
    "inception3": "inception-v3",
    "inception4": "inception-v4",
    "resnet50": "resnet-50",
    "resnet101": "resnet-101",
    "resnet152": "resnet-152",
    "vgg11": "vgg11",
    "vgg16": "vgg-vd-16",
    "vgg19": "vgg-vd-19",
}
CNN_BATCH = 32
# Real FLOP/s sustained by a V100-class GPU: between fp32 (~9-10 TFLOP/s for ResNet-50) and
# mixed precision at large batches (~30); see docs/speed-model.md.
CNN_TFLOPS = 15.0

# Gavel's V100 testbed as assumed for the cross-check: 8-GPU NVLink servers (p3.16xlarge /
# DGX-1 class, ~100 GB/s NCCL busbw) on 25 Gb/s Ethernet (~3 GB/s).
GAVEL_BANDWIDTHS = Bandwidths(nvlink=100.0, network=3.0)
GAVEL_SCALES = (2, 4, 8)
# Gavel job type -> profiles that model the same network.
GAVEL_MAPPING = {
    "ResNet-50": ("resnet50", "imagenet"),
    "ResNet-18": ("cifar10",),  # Gavel's and Pollux's ResNet-18 both train on CIFAR-10
    "Transformer": (),
    "LM": (),
}

SHOWN_PLACEMENTS = ("2", "11", "4", "22", "1111")


@dataclass(frozen=True)
class PolluxFit:
    app: str
    local_bsz: int
    testbed: ModelProfile
    shipped: ModelProfile
    r2: float
    measured: dict[str, float]
    """Step time per placement at ``local_bsz``."""
    fitted: dict[str, float]
    joint: tuple[float, float, float]
    """(compute_s, grad_gbytes, R^2) of the unconstrained two-parameter fit, for comparison."""


@dataclass(frozen=True)
class CnnProfile:
    profile: ModelProfile
    source: str
    gmacs: float
    param_mb: float


def placement_gpus(placement: str, gpus_per_node: int = 4) -> list[int]:
    """Global GPU ids of a Pollux placement string ("13" = 1 GPU on node 0, 3 on node 1)."""
    return [node * gpus_per_node + g for node, digit in enumerate(placement) for g in range(int(digit))]


def read_csv(path: Path) -> list[dict[str, str]]:
    with path.open(newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def representative_bsz(sizes: Iterable[int]) -> int:
    ordered = sorted(set(sizes))
    return ordered[len(ordered) // 2]


def r_squared(measured: np.ndarray, predicted: np.ndarray) -> float:
    residual = measured - predicted
    spread = measured - measured.mean()
    return float(1.0 - residual @ residual / (spread @ spread))


def sync_ratio(apps: Sequence[str]) -> float:
    """Sum over apps of the measured sync time split over two nodes ("11") over the same on
    one node ("2"), at each app's representative batch: how much slower the testbed's network
    all-reduce was than its PCIe one."""
    split = local = 0.0
    for app in apps:
        rows = read_csv(PROFILES / "pollux" / f"{app}-placements.csv")
        bsz = representative_bsz(int(r["local_bsz"]) for r in rows)
        sync = {r["placement"]: float(r["sync_time"]) for r in rows if int(r["local_bsz"]) == bsz}
        split += sync["11"]
        local += sync["2"]
    return split / local


def fit_pollux(app: str, testbed: Topology) -> PolluxFit:
    rows = read_csv(PROFILES / "pollux" / f"{app}-placements.csv")
    bsz = representative_bsz(int(r["local_bsz"]) for r in rows)
    measured = {r["placement"]: float(r["step_time"]) for r in rows if int(r["local_bsz"]) == bsz}
    placements = sorted(measured, key=lambda p: (sum(map(int, p)), p))
    unit = np.array([testbed.allreduce_seconds(placement_gpus(p), 1.0) for p in placements])
    step = np.array([measured[p] for p in placements])

    compute = measured["1"]
    multi = unit > 0
    grad = max(0.0, float(unit[multi] @ (step[multi] - compute) / (unit[multi] @ unit[multi])))
    predicted = compute + grad * unit

    design = np.column_stack([np.ones_like(unit), unit])
    (joint_c, joint_g), *_ = np.linalg.lstsq(design, step, rcond=None)

    testbed_profile = ModelProfile(app, compute, grad)
    return PolluxFit(
        app=app,
        local_bsz=bsz,
        testbed=testbed_profile,
        shipped=rebase(testbed_profile, POLLUX_TESTBED_BANDWIDTHS, REFERENCE_BANDWIDTHS),
        r2=r_squared(step, predicted),
        measured=measured,
        fitted=dict(zip(placements, predicted.tolist())),
        joint=(float(joint_c), float(joint_g), r_squared(step, design @ [joint_c, joint_g])),
    )


def cnn_profiles() -> list[CnnProfile]:
    table = {r["model"]: r for r in read_csv(PROFILES / "cnn-properties.csv")}
    table.update({r["model"]: r for r in read_csv(PROFILES / "cnn-properties-supplement.csv")})
    in_trace = {r["model_name"].strip().lower() for r in read_csv(TIRESIAS_TRACE)}
    missing = in_trace - TIRESIAS_CNNS.keys()
    if missing:
        raise SystemExit(f"Tiresias models without a CNN profile mapping: {', '.join(sorted(missing))}")
    out = []
    for name, row_name in TIRESIAS_CNNS.items():
        row = table[row_name]
        gmacs, param_mb = float(row["flops (GFLOPS)"]), float(row["param mem (MB)"])
        compute = 2 * gmacs * 3 * CNN_BATCH / (CNN_TFLOPS * 1e3)
        profile = ModelProfile(name, compute, param_mb / 1024)
        source = f"{row_name}: {gmacs:g} GMAC x2 x3 x{CNN_BATCH} / {CNN_TFLOPS:g} TFLOP/s; {param_mb:g} MB fp32"
        out.append(CnnProfile(profile, source, gmacs, param_mb))
    return out


def write_models(pollux: Sequence[PolluxFit], cnns: Sequence[CnnProfile]) -> Path:
    path = PROFILES / "models.csv"
    with path.open("w", newline="", encoding="utf-8") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["name", "compute_s", "grad_gbytes", "source"])
        for fit in pollux:
            p = fit.shipped
            w.writerow([p.name, f"{p.compute_s:.6g}", f"{p.grad_gbytes:.6g}",
                        f"pollux/{fit.app}-placements.csv local_bsz={fit.local_bsz}; rebased "
                        f"x{REFERENCE_BANDWIDTHS.network / POLLUX_TESTBED_BANDWIDTHS.network:g} to the reference network"])
        for c in cnns:
            p = c.profile
            w.writerow([p.name, f"{p.compute_s:.6g}", f"{p.grad_gbytes:.6g}", c.source])
    return path


def gavel_topology(servers: int) -> Topology:
    islands = [list(range(8))]
    nodes = tuple(Node.from_groups(f"p3-{i + 1}", islands) for i in range(servers))
    return Topology(nodes=nodes, switch_parent={"sw0": None}, bandwidths=GAVEL_BANDWIDTHS)


def nearest_batch(target: int, available: Iterable[int]) -> int:
    return min(available, key=lambda b: abs(math.log(b / target)))


def gavel_rows(pollux: Sequence[PolluxFit], cnns: Sequence[CnnProfile]) -> list[list[str]]:
    """Predicted vs measured spread/consolidated slowdown on V100s. CNN-derived profiles are in
    V100 seconds and real bytes, so they are priced on Gavel's network as they are; Pollux
    profiles carry a measured cross-node ratio, which `rebase` keeps on Gavel's network."""
    topo = gavel_topology(max(GAVEL_SCALES))
    batch_of = {f.app: f.local_bsz for f in pollux} | {c.profile.name: CNN_BATCH for c in cnns}
    profiles = {f.app: rebase(f.shipped, REFERENCE_BANDWIDTHS, GAVEL_BANDWIDTHS) for f in pollux}
    profiles |= {c.profile.name: c.profile for c in cnns}
    model = SpeedModel(topo, profiles)

    measured: dict[tuple[str, int, int], float] = {}
    for r in read_csv(PROFILES / "gavel-consolidation-sensitivity.csv"):
        if r["gpu_type"] != "v100":
            continue
        job, bsz = r["job_type"].removesuffix(")").split(" (batch size ")
        measured[job, int(bsz), int(r["scale_factor"])] = 1.0 / float(r["ratio_uncons_over_cons"])

    out = []
    for job, names in GAVEL_MAPPING.items():
        batches = sorted({b for j, b, _ in measured if j == job})
        if not names:
            ranges = []
            for s in GAVEL_SCALES:
                values = [measured[job, b, s] for b in batches]
                ranges.append(f"{min(values):.2f}-{max(values):.2f}")
            out.append([f"{job} (batch {batches[0]}-{batches[-1]})", "no profile", "-", " / ".join(ranges), "-"])
            continue
        for name in names:
            b = nearest_batch(batch_of[name], batches)
            consolidated = [model.step_seconds(name, tuple(range(s))) for s in GAVEL_SCALES]
            spread = [model.step_seconds(name, tuple(8 * i for i in range(s))) for s in GAVEL_SCALES]
            predicted = [sp / co for sp, co in zip(spread, consolidated)]
            out.append([
                f"{job} (batch {b})",
                name,
                str(batch_of[name]),
                " / ".join(f"{measured[job, b, s]:.2f}" for s in GAVEL_SCALES),
                " / ".join(f"{p:.2f}" for p in predicted),
            ])
    return out


def default_cluster_rows(profiles: Sequence[ModelProfile]) -> list[list[str]]:
    """Slowdowns on uniform(4, 8) (two NVLink islands of 4 per node, one leaf switch); the
    across-switch columns need two leaf switches, so they use uniform(8, 8)."""
    one_switch = SpeedModel(uniform(4, 8), {p.name: p for p in profiles})
    two_switches = SpeedModel(uniform(8, 8), {p.name: p for p in profiles})
    cases = (
        (one_switch, (0, 4)),  # 2 GPUs, two islands of one node
        (one_switch, (0, 8)),  # 2 GPUs, two nodes
        (two_switches, (0, 32)),  # 2 GPUs, two leaf switches
        (one_switch, (0, 1, 4, 5)),  # 4 GPUs, two islands
        (one_switch, (0, 1, 2, 3, 8, 9, 10, 11)),  # 8 GPUs, two nodes of one island each
        (two_switches, (0, 1, 2, 3, 32, 33, 34, 35)),  # 8 GPUs, two leaf switches
    )
    return [[p.name] + [f"{m.slowdown(p.name, gpus):.2f}" for m, gpus in cases] for p in profiles]


def markdown(header: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def main() -> None:
    testbed = pollux_testbed()
    pollux = [fit_pollux(app, testbed) for app in POLLUX_APPS]
    cnns = cnn_profiles()
    path = write_models(pollux, cnns)

    ratio = sync_ratio(POLLUX_APPS)
    print(f"## Testbed\n\nmeasured sync time, 2 GPUs over two nodes / on one node (sum over apps): {ratio:.1f}x "
          f"-> effective network {POLLUX_TESTBED_BANDWIDTHS.pcie_host / ratio:.2f} GB/s at "
          f"{POLLUX_TESTBED_BANDWIDTHS.pcie_host:g} GB/s PCIe; the model uses "
          f"{POLLUX_TESTBED_BANDWIDTHS.network:g} GB/s\n")
    nominal = pollux_testbed()
    nominal = Topology(nodes=nominal.nodes, switch_parent=nominal.switch_parent,
                       bandwidths=Bandwidths(pcie_host=POLLUX_TESTBED_BANDWIDTHS.pcie_host, network=5.5))
    bert_nominal = SpeedModel(nominal, {"bert": fit_pollux("bert", nominal).testbed})
    print(f"with the 5.5 GB/s line-rate network instead, BERT split/local at 2 GPUs would be "
          f"{bert_nominal.slowdown('bert', placement_gpus('11')):.2f} (measured "
          f"{pollux[0].measured['11'] / pollux[0].measured['2']:.2f})\n")

    print("## Pollux fits\n")
    print(markdown(
        ["app", "local_bsz", "compute_s", "grad GB (testbed)", "grad GB (shipped)", "R²", "joint fit: compute_s, grad GB, R²"],
        ([f.app, str(f.local_bsz), f"{f.testbed.compute_s:.4f}", f"{f.testbed.grad_gbytes:.4f}",
          f"{f.shipped.grad_gbytes:.3f}", f"{f.r2:.2f}", f"{f.joint[0]:.3f}, {f.joint[1]:.3f}, {f.joint[2]:.2f}"]
         for f in pollux),
    ))
    print("\nStep time (s), measured / fitted, on the testbed:\n")
    print(markdown(
        ["app", "1"] + [f'"{p}"' for p in SHOWN_PLACEMENTS] + ['split/local "11"/"2"'],
        ([f.app, f"{f.measured['1']:.3f}"]
         + [f"{f.measured[p]:.3f} / {f.fitted[p]:.3f}" for p in SHOWN_PLACEMENTS]
         + [f"{f.measured['11'] / f.measured['2']:.2f} / {f.fitted['11'] / f.fitted['2']:.2f}"]
         for f in pollux),
    ))

    print("\n## CNN profiles (Tiresias models)\n")
    print(markdown(
        ["model", "table row", "GMACs", "params MB", "compute_s", "grad_gbytes"],
        ([c.profile.name, TIRESIAS_CNNS[c.profile.name], f"{c.gmacs:g}", f"{c.param_mb:g}",
          f"{c.profile.compute_s:.4f}", f"{c.profile.grad_gbytes:.4f}"] for c in cnns),
    ))

    print("\n## Gavel cross-check (V100): spread / consolidated step time\n")
    scales = " / ".join(map(str, GAVEL_SCALES))
    print(markdown(["Gavel job", "profile", "profile batch", f"measured {scales} GPUs", f"predicted {scales} GPUs"],
                   gavel_rows(pollux, cnns)))

    print("\n## Slowdowns on the default cluster\n")
    print(markdown(
        ["model", "2 GPUs: 2 islands", "2: 2 nodes", "2: 2 switches", "4: 2 islands", "8: 2 nodes", "8: 2 switches"],
        default_cluster_rows([f.shipped for f in pollux] + [c.profile for c in cnns]),
    ))
    print(f"\nwrote {path.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
