"""Operator tools around the daemon: inspection (status, queue, explain, decisions), shadow
reports, trace export, the local Slurm lab and the live demo. They sit above the daemon and
the simulator; the daemon never imports them."""
