"""The named parts a policy is built from: job orders and placers, by the names the CLI,
the config file and model files use.

Each factory takes the run's seed (the searches and random placement use it; the
heuristics are deterministic and ignore it). `registry` composes these into policies;
the learned policies look up the job order their model was trained with here too.
"""

from __future__ import annotations

from collections.abc import Callable

from .annealing import Annealing
from .genetic import Genetic
from .metaheuristic import DEFAULT_MAX_EVALUATIONS, Portfolio, scaled_budget
from .order import (
    FairShare,
    Fifo,
    OracleShortestJobFirst,
    ShortestJobFirst,
    SlurmMultifactor,
    Tiresias,
)
from .placement import Consolidate, FirstFit, LoadBalance, RandomPlacer
from .policy import JobChooser, Placer
from .slurm_select import SlurmSelectPlacer


def _search(cls: type[Genetic] | type[Annealing]) -> Callable[..., JobChooser]:
    """The factory of a search: its ``evaluations`` parameter becomes `scaled_budget`'s keywords."""
    return lambda seed, evaluations=DEFAULT_MAX_EVALUATIONS, **params: cls(seed=seed, **scaled_budget(evaluations),
                                                                           **params)


SEARCH_ORDERS: dict[str, tuple[Callable[..., JobChooser], str]] = {
    "genetic": (_search(Genetic),
                "genetic algorithm over job order and packing (look-ahead model), consolidated placement"),
    "annealing": (_search(Annealing),
                  "simulated annealing over job order and packing (look-ahead model), consolidated placement"),
    "portfolio": (lambda seed, **params: Portfolio(seed=seed, **params),
                  "best heuristic order by the look-ahead cost, no search; consolidated placement"),
}
"""The look-ahead job orders, with their one-line summaries (benchmarks that compare with
the plain heuristics leave them out). Their factories take the policy's parameters
(``fairness``; the searches also ``evaluations``, see `registry.parameters`) as keywords."""

ORDERS: dict[str, Callable[..., JobChooser]] = {
    "fifo": lambda seed: Fifo(),
    "sjf": lambda seed: ShortestJobFirst(),
    "fair-share": lambda seed: FairShare(),
    "tiresias": lambda seed: Tiresias(),
    "slurm-multifactor": lambda seed, **site: SlurmMultifactor(**site),
    "sjf-oracle": lambda seed: OracleShortestJobFirst(),
    **{name: factory for name, (factory, _) in SEARCH_ORDERS.items()},
}

PLACERS: dict[str, Callable[[int], Placer]] = {
    "first-fit": lambda seed: FirstFit(),
    "consolidate": lambda seed: Consolidate(),
    "load-balance": lambda seed: LoadBalance(),
    "random": lambda seed: RandomPlacer(seed=seed),
    "slurm-select": lambda seed: SlurmSelectPlacer(),
}
