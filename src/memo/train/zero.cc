#include "memo/train/zero.h"

#include "memo/core/error.h"

namespace memo {

std::vector<ZeroShard> zero_shards(const ParamLayout& layout, int ranks) {
  MEMO_CHECK(ranks >= 1, "ZeRO over ", ranks, " ranks");
  const std::vector<ParamInfo>& params = layout.params();
  const int64_t total = layout.total_numel();
  std::vector<ZeroShard> shards(static_cast<size_t>(ranks));
  size_t t = 0;
  for (int r = 0; r < ranks; ++r) {
    ZeroShard& s = shards[size_t(r)];
    s.first = t;
    // a tensor goes to the rank whose even share of the buffer holds its midpoint
    const int64_t target = total * (r + 1) / ranks;
    while (t < params.size() && (r + 1 == ranks || params[t].offset + params[t].numel / 2 < target))
      ++t;
    s.last = t;
    s.begin = s.first < params.size() ? params[s.first].offset : total;
    s.end = s.last < params.size() ? params[s.last].offset : total;
  }
  return shards;
}

void all_gather_shards(Tensor params, const std::vector<ZeroShard>& shards, Communicator& group) {
  MEMO_CHECK(int(shards.size()) == group.size(), shards.size(), " shards for ", group.size(),
             " ranks");
  for (int r = 0; r < group.size(); ++r) {
    const ZeroShard& s = shards[size_t(r)];
    if (s.end > s.begin) group.broadcast(params.part(s.begin, {s.end - s.begin}), r);
  }
}

OptimizerOptions shard_options(OptimizerOptions options, const ZeroShard& shard) {
  if (!options.decay.empty())
    options.decay = std::vector<bool>(options.decay.begin() + std::ptrdiff_t(shard.first),
                                      options.decay.begin() + std::ptrdiff_t(shard.last));
  return options;
}

GatheredState gather_optimizer_state(Optimizer& mine, const std::string& name,
                                     const OptimizerOptions& options, const ParamLayout& full,
                                     const std::vector<ZeroShard>& shards, Communicator& group,
                                     Backend& backend) {
  GatheredState out;
  if (group.rank() != 0) {
    for (const StateTensor& s : mine.state()) group.send(s.tensor(), 0);
    return out;
  }
  out.tensors = mine.state();
  for (int r = 1; r < group.size(); ++r) {
    // an optimiser of rank r's shard, to receive its state into (the same tensors, same order)
    const ZeroShard& shard = shards[size_t(r)];
    out.layouts.push_back(std::make_unique<ParamLayout>(full, shard.first, shard.last));
    out.holders.push_back(
        make_optimizer(name, *out.layouts.back(), shard_options(options, shard), backend));
    for (const StateTensor& s : out.holders.back()->state()) {
      group.recv(s.tensor(), r);
      out.tensors.push_back(s);
    }
  }
  return out;
}

}  // namespace memo
