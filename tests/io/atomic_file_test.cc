#include "memo/io/atomic_file.h"

#include <gtest/gtest.h>

#include "memo/core/error.h"
#include "test_util.h"

namespace memo {
namespace {

namespace fs = std::filesystem;
using test::error_message;
using test::TempDir;

int count_entries(const fs::path& dir) {
  int n = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir)) ++n;
  return n;
}

TEST(AtomicFile, write_then_read_round_trips_and_replaces) {
  TempDir tmp;
  fs::path p = tmp / "a.txt";
  write_file_atomic(p, "first");
  EXPECT_EQ(read_file(p), "first");
  write_file_atomic(p, std::string("sec\0ond", 7));
  EXPECT_EQ(read_file(p), std::string("sec\0ond", 7));
  EXPECT_EQ(count_entries(tmp.path()), 1);  // no temporary left behind
}

TEST(AtomicFile, read_missing_file_names_path_and_reason) {
  TempDir tmp;
  std::string msg = error_message<DataError>([&] { read_file(tmp / "missing.bin"); });
  EXPECT_NE(msg.find("cannot open"), std::string::npos) << msg;
  EXPECT_NE(msg.find("missing.bin"), std::string::npos) << msg;
  EXPECT_NE(msg.find("No such file"), std::string::npos) << msg;
}

TEST(AtomicFile, read_directory_is_data_error) {
  TempDir tmp;
  std::string msg = error_message<DataError>([&] { read_file(tmp.path()); });
  EXPECT_NE(msg.find("directory"), std::string::npos) << msg;
}

TEST(AtomicFile, failed_write_leaves_existing_target_untouched) {
  TempDir tmp;
  // A non-empty directory cannot be replaced by a file: the rename fails after the data is written.
  fs::create_directories(tmp / "target" / "inside");
  std::string msg = error_message<DataError>([&] { write_file_atomic(tmp / "target", "x"); });
  EXPECT_NE(msg.find("target"), std::string::npos) << msg;
  EXPECT_TRUE(fs::is_directory(tmp / "target" / "inside"));
  EXPECT_EQ(count_entries(tmp.path()), 1);  // the temporary file was removed
}

TEST(AtomicFile, write_into_missing_directory_names_path) {
  TempDir tmp;
  std::string msg = error_message<DataError>([&] { write_file_atomic(tmp / "no" / "f", "x"); });
  EXPECT_NE(msg.find((tmp / "no" / "f").string()), std::string::npos) << msg;
}

TEST(AtomicFile, uncommitted_writer_leaves_old_content) {
  TempDir tmp;
  fs::path p = tmp / "a.txt";
  write_file_atomic(p, "old");
  {
    AtomicFileWriter w(p);
    w.append("new but never committed");
  }
  EXPECT_EQ(read_file(p), "old");
  EXPECT_EQ(count_entries(tmp.path()), 1);
}

TEST(AtomicDir, commit_creates_then_replaces_directory) {
  TempDir tmp;
  fs::path d = tmp / "ckpt";
  {
    AtomicDirWriter w(d);
    write_file_atomic(w.path() / "a", "1");
    EXPECT_FALSE(fs::exists(d));  // nothing visible before commit
    w.commit();
  }
  EXPECT_EQ(read_file(d / "a"), "1");
  {
    AtomicDirWriter w(d);
    write_file_atomic(w.path() / "b", "2");
    w.commit();
  }
  EXPECT_FALSE(fs::exists(d / "a"));  // replaced as a whole, not merged
  EXPECT_EQ(read_file(d / "b"), "2");
  EXPECT_EQ(count_entries(tmp.path()), 1);  // no temporary or aside directory left
}

TEST(AtomicDir, uncommitted_writer_removes_temp_and_keeps_old) {
  TempDir tmp;
  fs::path d = tmp / "ckpt";
  {
    AtomicDirWriter w(d);
    write_file_atomic(w.path() / "a", "old");
    w.commit();
  }
  {
    AtomicDirWriter w(d);
    write_file_atomic(w.path() / "a", "new");
    EXPECT_TRUE(fs::exists(w.path()));
  }
  EXPECT_EQ(read_file(d / "a"), "old");
  EXPECT_EQ(count_entries(tmp.path()), 1);
}

TEST(AtomicDir, refuses_to_replace_a_file) {
  TempDir tmp;
  write_file_atomic(tmp / "f", "keep");
  AtomicDirWriter w(tmp / "f");
  std::string msg = error_message<DataError>([&] { w.commit(); });
  EXPECT_NE(msg.find("not a directory"), std::string::npos) << msg;
  EXPECT_EQ(read_file(tmp / "f"), "keep");
}

}  // namespace
}  // namespace memo
