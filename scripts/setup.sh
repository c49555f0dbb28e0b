#!/usr/bin/env bash
# Sets up torch-emu on a fresh machine: a virtual environment in .venv with
# torch 2.13.0 and the test/docs tools, then an optimised, parallel build of
# the extension. Then runs the demo (skip it with --no-demo).
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3.11}
command -v "$PYTHON" >/dev/null || PYTHON=python3
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
. .venv/bin/activate
# What pip installs depends on these files only: when they are as at the last full setup, pip is
# skipped (15-20 s, paid by every scripts/test.sh) and only the C++ that changed is rebuilt.
requirements=$(cat scripts/setup.sh pyproject.toml setup.py kit/pyproject.toml \
  examples/registration/pyproject.toml examples/registration/setup.py | sha256sum)
stamp=.venv/torch-emu-setup
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$requirements" ]; then
  start=$(date +%s)
  python setup.py --quiet build_ext --inplace
  (cd examples/registration && python setup.py --quiet build_ext --inplace)
else
  python -m pip install --quiet --upgrade pip
  # The C++ extension is ABI-bound to this exact torch; it must be present before
  # the build (no build isolation), the rest comes from pyproject.toml.
  python -m pip install --quiet torch==2.13.0 ninja setuptools wheel
  start=$(date +%s)
  # The vendor kit, a pure-Python distribution of its own (kit/): the backend depends on it, and pip
  # must find it here, not on an index.
  python -m pip install --quiet --no-build-isolation -e ./kit
  python -m pip install --quiet --no-build-isolation -e ".[test]"
  # The operator registration examples: a package of their own, never loaded by the backend.
  python -m pip install --quiet --no-build-isolation --no-deps -e examples/registration
  echo "$requirements" > "$stamp"
fi
echo "torch-emu built in $(( $(date +%s) - start )) s"

if [ "${1:-}" != "--no-demo" ]; then
  python -m torch_emu demo
fi
