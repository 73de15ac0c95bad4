// A read-only memory map of a whole file (POSIX mmap), the way token shards are read: pages come
// from the page cache on first touch and are never copied into the process's heap. Move-only
// owner; views into bytes() die with it.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string_view>

namespace memo {

class MappedFile {
 public:
  // Maps `path`. A missing or unreadable file: DataError naming the path and the system's reason.
  // An empty file maps to an empty view.
  explicit MappedFile(const std::filesystem::path& path);
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  std::string_view bytes() const { return {static_cast<const char*>(data_), size_bytes_}; }
  // Drops bytes [offset, offset + size) (widened to whole pages) from this process's resident
  // memory (madvise MADV_DONTNEED). The map is read-only and shared, so nothing is lost: a later
  // read faults the pages back in from the page cache or the file. Views stay valid.
  void release_pages(size_t offset_bytes, size_t size_bytes) const;
  const std::filesystem::path& path() const { return path_; }

 private:
  void release();
  std::filesystem::path path_;
  void* data_ = nullptr;
  size_t size_bytes_ = 0;
};

}  // namespace memo
