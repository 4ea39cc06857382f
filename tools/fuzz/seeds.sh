# Sourced by build.sh and smoke.sh: the seed inputs of each fuzz target, and copying them into one
# flat corpus folder. Seeds are the readers' bad files and the samples (the tests' own inputs), the
# regression traces, the committed seeds of tools/fuzz/corpus/, and every regression input the
# fuzzer has found (tools/fuzz/regressions/TARGET/).
kvtwin_fuzz_targets=(pool_trace mooncake azure spec options)

kvtwin_fuzz_seeds() {  # TARGET SOURCE_DIR -> paths, one a line
  local t="$1" src="$2"
  case "$t" in
    pool_trace) echo "$src/tests/traces/data/bad"; echo "$src/traces/regress" ;;
    mooncake) echo "$src/tests/traces/data/bad"; echo "$src/traces/samples/mooncake_conversation_head.jsonl" ;;
    azure) echo "$src/tests/traces/data/bad"; echo "$src/traces/samples/azure_code_head.csv" ;;
    spec | options) echo "$src/tools/fuzz/corpus/$t" ;;
  esac
  echo "$src/tools/fuzz/regressions/$t"
}

kvtwin_fuzz_copy_seeds() {  # TARGET SOURCE_DIR DEST_FOLDER
  local s
  mkdir -p "$3"
  while read -r s; do
    [ -e "$s" ] || continue
    if [ -d "$s" ]; then
      find "$s" -type f -exec cp {} "$3/" \;
    else
      cp "$s" "$3/"
    fi
  done < <(kvtwin_fuzz_seeds "$1" "$2")
}
