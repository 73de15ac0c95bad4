// Shape-only traces (Note [Meta backend]) are the real traces without the data: same requests,
// sizes, order, lifetimes and passes for every strategy; a plan made from one runs a real training
// step with its measured peak equal to the plan; and a 7B rank at a million tokens traces with no
// memory behind it.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <chrono>
#include <cstring>
#include <set>
#include <string>

#include "../memory/memory_test_util.h"
#include "memo/cpu/cpu_backend.h"
#include "memo/memory/planned_allocator.h"
#include "memo/memory/strategy_factory.h"
#include "memo/model/presets.h"
#include "memo/parallel/shape_communicator.h"
#include "memo/train/device_plan.h"
#include "test_util.h"

namespace memo {
namespace {

StrategyFactory factory(const std::string& kind) {
  StrategyOptions o;
  o.kind = kind;
  if (kind == "memo") o.alpha = 0.5;  // given: no profiled warm-up, which has no shape-only twin
  return make_strategy_factory(o);
}

void expect_same_trace(const Trace& got, const Trace& want) {
  ASSERT_EQ(got.requests.size(), want.requests.size());
  for (size_t i = 0; i < want.requests.size(); ++i) {
    const TracedRequest &g = got.requests[i], &w = want.requests[i];
    EXPECT_EQ(g.name, w.name) << "request " << i;
    EXPECT_EQ(g.bytes, w.bytes) << "request " << i << " " << w.name;
    EXPECT_EQ(g.kind, w.kind) << "request " << i << " " << w.name;
    EXPECT_EQ(g.begin, w.begin) << "request " << i << " " << w.name;
    EXPECT_EQ(g.end, w.end) << "request " << i << " " << w.name;
    EXPECT_EQ(g.phase, w.phase) << "request " << i << " " << w.name;
  }
  ASSERT_EQ(got.phases.size(), want.phases.size());
  for (size_t i = 0; i < want.phases.size(); ++i) {
    EXPECT_EQ(got.phases[i].pass, want.phases[i].pass) << "phase " << i;
    EXPECT_EQ(got.phases[i].layer, want.phases[i].layer) << "phase " << i;
    EXPECT_EQ(got.phases[i].begin, want.phases[i].begin) << "phase " << i;
    EXPECT_EQ(got.phases[i].end, want.phases[i].end) << "phase " << i;
  }
}

class ShapeOnlyTrace : public ::testing::TestWithParam<std::string> {};

// GPT-2 layers with learned positions (LayerNorm statistics, biases, a position table).
ModelConfig tiny_gpt_config() {
  ModelConfig c = testing::tiny_config();
  c.arch = Arch::kGpt2;
  c.num_key_value_heads = c.num_attention_heads;
  c.intermediate_size = 4 * c.hidden_size;
  c.tie_word_embeddings = true;
  c.position_embedding = PositionEmbedding::kLearned;
  c.max_position_embeddings = 320;
  return c;
}

TEST_P(ShapeOnlyTrace, equals_the_real_trace) {
  for (ModelConfig config : {testing::tiny_config(), tiny_gpt_config()}) {
    config.num_hidden_layers = 5;  // memo and offload move layers 0..2
    for (const auto& [batch, seq] : {std::pair<int64_t, int64_t>{2, 150}, {1, 300}}) {
      Model model(config, cpu_backend());
      model.init(5);
      const Trace real = trace_model_step(model, batch, seq, factory(GetParam()));
      const Trace shapes =
          trace_shapes_only(cpu_backend(), config, Parallel{}, batch, seq, factory(GetParam()));
      SCOPED_TRACE(GetParam() + (config.is_gpt2() ? " gpt2" : " llama") + " batch " +
                   std::to_string(batch) + " seq " + std::to_string(seq));
      expect_same_trace(shapes, real);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Strategies, ShapeOnlyTrace,
                         ::testing::Values("keep", "recompute", "offload", "memo"));

// A pipeline rank's shape-only step (what memo plan --gpus --pp sizes each stage by) is the
// step trace_pipeline_stage records on that rank's part of a model with values: 1F1B and
// interleaved, every rank, the first and last stages (embedding, head) included.
TEST_P(ShapeOnlyTrace, a_pipeline_stages_step_equals_the_real_one) {
  ModelConfig config = testing::tiny_config();
  config.num_hidden_layers = 5;
  const int64_t batch = 2, seq = 48;
  for (const PipelineShape shape :
       {PipelineShape{2, 1}, PipelineShape{3, 1}, PipelineShape{2, 2}}) {
    const int m = 2 * shape.stages;
    const std::vector<int> counts = pipeline_layer_counts(config, seq, shape);
    for (int rank = 0; rank < shape.stages; ++rank) {
      Model model(config, cpu_backend());
      model.init(5);
      model.set_pipeline(pipeline_part(shape, counts, rank));
      const Trace real =
          trace_pipeline_stage(model, shape, m, rank, batch, seq, factory(GetParam()));
      const Trace shapes =
          trace_pipeline_stage_shapes_only(cpu_backend(), config, Parallel{}, shape, counts, m,
                                           rank, batch, seq, factory(GetParam()));
      SCOPED_TRACE(GetParam() + " pp " + std::to_string(shape.stages) + "x" +
                   std::to_string(shape.virtual_stages) + " rank " + std::to_string(rank));
      expect_same_trace(shapes, real);
    }
  }
}

// Two optimiser steps of two micro-batches under `alloc` and `kind`.
void train_steps(Model& model, ActivationAllocator& alloc, const std::string& kind, int64_t batch,
                 int64_t seq) {
  auto strategy = factory(kind)(model.skeletal(), alloc);
  for (int step = 0; step < 2; ++step) {
    model.zero_grads();
    for (int micro = 0; micro < 2; ++micro) {
      const auto in = testing::tokens(model.config(), batch * seq, 10 + step * 2 + micro);
      const auto tg = testing::tokens(model.config(), batch * seq, 50 + step * 2 + micro);
      model.forward_backward(in.data(), tg.data(), batch, seq, 0.01f, *strategy, alloc);
    }
  }
}

TEST(ShapeOnlyPlan, planned_activation_bytes_equal_the_peak_measured_in_training) {
  for (ModelConfig config : {testing::tiny_config(), tiny_gpt_config()})
    for (const std::string kind : {"keep", "memo"}) {
      config.num_hidden_layers = 4;
      SCOPED_TRACE(kind + (config.is_gpt2() ? " gpt2" : " llama"));
      const ActivationPlan plan = plan_activations(
          trace_shapes_only(cpu_backend(), config, Parallel{}, 2, 200, factory(kind)));
      Model model(config, cpu_backend());
      model.init(9);
      PlannedAllocator arena(plan);  // throws on the first request the real step makes otherwise
      train_steps(model, arena, kind, 2, 200);
      EXPECT_EQ(arena.peak_top_bytes(), plan.arena_bytes);
      // The most bytes live at once in training is the trace's, which the plan's lower bound is.
      EXPECT_EQ(arena.peak_live_bytes(), plan.lower_bound_bytes);
      EXPECT_GT(plan.arena_bytes, 0);
    }
}

int64_t max_rss_bytes() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return int64_t(u.ru_maxrss) * 1024;
}

TEST(ShapeOnlyTrace, a_7b_rank_at_a_million_tokens_needs_no_memory) {
  for (const ModelConfig& config :
       {llama_preset("llama-7b"), gpt_preset_config(gpt_preset("gpt-7b"), int64_t(1) << 21)}) {
    SCOPED_TRACE(config.is_gpt2() ? "gpt-7b" : "llama-7b");
    const int64_t seq = 1 << 20, tp = 8;
    const int64_t rss_before = max_rss_bytes();
    const auto t0 = std::chrono::steady_clock::now();
    const Trace trace =
        trace_shapes_only(cpu_backend(), config, Parallel{tp, 1}, 1, seq / tp, factory("memo"));
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    // One rank's layer input is 1/8 of [S, C] fp32: 2 GiB; the TP gathers hold all S tokens.
    const int64_t x_bytes = seq / tp * config.hidden_size * 4;
    int64_t gathered = 0, inputs = 0;
    for (const TracedRequest& r : trace.requests) {
      if (r.name == "x") {
        EXPECT_EQ(r.bytes, x_bytes);
      }
      inputs += r.name == "x";
      if (r.name == "tp.attn_in" && r.phase >= 0) {  // in a layer pass: all the tokens
        EXPECT_EQ(r.bytes, tp * x_bytes);
        ++gathered;
      } else if (r.name == "tp.attn_in") {
        // memo's rebuild holds the buffer for all of them, whatever alpha (Note [Tensor-parallel
        // activations]), so a plan does not depend on it
        EXPECT_EQ(r.bytes, tp * x_bytes);
      }
    }
    EXPECT_EQ(inputs, 3);  // memo's ring of three layer inputs
    EXPECT_GT(gathered, 0);
    // Terabytes requested over the step, next to nothing resident.
    EXPECT_LT(max_rss_bytes() - rss_before, int64_t(512) << 20);
    std::printf("%s rank at 1M tokens, TP 8: %zu requests traced in %.2f s\n",
                config.is_gpt2() ? "gpt-7b" : "llama-7b", trace.requests.size(), seconds);
  }
}

// Context parallelism traces the real ring (Note [Context parallel layout]) on rank 0 of a group
// of 4 that moves nothing: the double-buffered [k; v] blocks of the forward and [k; v; dk; dv] of
// the backward, and the bytes the rank would send: per layer 3 blocks of [k; v] forward, 3 of
// [k; v; dk; dv] and one [dk; dv] home backward (a block: one of k, v of the rank's 64 tokens),
// the forward's share again under recompute, and the loss's 8 bytes gathered from 3 peers.
TEST(ShapeOnlyTrace, context_parallel_traces_the_ring) {
  const ModelConfig config = testing::tiny_config();
  const int64_t block = 64 * config.kv_dim() * 4, L = config.num_hidden_layers;
  for (const char* strategy : {"keep", "recompute"}) {
    SCOPED_TRACE(strategy);
    CommCounters comm;
    const Trace trace = trace_shapes_only(cpu_backend(), config, Parallel{1, 4}, 1, 64,
                                          factory(strategy), DType::kF32, &comm);
    int64_t rings = 0;
    for (const TracedRequest& r : trace.requests)
      if (r.name == "cp.kv_ring" || r.name == "cp.kv_ring_next") {
        ++rings;
        EXPECT_TRUE(r.bytes == 2 * block || r.bytes == 4 * block) << r.bytes;
      }
    // recompute re-runs every layer but the last, whose activations the backward starts from
    const int64_t forwards = std::string(strategy) == "recompute" ? 2 * L - 1 : L;
    EXPECT_EQ(rings, 2 * (forwards + L));  // two per layer forward, two per layer backward
    EXPECT_EQ(comm.bytes_sent, forwards * 3 * 2 * block + L * (3 * 4 + 2) * block + 3 * 8);
    EXPECT_EQ(comm.bytes_received, comm.bytes_sent);
  }
}

// Tensor parallelism runs the layers' collectives (Note [TP collectives]) on rank 0 of a group of
// t that moves nothing: per layer forward 2 all-gathers and 2 reduce-scatters, per layer backward
// 4 and 2, each moving (t - 1) of the rank's [T', C] blocks; recompute re-runs the forward of
// every layer but the last. What the cluster plan's time model counts (train/cluster_plan.cc:
// 4, 6 and 4 again of (t - 1)/t of [T/c, C] each).
// The layers' 4 forward and 6 backward collectives of [t T', C] bf16 each, the vocabulary-parallel
// embedding (a reduce-scatter forward, a gather backward), the head's gather and its gradient's
// reduce-scatter, and the loss's f32 statistics (a gather of [2, T] and a sum of [T]).
TEST(ShapeOnlyTrace, tensor_parallel_traces_the_layers_collectives) {
  ModelConfig llama = testing::tiny_config();
  llama.num_key_value_heads = llama.num_attention_heads;  // splits 4 ways
  for (ModelConfig config : {llama, tiny_gpt_config()}) {
    SCOPED_TRACE(config.is_gpt2() ? "gpt2" : "llama");
    const int64_t L = config.num_hidden_layers, C = config.hidden_size;
    for (int64_t tp : {2, 4}) {
      for (const char* strategy : {"keep", "recompute"}) {
        SCOPED_TRACE(::testing::Message() << "tp " << tp << " " << strategy);
        const int64_t rank_tokens = 64;                        // T' = T / t
        const int64_t block = (tp - 1) * rank_tokens * C * 2;  // bf16
        CommCounters cp, tpc;
        const Trace trace =
            trace_shapes_only(cpu_backend(), config, Parallel{tp, 1}, 1, rank_tokens,
                              factory(strategy), DType::kBF16, &cp, &tpc);
        const int64_t forwards = std::string(strategy) == "recompute" ? 2 * L - 1 : L;
        const int64_t T = tp * rank_tokens;
        const int64_t loss =
            all_gather_bytes(2 * T * 4, int(tp)) + all_reduce_bytes(T * 4, int(tp));
        EXPECT_EQ(tpc.bytes_sent, (forwards * 4 + L * 6 + 4) * block + loss);
        EXPECT_EQ(tpc.bytes_received, tpc.bytes_sent);
        EXPECT_EQ(cp.bytes_sent, 0);
        int64_t gathers = 0;
        for (const TracedRequest& r : trace.requests)
          if (r.name.rfind("tp.", 0) == 0) {
            ++gathers;
            EXPECT_EQ(r.bytes, r.name == "tp.ce_stats" ? 2 * tp * T * 4 : T * C * 2)
                << r.name;  // [t T', C] bf16; the loss's [2 t, T] f32
          }
        EXPECT_EQ(gathers, forwards * 4 + L * 6 + 5);
      }
    }
  }
}

// A bf16 trace (a GPU run in mixed precision): the same requests as the f32 trace, each of its
// dtype's bytes: statistics, the log-sum-exp, the loss path and attention scratch stay f32, every
// other activation (saved, transient, communication) is bf16; and one more a chunk of the head,
// the loss gradient rounded to bf16 (Note [bf16 loss gradient]), its chunk of logits as large.
TEST(ShapeOnlyTrace, a_bf16_trace_keeps_statistics_and_the_loss_path_in_f32) {
  // f32 attention kernels, whose scratch is the same in both (bf16 ones size their own)
  CpuBackend f32_attention(CpuOptions{.bf16_attention = false});
  for (ModelConfig config : {testing::tiny_config(), tiny_gpt_config()}) {
    SCOPED_TRACE(config.is_gpt2() ? "gpt2" : "llama");
    const Trace f32 =
        trace_shapes_only(f32_attention, config, Parallel{2, 2}, 1, 64, factory("memo"));
    const Trace bf16 = trace_shapes_only(f32_attention, config, Parallel{2, 2}, 1, 64,
                                         factory("memo"), DType::kBF16);
    std::vector<TracedRequest> rounded, rest;
    for (const TracedRequest& r : bf16.requests)
      (r.name == "head.dlogits_bf16" ? rounded : rest).push_back(r);
    ASSERT_EQ(rounded.size(), 1u);  // one chunk at 64 tokens a rank
    EXPECT_EQ(rounded[0].dtype, DType::kBF16);
    ASSERT_EQ(f32.requests.size(), rest.size());
    const std::set<std::string> f32_names = {"inv_rms1",
                                             "inv_rms2",
                                             "mean1",
                                             "rstd1",
                                             "mean2",
                                             "rstd2",
                                             "lse",
                                             "final.inv_rms",
                                             "head.logits",
                                             "head.losses",
                                             "attn.fwd_scratch",
                                             "attn.bwd_scratch",
                                             "cp.lse_part",
                                             "head.ce_stats",
                                             "head.ce_target",
                                             "tp.ce_stats"};
    int halved = 0;
    for (size_t i = 0; i < f32.requests.size(); ++i) {
      const TracedRequest &a = f32.requests[i], &b = rest[i];
      if (a.name == "head.logits") {
        EXPECT_EQ(rounded[0].bytes, a.bytes / 2);
      }
      ASSERT_EQ(a.name, b.name);
      EXPECT_EQ(a.dtype, DType::kF32) << a.name;
      const bool stays = f32_names.count(a.name) > 0;
      EXPECT_EQ(b.dtype, stays ? DType::kF32 : DType::kBF16) << b.name;
      EXPECT_EQ(b.bytes, stays ? a.bytes : a.bytes / 2) << b.name;
      halved += !stays;
    }
    EXPECT_GT(halved, 20);  // the skeletal set, the gradients and the TP/CP buffers
  }
}

// Under tensor parallelism a model holds its rank's parts of the parameters; the norms (and
// GPT-2's biases of row-parallel products and its positions) whole.
TEST(ShapeOnlyTrace, a_tensor_parallel_model_holds_its_ranks_parts) {
  for (ModelConfig config : {testing::tiny_config(), tiny_gpt_config()}) {
    SCOPED_TRACE(config.is_gpt2() ? "gpt2" : "llama");
    ShapeCommunicator group(2, 1);
    Model model(config, cpu_backend());
    const int64_t whole = model.layout().count();
    model.set_parallel({2, 1}, &group);
    EXPECT_TRUE(model.tensor_parallel());
    EXPECT_LT(model.layout().count(), whole);
    EXPECT_GT(model.layout().count(), whole / 2);
    EXPECT_EQ(model.layout().shard().rank, 1);
  }
}

}  // namespace
}  // namespace memo
