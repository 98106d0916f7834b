"""``nvidia-smi topo -m`` parsing: real outputs of several driver generations, and errors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from attentived.topology import (
    Link,
    Node,
    Topology,
    TopologyParseError,
    parse_nvidia_smi_topo,
)

FIXTURES = Path(__file__).parent / "fixtures"

S, N, H, X = Link.SOCKET, Link.NVLINK, Link.PCIE_HOST, Link.SELF


def _parse(fixture: str, **kwargs: Any) -> Node:
    return parse_nvidia_smi_topo((FIXTURES / fixture).read_text(), source=fixture, **kwargs)


def test_a100_nv12_with_nic_and_numa_columns() -> None:
    node = _parse("a100_4x_nv12_nic_numa.txt", node_name="gpu7", switch="leaf3")
    assert node.name == "gpu7" and node.switch == "leaf3"
    assert node.num_gpus == 4
    assert node.links == tuple(tuple(X if i == j else N for j in range(4)) for i in range(4))
    assert node.islands == ((0, 1, 2, 3),)
    assert node.nvlink_bw is not None
    assert node.nvlink_bw[0][1] == 12 * 25.0
    assert node.nvlink_bw[0][0] == 0.0


def test_nvswitch_space_separated_eight_gpus() -> None:
    node = _parse("h100_8x_nvswitch_spaces.txt", nvlink_gbps_per_link=50.0)
    assert node.num_gpus == 8
    assert node.islands == (tuple(range(8)),)
    assert all(node.links[i][j] == N for i in range(8) for j in range(8) if i != j)
    assert node.nvlink_bw is not None
    assert node.nvlink_bw[3][6] == 18 * 50.0


def test_older_driver_dgx1_hybrid_cube_mesh() -> None:
    node = _parse("dgx1_cube_mesh_older.txt")
    # The row shown in the samples: GPU3 NV1 NV1 NV2 X NODE NODE NODE NV2
    assert node.links[3] == (N, N, N, X, H, H, H, N)
    assert node.nvlink_bw is not None
    assert [node.nvlink_bw[3][j] for j in (0, 1, 2, 7)] == [25.0, 25.0, 50.0, 50.0]
    assert node.islands == (tuple(range(8)),)  # the cube mesh is one connected NVLink island
    # Each V100 has six NVLinks.
    assert all(sum(node.nvlink_bw[i]) == 6 * 25.0 for i in range(8))


def test_pcie_only_box_maps_pix_pxb_phb_sys() -> None:
    node = _parse("pcie_8x_older.txt")
    assert node.nvlink_bw is None
    assert node.links[0][1] == Link.PCIE_SWITCH  # PIX
    assert node.links[0][2] == Link.PCIE_SWITCH  # PXB
    assert node.links[4][6] == Link.PCIE_HOST  # PHB
    assert node.links[0][4] == Link.SOCKET  # SYS
    assert node.islands == tuple((g,) for g in range(8))


def test_per_pair_nvlink_bandwidth_reaches_allreduce() -> None:
    """An NV1 pair is slower than an NV2 pair; the model must see that, not a flat 150 GB/s."""
    topo = Topology(nodes=(_parse("dgx1_cube_mesh_older.txt"),))
    assert topo.bottleneck([3, 0]) == (Link.NVLINK, 25.0)
    assert topo.allreduce_seconds([3, 0], 1.0) == pytest.approx(2 * (1 / 2) * 1.0 / 25.0)
    assert topo.allreduce_seconds([3, 2], 1.0) == pytest.approx(2 * (1 / 2) * 1.0 / 50.0)


def test_very_old_soc_spelling_and_single_gpu() -> None:
    two = "\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tSOC\t0-7\nGPU1\tSOC\t X \t8-15\n"
    assert parse_nvidia_smi_topo(two).links[0][1] == Link.SOCKET
    one = "        GPU0    CPU Affinity\nGPU0     X      0-11\n"
    assert parse_nvidia_smi_topo(one).links == ((X,),)


def test_text_before_header_and_lowercase_cells_are_tolerated() -> None:
    text = "$ nvidia-smi topo -m\n\tGPU0\tGPU1\nGPU0\t x \tnv4\nGPU1\tNV4\t X \n"
    node = parse_nvidia_smi_topo(text)
    assert node.nvlink_bw is not None
    assert node.links[0][1] == N and node.nvlink_bw[0][1] == 100.0


def _table(rows: list[str], header: str = "\tGPU0\tGPU1\tGPU2\tNIC0\tCPU Affinity") -> str:
    return "\n".join([header, *rows]) + "\n"


_GOOD = ["GPU0\t X \tNV4\tSYS\tSYS\t0-7", "GPU1\tNV4\t X \tSYS\tSYS\t0-7", "GPU2\tSYS\tSYS\t X \tSYS\t8-15"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", r"^topo.txt: no 'GPU0 GPU1 \.\.\.' header line found"),
        ("Legend:\n  X = Self\n", "no 'GPU0 GPU1"),
        (_table(["GPU0\t X \tNV4\tZZ\tSYS\t0-7", *_GOOD[1:]]), r"^topo.txt:2: unknown link 'ZZ' between GPU0 and GPU2"),
        (
            _table([_GOOD[0], "GPU1\tNV4\t X \tSYS\t0-7", _GOOD[2]]),
            r"^topo.txt:3: row GPU1 has 3 link cells, the header has 3 GPU \+ 1 NIC",
        ),
        (_table([_GOOD[0], "GPU1\tNV4\t X \tSYS\tSYS\tSYS\t0-7", _GOOD[2]]), r"^topo.txt:3: row GPU1 has 5 link cells"),
        (_table([_GOOD[0], "GPU1\tNV4", _GOOD[2]]), r"^topo.txt:3: row GPU1 is short: 1 cells for 3 GPU columns"),
        (
            _table([_GOOD[0], "GPU1\tNV2\t X \tSYS\tSYS\t0-7", _GOOD[2]]),
            r"^topo.txt:3: asymmetric matrix: GPU1 -> GPU0 is NV2 but GPU0 -> GPU1 is NV4 \(line 2\)",
        ),
        (_table([_GOOD[0], "GPU1\tNV4\tSYS\tSYS\tSYS\t0-7", _GOOD[2]]), r"^topo.txt:3: cell GPU1/GPU1 must be X"),
        (_table(["GPU0\t X \t X \tSYS\tSYS\t0-7", *_GOOD[1:]]), r"^topo.txt:2: cell GPU0/GPU1 cannot be X"),
        (_table(_GOOD[:2]), r"^topo.txt:1: no row for GPU2"),
        (_table([*_GOOD, _GOOD[1]]), r"^topo.txt:5: row GPU1 appears twice \(first on line 3\)"),
        (
            _table([*_GOOD, "GPU3\tSYS\tSYS\tSYS\tSYS\t0-7"]),
            r"^topo.txt:5: row GPU3 but the header only has GPU0..GPU2",
        ),
        (_table(_GOOD, header="\tGPU0\tGPU2\tGPU1"), r"^topo.txt:1: header column GPU2 should be GPU1"),
        ("GPU0\t X \tNV4\n\tGPU0\tGPU1\n", r"^topo.txt:1: row GPU0 comes before"),
        (_table(_GOOD) + _table(_GOOD), r"^topo.txt:5: a second GPU header \(first on line 1\)"),
    ],
)
def test_errors_name_file_and_line(text: str, message: str) -> None:
    with pytest.raises(TopologyParseError, match=message):
        parse_nvidia_smi_topo(text, source="topo.txt")


def test_error_carries_its_parts() -> None:
    with pytest.raises(TopologyParseError) as info:
        parse_nvidia_smi_topo(_table(["GPU0\t X \tNV4\tZZ\tSYS\t0-7", *_GOOD[1:]]), source="topo.txt")
    assert (info.value.source, info.value.line) == ("topo.txt", 2)
    assert isinstance(info.value, ValueError)


def test_rejects_non_positive_link_bandwidth() -> None:
    with pytest.raises(ValueError, match="nvlink_gbps_per_link"):
        parse_nvidia_smi_topo(_table(_GOOD), nvlink_gbps_per_link=0)


_TOKENS = ["GPU0", "GPU1", "GPU2", "NIC0", "mlx5_0", " X ", "x", "NV2", "NV0", "SYS", "PIX", "NODE", "ZZ",
           "CPU Affinity", "0-23", "N/A", "\t", " ", "\n", "\n", "Legend:"]


@given(st.one_of(st.text(max_size=200), st.lists(st.sampled_from(_TOKENS), max_size=60).map("".join)))
def test_arbitrary_text_parses_or_raises_parse_error(text: str) -> None:
    try:
        node = parse_nvidia_smi_topo(text)
    except TopologyParseError:
        return
    assert node.num_gpus >= 1
