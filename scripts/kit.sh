#!/usr/bin/env bash
# The vendor kit in CI (after scripts/test.sh): the conformance suite on emu in each kernel
# launch mode (auto, queued, blocking) and on emu with only the minimal operators native, each
# with a JSON report in build/kit/, then the `kit` tests, which build a generated backend and run
# its conformance tiers and the tutorial's commands. They take minutes, so the default test
# command leaves them out (pyproject.toml: -m "not kit").
set -euo pipefail
cd "$(dirname "$0")/.."
. .venv/bin/activate
mkdir -p build/kit
python -m torch_emu conformance --json build/kit/emu.json
TORCH_EMU_LAUNCH_QUEUED=1 python -m torch_emu conformance --json build/kit/emu-queued.json
TORCH_EMU_LAUNCH_BLOCKING=1 python -m torch_emu conformance --json build/kit/emu-blocking.json
TORCH_EMU_NATIVE_KERNELS=0 python -m torch_emu conformance --json build/kit/emu-fallback.json
python -m pytest -m kit "$@"
