// A model cut into pipeline chunks (Note [Pipeline parts] in model/model.h), its ranks run in one
// process in the order their schedules give (parallel/pipeline.h): each rank holds only its
// chunks' tensors, drawn as the whole model draws them, and a step of 1F1B or interleaved 1F1B
// gives the one-process losses and gradients bit for bit (the two halves of a tied embedding's
// gradient to one rounding), under each activation strategy; the refusals.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <memory>
#include <string_view>
#include <tuple>
#include <vector>

#include "memo/backend/caching_allocator.h"
#include "memo/core/random.h"
#include "memo/cpu/cpu_backend.h"
#include "memo/memory/strategy_factory.h"
#include "memo/model/model.h"
#include "memo/parallel/pipeline.h"
#include "test_util.h"

namespace memo {
namespace {

ModelConfig pipe_llama() {
  ModelConfig c;
  c.hidden_size = 32;
  c.intermediate_size = 48;
  c.num_hidden_layers = 5;
  c.num_attention_heads = 4;  // D = 8
  c.num_key_value_heads = 2;
  c.vocab_size = 53;
  c.max_position_embeddings = 128;
  c.initializer_range = 0.2;  // spread logits: every path carries signal
  c.tie_word_embeddings = false;
  return c;
}

ModelConfig pipe_gpt2() {
  ModelConfig c = pipe_llama();
  c.arch = Arch::kGpt2;
  c.position_embedding = PositionEmbedding::kLearned;
  c.intermediate_size = 4 * 32;
  c.num_key_value_heads = 4;
  c.tie_word_embeddings = true;
  return c;
}

constexpr int64_t kBatch = 2, kSeq = 24;

// With eot >= 0 a seventh of the tokens are eot: several documents per micro-batch.
std::vector<int32_t> tokens(int mb, int64_t V, bool targets, int32_t eot = -1) {
  std::vector<int32_t> t(size_t(kBatch * kSeq));
  for (size_t i = 0; i < t.size(); ++i) {
    t[i] = int32_t(mix(uint64_t(mb) * 1000 + 17, i + (targets ? 1 : 0)) % uint64_t(V));
    if (eot >= 0 && t[i] % 7 == 0) t[i] = eot;
  }
  return t;
}

// Document masks and the eod loss mask on eot (none: -1).
void set_masks(Model& model, int32_t eot) {
  if (eot < 0) return;
  model.set_document_mask(eot);
  model.set_eod_loss_mask(eot);
}

StrategyOptions strategy_options(const char* kind) {
  StrategyOptions o;
  o.kind = kind;
  if (o.kind == "memo") o.alpha = 0.5;
  o.poison_released = true;  // a missing wait or an unrebuilt row turns into NaN
  return o;
}

struct StepResult {
  double loss = 0.0;
  std::map<std::string, std::vector<float>> grads;   // by name (a tied embedding: summed)
  std::map<std::string, std::vector<float>> params;  // as drawn
  std::vector<int64_t> peaks;                        // each rank's most live activation bytes
};

StepResult one_process(const ModelConfig& cfg, int m, const char* kind, int32_t eot) {
  Model model(cfg, cpu_backend());
  set_masks(model, eot);
  model.init(11);
  CachingAllocator alloc;
  auto strategy = make_strategy(model.skeletal(), alloc, strategy_options(kind));
  StepResult r;
  const float scale = 1.0f / float(m * kBatch * kSeq);
  for (int mb = 0; mb < m; ++mb) {
    const auto in = tokens(mb, cfg.vocab_size, false, eot),
               tg = tokens(mb, cfg.vocab_size, true, eot);
    r.loss += model.forward_backward(in.data(), tg.data(), kBatch, kSeq, scale, *strategy, alloc);
  }
  for (const ParamInfo& p : model.layout().params()) {
    r.grads[p.name].assign(model.grads() + p.offset, model.grads() + p.offset + p.numel);
    r.params[p.name].assign(model.params() + p.offset, model.params() + p.offset + p.numel);
  }
  return r;
}

// One rank of the pipeline, in this process: its model over its chunks and its device memory.
struct Rank {
  std::unique_ptr<Model> model;
  CachingAllocator alloc;
};

// The ranks run their schedules' actions in order; an action waits for its input as the MPI
// runtime waits on a receive (the chunk before's output, the chunk after's gradient).
StepResult pipeline(const ModelConfig& cfg, PipelineShape shape, const std::vector<int>& counts,
                    int m, const char* kind, int32_t eot = -1) {
  const int P = shape.stages, G = shape.chunks();
  const std::vector<int> first = chunk_first_layers(counts);
  std::vector<Rank> ranks(static_cast<size_t>(P));
  for (int r = 0; r < P; ++r) {
    PipelinePart part;
    for (int v = 0; v < shape.virtual_stages; ++v) {
      const int g = shape.chunk_of(r, v);
      part.chunks.emplace_back(first[size_t(g)], first[size_t(g + 1)]);
    }
    part.first = r == 0;
    part.last = r == shape.rank_of(G - 1);
    ranks[size_t(r)].model = std::make_unique<Model>(cfg, cpu_backend());
    ranks[size_t(r)].model->set_pipeline(part);
    set_masks(*ranks[size_t(r)].model, eot);
    ranks[size_t(r)].model->init(11);
  }
  const int64_t T = kBatch * kSeq, C = cfg.hidden_size;
  const float scale = 1.0f / float(m * T);
  using Key = std::pair<int, int>;             // (micro-batch, chunk)
  std::map<Key, std::vector<float>> out, din;  // a chunk's output; the gradient of its input
  std::map<Key, std::unique_ptr<ActivationStrategy>> strategies;
  std::map<Key, std::unique_ptr<ChunkPass>> passes;
  std::vector<double> losses(size_t(m), 0.0);
  std::vector<std::vector<PipeAction>> lists;
  for (int r = 0; r < P; ++r) lists.push_back(pipeline_actions(shape, m, r));
  std::vector<size_t> next(size_t(P), 0);
  for (bool moved = true; moved;) {
    moved = false;
    for (int r = 0; r < P; ++r) {
      Rank& rank = ranks[size_t(r)];
      Model& model = *rank.model;
      while (next[size_t(r)] < lists[size_t(r)].size()) {
        const PipeAction a = lists[size_t(r)][next[size_t(r)]];
        const Key key{a.micro_batch, a.chunk};
        const int v = a.chunk / P;
        const auto in = tokens(a.micro_batch, cfg.vocab_size, false, eot);
        if (a.op == PipeOp::kForward) {
          if (a.chunk > 0 && !out.count({a.micro_batch, a.chunk - 1})) break;
          std::vector<float> x = a.chunk > 0 ? out.at({a.micro_batch, a.chunk - 1})
                                             : std::vector<float>(size_t(T * C), 0.0f);
          const View<float> xv(x.data(), {T, C});
          auto& strategy = strategies[key];
          strategy = make_strategy(model.skeletal(), rank.alloc, strategy_options(kind));
          if (a.chunk + 1 == G) {  // forward, loss and backward back to back
            const auto tg = tokens(a.micro_batch, cfg.vocab_size, true, eot);
            losses[size_t(a.micro_batch)] = model.pipeline_last(in.data(), tg.data(), kBatch, kSeq,
                                                                scale, xv, *strategy, rank.alloc);
            din[key] = x;
          } else {
            std::vector<float> y(size_t(T * C), 0.0f);
            passes[key] = std::make_unique<ChunkPass>(*strategy);
            model.pipeline_forward(*passes[key], v, in.data(), kBatch, kSeq, xv,
                                   View<float>(y.data(), {T, C}), rank.alloc);
            out[key] = y;
          }
        } else if (a.chunk + 1 < G) {
          if (!din.count({a.micro_batch, a.chunk + 1})) break;
          std::vector<float> dx = din.at({a.micro_batch, a.chunk + 1});
          model.pipeline_backward(*passes.at(key), View<float>(dx.data(), {T, C}), rank.alloc);
          din[key] = dx;
          passes.erase(key);
          strategies.erase(key);
        }
        ++next[size_t(r)];
        moved = true;
      }
    }
  }
  for (int r = 0; r < P; ++r) EXPECT_EQ(next[size_t(r)], lists[size_t(r)].size()) << "rank " << r;
  StepResult res;
  for (const Rank& rank : ranks) res.peaks.push_back(rank.alloc.peak_live_bytes());
  for (double l : losses) res.loss += l;  // in micro-batch order, as one process sums them
  for (Rank& rank : ranks)
    for (const ParamInfo& p : rank.model->layout().params()) {
      const float* g = rank.model->grads() + p.offset;
      const float* w = rank.model->params() + p.offset;
      auto& sum = res.grads[p.name];
      if (sum.empty()) {
        sum.assign(g, g + p.numel);
        res.params[p.name].assign(w, w + p.numel);
      } else {  // a tied embedding's second copy: the same weights, the other half of its gradient
        EXPECT_EQ(res.params[p.name], std::vector<float>(w, w + p.numel)) << p.name;
        for (int64_t i = 0; i < p.numel; ++i) sum[size_t(i)] += g[i];
      }
    }
  return res;
}

void expect_same_step(const ModelConfig& cfg, PipelineShape shape, const std::vector<int>& counts,
                      int m, const char* kind, int32_t eot = -1) {
  SCOPED_TRACE(testing::Message() << kind << ", P " << shape.stages << " V " << shape.virtual_stages
                                  << ", m " << m << ", eot " << eot);
  const StepResult whole = one_process(cfg, m, kind, eot),
                   pipe = pipeline(cfg, shape, counts, m, kind, eot);
  EXPECT_EQ(pipe.loss, whole.loss);
  ASSERT_EQ(pipe.grads.size(), whole.grads.size());
  for (const auto& [name, g] : whole.grads) {
    EXPECT_EQ(pipe.params.at(name), whole.params.at(name)) << name;
    const std::vector<float>& h = pipe.grads.at(name);
    const bool tied = cfg.tie_word_embeddings && name.find("wte") != std::string::npos;
    if (!tied) {
      EXPECT_EQ(h, g) << name;
      continue;
    }
    // head + lookups added once in another order: within a few roundings of the largest entry
    double most = 0.0, diff = 0.0;
    for (size_t i = 0; i < g.size(); ++i) {
      most = std::max(most, double(std::abs(g[i])));
      diff = std::max(diff, double(std::abs(g[i] - h[i])));
    }
    EXPECT_LE(diff, 4.0 * 0x1p-24 * most * m) << name;
  }
}

TEST(PipelineModel, ranks_hold_their_chunks_tensors_as_the_whole_model_draws_them) {
  const ModelConfig cfg = pipe_gpt2();
  Model whole(cfg, cpu_backend());
  Model middle(cfg, cpu_backend());
  middle.set_pipeline({{{1, 3}}, false, false});
  Model last(cfg, cpu_backend());
  last.set_pipeline({{{3, 5}}, false, true});
  std::vector<std::string> names;
  for (const ParamInfo& p : middle.layout().params()) names.push_back(p.name);
  EXPECT_EQ(names.front(), "transformer.h.1.ln_1.weight");
  EXPECT_EQ(names.back().rfind("transformer.h.2.", 0), 0u);
  // the last rank of a tied model holds the embedding as its head, and the final norm
  EXPECT_NO_THROW(last.layout().find("transformer.wte.weight"));
  EXPECT_NO_THROW(last.layout().find("transformer.ln_f.weight"));
  EXPECT_THROW(last.layout().find("transformer.wpe.weight"), ConfigError);
  EXPECT_LT(middle.params_numel() + last.params_numel(), whole.params_numel());
}

// The noise probe's parts (Note [Pipeline step]): each of a rank's chunks writes one range of
// the gradient buffer, the ranges of a rank's chunks apart and covering its every tensor; a tied
// head copy on the last rank is no chunk's, its own range beside them.
TEST(PipelineModel, each_chunk_writes_one_range_of_the_gradients) {
  Model first(pipe_llama(), cpu_backend());  // 5 layers: chunks [0, 1) and [3, 4) of 2 x 2
  first.set_pipeline({{{0, 1}, {3, 4}}, true, false});
  const auto [o0, n0] = first.pipeline_chunk_params(0);
  const auto [o1, n1] = first.pipeline_chunk_params(1);
  EXPECT_EQ(o0, 0);  // the embedding, then layer 0
  EXPECT_EQ(first.layout().find("model.layers.0.mlp.down_proj.weight").offset +
                first.layout().find("model.layers.0.mlp.down_proj.weight").numel,
            o0 + n0);
  EXPECT_LE(o0 + n0, o1);
  EXPECT_EQ(o1, first.layout().find("model.layers.3.input_layernorm.weight").offset);
  EXPECT_EQ(o1 + n1, first.layout().total_numel());
  Model last(pipe_gpt2(), cpu_backend());  // tied: the head is the embedding, stored first
  last.set_pipeline({{{1, 2}, {3, 5}}, false, true});
  const auto [h0, hn] = last.pipeline_head_copy_params();
  const ParamInfo& wte = last.layout().find("transformer.wte.weight");
  EXPECT_EQ(h0, wte.offset);
  EXPECT_EQ(hn, wte.numel);
  const auto [l0, ln0] = last.pipeline_chunk_params(0);
  const auto [l1, ln1] = last.pipeline_chunk_params(1);
  EXPECT_EQ(l0, last.layout().find("transformer.h.1.ln_1.weight").offset);
  EXPECT_LE(h0 + hn, l0);
  EXPECT_LE(l0 + ln0, l1);
  EXPECT_EQ(l1, last.layout().find("transformer.h.3.ln_1.weight").offset);
  EXPECT_EQ(l1 + ln1, last.layout().total_numel());  // with the final norm
  EXPECT_EQ(first.pipeline_head_copy_params(), (std::pair<int64_t, int64_t>{0, 0}));
}

TEST(PipelineModel, one_f_one_b_and_interleaved_steps_equal_one_process_bit_for_bit) {
  for (const ModelConfig& cfg : {pipe_llama(), pipe_gpt2()}) {
    SCOPED_TRACE(cfg.arch == Arch::kGpt2 ? "gpt2" : "llama");
    expect_same_step(cfg, {2, 1}, {3, 2}, 3, "keep");
    expect_same_step(cfg, {4, 1}, balance_layers(5, 4, 0.0), 6, "keep");
    expect_same_step(cfg, {2, 2}, {1, 1, 2, 1}, 4, "keep");
    expect_same_step(cfg, {1, 1}, {5}, 2, "keep");
  }
}

// Note [Document masks] under a pipeline: each micro-batch in flight keeps its own document starts
// and positions (rotary and learned), and the last chunk leaves out the eot inputs' predictions.
TEST(PipelineModel, document_masks_and_the_eod_loss_mask_give_one_processs_bits) {
  for (const ModelConfig& cfg : {pipe_llama(), pipe_gpt2()}) {
    SCOPED_TRACE(cfg.arch == Arch::kGpt2 ? "gpt2" : "llama");
    expect_same_step(cfg, {2, 1}, {3, 2}, 3, "keep", 5);
    expect_same_step(cfg, {2, 2}, {1, 2, 1, 1}, 4, "memo", 5);
  }
}

TEST(PipelineModel, each_activation_strategy_gives_the_same_bits) {
  for (const char* kind : {"recompute", "offload", "memo"}) {
    expect_same_step(pipe_llama(), {2, 1}, {3, 2}, 3, kind);
    expect_same_step(pipe_llama(), {2, 2}, {1, 2, 1, 1}, 2, kind);
  }
}

// Note [Parked micro-batches]: under offload and memo a stage's device peak does not grow with the
// micro-batches it holds in flight (1F1B: P - r on rank r), where keep's and recompute's do.
TEST(PipelineModel, parked_micro_batches_leave_one_micro_batchs_buffers_on_the_device) {
  ModelConfig cfg = pipe_llama();
  cfg.num_hidden_layers = 8;
  const PipelineShape shape{4, 1};
  const std::vector<int> counts{2, 2, 2, 2};
  for (const char* kind : {"keep", "recompute", "offload", "memo"}) {
    SCOPED_TRACE(kind);
    const StepResult one = pipeline(cfg, shape, counts, 1, kind);   // one in flight everywhere
    const StepResult four = pipeline(cfg, shape, counts, 4, kind);  // rank r: 4 - r in flight
    const bool parks = std::string_view(kind) == "offload" || std::string_view(kind) == "memo";
    for (int r = 0; r + 1 < shape.stages; ++r) {
      if (parks)
        EXPECT_EQ(four.peaks[size_t(r)], one.peaks[size_t(r)]) << "rank " << r;
      else
        EXPECT_GT(four.peaks[size_t(r)], one.peaks[size_t(r)]) << "rank " << r;
    }
    EXPECT_EQ(four.peaks.back(), one.peaks.back());  // the last stage runs one at a time
  }
}

TEST(PipelineModel, what_a_pipeline_cannot_run_yet_is_refused_by_name) {
  Model model(pipe_llama(), cpu_backend());
  EXPECT_NE(test::error_message<ConfigError>([&] {
              model.set_pipeline({{{0, 3}, {2, 5}}, true, true});
            }).find("chunk of layers [2, 5) after layer 3"),
            std::string::npos);
  EXPECT_NE(test::error_message<ConfigError>([&] {
              model.set_pipeline({{{1, 5}}, true, true});
            }).find("chunk 0 starts at layer 1"),
            std::string::npos);
  model.set_pipeline({{{0, 2}}, true, false});
  CachingAllocator alloc;
  KeepStrategy keep(model.skeletal(), alloc);
  std::vector<int32_t> in(size_t(kBatch * kSeq), 1);
  EXPECT_THROW(model.forward_backward(in.data(), in.data(), kBatch, kSeq, 1.0f, keep, alloc),
               Error);
}

}  // namespace
}  // namespace memo
