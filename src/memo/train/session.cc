#include "memo/train/session.h"

#include <algorithm>
#include <cmath>
#include <span>
#include <sstream>
#include <string>

#include "memo/core/error.h"
#include "memo/core/json_excerpt.h"
#include "memo/core/units.h"
#include "memo/data/shards.h"
#include "memo/io/checkpoint.h"
#include "memo/io/config_json.h"
#include "memo/memory/memo.h"
#include "memo/memory/strategy_factory.h"
#include "memo/memory/swap_strategy.h"
#include "memo/optim/factory.h"
#include "memo/parallel/host_staged_communicator.h"
#include "memo/train/device_plan.h"

namespace memo {
namespace {

// The shape options, and the stages they run in (Note [Length stages]): with --seq-schedule,
// o.seq becomes the first stage's length and o.steps the stages' sum.
std::vector<SeqStage> check_shape_options(TrainOptions& o) {
  if (o.batch <= 0) throw ConfigError(str("--batch ", o.batch, " must be positive"));
  if (o.micro_batch == 0) o.micro_batch = o.batch;
  if (o.micro_batch <= 0 || o.batch % o.micro_batch != 0)
    throw ConfigError(
        str("--batch ", o.batch, " must be a positive multiple of --micro-batch ", o.micro_batch));
  std::vector<SeqStage> stages = seq_stages(o);
  if (!o.seq_schedule.empty()) {
    o.seq = stages[0].seq;
    o.steps = stages.back().first_step + stages.back().steps - 1;
  }
  if (o.seq <= 0) throw ConfigError(str("--seq ", o.seq, " must be positive"));
  if (o.steps <= 0) throw ConfigError(str("--steps ", o.steps, " must be positive"));
  // the schedule's numbers (written so that a NaN fails each test)
  if (!(o.lr > 0.0 && std::isfinite(o.lr)))
    throw ConfigError(str("--lr ", o.lr, " must be a positive finite number"));
  if (!(o.min_lr_ratio >= 0.0 && o.min_lr_ratio <= 1.0))
    throw ConfigError(str("--min-lr-ratio ", o.min_lr_ratio, " is outside [0, 1]"));
  if (o.warmup < 0) throw ConfigError(str("--warmup ", o.warmup, " must be >= 0"));
  if (!(o.clip >= 0.0 && std::isfinite(o.clip)))
    throw ConfigError(str("--clip ", o.clip, " must be a finite number >= 0 (0: off)"));
  return stages;
}

// The steps to run: the resumed checkpoint's noise schedule, a new one (its options are checked
// here, before any output), or a fixed batch. A noise schedule over `dp_ranks` data-parallel
// ranks grows the batch in steps of --micro-batch x dp_ranks sequences, so that every step's
// micro-batches split evenly over the ranks (x --pp under interleaving, whose schedule runs a
// rank's micro-batches in groups of P). Over length stages, a span of tokens each (Note [Length
// stages]).
StepSchedule step_schedule(const TrainOptions& o, const std::vector<SeqStage>& stages,
                           const std::optional<ResumePoint>& resume, int64_t start_step,
                           int dp_ranks) {
  const int64_t groups = o.pp > 1 && o.virtual_stages > 1 ? o.pp : 1;
  const int64_t unit = o.micro_batch * dp_ranks * groups;
  const std::string unit_is =
      str("--micro-batch ", o.micro_batch, " x ", dp_ranks, " data-parallel processes",
          groups > 1 ? str(" x --pp ", o.pp, " (interleaved stages)") : std::string(), " = ", unit);
  if (resume && resume->noise) {
    const int64_t saved = resume->noise->options().micro_batch;
    if (saved % unit != 0)
      throw ConfigError(str(o.resume_dir, "'s batch schedule grows in steps of ", saved,
                            " sequences, which do not split into micro-batches of ", o.micro_batch,
                            " over ", dp_ranks,
                            " data-parallel ranks; resume with a number of data-parallel ranks "
                            "(processes / --cp) that divides ",
                            saved / o.micro_batch));
    check_noise_stages(o, stages);
    return StepSchedule(*resume->noise, o.micro_batch, stages);
  }
  if (!o.batch_schedule) return StepSchedule(o, start_step);
  check_noise_stages(o, stages);
  if (!o.gns)
    throw ConfigError("--batch-schedule noise grows the batch with the noise scale: drop --no-gns");
  scaling::BatchScheduleOptions s = noise_schedule_options(o);
  s.micro_batch = unit;  // the growth unit
  if (dp_ranks > 1 && o.batch < 2 * unit)
    throw ConfigError(str("--batch-schedule noise grows the batch in steps of ", unit_is,
                          " sequences and starts from at least two: use --batch ", 2 * unit,
                          " or more"));
  if (groups > 1 && o.batch % unit != 0)
    throw ConfigError(
        str("--batch-schedule noise: --batch ", o.batch, " must be a multiple of ", unit_is));
  if (s.max_batch % unit != 0)
    throw ConfigError(str("--max-batch ", s.max_batch, " must be a multiple of ", unit_is));
  // the largest step the schedule may grow to, bounded as a fixed one (check_stage_tokens)
  check_step_bounds(
      str("--max-batch ", s.max_batch,
          o.batch_schedule->max_batch == 0 ? str(" (", kDefaultMaxBatchMultiple, " x --batch)")
                                           : ""),
      s.max_batch, o.micro_batch, o.seq);
  return StepSchedule(scaling::BatchSchedule(s), o.micro_batch, stages);
}

// The context- and tensor-parallel layout of a job of `ranks` processes: C x T ranks share each
// sequence.
void check_context_parallel(const TrainOptions& o, const std::vector<SeqStage>& stages, int ranks) {
  if (o.cp < 1) throw ConfigError(str("--cp ", o.cp, " must be at least 1"));
  if (o.tp < 1) throw ConfigError(str("--tp ", o.tp, " must be at least 1"));
  if (ranks % o.cp != 0)
    throw ConfigError(str("--cp ", o.cp, " does not divide the job's ", ranks,
                          " processes; use a divisor of the process count"));
  for (const SeqStage& s : stages) check_context_parallel_seq(s.seq, o.cp);
  if (ranks % (o.tp * o.cp) != 0)
    throw ConfigError(str("--tp ", o.tp, " x --cp ", o.cp, " does not divide the job's ", ranks,
                          " processes; use a layout whose product divides the process count"));
  // each micro-batch's tokens on a rank of the context-parallel group split over the tensor-
  // parallel ranks, in every length stage (else the stage would fail as it starts, after the
  // stages before it had trained)
  if (o.tp > 1)
    for (size_t k = 0; k < stages.size(); ++k) {
      const SeqStage& s = stages[k];
      const int64_t tokens = s.micro_batch * (s.seq / o.cp);
      if (tokens % o.tp != 0)
        throw ConfigError(str("--tp ", o.tp, ": ",
                              stages.size() > 1 ? str("length stage ", k + 1, "'s ") : "the ",
                              "micro-batch of ", s.micro_batch, " x ", s.seq,
                              o.cp > 1 ? str(" / --cp ", o.cp) : std::string(), " = ", tokens,
                              " tokens does not split into ", o.tp,
                              " equal parts of the sequence; use a --seq or --micro-batch whose "
                              "tokens it divides"));
    }
  check_tensor_parallel_optimizer(o.optimizer.name, o.tp);
}

// Pipeline parallelism (Note [Pipeline step] in train/pipeline_step.cc): the flags that split a
// pipeline need one (the layout's product is checked with the others').
void check_pipeline(const TrainOptions& o) {
  if (o.pp == 1 && (o.virtual_stages > 1 || !o.pp_layers.empty()))
    throw ConfigError(str(o.virtual_stages > 1 ? "--virtual-stages" : "--pp-layers",
                          " splits a pipeline: give --pp 2 or more"));
}

// What a run over several processes needs: a batch whose micro-batches split evenly over the
// data-parallel ranks (a noise schedule keeps it so: step_schedule), and a ZeRO stage memo runs.
void check_data_parallel(const TrainOptions& o, const std::vector<SeqStage>& stages, int ranks) {
  if (o.zero != 0 && o.zero != 1)
    throw ConfigError(str("--zero ", o.zero, " is not a stage memo runs; use 0 or 1"));
  if (ranks == 1) return;
  for (size_t k = 0; k < stages.size(); ++k) {
    const SeqStage& s = stages[k];
    const int64_t micro_steps = s.batch / s.micro_batch;
    if (micro_steps % ranks == 0) continue;
    if (stages.size() == 1)
      throw ConfigError(str("--batch ", s.batch, " / --micro-batch ", s.micro_batch, " = ",
                            micro_steps, " micro-batches per step do not split over ", ranks,
                            " processes; make it a multiple of ", ranks));
    throw ConfigError(str("--seq-schedule: stage ", k + 1, " (seq ", s.seq, ") has ", s.batch,
                          " / ", s.micro_batch, " = ", micro_steps,
                          " micro-batches per step, which do not split over ", ranks,
                          " data-parallel processes; make every stage's a multiple of ", ranks));
  }
}

// The model of the run: a resumed run's as it was (position flags must agree with it: checked by
// resume_point), else --config's, or --init-from's own config.json, with the position flags
// applied.
ModelConfig run_model_config(const TrainOptions& o, const std::optional<ResumePoint>& resume) {
  const PositionOverrides& p = o.positions;
  if (resume) {
    const ModelConfig& was = resume->checkpoint.config;
    if (!o.config_path.empty()) {  // a script may repeat it; another model is refused, not ignored
      ModelConfig given = load_model_config(o.config_path);
      // the positions a length stage's --stage-rope changed are the checkpoint's
      given.rope_theta = was.rope_theta;
      given.rope_scaling = was.rope_scaling;
      given.max_position_embeddings = was.max_position_embeddings;
      if (model_config_to_json(given) != model_config_to_json(was))
        throw ConfigError(str("--config ", o.config_path, " is not the model of --resume ",
                              o.resume_dir, " (its config.json): resume without --config, or ",
                              "start a new run from its weights with --init-from"));
    }
    return was;
  }
  if (!o.init_from.empty())  // before a model is sized from either config
    check_config_describes_tensors(
        load_checkpoint(find_latest_checkpoint(o.init_from), CheckpointUse::kWeights));
  const std::filesystem::path path = !o.config_path.empty()
                                         ? std::filesystem::path(o.config_path)
                                         : find_latest_checkpoint(o.init_from) / "config.json";
  const ModelConfig loaded = load_model_config(path);
  try {
    return p.applied_to(loaded);
  } catch (const ConfigError& e) {
    throw ConfigError(str(path.string(), " with the position flags: ", e.what()));
  }
}

// Each stage's length within its positions: the model's, with the --stage-rope of the stages up
// to it applied (each checked: a stage's bad field stops the run before any output).
void check_positions(const std::vector<SeqStage>& stages,
                     const std::vector<PositionOverrides>& stage_positions, ModelConfig config,
                     bool positions_given) {
  bool changed = false;
  for (size_t k = 0; k < stages.size(); ++k) {
    changed = changed || stage_positions[k].any();
    if (stage_positions[k].any()) {
      if (!config.uses_rope())
        throw ConfigError(
            str("--stage-rope ", k + 1, ": the model's positions are learned (no RoPE to change)"));
      try {
        config = stage_positions[k].applied_to(config);
      } catch (const ConfigError& e) {
        throw ConfigError(str("--stage-rope ", k + 1, ": ", e.what()));
      }
    }
    if (stages[k].seq > config.max_positions())
      throw ConfigError(str(stages.size() > 1 ? str("--seq-schedule: stage ", k + 1, "'s seq ")
                                              : std::string("--seq "),
                            stages[k].seq, " exceeds ", config.positions_limit(),
                            changed ? " (with --stage-rope)" : " of the model config",
                            config.uses_rope() && !positions_given && !changed
                                ? "; --max-position-embeddings N (and a --rope-scaling) extends "
                                  "it for this run"
                                : ""));
  }
}

// Note [Document masks] refuses a rope_scaling whose frequencies follow the sequence's length
// with masked documents; one that a later stage's --stage-rope brings is refused here, before step
// 1, not when its stage begins after the others have trained. `masks` says what masks them.
void check_stage_masks(const std::vector<PositionOverrides>& stage_positions, ModelConfig config,
                       const std::string& masks) {
  for (size_t k = 0; k < stage_positions.size(); ++k) {
    if (!stage_positions[k].any()) continue;
    config = stage_positions[k].applied_to(config);
    if (config.uses_rope() && config.rope_scaling.depends_on_length())
      throw ConfigError(str("--stage-rope ", k + 1, " with ", masks, ": rope_scaling ",
                            rope_type_name(config.rope_scaling.type),
                            ": its frequencies follow the sequence's length, which packed "
                            "documents leave undefined; memo refuses the pair"));
  }
}

// The static plan within the budget, agreed by every rank of the job: a rank whose plan does not
// fit would otherwise end the job (MPI_Abort) while another was still planning, and that rank's
// own shortfall, which can differ (a ZeRO shard, a sequence chunk), would go unsaid. Each rank
// plans, the ranks exchange whether theirs fits, and when one does not every rank stops with a
// JobError: its own refusal, or which ranks refused. Where the refusing ranks' advice differs
// (ZeRO-1 shards), each rank adds what fits them all: the shortest of their sequences and the
// largest of their budgets.
std::unique_ptr<PlannedAllocator> agreed_planned_allocator(Communicator& job, Model& model,
                                                           int64_t batch, int64_t seq,
                                                           int64_t budget_bytes,
                                                           const DevicePlanOptions& options,
                                                           std::ostream& progress) {
  if (job.size() == 1)
    return planned_allocator_within_budget(model, batch, seq, budget_bytes, options, progress);
  std::unique_ptr<PlannedAllocator> planned;
  std::string refusal;
  // [refused, longest seq that fits (0: none; -1: no advice), smallest budget that fits]
  double mine[3] = {0.0, -1.0, 0.0};
  std::ostringstream line;  // printed once the job agrees, so no rank's line precedes a refusal
  try {
    planned = planned_allocator_within_budget(model, batch, seq, budget_bytes, options, line);
  } catch (const OverBudgetError& e) {
    refusal = e.what();
    mine[0] = 1.0;
    mine[1] = double(e.advice.longest_seq.value_or(0));
    mine[2] = double(e.advice.smallest_budget_bytes);
  } catch (const BudgetError& e) {
    refusal = e.what();
    mine[0] = 1.0;
  }
  std::vector<double> all(size_t(3 * job.size()));
  job.all_gather(all, std::span<const double>(mine, 3));
  std::string ranks;
  bool advised = true, differ = false;
  double longest = 0.0, budget = 0.0;
  // as the refusals print them: budgets that round to the same flag value say the same
  const auto said = [](const double* a) {
    return str(int64_t(a[1]), " ", budget_flag_value(int64_t(a[2])));
  };
  std::string first;
  for (size_t r = 0; r < size_t(job.size()); ++r) {
    const double* theirs = &all[3 * r];
    if (theirs[0] == 0.0) continue;
    if (ranks.empty()) longest = theirs[1], budget = theirs[2], first = said(theirs);
    advised &= theirs[1] >= 0.0;
    differ |= said(theirs) != first;
    longest = std::min(longest, theirs[1]);
    budget = std::max(budget, theirs[2]);
    ranks += str(ranks.empty() ? "" : ", ", r);
  }
  if (ranks.empty()) {
    progress << line.str();
    return planned;
  }
  const std::string every =
      advised && (differ || refusal.empty())
          ? str("; for every rank: ",
                longest > 0.0 ? str("--seq ", int64_t(longest), " (estimated) or ") : "",
                "--device-memory ", budget_flag_value(int64_t(budget)), " fits")
          : "";
  if (!refusal.empty()) throw JobError(refusal + every);
  throw JobError(str("device memory: the plan fits on this rank but not on rank(s) ", ranks,
                     " (their messages say by how much)", every));
}

// Note [Pipeline alpha]: the profile of the stage's first memo strategy, once it has one.
const SwapProfile* stage_profile(const TrainStep& step) {
  for (const auto& s : step.pipeline_strategies())
    if (const auto* m = dynamic_cast<const MemoStrategy*>(s.get());
        m && m->profile().valid && m->profile().d2h_bytes_per_s > 0.0)
      return &m->profile();
  return nullptr;
}

}  // namespace

TrainSession::TrainSession(const TrainOptions& options, Runtime& runtime)
    : o_(options), runtime_(runtime), backend_(runtime.backend()), job_(runtime.world()) {
  read_run();
  split_groups();
  build_model();
  build_optimizer();
  build_step();
}

void TrainSession::read_run() {
  resume_ = resume_point(o_);
  check_out_dir(o_);  // Note [One run a directory]
  start_step_ = resume_ ? resume_->step : 0;
  stages_ = check_shape_options(o_);
  const int job_size = job_.size();
  check_context_parallel(o_, stages_, job_size);
  if (o_.pp < 1 || o_.virtual_stages < 1)
    throw ConfigError(
        str("--pp ", o_.pp, " and --virtual-stages ", o_.virtual_stages, " must be at least 1"));
  if (job_size % o_.pp != 0)
    throw ConfigError(str("--pp ", o_.pp, " does not divide the job's ", job_size,
                          " processes; use a divisor of the process count"));
  if (job_size % (o_.pp * o_.tp * o_.cp) != 0)
    throw ConfigError(str("--pp ", o_.pp, " x --tp ", o_.tp, " x --cp ", o_.cp,
                          " does not divide the job's ", job_size,
                          " processes; use a layout whose product divides the process count"));
  plan_.emplace(
      step_schedule(o_, stages_, resume_, start_step_, job_size / (o_.cp * o_.tp * o_.pp)));
  stage_ = plan_->next().stage;  // a resumed run's next step's
  config_ = run_model_config(o_, resume_);
  stage_positions_ = stage_positions(o_.stage_rope, stages_.size());
  check_positions(stages_, stage_positions_, config_, o_.positions.any());
  // the training and validation tokens (train/run_data.h), checked before any output
  data_.emplace(
      load_run_data({o_.data_path, o_.val_data_path, o_.val_fraction}, config_.vocab_size));
  check_tokenizers();
  // prompt-completion data: the packed examples must not see each other (Note [Packed examples])
  if (data_->val && data_->val->has_loss_mask() != data_->train.has_loss_mask())
    throw ConfigError(str("the training data ", data_->train.source(), " is ",
                          data_->train.has_loss_mask() ? "prompt-completion" : "text",
                          " and the validation data ", data_->val->source(), " is not: give ",
                          "validation data of the same kind"));
  if (data_->train.has_loss_mask()) o_.document_mask = true;
  if (o_.eot_id >= 0 && !o_.document_mask && !o_.eod_mask_loss)
    throw ConfigError(
        "--eot-id says where documents start for --document-mask, --eod-mask-loss or "
        "prompt-completion data; give one of them");
  if (o_.document_mask)
    check_stage_masks(stage_positions_, config_,
                      data_->train.has_loss_mask()
                          ? "prompt-completion data (its examples are masked from each other)"
                          : "--document-mask");
  check_pipeline(o_);
  // every stage's windows, training and validation, checked now: a validation split shorter
  // than a window once stopped the run at its last step, before its checkpoint
  // (not where nothing validates: --val-batches 0 without --eval-tokens)
  const bool validates = o_.eval_tokens > 0 || o_.val_batches > 0;
  if (!validates && (o_.eval_every > 0 || o_.save_best))
    throw ConfigError(str(o_.save_best ? "--save-best" : str("--eval-every ", o_.eval_every),
                          " needs validation points, and --val-batches 0 asks for none; give "
                          "--val-batches or --eval-tokens a count, or leave it out"));
  for (const SeqStage& st : stages_) {
    if (st.seq != stage().seq) WindowSampler(data_->train, st.seq, o_.seed);
    if (data_->val && validates) try {
        WindowSampler(*data_->val, st.seq, o_.seed);
      } catch (const DataError& e) {
        throw DataError(str("the validation data: ", e.what(),
                            "; give --val-data, a larger --val-fraction, a shorter --seq, or ",
                            o_.eval_tokens > 0 ? "no --eval-tokens and " : "",
                            "--val-batches 0 (no validation)"));
      }
  }
  sampler_.emplace(data_->train, stage().seq, o_.seed);
  // a resumed run continues in its checkpoint's precision (older checkpoints did not say)
  if (resume_ && resume_->checkpoint.trainer_state.contains("precision")) {
    const nlohmann::json& field = resume_->checkpoint.trainer_state.at("precision");
    if (field != "fp32" && field != "bf16")
      throw DataError(str(o_.resume_dir, ": trainer_state.json's precision ", json_excerpt(field),
                          " is neither \"fp32\" nor \"bf16\""));
    const std::string was = field.get<std::string>();
    if (was != precision_name(backend_))
      throw ConfigError(str(o_.resume_dir, " was trained in ", was, " and this run is ",
                            precision_name(backend_), ": resume with --precision ", was,
                            " to continue it (--init-from starts a new run from its weights)"));
  }
}

void TrainSession::split_groups() {
  // groups of T consecutive ranks split the layers, C of those groups share sequences
  // (a pipeline's P stages are the outermost split: N / P consecutive ranks per stage, the
  // ranks of one pipeline N / P apart)
  const int r = job_.rank(), T = o_.tp, TC = o_.tp * o_.cp, per_stage = job_.size() / o_.pp;
  if (T > 1) tp_group_ = job_.split(r / T, r % T);
  if (o_.cp > 1) cp_group_ = job_.split((r / TC) * T + r % T, (r / T) % o_.cp);
  if (TC > 1 || o_.pp > 1)
    dp_group_ = job_.split((r / per_stage) * TC + r % TC, (r % per_stage) / TC);
  if (o_.pp > 1) {
    // Note [Host-staged groups]: where the collectives go over NCCL, the pipeline's tagged,
    // non-blocking sends go over the launcher's MPI through host memory
    Communicator& processes = runtime_.processes();
    pp_group_ = &processes == &job_ ? job_.split(r % per_stage, r / per_stage)
                                    : std::make_unique<HostStagedCommunicator>(
                                          processes.split(r % per_stage, r / per_stage), backend_);
    // tied embeddings: the first and last stage sum their two gradients of it
    const int p = pp_group_->rank();
    embedding_group_ = pp_group_->split(p == 0 || p == o_.pp - 1 ? 0 : 1, p);
  }
  check_data_parallel(o_, stages_, data_parallel().size());
}

void TrainSession::build_model() {
  model_.emplace(config_, backend_);
  model_->set_parallel(Parallel{o_.tp, 1}, tp_group_.get());
  model_->set_context_parallel(cp_group_.get());
  if (o_.document_mask || o_.eod_mask_loss) {
    const DocumentTokens t =
        document_tokens(o_.data_path, o_.eot_id, config_.vocab_size,
                        o_.document_mask ? "--document-mask" : "--eod-mask-loss");
    if (o_.document_mask) model_->set_document_mask(t.start);
    if (o_.eod_mask_loss) model_->set_eod_loss_mask(t.end);
  }
  set_stage_positions(stage_);
  if (o_.pp > 1) set_pipeline_part();
  check_host_memory();
  // ZeRO-1: this rank's optimiser covers its shard's tensors only
  shards_ = memo::zero_shards(model_->layout(), o_.zero == 1 ? data_parallel().size() : 1);
  mine_ = o_.zero == 1 ? size_t(data_parallel().rank()) : 0;
  shard_layout_.emplace(model_->layout(), shards_[mine_].first, shards_[mine_].last);
  // the static plan within --device-memory: refused here, before any output and before the
  // weights are drawn or loaded, when it does not fit (the plan traces a shadow and needs no
  // values)
  caching_.emplace(0, backend_.allocator(backend_.device_space()));
  // with length stages, every stage's plan is checked here (each dropped before the next is
  // made, the current one last), so a stage that would not fit stops the run before step 1
  // Note [Pipeline plans per batch]: a noise schedule's largest batch is checked here too
  const bool grows = o_.pp > 1 && plan_->noise() && plan_->max_micro_steps() != micro_steps();
  for (int k = 0; k < int(stages_.size()); ++k) {
    if (k != stage_) stage_plan(k, true);
    if (grows) stage_plan(k, stages_.size() == 1, plan_->max_micro_steps());
  }
  planned_ = stage_plan(stage_, true);
  planned_micro_steps_ = micro_steps();
  const DType stored = start_weights(*model_, config_, o_, resume_);
  if (!o_.save_dtype) o_.save_dtype = stored == DType::kBF16 ? DType::kBF16 : DType::kF32;
}

std::unique_ptr<PlannedAllocator> TrainSession::stage_plan(int k, bool announce,
                                                           int64_t micro_steps) {
  if (o_.device_memory_bytes <= 0) return nullptr;
  if (micro_steps == 0) micro_steps = this->micro_steps();
  const SeqStage& s = stages_[size_t(k)];
  if (announce && stages_.size() > 1)
    runtime_.log() << "memo: stage " << k + 1 << " of " << stages_.size() << ": seq " << s.seq
                   << ", micro-batches of " << s.micro_batch << "\n";
  DevicePlanOptions options{ActivationPlanOptions{}, o_.activations, o_.optimizer,
                            o_.zero == 1 ? &*shard_layout_ : nullptr, std::nullopt};
  if (o_.pp > 1)  // this rank's whole step (Note [Planning on a shadow])
    options.pipeline = DevicePlanOptions::PipelineStep{
        pipeline_shape(), int(micro_steps / data_parallel().size()), pp_group_->rank()};
  try {
    std::unique_ptr<PlannedAllocator> planned = agreed_planned_allocator(
        job_, *model_, s.micro_batch, s.seq, o_.device_memory_bytes, options, runtime_.log());
    if (o_.pp > 1 && announce) {  // the other stages' arenas (the line above is this rank's)
      const double mine = double(planned->reserved_bytes());
      std::vector<double> arenas(size_t(o_.pp));
      pp_group_->all_gather(arenas, std::span<const double>(&mine, 1));
      std::string each;
      for (int p = 0; p < o_.pp; ++p)
        each += str(p ? ", " : "", "stage ", p, " ", format_bytes(int64_t(arenas[size_t(p)])));
      runtime_.log() << "memo: device plan: activation arenas (each stage's whole step of "
                     << micro_steps / data_parallel().size() << " micro-batches): " << each << "\n";
    }
    return planned;
  } catch (const BudgetError& e) {
    if (stages_.size() == 1) throw;
    // --seq is not a flag beside --seq-schedule: the advice is a length for this stage
    std::string what = e.what();
    const size_t at = what.find("--seq ");
    const size_t fits = what.find(" fits this budget", at);
    if (at != std::string::npos && fits != std::string::npos &&
        what.find_first_not_of("0123456789", at + 6) == fits)
      what.replace(at, fits + 17 - at,
                   str("a seq of ", what.substr(at + 6, fits - at - 6), " in this stage fits"));
    throw BudgetError(str("--seq-schedule stage ", k + 1, " (seq ", s.seq, "): ", what));
  } catch (const JobError& e) {
    if (o_.pp > 1)  // each pipeline stage plans its own step
      throw JobError(str("pipeline stage ", pp_group_->rank(), " of ", o_.pp, ": ", e.what()));
    if (stages_.size() == 1) throw;
    throw JobError(str("--seq-schedule stage ", k + 1, " (seq ", s.seq, "): ", e.what()));
  }
}

// Note [Pipeline plans per batch]
// A pipeline stage's plan covers its whole step (trace_pipeline_stage), whose requests depend on
// the micro-batches per step; a noise schedule (--batch-schedule noise) changes them. Before step
// 1 the stage checks the plans of the first batch and of the largest (--max-batch: the most
// micro-batches in flight), so a schedule that would outgrow --device-memory stops the run there;
// when the batch changes, the stage plans the new step and rebuilds the step's strategies over
// its arena (the old one freed first). Values do not depend on the arena, so the bits are those
// of an unplanned run.
void TrainSession::plan_pipeline_batch(int64_t micro_steps) {
  if (!planned_ || o_.pp == 1 || micro_steps == planned_micro_steps_) return;
  step_.reset();  // what holds the old arena, before it goes
  strategy_.reset();
  planned_.reset();
  planned_ = stage_plan(stage_, false, micro_steps);
  planned_micro_steps_ = micro_steps;
  build_step();
  runtime_.log() << "memo: device plan: each pipeline stage planned again for "
                 << micro_steps / data_parallel().size() << " micro-batches per step\n";
}

void TrainSession::set_stage_positions(int k) {
  for (int j = 0; j <= k; ++j)
    model_->set_positions(stage_positions_[size_t(j)], str("--stage-rope ", j + 1));
}

void TrainSession::enter_stage(int k) {
  MEMO_CHECK(k >= 0 && size_t(k) < stages_.size(), "enter_stage ", k, " of ", stages_.size());
  step_.reset();  // what holds the old stage's allocator and sampler, before they go
  strategy_.reset();
  stage_ = k;
  set_stage_positions(k);
  sampler_.emplace(data_->train, stage().seq, o_.seed);
  planned_.reset();
  planned_ = stage_plan(k, false);
  planned_micro_steps_ = micro_steps();  // a noise schedule's batch: plan_pipeline_batch
  if (probe_) probe_->set_micro_tokens(stage().micro_batch * stage().seq);
  build_step();
}

void TrainSession::build_optimizer() {
  optimizer_ =
      o_.zero == 1
          ? make_optimizer(o_.optimizer.name, *shard_layout_,
                           shard_options(o_.optimizer.options, zero_shard()), backend_)
          : make_optimizer(o_.optimizer.name, model_->layout(), o_.optimizer.options, backend_);
  // see Note [Noise-scale accounting]; sized for the most micro-batches a step will run
  // (with length stages: when some stage's steps have two micro-batches; the others run without)
  if (o_.gns && (stages_.size() > 1 ? plan_->max_micro_steps() : micro_steps()) >= 2)
    probe_.emplace(model_->params_numel(), plan_->max_micro_steps() / data_parallel().size(),
                   stage().micro_batch * stage().seq, scaling::NoiseScaleOptions{o_.gns_decay},
                   backend_);
  if (resume_)
    restore_training_state(*optimizer_, backend_, probe(), *resume_, o_, model_->layout());
}

void TrainSession::build_step() {
  strategy_ = make_strategy(model_->skeletal(), alloc(), o_.activations);
  eval_strategy_.emplace(model_->skeletal(), *caching_);
  const StepShape shape{stage().micro_batch, stage().seq, micro_steps() / data_parallel().size()};
  const WindowSampler& sampler = *sampler_;
  step_.emplace(
      *model_, *optimizer_, *strategy_, alloc(), shape,
      [&sampler](int64_t step, int64_t micro, int32_t* in, int32_t* tgt, int64_t rows) {
        sampler.fill(step, micro, in, tgt, rows);
      },
      micro_steps() >= 2 ? probe() : nullptr, data_parallel());
  if (o_.zero == 1) step_->set_zero_shards(&shards_);
  step_->set_masked_targets(data_->train.has_loss_mask());
  if (o_.pp > 1) {
    // tied embeddings: the first and last stage hold the embedding (Note [Pipeline parts])
    const PipelinePart& part = *model_->pipeline();
    const bool tied = (part.first || part.last) && pipeline_tied();
    const SkeletalLayout* skeletal = &model_->skeletal();
    ActivationAllocator* alloc = &this->alloc();
    StrategyOptions strategy = o_.activations;
    if (strategy.kind == "offload" || strategy.kind == "memo")  // Note [Pipeline host memory]
      strategy.host_space = &pipeline_host_.emplace("host", strategy.host_memory_bytes,
                                                    backend_.allocator(MemSpace::kPinnedHost));
    // Note [Pipeline alpha]
    // memo's cost model on a pipeline stage: each pass in flight has its own strategy, and the k
    // passes a rank holds at once share the pool, so each chooses alpha within --host-memory / k.
    // The stage's first strategy profiles its second pass (Note [A warm profile]; at alpha 0
    // until then: every alpha gives the same values, so no warm-up micro-batch is spent), and the
    // strategies made after it take its
    // profile as given, so a stage runs one alpha, chosen from its own chunk's layer time.
    const bool cost_model = strategy.kind == "memo" && !strategy.alpha;
    if (cost_model && strategy.host_memory_bytes > 0) strategy.host_memory_bytes /= pp_in_flight_;
    TrainStep* step = &*step_;
    step_->set_pipeline({pipeline_shape(), pp_group_.get(), tied ? embedding_group_.get() : nullptr,
                         [skeletal, alloc, strategy, cost_model, step] {
                           StrategyOptions o = strategy;
                           if (cost_model && o.layer_forward_s <= 0.0)
                             if (const SwapProfile* p = stage_profile(*step)) {
                               o.layer_forward_s = p->layer_forward_s;
                               o.bandwidth_bytes_per_s = p->d2h_bytes_per_s;
                             }
                           return make_strategy(*skeletal, *alloc, o);
                         }});
  }
}

PipelineShape TrainSession::pipeline_shape() const { return {o_.pp, o_.virtual_stages}; }

bool TrainSession::pipeline_tied() const { return o_.pp > 1 && model_->tied_embeddings(); }

// Note [Pipeline parts]: this rank's chunks of the layer split, the head counted in the balance
// by its FLOPs at the run's length over a layer's. With length stages the split is the first
// stage's for the whole run (a resumed run makes the same), and every stage's micro-batches must
// suit the schedule; each stage then runs its own pipeline step (enter_stage).
void TrainSession::set_pipeline_part() {
  const PipelineShape shape = pipeline_shape();
  const int64_t m = micro_steps() / data_parallel().size();
  validate_pipeline(shape, m);  // before shape.chunks() is counted on
  const std::vector<int> counts =
      pipeline_layer_counts(config_, stages_.front().seq, shape, o_.pp_layers);
  const int p = pp_group_->rank();
  model_->set_pipeline(pipeline_part(shape, counts, p));
  for (size_t k = 0; k < stages_.size(); ++k)
    if (k != size_t(stage_)) {
      try {
        validate_pipeline(shape,
                          stages_[k].batch / stages_[k].micro_batch / data_parallel().size());
      } catch (const ConfigError& e) {
        throw ConfigError(str("--seq-schedule: stage ", k + 1, ": ", e.what()));
      }
    }
  pp_in_flight_ =
      parked_layers(shape, counts, int(plan_->max_micro_steps() / data_parallel().size()), p)
          .in_flight;
  std::string layers;
  for (int n : counts) layers += str(layers.empty() ? "" : ",", n);
  runtime_.log() << "memo: pipeline: " << o_.pp << " stages"
                 << (shape.virtual_stages > 1
                         ? str(" x ", shape.virtual_stages, " virtual (interleaved 1F1B)")
                         : std::string(" (1F1B)"))
                 << ", layers " << layers << ", " << m
                 << " micro-batches per step, bubble (P - 1) / (V m) = "
                 << pipeline_bubble(shape, int(m)) << "\n";
  check_pipeline_host(counts);
}

// Note [Pipeline host memory]
// Under --pp with offload or memo, each micro-batch a stage holds in flight is parked on the host
// between its forward and its backward (Note [Parked micro-batches] in memory/swap_strategy.cc),
// and the stage's strategies take their blocks from one pool of --host-memory. A pass of chunk c
// holds n_c layers there (n_c - 2 on the model's last chunk, whose backward follows its forward
// at once); a strategy keeps its blocks from pass to pass, and a rank has at most k passes in
// flight (peak_in_flight of its actions), so a stage needs at most k max_c(n_c) layers of
// swap_host_layer_bytes: exactly that under 1F1B, where a rank runs one chunk. Every rank works
// out every stage's figure, so a layout that does not fit is refused on all ranks alike with the
// fullest stage's numbers, before the weights are drawn.
void TrainSession::check_pipeline_host(const std::vector<int>& counts) {
  const StrategyOptions& a = o_.activations;
  if (a.kind != "offload" && a.kind != "memo") return;
  const PipelineShape shape = pipeline_shape();
  // the most micro-batches a step will run (a noise schedule grows them): the most in flight
  const int m = int(plan_->max_micro_steps() / data_parallel().size());
  // memo's cost model: at least x and attention (alpha 0), within its share of the pool
  const bool cost_model = a.kind == "memo" && !a.alpha;
  int64_t layer_bytes = 0;  // of the length stage whose layers are the largest
  for (const SeqStage& s : stages_)
    layer_bytes = std::max(layer_bytes, host_layer_bytes(s.micro_batch, s.seq));
  int stage = 0;
  ParkedLayers fullest;
  for (int p = 0; p < shape.stages; ++p) {
    const ParkedLayers n = parked_layers(shape, counts, m, p);
    if (p == 0 || n.total() > fullest.total()) stage = p, fullest = n;
  }
  const int64_t bytes = int64_t(fullest.total()) * layer_bytes;
  const std::string what =
      str("stage ", stage, " holds up to ", fullest.in_flight, " micro-batches in flight x ",
          fullest.layers, " layers x ", format_bytes(layer_bytes), " = ", format_bytes(bytes), " (",
          bytes, " bytes)");
  if (a.host_memory_bytes > 0 && bytes > a.host_memory_bytes)
    throw BudgetError(str("--pp ", shape.stages, " --activations ", a.kind, ": ", what,
                          cost_model ? " at alpha 0" : "", " of host memory, over --host-memory ",
                          format_bytes(a.host_memory_bytes), "; give --host-memory ", bytes,
                          " or more",
                          a.kind == "memo" && !cost_model ? ", or a lower --alpha" : ""));
  runtime_.log() << "memo: pipeline: the micro-batches in flight wait on the host (" << a.kind
                 << ", the top two layers too); the fullest, " << what
                 << (cost_model
                         ? str(" at alpha 0; each stage's cost model picks its alpha within ",
                               a.host_memory_bytes > 0
                                   ? "--host-memory over its micro-batches in flight"
                                   : "unlimited host memory")
                         : std::string())
                 << "\n";
}

// The data's ids must mean what the weights learned: --data and --val-data against the
// tokenizer of the checkpoint the run starts from (--init-from, or --resume given new --data),
// where it has one; else --val-data against --data (train/run_data.h: check_data_tokenizer).
void TrainSession::check_tokenizers() const {
  const std::string& from = !o_.init_from.empty() ? o_.init_from
                            : o_.data_given       ? o_.resume_dir
                                                  : std::string();
  std::optional<Tokenizer> expected;
  std::string what;
  if (!from.empty()) {
    const std::filesystem::path file = find_latest_checkpoint(from) / kTokenizerFile;
    std::error_code ec;
    if (std::filesystem::is_regular_file(file, ec)) {
      expected = Tokenizer::load(file);
      what = str(!o_.init_from.empty() ? "--init-from " : "--resume ", from);
      check_data_tokenizer(*expected, what, o_.data_path, "--data");
    }
  }
  if (o_.val_data_path.empty()) return;
  if (!expected) {
    expected = data_tokenizer(o_.data_path);
    what = str("--data ", o_.data_path);
  }
  if (expected) check_data_tokenizer(*expected, what, o_.val_data_path, "--val-data");
}

// Note [Host memory before step 1]
// Without --pp, offload and memo send each micro-batch's layers below the top two to the host
// (host_layer_bytes each). Every length stage's figure is checked against --host-memory here,
// before the weights are drawn, whatever the device budget: a stage that would not fit used to fail
// in its first step, after the stages before it had trained. The refusal says what would fit: the
// --host-memory the stage needs and the longest --seq (in the device plan's rounding unit) whose
// figure is within the budget.
// One offloaded layer's host bytes for a micro-batch of this shape (its rank's share of the
// sequence): memory/strategy_factory.h's strategy_host_layer_bytes.
int64_t TrainSession::host_layer_bytes(int64_t micro_batch, int64_t local_seq) const {
  return strategy_host_layer_bytes(o_.activations, model_->skeletal(), micro_batch, local_seq,
                                   backend_.reproducible_rows(), std::max<int64_t>(1, o_.tp));
}

void TrainSession::check_host_memory() const {
  if (o_.pp > 1) return;
  for (size_t k = 0; k < stages_.size(); ++k) {
    const SeqStage& s = stages_[k];
    const std::string refusal = host_over_budget(
        o_.activations, model_->skeletal(), backend_.reproducible_rows(), s.micro_batch, s.seq,
        std::max<int64_t>(1, o_.cp), std::max<int64_t>(1, o_.tp),
        stages_.size() > 1 ? str("--seq-schedule stage ", k + 1, " (seq ", s.seq, "): ") : "");
    if (refusal.empty()) continue;
    // the budget the whole run needs: its hungriest stage's, which may come later
    int64_t most = 0;
    for (const SeqStage& t : stages_)
      most = std::max(
          most, host_micro_batch_bytes(o_.activations, model_->skeletal(),
                                       backend_.reproducible_rows(), t.micro_batch, t.seq,
                                       std::max<int64_t>(1, o_.cp), std::max<int64_t>(1, o_.tp)));
    const int64_t here = host_micro_batch_bytes(
        o_.activations, model_->skeletal(), backend_.reproducible_rows(), s.micro_batch, s.seq,
        std::max<int64_t>(1, o_.cp), std::max<int64_t>(1, o_.tp));
    throw BudgetError(most > here ? str(refusal, "; every stage fits --host-memory ", most,
                                        " or more (stage by stage, the largest)")
                                  : refusal);
  }
}

std::optional<double> TrainSession::pipeline_alpha() const {
  if (!step_ || !step_->pipeline()) return std::nullopt;
  std::optional<double> alpha;
  for (const auto& s : step_->pipeline_strategies())
    if (const auto* m = dynamic_cast<const MemoStrategy*>(s.get()))
      alpha = std::max(alpha.value_or(0.0), m->alpha());
  return alpha;
}

int64_t TrainSession::host_peak_bytes() const {
  return pipeline_host_ ? pipeline_host_->peak_bytes() : strategy_->host_peak_bytes();
}

ActivationStrategy::CopyTime TrainSession::copy_time() const {
  if (!step_ || !step_->pipeline()) return strategy_->copy_time();
  ActivationStrategy::CopyTime sum;
  for (const auto& s : step_->pipeline_strategies()) {
    const ActivationStrategy::CopyTime t = s->copy_time();
    sum.copy_s += t.copy_s;
    sum.wait_s += t.wait_s;
  }
  return sum;
}

std::string TrainSession::activation_summary() const {
  if (!step_ || !step_->pipeline()) {
    // said before the first micro-batch, where a given alpha's text cannot know it yet
    const int64_t rows =
        model_->skeletal().token_rows(stage().micro_batch, stage().seq / std::max(1, o_.cp));
    const int64_t g = backend_.reproducible_rows();
    if (o_.activations.kind == "memo" && o_.activations.alpha &&
        memo_moves_all_rows(rows, g, o_.tp))
      return str(strategy_->summary(), "; under --tp a rank's ", rows, " token rows are not whole ",
                 g, "-row panels, so all of them travel");
    return strategy_->summary();
  }
  // a strategy describes its last micro-batch: one of the rank's after step 1, else the kind
  const auto& made = step_->pipeline_strategies();
  return made.empty() ? str(o_.activations.kind, " per micro-batch in flight")
                      : made.front()->summary() + " (per micro-batch in flight)";
}

}  // namespace memo
