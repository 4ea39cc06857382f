// Strict JSON parsing (core/strict_json.h) and message-safe text (core/printable.h): a repeated
// key is refused with its place, nesting is capped, every error is placed, and the values that
// parse are exactly nlohmann's; bytes from outside never reach a message raw.
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/printable.h"
#include "core/strict_json.h"

namespace kvtwin {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using nlohmann::json;

TEST(StrictJson, ParsesWhatNlohmannParsesToTheSameValue) {
  const char* texts[] = {
      R"({"op":"alloc","tokens":8})",
      R"([1,-2,3.5,"x",true,false,null,{},[]])",
      R"({"a":{"b":{"c":[1,{"d":18446744073709551615}]}},"e":-9223372036854775808})",
      R"("just a string")",
      "  {\"spaced\" : [ 1 , 2 ] }  ",
      R"({"same":1,"nested":{"same":2},"list":[{"same":3},{"same":4}]})",  // equal keys in different objects
  };
  for (const char* text : texts) {
    Result<json> strict = parse_json_strict(text, "t.jsonl:1", JsonText::line);
    ASSERT_TRUE(strict.ok()) << text << ": " << strict.error().message;
    EXPECT_EQ(*strict, json::parse(text)) << text;
  }
}

TEST(StrictJson, ARepeatedKeyIsRefusedWithItsLineKeyAndColumn) {
  Result<json> line = parse_json_strict(R"({"op":"alloc","tokens":8,"tokens":16})", "t.jsonl:7", JsonText::line);
  ASSERT_FALSE(line.ok());
  EXPECT_EQ(line.error().kind, ErrorKind::malformed);
  EXPECT_EQ(line.error().message,
            "t.jsonl:7: duplicate key 'tokens' at column 26; a key may appear only once in an object");

  // Nested, in a document: the line of the repeated key, counted from 1.
  Result<json> doc = parse_json_strict("{\n  \"a\": {\n    \"x\": 1,\n    \"x\": 2\n  }\n}", "spec.json", JsonText::document);
  ASSERT_FALSE(doc.ok());
  EXPECT_THAT(doc.error().message, HasSubstr("spec.json:4: duplicate key 'x' (line 4, column 5)"));
}

TEST(StrictJson, SyntaxErrorsArePlacedByLineAndColumn) {
  Result<json> line = parse_json_strict(R"({"op":"alloc",})", "t.jsonl:3", JsonText::line);
  ASSERT_FALSE(line.ok());
  EXPECT_THAT(line.error().message, HasSubstr("t.jsonl:3: malformed JSON at column 15: "));
  Result<json> doc = parse_json_strict("{\"name\": \"x\",\n \"num_layers\": ", "m.json", JsonText::document);
  ASSERT_FALSE(doc.ok());
  EXPECT_THAT(doc.error().message, HasSubstr("m.json: not valid JSON at line 2"));
  for (const char* bad : {"", "{", "{} {}", "[1,]", "nul"}) {
    Result<json> r = parse_json_strict(bad, "x", JsonText::line);
    EXPECT_FALSE(r.ok()) << bad;
  }
}

TEST(StrictJson, NestingIsCapped) {
  const std::string ok = std::string(kMaxJsonDepth, '[') + std::string(kMaxJsonDepth, ']');
  EXPECT_TRUE(parse_json_strict(ok, "x", JsonText::line).ok());
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  Result<json> r = parse_json_strict(deep, "x:1", JsonText::line);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.error().message, HasSubstr("nested deeper than 64 levels at column 65"));
}

TEST(StrictJson, RawBytesNeverReachTheMessage) {
  const std::string text = std::string("{\"op\":\x01\x00\xff\x1b[2J}", 14);
  Result<json> r = parse_json_strict(text, "bin.jsonl:2", JsonText::line);
  ASSERT_FALSE(r.ok());
  for (char c : r.error().message) {
    EXPECT_GE(static_cast<unsigned char>(c), 0x20) << r.error().message;
    EXPECT_LT(static_cast<unsigned char>(c), 0x7f) << r.error().message;
  }
}

TEST(Printable, EscapesControlBytesAndInvalidUtf8AndKeepsTheRest) {
  EXPECT_EQ(printable("plain text"), "plain text");
  EXPECT_EQ(printable(std::string("a\0b", 3)), "a\\x00b");
  EXPECT_EQ(printable("\x1b[31mred"), "\\x1b[31mred");
  EXPECT_EQ(printable("tab\tnew\nline"), "tab\\tnew\\nline");
  EXPECT_EQ(printable("caf\xc3\xa9 \xe2\x82\xac"), "caf\xc3\xa9 \xe2\x82\xac") << "well-formed UTF-8 stays";
  EXPECT_EQ(printable("\xff\xfe"), "\\xff\\xfe");
  EXPECT_EQ(printable("\xc3"), "\\xc3") << "a sequence cut short";
  EXPECT_EQ(printable("\xed\xa0\x80"), "\\xed\\xa0\\x80") << "a UTF-16 surrogate is not UTF-8";
  EXPECT_EQ(printable("\xc0\xaf"), "\\xc0\\xaf") << "an overlong form";
  EXPECT_EQ(printable(std::string(1000, 'x'), 10), "xxxxxxxxxx... (1000 bytes)");
  EXPECT_EQ(printable_message("two\nlines\tand \x07"), "two\nlines\tand \\x07") << "layout kept, bell escaped";
  EXPECT_THAT(printable(std::string(80, 'y')), Not(HasSubstr("bytes"))) << "80 characters are shown whole";
  EXPECT_THAT(printable(std::string(81, 'y')), HasSubstr("... (81 bytes)")) << "past 80 they are cut";
}

}  // namespace
}  // namespace kvtwin
