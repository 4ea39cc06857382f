// Request traces: the Mooncake and Azure readers on the committed samples (checked against an
// independent parse of the same text), format detection, timestamps, and the bad-file corpus.
#include "traces/request_trace.h"

#include <fstream>
#include <sstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/files.h"

#include "tests/traces/test_support.h"

namespace kvtwin::traces {
namespace {

using testing::data_path;
using testing::source_dir;

std::string sample(const char* name) { return source_dir() + "/traces/samples/" + name; }

TEST(RequestTrace, MooncakeSampleMatchesAnIndependentParse) {
  const std::string path = sample("mooncake_conversation_head.jsonl");
  Result<RequestTrace> t = read_request_trace(path, TraceFormat::mooncake, {});
  ASSERT_TRUE(t.ok()) << t.error().message;
  EXPECT_EQ(t->block_tokens, 512u);
  std::ifstream in(path);
  std::string text;
  std::size_t i = 0;
  std::uint64_t first_ms = 0;
  while (std::getline(in, text)) {
    const nlohmann::json j = nlohmann::json::parse(text);
    if (i == 0) first_ms = j["timestamp"].get<std::uint64_t>();
    ASSERT_LT(i, t->requests.size());
    const Request& r = t->requests[i];
    EXPECT_EQ(r.arrival_us, (j["timestamp"].get<std::uint64_t>() - first_ms) * 1000) << "line " << i + 1;
    EXPECT_EQ(r.input_tokens, j["input_length"].get<std::uint64_t>());
    EXPECT_EQ(r.output_tokens, j["output_length"].get<std::uint64_t>());
    EXPECT_EQ(r.block_hashes, j["hash_ids"].get<std::vector<std::int64_t>>());
    EXPECT_EQ(r.line, i + 1);
    EXPECT_EQ(r.index, i);
    ++i;
  }
  EXPECT_EQ(i, t->requests.size());
  EXPECT_GE(i, 200u);
}

TEST(RequestTrace, AzureSampleMatchesAnIndependentParse) {
  const std::string path = sample("azure_code_head.csv");
  Result<RequestTrace> t = read_request_trace(path, TraceFormat::azure, {});
  ASSERT_TRUE(t.ok()) << t.error().message;
  EXPECT_EQ(t->block_tokens, 0u);
  std::ifstream in(path);
  std::string text;
  std::getline(in, text);  // header
  std::size_t i = 0;
  double first_seconds = 0;
  while (std::getline(in, text)) {
    std::istringstream fields(text);
    std::string stamp, context, generated;
    std::getline(fields, stamp, ',');
    std::getline(fields, context, ',');
    std::getline(fields, generated, ',');
    // All sample rows are on 2023-11-16: seconds of the day from HH:MM:SS.fffffff.
    const double seconds =
        std::stod(stamp.substr(11, 2)) * 3600 + std::stod(stamp.substr(14, 2)) * 60 + std::stod(stamp.substr(17));
    if (i == 0) first_seconds = seconds;
    ASSERT_LT(i, t->requests.size());
    const Request& r = t->requests[i];
    EXPECT_NEAR(static_cast<double>(r.arrival_us), (seconds - first_seconds) * 1e6, 1.5) << "row " << i + 1;
    EXPECT_EQ(r.input_tokens, std::stoull(context));
    EXPECT_EQ(r.output_tokens, std::stoull(generated));
    EXPECT_TRUE(r.block_hashes.empty());
    ++i;
  }
  EXPECT_EQ(i, t->requests.size());
  EXPECT_GE(i, 200u);
}

TEST(RequestTrace, LimitReadsAPrefix) {
  Result<RequestTrace> t = read_request_trace(sample("mooncake_conversation_head.jsonl"), TraceFormat::mooncake, {7});
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->requests.size(), 7u);
}

// Other traces in Mooncake's format use other block sizes: the reader takes the size it is given
// and holds hash_ids to it; the size is refused for a format without hashes.
TEST(RequestTrace, ABlockSizeOtherThanMooncakesIsReadAndHeldToTheHashCount) {
  const std::string text =
      "{\"timestamp\": 0, \"input_length\": 130, \"output_length\": 5, \"hash_ids\": [1, 2, 3]}\n"
      "{\"timestamp\": 4, \"input_length\": 64, \"output_length\": 5, \"hash_ids\": [1]}\n";
  RequestReadOptions options;
  options.block_tokens = 64;
  std::istringstream in(text);
  Result<RequestTrace> t = parse_request_trace(in, "blocks64.jsonl", TraceFormat::mooncake, options);
  ASSERT_TRUE(t.ok()) << t.error().message;
  EXPECT_EQ(t->block_tokens, 64u);
  EXPECT_TRUE(t->block_tokens_given);
  ASSERT_EQ(t->requests.size(), 2u);
  EXPECT_EQ(t->requests[0].block_hashes.size(), 3u);

  // The same text at Mooncake's 512-token blocks has too many hashes, and the error says why.
  std::istringstream again(text);
  Result<RequestTrace> default_size = parse_request_trace(again, "blocks64.jsonl", TraceFormat::mooncake, {});
  ASSERT_FALSE(default_size.ok());
  EXPECT_THAT(default_size.error().message, ::testing::HasSubstr("blocks64.jsonl:1"));
  EXPECT_THAT(default_size.error().message, ::testing::HasSubstr("needs ceil(130 / 512) = 1"));
  EXPECT_THAT(default_size.error().message, ::testing::HasSubstr("--block-tokens"));

  // A block size that does not match the hashes names the option and its value.
  options.block_tokens = 16;
  std::istringstream third(text);
  Result<RequestTrace> wrong = parse_request_trace(third, "blocks64.jsonl", TraceFormat::mooncake, options);
  ASSERT_FALSE(wrong.ok());
  EXPECT_EQ(wrong.error().kind, ErrorKind::malformed);
  EXPECT_THAT(wrong.error().message, ::testing::HasSubstr("needs ceil(130 / 16) = 9 (blocks of --block-tokens 16)"));

  options.block_tokens = 64;
  std::ifstream azure(sample("azure_code_head.csv"));
  Result<RequestTrace> no_hashes = parse_request_trace(azure, "azure.csv", TraceFormat::azure, options);
  ASSERT_FALSE(no_hashes.ok());
  EXPECT_EQ(no_hashes.error().kind, ErrorKind::invalid_argument);
  EXPECT_THAT(no_hashes.error().message, ::testing::HasSubstr("--block-tokens 64: azure.csv is in the azure format, which has no prefix hashes"));
}

TEST(RequestTrace, DetectsEveryFormatAndRefusesOthers) {
  EXPECT_EQ(detect_format(sample("mooncake_conversation_head.jsonl")).value(), TraceFormat::mooncake);
  EXPECT_EQ(detect_format(sample("azure_code_head.csv")).value(), TraceFormat::azure);
  EXPECT_EQ(detect_format_of_line(R"({"kvtwin_trace":1,"kind":"pool"})", "x").value(), TraceFormat::pool);
  for (const char* file : {"bad/unsupported_burstgpt.csv", "bad/unsupported_text.txt", "bad/empty.jsonl"}) {
    Result<TraceFormat> f = detect_format(data_path(file));
    ASSERT_FALSE(f.ok()) << file;
    EXPECT_EQ(f.error().kind, ErrorKind::unsupported) << file;
    EXPECT_NE(f.error().message.find("Mooncake"), std::string::npos) << f.error().message;
    EXPECT_NE(f.error().message.find("TIMESTAMP,ContextTokens,GeneratedTokens"), std::string::npos);
  }
  EXPECT_NE(detect_format(data_path("bad/unsupported_burstgpt.csv")).error().message.find("unsupported format"),
            std::string::npos);
  EXPECT_EQ(detect_format("/nonexistent/trace.jsonl").error().kind, ErrorKind::io);
}

TEST(RequestTrace, AzureTimestampsCountDaysMonthsAndLeapYears) {
  // Independent reference: days from 1970-01-01 counted month by month below.
  EXPECT_EQ(parse_azure_timestamp_us("1970-01-01 00:00:00", "x").value(), 0u);
  EXPECT_EQ(parse_azure_timestamp_us("1970-01-02 00:00:01.5", "x").value(), (86400ull + 1) * 1000000 + 500000);
  // 2023-11-16: 1970..2022 has 53 years of which 13 leap (72, 76, ..., 2020) -> 53*365+13 days;
  // Jan..Oct 2023 = 31+28+31+30+31+30+31+31+30+31 = 304 days; plus 15.
  const std::uint64_t days = 53 * 365 + 13 + 304 + 15;
  const std::uint64_t expected = ((days * 24 + 18) * 60 + 17) * 60 + 3;
  EXPECT_EQ(parse_azure_timestamp_us("2023-11-16 18:17:03.9799600", "x").value(), expected * 1000000 + 979960);
  // 2024 is a leap year: Feb 29 exists, and Mar 1 is one day later.
  const std::uint64_t feb29 = parse_azure_timestamp_us("2024-02-29 00:00:00", "x").value();
  EXPECT_EQ(parse_azure_timestamp_us("2024-03-01 00:00:00", "x").value() - feb29, 86400ull * 1000000);
  EXPECT_FALSE(parse_azure_timestamp_us("2023-02-29 00:00:00", "x").ok());
  EXPECT_FALSE(parse_azure_timestamp_us("2023-11-16T18:17:03", "x").ok());
  EXPECT_FALSE(parse_azure_timestamp_us("2023-11-16 18:17:03.", "x").ok());
  EXPECT_FALSE(parse_azure_timestamp_us("2023-11-16 24:00:00", "x").ok());
}

struct BadRequestFile {
  const char* file;
  TraceFormat format;
  int line;
  const char* fragment;
};

const BadRequestFile kBadRequestTraces[] = {
    {"mooncake_bad_json.jsonl", TraceFormat::mooncake, 2, "malformed JSON"},
    {"mooncake_missing_output.jsonl", TraceFormat::mooncake, 1, "missing field 'output_length'"},
    {"mooncake_block_count.jsonl", TraceFormat::mooncake, 2,
     "field 'hash_ids' has 2 blocks but input_length 1100 needs ceil(1100 / 512) = 3"},
    {"mooncake_negative_hash.jsonl", TraceFormat::mooncake, 1, "field 'hash_ids[1]'"},
    {"mooncake_time_goes_back.jsonl", TraceFormat::mooncake, 2, "arrivals must not go back in time"},
    {"mooncake_timestamp_too_big.jsonl", TraceFormat::mooncake, 1, "field 'timestamp'"},
    {"mooncake_mistyped.jsonl", TraceFormat::mooncake, 1, "field 'output_length' must be a non-negative integer"},
    {"azure_bad_month.csv", TraceFormat::azure, 3, "field 'TIMESTAMP' = '2023-13-16 18:17:04.0319600' has a month"},
    {"azure_bad_header.csv", TraceFormat::azure, 1,
     "an Azure trace begins with TIMESTAMP,ContextTokens,GeneratedTokens"},
    {"azure_two_fields.csv", TraceFormat::azure, 2, "expected 3 comma-separated fields"},
    {"azure_not_a_number.csv", TraceFormat::azure, 2,
     "field 'ContextTokens' = '48x8' is not a non-negative whole number"},
    {"azure_too_big.csv", TraceFormat::azure, 2,
     "field 'GeneratedTokens' = '99999999999999999999' is a number too big"},
    {"azure_time_goes_back.csv", TraceFormat::azure, 3, "arrivals must not go back in time"},
    {"mooncake_duplicate_key.jsonl", TraceFormat::mooncake, 1, "duplicate key 'output_length' at column 59"},
    {"azure_binary_field.csv", TraceFormat::azure, 2, "field 'ContextTokens' = '48\\x00\\xff8' is not"},
};

TEST(RequestTrace, DetectionPlacesABrokenFirstLineAndNamesAFolder) {
  // A Mooncake file whose first line is bad JSON: malformed at its line and column, not "unsupported".
  Result<TraceFormat> bad_first = detect_format(data_path("bad/mooncake_bad_first_line.jsonl"));
  ASSERT_FALSE(bad_first.ok());
  EXPECT_EQ(bad_first.error().kind, ErrorKind::malformed);
  EXPECT_THAT(bad_first.error().message, ::testing::HasSubstr("mooncake_bad_first_line.jsonl:1: malformed JSON at column 52"));
  Result<TraceFormat> folder = detect_format(data_path("bad"));
  ASSERT_FALSE(folder.ok());
  EXPECT_EQ(folder.error().kind, ErrorKind::io);
  EXPECT_THAT(folder.error().message, ::testing::HasSubstr("is a folder"));
  Result<RequestTrace> read_folder = read_request_trace(data_path("bad"), TraceFormat::mooncake, {});
  ASSERT_FALSE(read_folder.ok());
  EXPECT_THAT(read_folder.error().message, ::testing::HasSubstr("is a folder"));
}

TEST(RequestTrace, AnOverlongLineIsRefused) {
  std::istringstream in(std::string(kMaxInputLineBytes + 10, '{'));
  Result<RequestTrace> t = parse_request_trace(in, "zero.jsonl", TraceFormat::mooncake, {});
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(t.error().message, ::testing::HasSubstr("zero.jsonl:1: the line is longer than 16777216 bytes"));
}

TEST(RequestTrace, EveryBadFileNamesFileLineAndField) {
  for (const BadRequestFile& bad : kBadRequestTraces) {
    const std::string path = data_path(std::string("bad/") + bad.file);
    Result<RequestTrace> t = read_request_trace(path, bad.format, {});
    ASSERT_FALSE(t.ok()) << bad.file << " was accepted";
    EXPECT_EQ(t.error().kind, ErrorKind::malformed) << bad.file;
    const std::string prefix = path + ":" + std::to_string(bad.line) + ": ";
    EXPECT_EQ(t.error().message.rfind(prefix, 0), 0u) << bad.file << ": " << t.error().message;
    EXPECT_NE(t.error().message.find(bad.fragment), std::string::npos) << bad.file << ": " << t.error().message;
  }
}

}  // namespace
}  // namespace kvtwin::traces
