"""The live daemon: Slurm snapshots in, Slurm actions out (``attentived start``, docs/daemon.md).

It sits beside the simulator, on top of the decision core (``attentived.agents``); the
operator tools (``attentived.ops``) sit on top of it.

- ``records``: the typed Slurm records; ``slurm_json`` / ``scontrol_text``: the parsers;
  ``backend``: the interface; ``cli_backend``, ``pyslurm_backend``: the backends, and
  ``testing``: an in-memory Slurm for tests; ``connect``: the backend a config names.
- ``snapshot``: snapshot -> ``ClusterState`` (+ mapping to Slurm); ``topology_source``: the
  ``Topology`` from gres.conf/topology.conf or a cluster file.
- ``apply``: plan -> minimal Slurm actions; ``cycle``: ``CycleRunner``, one snapshot ->
  decide -> apply cycle, delegating to ``policy_slot`` (the policy in force and its
  fall-back), ``placements`` (pins and where jobs really started), ``status``,
  ``permissions`` and ``handback``; ``service``: the timer, signals, systemd
  notifications, metrics server; ``observe``: what shadow mode records.
- ``config``, ``checks`` (Slurm settings), ``journal`` (SQLite), ``prom`` (metrics),
  ``notify`` (sd_notify), ``log`` (structlog with cycle ids).
"""
