// `memo` (DESIGN.md section 2): of each layer below the top two, x and attn (with lse) always go to
// the host; of every other skeletal tensor the first alpha of the tokens goes to the host and the
// rest is rebuilt token-wise before the backward without re-running attention. alpha is given
// (--alpha) or chosen by the cost model (memory/alpha.h) from a warm-up micro-batch that profiles
// one layer's forward time and the device-to-host bandwidth. Results equal keep's bit for bit.
#pragma once

#include <optional>

#include "memo/memory/alpha.h"
#include "memo/memory/swap_strategy.h"

namespace memo {

struct MemoOptions {
  std::optional<double> alpha;   // fixed alpha in [0, 1]; empty: the cost model picks it
  double layer_forward_s = 0.0;  // given cost-model inputs; 0: profiled in the warm-up
  double bandwidth_bytes_per_s = 0.0;
};

// Token rows offloaded for a fraction alpha of T tokens: rounded down to a multiple of the
// backend's reproducible rows (Note [Reproducible rows] in backend/backend.h; granularity 0 or 1:
// any row), or all T when alpha * T >= T.
// Without a granularity the rebuilt rows come from products over other row sets than keep's, so
// memo's losses equal keep's only to within the rounding of those products, not bit for bit. Every
// backend with values today (the CPU) promises 128 rows, so that path runs only under test.
int64_t memo_offload_rows(double alpha, int64_t tokens, int64_t granularity);

// Whether memo sends all of a rank's `tokens` rows whatever alpha is: under tensor parallelism
// (tp > 1) a rebuild gathers the same rows of every rank, and rows that are not whole panels of
// `granularity` cannot be rebuilt bit for bit in groups (Note [Tensor-parallel activations]).
inline bool memo_moves_all_rows(int64_t tokens, int64_t granularity, int64_t tp) {
  return tp > 1 && granularity > 0 && tokens % granularity != 0;
}

// The cost model's per-layer byte sizes for one micro-batch shape (timings and host left unset).
AlphaInputs memo_alpha_sizes(const SkeletalLayout& layout, int64_t batch, int64_t seq);

class MemoStrategy final : public SwapStrategy {
 public:
  MemoStrategy(const SkeletalLayout& layout, ActivationAllocator& alloc, const SwapOptions& swap,
               const MemoOptions& options);
  std::string name() const override { return "memo"; }
  bool wants_warmup() const override;
  std::string summary() const override;    // alpha, its inputs and rows for the last shape
  double alpha() const { return alpha_; }  // of the current shape, before rounding to panels
  // The fraction of the last micro-batch's token rows it offloaded, after rounding to panels
  // (what the step ran); 0 before the first micro-batch.
  double offloaded_alpha() const;

 protected:
  int64_t choose_offload_rows(int64_t batch, int64_t seq) override;

 private:
  struct Decision {
    double alpha;
    int64_t rows;  // token rows offloaded: alpha's panels, as many as the pool holds, or all T
    std::string text;
  };
  // all_rows: every row travels whatever alpha is (LayerRunner::all_rows_travel). Throws
  // BudgetError when nothing fits.
  Decision decide(int64_t batch, int64_t seq, bool all_rows) const;

  MemoOptions options_;
  int64_t host_memory_bytes_;
  double alpha_ = 0.0;
  int64_t batch_ = 0, seq_ = 0;  // the last shape begin_step saw
  bool all_rows_ = false;        // and whether all its rows travel
};

}  // namespace memo
