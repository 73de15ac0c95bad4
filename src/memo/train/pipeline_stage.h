// One pipeline rank's part of a step (Note [Pipeline step] in train/pipeline_step.cc): its
// actions of the schedule (parallel/pipeline.h), each chunk's forward and backward through the
// model's pipeline calls (Note [Pipeline parts] in model/model.h), and the hidden states and
// their gradients over the pipeline group. Every buffer it uses comes from the activation
// allocator in an order the schedule alone fixes (Note [Pipeline send completion]), so the
// trainer runs it and a static plan traces it (trace_pipeline_stage in train/device_plan.h): the
// same code, the same requests.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "memo/backend/allocator.h"
#include "memo/memory/strategy.h"
#include "memo/model/model.h"
#include "memo/parallel/communicator.h"
#include "memo/parallel/pipeline.h"

namespace memo {

class PipelineStage {
 public:
  // A new activation strategy: each (micro-batch, chunk) in flight has its own.
  using MakeStrategy = std::function<std::unique_ptr<ActivationStrategy>()>;
  // Fills micro-batch k's (of the rank's share) [batch * seq] inputs and targets.
  using Source = std::function<void(int64_t micro, int32_t* inputs, int32_t* targets)>;

  // `model` is this rank's part (Model::set_pipeline); `group` the pipeline's ranks in stage
  // order, of shape.stages ranks.
  PipelineStage(Model& model, Communicator& group, PipelineShape shape, ActivationAllocator& alloc,
                MakeStrategy make_strategy);

  // The rank's actions for micro_steps micro-batches of batch x seq tokens, gradients scaled by
  // grad_scale and accumulated into the model's; `finished(k, v)` once micro-batch k's gradient
  // on the rank's chunk v (its index among the rank's) is complete (after the model's last
  // chunk's forward, or a backward). Returns the sum of the token losses on the rank of the last
  // chunk, 0 elsewhere. Every buffer it took is back when it returns.
  double run(int micro_steps, int64_t batch, int64_t seq, float grad_scale, const Source& source,
             const std::function<void(int micro, int chunk)>& finished = {});

  // The last run's hidden states sent to the neighbours, in bytes (the stage transfers).
  int64_t sent_bytes() const { return sent_bytes_; }
  // The most bytes of hidden-state buffers (received, made and sent) live at once in the last run.
  int64_t hidden_peak_bytes() const { return hidden_peak_bytes_; }
  // The strategies made so far (as many as the rank has passes in flight at once), kept from step
  // to step.
  const std::vector<std::unique_ptr<ActivationStrategy>>& strategies() const { return strategies_; }

 private:
  Tensor take_hidden(int64_t rows, int64_t cols);
  void give_hidden(const Tensor& t);

  Model& model_;
  Communicator& group_;
  PipelineShape shape_;
  ActivationAllocator& alloc_;
  MakeStrategy make_strategy_;
  std::vector<std::unique_ptr<ActivationStrategy>> strategies_;
  std::vector<ActivationStrategy*> idle_strategies_;
  std::vector<int32_t> inputs_, targets_;
  int64_t sent_bytes_ = 0, hidden_bytes_ = 0, hidden_peak_bytes_ = 0;
};

}  // namespace memo
