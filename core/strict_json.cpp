// Strict JSON parsing (strict_json.h): nlohmann's lexer and parser, our own SAX handler.
#include "core/strict_json.h"

#include <iterator>
#include <string>
#include <vector>

#include "core/printable.h"

namespace kvtwin {
namespace {

using nlohmann::json;

// A forward iterator over the text that records how far the parser has read, so a SAX event
// (which carries no position) can be placed: when key() is called, the lexer has just read the
// key's closing quote.
class CountingIterator {
 public:
  using iterator_category = std::input_iterator_tag;
  using value_type = char;
  using difference_type = std::ptrdiff_t;
  using pointer = const char*;
  using reference = const char&;

  CountingIterator(const char* at, std::size_t* consumed, const char* begin)
      : at_(at), consumed_(consumed), begin_(begin) {}
  reference operator*() const { return *at_; }
  CountingIterator& operator++() {
    ++at_;
    *consumed_ = static_cast<std::size_t>(at_ - begin_);
    return *this;
  }
  CountingIterator operator++(int) {
    CountingIterator before = *this;
    ++*this;
    return before;
  }
  bool operator==(const CountingIterator& o) const { return at_ == o.at_; }
  bool operator!=(const CountingIterator& o) const { return at_ != o.at_; }

 private:
  const char* at_;
  std::size_t* consumed_;
  const char* begin_;
};

// Builds the DOM as nlohmann's own SAX DOM parser does, refusing repeated keys and deep nesting.
class StrictBuilder {
 public:
  using number_integer_t = json::number_integer_t;
  using number_unsigned_t = json::number_unsigned_t;
  using number_float_t = json::number_float_t;
  using string_t = json::string_t;
  using binary_t = json::binary_t;

  explicit StrictBuilder(const std::size_t* consumed) : consumed_(consumed) {}

  bool null() { return put(json(nullptr)); }
  bool boolean(bool v) { return put(json(v)); }
  bool number_integer(number_integer_t v) { return put(json(v)); }
  bool number_unsigned(number_unsigned_t v) { return put(json(v)); }
  bool number_float(number_float_t v, const string_t&) { return put(json(v)); }
  bool string(string_t& v) { return put(json(std::move(v))); }
  bool binary(binary_t& v) { return put(json::binary(std::move(v))); }

  bool start_object(std::size_t) { return open(json::object()); }
  bool end_object() { return close(); }
  bool start_array(std::size_t) { return open(json::array()); }
  bool end_array() { return close(); }

  bool key(string_t& k) {
    json* object = stack_.back();
    if (object->contains(k)) {
      error_ = "duplicate key '" + printable(k) + "'";
      syntax_ = false;
      error_position_ = *consumed_;
      return false;
    }
    key_ = std::move(k);
    return true;
  }

  bool parse_error(std::size_t position, const std::string&, const nlohmann::detail::exception& e) {
    // "[json.exception.parse_error.101] parse error at line 1, column 7: syntax error ..." -> the
    // part after the position, which we give ourselves.
    std::string what = e.what();
    const std::size_t column = what.find("column ");
    const std::size_t colon = column == std::string::npos ? std::string::npos : what.find(": ", column);
    if (colon != std::string::npos) {
      what = what.substr(colon + 2);
    } else if (const std::size_t end = what.find("] "); what.rfind("[json.exception", 0) == 0 && end != std::string::npos) {
      what = what.substr(end + 2);
    }
    error_ = printable(what, 200);
    syntax_ = true;
    error_position_ = position;
    return false;
  }

  json& root() { return root_; }
  const std::string& error() const { return error_; }
  std::size_t error_position() const { return error_position_; }
  bool syntax_error() const { return syntax_; }

 private:
  bool open(json value) {
    if (stack_.size() >= kMaxJsonDepth) {
      error_ = "JSON nested deeper than " + std::to_string(kMaxJsonDepth) + " levels";
      syntax_ = false;
      error_position_ = *consumed_;
      return false;
    }
    json* at = insert(std::move(value));
    stack_.push_back(at);
    return true;
  }
  bool close() {
    stack_.pop_back();
    return true;
  }
  bool put(json value) {
    insert(std::move(value));
    return true;
  }
  // Places a value at the current position: the root, the next array element, or the value of
  // the last key. Containers on the stack are never moved: only the innermost one grows.
  json* insert(json value) {
    if (stack_.empty()) {
      root_ = std::move(value);
      return &root_;
    }
    json* parent = stack_.back();
    if (parent->is_array()) {
      parent->push_back(std::move(value));
      return &parent->back();
    }
    json& slot = (*parent)[key_];
    slot = std::move(value);
    return &slot;
  }

  const std::size_t* consumed_;
  json root_;
  std::vector<json*> stack_;
  std::string key_;
  std::string error_;
  std::size_t error_position_ = 0;
  bool syntax_ = true;
};

}  // namespace

Result<json> parse_json_strict(std::string_view text, std::string_view file, JsonText kind) {
  std::size_t consumed = 0;
  StrictBuilder builder(&consumed);
  const char* begin = text.data();
  const CountingIterator first(begin, &consumed, begin);
  const CountingIterator last(begin + text.size(), &consumed, begin);
  bool parsed = false;
  std::string problem;
  bool syntax = true;
  std::size_t position = 0;
  // nlohmann's lexer takes a NUL byte for the end of the input (and would ignore what follows).
  if (const std::size_t nul = text.find('\0'); nul != std::string_view::npos) {
    problem = "a NUL byte, which JSON text never holds";
    syntax = false;
    position = nul + 1;
  } else {
    try {
      parsed = json::sax_parse(first, last, &builder, json::input_format_t::json, /*strict=*/true);
    } catch (const json::exception& e) {  // the parser reports through parse_error; this is a guard
      return make_error(ErrorKind::malformed, std::string(file) + ": malformed JSON: " + printable(e.what(), 200));
    }
    if (parsed && builder.error().empty()) return std::move(builder.root());
    problem = builder.error().empty() ? std::string("syntax error") : builder.error();
    syntax = builder.error().empty() || builder.syntax_error();
    position = builder.error_position();
  }
  // Place the error: the position is the number of bytes read, the offending one included (for a
  // repeated key, its closing quote: the place shown is its opening quote).
  position = std::min(position, text.size());
  if (!syntax && problem.rfind("duplicate", 0) == 0 && position >= 2) {
    const std::size_t open = text.rfind('"', position - 2);
    if (open != std::string_view::npos) position = open + 1;
  }
  const std::string_view before = text.substr(0, position);
  const std::size_t newline = before.rfind('\n');
  const std::size_t column = position - (newline == std::string_view::npos ? 0 : newline + 1);
  const std::string at_column = "column " + std::to_string(column);
  const char* once = "; a key may appear only once in an object";
  std::string where(file);
  if (kind == JsonText::line) {
    where += ": ";
    where += syntax ? "malformed JSON at " + at_column + ": " + problem
                    : problem + " at " + at_column + (problem.rfind("duplicate", 0) == 0 ? once : "");
  } else {
    std::uint64_t document_line = 1;
    for (char c : before) document_line += c == '\n' ? 1 : 0;
    const std::string at = "line " + std::to_string(document_line) + ", " + at_column;
    where += syntax ? ": not valid JSON at " + at + ": " + problem
                    : ":" + std::to_string(document_line) + ": " + problem + " (" + at + ")" +
                          (problem.rfind("duplicate", 0) == 0 ? once : "");
  }
  return make_error(ErrorKind::malformed, where);
}

}  // namespace kvtwin
