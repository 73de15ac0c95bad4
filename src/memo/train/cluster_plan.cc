#include "memo/train/cluster_plan.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <limits>

#include "memo/core/error.h"
#include "memo/memory/activation_plan.h"
#include "memo/memory/alpha.h"
#include "memo/memory/budget.h"
#include "memo/memory/strategy_factory.h"
#include "memo/model/architecture.h"
#include "memo/model/flops.h"
#include "memo/model/params.h"
#include "memo/parallel/pipeline.h"
#include "memo/train/device_plan.h"

namespace memo {

// Note [Cluster cost model]
// One step = one micro-batch of `batch` sequences of S tokens on each of the G / (t c)
// data-parallel ranks; every GPU holds T = batch S / (t c) tokens of it (Note [Per-GPU shapes]).
// Precision is Megatron-LM's bf16 mixed precision: activations bf16 except the per-token
// statistics, the loss path and attention scratch (Backend::activation_dtype), bf16 weights, fp32
// gradient accumulators, fp32 master weights and Adam moments (2 + 4 + 12 bytes per parameter), the
// last sharded over the G / t data-parallel ranks at ZeRO 1 (and the gradients at 2, the weights at
// 3). Matrix parameters are split t ways, vectors (norms, biases) replicated. FLOPs per token:
// those of Note [Model FLOPs] in model/flops.h (the forward's products and causal attention, the
// head), with the backward at twice the products and 2.5 times the attention (FlashAttention-2's
// backward runs five tile products to the forward's two). Time = FLOPs / (t c) / (peak x
// efficiency). MFU counts the model's FLOPs (that note's train_causal and train_noncausal, never
// the recomputation) over step time x G x peak. Communication: TP+SP runs
// two all-gathers and two reduce-scatters of [T c, C] bf16 per layer forward and six in the
// backward (the weight gradients gather again), each moving (t - 1) / t of it over one direction of
// NVLink (the network where the group spans nodes), not overlapped (Megatron's default). CP passes
// K and V round the ring ((c - 1) chunks, twice that in the backward with dK, dV) overlapped with
// attention, over the network when t c exceeds a node; only what exceeds the attention's time
// counts. Offload (and memo's) copies overlap as scheduled by swap_strategy.cc: layer l's offload
// under layer l+1's forward, layer l's prefetch under layer l+1's backward; a layer takes the
// longer of its compute and its copy. Not modelled: the optimiser step, data-parallel gradient
// all-reduce, kernel launch gaps; the efficiency is stated, not measured
// (default 0.6: FlashAttention-2 reports 50-73% of A100 peak for its kernels and ~72% model FLOPs
// utilisation training GPT models, Dao 2023).

// Note [Pipeline cost model]
// With --pp p the GPUs split into p stages of G / p (the outermost split, as memo train lays
// them out), the layers cut into p v chunks by balance_layers as memo train cuts them (the head
// counted by its FLOPs), and a step runs m micro-batches per pipeline through 1F1B (v = 1) or
// interleaved 1F1B (Note [Pipeline schedules] in parallel/pipeline.h). Each stage is sized apart:
// - model state: its layers' parameters, the embedding on the first stage (and on the last when
//   tied), the final norm and head on the last; ZeRO shards over the G / (t p) ranks of a stage;
// - activations: the plan of a shape-only trace of the stage's whole step, as memo train plans
//   it before step 1 (trace_pipeline_stage_shapes_only: its part of the model, its actions for
//   the m micro-batches, each pass in flight with its own strategy, the hidden states' buffers
//   and the parked micro-batches), so the arena is the run's to the byte. Offload and memo park
//   the micro-batches in flight on the host (Note [Parked micro-batches] in
//   memory/swap_strategy.cc); their host side holds k x (the largest chunk's layers) per GPU (Note
//   [Pipeline host memory] in train/session.cc), which is the alpha cost model's offloaded layer
//   count. (Until 2026-12-06 this was one micro-batch's trace plus a formula for the others in
//   flight, 2-7% low under 1F1B and up to a third high under keep with interleaving;
//   bench/RESULTS.md.) A one-micro-batch trace of a model of the stage's layers (with the
//   embedding and the head) still gives the communication counts and the rounding buffers;
// - time: a stage's micro-batch is its layers' forward and backward as above (the head on the last
//   stage only, every layer's copies but the last chunk's top two); the step is m of the slowest
//   stage's, plus the bubble, (p - 1) / v of them, plus the first forward's and the last
//   backward's transfers through the p v - 1 chunk boundaries, each a [T, C] bf16 hidden state
//   over NVLink, or the network where a stage spans a node or more; the steady state's transfers
//   are taken as hidden under compute.
// The device figures are the fullest stage's.

namespace {

constexpr double kBf16 = 2.0;

// One pipeline stage (Note [Pipeline cost model]); without a pipeline, the whole model.
struct StageShape {
  int layers = 0;        // all its chunks'
  int chunk_layers = 0;  // its largest chunk's
  int in_flight = 1;     // (micro-batch, chunk) passes it holds at once
  bool first = true;     // the embedding
  bool last = true;      // the final norm, the head and the loss
  int copied = 0;        // offload, memo: layers copied out and back per micro-batch
  int offloaded = 0;     // offload, memo: layers on the host at once
};

std::vector<StageShape> stage_shapes(const ModelConfig& config, int64_t seq,
                                     const ClusterOptions& o) {
  const int L = int(config.num_hidden_layers);
  if (o.pp == 1) return {StageShape{L, L, 1, true, true, std::max(0, L - 2), std::max(0, L - 2)}};
  const PipelineShape shape{int(o.pp), int(o.virtual_stages)};
  const int G = shape.chunks();
  const std::vector<int> counts = pipeline_layer_counts(config, seq, shape, o.pp_layers);
  std::vector<StageShape> stages;
  for (int r = 0; r < shape.stages; ++r) {
    StageShape st;
    for (int v = 0; v < shape.virtual_stages; ++v) {
      const int n = counts[size_t(shape.chunk_of(r, v))];
      st.layers += n;
      st.chunk_layers = std::max(st.chunk_layers, n);
    }
    st.first = r == 0;
    st.last = r == shape.rank_of(G - 1);
    const ParkedLayers parked = parked_layers(shape, counts, int(o.micro_batches), r);
    st.in_flight = parked.in_flight;
    st.copied = std::max(0, st.layers - (st.last ? 2 : 0));
    st.offloaded = parked.total();
    stages.push_back(st);
  }
  return stages;
}

// Parameters one rank of a stage holds: matrices split t ways, vectors whole; its layers counted
// as the model's first st.layers (they are alike).
double rank_params(const ModelConfig& config, int64_t tp, const StageShape& st) {
  const ParamLayout layout(config);
  const bool tied = config.tie_word_embeddings;
  double n = 0.0;
  for (const ParamInfo& p : layout.params()) {
    bool held = false;
    switch (p.role) {
      case ParamRole::kEmbedding:
        held = st.first || (st.last && tied);
        break;
      case ParamRole::kPositions:
        held = st.first;
        break;
      case ParamRole::kLayer:
        held = p.layer < st.layers;
        break;
      case ParamRole::kNorm:
      case ParamRole::kNormBias:
      case ParamRole::kHead:
        held = st.last;
        break;
    }
    if (held) n += p.is_matrix() ? double(p.numel) / double(tp) : double(p.numel);
  }
  return n;
}

// Per-layer skeletal bytes of one rank at bf16, split as the alpha cost model needs them.
AlphaInputs alpha_sizes(const ModelConfig& config, int64_t batch, int64_t rank_seq) {
  AlphaInputs in;
  const SkeletalLayout layout = skeletal_layout(config, DType::kBF16);
  for (int i = 0; i < layout.num_fields(); ++i) {
    const SkeletalField& f = layout.fields[size_t(i)];
    const int64_t bytes = f.bytes(batch, rank_seq);
    if (f.per_token)
      in.other_bytes += bytes;
    else if (i == 0)
      in.input_bytes += bytes;  // x
    else
      in.attn_bytes += bytes;
  }
  in.num_layers = int(config.num_hidden_layers);
  return in;
}

bool swaps(const std::string& strategy) { return strategy == "offload" || strategy == "memo"; }

struct Sized {           // the memory side of a plan at one sequence length
  ClusterMemory device;  // the fullest stage's
  int64_t requests{};
  int64_t cp_bytes{};  // the trace's ring bytes
  int64_t tp_bytes{};  // the trace's TP collectives' bytes
  AlphaInputs alpha_in;
  AlphaChoice choice;
  double alpha{};  // memo: chosen; offload: 1
  std::string alpha_bound;
  int64_t host_need{};
  bool host_fits = true;
  std::string host_advice;
  std::vector<StageShape> stages;
  std::vector<int64_t> stage_totals;
  int fullest = 0;
};

int64_t gpus_on_node(const ClusterOptions& o) { return std::min(o.gpus, o.gpus_per_node); }

double host_bandwidth(const ClusterOptions& o) {
  return o.host_bandwidth_bytes_per_s > 0.0 ? o.host_bandwidth_bytes_per_s
                                            : o.gpu.host_link_bytes_per_s;
}

// Forward time of one layer on one GPU (compute and TP communication): the cost model's T_layer.
struct LayerTimes {
  double fwd_compute{}, bwd_compute{}, attn_fwd{}, rebuild{}, tp_fwd{}, tp_bwd{}, tp_rebuild{},
      cp_fwd{}, cp_bwd{};
};

LayerTimes layer_times(const ModelConfig& config, int64_t seq, const ClusterOptions& o) {
  const ModelFlops f = model_flops(config, seq);
  const double t = double(o.parallel.tp), c = double(o.parallel.cp);
  const double tokens = double(o.batch) * double(seq) / (t * c);  // per GPU
  const double rate = o.gpu.peak_bf16_flops * o.efficiency;
  LayerTimes lt;
  lt.attn_fwd = tokens * f.attn_causal / rate;
  lt.fwd_compute = tokens * f.layer_matmul / rate + lt.attn_fwd;
  lt.bwd_compute = 2.0 * tokens * f.layer_matmul / rate + 2.5 * lt.attn_fwd;
  lt.rebuild = tokens * f.layer_rebuild / rate;  // all of a layer's rows; scaled by (1 - alpha)
  // one direction of NVLink inside a node; the network where a group spans nodes
  const double nvlink =
      o.gpu.nvlink_bytes_per_s > 0.0 ? o.gpu.nvlink_bytes_per_s / 2.0 : o.gpu.host_link_bytes_per_s;
  const double node = double(o.gpus_per_node);
  const double tp_link = t > node ? std::min(nvlink, o.network_bytes_per_s) : nvlink;
  const double cp_link = t * c > node ? std::min(nvlink, o.network_bytes_per_s) : nvlink;
  if (t > 1.0) {
    const double one = (t - 1.0) / t * tokens * t * double(config.hidden_size) * kBf16 / tp_link;
    lt.tp_fwd = 4.0 * one;
    lt.tp_bwd = 6.0 * one;
    lt.tp_rebuild = 3.0 * one;  // gather before QKV, reduce-scatter after o_proj, gather before MLP
  }
  if (c > 1.0) {
    // K and V of the rank's tokens: c - 1 passes forward; backward c - 1 passes of K, V, dK and
    // dV and one of dK, dV home (Note [Context parallel layout])
    const double kv = 2.0 * tokens * double(config.kv_dim()) * kBf16;
    lt.cp_fwd = std::max(0.0, (c - 1.0) * kv / cp_link - lt.attn_fwd);
    lt.cp_bwd = std::max(0.0, (2.0 * (c - 1.0) + 1.0) * kv / cp_link - 2.5 * lt.attn_fwd);
  }
  return lt;
}

// One micro-batch's activations on a stage of `layers` layers, traced and planned.
struct StageTrace {
  int64_t arena{}, rounding{}, requests{}, cp_bytes{}, tp_bytes{};
};

StrategyFactory stage_strategy(const std::string& strategy, double alpha) {
  StrategyOptions so;
  so.kind = strategy;
  if (strategy == "memo") so.alpha = std::clamp(alpha, 0.0, 1.0);
  return make_strategy_factory(so);
}

StageTrace trace_stage(Backend& target, ModelConfig config, int layers, int64_t rank_seq,
                       const std::string& strategy, double alpha, const ClusterOptions& o) {
  config.num_hidden_layers = layers;
  CommCounters ring, tp;
  const Trace trace = trace_shapes_only(target, config, o.parallel, o.batch, rank_seq,
                                        stage_strategy(strategy, alpha), DType::kBF16, &ring, &tp);
  const ActivationPlan plan = plan_activations(trace);
  StageTrace st;
  st.requests = int64_t(trace.requests.size());
  st.cp_bytes = ring.bytes_sent;
  st.tp_bytes = tp.bytes_sent;
  if (swaps(strategy))
    for (const TracedRequest& r : trace.requests)
      if (r.kind == ActKind::kSaved) st.rounding += r.bytes;
  st.arena = plan.arena_bytes;
  return st;
}

Sized size_memory(Backend& target, const ModelConfig& config, int64_t seq,
                  const std::string& strategy, const ClusterOptions& o) {
  const int64_t t = o.parallel.tp, c = o.parallel.cp;
  const int64_t rank_seq = seq / (t * c);
  Sized s;
  s.stages = stage_shapes(config, seq, o);
  int offloaded = 0;  // the most layers a GPU holds on the host (L - 2 without a pipeline)
  for (const StageShape& st : s.stages) offloaded = std::max(offloaded, st.offloaded);
  // alpha first: the memo strategy's device requests do not depend on it, its host bytes do
  s.alpha_in = alpha_sizes(config, o.batch, rank_seq);
  s.alpha_in.num_layers = offloaded + 2;  // alpha.h counts L - 2 offloaded layers
  s.alpha_in.seq = seq;
  s.alpha_in.bandwidth_bytes_per_s = host_bandwidth(o);
  const LayerTimes lt = layer_times(config, seq, o);
  s.alpha_in.layer_forward_s = lt.fwd_compute + lt.tp_fwd + lt.cp_fwd;
  // a GPU's share of the node's budget; a budget under a byte per GPU is still a budget (0 would
  // read as none)
  s.alpha_in.host_memory_bytes =
      o.host_memory_bytes > 0 ? std::max<int64_t>(1, o.host_memory_bytes / gpus_on_node(o)) : 0;
  const double L2 = double(offloaded);
  const double fixed = double(s.alpha_in.input_bytes + s.alpha_in.attn_bytes);
  if (strategy == "memo") {
    if (o.host_memory_bytes <= 0) {
      s.host_fits = L2 == 0.0;
      s.host_advice =
          str("memo needs host memory: ", gib(L2 * fixed * double(gpus_on_node(o))),
              " per node at alpha = 0, ",
              gib(L2 * (fixed + double(s.alpha_in.other_bytes)) * double(gpus_on_node(o))),
              " at alpha = 1; give --host-memory");
    } else {
      s.choice = choose_alpha(s.alpha_in);
      s.alpha = o.alpha ? *o.alpha : s.choice.alpha;
      s.alpha_bound = o.alpha ? "given" : alpha_bound_name(s.choice.binding);
      s.host_fits = s.choice.host_fits && s.alpha <= s.choice.alpha_host + 1e-12;
      if (!s.choice.host_fits) {
        // Even alpha = 0 overflows: the numbers per node, and what would fit (the need is
        // proportional to the sequence).
        const double need = L2 * fixed * double(gpus_on_node(o));
        const int64_t unit = 1024 * t * c;
        const int64_t seq_fit =
            int64_t(double(seq) * double(o.host_memory_bytes) / need) / unit * unit;
        s.host_advice = str(
            "memo needs ", gib(need), " of host memory per node even at alpha = 0 (", L2,
            " offloaded layers x ", gpus_on_node(o), " GPUs x (layer input ",
            gib(double(s.alpha_in.input_bytes)), " + attention output ",
            gib(double(s.alpha_in.attn_bytes)), ")), there are ", gib(double(o.host_memory_bytes)),
            "; --host-memory ", budget_flag_value(int64_t(std::ceil(need))),
            seq_fit > 0 ? str(" or --seq ", seq_fit, " would fit") : str(" would fit"));
      } else if (o.alpha && !s.host_fits) {
        const double need =
            L2 * (fixed + *o.alpha * double(s.alpha_in.other_bytes)) * double(gpus_on_node(o));
        s.host_advice =
            str("--alpha ", *o.alpha, " needs ", gib(need), " of host memory per node, there are ",
                gib(double(o.host_memory_bytes)), "; --alpha ",
                std::floor(s.choice.alpha_host * 1000.0) / 1000.0, " fits");
      }
    }
    s.host_need =
        int64_t(L2 * (fixed + s.alpha * double(s.alpha_in.other_bytes))) * gpus_on_node(o);
  } else if (strategy == "offload") {
    s.alpha = 1.0;
    s.host_need = int64_t(L2 * (fixed + double(s.alpha_in.other_bytes))) * gpus_on_node(o);
    s.host_fits = s.host_need <= o.host_memory_bytes;
    if (!s.host_fits)
      s.host_advice = str("offload needs ", gib(double(s.host_need)), " of host memory per node (",
                          L2, " offloaded layers x ", gpus_on_node(o), " GPUs), there are ",
                          gib(double(o.host_memory_bytes)), "; --host-memory ",
                          budget_flag_value(s.host_need), " would fit");
  }
  // what a micro-batch in flight beyond the traced one holds per layer (keep, recompute): the
  // formula of plan_layouts' pipelines (exact_stages false)
  const SkeletalLayout skeletal = skeletal_layout(config, DType::kBF16);
  int64_t held_per_layer = 0;
  for (int i = 0; i < skeletal.num_fields(); ++i)
    if (strategy == "keep" || (strategy == "recompute" && i == 0))
      held_per_layer += skeletal.fields[size_t(i)].bytes(o.batch, rank_seq);
  // each stage: its model state and one micro-batch's traced arena (a trace per layer count);
  // with a pipeline, the arena of its whole step, traced (Note [Pipeline cost model])
  const double dp = double(o.gpus / (t * o.pp));
  const PipelineShape shape{int(o.pp), int(o.virtual_stages)};
  const std::vector<int> counts =
      o.pp > 1 ? pipeline_layer_counts(config, seq, shape, o.pp_layers) : std::vector<int>{};
  std::vector<std::pair<int, StageTrace>> traced;
  int64_t most = -1;
  for (size_t r = 0; r < s.stages.size(); ++r) {
    const StageShape& st = s.stages[r];
    auto it = std::find_if(traced.begin(), traced.end(),
                           [&](const auto& e) { return e.first == st.layers; });
    if (it == traced.end()) {
      traced.emplace_back(st.layers,
                          trace_stage(target, config, st.layers, rank_seq, strategy, s.alpha, o));
      it = traced.end() - 1;
    }
    const StageTrace& tr = it->second;
    ClusterMemory m;
    const double params = rank_params(config, t, st);
    m.weight_bytes = int64_t(std::ceil(params * 2.0 / (o.zero >= 3 ? dp : 1.0)));
    m.gradient_bytes = int64_t(std::ceil(params * 4.0 / (o.zero >= 2 ? dp : 1.0)));
    m.optimizer_bytes = int64_t(std::ceil(params * 12.0 / (o.zero >= 1 ? dp : 1.0)));
    m.workspace_bytes = o.workspace_bytes;
    m.rounding_bytes = tr.rounding;
    m.activation_bytes = tr.arena - tr.rounding;
    if (o.pp > 1 && !o.exact_stages)
      m.activation_bytes +=
          std::max(0, st.in_flight * st.chunk_layers - st.layers) * held_per_layer;
    if (o.pp > 1 && o.exact_stages) {
      const int64_t arena = plan_activations(trace_pipeline_stage_shapes_only(
                                                 target, config, o.parallel, shape, counts,
                                                 int(o.micro_batches), int(r), o.batch, rank_seq,
                                                 stage_strategy(strategy, s.alpha), DType::kBF16))
                                .arena_bytes;
      m.rounding_bytes = std::min(tr.rounding, arena);  // one micro-batch's, of the arena
      m.activation_bytes = arena - m.rounding_bytes;
    }
    s.stage_totals.push_back(m.total());
    if (m.total() > most) {
      most = m.total();
      s.device = m;
      s.fullest = int(r);
      s.requests = tr.requests;
      s.cp_bytes = tr.cp_bytes;
      s.tp_bytes = tr.tp_bytes;
    }
  }
  return s;
}

bool fits(const Sized& s, const ClusterOptions& o) {
  return s.host_fits && s.device.total() <= o.gpu.memory_bytes;
}

// One micro-batch through one stage (the whole model without a pipeline).
ClusterTime step_time(const ModelConfig& config, int64_t seq, const std::string& strategy,
                      double alpha, const AlphaInputs& sizes, const ClusterOptions& o,
                      const StageShape& st) {
  const LayerTimes lt = layer_times(config, seq, o);
  const ModelFlops f = model_flops(config, seq);
  const double t = double(o.parallel.tp), c = double(o.parallel.cp);
  const double tokens = double(o.batch) * double(seq) / (t * c);
  const double rate = o.gpu.peak_bf16_flops * o.efficiency;
  const double L = double(st.layers);
  const double head = st.last ? tokens * f.head / rate : 0.0;
  const double moved = swaps(strategy) ? double(sizes.input_bytes + sizes.attn_bytes) +
                                             alpha * double(sizes.other_bytes)
                                       : 0.0;
  const double copy = moved / host_bandwidth(o);  // one layer, each way
  const double swapped = swaps(strategy) ? double(st.copied) : 0.0;
  ClusterTime ct;
  ct.forward_s = L * lt.fwd_compute + head;
  ct.backward_s = L * lt.bwd_compute + 2.0 * head;
  ct.tp_comm_s = L * (lt.tp_fwd + lt.tp_bwd);
  ct.cp_comm_s = L * (lt.cp_fwd + lt.cp_bwd);
  if (strategy == "recompute") {
    ct.recompute_s = L * lt.fwd_compute;
    ct.tp_comm_s += L * lt.tp_fwd;
    ct.cp_comm_s += L * lt.cp_fwd;
  } else if (strategy == "memo") {
    ct.recompute_s = swapped * (1.0 - alpha) * lt.rebuild;
    ct.tp_comm_s += swapped * (1.0 - alpha) * lt.tp_rebuild;
  }
  if (swapped > 0.0) {
    const double fwd = lt.fwd_compute + lt.tp_fwd + lt.cp_fwd;
    const double bwd = lt.bwd_compute + lt.tp_bwd + lt.cp_bwd +
                       (strategy == "memo" ? (1.0 - alpha) * (lt.rebuild + lt.tp_rebuild) : 0.0);
    ct.copy_stall_s = swapped * (std::max(0.0, copy - fwd) + std::max(0.0, copy - bwd));
  }
  ct.step_s =
      ct.forward_s + ct.backward_s + ct.recompute_s + ct.tp_comm_s + ct.cp_comm_s + ct.copy_stall_s;
  return ct;
}

// The largest n in [1, cap] with ok(n) (0: none), for an ok that holds up to some n and not
// after: galloping from the guess g (up while ok holds, else down), then bisecting.
int64_t largest_fitting(const std::function<bool(int64_t)>& ok, int64_t g, int64_t cap) {
  g = std::clamp<int64_t>(g, 1, cap);
  int64_t lo = 0, hi = cap + 1;  // ok(lo) or lo == 0; !ok(hi) or hi == cap + 1
  if (ok(g)) {
    lo = g;
    for (int64_t d = 1; lo + d <= cap; d *= 2) {
      if (!ok(lo + d)) {
        hi = lo + d;
        break;
      }
      lo += d;
    }
  } else {
    hi = g;
    for (int64_t d = 1; hi - d >= 1; d *= 2) {
      if (ok(hi - d)) {
        lo = hi - d;
        break;
      }
      hi -= d;
    }
  }
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    (ok(mid) ? lo : hi) = mid;
  }
  return lo;
}

}  // namespace

void validate_cluster(const ModelConfig& config, int64_t seq, const ClusterOptions& o) {
  const int64_t t = o.parallel.tp, c = o.parallel.cp;
  o.gpu.validate();
  if (t < 1 || c < 1 || o.gpus < 1 || o.gpus_per_node < 1 || o.batch < 1)
    throw ConfigError(str("--tp ", t, ", --cp ", c, ", --gpus ", o.gpus, ", --gpus-per-node ",
                          o.gpus_per_node, " and --batch ", o.batch, " must be >= 1"));
  if (o.gpus % (t * c) != 0)
    throw ConfigError(str("--gpus ", o.gpus, " is not a multiple of --tp ", t, " x --cp ", c));
  validate_pipeline(o.pp, o.virtual_stages, o.micro_batches);
  if (o.pp == 1 && o.virtual_stages > 1)
    throw ConfigError("--virtual-stages splits a pipeline: give --pp 2 or more");
  if (o.gpus % (t * c * o.pp) != 0)
    throw ConfigError(
        str("--gpus ", o.gpus, " is not a multiple of --tp ", t, " x --cp ", c, " x --pp ", o.pp));
  if (o.pp * o.virtual_stages > config.num_hidden_layers)
    throw ConfigError(str("--pp ", o.pp, " x --virtual-stages ", o.virtual_stages, " = ",
                          o.pp * o.virtual_stages, " chunks, the model has ",
                          config.num_hidden_layers, " layers"));
  if (config.num_attention_heads % t != 0 || config.num_key_value_heads % t != 0 ||
      config.intermediate_size % t != 0)
    throw ConfigError(str("--tp ", t, " must divide the attention heads (",
                          config.num_attention_heads, "), the key/value heads (",
                          config.num_key_value_heads, ") and the MLP width (",
                          config.intermediate_size, ")"));
  const int64_t unit = c > 1 ? 2 * t * c : t;  // context parallelism: 2c chunks of S/t tokens
  if (seq < 1 || seq % unit != 0)
    throw ConfigError(str("--seq ", seq, " must be a positive multiple of ", unit,
                          c > 1 ? str(" = 2 x --tp x --cp (each GPU holds 2 of the 2 x cp chunks "
                                      "of each sequence's seq / tp tokens)")
                                : str(" = --tp (each GPU holds seq / tp tokens)")));
  if (!(o.efficiency > 0.0 && o.efficiency <= 1.0))
    throw ConfigError(str("--efficiency ", o.efficiency, " must be in (0, 1]"));
  if (o.zero < 0 || o.zero > 3) throw ConfigError(str("--zero ", o.zero, " must be 0, 1, 2 or 3"));
  if (o.alpha && !(*o.alpha >= 0.0 && *o.alpha <= 1.0))
    throw ConfigError(str("--alpha ", *o.alpha, " must be in [0, 1]"));
  if (o.host_memory_bytes < 0 || o.workspace_bytes < 0 || !(o.host_bandwidth_bytes_per_s >= 0.0) ||
      !std::isfinite(o.host_bandwidth_bytes_per_s))
    throw ConfigError(
        "--host-memory, --workspace and --host-bandwidth must be finite and not negative");
  if (!(o.network_bytes_per_s > 0.0))
    throw ConfigError(
        str("--network-bandwidth ", o.network_bytes_per_s / 1e9, " must be positive"));
}

ClusterPlan plan_cluster(Backend& target, const ModelConfig& config, int64_t seq,
                         const std::string& strategy, const ClusterOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  validate_cluster(config, seq, o);
  StrategyOptions named;
  named.kind = strategy;
  make_strategy_factory(named);  // names the strategies on a bad one
  const int64_t t = o.parallel.tp, c = o.parallel.cp;
  ClusterPlan p;
  p.strategy = strategy;
  p.seq = seq;
  p.rank_tokens = o.batch * seq / (t * c);
  const Sized s = size_memory(target, config, seq, strategy, o);
  p.device = s.device;
  p.plan_requests = s.requests;
  p.cp_bytes_per_micro_batch = s.cp_bytes;
  p.tp_bytes_per_micro_batch = s.tp_bytes;
  p.device_capacity_bytes = o.gpu.memory_bytes;
  p.device_fits = s.device.total() <= o.gpu.memory_bytes;
  p.host_need_bytes = s.host_need;
  p.host_capacity_bytes = o.host_memory_bytes;
  p.host_fits = s.host_fits;
  if (strategy == "memo") {
    p.alpha = s.alpha;
    p.alpha_bound = s.alpha_bound;
  }
  if (!p.device_fits)
    p.why_not = str("device: needs ", gib(double(s.device.total())), " per GPU, has ",
                    gib(double(o.gpu.memory_bytes)), " (short ",
                    gib(double(s.device.total() - o.gpu.memory_bytes)), ")");
  if (!p.host_fits) p.why_not += str(p.why_not.empty() ? "" : "; ", "host: ", s.host_advice);
  // the slowest stage's micro-batch, m of them, the bubble and the fill's transfers
  ClusterTime slowest;
  for (const StageShape& st : s.stages) {
    const ClusterTime ct = step_time(config, seq, strategy, s.alpha, s.alpha_in, o, st);
    if (ct.step_s > slowest.step_s) slowest = ct;
  }
  const double m = double(o.micro_batches);
  p.time = slowest;
  for (double* part : {&p.time.forward_s, &p.time.backward_s, &p.time.recompute_s,
                       &p.time.tp_comm_s, &p.time.cp_comm_s, &p.time.copy_stall_s})
    *part *= m;
  p.time.step_s = m * slowest.step_s;
  p.pp_stage = s.fullest;
  p.pp_in_flight = s.stages[size_t(s.fullest)].in_flight;
  p.pp_stage_layers = s.stages[size_t(s.fullest)].layers;
  p.pp_stage_totals = s.stage_totals;
  if (o.pp > 1) {
    const double v = double(o.virtual_stages);
    p.pp_bubble = pipeline_bubble({int(o.pp), int(o.virtual_stages)}, int(o.micro_batches));
    p.pp_bytes_per_micro_batch = p.rank_tokens * config.hidden_size * int64_t(kBf16);
    // neighbouring stages are G / p GPUs apart: on one node while that is below a node
    const double nvlink = o.gpu.nvlink_bytes_per_s > 0.0 ? o.gpu.nvlink_bytes_per_s / 2.0
                                                         : o.gpu.host_link_bytes_per_s;
    const double link =
        o.gpus / o.pp >= o.gpus_per_node ? std::min(nvlink, o.network_bytes_per_s) : nvlink;
    p.time.bubble_s = (double(o.pp) - 1.0) / v * slowest.step_s;
    p.time.pp_comm_s = 2.0 * (double(o.pp) * v - 1.0) * double(p.pp_bytes_per_micro_batch) / link;
    p.time.step_s += p.time.bubble_s + p.time.pp_comm_s;
  }
  const ModelFlops f = model_flops(config, seq);
  p.model_flops_per_token_causal = f.train_causal();
  p.model_flops_per_token_noncausal = f.train_noncausal();
  const double tokens = double(o.gpus / (t * c * o.pp)) * m * double(o.batch) * double(seq);
  p.tokens_per_s = tokens / p.time.step_s;
  const double peak = double(o.gpus) * o.gpu.peak_bf16_flops * p.time.step_s;
  p.mfu_causal = tokens * p.model_flops_per_token_causal / peak;
  p.mfu_noncausal = tokens * p.model_flops_per_token_noncausal / peak;
  if (o.search_max_seq) {
    // The need grows with seq: search over multiples of the step with real shape-only plans. A
    // pipeline's exact stage plans cost seconds each for a large model, so the search runs on
    // the cost model's (within a few percent) and then on the exact ones from its answer.
    const int64_t step = 1024 * t * c, cap = int64_t(1) << 16;  // to 64Mi tokens x t c
    ClusterOptions estimated = o;
    estimated.exact_stages = false;
    auto ok_with = [&](const ClusterOptions& with) {
      return
          [&](int64_t n) { return fits(size_memory(target, config, n * step, strategy, with), o); };
    };
    p.max_seq_step = step;
    int64_t n = largest_fitting(ok_with(estimated), 1, cap);
    if (o.pp > 1 && o.exact_stages) n = largest_fitting(ok_with(o), std::max<int64_t>(n, 1), cap);
    if (n > 0) {
      p.max_seq = n * step;
    } else {
      // under one step: the lengths the layout takes (2 c chunks under context parallelism, t
      // parts under sequence parallelism), so a run that fits at a short length says so
      const int64_t fine = c > 1 ? 2 * t * c : t;
      auto ok_fine = [&](const ClusterOptions& with) {
        return [&](int64_t k) {
          return fits(size_memory(target, config, k * fine, strategy, with), o);
        };
      };
      const int64_t below = step / fine - 1;
      int64_t k = largest_fitting(ok_fine(estimated), 1, below);
      if (o.pp > 1 && o.exact_stages)
        k = largest_fitting(ok_fine(o), std::max<int64_t>(k, 1), below);
      if (k > 0) p.max_seq = k * fine, p.max_seq_step = fine;
    }
  }
  p.planning_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return p;
}

std::vector<LayoutPlan> plan_layouts(Backend& target, const ModelConfig& config, int64_t seq,
                                     const std::vector<std::string>& strategies,
                                     const ClusterOptions& options, int* refused) {
  MEMO_CHECK(!strategies.empty(), "plan_layouts: no strategy");
  const int64_t G = options.gpus;
  std::vector<LayoutPlan> out;
  int skipped = 0;
  for (int64_t t = 1; t <= std::min(G, options.gpus_per_node); ++t) {
    if (options.gpus_per_node % t != 0 || G % t != 0) continue;
    for (int64_t c = 1; t * c <= G; ++c) {
      if (G % (t * c) != 0) continue;
      for (int64_t p = 1; t * c * p <= G; ++p) {
        if (G % (t * c * p) != 0) continue;
        for (int64_t v = 1; v <= (p > 1 ? 2 : 1); ++v) {
          ClusterOptions o = options;
          o.parallel = Parallel{t, c};
          o.pp = p;
          o.virtual_stages = v;
          o.micro_batches = p > 1 ? 4 * p : 1;
          o.search_max_seq = false;
          o.exact_stages = false;
          try {
            validate_cluster(config, seq, o);
          } catch (const ConfigError&) {
            ++skipped;
            continue;
          }
          LayoutPlan l{t, c, p, G / (t * c * p), v, {}, -1};
          for (const std::string& s : strategies) {
            l.plans.push_back(plan_cluster(target, config, seq, s, o));
            const ClusterPlan& last = l.plans.back();
            if (last.fits() &&
                (l.best < 0 || last.tokens_per_s > l.plans[size_t(l.best)].tokens_per_s))
              l.best = int(l.plans.size()) - 1;
          }
          out.push_back(std::move(l));
        }
      }
    }
  }
  // fastest fitting first; then what does not fit, by its smallest device shortfall
  auto shortfall = [](const LayoutPlan& l) {
    int64_t least = std::numeric_limits<int64_t>::max();
    for (const ClusterPlan& p : l.plans)
      least = std::min(least, std::max<int64_t>(0, p.device.total() - p.device_capacity_bytes));
    return least;
  };
  std::stable_sort(out.begin(), out.end(), [&](const LayoutPlan& a, const LayoutPlan& b) {
    if ((a.best >= 0) != (b.best >= 0)) return a.best >= 0;
    if (a.best >= 0) {  // equally fast: the one with more device memory to spare first
      const ClusterPlan &x = a.plans[size_t(a.best)], &y = b.plans[size_t(b.best)];
      if (x.tokens_per_s != y.tokens_per_s) return x.tokens_per_s > y.tokens_per_s;
      return x.device.total() < y.device.total();
    }
    return shortfall(a) < shortfall(b);
  });
  if (refused) *refused = skipped;
  return out;
}

std::string cluster_formulas() {
  return "MFU = tokens per step x model FLOPs per token / (step seconds x GPUs x peak FLOP/s)\n"
         "model FLOPs per token = 3 x (L x (2 P_layer + A) + 2 C V), P_layer = matrix parameters "
         "of one layer\n"
         "  causal (memo's MFU):  A = 2 H D (S + 1)  (each query meets (S + 1) / 2 keys)\n"
         "  non-causal:           A = 4 H D S       (the whole S x S, as Korthikanti et al. 2022 "
         "count it)\n"
         "recomputation is never counted as model FLOPs\n";
}

}  // namespace memo
