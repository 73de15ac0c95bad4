// A model's tensors as Hugging Face stores them: one safetensors file, or shard files listed by
// an index (model.safetensors.index.json: {"metadata": {...}, "weight_map": {tensor: shard}}).
// The index and the shards must agree exactly: every listed shard exists, no tensor is named
// twice, each listed tensor is in its shard, and each shard holds only the tensors the index maps
// to it. Not a writer: memo saves a single model.safetensors.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "memo/io/safetensors.h"

namespace memo {

inline constexpr const char* kModelIndexFile = "model.safetensors.index.json";

class SafetensorsSet {
 public:
  // One file (a set of one shard).
  explicit SafetensorsSet(SafetensorsFile file);
  // The shards listed by the index at `index_path`, each opened and checked (io/safetensors.h).
  // Missing index or shard: DataError naming it; malformed index, a tensor named twice, a tensor
  // missing from its shard or a shard tensor the index does not list: FormatError naming the
  // file and the tensor. A shard must be a plain file name next to the index.
  static SafetensorsSet from_index(const std::filesystem::path& index_path);

  const std::filesystem::path& path() const { return path_; }  // the file, or the index
  int64_t num_files() const { return int64_t(files_.size()); }
  bool contains(const std::string& name) const { return shard_of_.count(name) > 0; }
  // Shard by shard (in file-name order), each in data-buffer order.
  std::vector<std::string> names() const;
  // The accessors below throw DataError for a name the set lacks, as SafetensorsFile does.
  const SafetensorsFile& file_of(const std::string& name) const;
  std::vector<int64_t> shape(const std::string& name) const { return file_of(name).shape(name); }
  const std::string& dtype(const std::string& name) const { return file_of(name).dtype(name); }
  int64_t numel(const std::string& name) const { return file_of(name).numel(name); }
  // SafetensorsFile::read_into on the shard holding `name`.
  void read_into(const std::string& name, float* dst, const std::vector<int64_t>& shape) const {
    file_of(name).read_into(name, dst, shape);
  }
  // The first shard's __metadata__ (the index's own "metadata" holds only total_size).
  const std::map<std::string, std::string>& metadata() const { return files_.front().metadata(); }

 private:
  SafetensorsSet(std::filesystem::path path, std::vector<SafetensorsFile> files);
  std::filesystem::path path_;
  std::vector<SafetensorsFile> files_;
  std::map<std::string, size_t> shard_of_;  // tensor name -> index into files_
};

}  // namespace memo
