#!/usr/bin/env bash
# A fresh .venv with torch @TORCH_VERSION@ and torch-emu-kit (the conformance suite), then builds
# the tpldev extension in place (pip install -e: the torch.backends entry point makes `import torch`
# load tpldev).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
rm -rf .venv
"$PYTHON" -m venv .venv
# expecttest: the conformance suite's parity tier imports PyTorch's OpInfo database, which needs it.
.venv/bin/pip install --quiet "torch==@TORCH_VERSION@" ninja setuptools wheel pytest numpy expecttest
# The kit that generated this backend, from where it was installed (TORCH_EMU_KIT: another one).
.venv/bin/pip install --quiet --no-build-isolation "${TORCH_EMU_KIT:-@KIT_REQUIREMENT@}"
# ccache, when installed, makes rebuilds after a clean nearly free.
if [ -d /usr/lib/ccache ]; then export PATH="/usr/lib/ccache:$PATH"; fi
MAX_JOBS="${MAX_JOBS:-$(nproc)}" .venv/bin/pip install --quiet --no-build-isolation -e .
.venv/bin/python -c "import torch; print('tpldev devices:', torch.tpldev.device_count())"
