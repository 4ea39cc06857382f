// Pool traces: exact round trips (random ops of every kind, every result kind, extremes), the
// canonical form, and the reader's corpus of bad files (each names its file, line and field); the
// end line that tells a whole trace from a cut one, and the writer that never leaves half a file.
#include "traces/pool_trace.h"

// GCC 12 reports the Error alternative of a Done result built in place as "maybe uninitialized"
// (a false positive of its variant inlining, seen only in this file); it is not.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/traces/test_support.h"

namespace kvtwin::traces {
namespace {

using testing::any_op;
using testing::any_result;
using testing::data_path;
using testing::small_config;

constexpr std::uint64_t kSeed = 20261129;

PoolTrace random_trace(Rng& rng, std::size_t lines) {
  PoolTrace t;
  t.header.config = small_config();
  t.header.seed = rng.next_u64();
  t.header.origin = {{"producer", "test"}, {"case", rng.below(1000)}};
  for (std::size_t i = 0; i < lines; ++i) {
    TraceLine line;
    line.op = any_op(rng);
    if (rng.chance(2, 3)) line.expect = any_result(rng);
    // An empty alloc_many answer has its own form ({"pages":[],"many":true}) and must read back as one.
    if (std::holds_alternative<AllocMany>(line.op) && rng.chance(1, 4))
      line.expect = OpResult(Outcome(AllocatedMany{}));
    t.lines.push_back(std::move(line));
  }
  return t;
}

std::string text_of(const PoolTrace& t) {
  std::ostringstream out;
  write_pool_trace(out, t);
  return out.str();
}

TEST(PoolTrace, RandomTracesRoundTripExactly) {
  std::printf("seed %llu\n", static_cast<unsigned long long>(kSeed));
  Rng rng(kSeed);
  for (int c = 0; c < 300; ++c) {
    const PoolTrace original = random_trace(rng, 1 + rng.below(40));
    const std::string text = text_of(original);
    std::istringstream in(text);
    Result<PoolTrace> back = parse_pool_trace(in, "<memory>");
    ASSERT_TRUE(back.ok()) << "case " << c << " (seed " << kSeed << "): " << back.error().message << "\n" << text;
    EXPECT_EQ(back->header, original.header) << "case " << c;
    ASSERT_EQ(back->lines.size(), original.lines.size());
    for (std::size_t i = 0; i < original.lines.size(); ++i)
      ASSERT_TRUE(same_lines({back->lines[i]}, {original.lines[i]}))
          << "case " << c << " line " << i + 2 << ": " << op_to_line(original.lines[i].op, original.lines[i].expect);
    // Expected error messages survive too (same_result compares errors by kind only).
    for (std::size_t i = 0; i < original.lines.size(); ++i) {
      const auto& e = original.lines[i].expect;
      if (e && !e->ok()) {
        EXPECT_EQ(back->lines[i].expect->error().message, e->error().message);
      }
      EXPECT_EQ(back->lines[i].line, i + 2) << "op lines start on line 2";
    }
    EXPECT_EQ(text_of(*back), text) << "case " << c << ": writing what was read gives the same bytes";
  }
}

TEST(PoolTrace, CanonicalLinePutsOpFirstAndExpectLast) {
  Write w;
  w.layer = 3;
  w.write_number = 7;
  w.batch = 0;
  EXPECT_EQ(op_to_line(Op(w), OpResult(Outcome(Done{}))),
            R"({"op":"write","batch":0,"layer":3,"write_number":7,"expect":{"ok":true}})");
  EXPECT_EQ(op_to_line(Op(Free{IdUnit::pages, {5}}), std::nullopt), R"({"op":"free","pages":[5]})");
}

TEST(PoolTrace, FileRoundTripAndWriterStreams) {
  Rng rng(kSeed + 1);
  const PoolTrace original = random_trace(rng, 25);
  const std::string path = ::testing::TempDir() + "kvtwin_round_trip.jsonl";
  ASSERT_TRUE(write_pool_trace_file(path, original).ok());
  Result<PoolTrace> back = read_pool_trace_file(path);
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_TRUE(same_lines(back->lines, original.lines));
  std::ifstream in(path, std::ios::binary);
  std::stringstream bytes;
  bytes << in.rdbuf();
  EXPECT_EQ(bytes.str(), text_of(original));
  std::remove(path.c_str());
}

TEST(PoolTrace, BlankLinesAreSkippedButCounted) {
  std::istringstream in(header_to_line(TraceHeader{small_config(), 3, {}}) + "\n\n{\"op\":\"flush\"}\n\n" +
                        end_line(1) + "\n\n");
  Result<PoolTrace> t = parse_pool_trace(in, "x.jsonl");
  ASSERT_TRUE(t.ok()) << t.error().message;
  ASSERT_EQ(t->lines.size(), 1u);
  EXPECT_EQ(t->lines[0].line, 3u);
}

// flush() publishes a whole trace of the lines so far (a checkpoint); writing goes on.
TEST(PoolTrace, AFlushedWriterHasItsLinesInTheFileBeforeItCloses) {
  const std::string path = ::testing::TempDir() + "kvtwin_flushed.jsonl";
  Result<PoolTraceWriter> w = PoolTraceWriter::open(path, TraceHeader{small_config(), 5, {}});
  ASSERT_TRUE(w.ok()) << w.error().message;
  ASSERT_TRUE(w->append(Op(Alloc{4}), std::nullopt).ok());
  ASSERT_TRUE(w->append(Op(Flush{}), OpResult(Outcome(Compaction{}))).ok());
  ASSERT_TRUE(w->flush().ok());
  Result<PoolTrace> read = read_pool_trace_file(path);  // the writer is still open
  ASSERT_TRUE(read.ok()) << read.error().message;
  EXPECT_EQ(read->lines.size(), 2u);
  EXPECT_EQ(read->header.seed, 5u);
  ASSERT_TRUE(w->append(Op(Alloc{2}), std::nullopt).ok());
  ASSERT_TRUE(w->close().ok());
  read = read_pool_trace_file(path);
  ASSERT_TRUE(read.ok()) << read.error().message;
  EXPECT_EQ(read->lines.size(), 3u);
  std::remove(path.c_str());
}

TEST(PoolTrace, UnwritableFileIsAnIoError) {
  Result<PoolTraceWriter> w = PoolTraceWriter::open("/nonexistent-folder/x.jsonl", TraceHeader{small_config(), 1, {}});
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.error().kind, ErrorKind::io);
  Result<PoolTrace> r = read_pool_trace_file("/nonexistent-folder/x.jsonl");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().kind, ErrorKind::io);
}

struct BadFile {
  const char* file;
  int line;              // 0: the message names no line (the file is empty)
  const char* fragment;  // what the message must say
};

// The reader's error corpus (tests/traces/data/bad/): every file fails at its first problem with
// an error that names the file, the line and the field.
const BadFile kBadPoolTraces[] = {
    {"empty.jsonl", 0, "the file is empty"},
    {"header_bad_json.jsonl", 1, "malformed JSON at column"},
    {"op_bad_json.jsonl", 2, "malformed JSON at column"},
    {"unknown_version.jsonl", 1, "unknown trace version 3"},
    {"missing_version.jsonl", 1, "missing field 'kvtwin_trace'"},
    {"op_before_header.jsonl", 1, "found an operation"},
    {"unknown_op.jsonl", 3, "unknown operation 'allocate'"},
    {"missing_field.jsonl", 2, "missing field 'tokens'"},
    {"mistyped_field.jsonl", 2, "field 'tokens' must be a non-negative integer"},
    {"negative_size.jsonl", 2, "field 'tokens' = -16 must not be negative"},
    {"size_too_big.jsonl", 2, "too big for 64 bits"},
    {"id_too_big.jsonl", 2, "field 'pages[0]' = 9223372036854775808 is too big for a signed 64-bit integer"},
    {"reader_id_out_of_range.jsonl", 2, "field 'reader' = 4294967296 is too big"},
    {"batch_size_out_of_range.jsonl", 2, "field 'max_batch' = 4294967296 is too big"},
    {"config_tp_out_of_range.jsonl", 1, "field 'tp' = 0 is out of range (1 .. 1024)"},
    {"unknown_field.jsonl", 2, "unknown field 'token'"},
    {"bad_expect.jsonl", 2, "field 'expect'"},
    {"bad_expect_error_kind.jsonl", 2, "unknown error kind 'oops'"},
    {"config_page_size_zero.jsonl", 1, "field 'config' describes a pool that cannot be built: page size is 0"},
    {"config_pool_too_small.jsonl", 1, "increase total_bytes"},
    {"config_unknown_model.jsonl", 1, "unknown model 'llama-9b'"},
    {"build_unknown_model.jsonl", 2, "unknown model 'nope'"},
    {"header_missing_seed.jsonl", 1, "missing field 'seed'"},
    {"header_wrong_kind.jsonl", 1, "field 'kind' is 'request'"},
    {"second_header.jsonl", 3, "a second header"},
    {"error_after_blank_line.jsonl", 4, "unknown field 'now'"},
    {"op_not_object.jsonl", 2, "must be a JSON object"},
    {"number_overflows_double.jsonl", 2, "number overflow"},
    {"mooncake_bad_json.jsonl", 1, "looks like a Mooncake request trace"},
    {"duplicate_key_in_op.jsonl", 2, "duplicate key 'tokens' at column 26"},
    {"duplicate_key_in_header.jsonl", 1, "duplicate key 'seed'"},
    {"duplicate_key_in_config.jsonl", 1, "duplicate key 'page_size'"},
    {"duplicate_key_in_expect.jsonl", 2, "duplicate key 'pages'"},
    {"truncated_without_end_line.jsonl", 0, "the trace stops after line 3 without its end line"},
    {"end_line_miscounted.jsonl", 4, "the end line counts 3 operation lines but the trace has 2"},
    {"line_after_end_line.jsonl", 4, "a line after the end line"},
    {"end_line_in_version_1.jsonl", 3, "an end line in a version-1 trace"},
    {"end_line_unknown_field.jsonl", 2, "unknown field 'ops'"},
    {"nested_too_deep.jsonl", 2, "nested deeper than 64 levels"},
    {"binary_bytes.jsonl", 2, "a NUL byte, which JSON text never holds at column 24"},
    {"binary_in_string.jsonl", 2, "unknown operation 'al\\x00loc\\x1b[2J\xc3\xa9'"},
};

TEST(PoolTrace, EveryBadFileNamesFileLineAndField) {
  for (const BadFile& bad : kBadPoolTraces) {
    const std::string path = data_path(std::string("bad/") + bad.file);
    Result<PoolTrace> t = read_pool_trace_file(path);
    ASSERT_FALSE(t.ok()) << bad.file << " was accepted";
    EXPECT_EQ(t.error().kind, ErrorKind::malformed) << bad.file << ": " << t.error().message;
    const std::string prefix = bad.line == 0 ? path + ": " : path + ":" + std::to_string(bad.line) + ": ";
    EXPECT_EQ(t.error().message.rfind(prefix, 0), 0u) << bad.file << ": " << t.error().message;
    EXPECT_NE(t.error().message.find(bad.fragment), std::string::npos) << bad.file << ": " << t.error().message;
  }
}

TEST(PoolTrace, NoMessageCarriesARawByte) {
  for (const char* file : {"binary_bytes.jsonl", "binary_in_string.jsonl"}) {
    Result<PoolTrace> t = read_pool_trace_file(data_path(std::string("bad/") + file));
    ASSERT_FALSE(t.ok());
    for (char c : t.error().message)
      EXPECT_TRUE(static_cast<unsigned char>(c) >= 0x20 && c != 0x7f) << file << ": " << t.error().message;
  }
}

TEST(PoolTrace, AVersion1TraceNeedsNoEndLine) {
  // The committed traces under traces/regress/ are version 1: they read as they always did.
  std::istringstream in(header_to_line(TraceHeader{small_config(), 3, {}}, 1) + "\n{\"op\":\"flush\"}\n");
  Result<PoolTrace> t = parse_pool_trace(in, "v1.jsonl");
  ASSERT_TRUE(t.ok()) << t.error().message;
  EXPECT_EQ(t->lines.size(), 1u);
}

TEST(PoolTrace, EveryCutOfAWrittenTraceIsRefused) {
  // A trace as the writer makes it, then every prefix that ends on a line boundary: only the
  // whole file reads (SPEC 9's traces must not pass when a recording was cut short).
  PoolTrace original;
  original.header = TraceHeader{small_config(), 5, {}};
  for (std::uint64_t t : {16u, 32u, 16u}) original.lines.push_back(TraceLine{Alloc{t}, std::nullopt, 0});
  std::ostringstream whole;
  write_pool_trace(whole, original);
  const std::string text = whole.str();
  ASSERT_EQ(text.substr(text.size() - 23), "{\"kvtwin_trace_end\":3}\n");
  for (std::size_t cut = text.find('\n') + 1; cut < text.size(); cut = text.find('\n', cut) + 1) {
    std::istringstream in(text.substr(0, cut));
    Result<PoolTrace> t = parse_pool_trace(in, "cut.jsonl");
    ASSERT_FALSE(t.ok()) << "cut after byte " << cut;
    EXPECT_THAT(t.error().message, ::testing::HasSubstr("it is truncated"));
  }
  std::istringstream in(text);
  EXPECT_TRUE(parse_pool_trace(in, "whole.jsonl").ok());
}

TEST(PoolTrace, AWriterThatIsNotClosedLeavesTheOldFile) {
  const std::string path = ::testing::TempDir() + "kvtwin-writer-" + std::to_string(::getpid()) + ".jsonl";
  {
    std::ofstream(path) << "the old trace\n";
  }
  {
    Result<PoolTraceWriter> w = PoolTraceWriter::open(path, TraceHeader{small_config(), 1, {}});
    ASSERT_TRUE(w.ok()) << w.error().message;
    ASSERT_TRUE(w->append(Op(Alloc{16}), std::nullopt).ok());
  }  // abandoned (the run failed): nothing replaces the old file
  std::ifstream in(path);
  std::string first;
  std::getline(in, first);
  EXPECT_EQ(first, "the old trace");
  std::remove(path.c_str());
}

TEST(PoolTrace, AnOverlongLineIsRefusedWithoutReadingItAll) {
  std::string text = header_to_line(TraceHeader{small_config(), 1, {}}) + "\n" + std::string(kMaxInputLineBytes + 1, ' ');
  text[text.size() - 1] = 'x';
  std::istringstream in(text);
  Result<PoolTrace> t = parse_pool_trace(in, "long.jsonl");
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(t.error().message, ::testing::HasSubstr("long.jsonl:2: the line is longer than 16777216 bytes"));
}

TEST(PoolTrace, WhatThePoolDecidesIsNotAReadingError) {
  // A layer the model lacks, a part its sub-pool lacks, a sub-pool the pool lacks, a buffer that
  // disagrees with its shape: the pool refuses them (a trace may expect that), the reader does not.
  const std::string text = header_to_line(TraceHeader{small_config(), 1, {}}) + "\n" +
                           R"({"op":"write","layer":32,"write_number":1,"batch":0,"expect":{"error":"out_of_range"}})" +
                           "\n" + R"({"op":"read","layer":0,"part":"kv","ids":[]})" + "\n" +
                           R"({"op":"move_pages","sub_pool":"swa","dst":[3],"src":[2]})" + "\n" +
                           R"({"op":"translate","ids":[1,2,3],"shape":[2,2]})" + "\n" +
                           R"({"op":"remap_indices","kv_indptr":[0,1,2,9],"kv_indices":[4,5],"bs":1})" + "\n" +
                           end_line(5) + "\n";
  std::istringstream in(text);
  Result<PoolTrace> t = parse_pool_trace(in, "b.jsonl");
  ASSERT_TRUE(t.ok()) << t.error().message;
  EXPECT_EQ(t->lines.size(), 5u);
  EXPECT_EQ(t->lines[0].expect->error().kind, ErrorKind::out_of_range);
}

}  // namespace
}  // namespace kvtwin::traces
