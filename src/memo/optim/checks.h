// Option and mask checks shared by the optimisers: each throws ConfigError naming the optimiser,
// the option, its value and the allowed range.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "memo/model/params.h"

namespace memo {

// decay must hold one flag per tensor of layout.
void check_decay_mask(const ParamLayout& layout, const std::vector<bool>& decay);
// params and grads must be flat f32 buffers of layout.total_numel() elements.
void check_step_tensors(const ParamLayout& layout, ConstTensor params, ConstTensor grads);

// Throws unless ok: "<optimizer> option <option> = <value> is outside <allowed>".
void check_option(bool ok, const std::string& optimizer, const std::string& option, double value,
                  const std::string& allowed);

}  // namespace memo

namespace memo {

// Loops over fewer elements run on one thread: below this a parallel region's fork and barrier
// cost more than the loop (and on an oversubscribed machine a descheduled thread stalls the
// barrier). Results do not depend on it: every loop is elementwise or uses fixed chunks.
inline constexpr int64_t kParallelMinNumel = int64_t(1) << 14;

}  // namespace memo
