#!/usr/bin/env bash
# Builds kvtwin's fuzz targets the way OSS-Fuzz and ClusterFuzzLite build a project: the compiler
# and flags come from $CC, $CXX, $CFLAGS, $CXXFLAGS, the engine from $LIB_FUZZING_ENGINE, and the
# targets go to $OUT with their seed corpora (NAME_seed_corpus.zip, or a NAME_seed_corpus folder
# when zip is absent) and the dictionary (NAME.dict). Run on a plain machine it defaults to Debian's
# clang with libFuzzer, AddressSanitizer and UndefinedBehaviorSanitizer:
#
#   tools/fuzz/build.sh                      # -> build/fuzz/out/kvtwin_fuzz_{pool_trace,mooncake,azure,spec,options}
#   build/fuzz/out/kvtwin_fuzz_pool_trace -dict=build/fuzz/out/kvtwin_fuzz_pool_trace.dict \
#       build/fuzz/corpus/pool_trace build/fuzz/out/kvtwin_fuzz_pool_trace_seed_corpus
#
# Under OSS-Fuzz or ClusterFuzzLite, call it from the project's build.sh; their $SRC/$WORK/$OUT
# are honoured ($WORK holds the CMake build folder).
set -euo pipefail
src="$(cd "$(dirname "$0")/../.." && pwd)"

export CC="${CC:-clang}"
export CXX="${CXX:-clang++}"
sanitizers="-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer"
export CFLAGS="${CFLAGS:--O1 -g ${sanitizers} -fsanitize=fuzzer-no-link}"
export CXXFLAGS="${CXXFLAGS:--O1 -g ${sanitizers} -fsanitize=fuzzer-no-link}"
LIB_FUZZING_ENGINE="${LIB_FUZZING_ENGINE:--fsanitize=fuzzer ${sanitizers}}"
OUT="${OUT:-${src}/build/fuzz/out}"
build="${WORK:-${src}/build/fuzz}/cmake"
jobs="${KVTWIN_FUZZ_JOBS:-$(nproc 2>/dev/null || echo 2)}"
targets=(pool_trace mooncake azure spec options)

mkdir -p "$OUT" "$build"
# The CMake build's own flags stay empty: the fuzzing flags above are the whole story.
cmake -S "$src" -B "$build" -DCMAKE_BUILD_TYPE=None -DKVTWIN_WITH_CUDA=OFF \
  -DCMAKE_C_COMPILER="$CC" -DCMAKE_CXX_COMPILER="$CXX" \
  -DCMAKE_C_FLAGS="$CFLAGS" -DCMAKE_CXX_FLAGS="$CXXFLAGS" \
  -DKVTWIN_FUZZ_ENGINE="$LIB_FUZZING_ENGINE" >"$build/configure.log" 2>&1 ||
  { cat "$build/configure.log"; exit 1; }
cmake --build "$build" -j "$jobs" --target "${targets[@]/#/kvtwin_fuzz_}"

# Seed corpora (seeds.sh) and the dictionary, named as OSS-Fuzz expects.
# shellcheck source=tools/fuzz/seeds.sh
source "$src/tools/fuzz/seeds.sh"
for t in "${targets[@]}"; do
  name="kvtwin_fuzz_$t"
  cp "$build/tools/fuzz/$name" "$OUT/"
  cp "$src/tools/fuzz/kvtwin.dict" "$OUT/$name.dict"
  corpus="$OUT/${name}_seed_corpus"
  rm -rf "$corpus" "$corpus.zip"
  kvtwin_fuzz_copy_seeds "$t" "$src" "$corpus"
  if command -v zip >/dev/null; then
    (cd "$corpus" && zip -q -r "../${name}_seed_corpus.zip" .) && rm -rf "$corpus"
  fi
done
echo "fuzz targets in $OUT: ${targets[*]/#/kvtwin_fuzz_}"
