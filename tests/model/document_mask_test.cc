// Document masks (Note [Document masks] in model/architecture.h): the loss and every gradient of
// packed windows equal those of their documents run one by one, each from position 0, for each
// architecture; a window of one document gives today's bits; the refusals.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "memo/backend/caching_allocator.h"
#include "memo/core/random.h"
#include "memo/memory/strategy.h"
#include "memo/model/model.h"
#include "model/torch_compare_util.h"
#include "test_util.h"

namespace memo {
namespace {

constexpr int32_t kEot = 0;

ModelConfig doc_llama() {
  ModelConfig c;
  c.hidden_size = 48;
  c.intermediate_size = 72;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 6;  // D = 8
  c.num_key_value_heads = 2;
  c.vocab_size = 61;
  c.max_position_embeddings = 256;
  c.initializer_range = 0.2;  // spread logits: every path carries signal
  return c;
}

ModelConfig doc_gpt2(PositionEmbedding pos) {
  ModelConfig c = doc_llama();
  c.arch = Arch::kGpt2;
  c.position_embedding = pos;
  c.intermediate_size = 4 * 48;
  c.num_key_value_heads = 6;
  c.tie_word_embeddings = true;
  return c;
}

// Row b of a [batch, S + 1] token stream: ids in [1, V) with an end-of-text token at each
// document start in `starts` (0 may or may not be one).
std::vector<int32_t> packed_row(int64_t S, int64_t V, const std::vector<int64_t>& starts,
                                uint64_t seed) {
  std::vector<int32_t> row(size_t(S + 1));
  for (size_t i = 0; i < row.size(); ++i) row[i] = int32_t(1 + mix(seed, i) % uint64_t(V - 1));
  for (int64_t s : starts) row[size_t(s)] = kEot;
  return row;
}

struct DocRun {
  double loss = 0.0;
  std::vector<float> grads;
};

// forward_backward of the rows (each [S + 1] tokens) as one micro-batch, or of each document
// of each row alone (documents = the row's spans between its end-of-text tokens).
DocRun run_packed(const ModelConfig& cfg, const std::vector<std::vector<int32_t>>& rows, int64_t S,
                  bool mask, bool eod_loss_mask = false) {
  Model model(cfg, cpu_backend());
  model.init(5);
  test::perturb_biases_and_norms(model, 3);
  if (mask) model.set_document_mask(kEot);
  if (eod_loss_mask) model.set_eod_loss_mask(kEot);
  CachingAllocator alloc;
  KeepStrategy keep(model.skeletal(), alloc);
  std::vector<int32_t> in, tg;
  for (const auto& r : rows) {
    in.insert(in.end(), r.begin(), r.begin() + S);
    tg.insert(tg.end(), r.begin() + 1, r.end());
  }
  DocRun out;
  out.loss =
      model.forward_backward(in.data(), tg.data(), int64_t(rows.size()), S, 1.0f, keep, alloc);
  out.grads.assign(model.grads(), model.grads() + model.params_numel());
  return out;
}

// eod_loss_mask: each document's first prediction (made from its end-of-text token) left out:
// as it sees only that token, it is the loss of a one-token sequence, whose gradient is taken
// away (grad_scale -1).
DocRun run_one_by_one(const ModelConfig& cfg, const std::vector<std::vector<int32_t>>& rows,
                      int64_t S, bool eod_loss_mask = false) {
  Model model(cfg, cpu_backend());
  model.init(5);
  test::perturb_biases_and_norms(model, 3);
  CachingAllocator alloc;
  KeepStrategy keep(model.skeletal(), alloc);
  DocRun out;
  for (const auto& r : rows)
    for (int64_t a = 0; a < S;) {
      int64_t b = a + 1;
      while (b < S && r[size_t(b)] != kEot) ++b;
      out.loss +=
          model.forward_backward(r.data() + a, r.data() + a + 1, 1, b - a, 1.0f, keep, alloc);
      if (eod_loss_mask && r[size_t(a)] == kEot)
        out.loss -=
            model.forward_backward(r.data() + a, r.data() + a + 1, 1, 1, -1.0f, keep, alloc);
      a = b;
    }
  out.grads.assign(model.grads(), model.grads() + model.params_numel());
  return out;
}

// Largest |a - b| over the largest |b| of the tensor (relative to the whole gradient's scale).
double grad_error(const DocRun& got, const DocRun& want) {
  double err = 0.0, scale = 0.0;
  for (size_t i = 0; i < want.grads.size(); ++i) {
    err = std::max(err, double(std::fabs(got.grads[i] - want.grads[i])));
    scale = std::max(scale, double(std::fabs(want.grads[i])));
  }
  return err / scale;
}

// Two rows of 150 tokens: documents on an attention tile's edge (64, 128), a one-token document
// (128), one inside a tile, and a last one cut by the window; the second row starts mid-document
// (its first document has no end-of-text) and packs others. Both sides are fp32 with the same
// products over different row counts and tile splits: measured differences reach 1.2e-8 of the
// loss and 8.8e-7 of the largest gradient; 1e-6 and 1e-5 leave 10x or more, while one token
// seeing the previous document or a position not restarting moves them by >= 1e-3.
void expect_packed_equals_one_by_one(const ModelConfig& cfg) {
  const int64_t S = 150, V = cfg.vocab_size;
  const std::vector<std::vector<int32_t>> rows = {packed_row(S, V, {0, 37, 64, 128, 129}, 1),
                                                  packed_row(S, V, {20, 90, 149}, 2)};
  const DocRun packed = run_packed(cfg, rows, S, true), alone = run_one_by_one(cfg, rows, S);
  EXPECT_LT(std::fabs(packed.loss - alone.loss) / alone.loss, 1e-6) << int(cfg.arch);
  EXPECT_LT(grad_error(packed, alone), 1e-5) << int(cfg.arch);
  // and without the mask the same windows give another loss (the test has something to see)
  const DocRun leaky = run_packed(cfg, rows, S, false);
  EXPECT_GT(std::fabs(leaky.loss - alone.loss) / alone.loss, 1e-3) << int(cfg.arch);
}

TEST(DocumentMask, llama_packed_windows_equal_their_documents_one_by_one) {
  expect_packed_equals_one_by_one(doc_llama());
}

// --eod-mask-loss: the packed windows' loss and gradients without each document's prediction
// from its end-of-text token equal the documents' one by one less those predictions (the same
// tolerances as above: the same products, plus one short run each); the count leaves out one
// target per end-of-text input; a window of one document without a leading end-of-text keeps
// every target and the unmasked bits.
TEST(DocumentMask, eod_loss_mask_leaves_out_each_documents_first_prediction) {
  for (const ModelConfig& cfg : {doc_llama(), doc_gpt2(PositionEmbedding::kLearned)}) {
    const int64_t S = 150, V = cfg.vocab_size;
    const std::vector<std::vector<int32_t>> rows = {packed_row(S, V, {0, 37, 64, 128, 129}, 1),
                                                    packed_row(S, V, {20, 90, 149}, 2)};
    const DocRun packed = run_packed(cfg, rows, S, true, true);
    const DocRun alone = run_one_by_one(cfg, rows, S, true);
    EXPECT_LT(std::fabs(packed.loss - alone.loss) / alone.loss, 1e-6) << int(cfg.arch);
    EXPECT_LT(grad_error(packed, alone), 1e-5) << int(cfg.arch);
    const DocRun all_targets = run_packed(cfg, rows, S, true, false);
    EXPECT_GT(std::fabs(all_targets.loss - alone.loss) / alone.loss, 1e-3) << int(cfg.arch);
    Model model(cfg, cpu_backend());
    model.set_eod_loss_mask(kEot);
    std::vector<int32_t> in, tg;
    for (const auto& r : rows) {
      in.insert(in.end(), r.begin(), r.begin() + S);
      tg.insert(tg.end(), r.begin() + 1, r.end());
    }
    EXPECT_EQ(model.counted_targets(in.data(), tg.data(), 2 * S), 2 * S - 8);  // 5 + 3 inputs
    const std::vector<std::vector<int32_t>> one = {packed_row(S, V, {}, 4)};
    const DocRun masked = run_packed(cfg, one, S, true, true),
                 plain = run_packed(cfg, one, S, false);
    EXPECT_EQ(masked.loss, plain.loss);
    EXPECT_EQ(0, std::memcmp(masked.grads.data(), plain.grads.data(),
                             masked.grads.size() * sizeof(float)));
  }
}

TEST(DocumentMask, gpt2_learned_and_rotary_positions_restart_at_each_document) {
  expect_packed_equals_one_by_one(doc_gpt2(PositionEmbedding::kLearned));
  expect_packed_equals_one_by_one(doc_gpt2(PositionEmbedding::kRope));
}

// Qwen2's biases, Qwen3's per-head q/k norms with head_dim 16 (H D = 96 != C = 48) and Llama's
// attention and MLP biases, and YaRN.
TEST(DocumentMask, qwen2_qwen3_biases_and_yarn_match) {
  ModelConfig qwen2 = doc_llama();
  qwen2.arch = Arch::kQwen2;
  expect_packed_equals_one_by_one(qwen2);
  ModelConfig qwen3 = doc_llama();
  qwen3.arch = Arch::kQwen3;
  qwen3.explicit_head_dim = 16;
  expect_packed_equals_one_by_one(qwen3);
  ModelConfig biases = doc_llama();
  biases.attention_bias = biases.mlp_bias = true;
  expect_packed_equals_one_by_one(biases);
  ModelConfig yarn = doc_llama();
  yarn.rope_scaling.type = RopeType::kYarn;
  yarn.rope_scaling.factor = 4.0;
  yarn.rope_scaling.original_max_position_embeddings = 64;
  expect_packed_equals_one_by_one(yarn);
}

// Mistral's window (30) inside documents longer than it: the key_start of each row is the later
// of the two; then Qwen3's on one of the two layers.
TEST(DocumentMask, mistral_window_within_documents_matches) {
  ModelConfig c = doc_llama();
  c.arch = Arch::kMistral;
  c.sliding_window = 30;
  expect_packed_equals_one_by_one(c);
  c.arch = Arch::kQwen3;  // on the first layer only
  c.sliding_layers = {true, false};
  expect_packed_equals_one_by_one(c);
}

// A window whose only end-of-text is its first token is one document: the bits of a run
// without masks.
TEST(DocumentMask, one_document_gives_the_unmasked_bits) {
  for (const ModelConfig& cfg : {doc_llama(), doc_gpt2(PositionEmbedding::kLearned)}) {
    const int64_t S = 150;
    const std::vector<std::vector<int32_t>> rows = {packed_row(S, cfg.vocab_size, {0}, 4),
                                                    packed_row(S, cfg.vocab_size, {}, 5)};
    const DocRun masked = run_packed(cfg, rows, S, true), plain = run_packed(cfg, rows, S, false);
    EXPECT_EQ(masked.loss, plain.loss);
    EXPECT_EQ(0, std::memcmp(masked.grads.data(), plain.grads.data(),
                             masked.grads.size() * sizeof(float)));
  }
}

TEST(DocumentMask, refuses_rope_scaling_that_follows_the_length) {
  for (RopeType t : {RopeType::kDynamic, RopeType::kLongrope}) {
    ModelConfig c = doc_llama();
    c.rope_scaling.type = t;
    c.rope_scaling.factor = 2.0;
    if (t == RopeType::kLongrope) {
      c.rope_scaling.original_max_position_embeddings = 64;
      c.rope_scaling.short_factor = {1.0, 1.0, 1.0, 1.0};
      c.rope_scaling.long_factor = {2.0, 2.0, 2.0, 2.0};
    }
    Model model(c, cpu_backend());
    const std::string msg = test::error_message<ConfigError>([&] { model.set_document_mask(0); });
    EXPECT_NE(msg.find("follow the sequence's length"), std::string::npos) << msg;
  }
}

}  // namespace
}  // namespace memo
