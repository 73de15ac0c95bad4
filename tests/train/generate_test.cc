// Sampling: greedy, top-k, top-p, temperature and the seed's determinism.
#include "memo/train/generate.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "data/small_tokenizer.h"
#include "memo/core/error.h"
#include "memo/io/atomic_file.h"
#include "test_util.h"

namespace memo {
namespace {

const std::vector<float> kLogits = {1.0f, 3.0f, 2.0f, 3.0f, -1.0f};

TEST(SampleToken, temperature_zero_is_argmax_with_the_lowest_id_on_ties) {
  EXPECT_EQ(sample_token(kLogits, {0.0, 0, 1.0, 1}, 0), 1);
}

TEST(SampleToken, top_k_one_and_tiny_top_p_are_greedy) {
  for (int64_t step = 0; step < 50; ++step) {
    EXPECT_EQ(sample_token(kLogits, {1.0, 1, 1.0, 7}, step), 1);
    EXPECT_EQ(sample_token(kLogits, {1.0, 0, 1e-6, 7}, step), 1);
  }
}

TEST(SampleToken, frequencies_follow_the_softmax_and_the_seed_repeats) {
  std::map<int32_t, int> count;
  const int n = 20000;
  for (int64_t step = 0; step < n; ++step) {
    const int32_t a = sample_token(kLogits, {1.0, 0, 1.0, 42}, step);
    ASSERT_EQ(a, sample_token(kLogits, {1.0, 0, 1.0, 42}, step));  // a pure function
    ++count[a];
  }
  double z = 0;
  for (float l : kLogits) z += std::exp(double(l));
  for (int32_t v = 0; v < 5; ++v) {
    const double p = std::exp(double(kLogits[size_t(v)])) / z;
    // 5 standard deviations of a binomial count: a fixed seed, so this never flickers
    EXPECT_NEAR(count[v], n * p, 5 * std::sqrt(n * p * (1 - p)) + 1) << "id " << v;
  }
}

TEST(SampleToken, top_k_two_never_draws_outside_the_two_best) {
  for (int64_t step = 0; step < 500; ++step) {
    const int32_t a = sample_token(kLogits, {2.0, 2, 1.0, 3}, step);
    EXPECT_TRUE(a == 1 || a == 3) << a;
  }
}

TEST(SampleToken, bad_options_are_refused) {
  EXPECT_THROW(sample_token(kLogits, {-1.0, 0, 1.0, 1}, 0), ConfigError);
  EXPECT_THROW(sample_token(kLogits, {1.0, 0, 0.0, 1}, 0), ConfigError);
  EXPECT_THROW(sample_token(kLogits, {1.0, -2, 1.0, 1}, 0), ConfigError);
  EXPECT_THROW(sample_token(kLogits, {INFINITY, 0, 1.0, 1}, 0), ConfigError);
}

// A reply ends, besides at end-of-text, at generation_config.json's eos_token_id (one or a list;
// ids outside the tokenizer left out), tokenizer_config.json's eos_token and the end-of-turn
// token of memo's messages template.
TEST(ReplyStopIds, follow_generation_config_tokenizer_config_and_the_chat_end) {
  test::TempDir dir;
  EXPECT_TRUE(reply_stop_ids(dir.path(), Tokenizer::bytes()).empty());
  // no generation_config.json: config.json's, as transformers makes its defaults from it
  write_file_atomic(dir / "config.json", R"({"bos_token_id": 1, "eos_token_id": [3, 4]})");
  EXPECT_EQ(reply_stop_ids(dir.path(), Tokenizer::bytes()), (std::vector<int32_t>{3, 4}));
  write_file_atomic(dir / "generation_config.json", R"({"eos_token_id": [5, 7, 5, 999999]})");
  EXPECT_EQ(reply_stop_ids(dir.path(), Tokenizer::bytes()), (std::vector<int32_t>{5, 7}));
  write_file_atomic(dir / "generation_config.json", R"({"eos_token_id": 9})");
  EXPECT_EQ(reply_stop_ids(dir.path(), Tokenizer::bytes()), (std::vector<int32_t>{9}));
  nlohmann::json tj = test::small_tokenizer_json();
  const int32_t im_end = tj["added_tokens"].back()["id"].get<int32_t>() + 1;
  tj["added_tokens"].push_back({{"id", im_end}, {"content", "<|im_end|>"}, {"special", true}});
  const Tokenizer chat = Tokenizer::from_hf_json(tj, "chat");
  EXPECT_EQ(reply_stop_ids(dir.path(), chat), (std::vector<int32_t>{9, im_end}));
}

// Temperature 2: p_v proportional to exp(l_v / 2) (kills a temperature that multiplies).
TEST(SampleToken, temperature_divides_the_logits) {
  std::map<int32_t, int> count;
  const int n = 20000;
  for (int64_t step = 0; step < n; ++step) ++count[sample_token(kLogits, {2.0, 0, 1.0, 42}, step)];
  double z = 0;
  for (float l : kLogits) z += std::exp(double(l) / 2.0);
  for (int32_t v = 0; v < 5; ++v) {
    const double p = std::exp(double(kLogits[size_t(v)]) / 2.0) / z;
    EXPECT_NEAR(count[v], n * p, 5 * std::sqrt(n * p * (1 - p)) + 1) << "id " << v;
  }
}

// top-p 0.9 keeps ids 1, 3, 2 (mass 0.946): the draw is renormalised over them.
TEST(SampleToken, top_p_draws_from_the_renormalised_nucleus) {
  std::map<int32_t, int> count;
  const int n = 20000;
  for (int64_t step = 0; step < n; ++step) ++count[sample_token(kLogits, {1.0, 0, 0.9, 42}, step)];
  const double z = std::exp(3.0) * 2 + std::exp(2.0);
  EXPECT_EQ(count[0] + count[4], 0);
  for (int32_t v : {1, 2, 3}) {
    const double p = std::exp(double(kLogits[size_t(v)])) / z;
    EXPECT_NEAR(count[v], n * p, 5 * std::sqrt(n * p * (1 - p)) + 1) << "id " << v;
  }
}

}  // namespace
}  // namespace memo
