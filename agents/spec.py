"""Policy names with parameters: ``NAME[:KEY=VALUE[,KEY=VALUE]...]``.

One spelling for every place a policy is named (``replay``, ``compare``, ``evaluate``,
``demo --policy``, the daemon's ``policy =``), e.g. ``portfolio:fairness=0.5`` or
``attentive:model=runs/a/best.pt,fairness=0.2``. Parsing is separate from building a
policy so that a bad parameter is refused (naming the policy, the key and what is
accepted) before anything loads a model, and so that two spellings of the same policy get
one canonical name: results are keyed by it, and a policy given twice is an error rather
than a run silently dropped.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path


class BadPolicyName(ValueError):
    """A policy name or parameter that cannot be used; the message says what is accepted."""


@dataclass(frozen=True)
class Parameter:
    """One ``KEY=VALUE`` a policy takes: what it means, what values it accepts, and how
    its text becomes the value the policy's constructor gets."""

    key: str
    summary: str
    accepted: str
    convert: Callable[[str], object]
    default: str

    def value(self, policy: str, text: str) -> object:
        try:
            return self.convert(text)
        except ValueError:
            raise BadPolicyName(f"policy {policy!r}: {self.key}={text!r}: must be {self.accepted}") from None


def model_file(text: str) -> str:
    """An existing file (the model loader checks what is in it)."""
    if not text or not Path(text).is_file():
        raise ValueError(text)
    return text


@dataclass(frozen=True)
class PolicySpec:
    """A parsed policy name: the policy (``base``) and its parameters' values, by key."""

    base: str
    params: tuple[tuple[str, object], ...] = ()
    texts: tuple[tuple[str, str], ...] = ()

    @property
    def name(self) -> str:
        """The canonical spelling: keys sorted, numbers without leading or trailing zeros
        (``evaluations=050`` is ``evaluations=50``). Results, JSON keys and log lines use
        it. A parameter given at its default stays in the name (``portfolio`` and
        ``portfolio:fairness=0.75`` are two names of one policy): results recorded under
        either keep their keys."""
        if not self.texts:
            return self.base
        return self.base + ":" + ",".join(f"{k}={t}" for k, t in self.texts)

    def kwargs(self) -> dict[str, object]:
        return dict(self.params)


def parse(text: str, parameters: Callable[[str], Mapping[str, Parameter] | None]) -> PolicySpec:
    """Split ``text`` into a policy and its parameters, checking each against what
    ``parameters(base)`` says the policy takes (``None``: an unknown policy, left for the
    caller to report with the list of names)."""
    base, sep, rest = text.partition(":")
    base = base.strip()
    if not sep:
        return PolicySpec(base)
    known = parameters(base)
    if known is None:
        return PolicySpec(base)
    if not known:
        raise BadPolicyName(f"policy {base!r} takes no parameters (got {rest!r})")
    values: dict[str, object] = {}
    texts: dict[str, str] = {}
    for item in rest.split(","):
        key, eq, value = (s.strip() for s in item.partition("="))
        if not eq or not key:
            raise BadPolicyName(f"policy {base!r}: {item!r} is not KEY=VALUE; write {base}:KEY=VALUE[,KEY=VALUE]")
        if key not in known:
            raise BadPolicyName(f"policy {base!r} has no parameter {key!r}; it takes {_listing(known)}")
        if key in values:
            raise BadPolicyName(f"policy {base!r}: {key} given twice")
        values[key] = known[key].value(base, value)
        v = values[key]
        if isinstance(v, bool):  # before int: a bool is one
            texts[key] = "1" if v else "0"
        elif isinstance(v, float):
            texts[key] = f"{v:g}"
        elif isinstance(v, int):
            texts[key] = str(v)
        else:
            texts[key] = value
    keys = sorted(values)
    return PolicySpec(base, tuple((k, values[k]) for k in keys), tuple((k, texts[k]) for k in keys))


def _listing(known: Mapping[str, Parameter]) -> str:
    return ", ".join(f"{p.key} ({p.accepted})" for p in known.values())
