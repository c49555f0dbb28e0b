#!/usr/bin/env bash
# torch-emu's conformance suite against tpldev, from the torch-emu checkout that
# generated this package. Passes its arguments on, e.g.
#   bash scripts/conformance.sh --tier device memory generator operators
# (without --tier: every tier; the ones this minimal backend lacks fail with a reason).
set -euo pipefail
cd "$(dirname "$0")/.."
CONFORMANCE="${TORCH_EMU_CONFORMANCE:-@CONFORMANCE_DIR@}"
exec .venv/bin/python "$CONFORMANCE" "$@"
