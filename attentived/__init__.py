"""attentived: fair, topology-aware GPU job scheduling for Slurm.

The package joins the design's top-level folders under one namespace:
``attentived.topology`` (topology/), ``attentived.simulator`` (simulator/),
``attentived.agents`` (agents/) and ``attentived.daemon`` (daemon/).
"""

__version__ = "0.1.0"
