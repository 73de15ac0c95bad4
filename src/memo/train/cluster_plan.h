// Planning for hardware we do not have: one GPU's memory and a step's time for a model trained on
// G GPUs of a given kind, under each activation strategy, from memo's own code. The activation
// arena comes from a shape-only trace of one rank (train/device_plan.h, Note [Meta backend],
// Note [Per-GPU shapes]) planned by memory/plan; the model state, alpha, host memory, step time
// and MFU from the formulas in cluster_plan.cc (Note [Cluster cost model]). `memo plan --gpus`
// prints it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "memo/backend/backend.h"
#include "memo/model/config.h"
#include "memo/model/hardware.h"
#include "memo/model/parallel.h"

namespace memo {

struct ClusterOptions {
  GpuSpec gpu;
  int64_t gpus = 8;           // G
  int64_t gpus_per_node = 8;  // GPUs sharing one host's memory
  Parallel parallel;          // t (with sequence parallelism) and c
  // Pipeline parallelism (Note [Pipeline cost model]): p stages of v chunks each, the layers split
  // as memo train splits them, m micro-batches per step and pipeline.
  int64_t pp = 1, virtual_stages = 1, micro_batches = 1;
  std::string pp_layers;                    // memo train's --pp-layers (empty: balanced)
  int64_t batch = 1;                        // sequences per micro-batch per data-parallel rank
  int64_t host_memory_bytes = 0;            // per node; 0: no host memory for activations
  double host_bandwidth_bytes_per_s = 0.0;  // per GPU and direction; 0: gpu.host_link_bytes_per_s
  // Between nodes, per GPU and direction (stated: one 200 Gb/s InfiniBand adapter per GPU, as
  // A100/A800 HGX clusters are built); used by TP and CP groups that span nodes.
  double network_bytes_per_s = 25e9;
  double efficiency = 0.6;  // achieved fraction of peak FLOP/s in compute (stated)
  int zero = 1;             // ZeRO stage over the G / t data-parallel ranks: 0..3
  int64_t workspace_bytes = int64_t(1) << 30;  // CUDA context, cuBLAS and NCCL buffers (stated)
  std::optional<double> alpha;                 // memo: a fixed alpha instead of the cost model's
  bool search_max_seq = true;                  // also find the longest sequence that fits
  // A pipeline's stages sized by the plan of their whole step's trace (Note [Pipeline cost
  // model]), else by one micro-batch's and a formula for the others in flight (plan_layouts).
  bool exact_stages = true;
};

// Throws ConfigError naming the flag when the layout does not divide the model or the GPUs.
void validate_cluster(const ModelConfig& config, int64_t seq, const ClusterOptions& options);

// Per GPU, bytes.
struct ClusterMemory {
  int64_t weight_bytes{};      // bf16 parameters of this rank
  int64_t gradient_bytes{};    // fp32 gradient accumulators
  int64_t optimizer_bytes{};   // fp32 master weights and Adam's two moments
  int64_t activation_bytes{};  // the planned arena without the rounding buffers
  int64_t rounding_bytes{};    // offload, memo: two rounding buffers and three layer inputs
  int64_t workspace_bytes{};
  int64_t total() const {
    return weight_bytes + gradient_bytes + optimizer_bytes + activation_bytes + rounding_bytes +
           workspace_bytes;
  }
};

// Per GPU and step, seconds (Note [Cluster cost model]).
struct ClusterTime {
  double forward_s{};     // layers' and head's forward compute
  double backward_s{};    // their backward compute
  double recompute_s{};   // recompute: whole layer forwards; memo: the (1 - alpha) token rows
  double tp_comm_s{};     // TP all-gathers and reduce-scatters (not overlapped)
  double cp_comm_s{};     // CP ring transfers not hidden under attention
  double copy_stall_s{};  // offload and prefetch time not hidden under compute
  double bubble_s{};      // pipeline: the fill and drain, (p - 1) / v micro-batches of the slowest
  double pp_comm_s{};     // pipeline: the first forward's and last backward's stage transfers
  double step_s{};
};

struct ClusterPlan {
  std::string strategy;
  int64_t seq{};
  int64_t rank_tokens{};  // tokens one GPU holds: batch * seq / (t c)
  ClusterMemory device;   // under a pipeline: its fullest stage's
  // Pipeline: that stage, its micro-batches in flight and layers; every stage's device total; the
  // bubble fraction (p - 1) / (v m); a stage boundary's transfer of one micro-batch (the hidden
  // state forward, its gradient back: T C bf16 each).
  int pp_stage = 0, pp_in_flight = 1, pp_stage_layers = 0;
  std::vector<int64_t> pp_stage_totals;
  double pp_bubble = 0.0;
  int64_t pp_bytes_per_micro_batch = 0;
  int64_t device_capacity_bytes{};
  bool device_fits{};
  std::optional<double> alpha;  // memo only
  std::string alpha_bound;      // memo: "none", "bandwidth", "host memory", "given"
  int64_t host_need_bytes{};    // per node
  int64_t host_capacity_bytes{};
  bool host_fits{};
  bool fits() const { return device_fits && host_fits; }
  std::string why_not;  // when !fits(): the numbers
  ClusterTime time;
  double tokens_per_s{};   // the whole cluster
  double mfu_causal{};     // attention counted at the causal half (memo's convention)
  double mfu_noncausal{};  // attention counted whole (Korthikanti et al.)
  double model_flops_per_token_causal{};
  double model_flops_per_token_noncausal{};
  std::optional<int64_t> max_seq;  // the longest fitting seq (a multiple of the search step)
  int64_t max_seq_step{};
  int64_t plan_requests{};
  // What one GPU sends round the context-parallel ring (and its loss) in one micro-batch's
  // forward and backward under the strategy, counted by the shape-only trace's ShapeCommunicator:
  // the code a `--cp` run executes (0 without CP).
  int64_t cp_bytes_per_micro_batch{};
  // The same for the layers' tensor-parallel all-gathers and reduce-scatters (Note [TP
  // collectives] in model/parallel.h; 0 without TP).
  int64_t tp_bytes_per_micro_batch{};
  double planning_seconds{};
};

// Traces one rank in shape-only mode under `strategy`, plans its arena, sizes the rest and
// predicts a step. target: whose kernels' sizes (attention scratch, reproducible rows) the trace
// takes. Throws ConfigError on a layout validate_cluster rejects.
ClusterPlan plan_cluster(Backend& target, const ModelConfig& config, int64_t seq,
                         const std::string& strategy, const ClusterOptions& options);

// The formulas plan_cluster prints (MFU under both conventions), one line each.
std::string cluster_formulas();

// One layout of `memo plan --gpus G --layouts`: t x c x p GPUs per model replica, G / (t c p)
// replicas data parallel, each strategy's plan and the fastest of those that fit.
struct LayoutPlan {
  int64_t tp = 1, cp = 1, pp = 1, dp = 1;
  int64_t virtual_stages = 1;      // chunks per pipeline rank: 2 is interleaved 1F1B
  std::vector<ClusterPlan> plans;  // one per strategy, in the order given
  int best = -1;                   // the fitting plan with the most tokens/s; -1: none fits
};

// Note [Layout comparison]
// Every layout of options.gpus GPUs: each t dividing the GPUs of a node (tensor parallelism stays
// within one), each c and p with t c p dividing G, the rest data parallel. A pipeline runs 4 p
// micro-batches per step, planned twice: under 1F1B and under interleaved 1F1B with two chunks
// a rank (half the bubble, for twice the stage transfers and more micro-batches in flight on the
// first stages); options' virtual_stages and micro_batches are not used. Layouts
// validate_cluster refuses (t not dividing the heads, the sequence not splitting into the 2 c t
// chunks, more chunks than layers) are left out, counted in *refused. Each is planned under
// every strategy as plan_cluster plans it (without the longest-sequence search, and a pipeline's
// stages by the cost model's formula: exact traces of every stage's step would take minutes over
// the layouts of a large cluster; the chosen layout's own plan is exact); the list is
// ordered by the best fitting plan's tokens/s, fastest first (equally fast: the least device
// memory per GPU first), then the layouts where nothing fits by the least device memory short of
// fitting.
std::vector<LayoutPlan> plan_layouts(Backend& target, const ModelConfig& config, int64_t seq,
                                     const std::vector<std::string>& strategies,
                                     const ClusterOptions& options, int* refused = nullptr);

}  // namespace memo
