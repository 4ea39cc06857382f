// Fuzz target: the strings kvtwin takes on its command line and in configuration names: byte
// sizes ("64MiB"), whole numbers with bounds, fuzz configurations ("gpt-oss-20b/tp8/ps4/lazy"),
// dtypes, trace formats, backends and error kinds. The first byte picks the parser, the rest is
// the string. Each must parse or be refused with a message naming the option and carrying no raw
// byte; a parsed number must print back as the same number, and a configuration that parses must
// describe a pool that builds.
#include <cstdint>
#include <string>

#include "core/dtype.h"
#include "core/pool_config.h"
#include "tools/fuzz/fuzz_support.h"
#include "props/fuzz.h"
#include "tools/kvtwin/options.h"
#include "traces/backends.h"
#include "traces/request_trace.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace kvtwin;
  if (size == 0) return 0;
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 7) {
    case 0: {
      Result<std::uint64_t> bytes = cli::parse_byte_size(text, "--pool-bytes");
      if (!bytes.ok()) fuzz::check_refusal(bytes.error(), "--pool-bytes");
      break;
    }
    case 1: {
      Result<std::uint64_t> n = cli::parse_whole_number(text, "--tp", 1, kMaxTensorParallel);
      if (!n.ok()) {
        fuzz::check_refusal(n.error(), "--tp");
      } else if (std::to_string(*n) != text.substr(text.find_first_not_of('0') == std::string::npos
                                                          ? text.size() - 1
                                                          : text.find_first_not_of('0'))) {
        fuzz::finding("a whole number does not print back as itself", text);
      } else if (*n < 1 || *n > kMaxTensorParallel) {
        fuzz::finding("a number outside its bounds was accepted", text);
      }
      break;
    }
    case 2: {
      Result<PoolConfig> c = props::named_config(text, 1);
      if (!c.ok()) {
        fuzz::check_refusal(c.error(), "configuration '");
      } else if (Result<PoolDerived> d = derive_pool(*c); !d.ok()) {
        fuzz::finding("a named configuration that does not build", d.error().message);
      }
      break;
    }
    case 3: {
      Result<DType> d = parse_dtype(text);
      if (!d.ok()) fuzz::check_refusal(d.error(), "unknown dtype");
      break;
    }
    case 4: {
      Result<traces::TraceFormat> f = traces::parse_format_name(text);
      if (!f.ok()) fuzz::check_refusal(f.error(), "unknown trace format");
      break;
    }
    case 5: {
      Result<traces::BackendChoice> b = traces::parse_backend_choice(text);
      if (!b.ok()) fuzz::check_refusal(b.error(), "unknown backend");
      break;
    }
    default: {
      ErrorKind kind{};
      if (parse_error_kind(text, kind) && error_kind_name(kind) != text)
        fuzz::finding("an error kind that does not print back as itself", text);
      break;
    }
  }
  return 0;
}
