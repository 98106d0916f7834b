"""Fuzzing (hypothesis) of every parser that reads outside input (issue 7, item 6).

Each parser is fed its real fixtures mutated (truncated, spliced, with bytes and lines
changed) and, for JSON, with keys removed, values of another type and unexpected Slurm
versions. Every input must give a result or the parser's documented error type
(``SlurmParseError``, ``TopologyParseError``, ``TraceError``, ``CheckpointError``), never
another exception. Fast: no Slurm, no marker.
"""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from attentived.agents.checkpoint import CheckpointError, load_model
from attentived.daemon import scontrol_text, slurm_json
from attentived.daemon.records import SlurmParseError
from attentived.simulator.trace import TraceError, load_trace
from attentived.topology.cluster_file import parse_cluster_file
from attentived.topology.nvsmi import TopologyParseError, parse_nvidia_smi_topo
from attentived.topology.slurm_conf import parse_gres_conf, parse_topology_conf
from attentived.topology.slurm_yaml import parse_topology_yaml

HERE = Path(__file__).parent
DAEMON_FX = HERE / "daemon" / "fixtures"
TOPO_FX = HERE / "topology" / "fixtures"
TRACE_FX = HERE / "simulator" / "fixtures"
FUZZ = settings(max_examples=int(os.environ.get("ATTENTIVED_FUZZ_EXAMPLES", "120")), deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                       HealthCheck.data_too_large])


def _texts(folder: Path, pattern: str) -> list[str]:
    return [p.read_text(errors="replace") for p in sorted(folder.glob(pattern))]


# ---- generic text mutations ---------------------------------------------------------------
_NASTY = st.sampled_from(["", "\x00", "\n", "=", "==", " ", ",", "[", "]", "{", "}", "-", "N/A", "(null)",
                          "99999999999999999999", "-1", "1e308", "nan", "GPU", "GPU0", "NV", "X", "é", "\u202e",
                          "'", '"', ";", "$(id)", "`id`", "\r", "\t", "gpu:", "gpu:a100:", "IDX:", "0-", "9-1",
                          "Name=gpu", "NodeName=", "SwitchName=", "Links=", "File=/dev/nvidia", "Nodes=n[1-",
                          "Switches=", "BlockName=", "BlockSizes=", "block_sizes:",
                          "[[nodes]]", "names =", "gpus = -1", "JobId=", "ReservationName="])


@st.composite
def mutated(draw, seeds: list[str]) -> str:
    text = draw(st.sampled_from(seeds))
    for _ in range(draw(st.integers(0, 4))):
        op = draw(st.sampled_from(["truncate", "delete", "insert", "replace_line", "dup_line", "swap_lines"]))
        n = len(text)
        if op == "truncate":
            text = text[: draw(st.integers(0, n))]
        elif op == "delete" and n:
            i = draw(st.integers(0, n - 1))
            text = text[:i] + text[i + draw(st.integers(1, 40)):]
        elif op == "insert":
            i = draw(st.integers(0, n))
            ins = draw(st.one_of(_NASTY, st.text(max_size=20)))
            text = text[:i] + ins + text[i:]
        else:
            lines = text.split("\n")
            if not lines:
                continue
            i = draw(st.integers(0, len(lines) - 1))
            if op == "replace_line":
                lines[i] = draw(st.one_of(_NASTY, st.text(max_size=60)))
            elif op == "dup_line":
                lines.insert(i, lines[i])
            else:
                j = draw(st.integers(0, len(lines) - 1))
                lines[i], lines[j] = lines[j], lines[i]
            text = "\n".join(lines)
    return text


# ---- JSON structure mutations -------------------------------------------------------------
_ODD_VALUES = st.sampled_from([None, True, False, 0, -1, 2**70, 1.5, float("inf"), "", "x", "N/A", [], {}, [None],
                               {"set": True, "infinite": False, "number": 3}, {"set": False}, {"number": "x"},
                               {"set": True}, ["PENDING", "x"], "node[1-", "gpu:a100:2(IDX:0-)", "gpu:x(IDX:3-1)",
                               {"major": "x"}, {"version": {"major": 99, "minor": 0, "micro": 0}}])


def _paths(doc, prefix=()):
    yield prefix
    if isinstance(doc, dict):
        for k, v in list(doc.items())[:40]:
            yield from _paths(v, prefix + (k,))
    elif isinstance(doc, list):
        for i, v in enumerate(doc[:4]):
            yield from _paths(v, prefix + (i,))


@st.composite
def mutated_json(draw, seeds: list[dict]) -> str:
    doc = copy.deepcopy(draw(st.sampled_from(seeds)))
    for _ in range(draw(st.integers(1, 5))):
        paths = [p for p in _paths(doc) if p]
        if not paths:
            break
        path = draw(st.sampled_from(paths))
        parent = doc
        for k in path[:-1]:
            parent = parent[k]
        op = draw(st.sampled_from(["delete", "swap", "version"]))
        if op == "delete":
            del parent[path[-1]]
        elif op == "swap":
            parent[path[-1]] = copy.deepcopy(draw(_ODD_VALUES))
        else:
            meta = doc.setdefault("meta", {}) if isinstance(doc, dict) else {}
            if isinstance(meta, dict):
                meta["Slurm"] = {"version": {"major": draw(st.sampled_from([0, 17, 26, 99, -1, "x", None])),
                                             "minor": draw(st.sampled_from([0, 5, 11, "y", None])), "micro": 0},
                                 "release": "fuzz"}
                meta["plugin"] = {"type": draw(st.sampled_from(["openapi/v0.0.37", "openapi/v9.9.99", ""]))}
    out = json.dumps(doc)
    if draw(st.booleans()) and draw(st.booleans()):
        out = out[: draw(st.integers(0, len(out)))]  # truncated output
    return out


def _json_seeds(*names: str) -> list[dict]:
    out = []
    for v in sorted(DAEMON_FX.glob("slurm-*")):  # every recorded version
        for n in names:
            p = v / n
            if p.exists():
                out.append(json.loads(p.read_text()))
    assert out, names
    return out


SQUEUE = _json_seeds("squeue.json", "squeue-sample.json", "scontrol-show-job.json")
NODES = _json_seeds("scontrol-show-nodes.json", "sinfo.json", "sinfo-sample.json")
RESV = _json_seeds("scontrol-show-reservation.json")


# ---- Slurm JSON ---------------------------------------------------------------------------
@FUZZ
@given(mutated_json(SQUEUE))
def test_squeue_json_structural(raw: str) -> None:
    try:
        slurm_json.parse_squeue(raw)
    except SlurmParseError:
        pass


@FUZZ
@given(mutated_json(NODES))
def test_nodes_json_structural(raw: str) -> None:
    for fn in (slurm_json.parse_nodes, slurm_json.parse_sinfo):
        try:
            fn(raw)
        except SlurmParseError:
            pass


@FUZZ
@given(mutated_json(RESV))
def test_reservations_json_structural(raw: str) -> None:
    try:
        slurm_json.parse_reservations(raw)
    except SlurmParseError:
        pass


@FUZZ
@given(mutated([json.dumps(d, indent=1) for d in SQUEUE + NODES + RESV]))
def test_slurm_json_text_mutations(raw: str) -> None:
    for fn in (slurm_json.parse_squeue, slurm_json.parse_nodes, slurm_json.parse_reservations):
        try:
            fn(raw)
        except SlurmParseError:
            pass


@FUZZ
@given(st.one_of(st.binary(max_size=200), st.text(max_size=200),
                 st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
                              lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=8), c, max_size=4),
                              max_leaves=20).map(json.dumps)))
def test_slurm_json_arbitrary(raw) -> None:
    for fn in (slurm_json.parse_squeue, slurm_json.parse_nodes, slurm_json.parse_reservations, slurm_json.parse_sinfo):
        try:
            fn(raw)
        except SlurmParseError:
            pass


def test_slurm_json_deep_nesting_is_a_parse_error() -> None:
    with pytest.raises(SlurmParseError):
        slurm_json.parse_squeue("[" * 100_000 + "]" * 100_000)


# ---- scontrol -o text ---------------------------------------------------------------------
SC_RESV = _texts(DAEMON_FX / "slurm-22.05", "scontrol-show-reservation.txt")
SC_PART = [t for v in sorted(DAEMON_FX.glob("slurm-*")) for t in _texts(v, "scontrol-show-partition.txt")]
SC_CONF = _texts(DAEMON_FX / "slurm-22.05", "scontrol-show-config.txt")


@FUZZ
@given(mutated(SC_RESV + SC_PART))
def test_scontrol_text_mutations(text: str) -> None:
    for fn in (scontrol_text.parse_reservations, scontrol_text.parse_partitions):
        try:
            fn(text)
        except SlurmParseError:
            pass


@FUZZ
@given(mutated(SC_CONF))
def test_scontrol_config_mutations(text: str) -> None:
    try:
        scontrol_text.parse_config(text)
    except SlurmParseError:
        pass


# ---- topology inputs ----------------------------------------------------------------------
NVSMI = _texts(TOPO_FX, "*.txt")
GRES = _texts(TOPO_FX, "*gres.conf")
TOPOCONF = _texts(TOPO_FX, "*topology.conf") + _texts(DAEMON_FX / "slurm-24.11", "topology-block.conf")
CLUSTER = _texts(TOPO_FX, "*.toml")
TOPOYAML = _texts(DAEMON_FX / "slurm-26.05", "*.yaml")  # a topology.yaml and topoconf's dump of it


@FUZZ
@given(mutated(NVSMI))
def test_nvidia_smi_topo(text: str) -> None:
    try:
        parse_nvidia_smi_topo(text)
    except TopologyParseError:
        pass


@FUZZ
@given(mutated(GRES + TOPOCONF))
def test_gres_and_topology_conf(text: str) -> None:
    try:
        parse_gres_conf(text, default_nodes=("n1",))
    except TopologyParseError:
        pass
    try:
        parse_topology_conf(text)
    except TopologyParseError:
        pass


@FUZZ
@given(mutated(TOPOYAML))
def test_topology_yaml(text: str) -> None:
    try:
        parse_topology_yaml(text)
    except TopologyParseError:
        pass


def test_topology_yaml_deep_nesting_is_a_parse_error() -> None:
    for text in ("[" * 100_000, "- " * 20_000 + "x"):
        with pytest.raises(TopologyParseError, match="nested too deeply"):
            parse_topology_yaml(text)


@FUZZ
@given(mutated(CLUSTER))
def test_cluster_file(text: str) -> None:
    try:
        parse_cluster_file(text, base_dir=TOPO_FX)
    except TopologyParseError:
        pass


# ---- traces -------------------------------------------------------------------------------
TRACES = _texts(TRACE_FX, "*.csv")


@FUZZ
@given(mutated(TRACES))
def test_trace_loader(tmp_path_factory, text: str) -> None:
    p = tmp_path_factory.mktemp("trace") / "t.csv"
    p.write_bytes(text.encode("utf-8", "surrogatepass"))
    try:
        load_trace(p)
    except TraceError:
        pass


# ---- model files --------------------------------------------------------------------------
def _model_bytes() -> bytes:
    from attentived.agents.learned import default_model_path

    return Path(default_model_path("attentive")).read_bytes()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.data())
def test_checkpoint_corruption(tmp_path_factory, data) -> None:
    good = _model_bytes()
    op = data.draw(st.sampled_from(["truncate", "flip", "garbage", "empty"]))
    if op == "truncate":
        bad = good[: data.draw(st.integers(0, len(good) - 1))]
    elif op == "flip":
        i = data.draw(st.integers(0, len(good) - 1))
        bad = good[:i] + bytes([good[i] ^ 0xFF]) + good[i + 1:]
    elif op == "garbage":
        bad = data.draw(st.binary(max_size=300))
    else:
        bad = b""
    p = tmp_path_factory.mktemp("model") / "m.pt"
    p.write_bytes(bad)
    try:
        load_model(p)
    except CheckpointError:
        pass
