// The four activation strategies give bitwise-identical losses and gradients for GPT-2 layers too
// (DESIGN.md section 6): learned and rotary positions, two micro-batches per step, a sequence that
// is not a multiple of 64, memo at alpha 0, 0.3 and 1, and the eval loss. The GPT-2 saved set
// (saved_fields) is what the strategies allocate, move and rebuild.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "memo/backend/caching_allocator.h"
#include "memo/memory/strategy_factory.h"
#include "memo/memory/swap_strategy.h"
#include "memo/model/model.h"
#include "memory_test_util.h"

namespace memo {
namespace {}  // namespace

// Names the parameter in test output ("learned", "rope") instead of its bytes.
void PrintTo(PositionEmbedding pos, std::ostream* os) {
  *os << (pos == PositionEmbedding::kLearned ? "learned" : "rope");
}

namespace {

using testing::expect_identical;

// Static: strategies keep a reference to the config.
const ModelConfig& gpt_config(PositionEmbedding pos) {
  auto make = [](PositionEmbedding p) {
    ModelConfig c;
    c.arch = Arch::kGpt2;
    c.position_embedding = p;
    c.hidden_size = 64;
    c.intermediate_size = 4 * 64;
    c.num_hidden_layers = 5;    // layers 0..2 leave the device; every ring slot is reused
    c.num_attention_heads = 4;  // D = 16
    c.num_key_value_heads = 4;
    c.vocab_size = 97;
    c.max_position_embeddings = 512;
    c.tie_word_embeddings = true;
    c.initializer_range = 0.2;  // large enough that every path carries signal
    return c;
  };
  static const ModelConfig learned = make(PositionEmbedding::kLearned);
  static const ModelConfig rope = make(PositionEmbedding::kRope);
  return pos == PositionEmbedding::kLearned ? learned : rope;
}

constexpr int64_t kSeq = 300;  // not a multiple of 64; T = 600 = 4 panels + 88 rows
constexpr int64_t kMicro = 2;  // sequences per micro-batch
constexpr int kMicroSteps = 2;
constexpr int kSteps = 2;

struct GptRun {
  std::vector<double> losses;             // per step, then the eval loss
  std::vector<std::vector<float>> grads;  // per step
  int64_t offload_rows = -1;              // swapping strategies only
};

std::vector<int32_t> tokens(int step, int micro) {
  std::vector<int32_t> t(size_t(kMicro * kSeq + 1));
  uint64_t s = 0x9e3779b97f4a7c15ull * uint64_t(step * 16 + micro + 1);
  for (int32_t& v : t) {
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    v = int32_t(s % 97);
  }
  return t;
}

GptRun train_run(const ModelConfig& cfg, const char* kind, double alpha = -1.0) {
  Model model(cfg);
  model.init(11);
  CachingAllocator alloc;
  StrategyOptions o;
  o.kind = kind;
  if (alpha >= 0.0) o.alpha = alpha;
  std::unique_ptr<ActivationStrategy> strategy = make_strategy(cfg, alloc, o);
  GptRun r;
  const int64_t n = model.params_numel();
  for (int step = 0; step < kSteps; ++step) {
    model.zero_grads();
    double loss = 0.0;
    for (int micro = 0; micro < kMicroSteps; ++micro) {
      const std::vector<int32_t> t = tokens(step, micro);
      loss += model.forward_backward(t.data(), t.data() + 1, kMicro, kSeq, 1.0f / 1200.0f,
                                     *strategy, alloc);
    }
    r.losses.push_back(loss);
    r.grads.emplace_back(model.grads(), model.grads() + n);
    for (int64_t i = 0; i < n; ++i) model.params()[i] -= 0.5f * model.grads()[i];  // plain SGD
  }
  const std::vector<int32_t> t = tokens(99, 0);
  r.losses.push_back(model.forward_loss(t.data(), t.data() + 1, kMicro, kSeq, *strategy, alloc));
  if (auto* swap = dynamic_cast<const SwapStrategy*>(strategy.get()))
    r.offload_rows = swap->offload_rows();
  EXPECT_EQ(alloc.live_bytes(), 0) << kind;
  return r;
}

// One OpenMP thread, as in strategies_test.cc: bitwise equality holds for a fixed thread count,
// and spinning OpenMP threads beside the copy workers slows a loaded 2-core machine badly.
class GptStrategies : public ::testing::TestWithParam<PositionEmbedding> {
 protected:
  void SetUp() override {
    threads_ = omp_get_max_threads();
    omp_set_num_threads(1);
  }
  void TearDown() override { omp_set_num_threads(threads_); }
  int threads_ = 1;
};

TEST_P(GptStrategies, recompute_offload_and_memo_match_keep_bitwise) {
  const ModelConfig& cfg = gpt_config(GetParam());
  const GptRun keep = train_run(cfg, "keep");
  expect_identical(keep, train_run(cfg, "recompute"), "recompute");
  expect_identical(keep, train_run(cfg, "offload"), "offload");
  for (double alpha : {0.0, 0.3, 1.0}) {
    const GptRun r = train_run(cfg, "memo", alpha);
    expect_identical(keep, r, str("memo alpha ", alpha));
    EXPECT_EQ(r.offload_rows, alpha == 0.0 ? 0 : alpha == 1.0 ? kMicro * kSeq : 128) << alpha;
  }
}

INSTANTIATE_TEST_SUITE_P(Positions, GptStrategies,
                         ::testing::Values(PositionEmbedding::kLearned, PositionEmbedding::kRope),
                         [](const auto& info) {
                           return info.param == PositionEmbedding::kLearned ? "learned" : "rope";
                         });

}  // namespace
}  // namespace memo
