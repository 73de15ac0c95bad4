// The KV-cache decoder against the model it decodes: the prompt's logits against Model's forward
// (through its losses), every incremental step against an independent float64 PyTorch forward of
// the whole sequence, and greedy generation with the cache against greedy generation that re-runs
// the whole sequence for every token. LLaMA (grouped-query) and GPT-2 (learned and rotary).
#include "memo/model/kv_decoder.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "memo/backend/caching_allocator.h"
#include "memo/core/random.h"
#include "memo/cpu/cpu_backend.h"
#include "memo/data/token_data.h"
#include "memo/data/tokenizer.h"
#include "memo/io/checkpoint.h"
#include "memo/io/safetensors.h"
#include "memo/memory/strategy.h"
#include "memo/train/generate.h"
#include "model/torch_compare_util.h"
#include "test_util.h"

namespace memo {
namespace {

ModelConfig tiny_decoder_llama() {
  ModelConfig c;
  c.hidden_size = 48;
  c.intermediate_size = 72;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 6;  // D = 8
  c.num_key_value_heads = 2;  // grouped-query
  c.vocab_size = 256;
  c.max_position_embeddings = 160;
  c.initializer_range = 0.2;  // larger than HF's 0.02: logits spread out, no near ties
  return c;
}

ModelConfig tiny_decoder_gpt(PositionEmbedding pos) {
  ModelConfig c;
  c.arch = Arch::kGpt2;
  c.position_embedding = pos;
  c.hidden_size = 48;
  c.intermediate_size = 4 * 48;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 6;
  c.num_key_value_heads = 6;
  c.vocab_size = 256;
  c.max_position_embeddings = 160;
  c.tie_word_embeddings = true;
  c.initializer_range = 0.2;
  return c;
}

std::vector<ModelConfig> configs() {
  return {tiny_decoder_llama(), tiny_decoder_gpt(PositionEmbedding::kLearned),
          tiny_decoder_gpt(PositionEmbedding::kRope)};
}

std::vector<int32_t> some_tokens(int64_t n, uint64_t seed) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (size_t i = 0; i < t.size(); ++i) t[i] = int32_t(mix(seed, i) % 256);
  return t;
}

double max_abs_diff(std::span<const float> a, std::span<const double> b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(double(a[i]) - b[i]));
  return m;
}

TEST(KvDecoder, prompt_logits_equal_the_model_forward) {
  for (const ModelConfig& config : configs()) {
    Model model(config, cpu_backend());
    model.init(3);
    const int64_t S = 40, V = config.vocab_size;
    const std::vector<int32_t> prompt = some_tokens(S, 5);
    KvDecoder decoder(model, S);
    std::vector<float> logits(static_cast<size_t>(V));
    decoder.forward(prompt, logits);
    // Model's forward gives losses, not logits: with every target fixed but the last,
    // loss(last target = v) - loss(last target = 0) = logit[0] - logit[v]. A forward an id: every
    // 7th id (each row of the head's 8-row blocks in turn), the last and the largest logit's.
    CachingAllocator alloc;
    KeepStrategy keep(skeletal_layout(config, DType::kF32), alloc);
    std::vector<int32_t> targets = some_tokens(S, 6);
    auto loss_of = [&](int32_t v) {
      targets.back() = v;
      return model.forward_loss(prompt.data(), targets.data(), 1, S, keep, alloc);
    };
    const double loss0 = loss_of(0);
    std::set<int32_t> ids{int32_t(V - 1),
                          int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin())};
    for (int32_t v = 7; v < V; v += 7) ids.insert(v);
    for (const int32_t v : ids)
      // 1e-4: the loss sums 40 float losses in double; the decoder's head product is one row
      EXPECT_NEAR(double(logits[size_t(v)] - logits[0]), loss0 - loss_of(v), 1e-4)
          << "arch " << int(config.arch) << " id " << v;
  }
}

TEST(KvDecoder, greedy_with_cache_equals_greedy_without_for_64_tokens) {
  const Tokenizer bytes = Tokenizer::bytes();
  for (const ModelConfig& config : configs()) {
    Model model(config, cpu_backend());
    model.init(11);
    GenerateOptions o;
    o.max_new_tokens = 64;
    o.sampling.temperature = 0.0;
    const GenerateResult cached = generate(model, bytes, "In the beginning", o);
    o.kv_cache = false;
    const GenerateResult full = generate(model, bytes, "In the beginning", o);
    EXPECT_EQ(cached.new_ids.size(), 64u);
    EXPECT_EQ(cached.new_ids, full.new_ids) << "arch " << int(config.arch);
    EXPECT_EQ(cached.text, bytes.decode(cached.new_ids));
  }
}

// Document masks: the prompt's last document alone (from its last '|', byte 124, which stays)
// gives the bits of a prompt that is that document, and not those of the whole prompt.
TEST(KvDecoder, a_document_mask_generates_from_the_prompts_last_document) {
  const Tokenizer bytes = Tokenizer::bytes();
  const ModelConfig config = configs().front();
  Model model(config, cpu_backend());
  model.init(11);
  GenerateOptions o;
  o.max_new_tokens = 8;
  o.sampling.temperature = 0.0;
  o.stop_at_end_of_text = false;
  const GenerateResult whole = generate(model, bytes, "And God said|In the beginning", o);
  const GenerateResult alone = generate(model, bytes, "|In the beginning", o);
  o.document_start = '|';
  const GenerateResult masked = generate(model, bytes, "And God said|In the beginning", o);
  EXPECT_EQ(masked.prompt_ids, bytes.encode("|In the beginning"));
  EXPECT_EQ(masked.first_logits, alone.first_logits);
  EXPECT_EQ(masked.new_ids, alone.new_ids);
  EXPECT_NE(masked.first_logits, whole.first_logits);
  EXPECT_EQ(generate(model, bytes, "no document start", o).prompt_ids,
            bytes.encode("no document start"));  // one document: as it is
}

// The prompt (70 tokens), then one token at a time to 90: each step's logits against the
// PyTorch reference's logits of a forward over all 90.
void expect_cached_steps_match_pytorch(const ModelConfig& config, int64_t S = 90,
                                       int64_t prompt = 70) {
  test::TempDir dir;
  Model model(config, cpu_backend());
  model.init(21);
  test::perturb_biases_and_norms(model, 13);
  CheckpointData data;
  data.config = config;
  for (const ParamInfo& p : model.layout().params())
    data.model.push_back({p.name, p.shape, model.params() + p.offset});
  save_checkpoint(dir.path() / "ckpt", data);
  const int64_t V = config.vocab_size;  // S = 90 > one 64-row attention tile
  const std::vector<int32_t> tokens = some_tokens(S + 1, 9);
  write_llmc_tokens(dir / "tokens.bin", tokens);
  const std::string cmd = "/usr/bin/python3 " + test::source_dir() +
                          "/scripts/torch_reference.py --checkpoint " + dir.str("ckpt") +
                          " --tokens " + dir.str("tokens.bin") + " --seq " + std::to_string(S) +
                          " --batch 1 --steps 0 --lr 0 --beta1 0.9 --beta2 0.95 --eps 1e-8 " +
                          "--weight-decay 0 --logits --out " + dir.str("ref.safetensors");
  const test::CommandResult r = test::run_command(cmd);
  ASSERT_EQ(r.exit_code, 0) << cmd << "\n" << r.output;
  SafetensorsFile ref(dir / "ref.safetensors");
  std::vector<float> ref_logits(static_cast<size_t>(S * V));
  ASSERT_EQ(ref.numel("logits"), S * V);
  ref.read_into("logits", ref_logits.data(), ref.shape("logits"));
  // The prompt, then one token at a time: logits of position t against the reference's row t.
  KvDecoder decoder(model, S);
  std::vector<float> logits(static_cast<size_t>(V));
  decoder.forward(std::span<const int32_t>(tokens.data(), size_t(prompt)), logits);
  for (int64_t t = prompt - 1; t < S; ++t) {
    if (t >= prompt) decoder.forward(std::span<const int32_t>(&tokens[size_t(t)], 1), logits);
    std::vector<double> want(ref_logits.begin() + t * V, ref_logits.begin() + (t + 1) * V);
    double scale = 0;
    for (double w : want) scale = std::max(scale, std::fabs(w));
    // 2e-5 of the largest logit: fp32 sums through two layers, against float64
    EXPECT_LT(max_abs_diff(logits, want), 2e-5 * scale)
        << "arch " << int(config.arch) << " position " << t;
  }
}

TEST(KvDecoder, every_cached_step_matches_pytorch_float64) {
  for (const ModelConfig& config : configs()) expect_cached_steps_match_pytorch(config);
}

// Qwen2's biases, Mistral's sliding window (the prompt and each step over the keys of its window),
// and scaled RoPE, which decodes with the model's tables: yarn (fixed frequencies,
// an attention factor) and longrope with the prompt already past its original context (long factors
// from the start; a sequence that crosses it while decoding switches frequencies there, as
// transformers does, and then differs from one forward over the whole by design).
TEST(KvDecoder, scaled_rope_qwen2_and_mistral_steps_match_pytorch_float64) {
  ModelConfig yarn = tiny_decoder_llama();
  yarn.rope_scaling.type = RopeType::kYarn;
  yarn.rope_scaling.factor = 4.0;
  yarn.rope_scaling.original_max_position_embeddings = 40;
  yarn.rope_theta = 100.0;
  ModelConfig longrope = yarn;
  longrope.rope_scaling = RopeScaling{};
  longrope.rope_scaling.type = RopeType::kLongrope;
  longrope.rope_scaling.original_max_position_embeddings = 48;
  longrope.rope_scaling.short_factor = {1.0, 1.2, 1.5, 2.0};
  longrope.rope_scaling.long_factor = {1.0, 3.0, 6.0, 12.0};
  ModelConfig qwen2 = tiny_decoder_llama();  // and Qwen2's q/k/v biases, decoded the same way
  qwen2.arch = Arch::kQwen2;
  ModelConfig mistral = tiny_decoder_llama();  // a window shorter than the prompt (70)
  mistral.arch = Arch::kMistral;
  mistral.sliding_window = 24;
  ModelConfig qwen2_window = qwen2;  // the window (24) on the top layer only
  qwen2_window.sliding_window = 24;
  qwen2_window.sliding_layers = {false, true};
  for (const ModelConfig& config : {yarn, longrope, qwen2, mistral, qwen2_window}) {
    config.validate();
    expect_cached_steps_match_pytorch(config);
  }
}

// dynamic past its context (32 positions; it runs up to factor 4 x 32): the prompt of 70 tokens
// rotates with the base of length 70, as one forward over them does. Each later step rotates its
// new key with the base of the length then reached while the cached keys keep theirs (transformers'
// cache does the same), which no single forward over the whole reproduces.
ModelConfig dynamic_past_32() {
  ModelConfig dynamic = tiny_decoder_llama();
  dynamic.max_position_embeddings = 32;
  dynamic.rope_scaling.type = RopeType::kDynamic;
  dynamic.rope_scaling.factor = 4.0;
  dynamic.rope_theta = 100.0;
  dynamic.validate();
  return dynamic;
}

TEST(KvDecoder, dynamic_rope_prefills_past_its_context_as_one_forward) {
  expect_cached_steps_match_pytorch(dynamic_past_32(), 70, 70);
}

// A prompt prefilled in chunks (memo eval --passkey's --prefill-chunk) gives the logits of one
// forward over it, also where RoPE depends on the length: the dynamic base and longrope's factors
// are those of the whole prompt for every chunk, not of the length each chunk reaches (longrope:
// the first chunk ends inside the original context of 48, the prompt past it).
TEST(KvDecoder, a_prompt_prefilled_in_chunks_gives_the_logits_of_one_forward) {
  const ModelConfig dynamic = dynamic_past_32();
  ModelConfig longrope = tiny_decoder_llama();
  longrope.rope_scaling.type = RopeType::kLongrope;
  longrope.rope_scaling.original_max_position_embeddings = 48;
  longrope.rope_scaling.short_factor = {1.0, 1.2, 1.5, 2.0};
  longrope.rope_scaling.long_factor = {1.0, 3.0, 6.0, 12.0};
  for (const ModelConfig& config : {dynamic, longrope, tiny_decoder_llama()}) {
    config.validate();
    Model model(config, cpu_backend());
    model.init(4);
    const std::vector<int32_t> prompt = some_tokens(70, 9);
    std::vector<float> whole(size_t(config.vocab_size)), chunked(whole.size());
    KvDecoder one(model, 72), many(model, 72);
    one.prefill(prompt, whole, 4096);
    many.prefill(prompt, chunked, 16);
    for (size_t v = 0; v < whole.size(); ++v)
      ASSERT_NEAR(chunked[v], whole[v], 1e-4)
          << "rope " << int(config.rope_scaling.type) << " id " << v;
    // the next step decodes as after a prompt fed at once
    const int32_t next = 17;
    one.forward(std::span<const int32_t>(&next, 1), whole);
    many.forward(std::span<const int32_t>(&next, 1), chunked);
    for (size_t v = 0; v < whole.size(); ++v) ASSERT_NEAR(chunked[v], whole[v], 1e-4);
  }
}

// Qwen3's q/k head norms with head_dim 16 (H*D = 96 over C = 48), with and without its
// attention_bias, yarn past the original context; LLaMA's attention_bias and mlp_bias with
// head_dim 12.
TEST(KvDecoder, qwen3_and_llama_biases_steps_match_pytorch_float64) {
  ModelConfig qwen3 = tiny_decoder_llama();
  qwen3.arch = Arch::kQwen3;
  qwen3.explicit_head_dim = 16;
  qwen3.rope_scaling.type = RopeType::kYarn;
  qwen3.rope_scaling.factor = 4.0;
  qwen3.rope_scaling.original_max_position_embeddings = 40;
  ModelConfig qwen3_bias = qwen3;
  qwen3_bias.attention_bias = true;
  ModelConfig llama = tiny_decoder_llama();
  llama.explicit_head_dim = 12;
  llama.attention_bias = true;
  llama.mlp_bias = true;
  for (const ModelConfig& config : {qwen3, qwen3_bias, llama}) {
    config.validate();
    expect_cached_steps_match_pytorch(config);
  }
}

TEST(KvDecoder, refuses_more_tokens_than_positions) {
  Model model(tiny_decoder_llama(), cpu_backend());
  model.init(1);
  EXPECT_THROW(KvDecoder(model, 161), ConfigError);
  KvDecoder decoder(model, 4);
  std::vector<float> logits(256);
  const std::vector<int32_t> five = some_tokens(5, 1);
  EXPECT_THROW(decoder.forward(five, logits), ConfigError);
}

}  // namespace
}  // namespace memo
