"""Trace-driven discrete-event simulation of a GPU cluster under a policy."""
