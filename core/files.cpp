// Inputs with clear errors, capped lines, outputs that cannot tear, and interrupt cleanup (files.h).
#include "core/files.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>

#include "core/printable.h"

namespace kvtwin {
namespace {

namespace fs = std::filesystem;

// ---------------------------------------------------------------- the interrupt registry
//
// A fixed table the signal handler can read without allocating or locking: each slot holds one
// output's temporary and target paths and its state. A slot is claimed with a compare-exchange
// and published by its state; the handler only reads slots in the open, committing or
// committed states.

constexpr int kSlots = 64;
constexpr std::size_t kPathChars = 1024;

enum SlotState : int { kFree = 0, kFilling = 1, kOpen = 2, kCommitting = 3, kCommitted = 4 };

struct Slot {
  std::atomic<int> state{kFree};
  char temp[kPathChars];
  char target[kPathChars];
};

Slot g_slots[kSlots];
std::atomic<std::uint64_t> g_unlisted_commits{0};  // committed outputs whose slot was reused
std::atomic<std::uint64_t> g_temp_counter{0};
const char* g_program = "kvtwin";

int claim_slot(const std::string& temp, const std::string& target) {
  if (temp.size() >= kPathChars || target.size() >= kPathChars) return -1;
  const auto fill = [&](int i) {
    std::memcpy(g_slots[i].temp, temp.c_str(), temp.size() + 1);
    std::memcpy(g_slots[i].target, target.c_str(), target.size() + 1);
    g_slots[i].state.store(kOpen);
    return i;
  };
  for (int i = 0; i < kSlots; ++i) {
    int expected = kFree;
    if (g_slots[i].state.compare_exchange_strong(expected, kFilling)) return fill(i);
  }
  for (int i = 0; i < kSlots; ++i) {  // all taken: reuse a committed output's slot, and count it
    int expected = kCommitted;
    if (g_slots[i].state.compare_exchange_strong(expected, kFilling)) {
      ++g_unlisted_commits;
      return fill(i);
    }
  }
  return -1;  // not registered: an interrupt leaves this temporary file behind
}

void set_slot(int slot, int state) {
  if (slot >= 0) g_slots[slot].state.store(state);
}

// Async-signal-safe message building.
struct SignalText {
  char buffer[8192];
  std::size_t used = 0;
  void add(const char* s) {
    while (*s != '\0' && used + 1 < sizeof buffer) buffer[used++] = *s++;
  }
  void add_number(std::uint64_t v) {
    char digits[24];
    int n = 0;
    do {
      digits[n++] = static_cast<char>('0' + v % 10);
      v /= 10;
    } while (v != 0);
    while (n > 0 && used + 1 < sizeof buffer) buffer[used++] = digits[--n];
  }
  void flush() {
    std::size_t done = 0;
    while (done < used) {
      const ssize_t n = ::write(STDERR_FILENO, buffer + done, used - done);
      if (n <= 0) break;
      done += static_cast<std::size_t>(n);
    }
  }
};

extern "C" void on_interrupt(int signal_number) {
  SignalText t;
  t.add("\n");
  t.add(g_program);
  t.add(signal_number == SIGINT ? ": interrupted by SIGINT" : ": interrupted by SIGTERM");
  // Finish what is being renamed (the temporary file is complete), remove what is unfinished.
  const std::uint64_t unlisted = g_unlisted_commits.load();
  bool any_written = false;
  for (Slot& s : g_slots) {
    const int state = s.state.load();
    if (state == kCommitting) {
      if (::rename(s.temp, s.target) == 0 || errno == ENOENT) s.state.store(kCommitted);
    }
  }
  t.add("; wrote: ");
  for (Slot& s : g_slots) {
    if (s.state.load() != kCommitted) continue;
    t.add(any_written ? ", " : "");
    t.add(s.target);
    any_written = true;
  }
  if (unlisted != 0) {
    t.add(any_written ? " and " : "");
    t.add_number(unlisted);
    t.add(" earlier outputs");
    any_written = true;
  }
  if (!any_written) t.add("nothing");
  bool any_removed = false;
  for (Slot& s : g_slots) {
    if (s.state.load() != kOpen) continue;
    ::unlink(s.temp);
    t.add(any_removed ? ", " : "; not written (left as it was, or absent): ");
    t.add(s.target);
    any_removed = true;
  }
  t.add("\n");
  t.flush();
  ::signal(signal_number, SIG_DFL);
  ::raise(signal_number);
}

std::string errno_text(int code) { return std::strerror(code); }

}  // namespace

// ---------------------------------------------------------------- inputs

Result<std::unique_ptr<std::ifstream>> open_input(const std::string& path, std::string_view what) {
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);
  if (ec || !fs::exists(status))
    return make_error(ErrorKind::io,
                      printable(path, 400) + ": cannot open the " + std::string(what) + ": no such file; check the path");
  if (fs::is_directory(status))
    return make_error(ErrorKind::io,
                      printable(path, 400) + " is a folder; give the path of a " + std::string(what) + " file");
  auto in = std::make_unique<std::ifstream>(path, std::ios::binary);
  if (!*in)
    return make_error(ErrorKind::io, printable(path, 400) + ": cannot open the " + std::string(what) +
                                         " for reading (" + errno_text(errno) + ")");
  return in;
}

LineRead read_line(std::istream& in, std::string& text, std::size_t max_bytes) {
  text.clear();
  std::streambuf* buffer = in.rdbuf();
  if (buffer == nullptr || !in.good()) {
    in.setstate(std::ios::failbit);
    return LineRead::end;
  }
  bool any = false;
  while (true) {
    const int c = buffer->sbumpc();
    if (c == std::char_traits<char>::eof()) {
      in.setstate(any ? std::ios::eofbit : std::ios::eofbit | std::ios::failbit);
      if (!any) return LineRead::end;
      break;
    }
    any = true;
    if (c == '\n') break;
    if (text.size() >= max_bytes) return LineRead::too_long;
    text.push_back(static_cast<char>(c));
  }
  if (!text.empty() && text.back() == '\r') text.pop_back();
  return LineRead::line;
}

// ---------------------------------------------------------------- outputs

OutputFile::OutputFile(std::string path, std::string temp, std::unique_ptr<std::ofstream> out, int slot)
    : path_(std::move(path)), temp_(std::move(temp)), out_(std::move(out)), slot_(slot) {}

OutputFile::OutputFile(OutputFile&& other) noexcept
    : path_(std::move(other.path_)), temp_(std::move(other.temp_)), out_(std::move(other.out_)), slot_(other.slot_) {
  other.slot_ = -1;
  other.temp_.clear();
}

OutputFile::~OutputFile() { discard(); }

Result<OutputFile> OutputFile::create(const std::string& path) { return create_with(path, ".tmp-"); }

Result<OutputFile> OutputFile::create_probe(const std::string& path) { return create_with(path, ".probe-"); }

Result<OutputFile> OutputFile::create_with(const std::string& path, const char* temp_kind) {
  const fs::path target(path);
  std::error_code ec;
  if (fs::is_directory(target, ec))
    return make_error(ErrorKind::io, printable(path, 400) + " is a folder; give the path of a file to write");
  const fs::path folder = target.parent_path().empty() ? fs::path(".") : target.parent_path();
  if (!fs::is_directory(folder, ec))
    return make_error(ErrorKind::io, printable(path, 400) + ": the folder " + printable(folder.string(), 400) +
                                         " does not exist; create it first");
  const std::string temp = (folder / ("." + target.filename().string() + temp_kind + std::to_string(::getpid()) +
                                      "-" + std::to_string(g_temp_counter++)))
                               .string();
  const int slot = claim_slot(temp, path);
  // O_EXCL: never write through a name someone else made.
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  if (fd < 0) {
    const int code = errno;
    set_slot(slot, kFree);
    return make_error(ErrorKind::io, printable(path, 400) + ": cannot create a file in " +
                                         printable(folder.string(), 400) + " (" + errno_text(code) + ")");
  }
  ::close(fd);
  auto out = std::make_unique<std::ofstream>(temp, std::ios::binary | std::ios::trunc);
  if (!*out) {
    ::unlink(temp.c_str());
    set_slot(slot, kFree);
    return make_error(ErrorKind::io, printable(path, 400) + ": cannot write " + printable(temp, 400));
  }
  return OutputFile(path, temp, std::move(out), slot);
}

Status OutputFile::commit() {
  if (temp_.empty()) return make_error(ErrorKind::internal, path_ + ": committed twice");
  out_->flush();
  const bool written = out_->good();
  out_->close();
  if (!written || out_->fail()) {
    const std::string why = errno_text(errno);
    discard();
    return make_error(ErrorKind::io, printable(path_, 400) + ": writing failed (" + why + "); nothing was written");
  }
  // The bytes reach the disk before the name does.
  if (const int fd = ::open(temp_.c_str(), O_RDONLY | O_CLOEXEC); fd >= 0) {
    (void)::fsync(fd);
    ::close(fd);
  }
  set_slot(slot_, kCommitting);
  if (::rename(temp_.c_str(), path_.c_str()) != 0) {
    const int code = errno;
    set_slot(slot_, kOpen);
    discard();
    return make_error(ErrorKind::io, printable(path_, 400) + ": cannot rename the finished file over it (" +
                                         errno_text(code) + "); nothing was written");
  }
  set_slot(slot_, kCommitted);
  slot_ = -1;
  temp_.clear();
  return ok_status();
}

void OutputFile::discard() {
  if (temp_.empty()) return;
  if (out_) out_->close();
  ::unlink(temp_.c_str());
  set_slot(slot_, kFree);
  slot_ = -1;
  temp_.clear();
}

Status write_file_atomically(const std::string& path, std::string_view contents) {
  if (path == "-") {
    std::cout << contents;
    std::cout.flush();
    return ok_status();
  }
  KVTWIN_TRY(OutputFile file, OutputFile::create(path));
  file.stream().write(contents.data(), static_cast<std::streamsize>(contents.size()));
  return file.commit();
}

Status check_output_path(const std::string& path, std::string_view option) {
  if (path == "-") return ok_status();
  if (path.empty()) return make_error(ErrorKind::invalid_argument, std::string(option) + " is empty; give a file name");
  Result<OutputFile> probe = OutputFile::create_probe(path);
  if (!probe.ok()) return probe.error().with_context(std::string(option) + ": cannot write ");
  probe->discard();
  return ok_status();
}

Status check_output_folder(const std::string& path, std::string_view option) {
  const std::string name = std::string(option) + " " + printable(path, 400);
  if (path.empty()) return make_error(ErrorKind::invalid_argument, std::string(option) + " is empty; give a folder");
  std::error_code ec;
  fs::path at = fs::absolute(path, ec);
  while (!at.empty() && !fs::exists(at, ec) && at != at.parent_path()) at = at.parent_path();
  if (!fs::is_directory(at, ec))
    return make_error(ErrorKind::io, name + ": " + printable(at.string(), 400) + " is not a folder; give a folder");
  if (::access(at.c_str(), W_OK | X_OK) != 0)
    return make_error(ErrorKind::io, name + ": cannot write in " + printable(at.string(), 400) + " (" +
                                         errno_text(errno) + ")");
  return ok_status();
}

bool same_file(const std::string& a, const std::string& b) {
  std::error_code ec;
  if (fs::exists(a, ec) && fs::exists(b, ec)) {
    const bool same = fs::equivalent(a, b, ec);
    if (!ec) return same;
  }
  const fs::path x = fs::weakly_canonical(fs::absolute(a, ec), ec);
  const fs::path y = fs::weakly_canonical(fs::absolute(b, ec), ec);
  return x == y;
}

void install_interrupt_cleanup(const char* program) {
  g_program = program;
  struct sigaction action {};
  action.sa_handler = on_interrupt;
  sigemptyset(&action.sa_mask);
  sigaddset(&action.sa_mask, SIGINT);
  sigaddset(&action.sa_mask, SIGTERM);
  action.sa_flags = 0;
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
}

}  // namespace kvtwin
