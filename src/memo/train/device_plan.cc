#include "memo/train/device_plan.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <new>
#include <numeric>
#include <optional>
#include <ostream>
#include <vector>

#include "memo/backend/bf16_storage.h"
#include "memo/core/units.h"
#include "memo/memory/memo.h"
#include "memo/meta/meta_backend.h"
#include "memo/model/flops.h"
#include "memo/parallel/shape_communicator.h"
#include "memo/train/pipeline_stage.h"

namespace memo {

StrategyFactory make_strategy_factory(const StrategyOptions& options) {
  if (std::find(std::begin(kStrategyNames), std::end(kStrategyNames), options.kind) ==
      std::end(kStrategyNames))
    throw ConfigError(str("--activations '", options.kind,
                          "' is not a strategy; available: keep, recompute, offload, memo"));
  return [options](const SkeletalLayout& layout, ActivationAllocator& alloc) {
    return make_strategy(layout, alloc, options);
  };
}

std::string DevicePlan::over_budget_message() const {
  return memo::over_budget_message(need, budget_bytes, batch, seq, advice);
}

int64_t host_micro_batch_bytes(const StrategyOptions& strategy, const SkeletalLayout& skeletal,
                               int64_t granularity, int64_t micro_batch, int64_t seq, int64_t cp,
                               int64_t tp) {
  const int64_t layers = std::max(0, skeletal.num_layers - 2);
  return layers *
         strategy_host_layer_bytes(strategy, skeletal, micro_batch, seq / cp, granularity, tp);
}

std::string host_over_budget(const StrategyOptions& a, const SkeletalLayout& skeletal,
                             int64_t granularity, int64_t micro_batch, int64_t seq, int64_t cp,
                             int64_t tp, const std::string& stage) {
  auto need = [&](int64_t s) {
    return host_micro_batch_bytes(a, skeletal, granularity, micro_batch, s, cp, tp);
  };
  const int64_t bytes = need(seq);
  if (a.host_memory_bytes <= 0 || bytes <= a.host_memory_bytes) return "";
  const int64_t layers = std::max(1, skeletal.num_layers - 2);
  const int64_t rows = skeletal.token_rows(micro_batch, seq / cp);
  const bool all_rows = a.kind == "memo" && memo_moves_all_rows(rows, granularity, tp);
  const bool cost_model = a.kind == "memo" && !a.alpha && !all_rows;
  // lengths the layout takes: context parallelism cuts 2 cp chunks, sequence parallelism tp parts;
  // memo under --tp, whole panels a rank (else all rows travel: memo_moves_all_rows)
  int64_t unit = cp > 1 ? 2 * cp * tp : tp;
  if (a.kind == "memo" && tp > 1 && granularity > 0) unit = std::lcm(unit, cp * tp * granularity);
  int64_t lo = 0, hi = seq / unit;  // lo * unit fits (0: none does)
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo + 1) / 2;
    if (need(mid * unit) <= a.host_memory_bytes) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return str(
      stage, "--activations ", a.kind, ": each micro-batch sends ", layers, " layers x ",
      format_bytes(bytes / layers), " = ", format_bytes(bytes), " (", bytes, " bytes) to the host",
      cost_model ? " at alpha 0, the least memo offloads" : "",
      all_rows ? str(" (all its ", rows, " token rows a rank: under --tp they must be whole ",
                     granularity, "-row panels to be rebuilt)")
               : std::string(),
      ", over --host-memory ", format_bytes(a.host_memory_bytes), " by ",
      format_bytes(bytes - a.host_memory_bytes), "; give --host-memory ", bytes, " or more",
      lo == 0         ? std::string()
      : stage.empty() ? str(", or --seq ", lo * unit, " (the longest that fits)")
                      : str(", or a seq of ", lo * unit, " in this stage (the longest that fits)"),
      a.kind == "memo" && !cost_model && !all_rows ? ", or a lower --alpha" : "");
}

namespace {

// n zero token ids, shared by the traces of this thread and grown as needed. A longest-sequence
// search traces dozens of lengths of up to tens of millions of tokens, and each fresh page
// costs a fault on its first read; large calloc'd pages that are only read (a trace's ids are
// const) are the kernel's zero page, and hold no memory.
const int32_t* zero_token_ids(int64_t n) {
  struct Zeros {
    int32_t* ids = nullptr;
    int64_t n = 0;
    ~Zeros() { std::free(ids); }
  };
  thread_local Zeros zeros;
  if (zeros.n < n) {
    std::free(zeros.ids);
    zeros.n = 0;
    zeros.ids = static_cast<int32_t*>(std::calloc(size_t(n), sizeof(int32_t)));
    if (zeros.ids == nullptr) throw std::bad_alloc();
    zeros.n = n;
  }
  return zeros.ids;
}

}  // namespace

Trace trace_model_step(Model& model, int64_t batch, int64_t seq,
                       const StrategyFactory& make_strategy) {
  const int32_t* tokens = zero_token_ids(batch * seq);
  Backend& backend = model.backend();
  Trace trace =
      record_step(backend.allocator(backend.device_space()), model.skeletal(), batch, seq,
                  make_strategy, [&](ActivationStrategy& strategy, ActivationAllocator& alloc) {
                    model.forward_backward(tokens, tokens, batch, seq, 1.0f, strategy, alloc);
                  });
  model.zero_grads();
  return trace;
}

std::vector<int> pipeline_layer_counts(const ModelConfig& config, int64_t seq, PipelineShape shape,
                                       const std::string& pp_layers) {
  const int L = int(config.num_hidden_layers), G = shape.chunks();
  if (!pp_layers.empty()) return parse_pipeline_layers(pp_layers, L, G);
  const ModelFlops f = model_flops(config, seq);
  return balance_layers(L, G, f.head / (f.layer_matmul + f.attn_causal));
}

PipelinePart pipeline_part(PipelineShape shape, const std::vector<int>& counts, int rank) {
  const std::vector<int> first = chunk_first_layers(counts);
  PipelinePart part;
  for (int v = 0; v < shape.virtual_stages; ++v) {
    const int g = shape.chunk_of(rank, v);
    part.chunks.emplace_back(first[size_t(g)], first[size_t(g) + 1]);
  }
  part.first = rank == 0;
  part.last = rank == shape.rank_of(shape.chunks() - 1);
  return part;
}

Trace trace_pipeline_stage(Model& model, PipelineShape shape, int micro_batches, int rank,
                           int64_t batch, int64_t seq, const StrategyFactory& make_strategy) {
  Backend& backend = model.backend();
  TraceRecorder recorder(backend.allocator(backend.device_space()));
  {
    // the strategies the stage makes, each behind a tracing one that marks its layer passes
    std::vector<std::unique_ptr<ActivationStrategy>> inner;
    ShapeCommunicator group(shape.stages, rank);
    PipelineStage stage(model, group, shape, recorder,
                        [&]() -> std::unique_ptr<ActivationStrategy> {
                          inner.push_back(make_strategy(model.skeletal(), recorder));
                          return std::make_unique<TracingStrategy>(*inner.back(), recorder);
                        });
    stage.run(micro_batches, batch, seq, 1.0f, [&](int64_t, int32_t* inputs, int32_t* targets) {
      std::fill_n(inputs, batch * seq, 0);
      std::fill_n(targets, batch * seq, 0);
    });
  }  // the strategies release what they still hold before the trace is read
  model.zero_grads();
  return recorder.finish(batch, seq);
}

Trace trace_shapes_only(Backend& target, const ModelConfig& config, const Parallel& parallel,
                        int64_t batch, int64_t seq, const StrategyFactory& make_strategy,
                        DType activations, CommCounters* context_parallel_comm,
                        CommCounters* tensor_parallel_comm) {
  MetaBackend meta(target, activations);  // sized as target's kernels would run it
  Model model(config, meta);
  ShapeCommunicator tp_group(int(parallel.tp), 0);
  model.set_parallel(Parallel{parallel.tp, 1}, &tp_group);
  // context parallelism runs for real on rank 0 of a group that moves nothing
  ShapeCommunicator group(int(parallel.cp), 0);
  model.set_context_parallel(&group);
  // the model takes the whole micro-batch; each group keeps its rank's part of the tokens
  Trace trace = trace_model_step(model, batch, seq * parallel.cp * parallel.tp, make_strategy);
  if (context_parallel_comm) *context_parallel_comm = group.counters();
  if (tensor_parallel_comm) *tensor_parallel_comm = tp_group.counters();
  return trace;
}

Trace trace_pipeline_stage_shapes_only(Backend& target, const ModelConfig& config,
                                       const Parallel& parallel, PipelineShape shape,
                                       const std::vector<int>& counts, int micro_batches, int rank,
                                       int64_t batch, int64_t seq,
                                       const StrategyFactory& make_strategy, DType activations) {
  MetaBackend meta(target, activations);
  Model model(config, meta);
  ShapeCommunicator tp_group(int(parallel.tp), 0);
  model.set_parallel(Parallel{parallel.tp, 1}, &tp_group);
  ShapeCommunicator cp_group(int(parallel.cp), 0);
  model.set_context_parallel(&cp_group);
  model.set_pipeline(pipeline_part(shape, counts, rank));
  return trace_pipeline_stage(model, shape, micro_batches, rank, batch,
                              seq * parallel.cp * parallel.tp, make_strategy);
}

namespace {

// Note [Planning on a shadow]
// A run's plan traces one micro-batch of a shadow of its model (a pipeline rank's: its part, and
// the rank's whole step) with the same config and tensor- and context-parallel layout
// (ShapeCommunicators of the groups' sizes and this rank), on a
// MetaBackend sized as the run's backend (attention scratch, reproducible rows, the
// matrix-product workspace), under bf16 storage when the run has it. Its requests are the run's
// (the planned allocator checks every one at run time, and the tests run every strategy in a
// planned arena), and it needs neither memory nor arithmetic: a run whose activations do not fit
// is refused before any is allocated, where tracing a real micro-batch would itself need the
// unplanned peak (host memory on the CPU, a cudaMalloc failure on a GPU), and the start spends no
// micro-batch on the trace. bf16 storage's widened copies grow on the shadow's address ranges to
// the sizes the run's will grow to (DeviceNeed::conversion_scratch_bytes).
class Shadow {
 public:
  explicit Shadow(const Model& model)
      : bf16_(dynamic_cast<const Bf16StorageBackend*>(&model.backend())),
        meta_(bf16_ ? bf16_->inner() : model.backend(), DType::kF32),
        tp_(group_size(model.tensor_parallel_group()), group_rank(model.tensor_parallel_group())),
        cp_(group_size(model.context_parallel_group()),
            group_rank(model.context_parallel_group())) {
    if (bf16_) storage_.emplace(meta_);
    model_.emplace(model.config(), storage_ ? static_cast<Backend&>(*storage_) : meta_);
    model_->set_parallel(model.parallel(), model.tensor_parallel_group() ? &tp_ : nullptr);
    model_->set_context_parallel(model.context_parallel_group() ? &cp_ : nullptr);
    if (model.pipeline()) model_->set_pipeline(*model.pipeline());
  }
  Model& model() { return *model_; }

 private:
  static int group_size(const Communicator* c) { return c ? c->size() : 1; }
  static int group_rank(const Communicator* c) { return c ? c->rank() : 0; }
  const Bf16StorageBackend* bf16_;
  MetaBackend meta_;
  std::optional<Bf16StorageBackend> storage_;
  ShapeCommunicator tp_, cp_;
  std::optional<Model> model_;
};

}  // namespace

DevicePlan plan_device_memory(Model& run_model, int64_t batch, int64_t seq, int64_t budget_bytes,
                              const DevicePlanOptions& options) {
  const StrategyFactory make_strategy = make_strategy_factory(options.strategy);
  DevicePlan out;
  out.batch = batch;
  out.seq = seq;
  out.budget_bytes = budget_bytes;
  // a model with values plans on its shadow; a meta model (a plan's own) traces itself
  std::optional<Shadow> shadow;
  if (run_model.has_values()) shadow.emplace(run_model);
  Model& model = shadow ? shadow->model() : run_model;
  auto trace = [&](int64_t traced_seq) {
    if (const auto& pp = options.pipeline)
      return trace_pipeline_stage(model, pp->shape, pp->micro_batches, pp->rank, batch, traced_seq,
                                  make_strategy);
    return trace_model_step(model, batch, traced_seq, make_strategy);
  };
  out.activations = plan_activations(trace(seq), options.plan);
  out.need = device_need(run_model.layout().total_numel(), options.optimizer.name,
                         optimizer_state_bytes(options.optimizer.name,
                                               options.optimizer_layout ? *options.optimizer_layout
                                                                        : run_model.layout(),
                                               options.optimizer.options),
                         out.activations.arena_bytes, run_model.working_weights_bytes());
  // bf16 storage's widened copies, grown by the trace on the traced model's address ranges
  auto* const bf16 = dynamic_cast<Bf16StorageBackend*>(&model.backend());
  if (bf16) out.need.conversion_scratch_bytes = bf16->scratch_bytes();
  if (!out.fits()) {
    out.advice.smallest_budget_bytes = out.need.total_bytes();
    // under context parallelism a traced sequence must split into 2C chunks, and under tensor
    // parallelism each rank's tokens into t parts (a multiple of 2C t splits both ways)
    const Communicator* cp = model.context_parallel_group();
    const int64_t t = model.tensor_parallel() ? int64_t(model.tensor_parallel_group()->size()) : 1;
    const int64_t unit = (cp ? 2 * int64_t(cp->size()) : 1) * t;
    const int64_t short_seq = std::max<int64_t>(unit, seq / 4 / unit * unit);
    // the scratch grows with the sequence too: measured afresh at the short length (the blocks
    // only grow, so they are let go first; the plan's own backend, or the shadow's)
    int64_t other_scratch = out.need.conversion_scratch_bytes;
    Trace other = out.activations.trace;
    if (short_seq != seq) {
      if (bf16) bf16->release_scratch();
      other = trace(short_seq);
      if (bf16) other_scratch = bf16->scratch_bytes();
    }
    out.advice.longest_seq = longest_fitting_seq(
        out.activations.trace, other, out.need.fixed_bytes(), out.need.conversion_scratch_bytes,
        other_scratch, budget_bytes, seq - 1);
    if (out.advice.longest_seq) {  // a sequence the run can split
      const int64_t fit = *out.advice.longest_seq / unit * unit;
      out.advice.longest_seq = fit > 0 ? std::optional<int64_t>(fit) : std::nullopt;
    }
  }
  return out;
}

std::unique_ptr<PlannedAllocator> planned_allocator_within_budget(Model& model, int64_t batch,
                                                                  int64_t seq, int64_t budget_bytes,
                                                                  const DevicePlanOptions& options,
                                                                  std::ostream& progress) {
  DevicePlan dp = plan_device_memory(model, batch, seq, budget_bytes, options);
  if (!dp.fits()) throw OverBudgetError(dp.over_budget_message(), dp.advice);
  const ActivationPlan& a = dp.activations;
  char line[240];
  std::snprintf(line, sizeof line,
                "memo: device plan%s: needs %s of %s; activation arena %s, %.2f%% over its "
                "lower bound, %zu requests per %s\n",
                options.pipeline ? str(" of stage ", options.pipeline->rank).c_str() : "",
                gib(double(dp.need.total_bytes())).c_str(), gib(double(budget_bytes)).c_str(),
                gib(double(a.arena_bytes)).c_str(),
                plan::gap_percent(a.arena_bytes, a.lower_bound_bytes), a.trace.requests.size(),
                options.pipeline ? "step" : "micro-batch");
  progress << line;
  Backend& backend = model.backend();
  return std::make_unique<PlannedAllocator>(std::move(dp.activations),
                                            backend.allocator(backend.device_space()));
}

}  // namespace memo
