// Step 1 of DESIGN.md section 5 for a model: trace one real training step, plan its activations
// (memory/activation_plan.h), add the model state (memory/budget.h) and compare with the device
// budget, all before training starts. The trainer and `memo plan` both come here.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <memory>
#include <optional>
#include <string>

#include "memo/memory/activation_plan.h"
#include "memo/memory/budget.h"
#include "memo/memory/planned_allocator.h"
#include "memo/memory/strategy_factory.h"
#include "memo/memory/trace.h"
#include "memo/model/model.h"
#include "memo/parallel/communicator.h"
#include "memo/parallel/pipeline.h"
#include "memo/train/optimizer_setup.h"

namespace memo {

struct DevicePlanOptions {
  ActivationPlanOptions plan;
  StrategyOptions strategy;   // CLI: --activations and its flags; see make_strategy_factory
  OptimizerChoice optimizer;  // whose state the budget counts (optimizer_state_bytes)
  // The tensors whose optimiser state this process holds: its ZeRO-1 shard (train/zero.h); null:
  // the model's whole layout.
  const ParamLayout* optimizer_layout = nullptr;
  // Pipeline parallelism: the model is rank `rank`'s part (Model::set_pipeline), and the plan
  // covers the rank's whole step, `micro_batches` micro-batches through its actions
  // (trace_pipeline_stage); unset: one micro-batch of a whole model, repeated.
  struct PipelineStep {
    PipelineShape shape;
    int micro_batches = 1;
    int rank = 0;
  };
  std::optional<PipelineStep> pipeline;
};

// The activation strategies (keep, recompute, offload, memo) of `options`, through one factory.
// Throws ConfigError naming the ones available.
StrategyFactory make_strategy_factory(const StrategyOptions& options);

struct DevicePlan {
  ActivationPlan activations;
  DeviceNeed need;
  int64_t budget_bytes{};  // 0: no budget
  int64_t batch{}, seq{};
  FitAdvice advice;  // filled only when it does not fit
  bool fits() const { return budget_bytes == 0 || need.total_bytes() <= budget_bytes; }
  std::string over_budget_message() const;  // memory/budget.h's refusal for this plan
};

// A plan over its budget: the refusal (DevicePlan::over_budget_message) and its advice, which a
// job whose ranks plan different needs (ZeRO-1 shards) combines into one for every rank.
class OverBudgetError : public BudgetError {
 public:
  OverBudgetError(const std::string& what, const FitAdvice& advice)
      : BudgetError(what), advice(advice) {}
  FitAdvice advice;
};

// Note [Host memory before step 1]: without a pipeline, offload and memo send each micro-batch's
// layers below the top two to the host (strategy_host_layer_bytes each, of a context-parallel
// rank's share of the sequence): host_micro_batch_bytes. The refusal of a micro-batch of this shape
// whose layers need more than `strategy.host_memory_bytes`, saying by how much and what would fit:
// the --host-memory it needs and the longest seq (a multiple of 2 x cp x tp under context
// parallelism, else of tp) within the budget;
// empty when it fits or the strategy sends nothing. `stage` prefixes it and names the seq a stage's
// (--seq-schedule).
int64_t host_micro_batch_bytes(const StrategyOptions& strategy, const SkeletalLayout& skeletal,
                               int64_t granularity, int64_t micro_batch, int64_t seq, int64_t cp,
                               int64_t tp);
std::string host_over_budget(const StrategyOptions& strategy, const SkeletalLayout& skeletal,
                             int64_t granularity, int64_t micro_batch, int64_t seq, int64_t cp,
                             int64_t tp, const std::string& stage = "");

// One forward and backward of `batch` x `seq` tokens of `model` under the trace recorder (token
// id 0: the sequence of requests does not depend on values; the model's gradients are left
// zeroed), with the strategy `strategy_name` makes.
Trace trace_model_step(Model& model, int64_t batch, int64_t seq,
                       const StrategyFactory& make_strategy);

// memo train's layer split under pipeline parallelism (Note [Pipeline chunks]): the counts of
// `pp_layers` (--pp-layers) when given, else balance_layers with the head counted by its FLOPs at
// `seq` over a layer's; and rank `rank`'s part of it (Note [Pipeline parts]).
std::vector<int> pipeline_layer_counts(const ModelConfig& config, int64_t seq, PipelineShape shape,
                                       const std::string& pp_layers = "");
PipelinePart pipeline_part(PipelineShape shape, const std::vector<int>& counts, int rank);

// One step of pipeline rank `rank` (`model` is its part: Model::set_pipeline) under the trace
// recorder: its PipelineStage's actions for `micro_batches` micro-batches of batch x seq tokens
// (token id 0), over a ShapeCommunicator that moves nothing, each pass in flight with its own
// strategy from `make_strategy`. The requests are the run's: the hidden states' buffers, every
// pass's activations, parked and brought back (Note [Parked micro-batches]), in the schedule's
// order, which fixes when each buffer goes back (Note [Pipeline send completion]). A
// PlannedAllocator of its plan serves one whole step of the rank. The model's gradients are left
// zeroed.
Trace trace_pipeline_stage(Model& model, PipelineShape shape, int micro_batches, int rank,
                           int64_t batch, int64_t seq, const StrategyFactory& make_strategy);

// The same trace without data and arithmetic (Note [Meta backend]) of one rank of a run split
// `parallel` ways (Note [Per-GPU shapes]), on a parameter-less model built here: batch x seq are
// that rank's sequences and tokens per sequence (seq = the run's S / (t c); S must split). Equal to
// trace_model_step for t = c = 1 (tests/train/shape_only_test.cc); needs no memory for the
// activations or weights, so a 65B model at a million tokens traces on a laptop. `activations`:
// the dtype of the run planned (f32 on the CPU, bf16 for a GPU in mixed precision); statistics,
// the loss path and attention scratch are f32 in either (Backend::activation_dtype). Context
// parallelism (c > 1) runs the real ring (Note [Per-GPU shapes]) over a ShapeCommunicator, whose
// counters (what this rank would send in the traced forward and backward of one micro-batch: the
// ring and the loss) land in *context_parallel_comm when given; seq * c must then split into 2c
// chunks. Tensor parallelism (t > 1) runs the layers' collectives (Note [TP collectives]) over a
// ShapeCommunicator of t ranks, whose counters land in *tensor_parallel_comm.
Trace trace_shapes_only(Backend& target, const ModelConfig& config, const Parallel& parallel,
                        int64_t batch, int64_t seq, const StrategyFactory& make_strategy,
                        DType activations = DType::kF32,
                        CommCounters* context_parallel_comm = nullptr,
                        CommCounters* tensor_parallel_comm = nullptr);

// trace_pipeline_stage without data and arithmetic: pipeline rank `rank`'s part (of the layer
// counts `counts`, pipeline_layer_counts') of a parameter-less model on a MetaBackend sized as
// `target`, split `parallel` ways as trace_shapes_only splits it (batch x seq are the rank's).
// Equal to trace_pipeline_stage on the run's part for t = c = 1 (tests/train/shape_only_test.cc).
Trace trace_pipeline_stage_shapes_only(Backend& target, const ModelConfig& config,
                                       const Parallel& parallel, PipelineShape shape,
                                       const std::vector<int>& counts, int micro_batches, int rank,
                                       int64_t batch, int64_t seq,
                                       const StrategyFactory& make_strategy,
                                       DType activations = DType::kF32);

// Traces, plans and sizes the run. When it does not fit, also traces a shorter sequence (seq / 4)
// to fit the sizes' dependence on seq and searches for the longest sequence that fits. A model
// with values is traced on a shadow (Note [Planning on a shadow] in train/device_plan.cc): no
// activation memory, no arithmetic, and the model itself is left untouched.
DevicePlan plan_device_memory(Model& model, int64_t batch, int64_t seq, int64_t budget_bytes,
                              const DevicePlanOptions& options = {});

// For the trainer: plans the run of `batch` x `seq` tokens per micro-batch within budget_bytes
// and returns the arena to run it in, after one line on `progress`; throws BudgetError with
// DevicePlan::over_budget_message() when it does not fit.
std::unique_ptr<PlannedAllocator> planned_allocator_within_budget(Model& model, int64_t batch,
                                                                  int64_t seq, int64_t budget_bytes,
                                                                  const DevicePlanOptions& options,
                                                                  std::ostream& progress);

}  // namespace memo
