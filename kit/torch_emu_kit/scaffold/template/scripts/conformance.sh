#!/usr/bin/env bash
# torch-emu-kit's conformance suite against tpldev, in .venv (scripts/setup.sh installs the kit
# there). Passes its arguments on, e.g.
#   bash scripts/conformance.sh --tier device memory generator operators
# (without --tier: every tier; the ones this minimal backend lacks fail with a reason).
set -euo pipefail
cd "$(dirname "$0")/.."
exec .venv/bin/python -m torch_emu_kit conformance "$@"
