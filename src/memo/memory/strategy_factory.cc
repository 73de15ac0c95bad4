#include "memo/memory/strategy_factory.h"

#include <cmath>

#include "memo/memory/memo.h"
#include "memo/memory/offload.h"
#include "memo/memory/recompute.h"

namespace memo {

std::unique_ptr<ActivationStrategy> make_strategy(const SkeletalLayout& layout,
                                                  ActivationAllocator& alloc,
                                                  const StrategyOptions& o) {
  const bool swaps = o.kind == "offload" || o.kind == "memo";
  if (o.alpha && o.kind != "memo")
    throw ConfigError(str("--alpha applies to --activations memo only, not ", o.kind));
  if (o.alpha && !(*o.alpha >= 0.0 && *o.alpha <= 1.0))  // NaN too
    throw ConfigError(str("--alpha ", *o.alpha, " must be in [0, 1]"));
  if (!swaps && (o.host_memory_bytes > 0 || o.copy_bandwidth_gb_per_s > 0.0))
    throw ConfigError(
        str("--host-memory and --copy-bandwidth apply to --activations offload or "
            "memo, not ",
            o.kind));
  if (o.host_memory_bytes < 0)
    throw ConfigError(str("--host-memory ", o.host_memory_bytes, " bytes must be 0 or more"));
  if (!(o.copy_bandwidth_gb_per_s >= 0.0 && std::isfinite(o.copy_bandwidth_gb_per_s)))
    throw ConfigError(str("--copy-bandwidth ", o.copy_bandwidth_gb_per_s,
                          " GB/s must be a finite number, 0 or more (0: no throttle)"));
  // a throttle below 1 MB/s holds a layer's copy for hours: a typo, not a link to study
  if (o.copy_bandwidth_gb_per_s > 0.0 && o.copy_bandwidth_gb_per_s < kMinCopyBandwidthGBs)
    throw ConfigError(str("--copy-bandwidth ", o.copy_bandwidth_gb_per_s, " GB/s is below ",
                          kMinCopyBandwidthGBs, " GB/s (1 MB/s), the slowest throttle memo takes ",
                          "(0: no throttle)"));
  SwapOptions swap;
  swap.host_memory_bytes = o.host_memory_bytes;
  swap.host_space = o.host_space;
  swap.copy.bandwidth_bytes_per_s = o.copy_bandwidth_gb_per_s * 1e9;
  swap.copy.max_random_delay_s = o.max_random_delay_s;
  swap.copy.random_delay_seed = o.random_delay_seed;
  swap.poison_released = o.poison_released;
  if (o.kind == "keep") return std::make_unique<KeepStrategy>(layout, alloc);
  if (o.kind == "recompute") return std::make_unique<RecomputeStrategy>(layout, alloc);
  if (o.kind == "offload") return std::make_unique<OffloadStrategy>(layout, alloc, swap);
  if (o.kind == "memo")
    return std::make_unique<MemoStrategy>(
        layout, alloc, swap, MemoOptions{o.alpha, o.layer_forward_s, o.bandwidth_bytes_per_s});
  throw ConfigError(
      str("--activations '", o.kind, "' is not one of keep, recompute, offload, memo"));
}

int64_t strategy_host_layer_bytes(const StrategyOptions& o, const SkeletalLayout& layout,
                                  int64_t batch, int64_t local_seq, int64_t granularity,
                                  int64_t tp) {
  if (o.kind != "offload" && o.kind != "memo") return 0;
  const int64_t T = layout.token_rows(batch, local_seq);
  const bool all = o.kind != "memo" || memo_moves_all_rows(T, granularity, tp);
  const int64_t rows = all ? T : !o.alpha ? 0 : memo_offload_rows(*o.alpha, T, granularity);
  return swap_host_layer_bytes(layout, batch, local_seq, rows);
}

}  // namespace memo
