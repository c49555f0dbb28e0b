#!/usr/bin/env bash
# Runs the suite while every core is kept busy: a test that passes only when the scheduler
# happens to run the stream worker first fails here.
#
#   bash scripts/test_under_load.sh [--runs N] [--modes "adaptive queued auto blocking"] [--side-by-side]
#                                   [pytest arguments]
#
# One after another (the default), each launch mode's run competes with CPU hogs this script starts
# and stops, one per core. With --side-by-side the modes' runs start together, one pytest process
# each, and are each other's load: hogs fill up to two busy processes per core (none for the four
# modes on two cores). Each run prints its result line and its time (logs in build/); the exit
# status is 1 if any run failed. CI runs the launch-mode tests of the four modes side by side.
set -euo pipefail
cd "$(dirname "$0")/.."
runs=1
modes="adaptive queued auto blocking"
side_by_side=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --runs) runs="$2"; shift 2 ;;
    --modes) modes="$2"; shift 2 ;;
    --side-by-side) side_by_side=1; shift ;;
    *) break ;;
  esac
done
[[ "$runs" =~ ^[1-9][0-9]*$ ]] || { echo "--runs must be a positive integer, not '$runs'" >&2; exit 2; }
read -r -a modes <<< "$modes"
for mode in "${modes[@]}"; do
  case "$mode" in adaptive|queued|auto|blocking) ;; *) echo "unknown launch mode '$mode' (adaptive, queued, auto, blocking)" >&2; exit 2 ;; esac
done
bash scripts/setup.sh --no-demo
mkdir -p build

hogs=()
stop_hogs() { [[ ${#hogs[@]} -eq 0 ]] || kill "${hogs[@]}" 2>/dev/null || true; }
trap stop_hogs EXIT
n_hogs=$(nproc)
if ((side_by_side)); then n_hogs=$((2 * $(nproc) - ${#modes[@]})); fi
for ((i = 0; i < n_hogs; i++)); do
  (while :; do :; done) &
  hogs+=("$!")
done
echo "load: ${#hogs[@]} busy processes on $(nproc) cores$( ((side_by_side)) && echo ", ${#modes[@]} launch modes side by side")"

# One run of one mode, its log in build/; prints its result line and returns its status.
run_mode() {
  local mode="$1" run="$2" start=$SECONDS vars=() log="build/under_load_${mode}_${run}.log" result=passed
  case "$mode" in
    queued) vars=(TORCH_EMU_LAUNCH_QUEUED=1) ;;
    auto) vars=(TORCH_EMU_LAUNCH_QUEUED=0) ;;
    blocking) vars=(TORCH_EMU_LAUNCH_BLOCKING=1) ;;
  esac
  shift 2
  env "${vars[@]}" .venv/bin/python -m pytest -q "$@" > "$log" 2>&1 || result=FAILED
  echo "under load, $mode, run $run: $result in $((SECONDS - start)) s: $(tail -n 1 "$log")"
  [[ $result == passed ]] || { grep -a "^FAILED\|^ERROR" "$log" || true; return 1; }
}

status=0
for run in $(seq "$runs"); do
  if ((side_by_side)); then
    pids=()
    for mode in "${modes[@]}"; do
      run_mode "$mode" "$run" "$@" &
      pids+=("$!")
    done
    for pid in "${pids[@]}"; do wait "$pid" || status=1; done
  else
    for mode in "${modes[@]}"; do run_mode "$mode" "$run" "$@" || status=1; done
  fi
done
exit "$status"
