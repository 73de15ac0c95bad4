// The cluster planner against numbers worked out by hand from the closed forms of
// the closed form of memory/alpha.h and Note [Cluster cost model]: alpha when host memory binds,
// when the copy bandwidth binds, and when even alpha = 0 does not fit; the model state per GPU;
// both MFU conventions; the longest sequence; layouts that do not divide.
#include "memo/train/cluster_plan.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "memo/cpu/cpu_backend.h"
#include "memo/io/hardware_json.h"
#include "memo/memory/activation_plan.h"
#include "memo/memory/strategy_factory.h"
#include "memo/model/params.h"
#include "memo/model/presets.h"
#include "memo/train/device_plan.h"
#include "test_util.h"

namespace memo {
namespace {

constexpr double kGiB = double(int64_t(1) << 30);

ClusterOptions a800s(int64_t tp, int64_t host_bytes) {
  ClusterOptions o;
  o.gpu = find_gpu("a800-80gb", test::source_dir() + "/hardware");
  o.gpus = 8;
  o.parallel = Parallel{tp, 1};
  o.host_memory_bytes = host_bytes;
  o.search_max_seq = false;
  return o;
}

// LLaMA-7B per layer and rank at T = S / t tokens, bf16 but for the fp32 statistics:
// input x and the attention output [T, 4096]; lse [32 heads, T] fp32; the others xn1, q, k, v, h,
// xn2 [T, 4096], gate, up, act [T, 11008], inv_rms1 and inv_rms2 [T] fp32.
struct Sizes {
  double in, attn, other;
};
Sizes llama7b_layer(double T) {
  return {T * 4096 * 2, T * 4096 * 2 + 32 * T * 4,
          6 * T * 4096 * 2 + 3 * T * 11008 * 2 + 2 * T * 4};
}

// Note [Layout comparison]: on 8 GPUs of one node every t x c x p dividing 8 is a layout (20 of
// them: t, c, p powers of two with t c p <= 8), the rest data parallel; each layout's plans are
// plan_cluster's for it, its best the fastest that fits, and the list fastest first. Without host
// memory neither offload nor memo fits anywhere.
TEST(ClusterPlan, layouts_cover_every_split_of_the_gpus_fastest_first) {
  const ModelConfig config = llama_preset("llama-7b");
  const int64_t seq = 32768;
  const std::vector<std::string> strategies = {"keep", "recompute", "offload", "memo"};
  for (const int64_t host : {int64_t(0), int64_t(1024 * kGiB)}) {
    ClusterOptions o = a800s(1, host);
    int refused = -1;
    const std::vector<LayoutPlan> layouts =
        plan_layouts(cpu_backend(), config, seq, strategies, o, &refused);
    EXPECT_EQ(refused, 0);
    // the 20 splits of 8, the 10 with a pipeline planned again interleaved
    ASSERT_EQ(layouts.size(), 30u);
    std::set<std::tuple<int64_t, int64_t, int64_t, int64_t>> seen;
    std::map<std::tuple<int64_t, int64_t, int64_t, int64_t>, double> bubble;
    double previous = std::numeric_limits<double>::infinity();
    bool fitting = true;
    for (const LayoutPlan& l : layouts) {
      EXPECT_EQ(l.tp * l.cp * l.pp * l.dp, 8);
      EXPECT_TRUE(seen.insert({l.tp, l.cp, l.pp, l.virtual_stages}).second);
      EXPECT_TRUE(l.virtual_stages == 1 || (l.pp > 1 && l.virtual_stages == 2));
      ASSERT_EQ(l.plans.size(), strategies.size());
      bubble[{l.tp, l.cp, l.pp, l.virtual_stages}] = l.plans.front().pp_bubble;
      double fastest = 0.0;
      for (const ClusterPlan& p : l.plans) {
        if (p.fits()) fastest = std::max(fastest, p.tokens_per_s);
        if (host == 0 && (p.strategy == "offload" || p.strategy == "memo")) {
          EXPECT_FALSE(p.fits());
        }
      }
      if (l.best < 0) {  // the layouts where nothing fits come last
        fitting = false;
        EXPECT_EQ(fastest, 0.0);
        continue;
      }
      EXPECT_TRUE(fitting) << l.tp << " " << l.cp << " " << l.pp;
      const ClusterPlan& best = l.plans[size_t(l.best)];
      EXPECT_EQ(best.tokens_per_s, fastest);
      EXPECT_LE(best.tokens_per_s, previous);
      previous = best.tokens_per_s;
      // the plan of that layout alone (a pipeline's stages by the cost model, as plan_layouts
      // sizes them; plan_cluster's own default traces each stage's step)
      ClusterOptions alone = o;
      alone.exact_stages = false;
      alone.parallel = Parallel{l.tp, l.cp};
      alone.pp = l.pp;
      alone.virtual_stages = l.virtual_stages;
      alone.micro_batches = l.pp > 1 ? 4 * l.pp : 1;
      const ClusterPlan again = plan_cluster(cpu_backend(), config, seq, best.strategy, alone);
      EXPECT_EQ(again.tokens_per_s, best.tokens_per_s);
      EXPECT_EQ(again.device.total(), best.device.total());
      EXPECT_EQ(again.pp_bubble, best.pp_bubble);
    }
    EXPECT_EQ(seen.count({8, 1, 1, 1}) + seen.count({1, 8, 1, 1}) + seen.count({2, 2, 2, 1}) +
                  seen.count({2, 2, 2, 2}) + seen.count({1, 1, 8, 1}) + seen.count({1, 1, 8, 2}),
              6u);
    // interleaving halves the bubble, (p - 1) / (v m)
    for (const auto& [k, b] : bubble) {
      if (std::get<3>(k) != 2) continue;
      EXPECT_DOUBLE_EQ(b, bubble.at({std::get<0>(k), std::get<1>(k), std::get<2>(k), 1}) / 2.0);
    }
    EXPECT_DOUBLE_EQ(bubble.at({1, 1, 8, 1}), 7.0 / 32.0);
  }
}

TEST(ClusterPlan, memo_alpha_is_host_bound_at_a_million_tokens_as_the_closed_form_says) {
  const ModelConfig config = llama_preset("llama-7b");
  const int64_t seq = 1 << 20;
  const ClusterPlan p =
      plan_cluster(cpu_backend(), config, seq, "memo", a800s(8, int64_t(2048 * kGiB)));
  const Sizes s = llama7b_layer(double(seq) / 8);
  // (L - 2) (S_in + S_attn + alpha S_oth) <= 2 TiB / 8 GPUs
  const double want = (2048 * kGiB / 8 / 30 - s.in - s.attn) / s.other;
  ASSERT_TRUE(p.alpha.has_value());
  EXPECT_NEAR(*p.alpha, want, 1e-9);
  EXPECT_NEAR(want, 0.4635, 1e-3);
  EXPECT_EQ(p.alpha_bound, "host memory");
  EXPECT_TRUE(p.host_fits);
  EXPECT_NEAR(double(p.host_need_bytes), 2048 * kGiB, 8 * 30.0);  // filled to the byte, rounded
}

TEST(ClusterPlan, memo_alpha_is_bandwidth_bound_when_the_link_is_slow) {
  const ModelConfig config = llama_preset("llama-7b");
  const int64_t seq = 131072, t = 8;
  ClusterOptions o = a800s(t, int64_t(64 * 1024 * kGiB));
  o.host_bandwidth_bytes_per_s = 10e9;
  const ClusterPlan p = plan_cluster(cpu_backend(), config, seq, "memo", o);
  // T_layer = one layer's forward per GPU: products 2 x 202,375,168 matrix parameters and causal
  // attention 2 x 4096 x (S + 1) per token, over 8 GPUs, at 60% of 312 TFLOP/s, plus two
  // all-gathers and two reduce-scatters of [S, 4096] bf16, 7/8 of it each over 200 GB/s.
  const double tokens = double(seq) / t;
  const double flops = tokens * (2.0 * 202375168.0 + 2.0 * 4096.0 * (double(seq) + 1.0));
  const double t_layer = flops / (0.6 * 312e12) + 4.0 * 7.0 / 8.0 * double(seq) * 4096 * 2 / 200e9;
  const Sizes s = llama7b_layer(tokens);
  const double want = (10e9 * t_layer - s.in - s.attn) / s.other;
  ASSERT_TRUE(p.alpha.has_value());
  EXPECT_GT(want, 0.0);
  EXPECT_LT(want, 1.0);
  EXPECT_NEAR(*p.alpha, want, 1e-9);
  EXPECT_EQ(p.alpha_bound, "bandwidth");
  EXPECT_NEAR(p.time.copy_stall_s, 0.0, 1e-9);  // the chosen alpha hides the copies
}

TEST(ClusterPlan, memo_says_what_would_fit_when_even_alpha_zero_overflows_the_host) {
  const ModelConfig config = llama_preset("llama-7b");
  const int64_t seq = 1 << 20;
  const ClusterPlan p =
      plan_cluster(cpu_backend(), config, seq, "memo", a800s(8, int64_t(256 * kGiB)));
  EXPECT_FALSE(p.fits());
  EXPECT_FALSE(p.host_fits);
  const Sizes s = llama7b_layer(double(seq) / 8);
  const double need = 30 * 8 * (s.in + s.attn);  // per node at alpha = 0: 482 GiB
  EXPECT_NE(p.why_not.find("even at alpha = 0"), std::string::npos) << p.why_not;
  EXPECT_NE(p.why_not.find(gib(need)), std::string::npos) << p.why_not;
  // 256 GiB holds 256 / 482 of the sequence: 556,032 tokens in whole 8192-token steps
  const int64_t seq_fit = int64_t(double(seq) * 256 * kGiB / need) / 8192 * 8192;
  EXPECT_NE(p.why_not.find("--seq " + std::to_string(seq_fit)), std::string::npos) << p.why_not;
  EXPECT_NE(p.why_not.find("--host-memory"), std::string::npos) << p.why_not;
}

TEST(ClusterPlan, a_given_alpha_beyond_the_host_is_refused_with_the_alpha_that_fits) {
  ClusterOptions o = a800s(8, int64_t(2048 * kGiB));
  o.alpha = 0.9;
  const ClusterPlan p = plan_cluster(cpu_backend(), llama_preset("llama-7b"), 1 << 20, "memo", o);
  EXPECT_FALSE(p.host_fits);
  EXPECT_NE(p.why_not.find("--alpha 0.463 fits"), std::string::npos) << p.why_not;
}

TEST(ClusterPlan, model_state_per_gpu_is_18_bytes_per_rank_parameter_sharded_as_asked) {
  const ModelConfig config = llama_preset("llama-7b");
  double matrices = 0, vectors = 0;
  const ParamLayout layout(config);  // a named layout: params() refers into it
  for (const ParamInfo& i : layout.params())
    (i.is_matrix() ? matrices : vectors) += double(i.numel);
  ClusterOptions o = a800s(4, 0);  // 8 GPUs, TP 4: two data-parallel ranks
  o.zero = 0;
  ClusterPlan p = plan_cluster(cpu_backend(), config, 4096, "keep", o);
  const double rank4 = matrices / 4 + vectors;
  EXPECT_EQ(p.device.weight_bytes, int64_t(std::ceil(rank4 * 2)));
  EXPECT_EQ(p.device.gradient_bytes, int64_t(std::ceil(rank4 * 4)));
  EXPECT_EQ(p.device.optimizer_bytes, int64_t(std::ceil(rank4 * 12)));
  o.zero = 3;
  p = plan_cluster(cpu_backend(), config, 4096, "keep", o);
  EXPECT_EQ(p.device.weight_bytes, int64_t(std::ceil(rank4 * 2 / 2)));
  EXPECT_EQ(p.device.gradient_bytes, int64_t(std::ceil(rank4 * 4 / 2)));
  EXPECT_EQ(p.device.optimizer_bytes, int64_t(std::ceil(rank4 * 12 / 2)));
  EXPECT_EQ(p.device.rounding_bytes, 0);
  EXPECT_EQ(p.host_need_bytes, 0);
}

TEST(ClusterPlan, mfu_conventions_differ_by_the_attention_term) {
  const ModelConfig config = llama_preset("llama-7b");
  const int64_t seq = 1 << 20;
  const ClusterPlan p =
      plan_cluster(cpu_backend(), config, seq, "memo", a800s(8, int64_t(2048 * kGiB)));
  // 3 (L (2 P + A) + 2 C V) with A = 2 H D (S + 1) or 4 H D S
  const double base = 32 * 2 * 202375168.0 + 2.0 * 4096 * 32000;
  EXPECT_NEAR(p.model_flops_per_token_causal, 3 * (base + 32 * 2 * 4096.0 * (seq + 1)), 1.0);
  EXPECT_NEAR(p.model_flops_per_token_noncausal, 3 * (base + 32 * 4 * 4096.0 * seq), 1.0);
  EXPECT_NEAR(p.mfu_noncausal / p.mfu_causal,
              p.model_flops_per_token_noncausal / p.model_flops_per_token_causal, 1e-12);
  EXPECT_GT(p.mfu_noncausal / p.mfu_causal, 1.9);  // ~2x at 1M tokens
  // MFU = tokens x FLOPs / (step x G x peak); one data-parallel rank of 8 GPUs
  EXPECT_NEAR(p.mfu_causal,
              double(seq) * p.model_flops_per_token_causal / (p.time.step_s * 8 * 312e12), 1e-12);
  EXPECT_NEAR(p.time.step_s,
              p.time.forward_s + p.time.backward_s + p.time.recompute_s + p.time.tp_comm_s +
                  p.time.cp_comm_s + p.time.copy_stall_s,
              1e-9);
}

TEST(ClusterPlan, recompute_pays_a_whole_forward_and_memo_only_the_rebuilt_rows) {
  const ModelConfig config = llama_preset("llama-7b");
  const ClusterOptions o = a800s(8, int64_t(2048 * kGiB));
  const ClusterPlan keep = plan_cluster(cpu_backend(), config, 1 << 20, "keep", o);
  const ClusterPlan rec = plan_cluster(cpu_backend(), config, 1 << 20, "recompute", o);
  const ClusterPlan memo = plan_cluster(cpu_backend(), config, 1 << 20, "memo", o);
  // every layer's forward again: the forward without the head (2 C V per token, 1/8 per GPU)
  const double head_s = double(1 << 20) / 8 * 2.0 * 4096 * 32000 / (0.6 * 312e12);
  EXPECT_NEAR(rec.time.recompute_s, keep.time.forward_s - head_s, 1e-9 * keep.time.forward_s);
  EXPECT_LT(memo.time.recompute_s, 0.02 * rec.time.recompute_s);  // no attention recomputed
  EXPECT_GT(memo.time.recompute_s, 0.0);
  EXPECT_LT(rec.mfu_causal, memo.mfu_causal);
}

TEST(ClusterPlan, the_longest_sequence_fits_and_one_step_more_does_not) {
  const ModelConfig config = llama_preset("llama-7b");
  ClusterOptions o = a800s(8, int64_t(2048 * kGiB));
  o.search_max_seq = true;
  for (const char* strategy : {"recompute", "memo"}) {
    SCOPED_TRACE(strategy);
    const ClusterPlan p = plan_cluster(cpu_backend(), config, 65536, strategy, o);
    ASSERT_TRUE(p.max_seq.has_value());
    o.search_max_seq = false;
    EXPECT_TRUE(plan_cluster(cpu_backend(), config, *p.max_seq, strategy, o).fits());
    EXPECT_FALSE(
        plan_cluster(cpu_backend(), config, *p.max_seq + p.max_seq_step, strategy, o).fits());
    o.search_max_seq = true;
  }
  // a host that holds memo only under one step of 1024 t c tokens: the search goes on in the
  // layout's own unit (t here), so what fits at the asked length is not reported as "none"
  o.host_memory_bytes = int64_t(3 * kGiB);
  const ClusterPlan short_fit = plan_cluster(cpu_backend(), config, 4096, "memo", o);
  ASSERT_TRUE(short_fit.fits());
  ASSERT_TRUE(short_fit.max_seq.has_value());
  EXPECT_EQ(short_fit.max_seq_step, 8);
  EXPECT_GE(*short_fit.max_seq, 4096);
  EXPECT_LT(*short_fit.max_seq, 8192);
  o.search_max_seq = false;
  EXPECT_FALSE(plan_cluster(cpu_backend(), config, *short_fit.max_seq + 8, "memo", o).fits());
}

// LLaMA-7B, TP 4 x CP 2 on 8 GPUs at S = 262,144: a GPU holds T = 32,768 tokens; the trace's
// ring sends per layer one bf16 [k; v] block of T x 4096 (kv width) x 2 forward, and one
// [k; v; dk; dv] plus one [dk; dv] backward: 2 + 4 + 2 = 8 T x 4096 x 2 B per layer, 32 layers;
// plus the loss's 8 B from one peer. recompute re-runs the forward share of all but the last layer.
TEST(ClusterPlan, the_traced_ring_sends_what_the_context_parallel_layout_does) {
  const ModelConfig config = llama_preset("llama-7b");
  ClusterOptions o = a800s(4, int64_t(2048) * (int64_t(1) << 30));
  o.parallel.cp = 2;
  const int64_t T = 262144 / 8, block = T * 4096 * 2;
  EXPECT_EQ(plan_cluster(cpu_backend(), config, 262144, "keep", o).cp_bytes_per_micro_batch,
            32 * 8 * block + 8);
  EXPECT_EQ(plan_cluster(cpu_backend(), config, 262144, "recompute", o).cp_bytes_per_micro_batch,
            32 * 8 * block + 31 * 2 * block + 8);
  o.parallel.cp = 1;
  EXPECT_EQ(plan_cluster(cpu_backend(), config, 262144, "keep", o).cp_bytes_per_micro_batch, 0);
}

// Note [Pipeline cost model]: LLaMA-7B on 16 A800s, TP 8 x PP 2 at S = 65,536 (T = 8,192 tokens
// per GPU), 8 micro-batches a step against 1. Stage 0 holds 2 micro-batches in flight at m = 8;
// each stage is sized by the plan of its whole step's trace.
TEST(ClusterPlan, a_pipeline_sizes_each_stage_with_its_micro_batches_in_flight_and_its_bubble) {
  const ModelConfig config = llama_preset("llama-7b");
  const int64_t seq = 65536, T = seq / 8;
  ClusterOptions o = a800s(8, int64_t(2048 * kGiB));
  o.gpus = 16;
  o.pp = 2;
  o.alpha = 0.25;
  auto plan = [&](const char* strategy, int64_t m) {
    o.micro_batches = m;
    return plan_cluster(cpu_backend(), config, seq, strategy, o);
  };
  const Sizes layer = llama7b_layer(double(T));
  const ClusterPlan keep1 = plan("keep", 1), keep8 = plan("keep", 8);
  ASSERT_EQ(keep8.pp_stage_totals.size(), 2u);
  EXPECT_EQ(keep8.pp_stage, 0);
  EXPECT_EQ(keep8.pp_in_flight, 2);
  EXPECT_EQ(keep1.pp_in_flight, 1);
  const int n0 = keep8.pp_stage_layers;
  EXPECT_GE(n0, 15);
  EXPECT_LE(n0, 17);
  // each stage's activations: the plan of its whole step's shape-only trace, as the run's
  const PipelineShape shape{2, 1};
  const std::vector<int> counts = pipeline_layer_counts(config, seq, shape);
  StrategyOptions keep;
  keep.kind = "keep";
  EXPECT_EQ(keep8.device.activation_bytes + keep8.device.rounding_bytes,
            plan_activations(trace_pipeline_stage_shapes_only(
                                 cpu_backend(), config, Parallel{8, 1}, shape, counts, 8, 0, 1, T,
                                 make_strategy_factory(keep), DType::kBF16))
                .arena_bytes);
  // keep: the second micro-batch in flight holds every skeletal tensor of stage 0's layers, and
  // stage 0 two more hidden states ([T, 4096] bf16), the sends not yet vouched for (Note
  // [Pipeline send completion]); the last stage holds one micro-batch's layers at a time and one
  // more received hidden state
  const int64_t hidden = T * 4096 * 2;
  EXPECT_EQ(keep8.pp_stage_totals[0] - keep1.pp_stage_totals[0],
            int64_t(n0 * (layer.in + layer.attn + layer.other)) + 2 * hidden);
  EXPECT_EQ(keep8.pp_stage_totals[1], keep1.pp_stage_totals[1] + hidden);
  // stage 0's model state: its layers, the embedding; matrices split 8 ways
  const double layer_matrices = 4.0 * 4096 * 4096 + 3.0 * 4096 * 11008, layer_vectors = 2 * 4096;
  const double stage0 = n0 * (layer_matrices / 8 + layer_vectors) + 32000.0 * 4096 / 8;
  EXPECT_EQ(keep8.device.weight_bytes, int64_t(std::ceil(stage0 * 2)));
  // one data-parallel rank (16 / (8 x 2)): ZeRO 1 shards nothing
  EXPECT_EQ(keep8.device.optimizer_bytes, int64_t(std::ceil(stage0 * 12)));
  // memo parks the micro-batches in flight: the device side grows by one hidden state, not by
  // layers; the host side grows
  const ClusterPlan memo1 = plan("memo", 1), memo8 = plan("memo", 8);
  ASSERT_EQ(memo8.pp_stage_totals.size(), 2u);
  for (size_t r = 0; r < 2; ++r)
    EXPECT_EQ(memo8.pp_stage_totals[r], memo1.pp_stage_totals[r] + hidden);
  const double host_layer = layer.in + layer.attn + 0.25 * layer.other;
  EXPECT_EQ(memo8.host_need_bytes, int64_t(2 * n0 * host_layer) * 8);  // 8 GPUs a node
  EXPECT_EQ(memo1.host_need_bytes, int64_t(std::max(n0, 32 - n0 - 2) * host_layer) * 8);
  // the step: 8 micro-batches of the slowest stage, one more for the bubble ((P - 1) / V), and
  // the fill's hidden state and gradient through the one boundary, 8 GPUs apart: another node
  EXPECT_DOUBLE_EQ(memo8.pp_bubble, 1.0 / 8);
  EXPECT_EQ(memo8.pp_bytes_per_micro_batch, T * 4096 * 2);
  EXPECT_NEAR(memo8.time.pp_comm_s, 2.0 * double(T * 4096 * 2) / 25e9, 1e-15);
  const double micro_s = (memo8.time.step_s - memo8.time.bubble_s - memo8.time.pp_comm_s) / 8;
  EXPECT_NEAR(memo8.time.bubble_s, micro_s, 1e-12 * micro_s);
  EXPECT_NEAR(memo8.time.forward_s + memo8.time.backward_s + memo8.time.recompute_s +
                  memo8.time.tp_comm_s + memo8.time.cp_comm_s + memo8.time.copy_stall_s,
              8 * micro_s, 1e-9 * micro_s);
  EXPECT_NEAR(memo8.tokens_per_s, 8.0 * double(seq) / memo8.time.step_s,
              1e-9 * memo8.tokens_per_s);  // one pipeline of 16 / (8 x 2)
  // interleaving halves the bubble
  o.virtual_stages = 2;
  const ClusterPlan inter = plan("memo", 8);
  EXPECT_DOUBLE_EQ(inter.pp_bubble, 1.0 / 16);
  EXPECT_LT(inter.time.bubble_s, 0.6 * memo8.time.bubble_s);
}

TEST(ClusterPlan, layouts_that_do_not_divide_are_refused_naming_the_flag) {
  const ModelConfig config = llama_preset("llama-7b");
  ClusterOptions o = a800s(8, 0);
  o.parallel.tp = 3;
  o.gpus = 9;
  EXPECT_NE(test::error_message<ConfigError>([&] {
              plan_cluster(cpu_backend(), config, 9 * 1024, "keep", o);
            }).find("--tp 3 must divide"),
            std::string::npos);
  o = a800s(8, 0);
  EXPECT_NE(test::error_message<ConfigError>([&] {
              plan_cluster(cpu_backend(), config, 1001, "keep", o);
            }).find("--seq 1001"),
            std::string::npos);
  o.gpus = 12;
  EXPECT_NE(test::error_message<ConfigError>([&] {
              plan_cluster(cpu_backend(), config, 8192, "keep", o);
            }).find("--gpus 12"),
            std::string::npos);
  o = a800s(8, 0);
  EXPECT_NE(test::error_message<ConfigError>([&] {
              plan_cluster(cpu_backend(), config, 8192, "swap", o);
            }).find("keep, recompute, offload, memo"),
            std::string::npos);
  o = a800s(8, 0);
  o.pp = 3;
  EXPECT_NE(test::error_message<ConfigError>([&] {
              plan_cluster(cpu_backend(), config, 8192, "keep", o);
            }).find("--gpus 8 is not a multiple of --tp 8 x --cp 1 x --pp 3"),
            std::string::npos);
  o = a800s(1, 0);
  o.pp = 8;
  o.virtual_stages = 5;
  o.micro_batches = 8;
  EXPECT_NE(test::error_message<ConfigError>([&] {
              plan_cluster(cpu_backend(), config, 8192, "keep", o);
            }).find("= 40 chunks, the model has 32 layers"),
            std::string::npos);
  o.virtual_stages = 2;
  o.micro_batches = 12;
  EXPECT_NE(test::error_message<ConfigError>([&] {
              plan_cluster(cpu_backend(), config, 8192, "keep", o);
            }).find("12 micro-batches per step is not a multiple of --pp 8"),
            std::string::npos);
}

}  // namespace
}  // namespace memo
