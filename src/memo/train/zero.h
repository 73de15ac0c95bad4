// ZeRO stage 1 (Rajbhandari et al. 2020) over the data-parallel ranks: each rank keeps the
// optimiser state of, and updates, one contiguous run of whole parameter tensors (its shard); the
// gradients are still summed over all ranks (so the norm, clipping and the noise scale see the
// whole gradient), and after the update every rank broadcasts its shard's new weights to the
// others. Whole tensors, not equal slices of the flat buffer, because several optimisers work per
// tensor (Adafactor's factored moments, per-tensor weight decay); each tensor's update is the
// same arithmetic as without sharding, so ZeRO-1 equals ZeRO-0 bit for bit. A checkpoint holds the
// whole optimiser state under the usual names (rank 0 gathers it), so it resumes on any layout.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "memo/model/params.h"
#include "memo/optim/factory.h"
#include "memo/optim/optimizer.h"
#include "memo/parallel/communicator.h"

namespace memo {

// Tensors [first, last) of the layout, elements [begin, end) of the flat buffer.
struct ZeroShard {
  size_t first = 0, last = 0;
  int64_t begin = 0, end = 0;
};

// One shard per rank, in rank order: contiguous runs of tensors whose element counts are as even
// as whole tensors allow (a rank may hold none when there are more ranks than tensors).
std::vector<ZeroShard> zero_shards(const ParamLayout& layout, int ranks);

// After each rank has updated its shard of params: every rank's shard on every rank (a broadcast
// from each owner, in rank order; collective).
void all_gather_shards(Tensor params, const std::vector<ZeroShard>& shards, Communicator& group);

// The whole optimiser state for a checkpoint, on rank 0: its own tensors and every other rank's,
// received in each rank's state() order (collective; the other ranks send theirs and get an empty
// list). `holders` keeps the received buffers alive while the tensors are written.
struct GatheredState {
  std::vector<StateTensor> tensors;
  std::vector<std::unique_ptr<ParamLayout>> layouts;
  std::vector<std::unique_ptr<Optimizer>> holders;
};
// The holders of the other ranks' state live in `backend`'s device space, where the group's
// collectives move data (the run's backend).
GatheredState gather_optimizer_state(Optimizer& mine, const std::string& name,
                                     const OptimizerOptions& options, const ParamLayout& full,
                                     const std::vector<ZeroShard>& shards, Communicator& group,
                                     Backend& backend);

// options for the optimiser of one shard: a given per-tensor weight-decay mask cut to its tensors.
OptimizerOptions shard_options(OptimizerOptions options, const ZeroShard& shard);

}  // namespace memo
