// `offload`: every skeletal tensor of each layer below the top two goes to the host after the
// layer's forward and comes back before its backward; nothing is recomputed. The swap scheduler
// (rounding buffers, streams, events) is memo's, with alpha = 1 (memory/swap_strategy.h).
#pragma once

#include "memo/memory/swap_strategy.h"

namespace memo {

class OffloadStrategy final : public SwapStrategy {
 public:
  OffloadStrategy(const SkeletalLayout& layout, ActivationAllocator& alloc,
                  const SwapOptions& options)
      : SwapStrategy(layout, alloc, options) {}
  std::string name() const override { return "offload"; }
  std::string summary() const override;

 protected:
  int64_t choose_offload_rows(int64_t batch, int64_t seq) override;
};

}  // namespace memo
