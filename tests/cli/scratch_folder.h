// A fresh scratch folder for the running test, shared by the CLI tests that run the binary: made
// under the system's temporary folder, named by the prefix, the process and the test, and removed
// when that test ends having passed. A failed test's folder is kept, so its inputs and outputs can
// be looked at; the path is in the test's output wherever an assertion prints it.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <string>
#include <system_error>
#include <utility>

#include <gtest/gtest.h>

namespace kvtwin::cli_test {

// Removes the folder of every test that passed when it ends (appended once to GoogleTest's listeners).
class ScratchCleaner : public ::testing::EmptyTestEventListener {
 public:
  explicit ScratchCleaner(std::string prefix) : prefix_(std::move(prefix)) {}
  static std::filesystem::path folder_of(const std::string& prefix, const char* test_name) {
    return std::filesystem::temp_directory_path() /
           (prefix + "-" + std::to_string(::getpid()) + "-" + test_name);
  }
  void OnTestEnd(const ::testing::TestInfo& info) override {
    if (!info.result()->Passed()) return;
    std::error_code ignored;
    std::filesystem::remove_all(folder_of(prefix_, info.name()), ignored);
  }

 private:
  std::string prefix_;
};

// The running test's scratch folder, empty ("kvtwin-bad-input" names /tmp/kvtwin-bad-input-PID-Test).
inline std::filesystem::path scratch_folder(const std::string& prefix) {
  static const bool cleaner_added = [&] {
    ::testing::UnitTest::GetInstance()->listeners().Append(new ScratchCleaner(prefix));
    return true;
  }();
  (void)cleaner_added;
  const std::filesystem::path dir =
      ScratchCleaner::folder_of(prefix, ::testing::UnitTest::GetInstance()->current_test_info()->name());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

}  // namespace kvtwin::cli_test
