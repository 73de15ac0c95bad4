// One optimiser step, the only one in memo: memo train, the short runs of memo sweep and memo
// bench all run it (DESIGN.md section 4, train). Micro-batches accumulate into the model's one
// gradient buffer as the mean over the step's counted tokens (Note [Counted tokens]); the
// gradient-reduction hook sums them over the data-parallel group (a SelfCommunicator: one process);
// then the global gradient norm and the noise-scale statistics (before clipping), clipping, and the
// optimiser update. The step is split in two (gradients, then update) because callers decide in
// between: the trainer stops on a non-finite loss, a sweep on divergence. The one evaluation loop
// is in train/evaluate.h.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "memo/backend/allocator.h"
#include "memo/data/sampler.h"
#include "memo/memory/strategy.h"
#include "memo/model/model.h"
#include "memo/optim/optimizer.h"
#include "memo/parallel/communicator.h"
#include "memo/parallel/pipeline.h"
#include "memo/train/grad_noise.h"
#include "memo/train/pipeline_stage.h"
#include "memo/train/zero.h"

namespace memo {

// A step of micro_steps micro-batches of micro_batch sequences of seq tokens.
struct StepShape {
  int64_t micro_batch = 1;
  int64_t seq = 1;
  int64_t micro_steps = 1;
  int64_t tokens() const { return micro_batch * seq * micro_steps; }
};

// Fills rows x seq input and target tokens for micro-batch `micro` of step `step` (the trainer's
// counter-based sampler; memo bench's fixed random tokens).
using BatchSource = std::function<void(int64_t step, int64_t micro, int32_t* inputs,
                                       int32_t* targets, int64_t rows)>;

// What the first half of a step measured.
struct StepGradients {
  double loss = 0.0;     // mean token loss of the step (over every rank's counted tokens)
  double grad_sq = 0.0;  // squared global gradient norm, before clipping
  double grad_norm() const;
};

class TrainStep {
 public:
  // Everything is borrowed and must outlive the step. probe: null for no noise scale.
  // data_parallel: the group whose gradients are summed (its size multiplies the tokens a step
  // averages over).
  TrainStep(Model& model, Optimizer& optimizer, ActivationStrategy& strategy,
            ActivationAllocator& alloc, const StepShape& shape, BatchSource source,
            GradNoiseProbe* probe, Communicator& data_parallel);

  // Zeroes the gradients, runs every micro-batch of `step`, reduces the gradients over the
  // data-parallel group, and measures the loss, the gradient norm and the noise-scale statistics.
  StepGradients gradients(int64_t step);
  // The same with micro_steps micro-batches of shape().micro_batch x seq tokens instead of
  // shape().micro_steps: a step of a growing batch (--batch-schedule noise). The micro-batch, and
  // so the activation memory, is the same; the probe, if any, is set to this count.
  StepGradients gradients(int64_t step, int64_t micro_steps);
  // Scales the gradients to norm `clip` when they exceed it (0: never), then the optimiser update
  // at learning rate lr: of every parameter, or under ZeRO-1 of this rank's shard, whose new
  // weights every rank then receives.
  void update(const StepGradients& g, double lr, double clip);
  // ZeRO-1: the optimiser was built for shards[rank]'s tensors (train/zero.h); null: every tensor.
  void set_zero_shards(const std::vector<ZeroShard>* shards) { shards_ = shards; }
  // The first micro-batch of `step`, run until the strategy stops wanting a warm-up
  // (ActivationStrategy::wants_warmup), at most twice, its gradients dropped: the profiling runs
  // of memo's cost model (Note [A warm profile] in memory/swap_strategy.cc).
  void warmup(int64_t step);

  const StepShape& shape() const { return shape_; }
  // The source's targets may hold kIgnoredTarget (backend/checks.h): each step then counts the
  // targets its loss averages over first (Note [Counted tokens]). A model with an eod loss mask
  // (Model::set_eod_loss_mask) counts them without this.
  void set_masked_targets(bool masked) { masked_targets_ = masked; }

  // Pipeline parallelism (Note [Pipeline step] in train/pipeline_step.cc): the model is this
  // rank's part (Model::set_pipeline), and each step runs the rank's chunks of its micro-batches
  // in the schedule's order, exchanging activations and gradients over `group`.
  struct Pipeline {
    PipelineShape shape;
    Communicator* group = nullptr;  // the pipeline's ranks, in stage order
    // Tied embeddings over more than one rank: the first and the last rank, whose two gradients
    // of the embedding are summed (Note [Pipeline parts] in model/model.h); else null.
    Communicator* embedding_group = nullptr;
    // A new activation strategy: each (micro-batch, chunk) in flight has its own.
    std::function<std::unique_ptr<ActivationStrategy>()> make_strategy;
  };
  // The noise probe may run with a pipeline (Note [Pipeline step]): without an embedding tied
  // across stages.
  void set_pipeline(Pipeline pipeline);
  const std::optional<Pipeline>& pipeline() const { return pipeline_; }
  // What this rank's last pipeline step sent to its neighbours: the hidden states and their
  // gradients (the stage transfers `memo plan --pp` predicts), collectives left out.
  int64_t pipeline_sent_bytes() const { return stage_ ? stage_->sent_bytes() : 0; }
  // The most bytes of [T, C] hidden states and gradients this rank's last pipeline step held at
  // once (received, made, and sent until the schedule says they arrived).
  int64_t pipeline_hidden_bytes() const { return stage_ ? stage_->hidden_peak_bytes() : 0; }
  // The pipeline's strategies made so far (one per pass in flight at once), for their logs.
  const std::vector<std::unique_ptr<ActivationStrategy>>& pipeline_strategies() const {
    static const std::vector<std::unique_ptr<ActivationStrategy>> none;
    return stage_ ? stage_->strategies() : none;
  }

 private:
  Model& model_;
  Optimizer& optimizer_;
  ActivationStrategy& strategy_;
  ActivationAllocator& alloc_;
  StepShape shape_;
  BatchSource source_;
  GradNoiseProbe* probe_;
  Communicator& data_parallel_;
  const std::vector<ZeroShard>* shards_ = nullptr;
  bool masked_targets_ = false;
  // The targets the loss counts of the step's micro-batches [first, first + micro_steps) on
  // every data-parallel rank (Note [Counted tokens]).
  int64_t counted_tokens(int64_t step, int64_t first, int64_t micro_steps);
  // counted_tokens' count of each of this rank's micro-batches, where a loss mask makes them
  // differ (empty without one); the noise probe's n_i (Note [Noise-scale accounting])
  std::vector<int64_t> micro_counts_;
  std::vector<int32_t> inputs_, targets_;  // [micro_batch * seq] host tokens
  std::optional<Pipeline> pipeline_;
  StepGradients pipeline_gradients(int64_t step, int64_t micro_steps);
  std::unique_ptr<PipelineStage> stage_;  // the rank's actions of each step
};

// One batch's forward through the pipeline (validation under --pp: Note [Pipeline step]): each
// rank runs its chunks of the batch in order, the hidden states passed on as in a step, on
// `strategy` (which discards each layer once the next has run). Returns the batch's loss sum on
// every rank of the pipeline group.
double pipeline_forward_loss(Model& model, const TrainStep::Pipeline& pipeline,
                             const int32_t* inputs, const int32_t* targets, int64_t rows,
                             int64_t seq, ActivationStrategy& strategy, ActivationAllocator& alloc);

}  // namespace memo
