// This binary run again (fresh_process.h).
#include "tools/kvtwin/fresh_process.h"

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;

namespace kvtwin::cli {

Result<int> run_this_binary(const std::vector<std::string>& args) {
  const char* self = "/proc/self/exe";
  std::vector<char*> argv;
  std::string name = "kvtwin";
  argv.push_back(name.data());
  std::vector<std::string> owned = args;  // posix_spawn takes char* const*
  for (std::string& a : owned) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::fflush(stdout);  // what this process printed comes first
  std::fflush(stderr);
  pid_t pid = 0;
  if (const int err = posix_spawn(&pid, self, nullptr, nullptr, argv.data(), environ); err != 0)
    return make_error(ErrorKind::environment, std::string("cannot start a fresh kvtwin process: ") + std::strerror(err));
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR)
      return make_error(ErrorKind::environment, std::string("waiting for the fresh kvtwin process: ") + std::strerror(errno));
  }
  if (WIFSIGNALED(status))
    return make_error(ErrorKind::environment, "the fresh kvtwin process ended by signal " +
                                                  std::to_string(WTERMSIG(status)) + " (" + strsignal(WTERMSIG(status)) + ")");
  return WEXITSTATUS(status);
}

}  // namespace kvtwin::cli
