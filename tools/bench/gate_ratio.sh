#!/usr/bin/env bash
# The side-by-side gate against the model-only gate with the same work, as a ratio in one run.
#
# Issue 12's target: `kvtwin check --backend both` no slower than 1.5 times `kvtwin check
# --backend model`. Machines differ by more than builds do (docs/gpu.md), so the two gates are
# alternated on one machine for --rounds rounds and every ratio is taken within its round. Each
# run's wall time, exit status and digest are printed; then each round's ratio, and the lowest,
# median and highest. `--also LABEL=PATH` adds another kvtwin binary's side-by-side gate to every
# round (a previous build, a branch), so two builds are compared in the same rounds too;
# `--also-env LABEL='VAR=VALUE ...'` adds this build's side-by-side gate with those environment
# assignments (a switch such as KVTWIN_GATE_NICE=0), and `--model-also-env LABEL='VAR=VALUE ...'`
# this build's model-only gate with them (a switch that acts on both gates moves the ratio only
# by what it does to each: compare both). A run
# that fails stops the script, and one whose digest differs from its binary's first run makes it
# exit 1: a ratio of runs that did not do the same work means nothing. It is a benchmark, not a test:
# nothing in the test suite waits on the clock.
#
#   tools/bench/gate_ratio.sh                                      # build/default's kvtwin, 3 rounds
#   tools/bench/gate_ratio.sh --rounds 5 --also before=/tmp/kvtwin-main --traces-dir ../shared/traces-external
#   tools/bench/gate_ratio.sh --backend model                      # no device: the model-only gate's spread
#   tools/bench/gate_ratio.sh --also-env nice0='KVTWIN_GATE_NICE=0' --model-also-env mnice0='KVTWIN_GATE_NICE=0'
#
# Each run's output goes to OUT/LABEL-ROUND.log (OUT: --out, default kvtwin-out/gate-ratio).
# Needs bash and awk only (the device machines have no python or bc guaranteed).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
kvtwin="$root/build/default/tools/kvtwin"
rounds=3
traces_dir=""
out="kvtwin-out/gate-ratio"
side_backend="both"
also_labels=()
also_paths=()
also_envs=()      # per --also*: the environment assignments ("" for none)
also_backends=()  # per --also*: "side" (the side-by-side backend) or "model"
extra=()

# Checks and records an --also* label (letters, digits, '.', '_' or '-', not model or side, not given twice).
add_label() {
  [[ "$1" =~ ^[A-Za-z0-9_.-]+$ && "$1" != model && "$1" != side ]] ||
    { echo "gate_ratio.sh: error: an --also label is letters, digits, '.', '_' or '-', not model or side; got '$1'" >&2; exit 2; }
  [[ " ${also_labels[*]} " != *" $1 "* ]] ||
    { echo "gate_ratio.sh: error: --also label '$1' given twice" >&2; exit 2; }
  also_labels+=("$1")
}
# Checks environment assignments: VAR=VALUE words, none with a space in its value.
check_env() {
  local word
  for word in $1; do
    [[ "$word" =~ ^[A-Za-z_][A-Za-z0-9_]*= ]] ||
      { echo "gate_ratio.sh: error: '$word' in '$1' is not an environment assignment VAR=VALUE" >&2; exit 2; }
  done
  [[ -n "$1" ]] || { echo "gate_ratio.sh: error: an --also-env needs at least one VAR=VALUE" >&2; exit 2; }
}

usage() {
  sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
  echo "Options: --kvtwin PATH  --rounds N  --traces-dir DIR  --out DIR  --also LABEL=PATH  --backend both|model"
  echo "         --also-env LABEL='VAR=VALUE ...'  --model-also-env LABEL='VAR=VALUE ...'"
  echo "         -- ARGS...   (passed to every kvtwin check)"
}

while [[ $# -gt 0 ]]; do
  case "$1" in
    --kvtwin) kvtwin="$2"; shift 2 ;;
    --rounds) rounds="$2"; shift 2 ;;
    --traces-dir) traces_dir="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --backend) side_backend="$2"; shift 2 ;;
    --also|--also-env|--model-also-env)
      [[ "${2:-}" == *=* ]] || { echo "gate_ratio.sh: error: $1 takes LABEL=..., got '${2:-}'" >&2; exit 2; }
      add_label "${2%%=*}"
      if [[ "$1" == --also ]]; then
        also_paths+=("${2#*=}"); also_envs+=(""); also_backends+=(side)
      else
        check_env "${2#*=}"
        also_paths+=(""); also_envs+=("${2#*=}")
        if [[ "$1" == --also-env ]]; then also_backends+=(side); else also_backends+=(model); fi
      fi
      shift 2 ;;
    -h|--help) usage; exit 0 ;;
    --) shift; extra=("$@"); break ;;
    *) echo "gate_ratio.sh: error: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[[ "$rounds" =~ ^[1-9][0-9]*$ ]] || { echo "gate_ratio.sh: error: --rounds takes a positive whole number, got '$rounds'" >&2; exit 2; }
[[ "$side_backend" == both || "$side_backend" == model ]] ||
  { echo "gate_ratio.sh: error: --backend is both or model, got '$side_backend'" >&2; exit 2; }
for i in "${!also_paths[@]}"; do [[ -n "${also_paths[$i]}" ]] || also_paths[$i]=$kvtwin; done
for bin in "$kvtwin" "${also_paths[@]}"; do
  [[ -x "$bin" ]] || { echo "gate_ratio.sh: error: no kvtwin binary at '$bin' (build it, or give --kvtwin)" >&2; exit 2; }
done
mkdir -p "$out"
common=(check --quiet)
[[ -n "$traces_dir" ]] && common+=(--traces-dir "$traces_dir")
common+=("${extra[@]}")

# The runs of one round, in this order: the model-only gate, this build side by side, then each --also.
labels=(model side)
bins=("$kvtwin" "$kvtwin")
backends=(model "$side_backend")
envs=("" "")
for i in "${!also_labels[@]}"; do
  labels+=("${also_labels[$i]}"); bins+=("${also_paths[$i]}"); envs+=("${also_envs[$i]}")
  if [[ "${also_backends[$i]}" == model ]]; then backends+=(model); else backends+=("$side_backend"); fi
done

declare -A first_digest wall
failed=0
echo "gate_ratio: rounds $rounds, each of: ${labels[*]} (side by side: --backend $side_backend)"
for ((r = 1; r <= rounds; ++r)); do
  for i in "${!labels[@]}"; do
    label=${labels[$i]}
    log="$out/$label-$r.log"
    t0=$(date +%s.%N)
    rc=0
    # shellcheck disable=SC2086  # the assignments are words (check_env)
    env ${envs[$i]} "${bins[$i]}" "${common[@]}" --backend "${backends[$i]}" >"$log" 2>&1 || rc=$?
    t1=$(date +%s.%N)
    seconds=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }')
    digest=$(grep -o 'digest [0-9a-f]*' "$log" | head -1 | cut -d' ' -f2 || true)
    wall[$label,$r]=$seconds
    note=""
    key="${bins[$i]}|${backends[$i]}|${envs[$i]}"
    if [[ $rc -ne 0 ]]; then
      note="  FAILED (exit $rc; see $log)"
    elif [[ -z "$digest" ]]; then
      note="  no digest in $log"; failed=1
    elif [[ -z "${first_digest[$key]:-}" ]]; then
      first_digest[$key]=$digest
    elif [[ "${first_digest[$key]}" != "$digest" ]]; then
      note="  DIGEST DIFFERS from this binary's first run (${first_digest[$key]})"; failed=1
    fi
    printf "round %d  %-12s %7s s  digest %s%s\n" "$r" "$label" "$seconds" "${digest:-none}" "$note"
    if [[ $rc -ne 0 ]]; then
      tail -2 "$log" | sed 's/^/  | /' >&2
      echo "gate_ratio: stopped: a run failed" >&2
      exit 1
    fi
  done
done

echo
echo "ratio to the model-only gate of the same round:"
for label in "${labels[@]:1}"; do
  ratios=()
  for ((r = 1; r <= rounds; ++r)); do
    ratios+=("$(awk -v s="${wall[$label,$r]}" -v m="${wall[model,$r]}" 'BEGIN { printf "%.3f", s / m }')")
  done
  summary=$(printf "%s\n" "${ratios[@]}" | sort -n | awk '{ v[NR] = $1 } END {
    med = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
    printf "lowest %.2f  median %.2f  highest %.2f", v[1], med, v[NR] }')
  printf "  %-12s %s   (%s)\n" "$label" "$summary" "${ratios[*]}"
done
if [[ $failed -ne 0 ]]; then
  echo "gate_ratio: a run left no digest or changed it: the ratios above compare different work" >&2
  exit 1
fi
