#!/usr/bin/env bash
# The suites that must pass with the runtime in Python (TORCH_EMU_RUNTIME=python, the reference
# runtime of torch_emu/runtime/): device, memory, streams and events, RNG, operators, autograd and
# training, AMP, serialization, and their neighbours. CI runs it after the launch-mode stages;
# tests of native-only features (tests/conftest.py: native_runtime_only) skip themselves.
set -euo pipefail
cd "$(dirname "$0")/.."
SUITES=(
  tests/test_python_runtime.py
  tests/test_frontend.py tests/test_autoload_fork.py tests/test_device_api_parity.py tests/test_cuda_parity.py
  tests/test_memory.py tests/test_memory_parity.py tests/test_memory_history.py tests/test_mempool.py
  tests/test_streams_events.py tests/test_async_kernels.py tests/test_sync_debug.py
  tests/test_generator.py
  tests/test_ops.py tests/test_native_kernels.py tests/test_opinfo.py tests/test_registration.py
  tests/test_named_tensors.py tests/test_sparse.py tests/test_quantization.py
  tests/test_training.py tests/test_module_conversion.py tests/test_module_parity.py
  tests/test_optim_parity.py tests/test_recurrent.py tests/test_attention.py
  tests/test_amp.py tests/test_serialization.py tests/test_storage.py tests/test_hooks.py
  tests/test_pinned_dataloader.py tests/test_tools.py
)
TORCH_EMU_RUNTIME=python bash scripts/test.sh "${SUITES[@]}" "$@"
