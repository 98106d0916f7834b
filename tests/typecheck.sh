#!/usr/bin/env bash
# Lint and type-check the whole tree (part of tests/run.sh; runs alone too).
#   ruff: pyflakes, pycodestyle, import order, bugbear, pyupgrade ([tool.ruff] in pyproject.toml)
#   mypy: the attentived package as installed, i.e. attentived.<layer> from each layer's
#         folder, plus tests/ and bench/; mypy cannot follow setuptools' editable-install
#         finder, so it reads a tree of links with the installed layout under .venv/typecheck.
set -euo pipefail
cd "$(dirname "$0")/.."

.venv/bin/ruff check .

tree=.venv/typecheck/attentived
rm -rf .venv/typecheck
mkdir -p "$tree"
for f in attentived/*; do
    ln -s "$PWD/$f" "$tree/"
done
for layer in topology agents simulator daemon training ops; do
    ln -s "$PWD/$layer" "$tree/$layer"
done
.venv/bin/mypy --python-executable .venv/bin/python
