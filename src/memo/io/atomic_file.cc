// POSIX implementation of io/atomic_file.h. The file descriptor is owned by one small RAII type.
#include "memo/io/atomic_file.h"

#include <fcntl.h>
#include <stdio.h>  // renameat2, RENAME_EXCHANGE (glibc >= 2.28)
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <system_error>
#include <utility>

#include "memo/core/error.h"

namespace memo {
namespace {

namespace fs = std::filesystem;

std::string reason(int err) { return std::error_code(err, std::generic_category()).message(); }

// One owned file descriptor; closes on destruction (errors there are ignored: destructors never
// throw, and every path that must be durable has already called fsync).
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

fs::path with_suffix(const fs::path& path, std::string_view suffix) {
  fs::path p = path.filename().empty() ? path.parent_path() : path;
  return p.parent_path() /
         (p.filename().string() + std::string(suffix) + std::to_string(::getpid()));
}

fs::path parent_or_dot(const fs::path& path) {
  fs::path parent = path.parent_path();
  return parent.empty() ? fs::path(".") : parent;
}

void write_all(int fd, std::string_view bytes, const fs::path& path) {
  while (!bytes.empty()) {
    ssize_t n = ::write(fd, bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw DataError(str("cannot write ", path.string(), ": ", reason(errno)));
    bytes.remove_prefix(size_t(n));
  }
}

// fsync of everything under a directory, then of the directory itself, so that a committed
// directory is durable however its files were written.
void fsync_tree(const fs::path& dir) {
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::end(it);
       it.increment(ec)) {
    if (it->is_regular_file(ec) || it->is_directory(ec)) fsync_path(it->path());
  }
  if (ec) throw DataError(str("cannot list ", dir.string(), ": ", ec.message()));
  fsync_path(dir);
}

}  // namespace

std::string read_file(const fs::path& path) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) throw DataError(str("cannot open ", path.string(), ": ", reason(errno)));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0)
    throw DataError(str("cannot stat ", path.string(), ": ", reason(errno)));
  if (S_ISDIR(st.st_mode))
    throw DataError(str("cannot open ", path.string(), ": it is a directory, expected a file"));
  std::string bytes;
  bytes.reserve(size_t(st.st_size));
  char buf[1 << 16];
  for (;;) {
    ssize_t n = ::read(fd.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw DataError(str("cannot read ", path.string(), ": ", reason(errno)));
    if (n == 0) break;
    bytes.append(buf, size_t(n));
  }
  return bytes;
}

void fsync_path(const fs::path& path) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0)
    throw DataError(str("cannot open ", path.string(), " to sync: ", reason(errno)));
  if (::fsync(fd.get()) != 0)
    throw DataError(str("cannot sync ", path.string(), ": ", reason(errno)));
}

void write_file_atomic(const fs::path& path, std::string_view bytes) {
  AtomicFileWriter writer(path);
  writer.append(bytes);
  writer.commit();
}

AtomicFileWriter::AtomicFileWriter(fs::path path)
    : path_(std::move(path)), temp_path_(with_suffix(path_, ".tmp-")) {
  fd_ = ::open(temp_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0)
    throw DataError(str("cannot write ", path_.string(), ": cannot create temporary file ",
                        temp_path_.string(), ": ", reason(errno)));
}

AtomicFileWriter::~AtomicFileWriter() {
  if (fd_ >= 0) {
    ::close(fd_);
    ::unlink(temp_path_.c_str());
  }
}

void AtomicFileWriter::append(std::string_view bytes) {
  MEMO_CHECK(fd_ >= 0, "append to ", path_.string(), " after commit");
  write_all(fd_, bytes, temp_path_);
  written_bytes_ += int64_t(bytes.size());
}

void AtomicFileWriter::commit() {
  MEMO_CHECK(fd_ >= 0, "commit of ", path_.string(), " twice");
  if (::fsync(fd_) != 0)
    throw DataError(str("cannot sync ", temp_path_.string(), ": ", reason(errno)));
  int fd = std::exchange(fd_, -1);
  if (::close(fd) != 0) {
    int err = errno;
    ::unlink(temp_path_.c_str());
    throw DataError(str("cannot write ", temp_path_.string(), ": ", reason(err)));
  }
  if (::rename(temp_path_.c_str(), path_.c_str()) != 0) {
    int err = errno;
    ::unlink(temp_path_.c_str());
    throw DataError(str("cannot replace ", path_.string(), ": ", reason(err)));
  }
  fsync_path(parent_or_dot(path_));
}

// Note [Atomic directory commit]
// The new directory is complete and fsynced under `<dir>.tmp-<pid>` before the target is touched.
// If the target does not exist, one rename(2) publishes it. If it exists, renameat2 with
// RENAME_EXCHANGE swaps the two names in one step and the old tree (now at the temporary name) is
// removed. Where the filesystem cannot exchange, the old directory is renamed aside to
// `<dir>.old-<pid>` and the new one renamed in: at every instant either the old or the new complete
// directory exists, under its own name or under the aside name. Readers resolve checkpoints
// through the `latest` file (io/checkpoint.h), which only ever names committed directories.
AtomicDirWriter::AtomicDirWriter(fs::path dir) : dir_(std::move(dir)) {
  if (dir_.filename().empty()) dir_ = dir_.parent_path();
  temp_dir_ = with_suffix(dir_, ".tmp-");
  std::error_code ec;
  fs::remove_all(temp_dir_, ec);  // a stale temporary from a crashed process with the same pid
  fs::create_directories(temp_dir_, ec);
  if (ec)
    throw DataError(str("cannot write ", dir_.string(), ": cannot create temporary directory ",
                        temp_dir_.string(), ": ", ec.message()));
}

AtomicDirWriter::~AtomicDirWriter() {
  if (committed_) return;
  std::error_code ec;
  fs::remove_all(temp_dir_, ec);
}

void AtomicDirWriter::commit() {
  MEMO_CHECK(!committed_, "commit of ", dir_.string(), " twice");
  fsync_tree(temp_dir_);
  std::error_code ec;
  fs::file_status target = fs::symlink_status(dir_, ec);
  if (fs::exists(target) && !fs::is_directory(target))
    throw DataError(str("cannot replace ", dir_.string(), ": it exists and is not a directory"));
  if (!fs::exists(target)) {
    if (::rename(temp_dir_.c_str(), dir_.c_str()) != 0)
      throw DataError(
          str("cannot rename ", temp_dir_.string(), " to ", dir_.string(), ": ", reason(errno)));
  } else if (::renameat2(AT_FDCWD, temp_dir_.c_str(), AT_FDCWD, dir_.c_str(), RENAME_EXCHANGE) ==
             0) {
    fs::remove_all(temp_dir_, ec);  // now the old tree; the new one is in place
  } else {
    fs::path aside = with_suffix(dir_, ".old-");
    fs::remove_all(aside, ec);
    if (::rename(dir_.c_str(), aside.c_str()) != 0)
      throw DataError(
          str("cannot move ", dir_.string(), " aside to ", aside.string(), ": ", reason(errno)));
    if (::rename(temp_dir_.c_str(), dir_.c_str()) != 0) {
      int err = errno;
      ::rename(aside.c_str(), dir_.c_str());  // put the old one back
      throw DataError(
          str("cannot rename ", temp_dir_.string(), " to ", dir_.string(), ": ", reason(err)));
    }
    fs::remove_all(aside, ec);
  }
  committed_ = true;
  fsync_path(parent_or_dot(dir_));
}

}  // namespace memo
