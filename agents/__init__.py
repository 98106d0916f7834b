"""Deciders and the decision interface: the state a policy sees, plans, heuristics, agents."""
