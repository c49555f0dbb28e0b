#!/usr/bin/env bash
# The backend's own tests (tests/test_tpldev.py), in .venv (made by scripts/setup.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
exec .venv/bin/python -m pytest -q tests "$@"
