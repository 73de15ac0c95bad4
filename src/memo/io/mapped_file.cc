// Implementation of io/mapped_file.h.
#include "memo/io/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "memo/core/error.h"

namespace memo {

MappedFile::MappedFile(const std::filesystem::path& path) : path_(path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw DataError(str("cannot open ", path.string(), ": ", std::strerror(errno)));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    throw DataError(str("cannot stat ", path.string(), ": ", std::strerror(err)));
  }
  size_bytes_ = size_t(st.st_size);
  if (size_bytes_ > 0) {
    data_ = ::mmap(nullptr, size_bytes_, PROT_READ, MAP_SHARED, fd, 0);
    if (data_ == MAP_FAILED) {
      const int err = errno;
      data_ = nullptr;
      ::close(fd);
      throw DataError(str("cannot map ", path.string(), ": ", std::strerror(err)));
    }
  }
  ::close(fd);  // the mapping keeps the file alive
}

MappedFile::~MappedFile() { release(); }

void MappedFile::release_pages(size_t offset_bytes, size_t size_bytes) const {
  if (!data_ || size_bytes == 0 || offset_bytes >= size_bytes_) return;
  const size_t page = size_t(::sysconf(_SC_PAGESIZE));
  const size_t begin = offset_bytes / page * page;
  const size_t end = std::min(size_bytes_, offset_bytes + size_bytes);
  // Advice only: a failure leaves the pages resident, which is what not asking would do.
  ::madvise(static_cast<char*>(data_) + begin, end - begin, MADV_DONTNEED);
}

void MappedFile::release() {
  if (data_) ::munmap(data_, size_bytes_);
  data_ = nullptr;
  size_bytes_ = 0;
}

MappedFile::MappedFile(MappedFile&& other) noexcept
    : path_(std::move(other.path_)),
      data_(std::exchange(other.data_, nullptr)),
      size_bytes_(std::exchange(other.size_bytes_, 0)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    release();
    path_ = std::move(other.path_);
    data_ = std::exchange(other.data_, nullptr);
    size_bytes_ = std::exchange(other.size_bytes_, 0);
  }
  return *this;
}

}  // namespace memo
