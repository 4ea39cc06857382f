// Parsing JSON text that comes from outside (a trace line, a spec file), strictly.
//
// nlohmann::json::parse accepts an object that names one key twice and keeps the last value, so
// {"tokens":8,"tokens":16} would silently allocate 16; it nests as deep as the input asks; and its
// error text echoes the bytes it choked on verbatim. parse_json_strict() builds the same value
// through a SAX handler that refuses a repeated key, caps the nesting depth, and places every
// error: "FILE:LINE: ... at column C" for one line of a JSON Lines file, "FILE:LINE:COLUMN" for a
// file that is one JSON document. Every error is an ErrorKind::malformed Error.
#pragma once

#include <cstdint>
#include <string_view>

#include <nlohmann/json.hpp>

#include "core/result.h"

namespace kvtwin {

// Deeper nesting than any kvtwin format uses (a pool trace line nests 4 levels, a spec file 2).
inline constexpr std::size_t kMaxJsonDepth = 64;

enum class JsonText : std::uint8_t {
  line,      // one line of a JSON Lines file; `where` is "FILE:LINE", errors add "at column C"
  document,  // a whole file; `where` is "FILE", errors add the line and column
};

// Parses `text` as exactly one JSON value; every error begins with `where`.
Result<nlohmann::json> parse_json_strict(std::string_view text, std::string_view where, JsonText kind);

}  // namespace kvtwin
