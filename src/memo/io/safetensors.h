// The safetensors format (https://huggingface.co/docs/safetensors): an 8-byte little-endian header
// length N, N bytes of JSON header {name: {"dtype", "shape", "data_offsets": [begin, end)}, plus an
// optional "__metadata__" string map}, then the data buffer. memo writes F32 or BF16 and adds a
// CRC-32C of the data buffer to __metadata__ ("memo_checksum": "crc32c:<8 hex digits>"); the reader
// checks every size, offset and dtype, and the checksum when present (files from other tools lack
// it). The reader memory-maps the file and gives back each tensor's pages once read_into has
// copied it (and the checksum pass each 64 MiB it has summed), so loading a model holds the model
// plus about one tensor of the file, not two models. The file must not be truncated while open
// (the map would then fault), which memo's atomic writes never do.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "memo/core/dtype.h"
#include "memo/io/mapped_file.h"
#include "memo/model/params.h"

namespace memo {

// One tensor to write: row-major fp32, numel = product of shape (1 for shape []). Non-owning.
struct NamedTensor {
  std::string name;
  std::vector<int64_t> shape;
  const float* data = nullptr;
};

// The metadata key holding memo's checksum; callers may not set it.
inline constexpr const char* kChecksumKey = "memo_checksum";

// Writes the tensors in the given order, atomically, each in `dtype`: F32 as they are, or BF16
// rounded to nearest even (a NaN stays a NaN). Names must be unique, non-empty and not
// "__metadata__"; shapes non-negative; dtype kF32 or kBF16. Throws DataError on a bad tensor list
// or a failed write.
void write_safetensors(const std::filesystem::path& path, const std::vector<NamedTensor>& tensors,
                       const std::map<std::string, std::string>& metadata = {},
                       DType dtype = DType::kF32);

class SafetensorsFile {
 public:
  // Maps and validates the whole file. Missing file: DataError; anything malformed, truncated,
  // overlapping, not covering the data buffer, of unknown dtype or failing the checksum:
  // FormatError naming the file (and the tensor, where there is one).
  explicit SafetensorsFile(const std::filesystem::path& path);

  const std::filesystem::path& path() const { return path_; }
  bool contains(const std::string& name) const { return entries_.count(name) > 0; }
  std::vector<std::string> names() const { return names_; }  // in data-buffer order
  // The accessors below throw DataError for a name the file lacks, listing what it has.
  std::vector<int64_t> shape(const std::string& name) const;
  const std::string& dtype(const std::string& name) const;
  int64_t numel(const std::string& name) const;
  // Copies tensor `name` to dst as float32: F32 as is, BF16 and F16 widened exactly, F64 rounded
  // to nearest. Throws FormatError for other dtypes, DataError naming the file, the tensor and
  // both shapes unless its shape is exactly `shape` (a transposed [in, out] tensor has the right
  // element count but is refused).
  void read_into(const std::string& name, float* dst, const std::vector<int64_t>& shape) const;
  // The same checks, then only the runs' elements: dst[r.part + i] = element r.whole + i of the
  // tensor (row-major), for i < r.count; what no run covers is left as it was, and so are the
  // file's other pages (a tensor-parallel rank reads its part alone: model/params.h's
  // shard_runs). A run past the tensor's end is a DataError.
  void read_runs_into(const std::string& name, float* dst, const std::vector<int64_t>& shape,
                      std::span<const ShardRun> runs) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  bool has_checksum() const { return metadata_.count(kChecksumKey) > 0; }

 private:
  struct Entry {
    std::string dtype;
    std::vector<int64_t> shape;
    int64_t numel = 1;
    int64_t begin = 0;  // byte offsets into the data buffer, [begin, end)
    int64_t end = 0;
  };
  const Entry& entry(const std::string& name) const;
  void parse_header(std::string_view header);
  void check_coverage(int64_t data_bytes) const;
  void check_checksum(std::string_view data) const;

  std::filesystem::path path_;
  MappedFile map_;                 // the whole file, read-only
  int64_t data_offset_bytes_ = 0;  // 8 + N
  std::map<std::string, Entry> entries_;
  std::vector<std::string> names_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace memo
