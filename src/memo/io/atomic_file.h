// Whole-file reads and crash-safe writes: a reader never sees a half-written file or directory.
// Files: temporary sibling, write, fsync, rename, fsync the parent. Directories: build everything
// in a temporary sibling, fsync, then swap it in (see Note [Atomic directory commit]). One writer
// per target path at a time (temporaries are named by pid, not by thread). Every failure throws
// DataError naming the path and the system's reason; existing files survive.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

namespace memo {

// The whole file as bytes. Throws DataError "cannot open <path>: <reason>".
std::string read_file(const std::filesystem::path& path);

// Replaces `path` with `bytes` atomically: afterwards it holds either the old or the new content.
void write_file_atomic(const std::filesystem::path& path, std::string_view bytes);

// Streams a file into `<path>.tmp-<pid>` and renames it over `path` on commit(). Destroying an
// uncommitted writer removes the temporary file and leaves `path` untouched.
class AtomicFileWriter {
 public:
  explicit AtomicFileWriter(std::filesystem::path path);
  ~AtomicFileWriter();
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

  void append(std::string_view bytes);
  void commit();  // fsync, close, rename over the target, fsync the parent directory
  int64_t written_bytes() const { return written_bytes_; }

 private:
  std::filesystem::path path_;
  std::filesystem::path temp_path_;
  int fd_ = -1;
  int64_t written_bytes_ = 0;
};

// Builds a directory in `<dir>.tmp-<pid>` (path()) and swaps it in as `dir` on commit().
// Destroying an uncommitted writer removes the temporary directory; `dir` is never touched.
class AtomicDirWriter {
 public:
  explicit AtomicDirWriter(std::filesystem::path dir);
  ~AtomicDirWriter();
  AtomicDirWriter(const AtomicDirWriter&) = delete;
  AtomicDirWriter& operator=(const AtomicDirWriter&) = delete;

  const std::filesystem::path& path() const { return temp_dir_; }  // write the contents here
  const std::filesystem::path& target() const { return dir_; }
  void commit();

 private:
  std::filesystem::path dir_;
  std::filesystem::path temp_dir_;
  bool committed_ = false;
};

// fsync of a file or directory; throws DataError naming the path.
void fsync_path(const std::filesystem::path& path);

}  // namespace memo
