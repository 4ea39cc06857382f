// The files kvtwin is given and the files it writes.
//
// Inputs: open_input() names what is wrong with a path before anything is read (missing, a
// folder, unreadable), and read_line() caps a line's length, so that /dev/zero given as a trace
// is refused after kMaxInputLineBytes instead of growing memory without bound.
//
// Outputs cannot tear: OutputFile writes to a temporary name beside the target (same folder, so
// the rename is atomic) and renames it over the target only on commit(); a run that fails,
// throws or is killed leaves the old file, or none. check_output_path() tries the same creation
// up front, so a --json or --out that cannot be written is refused before a long run rather than
// after it. install_interrupt_cleanup() makes SIGINT and SIGTERM remove every unfinished
// temporary file and print which outputs were written and which were not, then die of the signal.
//
// Not covered: fsync of the folder after the rename (a power cut may forget the rename; it never
// leaves a half-written file under the target's name).
#pragma once

#include <cstddef>
#include <cstdint>
#include <fstream>
#include <istream>
#include <memory>
#include <string>
#include <string_view>

#include "core/result.h"

namespace kvtwin {

// The longest line a line-oriented reader accepts (pool traces, Mooncake JSON Lines, Azure CSV).
inline constexpr std::size_t kMaxInputLineBytes = std::size_t{16} << 20;

// Opens `path` for reading. io Errors: "PATH: no such file", "PATH is a folder; give a file",
// "PATH: cannot open ... (permission denied)". `what` names the input ("trace", "spec file").
Result<std::unique_ptr<std::ifstream>> open_input(const std::string& path, std::string_view what);

enum class LineRead : std::uint8_t { line, end, too_long };
// Reads the next line into `text` (without its "\n" or "\r\n"). too_long: the line exceeds
// `max_bytes` (the stream is left inside it; stop reading).
LineRead read_line(std::istream& in, std::string& text, std::size_t max_bytes = kMaxInputLineBytes);

// A file written whole or not at all.
class OutputFile {
 public:
  // Creates the temporary file beside `path`. io Error when the folder does not exist or cannot
  // be written, or `path` is a folder.
  static Result<OutputFile> create(const std::string& path);
  // The same creation for a writability probe: its temporary file is named ".probe-" rather
  // than ".tmp-", so a probe is never mistaken for an output being written.
  static Result<OutputFile> create_probe(const std::string& path);

  OutputFile(OutputFile&& other) noexcept;
  OutputFile& operator=(OutputFile&&) = delete;
  OutputFile(const OutputFile&) = delete;
  ~OutputFile();  // not committed: the temporary file is removed, the target untouched

  std::ostream& stream() { return *out_; }
  const std::string& path() const { return path_; }
  // The temporary file the stream writes (for a writer that publishes snapshots of it).
  const std::string& temp_path() const { return temp_; }
  // Flushes, syncs and renames the temporary file over the target. io Error on any failure
  // (disk full); the target is then untouched.
  Status commit();
  // Removes the temporary file; the target is untouched.
  void discard();

 private:
  static Result<OutputFile> create_with(const std::string& path, const char* temp_kind);
  OutputFile(std::string path, std::string temp, std::unique_ptr<std::ofstream> out, int slot);
  std::string path_;
  std::string temp_;
  std::unique_ptr<std::ofstream> out_;
  int slot_ = -1;  // in the interrupt registry
};

// Writes `contents` to `path` through an OutputFile. "-" writes to stdout.
Status write_file_atomically(const std::string& path, std::string_view contents);

// Whether `path` could be written by an OutputFile (its folder exists and is writable, and it
// is not a folder): the same creation, tried and undone. `option` names it in the error
// ("--json"). "-" (stdout) is always writable.
Status check_output_path(const std::string& path, std::string_view option);

// Whether a folder for outputs could be used: it exists and is writable, or it can be created
// (its nearest existing ancestor is a writable folder). Nothing is created.
Status check_output_folder(const std::string& path, std::string_view option);

// True when the two paths name the same file (the same inode when both exist, else the same
// absolute, normalized path).
bool same_file(const std::string& a, const std::string& b);

// SIGINT and SIGTERM: remove every unfinished OutputFile's temporary file, print to stderr
// "PROGRAM: interrupted by SIGINT; wrote ...; not written: ..." and die of the signal.
void install_interrupt_cleanup(const char* program);

}  // namespace kvtwin
