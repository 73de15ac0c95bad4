#include "memo/train/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <ostream>
#include <vector>

#include <nlohmann/json.hpp>
#include <omp.h>

#include "memo/backend/caching_allocator.h"
#include "memo/core/error.h"
#include "memo/data/sampler.h"
#include "memo/data/shards.h"
#include "memo/data/token_data.h"
#include "memo/io/atomic_file.h"
#include "memo/io/checkpoint.h"
#include "memo/io/config_json.h"
#include "memo/kernels/cpu/kernels.h"
#include "memo/kernels/cpu/matmul_peak.h"
#include "memo/kernels/cpu/tensor_ops.h"
#include "memo/memory/strategy.h"
#include "memo/model/model.h"
#include "memo/train/device_plan.h"
#include "memo/train/grad_noise.h"
#include "memo/train/schedule.h"

namespace fs = std::filesystem;

namespace memo {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

std::string duration_str(double s) {
  char buf[32];
  if (s < 60) std::snprintf(buf, sizeof buf, "%.0fs", s);
  else if (s < 3600) std::snprintf(buf, sizeof buf, "%dm%02ds", int(s) / 60, int(s) % 60);
  else std::snprintf(buf, sizeof buf, "%dh%02dm", int(s) / 3600, int(s) % 3600 / 60);
  return buf;
}

// Which training options a checkpoint pins: resuming with other values would not continue the
// same run, so they are restored from trainer_state.json (see Note [Resume]).
nlohmann::json pinned_options(const TrainOptions& o) {
  return {{"seq", o.seq},           {"batch", o.batch},
          {"micro_batch", o.micro_batch}, {"lr", o.lr},
          {"min_lr_ratio", o.min_lr_ratio}, {"warmup", o.warmup},
          {"clip", o.clip},         {"gns", o.gns},
          {"gns_decay", o.gns_decay}, {"seed", o.seed},
          {"steps", o.steps},       {"data", o.data_path},
          {"val_data", o.val_data_path}, {"val_fraction", o.val_fraction}};
}

void restore_pinned(TrainOptions& o, const nlohmann::json& j) {
  o.seq = j.at("seq");
  o.batch = j.at("batch");
  o.micro_batch = j.at("micro_batch");
  o.lr = j.at("lr");
  o.min_lr_ratio = j.at("min_lr_ratio");
  o.warmup = j.at("warmup");
  o.clip = j.at("clip");
  o.gns = j.value("gns", false);  // checkpoints from before the noise scale ran without it
  o.gns_decay = j.value("gns_decay", 0.99);
  o.seed = j.at("seed");
}

std::vector<NamedTensor> model_tensors(Model& model) {
  std::vector<NamedTensor> out;
  for (const ParamInfo& p : model.layout().params())
    out.push_back({p.name, p.shape, model.params() + p.offset});
  return out;
}

}  // namespace

// GPT-2 files saved from a GPT2Model (as the Hub's gpt2 checkpoints are) name the tensors without
// GPT2LMHeadModel's "transformer." prefix ("h.0.attn.c_attn.weight"); both forms load.
void load_model_tensors(Model& model, const SafetensorsFile& file) {
  const std::string prefix = "transformer.";
  for (const ParamInfo& p : model.layout().params()) {
    std::string name = p.name;
    if (model.config().is_gpt2() && !file.contains(name) && name.rfind(prefix, 0) == 0 &&
        file.contains(name.substr(prefix.size())))
      name = name.substr(prefix.size());
    file.read_into(name, model.params() + p.offset, p.numel);
  }
}

namespace {

// Checkpoint directories are <out>/step-00000123 and <out>/latest names the newest complete one
// (io/checkpoint.h). The two newest are kept: a kill while writing one leaves the other.
std::string save(const TrainOptions& o, Model& model, Optimizer& opt,
                 const GradNoiseProbe* probe, int64_t step) {
  CheckpointData data;
  data.config = model.config();
  data.model = model_tensors(model);
  for (const StateTensor& s : opt.state()) data.optimizer.push_back({s.name, s.shape, s.data});
  data.trainer_state = {{"step", step},
                        {"optimizer", optimizer_record(opt)},
                        {"options", pinned_options(o)},
                        {"gns", probe ? nlohmann::json(probe->estimator().state()) : nlohmann::json()}};
  data.tokenizer_json = shard_tokenizer_json(o.data_path);  // the checkpoint names its tokenizer
  const fs::path dir = save_run_checkpoint(o.out_dir, step, data);
  const std::string newest = dir.filename().string();
  std::vector<fs::path> old;
  for (const auto& e : fs::directory_iterator(o.out_dir)) {
    const std::string n = e.path().filename().string();
    if (e.is_directory() && n.size() == newest.size() && n.rfind("step-", 0) == 0 && n < newest)
      old.push_back(e.path());
  }
  std::sort(old.begin(), old.end());
  for (size_t i = 0; i + 1 < old.size(); ++i) fs::remove_all(old[i]);
  return dir.string();
}

}  // namespace

// Note [Resume]
// A resumed run continues bit for bit: the weights and every optimiser state tensor are restored
// exactly (fp32 in safetensors), as are the optimiser's name and hyperparameters and the
// noise-scale EMAs (trainer_state.json); the step counter sets the schedule and the sampler
// (windows are a pure function of seed, step, micro-batch and row), and the options that shape
// the run are restored from the checkpoint rather than taken from the command line.

TrainResult train(const TrainOptions& options_in, std::ostream& progress) {
  TrainOptions o = options_in;
  std::optional<LoadedCheckpoint> resume;
  int64_t start_step = 0;
  if (!o.resume_dir.empty()) {
    resume = load_checkpoint(find_latest_checkpoint(o.resume_dir));
    const nlohmann::json& state = resume->trainer_state;
    if (!state.contains("step") || !state.contains("options"))
      throw DataError(str(o.resume_dir, " holds no trainer state (trainer_state.json): it cannot be resumed; use --init-from to start a new run from its weights"));
    restore_pinned(o, state.at("options"));
    o.optimizer = optimizer_choice_from_state(state);
    start_step = state.at("step");
    if (o.steps <= start_step)
      throw ConfigError(str("--steps ", o.steps, " but the checkpoint is already at step ", start_step,
                            "; ask for more steps to continue"));
  }
  if (o.micro_batch == 0) o.micro_batch = o.batch;
  if (o.batch <= 0 || o.micro_batch <= 0 || o.batch % o.micro_batch != 0)
    throw ConfigError(str("--batch ", o.batch, " must be a positive multiple of --micro-batch ", o.micro_batch));
  if (o.seq <= 0) throw ConfigError(str("--seq ", o.seq, " must be positive"));
  if (o.steps <= 0) throw ConfigError(str("--steps ", o.steps, " must be positive"));

  const ModelConfig config = resume ? resume->config : load_model_config(o.config_path);
  if (o.seq > config.max_position_embeddings)
    throw ConfigError(str("--seq ", o.seq, " exceeds ", config.positions_field(), " = ",
                          config.max_position_embeddings, " of the model config"));
  // Data: validate everything before any output is written.
  TokenData all = TokenData::load(o.data_path, config.vocab_size);
  // A `memo tokenize` directory with validation shards validates on them (data/shards.h).
  std::optional<TokenData> val = o.val_data_path.empty()
                                     ? load_validation_shards(o.data_path, config.vocab_size)
                                     : std::nullopt;
  TokenData train_data = [&] {
    if (!o.val_data_path.empty()) {
      val = TokenData::load(o.val_data_path, config.vocab_size);
      return std::move(all);
    }
    if (val) return std::move(all);
    auto [tr, va] = split_tail(std::move(all), o.val_fraction);
    val = std::move(va);
    return std::move(tr);
  }();
  const WindowSampler sampler(train_data, o.seq, o.seed);

  Model model(config);
  if (resume) {
    load_model_tensors(model, resume->model);
  } else if (!o.init_from.empty()) {
    LoadedCheckpoint init = load_checkpoint(find_latest_checkpoint(o.init_from));
    if (model_config_to_json(init.config) != model_config_to_json(config))
      throw ConfigError(str("--init-from ", o.init_from, " has a different model config than ", o.config_path));
    load_model_tensors(model, init.model);
  } else {
    model.init(o.seed);
  }
  const std::unique_ptr<Optimizer> optimizer =
      make_optimizer(o.optimizer.name, model.layout(), o.optimizer.options);
  Optimizer& opt = *optimizer;
  const int64_t micro_steps = o.batch / o.micro_batch;
  std::optional<GradNoiseProbe> probe;  // see Note [Noise-scale accounting]
  if (o.gns && micro_steps >= 2)
    probe.emplace(model.params_numel(), micro_steps, o.micro_batch * o.seq,
                  scaling::NoiseScaleOptions{o.gns_decay});
  if (resume) {
    if (!opt.state().empty() && !resume->optimizer)
      throw DataError(str(o.resume_dir, " has no optimizer.safetensors: it cannot be resumed exactly"));
    if (resume->optimizer) restore_optimizer(opt, *resume->optimizer, start_step, o.resume_dir);
    opt.set_steps_done(start_step);
    const nlohmann::json& gns = resume->trainer_state.value("gns", nlohmann::json());
    if (probe && gns.is_object()) probe->estimator().restore(gns.get<scaling::NoiseScaleState>());
  }
  // Activations: the static plan within --device-memory (refused here, before any output, when
  // it does not fit), else the caching allocator. Validation runs forward-only, a sequence the
  // plan does not cover, so it uses the caching allocator, outside the budgeted arena.
  CachingAllocator caching;
  std::unique_ptr<PlannedAllocator> planned;
  if (o.device_memory_bytes > 0)
    planned = planned_allocator_within_budget(model, o.micro_batch, o.seq, o.device_memory_bytes,
                                              o.activations, progress);
  ActivationAllocator& alloc = planned ? static_cast<ActivationAllocator&>(*planned) : caching;
  const std::unique_ptr<ActivationStrategy> strategy = make_strategy(config, alloc, o.activations);
  KeepStrategy eval_strategy(config, caching);
  fs::create_directories(o.out_dir);
  std::ofstream log;
  if (!o.log_path.empty()) {
    log.open(o.log_path, resume ? std::ios::app : std::ios::trunc);
    if (!log) throw DataError(str("cannot open log file ", o.log_path, " for writing"));
  }

  const LrSchedule schedule{o.lr, o.lr * o.min_lr_ratio, o.warmup, o.steps};
  const int64_t tokens_per_step = o.batch * o.seq;
  const double flops_per_step = train_flops_per_token(config, o.seq) * double(tokens_per_step);
  std::vector<int32_t> inputs(size_t(o.micro_batch * o.seq)), targets(inputs.size());

  progress << "memo: " << model.layout().count() << " parameters (" << config.num_hidden_layers
           << " layers, hidden " << config.hidden_size << "), " << train_data.num_tokens()
           << " training tokens, " << o.batch << " x " << o.seq << " tokens per step ("
           << micro_steps << " micro-batches), " << opt.name() << " "
           << opt.hyperparameters().dump() << ", " << omp_get_max_threads() << " threads, "
           << cpu::blas_name() << "\n";
  // The BLAS warning comes before the first matrix product: a forced OpenBLAS core the CPU cannot
  // run crashes at the first sgemm.
  if (const std::string w = cpu::blas_warning(); !w.empty()) progress << "memo: warning: " << w << "\n";
  const double peak_flops = cpu::measure_matmul_peak_flops(0.5);  // the MFU denominator
  if (resume) progress << "memo: resuming at step " << start_step << " from " << o.resume_dir << "\n";
  if (strategy->wants_warmup()) {  // profile on the first micro-batch; its gradients are dropped
    sampler.fill(start_step + 1, 0, inputs.data(), targets.data(), o.micro_batch);
    model.zero_grads();
    model.forward_backward(inputs.data(), targets.data(), o.micro_batch, o.seq, 0.0f, *strategy, alloc);
  }
  progress << "memo: activations: " << strategy->summary() << "\n";

  TrainResult result;
  const float grad_scale = 1.0f / float(tokens_per_step);
  const auto t_start = Clock::now();
  for (int64_t step = start_step + 1; step <= o.steps; ++step) {
    const auto t0 = Clock::now();
    model.zero_grads();
    alloc.reset_peak();
    double loss_sum = 0.0;
    for (int64_t micro = 0; micro < micro_steps; ++micro) {
      sampler.fill(step, micro, inputs.data(), targets.data(), o.micro_batch);
      loss_sum += model.forward_backward(inputs.data(), targets.data(), o.micro_batch, o.seq,
                                         grad_scale, *strategy, alloc);
      if (probe) probe->after_micro(model.grads(), micro);
    }
    const double loss = loss_sum / double(tokens_per_step);
    if (!std::isfinite(loss))
      throw Error(str("loss is ", loss, " at step ", step, "; lower --lr (now ", o.lr, ")"));
    const double grad_sq = cpu::sum_squares(ConstTensor(model.grads(), {model.params_numel()}));
    const double grad_norm = std::sqrt(grad_sq);
    if (probe) probe->end_step(grad_sq);  // before clipping
    if (o.clip > 0 && grad_norm > o.clip)
      cpu::scale(Tensor(model.grads(), {model.params_numel()}), float(o.clip / (grad_norm + 1e-6)));
    const double lr = schedule.at(step);
    opt.step(model.params(), model.grads(), lr);
    const double step_s = seconds_since(t0);
    const double tokens_per_s = double(tokens_per_step) / step_s;
    const double mfu = flops_per_step / step_s / peak_flops;
    result.steps_done = step;
    result.final_loss = loss;
    if (log) {
      nlohmann::json record{{"step", step},           {"loss", loss},
                            {"lr", lr},               {"grad_norm", grad_norm},
                            {"tokens_per_s", tokens_per_s}, {"mfu", mfu},
                            {"peak_bytes", alloc.peak_live_bytes()},
                            {"reserved_bytes", alloc.reserved_bytes()},
                            {"device_peak_bytes", alloc.peak_live_bytes()},
                            {"host_peak_bytes", strategy->host_peak_bytes()}};
      record.update(probe ? probe->log_fields() : gns_null_fields());
      log << record.dump() << "\n" << std::flush;
    }
    if (step % o.log_every == 0 || step == o.steps) {
      const double elapsed = seconds_since(t_start);
      const double eta = elapsed / double(step - start_step) * double(o.steps - step);
      char line[200];
      std::snprintf(line, sizeof line,
                    "step %lld/%lld | loss %.4f | lr %.2e | grad norm %.3f | %.0f tok/s | MFU %.1f%% | ETA %s",
                    static_cast<long long>(step), static_cast<long long>(o.steps), loss, lr,
                    grad_norm, tokens_per_s, 100.0 * mfu, duration_str(eta).c_str());
      progress << line;
      if (probe && probe->estimator().b_simple())
        progress << " | B_simple " << int64_t(*probe->estimator().b_simple()) << " tok";
      progress << "\n" << std::flush;
    }
    if ((o.save_every > 0 && step % o.save_every == 0) || step == o.steps)
      result.checkpoint = save(o, model, opt, probe ? &*probe : nullptr, step);
  }
  // validation on windows in order from the start of the validation data
  if (val) {
    const WindowSampler val_sampler(*val, o.seq, o.seed);
    const int64_t windows = val_sampler.num_sequential_windows();
    double sum = 0.0;
    int64_t tokens = 0;
    for (int64_t b = 0; b < o.val_batches && b * o.micro_batch < windows; ++b) {
      const int64_t rows = std::min(o.micro_batch, windows - b * o.micro_batch);
      val_sampler.fill_sequential(b * o.micro_batch, inputs.data(), targets.data(), rows);
      sum += model.forward_loss(inputs.data(), targets.data(), rows, o.seq, eval_strategy, caching);
      tokens += rows * o.seq;
    }
    if (tokens > 0) {
      result.val_loss = sum / double(tokens);
      char line[120];
      std::snprintf(line, sizeof line, "validation loss %.4f over %lld tokens", *result.val_loss,
                    static_cast<long long>(tokens));
      progress << line << "\n";
    }
  }
  progress << "checkpoint: " << result.checkpoint << "\n";
  return result;
}

EvalResult evaluate_checkpoint(const std::string& checkpoint_dir, const std::string& data_path,
                               int64_t seq, int64_t batch, int64_t batches) {
  LoadedCheckpoint ckpt = load_checkpoint(find_latest_checkpoint(checkpoint_dir));
  Model model(ckpt.config);
  load_model_tensors(model, ckpt.model);
  if (seq > ckpt.config.max_position_embeddings)
    throw ConfigError(str("--seq ", seq, " exceeds ", ckpt.config.positions_field(), " = ",
                          ckpt.config.max_position_embeddings));
  TokenData data = TokenData::load(data_path, ckpt.config.vocab_size);
  const WindowSampler sampler(data, seq, 0);
  CachingAllocator alloc;
  KeepStrategy strategy(ckpt.config, alloc);
  std::vector<int32_t> inputs(size_t(batch * seq)), targets(inputs.size());
  EvalResult r;
  double sum = 0.0;
  const int64_t windows = sampler.num_sequential_windows();
  for (int64_t b = 0; b < batches && b * batch < windows; ++b) {
    const int64_t rows = std::min(batch, windows - b * batch);
    sampler.fill_sequential(b * batch, inputs.data(), targets.data(), rows);
    sum += model.forward_loss(inputs.data(), targets.data(), rows, seq, strategy, alloc);
    r.tokens += rows * seq;
    r.windows += rows;
  }
  r.mean_loss = sum / double(r.tokens);
  return r;
}

}  // namespace memo
