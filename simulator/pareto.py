"""The trade-off a fair and efficient scheduler is judged on, and how a fairness knob covers it.

Two axes, both lower is better: average completion time and the worst-off user's mean
wait (`PARETO_AXES`). A policy is on the *front* when no other policy is at least as good
on both and better on one. A policy with a fairness setting (``NAME:fairness=W``, see
`agents.spec`) run at several W draws a *curve*; `versus` answers the question the
project's claim rests on: for each other policy B, which settings W are at least as fast
as B *and* protect the worst-off user at least as well, and when none is, how far the
closest setting falls short.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

PARETO_AXES = ("avg_jct", "max_user_wait")

Point = tuple[float, ...]


def points(per: Mapping[str, Mapping[str, Any]]) -> dict[str, Point]:
    """Each policy's mean on the `PARETO_AXES`, from ``policy -> metric -> stat`` (anything
    with a ``mean``, as `simulator.compare.Stat`)."""
    return {p: tuple(ms[m].mean for m in PARETO_AXES) for p, ms in per.items()}


def pareto_front(points: Mapping[str, Point]) -> list[str]:
    """The policies no other policy dominates (at least as good on every axis, better on
    one; lower is better), in the order given."""
    def dominates(a: Point, b: Point) -> bool:
        return all(x <= y for x, y in zip(a, b)) and any(x < y for x, y in zip(a, b))

    return [p for p, v in points.items() if not any(dominates(w, v) for q, w in points.items() if q != p)]


def curves(names: Sequence[str]) -> dict[str, dict[float, str]]:
    """Policies run at two or more fairness settings, by their name without the setting:
    ``{"portfolio": {0.0: "portfolio:fairness=0", 1.0: "portfolio:fairness=1"}}``."""
    from attentived.agents.registry import parse_name

    out: dict[str, dict[float, str]] = {}
    for name in names:
        spec = parse_name(name)
        params = dict(spec.params)
        w = params.pop("fairness", None)
        if not isinstance(w, float):
            continue
        rest = ",".join(f"{k}={t}" for k, t in spec.texts if k != "fairness")
        out.setdefault(spec.base + (f":{rest}" if rest else ""), {})[w] = name
    return {k: dict(sorted(v.items())) for k, v in out.items() if len(v) >= 2}


@dataclass(frozen=True)
class Versus:
    """A curve against one other policy: the settings that match or beat it on both axes
    (``covering``), else the closest one and its ratios to the other policy's values
    (``closest``, ``ratios``; 1.0 = equal, above 1 = worse)."""

    other: str
    covering: tuple[float, ...]
    closest: float
    ratios: tuple[float, ...]

    def as_json(self) -> dict:
        return {"covering": list(self.covering), "closest": self.closest, "ratios": list(self.ratios)}

    def describe(self) -> str:
        if self.covering:
            return f"W in {{{', '.join(f'{w:g}' for w in self.covering)}}}"
        worse = ", ".join(f"{a} x{r:.2f}" for a, r in zip(PARETO_AXES, self.ratios) if r > 1.0)
        return f"none; closest W={self.closest:g} ({worse})"


def versus(curve: Mapping[float, str], points: Mapping[str, Point]) -> list[Versus]:
    """The curve (W -> policy name) against every policy not on it."""
    own = set(curve.values())
    out = []
    for other, b in points.items():
        if other in own:
            continue
        ratios = {w: tuple(x / y if y > 0 else (1.0 if x <= 0 else float("inf")) for x, y in zip(points[p], b))
                  for w, p in curve.items()}
        covering = tuple(w for w, r in ratios.items() if all(x <= 1.0 for x in r))
        closest = min(ratios, key=lambda w: (max(ratios[w]), w))
        out.append(Versus(other, covering, closest, ratios[closest]))
    return out


def knobs(pts: Mapping[str, Point]) -> dict[str, tuple[dict[float, str], list[Versus]]]:
    """Every policy run at two or more fairness settings: its curve, and `versus` every
    other policy. The same policy named without a setting (its default) is a point of the
    curve, not a rival, so it is left out of the comparison."""
    from attentived.agents.registry import parse_name

    out = {}
    for base, curve in curves(list(pts)).items():
        own = parse_name(base).base
        rivals = {p: v for p, v in pts.items() if p in curve.values() or parse_name(p).base != own}
        out[base] = (curve, versus(curve, rivals))
    return out
