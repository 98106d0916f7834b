"""``attentived demo``: the live daemon on the project's own Slurm, against Slurm alone.

One workload, run twice on an identical fresh lab cluster (``ops/lab.py``: 4 nodes x 8
GPUs, two NVLink islands per node, two leaf switches; its own run dir and ports):

1. **Slurm alone**: ``sched/backfill`` + ``priority/multifactor`` with the age and job-size
   weights a default site sets (``SLURM_ALONE_CONF``), Slurm's own placement.
2. **attentived**: the lab's ``sched/builtin`` (exact plan order) with ``attentived start``
   running as a subprocess (a cycle every 0.5 s), steering Slurm by priorities, pins and
   reservations.

The workload (`build_workload`) is a window of the bundled Philly trace, time-compressed;
each job is a batch script (`job_script`) that reads the GPUs Slurm actually gave it and
sleeps its scaled duration stretched by the simulator's speed model for that placement, so
placement changes how long it runs. The result (`measure`) comes from Slurm's own records
(``squeue --json -t all``: submit/start/end times, nodes; GPU indices while the job runs)
through the same ``simulator.metrics.summarize`` the replays use, next to the simulator's
prediction for the same workload (`predict`).

Modules, each importing only those above it:

- ``workload``: the demo topology, placement signatures and slowdown tables, ``DemoJob``,
  ``Workload``, ``build_workload``;
- ``jobscript``: the batch job script (``job_script``) and the line it prints
  (``parse_job_output``);
- ``measure``: Slurm's records -> ``JobRecord`` -> metrics (``measure``, ``summary_of``,
  ``TABLE_KEYS``) and the simulator's prediction (``predict``);
- ``runs``: the policy checks, ``DemoOptions``, the two live runs (``Demo``), ``RunResult``,
  ``DemoResult``, ``run_demo``.

Python API (``runs``): ``DemoOptions`` + ``run_demo(options, on_event=...)`` ->
``DemoResult``; the CLI renders it (``attentived/render_demo.py``). Documentation:
``docs/demo.md``.
"""
