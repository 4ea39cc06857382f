// The files kvtwin reads and writes (core/files.h): inputs named precisely when they cannot be
// read, lines capped, outputs that appear whole or not at all (the old file survives a failed or
// abandoned write), and output paths checked before anything runs.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/files.h"

namespace kvtwin {
namespace {

using ::testing::HasSubstr;
namespace fs = std::filesystem;

class FilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("kvtwin-files-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  static std::string read(const std::string& p) {
    std::ifstream in(p, std::ios::binary);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }
  // Files in the folder other than `except`: temporary files left behind would show here.
  std::size_t entries() const {
    std::size_t n = 0;
    for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir_)) ++n;
    return n;
  }

  fs::path dir_;
};

TEST_F(FilesTest, InputsThatCannotBeReadAreNamed) {
  Result<std::unique_ptr<std::ifstream>> missing = open_input(path("absent.jsonl"), "trace");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().kind, ErrorKind::io);
  EXPECT_THAT(missing.error().message, HasSubstr("absent.jsonl: cannot open the trace: no such file"));
  Result<std::unique_ptr<std::ifstream>> folder = open_input(dir_.string(), "trace");
  ASSERT_FALSE(folder.ok());
  EXPECT_THAT(folder.error().message, HasSubstr("is a folder; give the path of a trace file"));
}

TEST_F(FilesTest, LinesAreReadWithoutTheirEndsAndCapped) {
  std::istringstream in("one\r\ntwo\n\nlast-without-newline");
  std::string text;
  EXPECT_EQ(read_line(in, text), LineRead::line);
  EXPECT_EQ(text, "one");
  EXPECT_EQ(read_line(in, text), LineRead::line);
  EXPECT_EQ(text, "two");
  EXPECT_EQ(read_line(in, text), LineRead::line);
  EXPECT_EQ(text, "");
  EXPECT_EQ(read_line(in, text), LineRead::line);
  EXPECT_EQ(text, "last-without-newline");
  EXPECT_EQ(read_line(in, text), LineRead::end);

  std::istringstream long_line(std::string(100, 'x') + "\nshort\n");
  EXPECT_EQ(read_line(long_line, text, 100), LineRead::line) << "exactly the cap is allowed";
  std::istringstream too_long(std::string(101, 'x') + "\n");
  EXPECT_EQ(read_line(too_long, text, 100), LineRead::too_long);
  EXPECT_LE(text.size(), 100u) << "nothing past the cap is kept";
}

TEST_F(FilesTest, AnOutputAppearsOnlyWhenCommitted) {
  const std::string target = path("report.json");
  {
    Result<OutputFile> out = OutputFile::create(target);
    ASSERT_TRUE(out.ok()) << out.error().message;
    out->stream() << "partial";
    EXPECT_FALSE(fs::exists(target)) << "not under its name before commit()";
    EXPECT_EQ(entries(), 1u) << "the temporary file, beside it";
  }
  EXPECT_FALSE(fs::exists(target)) << "abandoned: no file";
  EXPECT_EQ(entries(), 0u) << "and no temporary file left behind";

  ASSERT_TRUE(write_file_atomically(target, "old contents\n").ok());
  EXPECT_EQ(read(target), "old contents\n");
  {
    Result<OutputFile> out = OutputFile::create(target);
    ASSERT_TRUE(out.ok());
    out->stream() << "new contents, never finished";
    out->discard();
  }
  EXPECT_EQ(read(target), "old contents\n") << "an abandoned rewrite leaves the old file as it was";
  Result<OutputFile> out = OutputFile::create(target);
  ASSERT_TRUE(out.ok());
  out->stream() << "new contents\n";
  ASSERT_TRUE(out->commit().ok());
  EXPECT_EQ(read(target), "new contents\n");
  EXPECT_EQ(entries(), 1u);
}

TEST_F(FilesTest, OutputPathsAreCheckedBeforeAnyRun) {
  EXPECT_TRUE(check_output_path(path("fine.json"), "--json").ok());
  EXPECT_FALSE(fs::exists(path("fine.json"))) << "the check leaves nothing behind";
  EXPECT_EQ(entries(), 0u);
  EXPECT_TRUE(check_output_path("-", "--json").ok()) << "stdout";

  Status missing_folder = check_output_path(path("no/such/folder/x.json"), "--json");
  ASSERT_FALSE(missing_folder.ok());
  EXPECT_EQ(missing_folder.error().kind, ErrorKind::io);
  EXPECT_THAT(missing_folder.error().message, HasSubstr("--json: cannot write "));
  EXPECT_THAT(missing_folder.error().message, HasSubstr("does not exist; create it first"));

  Status a_folder = check_output_path(dir_.string(), "--out");
  ASSERT_FALSE(a_folder.ok());
  EXPECT_THAT(a_folder.error().message, HasSubstr("is a folder"));

  EXPECT_TRUE(check_output_folder(path("new/nested"), "--out").ok()) << "can be created";
  EXPECT_FALSE(fs::exists(path("new"))) << "but is not";
  std::ofstream(path("plain")) << "x";
  EXPECT_FALSE(check_output_folder(path("plain/below"), "--out").ok()) << "below a file";
}

TEST_F(FilesTest, SameFileSeesThroughSpellings) {
  std::ofstream(path("in.jsonl")) << "x";
  EXPECT_TRUE(same_file(path("in.jsonl"), (dir_ / "." / "in.jsonl").string()));
  EXPECT_TRUE(same_file(path("in.jsonl"), (dir_ / "sub" / ".." / "in.jsonl").string()));
  EXPECT_FALSE(same_file(path("in.jsonl"), path("out.jsonl")));
  fs::create_symlink(path("in.jsonl"), path("link.jsonl"));
  EXPECT_TRUE(same_file(path("in.jsonl"), path("link.jsonl")));
}

}  // namespace
}  // namespace kvtwin
