"""The live daemon: Slurm snapshots in, Slurm actions out (``attentived start``, docs/daemon.md).

- ``backend``: typed snapshot records, the backend interface, the ``cli`` backend;
  ``slurm_json`` / ``scontrol_text``: the parsers; ``pyslurm_backend``: the optional one;
  ``testing``: an in-memory Slurm for tests.
- ``snapshot``: snapshot -> ``ClusterState`` (+ mapping to Slurm); ``topology_source``: the
  ``Topology`` from gres.conf/topology.conf or a cluster file.
- ``apply``: plan -> minimal Slurm actions; ``cycle``: one snapshot -> decide -> apply cycle;
  ``service``: the timer, signals, systemd notifications, metrics server.
- ``config``, ``checks`` (Slurm settings), ``journal`` (SQLite), ``prom`` (metrics),
  ``notify`` (sd_notify), ``log`` (structlog with cycle ids).
- ``lab``: the project's local Slurm for tests and benchmarks (docs/slurm-lab.md).
"""
