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

// Throws ConfigError naming the flag and the allowed values on a bad combination.
std::unique_ptr<ActivationStrategy> make_strategy(const SkeletalLayout& layout,
                                                  ActivationAllocator& alloc,
                                                  const StrategyOptions& options);

}  // namespace memo
