"""The synthetic Slurm of ``bench/slurm_scale.py`` (the daemon's 16,384-GPU benchmark): its
22.05 and 24.11 outputs parse to the cluster it describes, and daemon cycles run against
its stub commands. Small (64 GPUs, 100 pending jobs), so it stays cheap."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest

from attentived.daemon import scontrol_text, slurm_json
from attentived.topology import uniform
from tests.bench_scripts import load_bench


@pytest.fixture
def bench(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    return load_bench("slurm_scale", monkeypatch)


def _read(version: str, d: Path):
    jobs = slurm_json.parse_squeue((d / "squeue.json").read_text())
    if version == "22.05":
        return jobs, slurm_json.parse_sinfo((d / "sinfo.json").read_text()), \
            scontrol_text.parse_reservations((d / "scontrol-show-reservation.txt").read_text())
    return jobs, slurm_json.parse_nodes((d / "scontrol-show-nodes.json").read_text()), \
        slurm_json.parse_reservations((d / "scontrol-show-reservation.json").read_text())


@pytest.mark.parametrize("version", ["22.05", "24.11"])
def test_generated_outputs_parse_to_the_cluster_they_describe(bench, version, tmp_path):
    slurm = bench.SyntheticSlurm(64, 100, seed=1)
    slurm.write(tmp_path, version)
    parsed, nodes, reservations = _read(version, tmp_path)
    counts = slurm.counts()
    jobs = parsed.jobs
    assert str(parsed.version).startswith(version)
    assert [n.name for n in nodes] == [n.name for n in uniform(8, 8).nodes] and reservations == ()
    assert sum(j.pending for j in jobs) == 100 and sum(j.active for j in jobs) == counts["running"]
    assert sum(n.gpus_used for n in nodes) == counts["busy_gpus"] == sum(j.gpus for j in jobs if j.active)
    assert all(sum(map(len, j.gpu_indices.values())) == j.gpus for j in jobs if j.active)
    assert {j.partition for j in jobs} == {"main"} and len({j.user for j in jobs}) == 12
    assert {j.gpus for j in jobs if j.pending} <= {1, 2, 4, 8, 16, 32}


@pytest.mark.parametrize("version", ["22.05", "24.11"])
def test_cycles_run_against_the_stub_commands(bench, version):
    r = bench.measure_cycles(version, gpus=64, pending=100, cycles=2, policy="fifo+consolidate")
    assert r["cold"]["kinds"]["priority"] == 100 and r["cold"]["write_processes"] == 1
    assert r["cycle_p99_s"] > 0 and r["steady_write_processes"][0] <= 1
