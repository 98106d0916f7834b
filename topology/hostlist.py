"""Slurm hostlist expressions: ``node[1-3,7],gpu-a[01-02]`` <-> a list of host names.

Every Slurm file and command speaks in hostlists, so the config parsers expand them to
build one ``Node`` per host, and the daemon compresses them back when it talks to Slurm.
Zero padding is part of a name (``a01`` is not ``a1``): a range keeps the width of its
lower bound, as Slurm does.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable

#: Refuse to expand hostlists longer than this: no cluster is that big, and a typo such as
#: ``node[1-1000000000]`` would otherwise exhaust memory instead of failing.
MAX_HOSTS = 65536

_RANGE = re.compile(r"([0-9]+)(?:-([0-9]+))?")
_LAST_NUMBER = re.compile(r"(.*?)([0-9]+)([^0-9]*)")
_FORBIDDEN = re.compile(r"[\[\],\s]")


def expand(spec: str) -> list[str]:
    """All host names of a hostlist, in the order written (duplicates kept).

    Commas outside brackets separate names; each ``[...]`` holds comma-separated numbers
    or ``lo-hi`` ranges; several bracket groups in one name multiply out
    (``r[1-2]n[1-2]`` -> ``r1n1 r1n2 r2n1 r2n2``). Raises ``ValueError`` on malformed input.
    """
    text = spec.strip()
    if not text:
        raise ValueError("empty hostlist")
    names: list[str] = []
    for piece in _split_top_level(text):
        names.extend(_expand_name(piece, text, budget=MAX_HOSTS - len(names)))
    return names


def compress(names: Iterable[str]) -> str:
    """The shortest-ish hostlist naming exactly ``names`` (deduplicated, natural order).

    Names are grouped on everything but their last number, so ``node1-ib`` and
    ``node2-ib`` become ``node[1-2]-ib``; zero-padded numbers only share brackets with
    numbers of the same width. ``expand(compress(x))`` gives back the distinct names of
    ``x``. An empty input gives ``""``.
    """
    unique = sorted(set(names), key=natural_key)
    for name in unique:
        if not name or _FORBIDDEN.search(name):
            raise ValueError(
                f"host name {name!r} cannot be written in a hostlist (empty, or has '[', ']', ',' or a space)"
            )
    groups: dict[tuple[str, str, int], list[int]] = {}
    first: dict[tuple[str, str, int], str] = {}
    literals: list[str] = []
    padded = _padded_widths(unique)
    for name in unique:
        m = _LAST_NUMBER.fullmatch(name)
        if m is None:
            literals.append(name)
            continue
        prefix, digits, suffix = m.groups()
        width = _width(digits, padded.get((prefix, suffix), set()))
        key = (prefix, suffix, width)
        groups.setdefault(key, []).append(int(digits))
        first.setdefault(key, name)
    items = [(name, name) for name in literals]
    items += [(first[key], _format_group(*key, numbers)) for key, numbers in groups.items()]
    return ",".join(text for _, text in sorted(items, key=lambda item: natural_key(item[0])))


def natural_key(name: str) -> tuple[tuple[str | int, ...], str]:
    """Sort key that orders ``node2`` before ``node10`` (ties broken by the raw text)."""
    parts = re.split(r"([0-9]+)", name)
    return tuple(int(p) if i % 2 else p for i, p in enumerate(parts)), name


def _split_top_level(text: str) -> list[str]:
    """Split on commas outside brackets, checking that brackets balance and do not nest."""
    pieces: list[str] = []
    start, open_at = 0, -1
    for pos, ch in enumerate(text):
        if ch == "[":
            if open_at >= 0:
                raise ValueError(f"hostlist {text!r}: '[' at position {pos} inside another '[' (brackets do not nest)")
            open_at = pos
        elif ch == "]":
            if open_at < 0:
                raise ValueError(f"hostlist {text!r}: ']' at position {pos} has no matching '['")
            open_at = -1
        elif ch == "," and open_at < 0:
            pieces.append(text[start:pos])
            start = pos + 1
    if open_at >= 0:
        raise ValueError(f"hostlist {text!r}: '[' at position {open_at} is never closed")
    pieces.append(text[start:])
    for piece in pieces:
        if not piece.strip():
            raise ValueError(f"hostlist {text!r}: empty host name (doubled, leading or trailing comma?)")
    return [p.strip() for p in pieces]


def _expand_name(piece: str, text: str, budget: int) -> list[str]:
    """One comma-free hostlist item: literal parts and bracket groups, multiplied out."""
    parts = re.split(r"\[([^\]]*)\]", piece)
    if any(re.search(r"\s", literal) for literal in parts[::2]):
        raise ValueError(f"hostlist {text!r}: host name {piece!r} contains whitespace")
    choices = [[p] if i % 2 == 0 else _expand_bracket(p, piece) for i, p in enumerate(parts)]
    total = 1
    for options in choices:
        total *= len(options)
        if total > budget:
            raise ValueError(f"hostlist {text!r} expands to more than {MAX_HOSTS} hosts")
    return ["".join(combo) for combo in itertools.product(*choices)]


def _expand_bracket(body: str, piece: str) -> list[str]:
    """The numbers inside one ``[...]``, formatted with each range's padding."""
    if not body.strip():
        raise ValueError(f"host name {piece!r}: empty brackets")
    out: list[str] = []
    for item in body.split(","):
        m = _RANGE.fullmatch(item.strip())
        if m is None:
            raise ValueError(f"host name {piece!r}: bad range {item!r} (expected N or N-M with digits only)")
        lo_text, hi_text = m.group(1), m.group(2) or m.group(1)
        lo, hi = int(lo_text), int(hi_text)
        if hi < lo:
            raise ValueError(f"host name {piece!r}: reversed range {item.strip()!r} (write it as {hi_text}-{lo_text})")
        if len(out) + hi - lo >= MAX_HOSTS:
            raise ValueError(f"host name {piece!r}: brackets name more than {MAX_HOSTS} hosts")
        out.extend(str(n).zfill(len(lo_text)) for n in range(lo, hi + 1))
    return out


def _padded_widths(names: list[str]) -> dict[tuple[str, str], set[int]]:
    """Widths of zero-padded numbers (``01``) per (prefix, suffix) family of names."""
    widths: dict[tuple[str, str], set[int]] = {}
    for name in names:
        m = _LAST_NUMBER.fullmatch(name)
        if m and len(m.group(2)) > 1 and m.group(2).startswith("0"):
            widths.setdefault((m.group(1), m.group(3)), set()).add(len(m.group(2)))
    return widths


def _width(digits: str, padded: set[int]) -> int:
    """Bracket group a number belongs to: its padded width, or 0 for plain numbers.

    A plain number as wide as a padded group (``10`` next to ``09``) renders the same
    either way, so it joins that group and ``node[09-10]`` stays one range.
    """
    if len(digits) > 1 and digits.startswith("0"):
        return len(digits)
    return len(digits) if len(digits) in padded else 0


def _format_group(prefix: str, suffix: str, width: int, numbers: list[int]) -> str:
    numbers = sorted(numbers)
    if len(numbers) == 1:
        return f"{prefix}{str(numbers[0]).zfill(width)}{suffix}"
    runs: list[str] = []
    start = prev = numbers[0]
    for n in [*numbers[1:], None]:
        if n is not None and n == prev + 1:
            prev = n
            continue
        lo, hi = str(start).zfill(width), str(prev).zfill(width)
        runs.append(lo if start == prev else f"{lo}-{hi}")
        if n is not None:
            start = prev = n
    return f"{prefix}[{','.join(runs)}]{suffix}"
