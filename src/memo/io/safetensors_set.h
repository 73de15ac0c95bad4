// A model's tensors as Hugging Face stores them: one safetensors file, or shard files listed by
// an index (model.safetensors.index.json: {"metadata": {...}, "weight_map": {tensor: shard}}).
// The index and the shards must agree exactly: every listed shard exists, no tensor is named
// twice, each listed tensor is in its shard, and each shard holds only the tensors the index maps
// to it. write_safetensors_set writes such a set the way transformers' save_pretrained does.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "memo/io/safetensors.h"

namespace memo {

inline constexpr const char* kModelFile = "model.safetensors";
inline constexpr const char* kModelIndexFile = "model.safetensors.index.json";
// transformers' default max_shard_size, "5GB": its units are decimal.
inline constexpr int64_t kDefaultMaxShardBytes = 5'000'000'000;

// Which tensors go into which shard, as huggingface_hub's split_state_dict_into_shards_factory
// assigns them (what save_pretrained calls): tensors in order fill the current shard; one that
// would take it past max_shard_bytes closes it and opens the next; one larger than
// max_shard_bytes by itself gets a shard of its own, placed when it is met (the current shard
// stays open, so [small, huge, small] gives [huge], [small, small]). Sizes are data bytes.
// Returns indices into tensor_bytes, shard by shard; max_shard_bytes must be > 0.
std::vector<std::vector<size_t>> plan_shards(const std::vector<int64_t>& tensor_bytes,
                                             int64_t max_shard_bytes);

// Writes `tensors` in `dtype` (write_safetensors) into the existing directory `dir` as
// save_pretrained does: one model.safetensors when plan_shards gives one shard, else
// model-00001-of-0000N.safetensors ... and kModelIndexFile ({"metadata": {"total_size": data
// bytes}, "weight_map": {tensor: shard}}, keys sorted, indented 2). Every file carries `metadata`.
// Names must be unique over the set. Returns the files written, the index last. Not atomic as a
// whole: the caller writes into a directory it commits (AtomicDirWriter).
std::vector<std::string> write_safetensors_set(const std::filesystem::path& dir,
                                               const std::vector<NamedTensor>& tensors,
                                               const std::map<std::string, std::string>& metadata,
                                               DType dtype, int64_t max_shard_bytes);

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
  // SafetensorsFile::read_runs_into on the shard holding `name`.
  void read_runs_into(const std::string& name, float* dst, const std::vector<int64_t>& shape,
                      std::span<const ShardRun> runs) const {
    file_of(name).read_runs_into(name, dst, shape, runs);
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
