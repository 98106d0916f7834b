"""A genetic algorithm over the look-ahead window's order and packing genes.

A population of ``population`` solutions, seeded with the heuristic starting solutions
and mutated copies of them. Each generation keeps the ``elite`` best, and breeds the rest
by binary tournament, order crossover (OX1: a slice of one parent's order, the remaining
jobs in the other parent's order) with uniform crossover of the pack genes, and one or
more `metaheuristic.mutate` steps. It stops when the budget is spent or ``patience``
evaluations passed without a better solution, and returns the best solution seen.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from .metaheuristic import Budget, SearchChooser, mutate
from .objective import LookAhead, Solution


@dataclass
class Genetic(SearchChooser):
    """Genetic-algorithm job chooser (use with the consolidating placer)."""

    name: str = "genetic"
    population: int = 16
    elite: int = 2
    crossover: float = 0.9
    mutation: float = 0.4

    def search(self, look: LookAhead, starts: list[Solution], rng: random.Random, budget: Budget) -> Solution:
        flexible = look.flexible
        evaluate = look.evaluate
        pop = sorted(starts, key=lambda s: s.cost)[: self.population]
        best = pop[0]
        stale = 0
        k = 0
        while len(pop) < self.population and budget.spend():
            base = pop[k % len(starts)]
            k += 1
            order, pack = base.order, base.pack
            for _ in range(1 + rng.randrange(3)):
                order, pack = mutate(order, pack, flexible, rng)
            pop.append(Solution(order, pack, evaluate(order, pack)))
        pop.sort(key=lambda s: s.cost)
        if pop[0].cost < best.cost:
            best = pop[0]
        n = look.size
        while stale < self.patience:
            children: list[Solution] = []
            out_of_budget = False
            while len(children) < self.population - self.elite:
                a = _tournament(pop, rng)
                b = _tournament(pop, rng)
                if rng.random() < self.crossover and n > 2:
                    order = _ox(a.order, b.order, rng)
                    pack = tuple(x if rng.random() < 0.5 else y for x, y in zip(a.pack, b.pack))
                else:
                    order, pack = a.order, a.pack
                if rng.random() < self.mutation or (order == a.order and pack == a.pack):
                    order, pack = mutate(order, pack, flexible, rng)
                if not budget.spend():
                    out_of_budget = True
                    break
                cost = evaluate(order, pack)
                child = Solution(order, pack, cost)
                children.append(child)
                if cost < best.cost - 1e-12:
                    best, stale = child, 0
                else:
                    stale += 1
            pop = sorted(pop[: self.elite] + children, key=lambda s: s.cost)[: self.population]
            if out_of_budget:
                break
        return best


def _tournament(pop: list[Solution], rng: random.Random) -> Solution:
    a, b = pop[rng.randrange(len(pop))], pop[rng.randrange(len(pop))]
    return a if a.cost <= b.cost else b


def _ox(p1: tuple[int, ...], p2: tuple[int, ...], rng: random.Random) -> tuple[int, ...]:
    """Order crossover: ``p1[i:j]`` kept in place, the other jobs in ``p2``'s order."""
    n = len(p1)
    i, j = sorted(rng.sample(range(n + 1), 2))
    kept = p1[i:j]
    inside = set(kept)
    rest = [x for x in p2 if x not in inside]
    return tuple(rest[:i]) + kept + tuple(rest[i:])
