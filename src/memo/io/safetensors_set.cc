// Implementation of io/safetensors_set.h. The index is parsed with a callback that sees every
// key: nlohmann::json keeps the last of two equal keys silently, and a tensor named twice in
// weight_map must be an error, not a coin toss between two shards.
#include "memo/io/safetensors_set.h"

#include <cstdio>
#include <nlohmann/json.hpp>
#include <set>
#include <utility>

#include "memo/core/error.h"
#include "memo/core/json_excerpt.h"
#include "memo/io/atomic_file.h"
#include "memo/io/json_file.h"

namespace memo {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// The first key that an object of the document repeats, and the key of the object holding it
// ("" at the top level); both empty when none repeats.
struct RepeatedKey {
  std::string key;
  std::string under;
};

json parse_index(const fs::path& index, RepeatedKey& repeated) {
  struct Frame {
    std::string under;  // the key this object is the value of
    std::set<std::string> keys;
    std::string last;
  };
  std::vector<Frame> frames;
  const json::parser_callback_t watch = [&](int, json::parse_event_t event, json& parsed) {
    if (event == json::parse_event_t::object_start) {
      frames.push_back({frames.empty() ? "" : frames.back().last, {}, ""});
    } else if (event == json::parse_event_t::object_end) {
      frames.pop_back();
    } else if (event == json::parse_event_t::key) {
      Frame& f = frames.back();
      f.last = parsed.get<std::string>();
      if (!f.keys.insert(f.last).second && repeated.key.empty()) repeated = {f.last, f.under};
    }
    return true;
  };
  const std::string text = read_file(index);
  check_json_depth<FormatError>(text, index.string());
  try {
    return json::parse(text, watch);
  } catch (const json::parse_error& e) {
    // the parser counts an unexpected end as the byte after the last
    throw FormatError(str(index.string(), ": malformed JSON at byte ",
                          std::min(e.byte, text.size()), " of ", text.size(), ": ", e.what()));
  } catch (const json::exception& e) {  // a number past a double's range
    throw FormatError(str(index.string(), ": ", e.what()));
  }
}

// A shard is a file next to the index: a name with a directory part could point anywhere.
bool is_plain_file_name(const std::string& name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos &&
         name.find('\\') == std::string::npos;
}

// shard file name -> the tensors weight_map assigns to it, checked.
std::map<std::string, std::vector<std::string>> read_weight_map(const fs::path& index) {
  const std::string p = index.string();
  RepeatedKey repeated;
  const json j = parse_index(index, repeated);
  if (!repeated.key.empty() && repeated.under == "weight_map")
    throw FormatError(str(p, ": tensor '", repeated.key, "' is named twice in weight_map; ",
                          "each tensor must map to one shard"));
  if (!repeated.key.empty())
    throw FormatError(str(p, ": key '", repeated.key, "' appears twice",
                          repeated.under.empty() ? "" : str(" in ", repeated.under)));
  if (!j.is_object() || !j.contains("weight_map") || !j.at("weight_map").is_object())
    throw FormatError(str(p, " has no \"weight_map\" object (tensor name -> shard file)"));
  std::map<std::string, std::vector<std::string>> shards;
  for (const auto& [tensor, shard] : j.at("weight_map").items()) {
    if (!shard.is_string() || !is_plain_file_name(shard.get<std::string>()))
      throw FormatError(str(p, ": weight_map maps tensor '", tensor, "' to ", json_excerpt(shard),
                            "; expected the file name of a shard next to the index"));
    shards[shard.get<std::string>()].push_back(tensor);
  }
  if (shards.empty()) throw FormatError(str(p, ": weight_map lists no tensors"));
  return shards;
}

// "model-00002-of-00005.safetensors": huggingface_hub's FILENAME_PATTERN with its 5-digit suffix.
std::string shard_file_name(size_t i, size_t n) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "model-%05zu-of-%05zu.safetensors", i + 1, n);
  return buf;
}

// 0 for a negative dim: the bad shape is write_safetensors' error to report.
int64_t numel_of(const NamedTensor& t) {
  int64_t n = 1;
  for (int64_t d : t.shape) n *= d < 0 ? 0 : d;
  return n;
}

}  // namespace

std::vector<std::vector<size_t>> plan_shards(const std::vector<int64_t>& tensor_bytes,
                                             int64_t max_shard_bytes) {
  if (max_shard_bytes <= 0)
    throw ConfigError(str("max shard size ", max_shard_bytes, " bytes must be > 0"));
  std::vector<std::vector<size_t>> shards;
  std::vector<size_t> current;
  int64_t current_bytes = 0;
  for (size_t i = 0; i < tensor_bytes.size(); ++i) {
    if (tensor_bytes[i] > max_shard_bytes) {
      shards.push_back({i});
      continue;
    }
    if (current_bytes + tensor_bytes[i] > max_shard_bytes) {
      shards.push_back(std::move(current));
      current.clear();
      current_bytes = 0;
    }
    current.push_back(i);
    current_bytes += tensor_bytes[i];
  }
  if (!current.empty()) shards.push_back(std::move(current));
  return shards;
}

std::vector<std::string> write_safetensors_set(const fs::path& dir,
                                               const std::vector<NamedTensor>& tensors,
                                               const std::map<std::string, std::string>& metadata,
                                               DType dtype, int64_t max_shard_bytes) {
  std::set<std::string> names;
  std::vector<int64_t> bytes;
  for (const NamedTensor& t : tensors) {
    if (!names.insert(t.name).second)
      throw DataError(str("writing ", dir.string(), ": tensor name '", t.name,
                          "' is used twice; names must be unique"));
    bytes.push_back(numel_of(t) * dtype_bytes(dtype));
  }
  const std::vector<std::vector<size_t>> shards = plan_shards(bytes, max_shard_bytes);
  if (shards.size() <= 1) {
    write_safetensors(dir / kModelFile, tensors, metadata, dtype);
    return {kModelFile};
  }
  std::vector<std::string> files;
  json weight_map = json::object();  // std::map underneath: keys sorted, as sort_keys=True
  int64_t total_bytes = 0;
  for (size_t s = 0; s < shards.size(); ++s) {
    files.push_back(shard_file_name(s, shards.size()));
    std::vector<NamedTensor> shard;
    for (size_t i : shards[s]) {
      shard.push_back(tensors[i]);
      weight_map[tensors[i].name] = files.back();
      total_bytes += bytes[i];
    }
    write_safetensors(dir / files.back(), shard, metadata, dtype);
  }
  const json index{{"metadata", {{"total_size", total_bytes}}}, {"weight_map", weight_map}};
  write_file_atomic(dir / kModelIndexFile, index.dump(2) + "\n");
  files.push_back(kModelIndexFile);
  return files;
}

SafetensorsSet::SafetensorsSet(SafetensorsFile file) : path_(file.path()) {
  files_.push_back(std::move(file));
  for (const std::string& name : files_.front().names()) shard_of_[name] = 0;
}

SafetensorsSet::SafetensorsSet(fs::path path, std::vector<SafetensorsFile> files)
    : path_(std::move(path)), files_(std::move(files)) {
  for (size_t i = 0; i < files_.size(); ++i)
    for (const std::string& name : files_[i].names()) shard_of_[name] = i;
}

namespace {

// Why a path that should be a file is not one.
const char* not_a_file(const fs::path& p) {
  std::error_code ec;
  if (fs::is_directory(p, ec)) return "is a directory";
  return fs::exists(p, ec) ? "is not a regular file" : "does not exist";
}

}  // namespace

SafetensorsSet SafetensorsSet::from_index(const fs::path& index_path) {
  const std::string p = index_path.string();
  std::error_code ec;
  if (!fs::is_regular_file(index_path, ec))
    throw DataError(str("shard index ", p, " ", not_a_file(index_path)));
  const std::map<std::string, std::vector<std::string>> shards = read_weight_map(index_path);
  const fs::path dir = index_path.parent_path();
  std::vector<SafetensorsFile> files;
  for (const auto& [shard, tensors] : shards) {
    const fs::path file = dir / shard;
    if (!fs::is_regular_file(file, ec))
      throw DataError(str(p, " lists shard ", shard, " (for tensor '", tensors.front(), "'",
                          tensors.size() > 1 ? str(" and ", tensors.size() - 1, " more") : "",
                          "), but ", file.string(), " ", not_a_file(file)));
    files.emplace_back(file);
    const SafetensorsFile& f = files.back();
    for (const std::string& t : tensors)
      if (!f.contains(t))
        throw FormatError(str(p, " maps tensor '", t, "' to ", shard, ", but ", file.string(),
                              " does not hold it"));
    const std::set<std::string> listed(tensors.begin(), tensors.end());
    for (const std::string& t : f.names())
      if (!listed.count(t))
        throw FormatError(str(file.string(), " holds tensor '", t, "', which ", p,
                              " does not map to this shard"));
  }
  return SafetensorsSet(index_path, std::move(files));
}

std::vector<std::string> SafetensorsSet::names() const {
  std::vector<std::string> out;
  for (const SafetensorsFile& f : files_)
    for (const std::string& name : f.names()) out.push_back(name);
  return out;
}

const SafetensorsFile& SafetensorsSet::file_of(const std::string& name) const {
  auto it = shard_of_.find(name);
  if (it != shard_of_.end()) return files_[it->second];
  if (files_.size() == 1) return files_.front();  // its accessor lists what it has
  throw DataError(
      str("tensor '", name, "' is not in the ", files_.size(), " shards of ", path_.string()));
}

}  // namespace memo
