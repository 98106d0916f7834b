"""The live daemon: Slurm snapshots in, Slurm actions out."""
