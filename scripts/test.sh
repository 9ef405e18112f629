#!/usr/bin/env bash
# Sets everything up in ./.venv and runs the whole suite: lint, format, types, tests.
# Needs only Python >= 3.11 and access to PyPI. Extra args go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --disable-pip-version-check -e ".[dev]"
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy
.venv/bin/lint-imports  # the layers of DESIGN.md section 3 (pyproject.toml)
bash scripts/browser-deps.sh  # Debian's chromium for the real-browser widget test
bash scripts/sandbox-deps.sh  # libseccomp2 for the python tool's seccomp filter
exec .venv/bin/python -m pytest "$@"
