#include "memo/train/checkpoints.h"

#include <pthread.h>
#include <sched.h>
#include <sys/mman.h>

#include <algorithm>
#include <cmath>
#include <deque>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <span>
#include <string_view>
#include <type_traits>

#include "memo/core/error.h"
#include "memo/core/json_excerpt.h"
#include "memo/core/units.h"
#include "memo/data/shards.h"
#include "memo/io/atomic_file.h"
#include "memo/io/config_json.h"
#include "memo/io/json_file.h"
#include "memo/memory/strategy_factory.h"
#include "memo/train/optimizer_setup.h"
#include "memo/train/run_data.h"

namespace fs = std::filesystem;

namespace memo {
namespace {

// Which training options a checkpoint pins: resuming with other values would not continue the
// same run, so they are restored from trainer_state.json (see Note [Resume]).
nlohmann::json pinned_options(const TrainOptions& o) {
  return {{"seq", o.seq},
          {"batch", o.batch},
          {"micro_batch", o.micro_batch},
          {"lr", o.lr},
          {"min_lr_ratio", o.min_lr_ratio},
          {"warmup", o.warmup},
          {"clip", o.clip},
          {"gns", o.gns},
          {"gns_decay", o.gns_decay},
          {"seed", o.seed},
          {"steps", o.steps},
          {"data", absolute_or_empty(o.data_path)},  // a resume from elsewhere reads the same
          {"val_data", absolute_or_empty(o.val_data_path)},
          {"val_fraction", o.val_fraction},
          {"document_mask", o.document_mask},
          {"eot_id", o.eot_id},
          {"eod_mask_loss", o.eod_mask_loss},
          {"seq_schedule", o.seq_schedule},
          {"stage_batch", o.stage_batch},
          {"stage_rope", o.stage_rope}};
}

// The options that shape what a run writes and when, not what it trains, the bad-step guard's
// bounds, which decide which steps apply, and where and in how much memory it runs (the device,
// --device-memory where given, ZeRO, the activation strategy and its host budget): a resumed run
// keeps its checkpoint's unless the command line gives them (Note [Resume]), so that `memo train
// --resume DIR` goes on saving, validating, logging, skipping and fitting as the run did.
nlohmann::json run_options(const TrainOptions& o) {
  std::error_code ec;
  const StrategyOptions& a = o.activations;
  return {{"out", fs::weakly_canonical(fs::path(o.out_dir), ec).string()},
          {"device", o.device},
          {"device_memory",
           o.device_memory_given ? nlohmann::json(o.device_memory_bytes) : nlohmann::json()},
          {"zero", o.zero},
          {"activations", a.kind},
          {"alpha", a.alpha ? nlohmann::json(*a.alpha) : nlohmann::json()},
          {"host_memory", a.host_memory_bytes},
          {"copy_bandwidth", a.copy_bandwidth_gb_per_s},
          {"save_every", o.save_every},
          {"keep_last", o.keep_last},
          {"save_best", o.save_best},
          {"async_save", o.async_save},
          {"eval_every", o.eval_every},
          {"eval_tokens", o.eval_tokens},
          {"val_batches", o.val_batches},
          {"log_every", o.log_every},
          {"log", absolute_or_empty(o.log_path)},
          {"tensorboard", absolute_or_empty(o.tensorboard_dir)},
          {"skip_nonfinite", o.skip_nonfinite},
          {"spike_skip", o.spike_skip}};
}

// trainer_state.json's field `key` of j as T (`fallback` where an older checkpoint lacks it): a
// DataError naming the file and the field where it is missing or of another JSON type. `within`:
// the field j is, when it is not the file's top level (messages say "gns.updates").
template <class T>
T state_field(const nlohmann::json& j, const char* key, const std::string& file,
              std::optional<T> fallback = std::nullopt, std::string_view within = {}) {
  const std::string name = within.empty() ? std::string(key) : str(within, ".", key);
  if (!j.is_object() || !j.contains(key)) {
    if (fallback) return *fallback;
    throw DataError(str(file, ": field '", name, "' is missing"));
  }
  const nlohmann::json& v = j.at(key);
  const bool fits = std::is_same_v<T, bool>       ? v.is_boolean()
                    : std::is_integral_v<T>       ? v.is_number_integer()
                    : std::is_floating_point_v<T> ? v.is_number()
                                                  : true;  // strings, lists: get<T> says
  try {
    if (fits) return v.get<T>();
  } catch (const nlohmann::json::exception&) {
  }
  throw DataError(str(file, ": field '", name, "' = ", json_excerpt(v), " is not ",
                      std::is_same_v<T, bool>          ? "a boolean"
                      : std::is_integral_v<T>          ? "an integer"
                      : std::is_floating_point_v<T>    ? "a number"
                      : std::is_same_v<T, std::string> ? "a string"
                                                       : "of the type memo writes there"));
}

// run_options' fields from a checkpoint's run_options.json (absent in checkpoints from before it),
// each unless the command line gave its flag (o.pinned_given). --eval-tokens and --val-batches
// exclude each other: either given, neither is restored; --no-checkpoint given, none of the
// checkpoint flags is.
// A run_options.json key's flag: "keep_last" -> "keep-last".
std::string flag_name(std::string key) {
  std::replace(key.begin(), key.end(), '_', '-');
  return key;
}

void restore_run_options(TrainOptions& o, const fs::path& checkpoint) {
  if (!o.restore_run_options) return;
  const fs::path path = checkpoint / kRunOptionsFile;
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) return;
  const nlohmann::json j = read_json_file<DataError>(path);
  const std::string file = path.string();
  if (!j.is_object()) throw DataError(str(file, ": ", json_excerpt(j), " is not an object"));
  auto given = [&](const char* key) {
    return std::find(o.pinned_given.begin(), o.pinned_given.end(), key) != o.pinned_given.end();
  };
  // the bounds the flags have (a hand-edited file: --keep-last -1 is refused, so is its -1 here)
  auto keep = [&]<class T>(const char* key, T& field, bool restore = true) {
    const T value = state_field<T>(j, key, file, field);
    if constexpr (std::is_arithmetic_v<T> && !std::is_same_v<T, bool>) {
      // eval_tokens 0: not given (--val-batches decides)
      const bool positive = std::string_view(key) == "log_every";
      if (!(positive ? value > 0 : value >= 0) || !std::isfinite(double(value)))
        throw DataError(str(file, ": field '", key, "' = ", value, " must be ",
                            positive ? "above 0" : "0 or more", " (as its flag --", flag_name(key),
                            ")"));
    }
    if (restore && !given(key)) field = value;
  };
  const bool checkpoints = o.checkpoints;
  keep("save_every", o.save_every, checkpoints);
  keep("keep_last", o.keep_last, checkpoints);
  keep("save_best", o.save_best, checkpoints);
  keep("async_save", o.async_save, checkpoints);
  keep("eval_every", o.eval_every);
  const bool validation_given = given("eval_tokens") || given("val_batches");
  keep("eval_tokens", o.eval_tokens, !validation_given);
  keep("val_batches", o.val_batches, !validation_given);
  keep("log_every", o.log_every);
  // the log and the events are the run's, in its folder's place: a resumed run that writes into
  // another --out (a branch, or a copy of a checkpoint) must not rewrite the first run's records
  // past its step. The folder is the one the run wrote (older checkpoints: the checkpoint's)
  const fs::path run_folder = j.contains("out") && j["out"].is_string()
                                  ? fs::path(j["out"].get<std::string>())
                                  : checkpoint.parent_path();
  const bool same_folder =
      fs::weakly_canonical(run_folder, ec) == fs::weakly_canonical(fs::path(o.out_dir), ec);
  for (auto [key, field] : {std::pair<const char*, std::string*>{"log", &o.log_path},
                            {"tensorboard", &o.tensorboard_dir}}) {
    std::string value = *field;
    keep(key, value);
    if (same_folder || given(key) || value.empty()) {
      *field = value;
    } else {
      throw ConfigError(str("--out ", o.out_dir, " is not ", run_folder.string(),
                            ", the folder of the run of ", o.resume_dir, ", which writes its --",
                            key, " to ", value,
                            ": a branch must not rewrite that; give this run its own --", key,
                            " (or --", key, " '' for none)"));
    }
  }
  keep("skip_nonfinite", o.skip_nonfinite);
  keep("spike_skip", o.spike_skip);
  // the memory it fits in: --device-memory where the run gave it (else this device's default);
  // the strategy's fields with its name, none of them when --activations names another
  if (j.contains("device_memory") && !j.at("device_memory").is_null()) {
    int64_t budget = o.device_memory_bytes;
    keep("device_memory", budget);
    if (!given("device_memory")) o.device_memory_bytes = budget, o.device_memory_given = true;
  }
  // ZeRO-1's shards are part of what fits (--device-memory counts this rank's shard)
  keep("zero", o.zero);
  if (const int64_t zero = state_field<int64_t>(j, "zero", file, 0); zero > 1)
    throw DataError(str(file, ": field 'zero' = ", zero, " is not a stage memo runs (0 or 1)"));
  StrategyOptions& a = o.activations;
  if (const std::string kind = state_field<std::string>(j, "activations", file, a.kind);
      std::none_of(std::begin(kStrategyNames), std::end(kStrategyNames),
                   [&](const char* name) { return kind == name; }))
    throw DataError(str(file, ": field 'activations' = ", json_excerpt(nlohmann::json(kind)),
                        " is not one of keep, recompute, offload, memo"));
  // the strategy's fields go with its name: kept where --activations is not given or repeats it
  const bool strategy = !given("activations") || j.value("activations", nlohmann::json()) == a.kind;
  keep("activations", a.kind, strategy);
  if (strategy && !given("alpha") && j.contains("alpha")) {
    const nlohmann::json& alpha = j.at("alpha");
    if (!alpha.is_null() && !alpha.is_number())
      throw DataError(str(file, ": field 'alpha' = ", json_excerpt(alpha), " is not a number"));
    a.alpha = alpha.is_null() ? std::nullopt : std::optional<double>(alpha.get<double>());
  }
  keep("host_memory", a.host_memory_bytes, strategy);
  keep("copy_bandwidth", a.copy_bandwidth_gb_per_s, strategy);
}

void restore_pinned(TrainOptions& o, const nlohmann::json& j, const std::string& file) {
  if (!j.is_object())
    throw DataError(str(file, ": field 'options' = ", json_excerpt(j), " is not an object"));
  o.seq = state_field<int64_t>(j, "seq", file);
  o.batch = state_field<int64_t>(j, "batch", file);
  o.micro_batch = state_field<int64_t>(j, "micro_batch", file);
  for (const auto& [key, value] : {std::pair<const char*, int64_t>{"seq", o.seq},
                                   {"batch", o.batch},
                                   {"micro_batch", o.micro_batch}})
    if (value <= 0)
      throw DataError(str(file, ": field 'options.", key, "' = ", value, " must be positive"));
  o.lr = state_field<double>(j, "lr", file);
  o.min_lr_ratio = state_field<double>(j, "min_lr_ratio", file);
  o.warmup = state_field<int64_t>(j, "warmup", file);
  o.clip = state_field<double>(j, "clip", file);
  // checkpoints from before the noise scale ran without it; from before document masks, without
  o.gns = state_field<bool>(j, "gns", file, false);
  o.gns_decay = state_field<double>(j, "gns_decay", file, 0.99);
  o.seed = state_field<uint64_t>(j, "seed", file);
  o.document_mask = state_field<bool>(j, "document_mask", file, false);
  o.eot_id = state_field<int64_t>(j, "eot_id", file, -1);
  o.eod_mask_loss = state_field<bool>(j, "eod_mask_loss", file, false);
  o.seq_schedule = state_field<std::string>(j, "seq_schedule", file, "");
  o.stage_batch = state_field<std::string>(j, "stage_batch", file, "tokens");
  o.stage_rope =
      state_field<std::vector<std::string>>(j, "stage_rope", file, std::vector<std::string>());
}

// Host views of tensors that live in a backend's device space, for writing a checkpoint: the
// tensors themselves when the host can address them, else host copies held here.
// With a pool (--async-save), always copies: the write outlives the step, the tensors do not.
// A rank that neither writes nor sends the tensors on (keep false) takes part in the gathers and
// holds nothing: every view is null. Else, under --tp 8, each of a node's ranks would hold the
// whole model and optimiser state in host memory at every checkpoint.
class HostStaging {
 public:
  HostStaging(Backend& backend, StagingPool* pool, bool keep)
      : backend_(backend),
        pool_(pool),
        direct_(backend.host_can_access(backend.device_space())),
        keep_(keep) {}
  const float* host(const float* device, int64_t numel) {
    if (!keep_) return nullptr;
    if (pool_) {
      float* copy = pool_->next(numel);
      backend_.copy_to_host(copy, device, numel * int64_t(sizeof(float)));
      return copy;
    }
    if (direct_) return device;
    copies_.emplace_back(size_t(numel));
    backend_.copy_to_host(copies_.back().data(), device, numel * int64_t(sizeof(float)));
    return copies_.back().data();
  }
  // The whole tensor of p from the tensor-parallel group's parts (each rank's `part`, numel
  // floats in the device space): collective over the group, on every rank.
  const float* whole(const ParamInfo& p, const float* part, int64_t numel, Communicator& group) {
    const int t = group.size();
    RawBuffer parts(backend_.allocator(backend_.device_space()),
                    int64_t(t) * numel * int64_t(sizeof(float)), "a checkpoint tensor's parts");
    group.all_gather(parts.tensor({int64_t(t) * numel}, DType::kF32),
                     ConstTensor(part, {numel}, DType::kF32, backend_.device_space()));
    if (!keep_) return nullptr;
    std::vector<float> host(size_t(int64_t(t) * numel));
    backend_.copy_to_host(host.data(), parts.data(), int64_t(host.size() * sizeof(float)));
    copies_.emplace_back(size_t(p.full_numel()));
    for (int r = 0; r < t; ++r)
      insert_shard(p, TensorShard{r, t}, host.data() + int64_t(r) * numel, copies_.back().data());
    return copies_.back().data();
  }

 private:
  Backend& backend_;
  StagingPool* pool_;
  bool direct_;
  bool keep_;
  std::deque<std::vector<float>> copies_;  // stable addresses
};

// Whole tensors under tensor parallelism (gathered: collective over the group, every rank calls
// it), the checkpoint's names and shapes as one process saves them.
std::vector<NamedTensor> model_tensors(Model& model, HostStaging& staging) {
  std::vector<NamedTensor> out;
  for (const ParamInfo& p : model.layout().params()) {
    const float* part = model.params() + p.offset;
    out.push_back({p.name, p.full_shape,
                   p.is_split() ? staging.whole(p, part, p.numel, *model.tensor_parallel_group())
                                : staging.host(part, p.numel)});
  }
  return out;
}

std::vector<NamedTensor> state_tensors(Model& model, const std::vector<StateTensor>& state,
                                       HostStaging& staging) {
  std::vector<NamedTensor> out;
  for (const StateTensor& s : state) {
    const ParamInfo* p = split_param(model.layout(), s.name, s.numel());
    out.push_back({s.name, p ? p->full_shape : s.shape,
                   p ? staging.whole(*p, s.data, s.numel(), *model.tensor_parallel_group())
                     : staging.host(s.data, s.numel())});
  }
  return out;
}

}  // namespace

// Read once, when the run starts: a resumed checkpoint is pruned by --keep-last once newer ones
// exist, and an --init-from folder may move while the run trains.
std::vector<std::pair<std::string, std::string>> side_files_of_origin(const TrainOptions& o) {
  const std::string& from = !o.resume_dir.empty() ? o.resume_dir : o.init_from;
  std::vector<std::pair<std::string, std::string>> files;
  if (from.empty()) return files;
  const fs::path dir = find_latest_checkpoint(from);
  for (const char* name : kModelSideFiles) {
    std::error_code ec;
    if (fs::is_regular_file(dir / name, ec)) files.emplace_back(name, read_file(dir / name));
  }
  // A folder without generation_config.json: transformers makes its generation defaults from
  // config.json's bos_token_id and eos_token_id, which memo's config.json does not carry (they do
  // not change the model); they go into a generation_config.json of their own instead.
  std::error_code ec;
  if (!fs::is_regular_file(dir / "generation_config.json", ec) &&
      fs::is_regular_file(dir / "config.json", ec)) {
    const nlohmann::json config = read_json_file<FormatError>(dir / "config.json");
    nlohmann::json generation = nlohmann::json::object();
    for (const char* key : {"bos_token_id", "eos_token_id"})
      if (config.is_object() && config.contains(key) && !config[key].is_null())
        generation[key] = config[key];
    if (!generation.empty()) files.emplace_back("generation_config.json", generation.dump(2));
  }
  return files;
}

namespace {

// Everything a checkpoint writes, made on the calling thread: the tensors are host views
// (model_tensors, state_tensors) that every rank made, the rest is owned here, so that a
// background write reads nothing that training changes. origin: side_files_of_origin's.
CheckpointData checkpoint_data(const TrainOptions& o, const Model& model, const Optimizer& opt,
                               std::vector<NamedTensor> model_tensors,
                               std::vector<NamedTensor> state, const GradNoiseProbe* probe,
                               const StepSchedule& plan, int64_t step, const RunState& run,
                               const std::vector<std::pair<std::string, std::string>>& origin) {
  CheckpointData data;
  data.config = model.config();
  data.model = std::move(model_tensors);
  data.model_dtype = o.save_dtype.value_or(DType::kF32);
  data.max_shard_bytes = o.max_shard_bytes.value_or(kDefaultMaxShardBytes);
  data.optimizer = std::move(state);
  data.trainer_state = {
      {"step", step},
      {"optimizer", optimizer_record(opt)},
      {"options", pinned_options(o)},
      {"precision", precision_name(model.backend())},
      {"gns", probe ? nlohmann::json(probe->estimator().state()) : nlohmann::json()},
      {"batch_schedule", plan.checkpoint_json()}};
  // only where they say something, so that a run without them writes the bytes it always did
  if (o.max_shard_bytes) data.trainer_state["max_shard_bytes"] = *o.max_shard_bytes;
  if (opt.steps_done() != step) data.trainer_state["optimizer_steps"] = opt.steps_done();
  if (o.skip_nonfinite > 0 || o.spike_skip > 0.0) data.trainer_state["bad_steps"] = run.bad_steps;
  if (run.best)
    data.trainer_state["best"] = {{"step", run.best->step}, {"val_loss", run.best->val_loss}};
  data.tokenizer_json = shard_tokenizer_json(o.data_path);  // the checkpoint names its tokenizer
  // or, where a byte vocabulary is padded past 256, says it was trained on bytes
  if (data.tokenizer_json.empty() && data.config.vocab_size != 256) {
    const std::optional<Tokenizer> t = data_tokenizer(o.data_path);
    if (t && t->is_bytes()) data.trainer_state[kDataTokenizerKey] = "bytes";
  }
  for (const auto& file :
       origin)  // the data's own tokenizer.json, where its shards name one, first
    if (data.tokenizer_json.empty() || file.first != kTokenizerFile)
      data.side_files.push_back(file);
  // the shards' tokenizer_config.json beside their tokenizer.json, unless the model folder the
  // run started from gave one (its eos_token: what generation stops at)
  if (!data.tokenizer_json.empty() &&
      std::none_of(data.side_files.begin(), data.side_files.end(),
                   [](const auto& f) { return f.first == kShardTokenizerConfigFile; }))
    if (std::string config = shard_tokenizer_config(o.data_path); !config.empty())
      data.side_files.emplace_back(kShardTokenizerConfigFile, std::move(config));
  if (!o.run_file.empty()) data.side_files.emplace_back(kRunFile, o.run_file);
  // a file of its own, like run.toml: two runs that train the same bits (one saving in the
  // background, or logging elsewhere) write the same trainer_state.json
  data.side_files.emplace_back(kRunOptionsFile, run_options(o).dump(2) + "\n");
  return data;
}

// Checkpoint directories are <out>/step-00000123 and <out>/latest names the newest complete one
// (io/checkpoint.h); <out>/best names --save-best's. The --keep-last newest are kept (a kill while
// writing one leaves the one before), and the best.
std::string commit_checkpoint(const TrainOptions& o, const CheckpointData& data, int64_t step,
                              const RunState& run) {
  const fs::path dir = save_run_checkpoint(o.out_dir, step, data);
  const std::string newest = dir.filename().string();
  if (run.is_best) write_file_atomic(fs::path(o.out_dir) / kBestFile, newest + "\n");
  const std::string best = run.best ? checkpoint_dir_name(run.best->step) : "";
  std::vector<fs::path> old;
  for (const auto& e : fs::directory_iterator(o.out_dir)) {
    const std::string n = e.path().filename().string();
    if (e.is_directory() && n.size() == newest.size() && n.rfind("step-", 0) == 0 && n < newest &&
        n != best)
      old.push_back(e.path());
  }
  std::sort(old.begin(), old.end());
  // --keep-last: the newest (latest's) and the keep_last - 1 before it; 0 keeps every one
  const size_t older_kept = o.keep_last > 0 ? size_t(o.keep_last - 1) : old.size();
  for (size_t i = 0; i + older_kept < old.size(); ++i) fs::remove_all(old[i]);
  return dir.string();
}

// The checkpoints of another run in o.out_dir (see Note [One run a directory]), oldest first,
// with its `latest` and `best` files: empty when there are none, when the run writes none, or
// when it resumes the run that folder holds.
std::vector<fs::path> other_runs_checkpoints(const TrainOptions& o) {
  const fs::path out(o.out_dir);
  std::error_code ec;
  if (!o.checkpoints || !fs::is_directory(out, ec)) return {};
  if (!o.resume_dir.empty()) {
    const fs::path r(o.resume_dir);
    const fs::path resumed = has_model_tensors(r) ? r.parent_path() : r;  // a run, or one step
    if (fs::equivalent(resumed, out, ec)) return {};
  }
  remove_stale_temporaries(out);  // what a killed run left is no run's checkpoint
  std::vector<fs::path> found;
  for (const auto& e : fs::directory_iterator(out)) {
    const std::string n = e.path().filename().string();
    if ((e.is_directory() && n.rfind("step-", 0) == 0) ||
        (e.is_regular_file() && (n == kLatestFile || n == kBestFile)))
      found.push_back(e.path());
  }
  std::sort(found.begin(), found.end());
  return found;
}

}  // namespace

void check_out_dir(const TrainOptions& o) {
  // a checkpoint or model folder: its `latest` would name the new run's checkpoints, so the
  // folder would load them in place of its own weights (eval, generate, --init-from, --resume)
  if (has_model_tensors(o.out_dir))
    throw ConfigError(
        str("--out ", o.out_dir, " is a checkpoint (it holds ",
            fs::exists(fs::path(o.out_dir) / kModelFile) ? kModelFile : kModelIndexFile,
            "): a run writes into a folder of its own; give another --out"));
  const std::vector<fs::path> found = other_runs_checkpoints(o);
  if (found.empty()) return;
  if (o.overwrite) {
    // the run reads --init-from's side files (tokenizer, generation config) at every save
    std::error_code ec;
    const fs::path out = fs::weakly_canonical(o.out_dir, ec);
    const fs::path from = fs::weakly_canonical(o.init_from, ec);
    if (!o.init_from.empty() && (from == out || from.parent_path() == out))
      throw ConfigError(str("--overwrite would remove --init-from ", o.init_from,
                            ", which the run reads: copy it out of --out ", o.out_dir,
                            " first, or give another --out"));
    return;
  }
  std::string newest;
  for (const fs::path& p : found)
    if (const std::string n = p.filename().string();
        n.rfind("step-", 0) == 0 && n.find('.') == std::string::npos)  // not a live temporary
      newest = n;
  throw ConfigError(str("--out ", o.out_dir, " holds another run's checkpoints",
                        newest.empty() ? std::string() : str(" (newest ", newest, ")"),
                        ": continue that run with --resume ", o.out_dir,
                        ", start from its weights with --init-from ", o.out_dir,
                        " and another --out, or give --overwrite to remove them"));
}

int remove_other_runs_checkpoints(const TrainOptions& o) {
  if (!o.overwrite) return 0;
  int removed = 0;
  for (const fs::path& p : other_runs_checkpoints(o)) {
    removed += p.filename().string().rfind("step-", 0) == 0;
    fs::remove_all(p);
  }
  return removed;
}

const char* precision_name(const Backend& backend) {
  return backend.activation_dtype() == DType::kBF16 ? "bf16" : "fp32";
}

namespace {

bool ends_with(const std::string& s, std::string_view tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// Tensors that Hugging Face checkpoints carry beside the parameters, all derived from others:
// LLaMA's rotary inverse frequencies, GPT-2's causal mask and its masked value, and a tied
// model's lm_head.weight (its head is the embedding: transformers ties the two after loading,
// so the file's copy is never used). Loading skips them.
bool is_derived(const std::string& name, const ModelConfig& config) {
  return ends_with(name, ".rotary_emb.inv_freq") || ends_with(name, ".attn.bias") ||
         ends_with(name, ".attn.masked_bias") ||
         (config.tie_word_embeddings && name == "lm_head.weight");
}

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += str(i ? ", " : "", shape[i]);
  return s + "]";
}

// A tensor of the file that no parameter takes is a checkpoint of another model (or another
// layout of this one): refused by name before anything is read, rather than dropped.
void check_no_extra_tensors(const Model& model, const SafetensorsSet& file,
                            const std::set<std::string>& taken) {
  constexpr size_t kShown = 4;
  std::vector<std::string> extra;
  for (const std::string& name : file.names())
    if (!taken.count(name) && !is_derived(name, model.config())) extra.push_back(name);
  if (extra.empty()) return;
  std::string shown;
  for (size_t i = 0; i < std::min(extra.size(), kShown); ++i)
    shown += str(
        i ? ", " : "", "'", extra[i], "' ", shape_string(file.shape(extra[i])),
        file.num_files() > 1 ? str(" in ", file.file_of(extra[i]).path().filename().string()) : "");
  if (extra.size() > kShown) shown += ", ...";
  throw DataError(str(file.path().string(), file.num_files() > 1 ? "'s shards hold " : " holds ",
                      extra.size(), " tensor", extra.size() == 1 ? "" : "s", " that the ",
                      model.architecture().name(), " model of this config does not have: ", shown,
                      "; the checkpoint is of another model or config"));
}

}  // namespace

// GPT-2 files saved from a GPT2Model (as the Hub's gpt2 checkpoints are) name the tensors without
// GPT2LMHeadModel's "transformer." prefix ("h.0.attn.c_attn.weight"); both forms load.
void load_model_tensors(Model& model, const SafetensorsSet& file) {
  const std::string prefix(model.architecture().optional_name_prefix());
  auto file_name = [&](const std::string& param) {  // the parameter's name in the file
    if (!prefix.empty() && !file.contains(param) && param.rfind(prefix, 0) == 0 &&
        file.contains(param.substr(prefix.size())))
      return param.substr(prefix.size());
    return param;
  };
  std::vector<std::string> names;
  for (const ParamInfo& p : model.layout().params()) names.push_back(file_name(p.name));
  // a pipeline rank reads its chunks' tensors of the whole model's (Note [Pipeline parts])
  std::set<std::string> known(names.begin(), names.end());
  if (model.pipeline()) {
    const ParamLayout whole(model.config());
    for (const ParamInfo& p : whole.params()) known.insert(file_name(p.name));
  }
  check_no_extra_tensors(model, file, known);
  std::vector<float> staging;  // when the host cannot address the parameters
  for (size_t i = 0; i < names.size(); ++i) {
    const ParamInfo& p = model.layout().params()[i];
    read_part_into_device(file, names[i], model.layout(), p.is_split() ? &p : nullptr,
                          model.params() + p.offset, p.shape, model.backend(), staging);
  }
  // weights that hold NaN or infinity (a run that diverged before it was saved) would evaluate to
  // no loss and generate NUL bytes: refused, naming the first such tensor (one pass over them)
  Backend& be = model.backend();
  if (std::isfinite(be.sum_squares(model.params_tensor()))) return;
  for (size_t i = 0; i < names.size(); ++i) {
    const ParamInfo& p = model.layout().params()[i];
    if (!std::isfinite(be.sum_squares(model.params_tensor().part(p.offset, Shape{p.numel}))))
      throw DataError(str(file.path().string(), ": tensor ", names[i],
                          " holds NaN or infinite values (the run diverged before this save?)"));
  }
}

// Note [Resume]
// A resumed run continues bit for bit: the weights and every optimiser state tensor are restored
// exactly (fp32 in safetensors; a bf16 save's master weights, Note [Master weights beside bf16]),
// as are the optimiser's name and hyperparameters and the noise-scale EMAs (trainer_state.json);
// the step counter sets the schedule and the sampler (windows are a pure function of seed, step,
// micro-batch and row), and the options that shape the run are restored from the checkpoint
// rather than taken from the command line (given there with another value than the checkpoint's,
// --seq, --batch, --lr and the rest of pinned_options are refused, not silently dropped; the same
// value passes, so a script may repeat its flags). --steps and --data, when the command line leaves
// them out, are the run's own: `memo train --resume DIR` continues a run to its end on its data
// (recorded, as --log is, as an absolute path: a resume from another directory reads the same).
// Given,
// --steps moves the end (the cosine schedule is over the new count, so the continuation differs
// from the run as first planned; the start-up line says so) and --data may name moved data (its
// windows are the same only if its tokens are). A noise batch schedule's options and state are
// saved exactly (hex floats) and restored the same way: its flags on a resuming command line are
// ignored, like --batch. --save-dtype and --max-shard-size shape only the files: a resumed run
// keeps its checkpoint's (its torch_dtype; trainer_state.json's max_shard_bytes) unless given.
// So do the flags of run_options (--save-every, --eval-every, --log, --tensorboard,
// --skip-nonfinite, ...): without them a resumed run wrote no periodic checkpoint, no log and no
// validation points, and stopped at the first non-finite step the run would have skipped. The
// log and events are restored only into the folder the run wrote (run_options.json's "out"): a
// branch into another --out, or a copied checkpoint, names its own or none. The optimiser flags
// are checked against trainer_state.json's optimiser, as the pinned ones are (cli/train_command.cc:
// check_resume_flags, which also refuses --val-data / --val-fraction without --data, and
// --init-from).

namespace {

void read_resume_state(TrainOptions& o, ResumePoint& r, const std::string& file) {
  const nlohmann::json& state = r.checkpoint.trainer_state;
  r.step = state_field<int64_t>(state, "step", file);
  if (r.step < 1) throw DataError(str(file, ": field 'step' = ", r.step, " is not a step (>= 1)"));
  if (!state.contains("options")) throw DataError(str(file, ": field 'options' is missing"));
  const nlohmann::json& pinned = state.at("options");
  const nlohmann::json asked = pinned_options(o);  // the command line's values
  restore_pinned(o, pinned, file);
  for (const std::string& key : o.pinned_given)
    if (pinned.contains(key) && asked.at(key) != pinned.at(key)) {
      // --micro-batch 0 means the whole batch, which the checkpoint records resolved
      if (key == "micro_batch" && asked.at(key) == 0 && pinned.contains("batch") &&
          pinned.at(key) == pinned.at("batch"))
        continue;
      std::string flag = "--" + key;
      std::replace(flag.begin(), flag.end(), '_', '-');
      throw ConfigError(str(flag, " ", json_excerpt(asked.at(key)), ": ", o.resume_dir,
                            " was trained with ", json_excerpt(pinned.at(key)),
                            ", which a resumed run keeps; resume without ", flag,
                            ", or start a new run from its weights with --init-from"));
    }
  restore_run_options(o, r.checkpoint.dir);
  r.run_steps = state_field<int64_t>(pinned, "steps", file);
  if (!o.steps_given) {
    o.steps = r.run_steps;
  } else if (!o.seq_schedule.empty() && o.steps != r.run_steps) {
    throw ConfigError(str("--steps ", o.steps, ": ", o.resume_dir,
                          " runs length stages (--seq-schedule ", o.seq_schedule,
                          "), whose steps are the run's (", r.run_steps,
                          "); resume without --steps"));
  }
  if (!o.data_given) {
    o.data_path = state_field<std::string>(pinned, "data", file);
    o.val_data_path = state_field<std::string>(pinned, "val_data", file, "");
    o.val_fraction = state_field<double>(pinned, "val_fraction", file, 0.05);
  }
  o.optimizer = optimizer_choice_from_state(state);
  if (!o.max_shard_bytes && state.contains("max_shard_bytes"))
    o.max_shard_bytes = state_field<int64_t>(state, "max_shard_bytes", file);
  r.noise = noise_schedule_from_checkpoint(state, r.step, o.resume_dir);
  // fields the session reads later (its precision, the optimiser's count, the best checkpoint):
  // their types checked here, where a fault names the file
  state_field<std::string>(state, "precision", file, "");
  state_field<int64_t>(state, "optimizer_steps", file, 0);
  if (state.contains("best") && !state.at("best").is_null()) {
    state_field<int64_t>(state.at("best"), "step", file);
    state_field<double>(state.at("best"), "val_loss", file);
  }
  // the noise-scale probe's and the bad-step guard's states (restored by the session)
  auto part = [&](const char* key) -> const nlohmann::json* {
    if (!state.contains(key) || state.at(key).is_null()) return nullptr;
    if (!state.at(key).is_object())
      throw DataError(
          str(file, ": field '", key, "' = ", json_excerpt(state.at(key)), " is not an object"));
    return &state.at(key);
  };
  auto count = [&](const nlohmann::json& j, const char* key, const char* within) {
    const int64_t n = state_field<int64_t>(j, key, file, std::nullopt, within);
    if (n < 0) throw DataError(str(file, ": field '", within, ".", key, "' = ", n, " is negative"));
  };
  if (const nlohmann::json* gns = part("gns")) {
    state_field<double>(*gns, "ema_g2", file, std::nullopt, "gns");
    state_field<double>(*gns, "ema_trace", file, std::nullopt, "gns");
    count(*gns, "updates", "gns");
    count(*gns, "skipped", "gns");
  }
  if (const nlohmann::json* bad = part("bad_steps")) {
    state_field<std::vector<double>>(*bad, "window", file, std::nullopt, "bad_steps");
    for (const char* key :
         {"nonfinite_in_a_row", "spikes_in_a_row", "nonfinite_skipped", "spikes_skipped"})
      count(*bad, key, "bad_steps");
  }
}

}  // namespace

std::optional<ResumePoint> resume_point(TrainOptions& o) {
  if (o.resume_dir.empty()) return std::nullopt;
  ResumePoint r{load_checkpoint(find_latest_checkpoint(o.resume_dir)), 0, 0, std::nullopt};
  check_config_describes_tensors(r.checkpoint);
  // the position flags first: a resume that tries to extend the context learns the way to do it
  // before any other refusal
  const PositionOverrides& p = o.positions;
  const ModelConfig& was = r.checkpoint.config;
  if (p.any() && model_config_to_json(p.applied_to(was)) != model_config_to_json(was))
    throw ConfigError(
        str("--rope-theta, --rope-scaling and --max-position-embeddings change a "
            "model for a new run; ",
            o.resume_dir,
            " continues as it was trained (start a new run from its weights with "
            "--init-from)"));
  if (r.checkpoint.trainer_state.is_null())
    throw DataError(str(o.resume_dir,
                        " holds no trainer state (trainer_state.json): it cannot be resumed; use "
                        "--init-from to start a new run from its weights"));
  const std::string file = (r.checkpoint.dir / kTrainerStateFile).string();
  try {
    read_resume_state(o, r, file);
  } catch (const nlohmann::json::exception& e) {  // a field read below restore_pinned
    throw DataError(str(file, ": ", e.what()));
  }
  if (o.batch_schedule && !r.noise)
    throw ConfigError(
        str(o.resume_dir, " ran a fixed batch: --batch-schedule cannot be added on --resume"));
  if (r.noise) {
    o.batch_schedule = r.noise->options();
    if (r.noise->done())
      throw ConfigError(str(o.resume_dir, " has spent the batch schedule's budget of ",
                            r.noise->options().schedule.total_tokens, " tokens at step ", r.step,
                            ": there is nothing to continue"));
  } else if (o.steps <= r.step) {
    throw ConfigError(o.steps_given
                          ? str("--steps ", o.steps, " but the checkpoint is already at step ",
                                r.step, "; ask for more steps to continue")
                          : str(o.resume_dir, " has run its ", o.steps,
                                " steps: give --steps above ", r.step, " to continue it"));
  }
  return r;
}

DType start_weights(Model& model, const ModelConfig& run_config, const TrainOptions& o,
                    const std::optional<ResumePoint>& resume) {
  if (resume) {
    const LoadedCheckpoint& c = resume->checkpoint;
    if (c.master) {
      load_model_tensors(model, *c.master);
    } else {
      for (const std::string& name : c.model.names())
        if (c.model.dtype(name) != "F32")
          throw DataError(str(c.dir.string(), " holds tensor '", name, "' in ", c.model.dtype(name),
                              " and no ", kMasterFile,
                              " (the fp32 weights): it cannot be resumed bit for bit; use "
                              "--init-from to start a new run from its weights"));
      load_model_tensors(model, c.model);
    }
    return c.model_dtype;
  }
  if (o.init_from.empty()) {
    model.init(o.seed);
    return DType::kF32;
  }
  LoadedCheckpoint init =
      load_checkpoint(find_latest_checkpoint(o.init_from), CheckpointUse::kWeights);
  // the run's model is --init-from's with the position flags, or --config's, which must agree
  // (before --stage-rope, which the model may already carry)
  if (model_config_to_json(o.positions.applied_to(init.config)) != model_config_to_json(run_config))
    throw ConfigError(
        str("--init-from ", o.init_from, " has a different model config than ", o.config_path));
  load_model_tensors(model, init.model);
  return init.model_dtype;
}

void restore_training_state(Optimizer& opt, Backend& backend, GradNoiseProbe* probe,
                            const ResumePoint& resume, const TrainOptions& o,
                            const ParamLayout& layout) {
  if (!opt.state().empty() && !resume.checkpoint.optimizer)
    throw DataError(
        str(o.resume_dir, " has no optimizer.safetensors: it cannot be resumed exactly"));
  if (resume.checkpoint.optimizer)
    restore_optimizer(opt, backend, *resume.checkpoint.optimizer, resume.step, o.resume_dir,
                      layout);
  // the optimiser's own count, where skipped steps (Note [Bad steps]) made it differ
  opt.set_steps_done(resume.checkpoint.trainer_state.value("optimizer_steps", resume.step));
  const nlohmann::json& gns = resume.checkpoint.trainer_state.value("gns", nlohmann::json());
  if (probe && gns.is_object()) probe->estimator().restore(gns.get<scaling::NoiseScaleState>());
}

std::optional<BestCheckpoint> best_checkpoint_from_state(const nlohmann::json& trainer_state) {
  const nlohmann::json& best = trainer_state.value("best", nlohmann::json());
  if (!best.is_object()) return std::nullopt;
  return BestCheckpoint{best.at("step"), best.at("val_loss")};
}

float* StagingPool::next(int64_t numel) {
  const int64_t bytes = numel * int64_t(sizeof(float));
  const bool fresh = next_ == blocks_.size() || blocks_[next_].bytes() != bytes;
  if (next_ == blocks_.size())
    blocks_.emplace_back(backend_.allocator(MemSpace::kPinnedHost), bytes, "a checkpoint's copy");
  else if (fresh)
    blocks_[next_] =
        RawBuffer(backend_.allocator(MemSpace::kPinnedHost), bytes, "a checkpoint's copy");
  // Huge pages for a fresh block before its first touch: a copy of the whole state into 4 KiB
  // pages faults once per page (2.5 GB: 10 s on a 2-core EPYC, against 0.2 s for the copies into
  // the same pages at the next save). Advice only: where the kernel or the memory (a GPU
  // runtime's pinned pages) does not take it, nothing changes.
  if (fresh && bytes >= (int64_t(1) << 21))
    madvise(blocks_[next_].data(), size_t(bytes), MADV_HUGEPAGE);
  return blocks_[next_++].as<float>();
}

CheckpointWriter::CheckpointWriter(const TrainOptions& o, Model& model, Optimizer& opt,
                                   const std::vector<ZeroShard>& shards,
                                   Communicator& data_parallel, Communicator& job,
                                   const GradNoiseProbe* probe, Communicator* pipeline)
    : o_(o),
      model_(model),
      opt_(opt),
      shards_(shards),
      data_parallel_(data_parallel),
      job_(job),
      probe_(probe),
      pipeline_(pipeline && pipeline->size() > 1 ? pipeline : nullptr),
      pool_(model.backend()) {
  if (o.checkpoints && job.rank() == 0) origin_files_ = side_files_of_origin(o);
  // --async-save: one staging pass now (collective, as a save is), so that the pool's pages are
  // touched before step 1 rather than at the first checkpoint (a fresh 2.5 GB costs 9 s of page
  // faults on a 2-core EPYC VM, a reused one 0.2 s), and a host that cannot hold the copy fails
  // here.
  if (o.async_save && o.checkpoints) {
    std::vector<NamedTensor> weights, state;
    stage(weights, state);
  }
}

namespace {

// Note [Pipeline checkpoints]
// Under --pp each rank holds its chunks' tensors (Note [Pipeline parts] in model/model.h) and
// their optimiser state (under --tp gathered whole first, model_tensors). At a checkpoint the
// pipeline of data-, tensor- and context-parallel rank 0 (whose first rank is the job's rank 0)
// sends them to its first rank: each other rank sends a header (its
// tensors' names, shapes and kinds as JSON, the header's length before it) and then each tensor,
// and the first rank puts all of them in the one-process order (the whole model's layout; an
// optimiser's state per parameter in that order), dropping the last stage's copy of a tied
// embedding and of its state, which equal the first stage's. So the files are a one-process
// run's, and any layout resumes them. The other data-parallel ranks' pipelines hold the same
// tensors and send nothing.

// Text as the bytes of a bf16 tensor (point-to-point carries any dtype's bits), its length first.
void send_text(Communicator& group, const std::string& text, int peer) {
  const uint64_t n = text.size();
  uint16_t length[4];
  for (int i = 0; i < 4; ++i) length[i] = uint16_t(n >> (16 * i));
  group.send(ConstTensor(length, {4}, DType::kBF16, MemSpace::kHost), peer);
  std::string padded = text;
  padded.resize((n + 1) / 2 * 2);
  group.send(
      ConstTensor(padded.data(), {int64_t(padded.size() / 2)}, DType::kBF16, MemSpace::kHost),
      peer);
}

std::string recv_text(Communicator& group, int peer) {
  uint16_t length[4];
  group.recv(Tensor(length, {4}, DType::kBF16, MemSpace::kHost), peer);
  uint64_t n = 0;
  for (int i = 0; i < 4; ++i) n |= uint64_t(length[i]) << (16 * i);
  std::string text((n + 1) / 2 * 2, '\0');
  group.recv(Tensor(text.data(), {int64_t(text.size() / 2)}, DType::kBF16, MemSpace::kHost), peer);
  text.resize(n);
  return text;
}

// The stages' tensors on the pipeline's first rank, in the one-process order; received copies
// kept in `received`. Collective over the pipeline group.
void gather_pipeline_tensors(Communicator& group, const ModelConfig& config,
                             std::vector<NamedTensor>& weights,
                             std::vector<NamedTensor>& optimizer_state,
                             std::deque<std::vector<float>>& received) {
  auto numel = [](const std::vector<int64_t>& shape) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  };
  if (group.rank() != 0) {
    nlohmann::json header = nlohmann::json::array();
    for (const auto* list : {&weights, &optimizer_state})
      for (const NamedTensor& t : *list)
        header.push_back({{"name", t.name}, {"shape", t.shape}, {"state", list != &weights}});
    send_text(group, header.dump(), 0);
    for (const auto* list : {&weights, &optimizer_state})
      for (const NamedTensor& t : *list)
        group.send(ConstTensor(t.data, {numel(t.shape)}, DType::kF32, MemSpace::kHost), 0);
    return;
  }
  for (int r = 1; r < group.size(); ++r) {
    const nlohmann::json header = nlohmann::json::parse(recv_text(group, r));
    for (const nlohmann::json& h : header) {
      NamedTensor t{h.at("name").get<std::string>(), h.at("shape").get<std::vector<int64_t>>(),
                    nullptr};
      received.emplace_back(size_t(numel(t.shape)));
      group.recv(Tensor(received.back().data(), {numel(t.shape)}, DType::kF32, MemSpace::kHost), r);
      t.data = received.back().data();
      (h.at("state").get<bool>() ? optimizer_state : weights).push_back(std::move(t));
    }
  }
  // the one-process order: the layout's, a state tensor "<kind>.<parameter>" at its parameter's
  // place (stably, so the kinds keep the optimiser's order)
  const ParamLayout whole(config);
  std::map<std::string, size_t> place;
  for (const ParamInfo& p : whole.params()) place.emplace(p.name, place.size());
  auto order = [&](std::vector<NamedTensor>& list, bool state) {
    auto key = [&](const NamedTensor& t) {
      const std::string name = state ? t.name.substr(t.name.find('.') + 1) : t.name;
      const auto it = place.find(name);
      return it == place.end() ? place.size() : it->second;
    };
    std::stable_sort(list.begin(), list.end(),
                     [&](const NamedTensor& a, const NamedTensor& b) { return key(a) < key(b); });
    std::set<std::string> seen;  // a tied embedding's second copy
    std::erase_if(list, [&](const NamedTensor& t) { return !seen.insert(t.name).second; });
  };
  order(weights, false);
  order(optimizer_state, true);
}

}  // namespace

std::shared_ptr<void> CheckpointWriter::stage(std::vector<NamedTensor>& weights,
                                              std::vector<NamedTensor>& optimizer_state) {
  // What the views point into, kept together until the write is done: the ZeRO-gathered state
  // (the views of a host-addressable backend are its own memory), the staged copies and the
  // other pipeline stages' tensors.
  struct Held {
    GatheredState state;
    std::optional<HostStaging> staging;
    std::deque<std::vector<float>> received;
  };
  Backend& backend = model_.backend();
  auto held = std::make_shared<Held>();
  held->state = o_.zero == 1
                    ? gather_optimizer_state(opt_, o_.optimizer.name, o_.optimizer.options,
                                             model_.layout(), shards_, data_parallel_, backend)
                    : GatheredState{opt_.state(), {}, {}};
  // Every rank gathers (collective); rank 0 alone keeps copies for a background write. Note
  // [Pipeline checkpoints]: under --tp and --cp every rank of a stage's group could have the whole
  // tensors; the groups' first rank sends them, the other ranks hold none.
  const Communicator* tp = model_.tensor_parallel_group();
  const Communicator* cp = model_.context_parallel_group();
  const bool sends = pipeline_ && data_parallel_.rank() == 0 && (!tp || tp->rank() == 0) &&
                     (!cp || cp->rank() == 0);
  const bool background = o_.async_save && job_.rank() == 0;
  pool_.rewind();
  held->staging.emplace(backend, background ? &pool_ : nullptr, job_.rank() == 0 || sends);
  weights = model_tensors(model_, *held->staging);
  optimizer_state = state_tensors(model_, held->state.tensors, *held->staging);
  if (sends)
    gather_pipeline_tensors(*pipeline_, model_.config(), weights, optimizer_state, held->received);
  return held;
}

CheckpointWriter::~CheckpointWriter() {
  if (background_.joinable()) background_.join();
}

std::string CheckpointWriter::save(const StepSchedule& plan, int64_t step, const RunState& run) {
  wait();
  std::vector<NamedTensor> weights, optimizer_state;
  const std::shared_ptr<void> staging = stage(weights, optimizer_state);
  if (job_.rank() != 0) {
    if (o_.async_save)
      pending_step_ = step;
    else
      finish(step, "");
    return "";
  }
  const std::string dir = (fs::path(o_.out_dir) / checkpoint_dir_name(step)).string();
  auto data = std::make_shared<CheckpointData>(checkpoint_data(o_, model_, opt_, std::move(weights),
                                                               std::move(optimizer_state), probe_,
                                                               plan, step, run, origin_files_));
  const auto write = [this, data, staging, step, run]() {
    try {
      commit_checkpoint(o_, *data, step, run);
    } catch (const std::exception& e) {
      background_error_ = e.what();
    }
  };
  background_error_.clear();
  if (!o_.async_save) {
    write();
    finish(step, background_error_);
    return dir;
  }
  pending_step_ = step;
  background_ = std::thread([write] {
    // The write takes the CPU only when training leaves it idle (Note [Asynchronous checkpoints]):
    // on a CPU run its serialisation would otherwise preempt the step's threads.
    sched_param idle{};
    pthread_setschedparam(pthread_self(), SCHED_IDLE, &idle);
    write();
  });
  return dir;
}

void CheckpointWriter::wait() {
  if (!pending_step_) return;
  const int64_t step = *pending_step_;
  pending_step_.reset();
  if (background_.joinable()) {
    // Waited for, the write is on the run's path: it leaves SCHED_IDLE for the run's own policy,
    // or another busy process on the machine would hold it (and the run, and a stop's grace
    // period) for as long as it is busy. Leaving SCHED_IDLE takes root, CAP_SYS_NICE or a
    // RLIMIT_NICE of 20; without them the write stays idle and waits for an idle core.
    sched_param normal{};
    pthread_setschedparam(background_.native_handle(), SCHED_OTHER, &normal);
    background_.join();
  }
  finish(step, job_.rank() == 0 ? background_error_ : "");
}

void CheckpointWriter::finish(int64_t step, const std::string& error) {
  double failed = error.empty() ? 0.0 : 1.0;
  if (job_.size() > 1) job_.all_reduce_sum(std::span<double>(&failed, 1));
  if (failed == 0.0) return;
  std::string previous = "no earlier checkpoint";
  try {
    previous = str(find_latest_checkpoint(o_.out_dir).string(), " still loads");
  } catch (const Error&) {
  }
  throw DataError(str("checkpoint ", checkpoint_dir_name(step), " could not be written (",
                      error.empty() ? "on rank 0" : error, "); the run stops: ", previous));
}

}  // namespace memo
