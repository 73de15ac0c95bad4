// The set-up of `memo train` (train/trainer.h): from the options and the runtime to everything a
// step needs, in the order the run makes them: the options a resumed checkpoint pins, the checks
// that must pass before any output, the step schedule, the data, the process groups, the model
// and its weights, the static plan within the budget (refused here, before the weights are drawn
// or loaded, when it does not fit), the optimiser, the noise probe and the training step.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "memo/backend/caching_allocator.h"
#include "memo/backend/memory_space.h"
#include "memo/data/sampler.h"
#include "memo/data/token_data.h"
#include "memo/memory/planned_allocator.h"
#include "memo/memory/strategy.h"
#include "memo/model/model.h"
#include "memo/optim/optimizer.h"
#include "memo/train/checkpoints.h"
#include "memo/train/grad_noise.h"
#include "memo/train/run_data.h"
#include "memo/train/runtime.h"
#include "memo/train/step.h"
#include "memo/train/step_schedule.h"
#include "memo/train/train_options.h"
#include "memo/train/zero.h"

namespace memo {

class TrainSession {
 public:
  // Throws ConfigError, DataError or (every rank alike) JobError before anything is written.
  TrainSession(const TrainOptions& options, Runtime& runtime);
  TrainSession(const TrainSession&) = delete;
  TrainSession& operator=(const TrainSession&) = delete;

  const TrainOptions& options() const { return o_; }  // with a resumed run's pinned options
  Runtime& runtime() const { return runtime_; }
  const std::optional<ResumePoint>& resume() const { return resume_; }
  int64_t start_step() const { return start_step_; }
  StepSchedule& plan() { return *plan_; }
  const RunData& data() const { return *data_; }
  const WindowSampler& sampler() const { return *sampler_; }  // the current stage's
  // The job's groups: rank r is tensor-parallel rank r % T, context-parallel rank (r / T) % C,
  // data-parallel rank r / (T C). The tensor- and context-parallel ones are null at size 1.
  Communicator& job() const { return job_; }
  Communicator& data_parallel() const { return dp_group_ ? *dp_group_ : job_; }
  Communicator* context_parallel() const { return cp_group_.get(); }
  Communicator* tensor_parallel() const { return tp_group_.get(); }
  // The pipeline's ranks in stage order (--pp; rank r is pipeline rank r / (N / P)); null without.
  Communicator* pipeline() const { return pp_group_.get(); }
  PipelineShape pipeline_shape() const;
  // --pp with an embedding tied between the first and the last stage
  bool pipeline_tied() const;
  Model& model() { return *model_; }
  Optimizer& optimizer() { return *optimizer_; }
  const std::vector<ZeroShard>& zero_shards() const { return shards_; }
  const ZeroShard& zero_shard() const { return shards_[mine_]; }
  GradNoiseProbe* probe() { return probe_ ? &*probe_ : nullptr; }
  // Where the step's activations live: the static plan's arena within --device-memory, else the
  // caching allocator, which validation always uses (forward-only, a sequence the plan does not
  // cover, outside the budgeted arena).
  ActivationAllocator& alloc() {
    return planned_ ? *planned_ : static_cast<ActivationAllocator&>(*caching_);
  }
  CachingAllocator& caching() { return *caching_; }
  // Under --pp with memo: the alpha this stage's passes run at (the highest of its strategies'
  // last choices: a stage's first pass profiles at 0, Note [Pipeline alpha]); else none.
  std::optional<double> pipeline_alpha() const;
  // The static plan's arena under --device-memory; null without one.
  const PlannedAllocator* planned() const { return planned_.get(); }
  ActivationStrategy& strategy() { return *strategy_; }
  // What the logs report of the step's activations: the strategy's, or under --pp the stage's
  // (the strategies of its micro-batches in flight, and their shared host pool).
  int64_t host_peak_bytes() const;
  ActivationStrategy::CopyTime copy_time() const;
  std::string activation_summary() const;
  KeepStrategy& eval_strategy() { return *eval_strategy_; }
  TrainStep& step() { return *step_; }
  // Micro-batches of a fixed step of the current stage over all ranks.
  int64_t micro_steps() const { return stage().batch / stage().micro_batch; }
  // Note [Length stages]: the run's stages (one without --seq-schedule) and the current one,
  // whose sequence length, batch and micro-batch the sampler, the plan, the strategy and the step
  // have. enter_stage(k) rebuilds those for stage k (collective: every rank enters it).
  const std::vector<SeqStage>& stages() const { return stages_; }
  const SeqStage& stage() const { return stages_[size_t(stage_)]; }
  int stage_index() const { return stage_; }
  void enter_stage(int k);
  // Under --pp with --device-memory: the plan and the step for `micro_steps` micro-batches per
  // step over all data-parallel ranks, made again when a noise schedule has changed them (Note
  // [Pipeline plans per batch]); a no-op otherwise. Collective over the pipeline group.
  void plan_pipeline_batch(int64_t micro_steps);

 private:
  void read_run();         // the resumed checkpoint, the checks, the schedule, config and data
  void split_groups();     // the tensor-, context- and data-parallel groups of the job
  void build_model();      // the model, its ZeRO shards, the plan and the weights
  void build_optimizer();  // the optimiser, the noise probe, a resumed run's state
  void build_step();       // the strategies and the training step
  // The static plan of stage k within --device-memory, agreed by the job (null without a budget);
  // announce: a line naming the stage first (the checks before step 1).
  // stage k's plan of micro_steps micro-batches per step (0: the stage's own count; it matters
  // under --pp only)
  std::unique_ptr<PlannedAllocator> stage_plan(int k, bool announce, int64_t micro_steps = 0);
  int64_t planned_micro_steps_ = 0;

  TrainOptions o_;
  Runtime& runtime_;
  Backend& backend_;
  Communicator& job_;
  std::optional<ResumePoint> resume_;
  int64_t start_step_ = 0;
  std::optional<StepSchedule> plan_;
  std::vector<SeqStage> stages_;
  std::vector<PositionOverrides> stage_positions_;  // --stage-rope, one per stage
  int stage_ = 0;
  void set_stage_positions(int k);  // stages 0 .. k's --stage-rope on the model, in order
  ModelConfig config_;
  std::optional<RunData> data_;
  std::optional<WindowSampler> sampler_;
  std::unique_ptr<Communicator> tp_group_, cp_group_, dp_group_, pp_group_, embedding_group_;
  void set_pipeline_part();  // --pp: the model becomes this rank's chunks
  // --pp with offload or memo: the stages' host memory within --host-memory (counts: each chunk's
  // layers)
  void check_pipeline_host(const std::vector<int>& counts);
  int64_t host_layer_bytes(int64_t micro_batch, int64_t local_seq) const;
  void check_host_memory() const;
  void check_tokenizers() const;
  int pp_in_flight_ = 1;  // --pp: the most passes this rank holds in flight
  std::optional<Model> model_;
  std::vector<ZeroShard> shards_;
  size_t mine_ = 0;  // this rank's shard
  std::optional<ParamLayout> shard_layout_;
  std::optional<CachingAllocator> caching_;
  std::unique_ptr<PlannedAllocator> planned_;
  std::unique_ptr<Optimizer> optimizer_;
  std::optional<GradNoiseProbe> probe_;
  // under --pp with offload or memo: the host pool of the stage's micro-batches in flight
  // (Note [Pipeline host memory]); destroyed after the step's strategies
  std::optional<MemorySpace> pipeline_host_;
  std::unique_ptr<ActivationStrategy> strategy_;
  std::optional<KeepStrategy> eval_strategy_;
  std::optional<TrainStep> step_;
};

}  // namespace memo
