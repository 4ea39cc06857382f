// Text from outside (a trace line, a field's value, a file name) made safe to put in a message.
//
// A malformed file may hold raw binary, NUL bytes, terminal escape sequences or megabytes on one
// line; a message that echoes it verbatim is cut short at the NUL, garbles the terminal, or
// drowns the one line that matters. printable() keeps printable ASCII and well-formed UTF-8,
// writes every other byte as \xNN (a tab as \t, a newline as \n), and cuts the result to a
// length, saying how long the original was.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace kvtwin {

inline constexpr std::size_t kMessageEchoChars = 80;

// `text` with control bytes and invalid UTF-8 escaped, at most about `max_chars` characters
// (then "... (N bytes)").
std::string printable(std::string_view text, std::size_t max_chars = kMessageEchoChars);

// The same for a whole message: newlines and tabs are kept, nothing is cut.
std::string printable_message(std::string_view message);

}  // namespace kvtwin
