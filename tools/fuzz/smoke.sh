#!/usr/bin/env bash
# The fuzz smoke CI runs (quickstart ci): every fuzz target of a build made with a fuzzing engine
# (the asan preset, or tools/fuzz/build.sh) for a bounded time on a fresh copy of its seeds.
# A crash, a leak, a timeout, an out-of-memory or a contract finding (fuzz_support.h) fails it;
# the input that did it is kept in OUT/TARGET/ and printed, to be fixed and added to
# tools/fuzz/regressions/TARGET/. A table of executions per target ends the run.
#
#   tools/fuzz/smoke.sh BUILD_DIR [SECONDS_PER_TARGET] [OUT]
#   tools/fuzz/smoke.sh build/asan 30
#   KVTWIN_FUZZ_TARGETS="pool_trace spec" tools/fuzz/smoke.sh build/asan 600 build/fuzz-long-1   # some targets
set -euo pipefail
src="$(cd "$(dirname "$0")/../.." && pwd)"
# shellcheck source=tools/fuzz/seeds.sh
source "$src/tools/fuzz/seeds.sh"
build="${1:?usage: smoke.sh BUILD_DIR [SECONDS] [OUT]}"
seconds="${2:-30}"
out="${3:-$src/build/fuzz-smoke}"
rm -rf "$out"
mkdir -p "$out"
status=0
summary=""
read -r -a targets <<<"${KVTWIN_FUZZ_TARGETS:-${kvtwin_fuzz_targets[*]}}"
for t in "${targets[@]}"; do
  bin="$build/tools/fuzz/kvtwin_fuzz_$t"
  [ -x "$bin" ] || bin="$build/kvtwin_fuzz_$t"
  if [ ! -x "$bin" ]; then
    echo "smoke: $bin not found (build with a fuzzing engine: the asan preset or tools/fuzz/build.sh)" >&2
    exit 2
  fi
  corpus="$out/$t/corpus"
  kvtwin_fuzz_copy_seeds "$t" "$src" "$corpus"
  log="$out/$t/fuzz.log"
  if "$bin" -max_total_time="$seconds" -dict="$src/tools/fuzz/kvtwin.dict" -timeout=20 -rss_limit_mb=2048 \
      -max_len=65536 -print_final_stats=1 -artifact_prefix="$out/$t/" "$corpus" >"$log" 2>&1; then
    result=ok
  else
    result=FAILED
    status=1
    tail -40 "$log" >&2
    ls "$out/$t/" | grep -E '^(crash|leak|timeout|oom|slow-unit)-' | sed "s|^|smoke: $t: kept $out/$t/|" >&2 || true
  fi
  execs=$(grep -Eo 'stat::number_of_executed_units: *[0-9]+' "$log" | grep -Eo '[0-9]+$' || echo "?")
  summary+=$(printf '%-12s %10s executions in %ss  %s' "$t" "$execs" "$seconds" "$result")$'\n'
done
printf 'fuzz smoke:\n%s' "$summary"
exit "$status"
