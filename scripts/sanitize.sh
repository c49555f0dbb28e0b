#!/usr/bin/env bash
# The runtime is multi-threaded C++ (stream workers, events, the allocator's
# locks) and faults drive its error paths: this builds it with its native test
# programs (tests/native) under AddressSanitizer + UndefinedBehaviorSanitizer
# and under ThreadSanitizer, and runs them. Any report fails the run.
#
#   bash scripts/sanitize.sh            # asan+ubsan, then tsan
#   bash scripts/sanitize.sh tsan       # one of them (CI runs tsan)
#
# Not run under the sanitizers: the strict-mode program (its SIGSEGV handler is
# what AddressSanitizer also installs) and, under ThreadSanitizer, the fork
# checks of test_runtime (TSan does not support a child that starts threads
# after a multi-threaded fork; the child here only checks that every call
# fails, which the ASan run covers).
set -euo pipefail
cd "$(dirname "$0")/.."
out="${SANITIZE_DIR:-build/sanitize}"
flavours=("${@:-asan tsan}")
read -r -a flavours <<< "${flavours[*]}"

declare -A FLAGS=(
  [asan]="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
  [tsan]="-fsanitize=thread"
)
PROGRAMS=(test_runtime test_runtime_stats test_graphs test_faults)

for flavour in "${flavours[@]}"; do
  flags="${FLAGS[$flavour]:?unknown sanitizer $flavour (asan or tsan)}"
  dir="$out/$flavour"
  mkdir -p "$dir"
  echo "== $flavour: building the runtime and ${PROGRAMS[*]}"
  # shellcheck disable=SC2086
  printf '%s\n' csrc/runtime/*.cpp | xargs -P "$(nproc)" -I{} sh -c \
    'g++ -std=c++17 -O1 -g '"$flags"' -pthread -Icsrc -c "{}" -o "'"$dir"'/$(basename "{}" .cpp).o"'
  for program in "${PROGRAMS[@]}"; do
    # shellcheck disable=SC2086
    g++ -std=c++17 -O1 -g $flags -pthread -Icsrc "$dir"/*.o "tests/native/$program.cpp" -o "$dir/$program"
  done
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
