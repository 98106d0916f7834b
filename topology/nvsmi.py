"""``nvidia-smi topo -m`` text -> ``Node``: the ground truth of how a server's GPUs connect.

Slurm only knows what an operator typed into gres.conf; the driver's own matrix is the
authoritative source, so operators can paste it per node type into a cluster file. The
parser accepts every driver generation seen in the wild: tab- or space-separated cells,
NIC columns (``NIC0``, ``mlx5_0``), with or without the newer NUMA columns, and the old
``SOC`` spelling of ``SYS``. Only the GPU-by-GPU block is read; NIC rows and columns, the
affinity columns and the legend are skipped.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from .model import Link, Node

_GPU = re.compile(r"GPU([0-9]+)")
_NVLINK = re.compile(r"NV([1-9][0-9]*)")
_PCIE_CELLS = {
    "PIX": Link.PCIE_SWITCH,
    "PXB": Link.PCIE_SWITCH,
    "PHB": Link.PCIE_HOST,
    "NODE": Link.PCIE_HOST,
    "SYS": Link.SOCKET,
    "SOC": Link.SOCKET,  # drivers before ~384 printed SOC for SYS
}
#: Refuse nodes with more GPUs than this: a typo (``gpus = 80000``, ``File=/dev/nvidia[0-99999]``)
#: would otherwise build a matrix of billions of cells instead of failing.
MAX_GPUS_PER_NODE = 1024

# Header words that start the affinity columns ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID").
_AFFINITY_WORDS = {"CPU", "NUMA", "GPU"}


class TopologyParseError(ValueError):
    """A topology source (nvidia-smi output, gres.conf, topology.conf, cluster TOML) is wrong.

    The message starts with where: ``file:line`` for line-based files, ``file: key`` for
    the TOML cluster file, so an operator can jump straight to the offending spot.
    """

    def __init__(self, source: str, message: str, *, line: int | None = None, key: str | None = None) -> None:
        self.source = source
        self.line = line
        self.key = key
        self.reason = message
        where = source if line is None else f"{source}:{line}"
        if key is not None:
            where = f"{where}: {key}"
        super().__init__(f"{where}: {message}")


@dataclass(frozen=True)
class _Cell:
    """One parsed matrix cell: its link class and, for NV#, how many NVLinks are bonded.

    ``text`` is the cell as printed, for error messages; PIX and PXB (or PHB and NODE)
    compare equal because the model does not tell them apart.
    """

    link: Link
    nvlinks: int = 0
    text: str = field(default="", compare=False)


@dataclass(frozen=True)
class _Header:
    """Where the header is and how many GPU and NIC columns it has."""

    line: int
    gpus: int
    nics: int


def parse_nvidia_smi_topo(
    text: str,
    node_name: str = "node1",
    switch: str = "sw0",
    nvlink_gbps_per_link: float = 25.0,
    *,
    source: str = "nvidia-smi topo -m",
) -> Node:
    """Build a ``Node`` from one ``nvidia-smi topo -m`` output.

    ``NV#`` pairs get ``# * nvlink_gbps_per_link`` GB/s in ``Node.nvlink_bw`` so an NV1
    pair of a DGX-1 is not mistaken for an NVSwitch pair (25 GB/s per link is NVLink 2 to 4,
    one direction). ``source`` names the text in error messages. Raises
    ``TopologyParseError`` for a missing header, ragged rows, unknown cells or an
    asymmetric matrix.
    """
    if not nvlink_gbps_per_link > 0:
        raise ValueError(f"nvlink_gbps_per_link must be positive, got {nvlink_gbps_per_link}")
    lines = text.splitlines()
    header = _find_header(lines, source)
    rows = _read_rows(lines, header, source)
    cells = _check_matrix(rows, header, source)
    links = tuple(tuple(c.link for c in row) for row in cells)
    has_nvlink = any(c.nvlinks for row in cells for c in row)
    nvlink_bw = (
        tuple(tuple(c.nvlinks * nvlink_gbps_per_link for c in row) for row in cells) if has_nvlink else None
    )
    return Node(name=node_name, links=links, switch=switch, nvlink_bw=nvlink_bw)


def _find_header(lines: list[str], source: str) -> _Header:
    """The ``GPU0 GPU1 ...`` line: it starts with GPU0 and, unlike GPU0's row, no ``X`` follows."""
    for number, line in enumerate(lines, start=1):
        tokens = line.split()
        if not tokens or not _GPU.fullmatch(tokens[0]):
            continue  # a shell prompt, a title, blank lines
        if not _is_header(tokens):
            raise TopologyParseError(source, f"row {tokens[0]} comes before the GPU0 GPU1 ... header line", line=number)
        return _parse_header(tokens, number, source)
    raise TopologyParseError(source, "no 'GPU0 GPU1 ...' header line found; is this `nvidia-smi topo -m` output?")


def _parse_header(tokens: list[str], number: int, source: str) -> _Header:
    """Count the GPU columns, then the NIC columns up to the affinity columns."""
    gpus = 0
    while gpus < len(tokens) and tokens[gpus] == f"GPU{gpus}":
        gpus += 1
    if gpus < len(tokens) and _GPU.fullmatch(tokens[gpus]):
        raise TopologyParseError(source, f"header column {tokens[gpus]} should be GPU{gpus}", line=number)
    if gpus > MAX_GPUS_PER_NODE:
        raise TopologyParseError(source, f"{gpus} GPU columns; at most {MAX_GPUS_PER_NODE} are supported", line=number)
    nics = 0
    while gpus + nics < len(tokens) and tokens[gpus + nics] not in _AFFINITY_WORDS:
        nics += 1
    return _Header(line=number, gpus=gpus, nics=nics)


def _is_header(tokens: list[str]) -> bool:
    return tokens[0] == "GPU0" and (len(tokens) == 1 or tokens[1].upper() != "X")


def _read_rows(lines: list[str], header: _Header, source: str) -> dict[int, tuple[int, list[_Cell]]]:
    """GPU rows after the header: GPU index -> (line number, its GPU cells)."""
    rows: dict[int, tuple[int, list[_Cell]]] = {}
    for number, line in enumerate(lines[header.line :], start=header.line + 1):
        tokens = line.split()
        if not tokens or not _GPU.fullmatch(tokens[0]):
            continue  # NIC rows, legend, blank lines
        if _is_header(tokens):
            raise TopologyParseError(
                source,
                f"a second GPU header (first on line {header.line}); give one `nvidia-smi topo -m` output at a time",
                line=number,
            )
        row = _GPU.fullmatch(tokens[0])
        assert row is not None  # rows are chosen by this pattern
        gpu = int(row.group(1))
        if gpu >= header.gpus:
            raise TopologyParseError(
                source, f"row {tokens[0]} but the header only has GPU0..GPU{header.gpus - 1}", line=number
            )
        if gpu in rows:
            raise TopologyParseError(source, f"row GPU{gpu} appears twice (first on line {rows[gpu][0]})", line=number)
        rows[gpu] = (number, _read_cells(tokens, gpu, header, source, number))
    return rows


def _read_cells(tokens: list[str], gpu: int, header: _Header, source: str, number: int) -> list[_Cell]:
    """The GPU cells of one row, checking the row has as many link cells as the header has columns."""
    if len(tokens) - 1 < header.gpus:
        raise TopologyParseError(
            source, f"row GPU{gpu} is short: {len(tokens) - 1} cells for {header.gpus} GPU columns", line=number
        )
    cells = []
    for other, token in enumerate(tokens[1 : 1 + header.gpus]):
        cell = _parse_cell(token)
        if cell is None:
            raise TopologyParseError(
                source,
                f"unknown link {token!r} between GPU{gpu} and GPU{other}; expected X, NV#, PIX, PXB, PHB, NODE or SYS",
                line=number,
            )
        if (cell.link == Link.SELF) != (other == gpu):
            what = "must be X" if other == gpu else "cannot be X (X marks a GPU's own column)"
            raise TopologyParseError(source, f"cell GPU{gpu}/GPU{other} {what}, found {token!r}", line=number)
        cells.append(cell)
    link_cells = 0
    for token in tokens[1 + header.gpus :]:
        if _parse_cell(token) is None:
            break
        link_cells += 1
    if link_cells != header.nics:
        raise TopologyParseError(
            source,
            f"row GPU{gpu} has {header.gpus + link_cells} link cells, the header has "
            f"{header.gpus} GPU + {header.nics} NIC columns (a missing or extra cell?)",
            line=number,
        )
    return cells


def _parse_cell(token: str) -> _Cell | None:
    word = token.upper()
    if word == "X":
        return _Cell(Link.SELF, text=token)
    if word in _PCIE_CELLS:
        return _Cell(_PCIE_CELLS[word], text=token)
    m = _NVLINK.fullmatch(word)
    return _Cell(Link.NVLINK, int(m.group(1)), text=token) if m else None


def _check_matrix(rows: dict[int, tuple[int, list[_Cell]]], header: _Header, source: str) -> list[list[_Cell]]:
    """All rows present and the matrix symmetric (both GPUs must agree on their link)."""
    for gpu in range(header.gpus):
        if gpu not in rows:
            raise TopologyParseError(
                source, f"no row for GPU{gpu} (the header has GPU0..GPU{header.gpus - 1})", line=header.line
            )
    for i in range(header.gpus):
        for j in range(i):
            line_i, row_i = rows[i]
            line_j, row_j = rows[j]
            if row_i[j] != row_j[i]:
                raise TopologyParseError(
                    source,
                    f"asymmetric matrix: GPU{i} -> GPU{j} is {row_i[j].text} "
                    f"but GPU{j} -> GPU{i} is {row_j[i].text} (line {line_j})",
                    line=line_i,
                )
    return [rows[gpu][1] for gpu in range(header.gpus)]
