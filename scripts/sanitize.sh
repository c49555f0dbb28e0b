#!/usr/bin/env bash
# The runtime is multi-threaded C++ (stream workers, events, the allocator's
# locks) and faults drive its error paths: this builds it with its native test
# programs (tests/native) under AddressSanitizer + UndefinedBehaviorSanitizer
# and under ThreadSanitizer, and runs them. Any report fails the run. The
# runtime's one recipe builds them (scripts/build_runtime.py, flavours asan and
# tsan, in build/runtime/<flavour>/, incrementally).
#
#   bash scripts/sanitize.sh            # asan+ubsan, then tsan
#   bash scripts/sanitize.sh tsan       # one of them (CI runs both)
#   bash scripts/sanitize.sh python     # the extension under asan+ubsan, with a
#                                       # subset of the Python suite (a long build)
#
# Not run under the sanitizers: the strict-mode program (its SIGSEGV handler is
# what AddressSanitizer also installs).
set -euo pipefail
cd "$(dirname "$0")/.."
out="${SANITIZE_DIR:-build/sanitize}"
# Any Python 3 runs the runtime's build script (it needs no package); the
# project's by default.
if [[ -z ${PYTHON:-} ]]; then
  if [[ -x .venv/bin/python ]]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi
flavours=("${@:-asan tsan}")
read -r -a flavours <<< "${flavours[*]}"

PROGRAMS=(test_runtime test_runtime_stats test_graphs test_faults test_plugin)
# The Python tests run against the sanitized extension: the device, memory,
# streams, asynchronous kernels, native kernels and faults.
PY_TESTS=(tests/test_faults.py tests/test_streams_events.py tests/test_memory.py tests/test_async_kernels.py
          tests/test_native_kernels.py tests/test_storage.py)
ROOT="$PWD"

# torch_emu._C built with TORCH_EMU_SANITIZE=address (setup.py) into a copy of
# the package, then the tests from inside that copy, with the sanitizers'
# runtimes preloaded into the (uninstrumented) Python. Leak detection is off:
# Python and PyTorch keep memory until exit on purpose.
run_python_subset() {
  local dir="$out/python" lib="$out/python/lib"
  mkdir -p "$lib"
  tar --exclude='*.so' --exclude=__pycache__ -cf - torch_emu | tar -xf - -C "$lib"
  echo "== python: building torch_emu._C under asan+ubsan (log: $dir/build.log)"
  if ! TORCH_EMU_SANITIZE=address .venv/bin/python setup.py build_ext --build-lib "$lib" > "$dir/build.log" 2>&1; then
    tail -30 "$dir/build.log"
    return 1
  fi
  echo "== python: ${PY_TESTS[*]}"
  (cd "$lib" &&
    LD_PRELOAD="$(g++ -print-file-name=libasan.so) $(g++ -print-file-name=libubsan.so)" \
    ASAN_OPTIONS="detect_leaks=0:exitcode=23" UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:exitcode=24" \
    "$ROOT/.venv/bin/python" -m pytest -q -p no:cacheprovider -x "${PY_TESTS[@]/#/$ROOT/}")
}

for flavour in "${flavours[@]}"; do
  if [[ $flavour == python ]]; then
    run_python_subset
    continue
  fi
  if [[ $flavour != asan && $flavour != tsan ]]; then
    echo "unknown sanitizer $flavour (asan, tsan or python)" >&2
    exit 2
  fi
  echo "== $flavour: building the runtime and ${PROGRAMS[*]}"
  "$PYTHON" scripts/build_runtime.py "$flavour" --programs "${PROGRAMS[@]}"
  dir="build/runtime/$flavour/bin"
  export ASAN_OPTIONS="detect_leaks=1:abort_on_error=0:exitcode=23"
  export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:exitcode=24"
  export TSAN_OPTIONS="halt_on_error=1:exitcode=25:second_deadlock_stack=1"
  for program in "${PROGRAMS[@]}"; do
    args=()
    env=(env -u TORCH_EMU_PROFILE -u TORCH_EMU_FAULTS)
    [[ $program == test_faults ]] && env+=(TORCH_EMU_PROFILE="h2d=1GB/s,launch=2ms")
    echo "== $flavour: $program"
    "${env[@]}" timeout 600 "$dir/$program" "${args[@]}"
  done
done
echo "sanitizers: clean (${flavours[*]})"
