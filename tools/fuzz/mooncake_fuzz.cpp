// Fuzz target: a Mooncake request trace (JSON Lines), read and served (request_fuzz.h).
#include "tools/fuzz/request_fuzz.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return kvtwin::fuzz::fuzz_request_trace(data, size, kvtwin::traces::TraceFormat::mooncake, "fuzz.jsonl");
}
