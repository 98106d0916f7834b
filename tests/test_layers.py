"""The package's layers, read from the source: every import (module level, inside
functions, under ``TYPE_CHECKING``) runs down the stack, never up or across, and no two
modules import each other, directly or through others.

    topology  <-  agents  <-  simulator, daemon  <-  training, ops  <-  the CLI

``attentived.atomic``, ``attentived.logs`` and ``attentived.data`` are leaves any layer may
use; they import nothing of the project.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = {"topology": "topology", "agents": "agents", "simulator": "simulator", "daemon": "daemon",
           "training": "training", "ops": "ops"}
LEAVES = {"attentived.atomic", "attentived.logs", "attentived.data", "attentived"}
#: What each layer may import, besides itself and the leaves.
ALLOWED = {
    "topology": set(),
    "agents": {"topology"},
    "simulator": {"topology", "agents"},
    "daemon": {"topology", "agents"},
    "training": {"topology", "agents", "simulator"},
    "ops": {"topology", "agents", "simulator", "daemon"},
    "cli": {"topology", "agents", "simulator", "daemon", "training", "ops"},
}


def _modules() -> dict[str, Path]:
    mods = {}
    for pkg, folder in FOLDERS.items():
        for path in (ROOT / folder).rglob("*.py"):
            parts = [pkg, *path.relative_to(ROOT / folder).with_suffix("").parts]
            if parts[-1] == "__init__":
                parts.pop()
            mods[".".join(["attentived", *parts])] = path
    for path in (ROOT / "attentived").glob("*.py"):
        mods["attentived" if path.stem == "__init__" else f"attentived.{path.stem}"] = path
    return mods


MODULES = _modules()


def _imports(name: str, path: Path) -> set[str]:
    """Every project module ``name`` imports, resolved to a module of MODULES (or a leaf)."""
    package = name if path.stem == "__init__" else name.rsplit(".", 1)[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([node.module] if node.module else []))
            # ``from pkg import mod`` imports the module; ``from pkg import name``, the package
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names]
        for t in targets:
            if not t.startswith("attentived"):
                continue
            while t and t not in MODULES and t not in LEAVES:
                t = t.rpartition(".")[0]
            if t and t != name:
                out.add(t)
    return out


GRAPH = {name: _imports(name, path) for name, path in MODULES.items()}


def _layer(module: str) -> str:
    parts = module.split(".")
    if module in LEAVES or (len(parts) > 1 and parts[1] == "data"):
        return "leaf"
    if len(parts) > 1 and parts[1] in FOLDERS:
        return parts[1]
    return "cli"


def test_every_folder_is_found():
    assert {_layer(m) for m in MODULES} == {"topology", "agents", "simulator", "daemon", "training", "ops", "cli", "leaf"}
    assert "attentived.cli" in MODULES and "attentived.agents.policy" in MODULES


@pytest.mark.parametrize("module", sorted(MODULES))
def test_imports_run_down_the_layers(module):
    layer = _layer(module)
    allowed = {layer, "leaf"} | ALLOWED.get(layer, set())
    if layer == "leaf":
        allowed = {"leaf"}
    wrong = sorted(t for t in GRAPH[module] if _layer(t) not in allowed)
    assert not wrong, f"{module} ({layer}) imports {wrong}"


def test_no_import_cycles():
    """Tarjan's strongly connected components over the whole graph: each must be one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in GRAPH.get(v, ()):
            if w not in GRAPH:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    for v in sorted(GRAPH):
        if v not in index:
            visit(v)
    assert not cycles, f"import cycles: {cycles}"


def test_the_checker_sees_function_local_and_relative_imports(tmp_path):
    src = tmp_path / "m.py"
    src.write_text("from . import plan\n\ndef f():\n    from attentived.simulator.engine import Simulation\n")
    assert _imports("attentived.agents.m", src) == {"attentived.agents.plan", "attentived.simulator.engine"}
