// The one place an activation strategy is chosen from its name and options (the trainer, the bench
// and the tests all come through here).
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "memo/memory/strategy.h"

namespace memo {

class MemorySpace;

struct StrategyOptions {
  std::string kind = "keep";      // keep | recompute | offload | memo
  std::optional<double> alpha;    // memo only: fixed alpha in [0, 1]; empty: the cost model's
  int64_t host_memory_bytes = 0;  // offload, memo: host pool budget (0: unlimited)
  double copy_bandwidth_gb_per_s = 0.0;  // offload, memo: copy throttle in GB/s (0: none)
  // offload, memo: a host pool shared with other strategies (SwapOptions::host_space)
  MemorySpace* host_space = nullptr;
  // Given cost-model inputs for memo (0: profiled in a warm-up micro-batch).
  double layer_forward_s = 0.0;
  double bandwidth_bytes_per_s = 0.0;
  // Test only: random delays before each copy, and NaN-poisoning of released buffers.
  double max_random_delay_s = 0.0;
  uint64_t random_delay_seed = 0;
  bool poison_released = false;
};

inline constexpr const char* kStrategyNames[] = {"keep", "recompute", "offload", "memo"};
// The slowest --copy-bandwidth (GB/s) a run takes; 0 means no throttle.
inline constexpr double kMinCopyBandwidthGBs = 1e-3;

// Throws ConfigError naming the flag and the allowed values on a bad combination.
std::unique_ptr<ActivationStrategy> make_strategy(const SkeletalLayout& layout,
                                                  ActivationAllocator& alloc,
                                                  const StrategyOptions& options);

// Host bytes one offloaded layer of a micro-batch of this shape (a rank's share of the sequence)
// takes from the strategy's pool: offload all its token rows, memo with a given alpha its rows
// (whole multiples of `granularity`, the backend's reproducible_rows), memo's cost model at least
// alpha 0's (x and the attention), and all T rows under --tp T > 1 where they are not whole panels
// (memo_moves_all_rows); 0 for keep and recompute. memo train checks it against --host-memory
// before step 1, and memo plan --config reports it.
int64_t strategy_host_layer_bytes(const StrategyOptions& options, const SkeletalLayout& layout,
                                  int64_t batch, int64_t local_seq, int64_t granularity,
                                  int64_t tp = 1);

}  // namespace memo
