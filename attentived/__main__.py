"""``python -m attentived`` runs the command line."""

from attentived.cli import app

app(prog_name="attentived")
