// The target id the loss does not count, shared by the data layer (which marks a prompt's
// tokens) and the kernels (which skip it). Not a token id: an input is never ignored.
#pragma once

#include <cstdint>

namespace memo {

// kIgnoredTarget for a target the loss does not count (--eod-mask-loss, a prompt's tokens): the
// cross-entropy kernels give it a loss of 0 and a zero gradient row, and vocab_parallel_ce_stats a
// target logit of 0. Targets only: an input id is never ignored.
inline constexpr int32_t kIgnoredTarget = -2;

}  // namespace memo
