"""Slurm hostlist expand/compress: the brief's examples, padding, errors, and round trips."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from attentived.topology.hostlist import MAX_HOSTS, compress, expand, natural_key


def test_expand_brief_example() -> None:
    assert expand("node[1-3,7],gpu-a[01-02]") == ["node1", "node2", "node3", "node7", "gpu-a01", "gpu-a02"]


@pytest.mark.parametrize(
    ("spec", "names"),
    [
        ("node1", ["node1"]),
        ("node1,node2", ["node1", "node2"]),
        ("node[8-10]", ["node8", "node9", "node10"]),
        ("node[08-10]", ["node08", "node09", "node10"]),
        ("n[098-101]", ["n098", "n099", "n100", "n101"]),
        ("r[1-2]n[1-2]", ["r1n1", "r1n2", "r2n1", "r2n2"]),
        ("node[1-2]-ib", ["node1-ib", "node2-ib"]),
        ("sw[1-2],spine", ["sw1", "sw2", "spine"]),
        ("/dev/nvidia[0-3]", ["/dev/nvidia0", "/dev/nvidia1", "/dev/nvidia2", "/dev/nvidia3"]),
        (" a[1, 3] , b ", ["a1", "a3", "b"]),
        ("[1-2]", ["1", "2"]),
    ],
)
def test_expand(spec: str, names: list[str]) -> None:
    assert expand(spec) == names


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("", "empty hostlist"),
        ("   ", "empty hostlist"),
        ("node[1-3", "never closed"),
        ("node1-3]", "no matching '['"),
        ("node[1-[2]]", "do not nest"),
        ("node[3-1]", "reversed range '3-1'"),
        ("node[]", "empty brackets"),
        ("node[a-b]", "bad range 'a-b'"),
        ("node[1-]", "bad range '1-'"),
        ("node1,,node2", "empty host name"),
        ("node1,", "empty host name"),
        ("node 1", "whitespace"),
        ("node[0-99999999]", f"more than {MAX_HOSTS}"),
        ("a[0-999]b[0-999]", f"more than {MAX_HOSTS}"),
        ("a[0-60000,0-60000]", f"more than {MAX_HOSTS}"),
    ],
)
def test_expand_errors(spec: str, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("[", r"\[")):
        expand(spec)


@pytest.mark.parametrize(
    ("names", "spec"),
    [
        (["node1", "node2", "node3", "node7", "gpu-a01", "gpu-a02"], "gpu-a[01-02],node[1-3,7]"),
        (["node10", "node9", "node2", "node1"], "node[1-2,9-10]"),
        (["n08", "n09", "n10", "n11"], "n[08-11]"),
        (["n1", "n01"], "n01,n1"),
        (["n100", "n099"], "n[099-100]"),
        (["node1-ib", "node2-ib", "node1"], "node1,node[1-2]-ib"),
        (["spine"], "spine"),
        (["node3", "node3"], "node3"),
        ([], ""),
    ],
)
def test_compress(names: list[str], spec: str) -> None:
    assert compress(names) == spec


@pytest.mark.parametrize("bad", ["", "a,b", "a[1]", "a b"])
def test_compress_rejects_unwritable_names(bad: str) -> None:
    with pytest.raises(ValueError, match="cannot be written"):
        compress([bad])


def test_natural_key_orders_numbers_by_value() -> None:
    assert sorted(["node10", "node9", "node1", "gpu2"], key=natural_key) == ["gpu2", "node1", "node9", "node10"]


_prefix = st.text(alphabet="abn-_.", max_size=4)
_number = st.one_of(
    st.integers(0, 150).map(str),
    st.tuples(st.integers(0, 150), st.integers(2, 4)).map(lambda t: str(t[0]).zfill(t[1])),
)
_name = st.one_of(
    st.builds(lambda p, n, s: p + n + s, _prefix, _number, st.sampled_from(["", "-ib", "x"])),
    st.text(alphabet="abn-_.", min_size=1, max_size=4),
)


@given(st.lists(_name, min_size=1, max_size=40))
def test_compress_expand_round_trip(names: list[str]) -> None:
    spec = compress(names)
    back = expand(spec)
    assert sorted(back) == sorted(set(names))
    assert len(back) == len(set(names))
    assert compress(back) == spec


@given(st.text(alphabet="node0123456789[]-, ", max_size=30))
def test_expand_arbitrary_text_only_raises_value_error(text: str) -> None:
    try:
        names = expand(text)
    except ValueError:
        return
    assert names and all(names)
