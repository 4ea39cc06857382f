// Request traces: real public LLM-serving traces, read as they are published.
//
//   Mooncake (kvcache-ai/Mooncake, FAST'25): JSON Lines, one request a line,
//     {"timestamp": ms, "input_length": tokens, "output_length": tokens, "hash_ids": [...]}
//     where hash_ids name the prompt's 512-token blocks (equal leading ids = a shared prefix);
//     other traces in this format use other block sizes (16 and 64 tokens are common), given by
//     RequestReadOptions::block_tokens (the CLI's --block-tokens).
//   Azure LLM inference 2023 (Azure/AzurePublicDataset): CSV with the header
//     TIMESTAMP,ContextTokens,GeneratedTokens  and wall-clock timestamps "2023-11-16 18:17:03.9799600".
//
// Both become a list of Requests with arrival times in microseconds relative to the first
// request read. The readers are strict: a problem is reported with the file, line and field, as an
// ErrorKind::malformed Error; any other format is ErrorKind::unsupported with the formats kvtwin
// reads. detect_format() also recognizes pool traces (pool_trace.h), so a command can take either.
// What a request does to a pool is the serving simulator's business (serving_sim.h).
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>
#include <string_view>
#include <vector>

#include "core/result.h"

namespace kvtwin::traces {

enum class TraceFormat : std::uint8_t { pool, mooncake, azure };

std::string_view format_name(TraceFormat format);
// "pool", "mooncake", "azure"; an error lists them.
Result<TraceFormat> parse_format_name(std::string_view name);

// The format of a file, from its first non-blank line. An unreadable file (or a folder) is an io
// Error; a first line that opens like JSON but does not parse is a malformed Error naming its line
// and column; a file in no known format is an unsupported Error that says what was found and
// what kvtwin reads. `line` is the first line's number in the file.
Result<TraceFormat> detect_format(const std::string& path);
Result<TraceFormat> detect_format_of_line(std::string_view first_line, std::string_view name, std::uint64_t line = 1);

// Tokens per hash_ids block in Mooncake traces (the FAST'25 release's README).
inline constexpr std::uint64_t kMooncakeBlockTokens = 512;

struct Request {
  std::uint64_t index = 0;       // 0-based position among the requests read
  std::uint64_t line = 0;        // line in the file
  std::uint64_t arrival_us = 0;  // relative to the first request of the file
  std::uint64_t input_tokens = 0;
  std::uint64_t output_tokens = 0;
  std::vector<std::int64_t> block_hashes;  // one per block_tokens of the prompt (last one partial); may be empty

  bool operator==(const Request&) const = default;
};

struct RequestTrace {
  TraceFormat format = TraceFormat::mooncake;
  std::string name;
  std::uint64_t block_tokens = 0;  // tokens per block_hashes entry; 0 when the trace has no prefix hashes
  bool block_tokens_given = false;  // block_tokens came from RequestReadOptions, not the format's default
  std::vector<Request> requests;
};

struct RequestReadOptions {
  std::uint64_t limit = 0;  // read at most this many requests; 0 = all
  std::uint64_t skip = 0;   // skip this many requests first (a slice from the middle)
  // Tokens per hash_ids block, overriding the format's (Mooncake: 512); 0 = the format's. Only
  // for formats with prefix hashes: an Azure trace with a block size is an invalid_argument Error.
  std::uint64_t block_tokens = 0;
};

// Reads a Mooncake or Azure trace (format must be one of those two).
Result<RequestTrace> parse_request_trace(std::istream& in, std::string name, TraceFormat format,
                                         const RequestReadOptions& options);
Result<RequestTrace> read_request_trace(const std::string& path, TraceFormat format, const RequestReadOptions& options);

// "2023-11-16 18:17:03.9799600" -> microseconds since 1970-01-01 00:00:00 (the fraction's digits
// past the sixth are dropped). `where` prefixes errors.
Result<std::uint64_t> parse_azure_timestamp_us(std::string_view text, std::string_view where);

}  // namespace kvtwin::traces
