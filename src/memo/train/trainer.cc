#include "memo/train/trainer.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <ostream>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "memo/backend/caching_allocator.h"
#include "memo/core/error.h"
#include "memo/core/units.h"
#include "memo/data/sampler.h"
#include "memo/data/shards.h"
#include "memo/data/token_data.h"
#include "memo/io/atomic_file.h"
#include "memo/io/checkpoint.h"
#include "memo/io/config_json.h"
#include "memo/memory/planned_allocator.h"
#include "memo/memory/strategy.h"
#include "memo/model/flops.h"
#include "memo/model/model.h"
#include "memo/parallel/self_communicator.h"
#include "memo/train/device_plan.h"
#include "memo/train/evaluate.h"
#include "memo/train/grad_noise.h"
#include "memo/train/run_data.h"
#include "memo/train/step.h"
#include "memo/train/step_schedule.h"

namespace fs = std::filesystem;

namespace memo {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

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
          {"data", o.data_path},
          {"val_data", o.val_data_path},
          {"val_fraction", o.val_fraction}};
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

// The precision a run trains in, as its checkpoint records it: "bf16" where the backend's
// activations are bf16 (mixed precision), else "fp32".
const char* precision_name(const Backend& backend) {
  return backend.activation_dtype() == DType::kBF16 ? "bf16" : "fp32";
}

// Host views of tensors that live in a backend's device space, for writing a checkpoint: the
// tensors themselves when the host can address them, else host copies held here.
class HostStaging {
 public:
  explicit HostStaging(Backend& backend)
      : backend_(backend), direct_(backend.host_can_access(backend.device_space())) {}
  const float* host(const float* device, int64_t numel) {
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
    std::vector<float> host(size_t(int64_t(t) * numel));
    backend_.copy_to_host(host.data(), parts.data(), int64_t(host.size() * sizeof(float)));
    copies_.emplace_back(size_t(p.full_numel()));
    for (int r = 0; r < t; ++r)
      insert_shard(p, TensorShard{r, t}, host.data() + int64_t(r) * numel, copies_.back().data());
    return copies_.back().data();
  }

 private:
  Backend& backend_;
  bool direct_;
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

// GPT-2 files saved from a GPT2Model (as the Hub's gpt2 checkpoints are) name the tensors without
// GPT2LMHeadModel's "transformer." prefix ("h.0.attn.c_attn.weight"); both forms load.
void load_model_tensors(Model& model, const SafetensorsFile& file) {
  const std::string prefix(model.architecture().optional_name_prefix());
  std::vector<float> staging;  // when the host cannot address the parameters
  for (const ParamInfo& p : model.layout().params()) {
    std::string name = p.name;
    if (!prefix.empty() && !file.contains(name) && name.rfind(prefix, 0) == 0 &&
        file.contains(name.substr(prefix.size())))
      name = name.substr(prefix.size());
    read_part_into_device(file, name, model.layout(), p.is_split() ? &p : nullptr,
                          model.params() + p.offset, p.numel, model.backend(), staging);
  }
}

namespace {

// Checkpoint directories are <out>/step-00000123 and <out>/latest names the newest complete one
// (io/checkpoint.h). The two newest are kept: a kill while writing one leaves the other.
// The tensors are host views (model_tensors, state_tensors) that every rank made.
std::string save(const TrainOptions& o, const Model& model, const Optimizer& opt,
                 std::vector<NamedTensor> model_tensors, std::vector<NamedTensor> state,
                 const GradNoiseProbe* probe, const StepSchedule& plan, int64_t step) {
  CheckpointData data;
  data.config = model.config();
  data.model = std::move(model_tensors);
  data.optimizer = std::move(state);
  data.trainer_state = {
      {"step", step},
      {"optimizer", optimizer_record(opt)},
      {"options", pinned_options(o)},
      {"precision", precision_name(model.backend())},
      {"gns", probe ? nlohmann::json(probe->estimator().state()) : nlohmann::json()},
      {"batch_schedule", plan.checkpoint_json()}};
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
// the run are restored from the checkpoint rather than taken from the command line. A noise batch
// schedule's options and state are saved exactly (hex floats) and restored the same way: its
// flags on a resuming command line are ignored, like --batch.

namespace {

// The checkpoint a resumed run continues, with the options it pins restored into o.
struct ResumePoint {
  LoadedCheckpoint checkpoint;
  int64_t step = 0;
  std::optional<scaling::BatchSchedule> noise;  // the batch schedule, if the run had one
};

std::optional<ResumePoint> resume_point(TrainOptions& o) {
  if (o.resume_dir.empty()) return std::nullopt;
  ResumePoint r{load_checkpoint(find_latest_checkpoint(o.resume_dir)), 0, std::nullopt};
  const nlohmann::json& state = r.checkpoint.trainer_state;
  if (!state.contains("step") || !state.contains("options"))
    throw DataError(str(o.resume_dir,
                        " holds no trainer state (trainer_state.json): it cannot be resumed; use "
                        "--init-from to start a new run from its weights"));
  restore_pinned(o, state.at("options"));
  o.optimizer = optimizer_choice_from_state(state);
  r.step = state.at("step");
  r.noise = noise_schedule_from_checkpoint(state, r.step, o.resume_dir);
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
    throw ConfigError(str("--steps ", o.steps, " but the checkpoint is already at step ", r.step,
                          "; ask for more steps to continue"));
  }
  return r;
}

void check_shape_options(TrainOptions& o) {
  if (o.micro_batch == 0) o.micro_batch = o.batch;
  if (o.batch <= 0 || o.micro_batch <= 0 || o.batch % o.micro_batch != 0)
    throw ConfigError(
        str("--batch ", o.batch, " must be a positive multiple of --micro-batch ", o.micro_batch));
  if (o.seq <= 0) throw ConfigError(str("--seq ", o.seq, " must be positive"));
  if (o.steps <= 0) throw ConfigError(str("--steps ", o.steps, " must be positive"));
}

// The steps to run: the resumed checkpoint's noise schedule, a new one (its options are checked
// here, before any output), or a fixed batch. A noise schedule over `dp_ranks` data-parallel
// ranks grows the batch in steps of --micro-batch x dp_ranks sequences, so that every step's
// micro-batches split evenly over the ranks.
StepSchedule step_schedule(const TrainOptions& o, const std::optional<ResumePoint>& resume,
                           int64_t start_step, int dp_ranks) {
  const int64_t unit = o.micro_batch * dp_ranks;
  if (resume && resume->noise) {
    const int64_t saved = resume->noise->options().micro_batch;
    if (saved % unit != 0)
      throw ConfigError(str(o.resume_dir, "'s batch schedule grows in steps of ", saved,
                            " sequences, which do not split into micro-batches of ", o.micro_batch,
                            " over ", dp_ranks,
                            " data-parallel ranks; resume with a number of data-parallel ranks "
                            "(processes / --cp) that divides ",
                            saved / o.micro_batch));
    return StepSchedule(*resume->noise, o.micro_batch);
  }
  if (!o.batch_schedule) return StepSchedule(o, start_step);
  if (!o.gns)
    throw ConfigError("--batch-schedule noise grows the batch with the noise scale: drop --no-gns");
  scaling::BatchScheduleOptions s = noise_schedule_options(o);
  s.micro_batch = unit;  // the growth unit
  if (dp_ranks > 1 && o.batch < 2 * unit)
    throw ConfigError(str("--batch-schedule noise over ", dp_ranks,
                          " data-parallel processes grows the batch in steps of --micro-batch ",
                          o.micro_batch, " x ", dp_ranks, " = ", unit,
                          " sequences and starts from at least two: use --batch ", 2 * unit,
                          " or more"));
  if (s.max_batch % unit != 0)
    throw ConfigError(str("--max-batch ", s.max_batch, " must be a multiple of --micro-batch ",
                          o.micro_batch, " x ", dp_ranks, " data-parallel processes = ", unit));
  return StepSchedule(scaling::BatchSchedule(s), o.micro_batch);
}

// The context- and tensor-parallel layout of a job of `ranks` processes: C x T ranks share each
// sequence.
void check_context_parallel(const TrainOptions& o, int ranks) {
  if (o.cp < 1 || ranks % o.cp != 0)
    throw ConfigError(str("--cp ", o.cp, " does not divide the job's ", ranks,
                          " processes; use a divisor of the process count"));
  check_context_parallel_seq(o.seq, o.cp);
  if (o.tp < 1 || ranks % (o.tp * o.cp) != 0)
    throw ConfigError(str("--tp ", o.tp, " x --cp ", o.cp, " does not divide the job's ", ranks,
                          " processes; use a layout whose product divides the process count"));
  if (o.tp == 1) return;
  if (o.optimizer.name == "adafactor")
    throw ConfigError(str("--tp ", o.tp, ": Adafactor's factored statistics are of whole ",
                          "matrices, which tensor parallelism splits; use another optimiser"));
}

// What a run over several processes needs: a batch whose micro-batches split evenly over the
// data-parallel ranks (a noise schedule keeps it so: step_schedule), and a ZeRO stage memo runs.
void check_data_parallel(const TrainOptions& o, int ranks) {
  if (o.zero != 0 && o.zero != 1)
    throw ConfigError(str("--zero ", o.zero, " is not a stage memo runs; use 0 or 1"));
  if (ranks == 1) return;
  const int64_t micro_steps = o.batch / o.micro_batch;
  if (micro_steps % ranks != 0)
    throw ConfigError(str("--batch ", o.batch, " / --micro-batch ", o.micro_batch, " = ",
                          micro_steps, " micro-batches per step do not split over ", ranks,
                          " processes; make it a multiple of ", ranks));
}

void check_positions(const TrainOptions& o, const ModelConfig& config) {
  if (o.seq > config.max_position_embeddings)
    throw ConfigError(str("--seq ", o.seq, " exceeds ", config.positions_field(), " = ",
                          config.max_position_embeddings, " of the model config"));
}

// The weights: a resumed checkpoint's, another run's (--init-from), or a fresh initialisation.
void start_weights(Model& model, const TrainOptions& o, const std::optional<ResumePoint>& resume) {
  if (resume) return load_model_tensors(model, resume->checkpoint.model);
  if (o.init_from.empty()) return model.init(o.seed);
  LoadedCheckpoint init = load_checkpoint(find_latest_checkpoint(o.init_from));
  if (model_config_to_json(init.config) != model_config_to_json(model.config()))
    throw ConfigError(
        str("--init-from ", o.init_from, " has a different model config than ", o.config_path));
  load_model_tensors(model, init.model);
}

// The static plan within the budget, agreed by every rank of the job: a rank whose plan does not
// fit would otherwise end the job (MPI_Abort) while another was still planning, and that rank's
// own shortfall, which can differ (a ZeRO shard, a sequence chunk), would go unsaid. Each rank
// plans, the ranks exchange whether theirs fits, and when one does not every rank stops with a
// JobError: its own refusal, or which ranks refused.
std::unique_ptr<PlannedAllocator> agreed_planned_allocator(Communicator& job, Model& model,
                                                           int64_t batch, int64_t seq,
                                                           int64_t budget_bytes,
                                                           const DevicePlanOptions& options,
                                                           std::ostream& progress) {
  if (job.size() == 1)
    return planned_allocator_within_budget(model, batch, seq, budget_bytes, options, progress);
  std::unique_ptr<PlannedAllocator> planned;
  std::string refusal;
  std::ostringstream line;  // printed once the job agrees, so no rank's line precedes a refusal
  try {
    planned = planned_allocator_within_budget(model, batch, seq, budget_bytes, options, line);
  } catch (const BudgetError& e) {
    refusal = e.what();
  }
  const double mine = refusal.empty() ? 0.0 : 1.0;
  std::vector<double> refused(size_t(job.size()));
  job.all_gather(refused, std::span<const double>(&mine, 1));
  std::string ranks;
  for (size_t r = 0; r < refused.size(); ++r)
    if (refused[r] != 0.0) ranks += str(ranks.empty() ? "" : ", ", r);
  if (ranks.empty()) {
    progress << line.str();
    return planned;
  }
  if (!refusal.empty()) throw JobError(refusal);
  throw JobError(str("device memory: the plan fits on this rank but not on rank(s) ", ranks,
                     " (their messages say by how much)"));
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
  opt.set_steps_done(resume.step);
  const nlohmann::json& gns = resume.checkpoint.trainer_state.value("gns", nlohmann::json());
  if (probe && gns.is_object()) probe->estimator().restore(gns.get<scaling::NoiseScaleState>());
}

// The start-of-run lines: the model and data, then the backend (the BLAS warning before the first
// matrix product: a forced OpenBLAS core the CPU cannot run crashes at the first sgemm).
void print_run_header(std::ostream& progress, const Model& model, const TrainOptions& o,
                      const Optimizer& opt, int64_t train_tokens, int64_t micro_steps,
                      const Communicator& data_parallel, const Communicator* context_parallel) {
  const ModelConfig& config = model.config();
  progress << "memo: " << ParamLayout(config).count() << " parameters (" << config.num_hidden_layers
           << " layers, hidden " << config.hidden_size << "), " << train_tokens
           << " training tokens, " << o.batch << " x " << o.seq << " tokens per step ("
           << micro_steps << " micro-batches), " << opt.name() << " "
           << opt.hyperparameters().dump() << ", " << omp_get_max_threads() << " threads, "
           << model.backend().describe() << "\n";
  if (data_parallel.size() > 1)
    progress << "memo: data parallel over " << data_parallel.size() << " processes ("
             << data_parallel.name() << "), " << micro_steps / data_parallel.size()
             << " micro-batches each per step\n";
  if (model.tensor_parallel())
    progress << "memo: tensor + sequence parallel over " << model.tensor_parallel_group()->size()
             << " processes: " << model.layout().count()
             << " parameters on each, the sequence split between the layers\n";
  if (context_parallel)
    progress << "memo: context parallel over " << context_parallel->size()
             << " processes: each sequence in " << 2 * context_parallel->size() << " chunks of "
             << o.seq / (2 * context_parallel->size()) << " tokens, 2 per process\n";
  if (const std::string w = model.backend().warning(); !w.empty())
    progress << "memo: warning: " << w << "\n";
}

// "step 12/60" for a fixed batch; with a noise schedule, whose step count is not known in
// advance, "step 12 | 3072/8192 tok | batch 8".
std::string step_label(const StepRun& run, const StepSchedule& plan, int64_t steps) {
  char label[120];
  if (plan.noise())
    std::snprintf(label, sizeof label, "step %lld | %lld/%lld tok | batch %lld",
                  static_cast<long long>(run.step), static_cast<long long>(run.tokens_end),
                  static_cast<long long>(plan.total_tokens()), static_cast<long long>(run.batch));
  else
    std::snprintf(label, sizeof label, "step %lld/%lld", static_cast<long long>(run.step),
                  static_cast<long long>(steps));
  return label;
}

void print_step_line(std::ostream& progress, const std::string& label, const StepGradients& g,
                     double lr, double tokens_per_s, double mfu, std::optional<double> mfu_peak,
                     double eta_s, const GradNoiseProbe* probe) {
  char peak[48] = "";
  if (mfu_peak) std::snprintf(peak, sizeof peak, " (%.1f%% of bf16 peak)", 100.0 * *mfu_peak);
  char line[340];
  std::snprintf(line, sizeof line,
                "%s | loss %.4f | lr %.2e | grad norm %.3f | %.0f tok/s | MFU %.1f%%%s | ETA %s",
                label.c_str(), g.loss, lr, g.grad_norm(), tokens_per_s, 100.0 * mfu, peak,
                duration_str(eta_s).c_str());
  progress << line;
  if (probe && probe->estimator().b_simple())
    progress << " | B_simple " << int64_t(*probe->estimator().b_simple()) << " tok";
  progress << "\n" << std::flush;
}

// One JSON line per step. A batch change made after the step rides in its record (as
// "batch_change"), so every line is a step with its loss.
nlohmann::json log_record(const StepRun& run, const StepGradients& g, double tokens_per_s,
                          double mfu, const ActivationAllocator& alloc,
                          const ActivationStrategy& strategy, const GradNoiseProbe* probe,
                          const std::optional<scaling::BatchChange>& change,
                          const Communicator& data_parallel, const Communicator* context_parallel,
                          const Communicator* tensor_parallel, int zero) {
  nlohmann::json record{{"step", run.step},
                        {"loss", g.loss},
                        {"lr", run.lr},
                        {"grad_norm", g.grad_norm()},
                        {"batch", run.batch},
                        {"micro_batches", run.micro_steps},
                        {"tokens", run.tokens_end},
                        {"tokens_per_s", tokens_per_s},
                        {"mfu", mfu},
                        {"peak_bytes", alloc.peak_live_bytes()},
                        {"reserved_bytes", alloc.reserved_bytes()},
                        {"device_peak_bytes", alloc.peak_live_bytes()},
                        {"host_peak_bytes", strategy.host_peak_bytes()}};
  record.update(probe ? probe->log_fields() : gns_null_fields());
  // the layout, and what rank 0 sent over its data- and context-parallel groups in this step
  const int cp = context_parallel ? context_parallel->size() : 1;
  const int tp = tensor_parallel ? tensor_parallel->size() : 1;
  record["ranks"] = data_parallel.size() * cp * tp;
  record["cp"] = cp;
  record["tp"] = tp;
  if (tensor_parallel) {
    record["tp_comm_bytes"] = tensor_parallel->counters().bytes_sent;
    record["tp_comm_s"] = tensor_parallel->counters().seconds;
  }
  record["zero"] = zero;
  record["comm_bytes"] = data_parallel.counters().bytes_sent;
  record["comm_s"] = data_parallel.counters().seconds;
  if (context_parallel) {
    record["cp_comm_bytes"] = context_parallel->counters().bytes_sent;
    record["cp_comm_s"] = context_parallel->counters().seconds;
  }
  if (change) record["batch_change"] = change->to_json();
  return record;
}

}  // namespace

TrainResult train(const TrainOptions& options_in, Runtime& runtime) {
  TrainOptions o = options_in;
  // rank 0 speaks for the job; the other ranks print nothing
  const bool lead = runtime.lead();
  std::ostream& progress = runtime.log();
  const std::optional<ResumePoint> resume = resume_point(o);
  const int64_t start_step = resume ? resume->step : 0;
  check_shape_options(o);
  const int job_size = runtime.world().size();
  check_context_parallel(o, job_size);
  StepSchedule plan = step_schedule(o, resume, start_step, job_size / (o.cp * o.tp));
  const ModelConfig config = resume ? resume->checkpoint.config : load_model_config(o.config_path);
  check_positions(o, config);
  const RunData data =
      load_run_data({o.data_path, o.val_data_path, o.val_fraction}, config.vocab_size);
  const WindowSampler sampler(data.train, o.seq, o.seed);

  Backend& backend = runtime.backend();
  // a resumed run continues in its checkpoint's precision (older checkpoints did not say)
  if (resume && resume->checkpoint.trainer_state.contains("precision")) {
    const std::string was = resume->checkpoint.trainer_state.at("precision");
    if (was != precision_name(backend))
      throw ConfigError(str(o.resume_dir, " was trained in ", was, " and this run is ",
                            precision_name(backend), ": resume with --precision ", was,
                            " to continue it (--init-from starts a new run from its weights)"));
  }
  Communicator& job = runtime.world();
  // groups of T consecutive ranks split the layers, C of those groups share sequences: rank r is
  // tensor-parallel rank r % T, context-parallel rank (r / T) % C, data-parallel rank r / (T C)
  std::unique_ptr<Communicator> tp_group, cp_group, dp_group;
  const int r = job.rank(), T = o.tp, TC = o.tp * o.cp;
  if (T > 1) tp_group = job.split(r / T, r % T);
  if (o.cp > 1) cp_group = job.split((r / TC) * T + r % T, (r / T) % o.cp);
  if (TC > 1) dp_group = job.split(r % TC, r / TC);
  Communicator& data_parallel = dp_group ? *dp_group : job;
  check_data_parallel(o, data_parallel.size());
  Model model(config, backend);
  model.set_parallel(Parallel{o.tp, 1}, tp_group.get());
  model.set_context_parallel(cp_group.get());
  // ZeRO-1: this rank's optimiser covers its shard's tensors only
  const std::vector<ZeroShard> shards =
      zero_shards(model.layout(), o.zero == 1 ? data_parallel.size() : 1);
  const ZeroShard& mine = shards[o.zero == 1 ? size_t(data_parallel.rank()) : 0];
  const ParamLayout shard_layout(model.layout(), mine.first, mine.last);
  // Activations: the static plan within --device-memory (refused here, before any output and
  // before the weights are drawn or loaded, when it does not fit: the plan traces a shadow and
  // needs no values), else the caching allocator. Validation runs forward-only, a sequence the
  // plan does not cover, so it uses the caching allocator, outside the budgeted arena.
  CachingAllocator caching(0, backend.allocator(backend.device_space()));
  std::unique_ptr<PlannedAllocator> planned;
  if (o.device_memory_bytes > 0)
    planned = agreed_planned_allocator(
        job, model, o.micro_batch, o.seq, o.device_memory_bytes,
        DevicePlanOptions{ActivationPlanOptions{}, o.activations, o.optimizer,
                          o.zero == 1 ? &shard_layout : nullptr},
        progress);
  start_weights(model, o, resume);
  const std::unique_ptr<Optimizer> optimizer =
      o.zero == 1 ? make_optimizer(o.optimizer.name, shard_layout,
                                   shard_options(o.optimizer.options, mine), backend)
                  : make_optimizer(o.optimizer.name, model.layout(), o.optimizer.options, backend);
  Optimizer& opt = *optimizer;
  const int64_t micro_steps = o.batch / o.micro_batch;  // over all ranks
  const int64_t rank_micro_steps = micro_steps / data_parallel.size();
  // see Note [Noise-scale accounting]; sized for the most micro-batches a step will run
  std::optional<GradNoiseProbe> probe;
  if (o.gns && micro_steps >= 2)
    probe.emplace(model.params_numel(), plan.max_micro_steps() / data_parallel.size(),
                  o.micro_batch * o.seq, scaling::NoiseScaleOptions{o.gns_decay}, backend);
  GradNoiseProbe* const probe_ptr = probe ? &*probe : nullptr;
  if (resume) restore_training_state(opt, backend, probe_ptr, *resume, o, model.layout());

  ActivationAllocator& alloc = planned ? static_cast<ActivationAllocator&>(*planned) : caching;
  const std::unique_ptr<ActivationStrategy> strategy =
      make_strategy(model.skeletal(), alloc, o.activations);
  KeepStrategy eval_strategy(model.skeletal(), caching);
  if (lead) fs::create_directories(o.out_dir);
  std::ofstream log;
  if (lead && !o.log_path.empty()) {
    log.open(o.log_path, resume ? std::ios::app : std::ios::trunc);
    if (!log) throw DataError(str("cannot open log file ", o.log_path, " for writing"));
  }

  const StepShape shape{o.micro_batch, o.seq, rank_micro_steps};
  TrainStep train_step(
      model, opt, *strategy, alloc, shape,
      [&sampler](int64_t step, int64_t micro, int32_t* in, int32_t* tgt, int64_t rows) {
        sampler.fill(step, micro, in, tgt, rows);
      },
      probe_ptr, data_parallel);
  if (o.zero == 1) {
    train_step.set_zero_shards(&shards);
    progress << "memo: ZeRO-1: the optimiser state and update of " << shards.size()
             << " shards of whole tensors, " << mine.end - mine.begin << " of "
             << model.layout().total_numel() << " parameter slots on rank 0\n";
  }
  const double flops_per_token = train_flops_per_token(config, o.seq);
  print_run_header(progress, model, o, opt, data.train.num_tokens(), micro_steps, data_parallel,
                   cp_group.get());
  if (plan.noise()) progress << plan.summary() << "\n";
  // the MFU denominator: the best of at least two timed products, over a quarter second so that
  // a run's start stays short (a process measures once: CpuBackend keeps it)
  const double peak_flops = backend.measure_matmul_peak_flops(0.25);
  if (o.device_peak_flops > 0.0)
    progress << "memo: MFU against the measured matrix-product ceiling (" << peak_flops / 1e12
             << " TFLOP/s) and the " << o.device_peak_name << " datasheet's dense bf16 peak ("
             << o.device_peak_flops / 1e12 << " TFLOP/s)\n";
  if (resume)
    progress << "memo: resuming at step " << start_step << " from " << o.resume_dir << "\n";
  // profile on the first micro-batch; its gradients are dropped
  if (strategy->wants_warmup()) train_step.warmup(start_step + 1);
  progress << "memo: activations: " << strategy->summary() << "\n";

  TrainResult result;
  const auto t_start = Clock::now();
  const int64_t start_tokens = plan.next().tokens_end - plan.next().tokens;
  while (!plan.done()) {
    const StepRun run = plan.next();
    const int64_t step = run.step;
    const auto t0 = Clock::now();
    const ActivationStrategy::CopyTime copy0 = strategy->copy_time();
    alloc.reset_peak();
    data_parallel.reset_counters();
    if (cp_group) cp_group->reset_counters();
    if (tp_group) tp_group->reset_counters();
    const StepGradients g = train_step.gradients(step, run.micro_steps / data_parallel.size());
    if (!std::isfinite(g.loss))
      throw Error(str("loss is ", g.loss, " at step ", step,
                      plan.noise() ? str("; lower --eps-max (the law's lr is ", run.lr, " here)")
                                   : str("; lower --lr (now ", o.lr, ")")));
    train_step.update(g, run.lr, o.clip);
    // B_simple after this step's update, before the next step is planned (Note [Noise batch
    // schedule]); a fixed batch only counts the step
    const std::optional<scaling::BatchChange> change =
        plan.observe(probe ? probe->estimator().b_simple() : std::nullopt);
    const double step_s = seconds_since(t0);
    const double flops_per_step = flops_per_token * double(run.tokens);
    const double tokens_per_s = double(run.tokens) / step_s;
    const double mfu = flops_per_step / step_s / (peak_flops * double(job.size()));
    const std::optional<double> mfu_peak =
        o.device_peak_flops > 0.0
            ? std::optional<double>(flops_per_step / step_s /
                                    (o.device_peak_flops * double(job.size())))
            : std::nullopt;
    result.steps_done = step;
    result.final_loss = g.loss;
    // The last step's record carries the validation loss (on windows in order from the start of
    // the validation data, after the last update), so `memo plot` draws it beside the training
    // loss.
    std::optional<EvalSum> val;
    if (plan.done() && data.val)
      val = evaluate_windows(model, eval_strategy, caching, WindowSampler(*data.val, o.seq, o.seed),
                             o.micro_batch, o.val_batches * o.micro_batch, {}, &data_parallel);
    if (val && val->tokens > 0) result.val_loss = val->mean_loss();
    if (log) {
      nlohmann::json record =
          log_record(run, g, tokens_per_s, mfu, alloc, *strategy, probe_ptr, change, data_parallel,
                     cp_group.get(), tp_group.get(), o.zero);
      if (mfu_peak) record["mfu_peak"] = *mfu_peak;
      // the offload's copies this step, and how much of their time compute hid (the compute
      // stream's waits on them are the rest)
      const ActivationStrategy::CopyTime copy1 = strategy->copy_time();
      if (copy1.copy_s > copy0.copy_s) {
        const double copy_s = copy1.copy_s - copy0.copy_s, wait_s = copy1.wait_s - copy0.wait_s;
        record["copy_s"] = copy_s;
        record["copy_wait_s"] = wait_s;
        record["copy_hidden"] = std::clamp(1.0 - wait_s / copy_s, 0.0, 1.0);
      }
      if (val && val->tokens > 0) {
        record["val_loss"] = *result.val_loss;
        record["val_tokens"] = val->tokens;
      }
      log << record.dump() << "\n" << std::flush;
    }
    if (step % o.log_every == 0 || plan.done()) {
      const double elapsed = seconds_since(t_start);
      const double eta = elapsed / double(run.tokens_end - start_tokens) *
                         double(std::max<int64_t>(plan.total_tokens() - run.tokens_end, 0));
      print_step_line(progress, step_label(run, plan, o.steps), g, run.lr, tokens_per_s, mfu,
                      mfu_peak, eta, probe_ptr);
    }
    if (change)
      progress << batch_change_line(*change, plan.noise()->options()) << "\n" << std::flush;
    if (val && val->tokens > 0) {
      char line[120];
      std::snprintf(line, sizeof line, "validation loss %.4f over %lld tokens", *result.val_loss,
                    static_cast<long long>(val->tokens));
      progress << line << "\n";
    }
    if ((o.save_every > 0 && step % o.save_every == 0) || plan.done()) {
      // rank 0 writes the whole tensors (every data-parallel rank holds the same weights and
      // optimiser state; a tensor-parallel group's parts are gathered on every rank); the others
      // wait for the commit, so a job stopped after this step resumes from it on every rank
      const GatheredState state =
          o.zero == 1 ? gather_optimizer_state(opt, o.optimizer.name, o.optimizer.options,
                                               model.layout(), shards, data_parallel, backend)
                      : GatheredState{opt.state(), {}, {}};
      HostStaging staging(backend);
      std::vector<NamedTensor> weights = model_tensors(model, staging);
      std::vector<NamedTensor> optimizer_state = state_tensors(model, state.tensors, staging);
      if (lead)
        result.checkpoint = save(o, model, opt, std::move(weights), std::move(optimizer_state),
                                 probe_ptr, plan, step);
      if (job.size() > 1) job.barrier();
    }
  }
  progress << "checkpoint: " << result.checkpoint << "\n";
  return result;
}

}  // namespace memo
