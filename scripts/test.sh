#!/usr/bin/env bash
# Runs the whole test suite (unit, integration, multi-process and the
# warning-free docs build) from a clean checkout: sets up first if needed.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --no-demo
. .venv/bin/activate
python -m pytest "$@"
