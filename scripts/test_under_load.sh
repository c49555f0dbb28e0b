#!/usr/bin/env bash
# Runs the suite while every core is kept busy by CPU hogs this script starts and stops: a test
# that passes only when the scheduler happens to run the stream worker first fails here.
#
#   bash scripts/test_under_load.sh [--runs N] [--modes "adaptive queued auto blocking"] [pytest arguments]
#
# Each run of each launch mode prints its result line and its time (logs in build/); the exit
# status is 1 if any run failed. CI runs the launch-mode tests once under load: --modes adaptive (the default).
set -euo pipefail
cd "$(dirname "$0")/.."
runs=1
modes="adaptive queued auto blocking"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --runs) runs="$2"; shift 2 ;;
    --modes) modes="$2"; shift 2 ;;
    *) break ;;
  esac
done
[[ "$runs" =~ ^[1-9][0-9]*$ ]] || { echo "--runs must be a positive integer, not '$runs'" >&2; exit 2; }
for mode in $modes; do
  case "$mode" in adaptive|queued|auto|blocking) ;; *) echo "unknown launch mode '$mode' (adaptive, queued, auto, blocking)" >&2; exit 2 ;; esac
done
bash scripts/setup.sh --no-demo
mkdir -p build

hogs=()
stop_hogs() { [[ ${#hogs[@]} -eq 0 ]] || kill "${hogs[@]}" 2>/dev/null || true; }
trap stop_hogs EXIT
for _ in $(seq "$(nproc)"); do
  (while :; do :; done) &
  hogs+=("$!")
done
echo "load: ${#hogs[@]} busy processes on $(nproc) cores"

status=0
for mode in $modes; do
  case "$mode" in
    adaptive) vars=() ;;
    queued) vars=(TORCH_EMU_LAUNCH_QUEUED=1) ;;
    auto) vars=(TORCH_EMU_LAUNCH_QUEUED=0) ;;
    blocking) vars=(TORCH_EMU_LAUNCH_BLOCKING=1) ;;
  esac
  for run in $(seq "$runs"); do
    start=$SECONDS
    if env "${vars[@]}" .venv/bin/python -m pytest -q "$@" > "build/under_load_${mode}_${run}.log" 2>&1; then
      result=passed
    else
      result=FAILED; status=1
    fi
    echo "under load, $mode, run $run: $result in $((SECONDS - start)) s: $(tail -n 1 "build/under_load_${mode}_${run}.log")"
    [[ $result == passed ]] || grep -a "^FAILED\|^ERROR" "build/under_load_${mode}_${run}.log" || true
  done
done
exit "$status"
