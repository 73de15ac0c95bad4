// Shared helpers for memo's tests: a scratch directory, the memo binary, the source tree.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <system_error>

namespace memo::test {

// A fresh directory under the system temp dir, named after the running test, removed with
// everything in it when the test ends. Tests write only here.
class TempDir {
 public:
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string name = "memo-test-" + std::to_string(::getpid()) + "-" +
                       (info ? std::string(info->test_suite_name()) + "." + info->name() : "x");
    path_ = std::filesystem::temp_directory_path() / name;
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }
  // A path inside as a string, to splice into command lines.
  std::string str(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

// The message of the memo::Error subclass E thrown by f; fails the test if none is thrown.
template <class E, class F>
std::string error_message(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected an exception";
  return "";
}

inline std::string env_or(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v ? v : fallback;
}
// Set by CTest (CMakeLists.txt); the fallbacks serve a run from the build directory.
inline std::string memo_bin() { return env_or("MEMO_BIN", "./memo"); }
inline std::string source_dir() { return env_or("MEMO_SOURCE_DIR", ".."); }

struct CommandResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};

// Runs a shell command, capturing its output and exit status.
inline CommandResult run_command(const std::string& cmd) {
  CommandResult r;
  FILE* pipe = ::popen((cmd + " 2>&1").c_str(), "r");
  if (!pipe) return r;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, pipe)) > 0) r.output.append(buf, n);
  const int status = ::pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

// Runs a `memo` command that must fail cleanly: non-zero exit, one line "memo: error: ..." that
// names `needle`.
inline void expect_clean_failure(const std::string& cmd, const std::string& needle) {
  const CommandResult r = run_command(cmd);
  EXPECT_NE(r.exit_code, 0) << cmd;
  EXPECT_NE(r.output.find(needle), std::string::npos) << "output: " << r.output;
  EXPECT_NE(r.output.find("memo: error: "), std::string::npos) << r.output;
  EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << "not one line: " << r.output;
}

}  // namespace memo::test
