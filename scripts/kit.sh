#!/usr/bin/env bash
# The vendor kit in CI (after scripts/test.sh): the `kit` test, which runs the tutorial's commands
# (`torch-emu-kit tutorial`: a generated backend set up in a fresh environment with torch-emu-kit
# installed from kit/, as a vendor's, its tiers and tests, then every tier on emu), and beside it
# the conformance suite on emu in the other kernel launch modes (queued, auto, blocking), with only
# the minimal operators native and on the runtime in Python, each with a JSON report in build/kit/.
# The `kit` test takes minutes, so the default test command leaves it out (pyproject.toml:
# -m "not kit"). Both halves are mostly single-threaded Python: one core each.
# Every tier runs in the default mode (the tutorial's last command: not run twice) and fully
# queued, the mode where an ordering bug shows most; auto and blocking run the tiers whose checks
# depend on when kernels run, not the parity sweeps, compile and distributed (a minute and a half
# each run, their kernels the same in every mode).
set -euo pipefail
cd "$(dirname "$0")/.."
. .venv/bin/activate
mkdir -p build/kit
python -m pytest -m kit "$@" > build/kit/kit-tests.log 2>&1 &
kit_tests=$!
# The tutorial test's output, whatever happens below.
trap 'wait "$kit_tests" 2>/dev/null; cat build/kit/kit-tests.log' EXIT
TORCH_EMU_LAUNCH_QUEUED=1 python -m torch_emu conformance --json build/kit/emu-queued.json
timing_tiers=(device memory streams generator operators autograd amp serialization data_loading api_surface profiler
  graphs ipc)
TORCH_EMU_LAUNCH_QUEUED=0 python -m torch_emu conformance --json build/kit/emu-auto.json --tier "${timing_tiers[@]}"
TORCH_EMU_LAUNCH_BLOCKING=1 python -m torch_emu conformance --json build/kit/emu-blocking.json \
  --tier "${timing_tiers[@]}"
TORCH_EMU_NATIVE_KERNELS=0 python -m torch_emu conformance --json build/kit/emu-fallback.json
# The runtime in Python: every tier but those of native-only features (the profiler's device
# track, graphs and IPC are the native runtime's).
TORCH_EMU_RUNTIME=python python -m torch_emu conformance --json build/kit/emu-python-runtime.json --tier \
  device memory streams generator operators parity module_parity optim_parity autograd amp serialization \
  data_loading api_surface compile distributed
wait "$kit_tests"
