#!/usr/bin/env bash
# run_local_shards.sh: runs the campaign examples of docs/campaigns.md on this machine, the way
# each engine would run them, merges the shards, and checks that the merged reports equal the
# unsharded run's. A ctest test runs it, so the page cannot drift from what works.
#
#   tools/campaigns/run_local_shards.sh KVTWIN_BINARY [DOCS_PAGE]
#
# The commands come from the page itself: every code block marked `<!-- campaign: ENGINE FILE -->`
# is written to ENGINE/FILE, and each engine is emulated by what it promises its jobs:
#   github      each value of the matrix's `shard:` list is a job that runs the steps named
#               `check shard` and `fuzz shard` (bash -e, `${{ matrix.shard }}` and
#               `${{ strategy.job-total }}` filled in) in a folder of its own; the jobs' files are
#               their artifacts, downloaded together into reports/ of the merging job, which runs
#               the steps `merge check` and `merge fuzz`;
#   kubernetes  each index below the shard Job's `completions` is a pod that runs the Job's script
#               (`args`) with JOB_COMPLETION_INDEX, REPORTS being one shared folder; then the merge
#               Job's script runs;
#   slurm       submit.sh runs with an `sbatch` that runs every task of a script's `--array` at
#               once (SLURM_ARRAY_TASK_ID, SLURM_ARRAY_TASK_COUNT) and waits for them.
# The campaign is small (KVTWIN_CHECK and KVTWIN_FUZZ below), so the whole run takes seconds. The
# unsharded run is the reference; reports are compared as written, without their durations.
#
# Exit 0 when every example's merged reports equal the unsharded run's; 1 otherwise (the work
# folder is kept and named).
set -euo pipefail

if [ $# -lt 1 ] || [ $# -gt 2 ]; then
  echo "usage: $0 KVTWIN_BINARY [DOCS_PAGE]" >&2
  exit 2
fi
binary=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
docs=${2:-$(dirname "$0")/../../docs/campaigns.md}
[ -x "$binary" ] || { echo "$0: $binary is not an executable" >&2; exit 2; }
[ -f "$docs" ] || { echo "$0: $docs not found" >&2; exit 2; }
docs=$(cd "$(dirname "$docs")" && pwd)/$(basename "$docs")

work=$(mktemp -d "${TMPDIR:-/tmp}/kvtwin-campaigns.XXXXXX")
failures=0
fail() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
}
finish() {
  if [ "$failures" -eq 0 ]; then
    rm -rf "$work"
    echo "run_local_shards: every example's merged reports equal the unsharded run's"
  else
    echo "run_local_shards: $failures failure(s); the work folder is kept: $work" >&2
    exit 1
  fi
}
trap finish EXIT

mkdir -p "$work/bin" "$work/empty"
ln -s "$binary" "$work/bin/kvtwin"
export PATH="$work/bin:$PATH"
# The campaign every example runs, small. No request traces (their folders are empty here): the
# properties and the regression traces are enough to compare, and take seconds.
export KVTWIN_CHECK="--seed 5 --cases 1 --random-cases 2 --ops 20 --jobs 1 --samples-dir $work/empty --traces-dir $work/empty"
export KVTWIN_FUZZ="--seed 5 --cases 24 --ops 30"

# Every marked code block of the page, written to $work/ENGINE/FILE.
marker='^<!-- campaign: ([a-z]+) ([^ ]+) -->$'
target=""
inside=0
while IFS= read -r line || [ -n "$line" ]; do
  if [[ $line =~ $marker ]]; then
    target="$work/${BASH_REMATCH[1]}/${BASH_REMATCH[2]}"
    mkdir -p "$(dirname "$target")"
    : >"$target"
  elif [ -n "$target" ] && [ "$inside" -eq 0 ] && [[ $line == '```'* ]]; then
    inside=1
  elif [ "$inside" -eq 1 ] && [[ $line == '```' ]]; then
    inside=0
    target=""
  elif [ "$inside" -eq 1 ]; then
    printf '%s\n' "$line" >>"$target"
  fi
done <"$docs"

# yaml_block FILE START [AFTER]: the lines indented below the first line matching START (after
# the first line matching AFTER): a `run: |` step's script, or a container's `- |` argument.
yaml_block() {
  awk -v start="$2" -v after="${3:-}" '
    function indent(s) { match(s, /^ */); return RLENGTH }
    !armed && (after == "" || $0 ~ after) { armed = 1; if (after != "") next }
    armed && !inside && $0 ~ start { inside = 1; base = indent($0); next }
    inside { if ($0 !~ /^[ \t]*$/ && indent($0) <= base) exit; print }
  ' "$1"
}

need() {
  [ -s "$1" ] || { fail "$2"; exit 1; }
}

# The unsharded run: the reference.
mkdir -p "$work/whole"
(cd "$work/whole" && kvtwin check $KVTWIN_CHECK --quiet --json check.json >check.out 2>&1) ||
  fail "the unsharded kvtwin check did not pass: $(tail -3 "$work/whole/check.out")"
(cd "$work/whole" && kvtwin fuzz $KVTWIN_FUZZ --quiet --json fuzz.json >fuzz.out 2>&1) ||
  fail "the unsharded kvtwin fuzz did not pass: $(tail -3 "$work/whole/fuzz.out")"
need "$work/whole/check.json" "the unsharded run wrote no check report"
need "$work/whole/fuzz.json" "the unsharded run wrote no fuzz report"

# same_as_whole ENGINE FOLDER COUNT: FOLDER's merged check.json and fuzz.json equal the unsharded
# run's (durations aside), and were merged from COUNT shards.
same_as_whole() {
  local engine=$1 folder=$2 count=$3 kind before=$failures
  [ "$count" -ge 2 ] || fail "$engine: the example runs $count shard(s); a campaign has at least 2"
  for kind in check fuzz; do
    if [ ! -s "$folder/$kind.json" ]; then
      fail "$engine: the merge wrote no $kind.json in $folder"
      continue
    fi
    if ! diff <(grep -v '^ *"seconds": ' "$work/whole/$kind.json") <(grep -v '^ *"seconds": ' "$folder/$kind.json") \
      >"$work/$engine-$kind.diff"; then
      fail "$engine: the merged $kind report differs from the unsharded run's: $work/$engine-$kind.diff"
    fi
    [ -s "$folder/$kind.xml" ] || fail "$engine: the merge wrote no $kind.xml"
  done
  grep -q "merging $count shard reports" "$work/$engine.merge.out" ||
    fail "$engine: the merge did not read $count shard reports: $(head -3 "$work/$engine.merge.out")"
  if [ "$failures" -eq "$before" ]; then
    echo "$engine: $count shards merged; check and fuzz reports equal the unsharded run's"
  fi
}

# GitHub Actions.
workflow="$work/github/.github/workflows/kvtwin-campaign.yml"
need "$workflow" "docs: no GitHub Actions workflow marked"
shards=$(sed -n 's/^ *shard: \[\(.*\)\]$/\1/p' "$workflow" | tr -d ' ' | tr ',' ' ')
count=$(wc -w <<<"$shards")
gh_step() {  # gh_step NAME SHARD: the step's script, its expressions filled in
  local script
  script=$(yaml_block "$workflow" '^ *run: [|]$' "^ *- name: $1\$" |
    sed -e "s/\${{ matrix\.shard }}/$2/g" -e "s/\${{ strategy\.job-total }}/$count/g")
  [ -n "$script" ] || { echo "exit 97  # no step named '$1'"; return; }
  if grep -q '\${{' <<<"$script"; then echo "exit 98  # an expression the test does not fill in: $script"; return; fi
  printf '%s\n' "$script"
}
pids=()
for s in $shards; do
  mkdir -p "$work/github/job-$s"
  (
    cd "$work/github/job-$s"
    status=0
    bash -e -c "$(gh_step 'check shard' "$s")" >"../job-$s.check.log" 2>&1 || status=$?
    bash -e -c "$(gh_step 'fuzz shard' "$s")" >"../job-$s.fuzz.log" 2>&1 || status=$?
    exit $status
  ) &
  pids+=($!)
done
for pid in "${pids[@]}"; do wait "$pid" || fail "github: a shard job failed (status $?)"; done
mkdir -p "$work/github/merge/reports"
for s in $shards; do cp -R "$work/github/job-$s/." "$work/github/merge/reports/"; done
(
  cd "$work/github/merge"
  bash -e -c "$(gh_step 'merge check' 0)"
  bash -e -c "$(gh_step 'merge fuzz' 0)"
) >"$work/github.merge.out" 2>&1 || fail "github: the merge job failed: $(tail -3 "$work/github.merge.out")"
same_as_whole github "$work/github/merge" "$count"

# Kubernetes: an Indexed Job, then the merge Job, on one shared volume.
shard_job="$work/kubernetes/kvtwin-shards.yaml"
merge_job="$work/kubernetes/kvtwin-merge.yaml"
need "$shard_job" "docs: no Kubernetes shard Job marked"
need "$merge_job" "docs: no Kubernetes merge Job marked"
count=$(sed -n 's/^ *completions: \([0-9]*\)$/\1/p' "$shard_job")
script=$(yaml_block "$shard_job" '^ *- [|]$' '^ *args:$')
[ -n "$script" ] || fail "kubernetes: the shard Job has no script"
export REPORTS="$work/kubernetes/volume"
mkdir -p "$REPORTS"
pids=()
for ((i = 0; i < count; i++)); do
  mkdir -p "$work/kubernetes/pod-$i"
  (cd "$work/kubernetes/pod-$i" && JOB_COMPLETION_INDEX=$i bash -c "$script" >pod.log 2>&1) &
  pids+=($!)
done
for pid in "${pids[@]}"; do wait "$pid" || fail "kubernetes: a shard pod failed (status $?)"; done
script=$(yaml_block "$merge_job" '^ *- [|]$' '^ *args:$')
(mkdir -p "$work/kubernetes/merge-pod" && cd "$work/kubernetes/merge-pod" && bash -c "$script") \
  >"$work/kubernetes.merge.out" 2>&1 || fail "kubernetes: the merge Job failed: $(tail -3 "$work/kubernetes.merge.out")"
same_as_whole kubernetes "$REPORTS" "$count"
unset REPORTS

# Slurm: submit.sh, with an sbatch that runs the array's tasks here.
need "$work/slurm/submit.sh" "docs: no Slurm submission marked"
sbatch() {
  local parsable=0 script="" a range lo hi i pid pids=()
  for a in "$@"; do
    case $a in
      --parsable) parsable=1 ;;
      --*) ;;
      *) script=$a ;;
    esac
  done
  range=$(sed -n 's/^#SBATCH --array=\([0-9]*-[0-9]*\)$/\1/p' "$script")
  if [ -n "$range" ]; then
    lo=${range%-*}
    hi=${range#*-}
    echo $((hi - lo + 1)) >slurm-array-tasks
    for ((i = lo; i <= hi; i++)); do
      SLURM_ARRAY_TASK_ID=$i SLURM_ARRAY_TASK_COUNT=$((hi - lo + 1)) bash "$script" >"slurm-task-$i.out" 2>&1 &
      pids+=($!)
    done
    for pid in "${pids[@]}"; do wait "$pid" || echo "$script: an array task failed" >>slurm-failed; done
  else
    bash "$script" >"slurm-$script.out" 2>&1 || echo "$script: status $?" >>slurm-failed
  fi
  if [ "$parsable" -eq 1 ]; then echo 4242; fi
}
export -f sbatch
(cd "$work/slurm" && bash -e submit.sh) >"$work/slurm.submit.out" 2>&1 ||
  fail "slurm: submit.sh failed: $(tail -3 "$work/slurm.submit.out")"
[ ! -e "$work/slurm/slurm-failed" ] || fail "slurm: $(cat "$work/slurm/slurm-failed")"
cp "$work/slurm/slurm-kvtwin-merge.sbatch.out" "$work/slurm.merge.out" 2>/dev/null || : >"$work/slurm.merge.out"
same_as_whole slurm "$work/slurm/reports" "$(cat "$work/slurm/slurm-array-tasks" 2>/dev/null || echo 0)"
