// Implementation of io/checkpoint.h.
#include "memo/io/checkpoint.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <map>
#include <set>
#include <utility>

#include "memo/core/error.h"
#include "memo/io/atomic_file.h"
#include "memo/io/config_json.h"
#include "memo/io/json_file.h"
#include "memo/model/params.h"

namespace memo {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kStepPrefix = "step-";

// The step of a "step-<digits>" name, or -1 for any other name (temporaries included).
int64_t parse_step(const std::string& name) {
  std::string prefix = kStepPrefix;
  if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) return -1;
  int64_t step = 0;
  for (size_t i = prefix.size(); i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9' || step > (INT64_MAX - 9) / 10) return -1;
    step = step * 10 + (name[i] - '0');
  }
  return step;
}

bool is_file(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec);
}

// See LoadedCheckpoint::model_dtype.
DType stored_dtype(std::optional<DType> torch_dtype, const SafetensorsSet& model) {
  if (torch_dtype) return *torch_dtype;
  std::set<std::string> dtypes;
  for (const std::string& name : model.names()) dtypes.insert(model.dtype(name));
  if (dtypes.size() != 1) return DType::kF32;
  return *dtypes.begin() == "BF16"  ? DType::kBF16
         : *dtypes.begin() == "F16" ? DType::kF16
                                    : DType::kF32;
}

std::string trim(std::string s) {
  const char* ws = " \t\r\n";
  s.erase(0, s.find_first_not_of(ws));
  s.erase(s.find_last_not_of(ws) + 1);
  return s;
}

}  // namespace

// The temporaries a killed writer left in run_dir (Note [Atomic directory commit]): a
// checkpoint's `step-N.tmp-PID` or `step-N.old-PID` directory, `latest.tmp-PID` or
// `best.tmp-PID`, of a process that no longer runs. A kill -9 mid-save leaves a whole checkpoint's
// worth of bytes there, which nothing else would remove. A live PID's are left alone (another
// process could be writing them); this process's own are its writers' to remove.
void remove_stale_temporaries(const fs::path& run_dir) {
  std::error_code ec;
  for (fs::directory_iterator it(run_dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    const size_t dot = name.rfind('.');
    if (dot == std::string::npos) continue;
    const std::string base = name.substr(0, dot), tail = name.substr(dot + 1);
    if (parse_step(base) < 0 && base != kLatestFile && base != kBestFile) continue;
    if (tail.rfind("tmp-", 0) != 0 && tail.rfind("old-", 0) != 0) continue;
    const std::string digits = tail.substr(4);
    if (digits.empty() || digits.size() > 9 ||
        digits.find_first_not_of("0123456789") != std::string::npos)
      continue;
    const pid_t pid = pid_t(std::stol(digits));
    if (pid == ::getpid() || pid <= 0 || ::kill(pid, 0) == 0 || errno != ESRCH) continue;
    std::error_code rm;
    fs::remove_all(it->path(), rm);
  }
}

void save_checkpoint(const fs::path& dir, const CheckpointData& data) {
  data.config.validate();
  AtomicDirWriter writer(dir);
  // format=pt: transformers refuses safetensors files without it.
  const std::map<std::string, std::string> pt{{"format", "pt"}};
  write_safetensors_set(writer.path(), data.model, pt, data.model_dtype, data.max_shard_bytes);
  if (data.model_dtype != DType::kF32)  // see Note [Master weights beside bf16]
    write_safetensors(writer.path() / kMasterFile, data.model, pt);
  save_model_config(writer.path() / kConfigFile, data.config, data.model_dtype);
  if (!data.optimizer.empty()) write_safetensors(writer.path() / kOptimizerFile, data.optimizer);
  if (!data.trainer_state.is_null())
    write_file_atomic(writer.path() / kTrainerStateFile, data.trainer_state.dump(2) + "\n");
  if (!data.tokenizer_json.empty())
    write_file_atomic(writer.path() / kTokenizerFile, data.tokenizer_json);
  for (const auto& [name, bytes] : data.side_files) {
    const bool ours = name == kModelFile || name == kModelIndexFile || name == kMasterFile ||
                      name == kConfigFile || name == kOptimizerFile || name == kTrainerStateFile ||
                      (name == kTokenizerFile && !data.tokenizer_json.empty());
    if (ours || name.find('/') != std::string::npos)
      throw DataError(str("checkpoint ", dir.string(), ": side file ", name,
                          " would replace one of the checkpoint's own"));
    write_file_atomic(writer.path() / name, bytes);
  }
  writer.commit();
}

bool has_model_tensors(const fs::path& dir) {
  return is_file(dir / kModelFile) || is_file(dir / kModelIndexFile);
}

LoadedCheckpoint load_checkpoint(const fs::path& dir, CheckpointUse use) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    throw DataError(str("checkpoint ", dir.string(), " is not a directory (",
                        fs::exists(dir, ec) ? "it is a file" : "it does not exist", ")"));
  if (!has_model_tensors(dir))
    throw DataError(
        str("checkpoint ", dir.string(), " has no ", kModelFile, " and no ", kModelIndexFile));
  const fs::path config_path = dir / kConfigFile;
  const json config = read_json_file<ConfigError>(config_path);
  LoadedCheckpoint ckpt{dir,
                        model_config_from_json(config, config_path.string()),
                        is_file(dir / kModelFile)
                            ? SafetensorsSet(SafetensorsFile(dir / kModelFile))
                            : SafetensorsSet::from_index(dir / kModelIndexFile),
                        DType::kF32,
                        std::nullopt,
                        std::nullopt,
                        json()};
  ckpt.model_dtype = stored_dtype(torch_dtype_from_json(config, config_path.string()), ckpt.model);
  if (use == CheckpointUse::kResume) {
    if (is_file(dir / kMasterFile)) ckpt.master.emplace(SafetensorsFile(dir / kMasterFile));
    if (is_file(dir / kOptimizerFile))
      ckpt.optimizer.emplace(SafetensorsFile(dir / kOptimizerFile));
  }
  if (is_file(dir / kTrainerStateFile))
    ckpt.trainer_state = read_json_file<FormatError>(dir / kTrainerStateFile);
  return ckpt;
}

// Note [A config that does not describe its tensors]
// A config whose model the tensors cannot nearly hold (num_hidden_layers 100000 beside a 2-layer
// file) is refused before anything is sized from it: the loaders name the first missing tensor,
// but only after a model of the config's size (GBs for 1e5 layers, bad_alloc for 1e8) and its
// tensor list are built. The parameter count is arithmetic, from a 1- and a 2-layer config.
// Twice the file's elements is the bound, so that a file short of a few tensors still gets the
// loaders' message naming them.
void check_config_describes_tensors(const LoadedCheckpoint& ckpt) {
  const ModelConfig& config = ckpt.config;
  const SafetensorsSet& tensors = ckpt.model;
  const fs::path config_path = ckpt.dir / kConfigFile;
  ModelConfig c = config;
  c.sliding_layers.clear();
  c.num_hidden_layers = 1;
  const double one = double(ParamLayout(c).count());
  c.num_hidden_layers = 2;
  const double per_layer = double(ParamLayout(c).count()) - one;
  const double need = one + double(config.num_hidden_layers - 1) * per_layer;
  int64_t held = 0;
  for (const std::string& name : tensors.names()) held += tensors.numel(name);
  if (need > 2.0 * double(held) + 1e6)
    throw DataError(str(config_path.string(), ": num_hidden_layers = ", config.num_hidden_layers,
                        " and the other fields make ", need < 9e18 ? str(int64_t(need)) : str(need),
                        " parameters; the checkpoint's tensors hold ", held,
                        " elements: the config does not describe them"));
}

std::string checkpoint_dir_name(int64_t step) {
  if (step < 0) throw ConfigError(str("checkpoint step ", step, " must be >= 0"));
  char buf[32];
  std::snprintf(buf, sizeof buf, "%s%08lld", kStepPrefix, static_cast<long long>(step));
  return buf;
}

fs::path save_run_checkpoint(const fs::path& run_dir, int64_t step, const CheckpointData& data) {
  std::string name = checkpoint_dir_name(step);
  std::error_code ec;
  fs::create_directories(run_dir, ec);
  if (ec)
    throw DataError(str("cannot create run directory ", run_dir.string(), ": ", ec.message()));
  remove_stale_temporaries(run_dir);
  save_checkpoint(run_dir / name, data);
  write_file_atomic(run_dir / kLatestFile, name + "\n");
  return run_dir / name;
}

fs::path find_latest_checkpoint(const fs::path& run_dir) {
  std::error_code ec;
  if (!fs::is_directory(run_dir, ec))
    throw DataError(str("no checkpoint at ", run_dir.string(), ": it is not a directory"));
  fs::path latest = run_dir / kLatestFile;
  if (is_file(latest)) {
    std::string name = trim(read_file(latest));
    if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos)
      throw FormatError(str(latest.string(), " holds '", name,
                            "', expected a directory name such as ", checkpoint_dir_name(100)));
    if (!has_model_tensors(run_dir / name))
      throw DataError(str(latest.string(), " names ", name, ", but ", (run_dir / name).string(),
                          " has no ", kModelFile, " and no ", kModelIndexFile));
    return run_dir / name;
  }
  if (has_model_tensors(run_dir)) return run_dir;
  int64_t best_step = -1;
  fs::path best;
  for (const auto& entry : fs::directory_iterator(run_dir, ec)) {
    int64_t step = parse_step(entry.path().filename().string());
    if (step > best_step && has_model_tensors(entry.path())) {
      best_step = step;
      best = entry.path();
    }
  }
  if (best_step < 0)
    throw DataError(str("no checkpoint in ", run_dir.string(), ": no '", kLatestFile, "' file, no ",
                        kModelFile, " or ", kModelIndexFile, " and no ", kStepPrefix,
                        "NNNNNNNN directory"));
  return best;
}

}  // namespace memo
