"""Simulated annealing over the look-ahead window's order and packing genes.

One solution walks the neighbourhood of `metaheuristic.mutate` (swap two jobs, move a
job, flip a pack gene). A worse neighbour is accepted with probability
``exp(-delta / T)``; the temperature cools geometrically with the evaluations spent, from
``t_start`` to ``t_end`` times the starting cost, over ``max_evaluations`` (when the clock
ends the search first, the schedule is simply cut short). Starts from the best
heuristic solution, and returns the best solution seen.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from .metaheuristic import Budget, SearchChooser, mutate
from .objective import LookAhead, Solution


@dataclass
class Annealing(SearchChooser):
    """Simulated annealing job chooser (use with the consolidating placer)."""

    name: str = "annealing"
    t_start: float = 0.02
    t_end: float = 0.0005

    def search(self, look: LookAhead, starts: list[Solution], rng: random.Random, budget: Budget) -> Solution:
        best = cur = min(starts, key=lambda s: s.cost)
        scale = max(abs(cur.cost), 1e-6)
        t0, t1 = self.t_start * scale, self.t_end * scale
        steps = max(1, self.max_evaluations)
        cool = (t1 / t0) ** (1.0 / steps)
        temp = t0
        stale = 0
        flexible = look.flexible
        evaluate = look.evaluate
        while stale < self.patience and budget.spend():
            order, pack = mutate(cur.order, cur.pack, flexible, rng)
            cost = evaluate(order, pack)
            delta = cost - cur.cost
            if delta <= 0 or rng.random() < math.exp(-delta / temp):
                cur = Solution(order, pack, cost)
                if cost < best.cost - 1e-12:
                    best, stale = cur, 0
                    temp *= cool
                    continue
            stale += 1
            temp *= cool
        return best
