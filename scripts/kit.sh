#!/usr/bin/env bash
# The vendor kit in CI (after scripts/test.sh): the conformance suite on emu in the other kernel
# launch modes (queued, auto, blocking), with only the minimal operators native and on the runtime
# in Python, each with a JSON report in build/kit/, then the `kit` tests, which build a
# generated backend and run its conformance tiers and the tutorial's commands (`torch-emu-kit
# tutorial`; the generated backend's setup.sh installs torch-emu-kit from kit/ into a fresh
# environment without torch-emu, as a vendor's). They take minutes, so the default test command
# leaves them out (pyproject.toml: -m "not kit"); here they run side by side, one per core (most of
# their time is single-threaded Python).
# Every tier runs in the default mode (the tutorial's last command, in the `kit` tests: not run twice)
# and fully queued, the mode where an ordering bug shows most;
# auto and blocking run the tiers whose checks depend on when kernels run, not the parity sweeps,
# compile and distributed (a minute and a half each run, their kernels the same in every mode).
set -euo pipefail
cd "$(dirname "$0")/.."
. .venv/bin/activate
mkdir -p build/kit
TORCH_EMU_LAUNCH_QUEUED=1 python -m torch_emu conformance --jobs 2 --json build/kit/emu-queued.json
timing_tiers=(device memory streams generator operators autograd amp serialization data_loading api_surface profiler
  graphs ipc)
TORCH_EMU_LAUNCH_QUEUED=0 python -m torch_emu conformance --jobs 2 --json build/kit/emu-auto.json --tier "${timing_tiers[@]}"
TORCH_EMU_LAUNCH_BLOCKING=1 python -m torch_emu conformance --jobs 2 --json build/kit/emu-blocking.json \
  --tier "${timing_tiers[@]}"
TORCH_EMU_NATIVE_KERNELS=0 python -m torch_emu conformance --jobs 2 --json build/kit/emu-fallback.json
# The runtime in Python: every tier but those of native-only features (the profiler's device
# track, graphs and IPC are the native runtime's).
TORCH_EMU_RUNTIME=python python -m torch_emu conformance --jobs 2 --json build/kit/emu-python-runtime.json --tier \
  device memory streams generator operators parity module_parity optim_parity autograd amp serialization \
  data_loading api_surface compile distributed
python -m pytest -m kit -n 2 --dist load "$@"
