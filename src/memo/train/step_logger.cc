#include "memo/train/step_logger.h"

#include <omp.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "memo/core/error.h"
#include "memo/core/units.h"
#include "memo/io/atomic_file.h"
#include "memo/io/checkpoint.h"
#include "memo/memory/memo.h"
#include "memo/model/flops.h"

namespace memo {
namespace {

// The start-of-run lines: the model and data, then the backend (the BLAS warning before the first
// matrix product: a forced OpenBLAS core the CPU cannot run crashes at the first sgemm).
// stage: the length stage the run starts in (a resumed run's may be a later one).
void print_run_header(std::ostream& progress, const Model& model, const TrainOptions& o,
                      const SeqStage& stage, const Optimizer& opt, int64_t train_tokens,
                      int64_t micro_steps, const Communicator& data_parallel,
                      const Communicator* context_parallel) {
  const ModelConfig& config = model.config();
  progress << "memo: " << ParamLayout(config).count() << " parameters (" << config.num_hidden_layers
           << " layers, hidden " << config.hidden_size << config.window_summary() << "), "
           << train_tokens << " training tokens, " << stage.batch << " x " << stage.seq
           << " tokens per step (" << micro_steps << " micro-batches), " << opt.name() << " "
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
             << stage.seq / (2 * context_parallel->size()) << " tokens, 2 per process\n";
  if (const std::string w = model.backend().warning(); !w.empty())
    progress << "memo: warning: " << w << "\n";
  if (!o.batch_schedule && o.warmup >= o.steps && o.steps > 0)
    progress << "memo: note: --warmup " << o.warmup << " is not below --steps " << o.steps
             << ": the learning rate rises to " << o.lr * double(o.steps) / double(o.warmup)
             << " (--lr " << o.lr << ") at the last step and does not decay\n";
}

// "step 12/60" for a fixed batch ("step 12/60 | stage 2/3 seq 1024" with length stages); with a
// noise schedule, whose step count is not known in advance, "step 12 | 3072/8192 tok | batch 8".
std::string step_label(const StepRun& run, const StepSchedule& plan, int64_t steps, size_t stages) {
  char label[160];
  if (stages > 1 && plan.noise())  // a stage is a span of tokens (Note [Length stages])
    std::snprintf(label, sizeof label,
                  "step %lld | %lld/%lld tok | stage %d/%zu seq %lld | batch %lld",
                  static_cast<long long>(run.step), static_cast<long long>(run.tokens_end),
                  static_cast<long long>(plan.total_tokens()), run.stage + 1, stages,
                  static_cast<long long>(run.seq), static_cast<long long>(run.batch));
  else if (stages > 1)
    std::snprintf(label, sizeof label, "step %lld/%lld | stage %d/%zu seq %lld",
                  static_cast<long long>(run.step), static_cast<long long>(steps), run.stage + 1,
                  stages, static_cast<long long>(run.seq));
  else if (plan.noise())
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
                          double mfu, const ActivationAllocator& alloc, int64_t host_peak_bytes,
                          const GradNoiseProbe* probe,
                          const std::optional<scaling::BatchChange>& change,
                          const Communicator& data_parallel, const Communicator* context_parallel,
                          const Communicator* tensor_parallel, const Communicator* pipeline,
                          int zero) {
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
                        {"host_peak_bytes", host_peak_bytes}};
  record.update(probe ? probe->log_fields() : gns_null_fields());
  // the layout, and what rank 0 sent over its data- and context-parallel groups in this step
  const int cp = context_parallel ? context_parallel->size() : 1;
  const int tp = tensor_parallel ? tensor_parallel->size() : 1;
  const int pp = pipeline ? pipeline->size() : 1;
  record["ranks"] = data_parallel.size() * cp * tp * pp;
  record["cp"] = cp;
  record["tp"] = tp;
  if (pipeline) {  // rank 0's hidden states and gradients to its neighbours, and its waits
    record["pp"] = pp;
    record["pp_comm_bytes"] = pipeline->counters().bytes_sent;
    record["pp_comm_s"] = pipeline->counters().seconds;
  }
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

// See Note [TensorBoard tags]: (JSON field, TensorBoard tag).
constexpr std::pair<const char*, const char*> kTensorBoardTags[] = {
    {"loss", "train/loss"},
    {"lr", "train/lr"},
    {"grad_norm", "train/grad_norm"},
    {"batch", "train/batch"},
    {"val_loss", "val/loss"},
    {"tokens_per_s", "perf/tokens_per_s"},
    {"mfu", "perf/mfu"},
    {"mfu_peak", "perf/mfu_peak"},
    {"device_peak_bytes", "memory/device_peak_bytes"},
    {"host_peak_bytes", "memory/host_peak_bytes"},
    {"gns_b_simple", "noise/b_simple"},
};

std::vector<TensorBoardScalar> tensorboard_scalars(const nlohmann::json& record) {
  std::vector<TensorBoardScalar> scalars;
  for (const auto& [field, tag] : kTensorBoardTags) {
    const auto it = record.find(field);
    if (it == record.end() || !it->is_number()) continue;
    const double value = it->get<double>();
    if (std::isfinite(value)) scalars.push_back({tag, value});
  }
  return scalars;
}

}  // namespace

namespace {

// A resumed run appends to its log from the checkpoint's step on: the records the stopped run
// wrote after that step (it ran past its last checkpoint before it stopped), and a last line a
// kill cut short, are dropped first, so the log holds each step once, as TensorBoard's does.
// Returns the elapsed_s of the checkpoint's step as the log has it (0 where it has none), from
// which the resumed run's elapsed_s goes on.
double drop_records_after(const std::string& path, int64_t step) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return 0.0;
  double elapsed_s = 0.0;
  const std::string text = read_file(path);
  std::string kept;
  bool dropped = false;
  for (size_t pos = 0; pos < text.size();) {
    const size_t end = text.find('\n', pos);
    if (end == std::string::npos) {  // no newline: a write cut short
      dropped = true;
      break;
    }
    const std::string_view line(text.data() + pos, end - pos);
    pos = end + 1;
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_object() && j.contains("step") && j.at("step").is_number_integer() &&
        j.at("step").get<int64_t>() > step) {
      dropped = true;
      continue;
    }
    if (j.is_object() && j.value("step", nlohmann::json()) == step &&
        j.value("elapsed_s", nlohmann::json()).is_number() &&
        std::isfinite(j.at("elapsed_s").get<double>()) && j.at("elapsed_s").get<double>() >= 0.0)
      elapsed_s = j.at("elapsed_s").get<double>();
    kept.append(line).push_back('\n');
  }
  if (dropped) write_file_atomic(path, kept);
  return elapsed_s;
}

}  // namespace

StepLogger::StepLogger(TrainSession& session)
    : s_(session),
      progress_(session.runtime().log()),
      start_tokens_(session.plan().next().tokens_end - session.plan().next().tokens) {
  const TrainOptions& o = s_.options();
  if (!s_.runtime().lead()) return;
  if (const int removed = remove_other_runs_checkpoints(o))  // Note [One run a directory]
    progress_ << "memo: --overwrite: removed " << removed << " checkpoint"
              << (removed == 1 ? "" : "s") << " of another run from " << o.out_dir << "\n";
  std::filesystem::create_directories(o.out_dir);
  if (!o.run_file.empty())
    write_file_atomic(std::filesystem::path(o.out_dir) / kRunFile, o.run_file);
  if (!o.log_path.empty()) {
    if (s_.resume()) elapsed_before_s_ = drop_records_after(o.log_path, s_.start_step());
    log_.open(o.log_path, s_.resume() ? std::ios::app : std::ios::trunc);
    if (!log_) throw DataError(str("cannot open log file ", o.log_path, " for writing"));
  }
  if (!o.tensorboard_dir.empty())
    tensorboard_.emplace(o.tensorboard_dir,
                         s_.resume() ? std::optional<int64_t>(s_.start_step() + 1) : std::nullopt);
}

void StepLogger::print_start() {
  const TrainOptions& o = s_.options();
  if (o.zero == 1) {
    const ZeroShard& mine = s_.zero_shard();
    progress_ << "memo: ZeRO-1: the optimiser state and update of " << s_.zero_shards().size()
              << " shards of whole tensors, " << mine.end - mine.begin << " of "
              << s_.model().layout().total_numel() << " parameter slots on rank 0\n";
  }
  print_run_header(progress_, s_.model(), o, s_.stage(), s_.optimizer(),
                   s_.data().train.num_tokens(), s_.micro_steps(), s_.data_parallel(),
                   s_.context_parallel());
  if (s_.plan().noise()) progress_ << s_.plan().summary() << "\n";
  if (const WindowSampler& w = s_.sampler(); w.packed())
    progress_ << "memo: prompt-completion data: " << w.num_examples()
              << " examples packed whole into " << w.num_sequential_windows() << " windows of "
              << w.seq() << " tokens, " << w.truncated_examples() << " cut to the window ("
              << w.dropped_examples()
              << " left out: nothing counted remains), the loss over completion tokens only, "
                 "document masks on\n";
  // Note [Document layout] in data/shards.h: which token is which, said where a run begins
  if (const Model& m = s_.model(); m.document_mask() >= 0 || m.eod_loss_mask() >= 0) {
    progress_ << "memo: documents:";
    if (m.document_mask() >= 0)
      progress_ << " attention and positions restart at each token " << m.document_mask();
    if (m.document_mask() >= 0 && m.eod_loss_mask() >= 0) progress_ << ";";
    if (m.eod_loss_mask() >= 0)
      progress_ << " the loss leaves out the predictions made from token " << m.eod_loss_mask();
    progress_ << "\n";
  }
  const std::vector<SeqStage>& stages = s_.stages();
  if (stages.size() > 1) {
    progress_ << "memo: length stages (--seq-schedule), "
              << (o.stage_batch == "sequences"
                      ? str(stages[0].batch, " sequences per step")
                      : str(stages[0].batch * stages[0].seq, " tokens per step"))
              << ":";
    // under a noise schedule a stage is a span of tokens (Note [Length stages]), its batch the
    // schedule's
    const bool noise = s_.plan().noise() != nullptr;
    int64_t tokens = 0;
    for (size_t k = 0; k < stages.size(); ++k) {
      const SeqStage& st = stages[k];
      const int64_t span = st.steps * st.batch * st.seq;
      progress_ << (k ? ";" : "") << " " << k + 1 << ": seq " << st.seq << ", ";
      if (noise)
        progress_ << "tokens " << tokens << "-" << tokens + span << ", micro-batches of "
                  << st.micro_batch;
      else
        progress_ << "steps " << st.first_step << "-" << st.first_step + st.steps - 1 << ", "
                  << st.batch << " sequences in micro-batches of " << st.micro_batch;
      tokens += span;
    }
    progress_ << "\n";
  }
  if (o.save_dtype == DType::kBF16)
    progress_ << "memo: checkpoints: model.safetensors in bf16 (torch_dtype bfloat16), the fp32 "
                 "master weights beside it in "
              << kMasterFile << " for --resume\n";
}

void StepLogger::print_peaks(double peak_flops) {
  const TrainOptions& o = s_.options();
  peak_flops_ = peak_flops;
  if (o.device_peak_flops > 0.0)
    progress_ << "memo: MFU against the measured matrix-product ceiling (" << peak_flops / 1e12
              << " TFLOP/s) and the " << o.device_peak_name << " datasheet's dense bf16 peak ("
              << o.device_peak_flops / 1e12 << " TFLOP/s)\n";
  if (const std::optional<ResumePoint>& r = s_.resume()) {
    progress_ << "memo: resuming at step " << s_.start_step() << " from " << o.resume_dir;
    if (!s_.plan().noise() && o.steps != r->run_steps)  // Note [Resume]
      progress_ << "; --steps moves the run's end from step " << r->run_steps << " to step "
                << o.steps << ", where the learning-rate schedule now ends";
    if (s_.stages().size() > 1) {  // the stage it resumes in, as print_stage says it on entry
      const SeqStage& stage = s_.stage();
      progress_ << "; in stage " << s_.stage_index() + 1 << " of " << s_.stages().size() << " (seq "
                << stage.seq;
      if (s_.model().config().uses_rope())
        progress_ << ", RoPE theta " << s_.model().config().rope_theta << " "
                  << rope_type_name(s_.model().config().rope_scaling.type);
      progress_ << ")";
    }
    progress_ << "\n";
  }
}

void StepLogger::print_stage(const StepRun& run) {
  const SeqStage& stage = s_.stage();
  progress_ << "memo: stage " << s_.stage_index() + 1 << " of " << s_.stages().size()
            << " from step " << run.step << ": seq " << stage.seq << ", " << run.batch
            << " sequences per step in micro-batches of " << stage.micro_batch
            << (s_.model().config().uses_rope()
                    ? str(", RoPE theta ", s_.model().config().rope_theta, " ",
                          rope_type_name(s_.model().config().rope_scaling.type))
                    : std::string())
            << "; activations: " << s_.activation_summary() << "\n"
            << std::flush;
}

void StepLogger::log_step(const Step& st) {
  const TrainOptions& o = s_.options();
  const StepRun& run = st.run;
  StepSchedule& plan = s_.plan();
  const double ranks = double(s_.job().size());
  const double flops_per_step =
      train_flops_per_token(s_.model().config(), run.seq) * double(run.tokens);
  const double tokens_per_s = double(run.tokens) / st.seconds;
  const double mfu = flops_per_step / st.seconds / (peak_flops_ * ranks);
  const std::optional<double> mfu_peak =
      o.device_peak_flops > 0.0
          ? std::optional<double>(flops_per_step / st.seconds / (o.device_peak_flops * ranks))
          : std::nullopt;
  const bool validated = st.val && st.val->tokens > 0;
  if (log_.is_open() || tensorboard_) {
    nlohmann::json record = log_record(
        run, st.g, tokens_per_s, mfu, s_.alloc(), s_.host_peak_bytes(), s_.probe(), st.change,
        s_.data_parallel(), s_.context_parallel(), s_.tensor_parallel(), s_.pipeline(), o.zero);
    if (mfu_peak) record["mfu_peak"] = *mfu_peak;
    if (s_.stages().size() > 1) {  // Note [Length stages]
      record["stage"] = run.stage + 1;
      record["seq"] = run.seq;
    }
    record["elapsed_s"] = elapsed_before_s_ + st.elapsed_s;  // waits included; across resumes
    // the offload's copies this step, and how much of their time compute hid (the compute
    // stream's waits on them are the rest)
    const ActivationStrategy::CopyTime copy1 = s_.copy_time();
    if (copy1.copy_s > st.copy_before.copy_s) {
      const double copy_s = copy1.copy_s - st.copy_before.copy_s;
      const double wait_s = copy1.wait_s - st.copy_before.wait_s;
      record["copy_s"] = copy_s;
      record["copy_wait_s"] = wait_s;
      record["copy_hidden"] = std::clamp(1.0 - wait_s / copy_s, 0.0, 1.0);
    }
    if (!s_.step().pipeline())  // (a pipeline's: pp_stage_alpha below)
      if (const auto* memo = dynamic_cast<const MemoStrategy*>(&s_.strategy()))
        record["alpha"] = memo->offloaded_alpha();  // after rounding: what the step ran
    if (st.skipped) record["skipped"] = st.skipped;
    if (s_.step().pipeline()) {  // the stage transfers alone (pp_comm_bytes adds the collectives)
      record["pp_send_bytes"] = s_.step().pipeline_sent_bytes();
      record["pp_hidden_bytes"] = s_.step().pipeline_hidden_bytes();
    }
    if (!st.pipeline_stages.empty()) {  // each stage's peak, and its wait: the bubble it sees
      std::vector<int64_t> peaks, arenas, tops;
      std::vector<double> waits, alphas;
      for (size_t i = 0; i + 4 < st.pipeline_stages.size(); i += 5) {
        peaks.push_back(int64_t(st.pipeline_stages[i]));
        waits.push_back(st.pipeline_stages[i + 1]);
        arenas.push_back(int64_t(st.pipeline_stages[i + 2]));
        tops.push_back(int64_t(st.pipeline_stages[i + 3]));
        alphas.push_back(st.pipeline_stages[i + 4]);
      }
      if (alphas.front() >= 0.0) record["pp_stage_alpha"] = alphas;  // memo: each stage's
      record["pp_stage_peak_bytes"] = peaks;
      record["pp_stage_wait_s"] = waits;
      if (s_.planned()) {  // each stage's planned arena, and the highest byte of it used
        record["pp_stage_arena_bytes"] = arenas;
        record["pp_stage_arena_used_bytes"] = tops;
      }
    }
    if (st.skipped && std::string_view(st.skipped) == "spike")
      record["spike_median"] = st.spike_median;
    if (validated) {
      record["val_loss"] = st.val->mean_loss();
      record["val_tokens"] = st.val->tokens;
    }
    if (log_.is_open()) {
      errno = 0;
      log_ << record.dump() << "\n" << std::flush;
      // a full disk or a file-size limit: said, not a log that ends mid-record after a run that
      // seemed to succeed
      if (!log_)
        throw DataError(str("cannot write the log ", o.log_path, ": ",
                            errno ? std::error_code(errno, std::generic_category()).message()
                                  : std::string("the write failed")));
    }
    if (tensorboard_) tensorboard_->write_step(run.step, tensorboard_scalars(record));
  }
  if (run.step % o.log_every == 0 || plan.done()) {
    const double eta = st.elapsed_s / double(run.tokens_end - start_tokens_) *
                       double(std::max<int64_t>(plan.total_tokens() - run.tokens_end, 0));
    print_step_line(progress_, step_label(run, plan, o.steps, s_.stages().size()), st.g, run.lr,
                    tokens_per_s, mfu, mfu_peak, eta, s_.probe());
  }
  if (st.skipped) {
    progress_ << "memo: step " << run.step << " skipped: loss " << st.g.loss << ", gradient norm "
              << st.g.grad_norm();
    if (std::string_view(st.skipped) == "spike")
      progress_ << ", above --spike-skip " << o.spike_skip << " x the median " << st.spike_median;
    progress_ << " (no update)\n" << std::flush;
  }
  if (st.change)
    progress_ << batch_change_line(*st.change, plan.noise()->options()) << "\n" << std::flush;
  if (validated) {
    char line[120];
    std::snprintf(line, sizeof line, "validation loss %.4f over %lld tokens", st.val->mean_loss(),
                  static_cast<long long>(st.val->tokens));
    progress_ << line << "\n";
  }
}

}  // namespace memo
