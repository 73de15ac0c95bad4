// The trainer's optimiser: which one (by name) and its hyperparameters, built through the factory
// (optim/factory.h), recorded in trainer_state.json and restored exactly on resume (see Note
// [Optimizer state]). Not here: the optimisers themselves or the checkpoint format.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "memo/backend/backend.h"
#include "memo/io/safetensors_set.h"
#include "memo/optim/factory.h"

namespace memo {

struct OptimizerChoice {
  std::string name = "adamw";
  OptimizerOptions options;  // only `name`'s fields are read
};

// The chosen optimiser's hyperparameters as Optimizer::hyperparameters() reports them; null for
// an unknown name.
nlohmann::json hyperparameters_of(const OptimizerChoice& choice);

// Whether the optimiser sets its own step size and ignores the learning rate: Adafactor with its
// relative step (on by default). Then --lr, a schedule or an lr sweep would change nothing.
bool ignores_learning_rate(const OptimizerChoice& choice);

// Refuses (ConfigError) an optimiser whose state tensor parallelism over tp ranks cannot split:
// Adafactor's factored statistics are of whole matrices. memo train and memo plan alike.
void check_tensor_parallel_optimizer(const std::string& optimizer, int64_t tp);

// {"name": ..., "hyperparameters": {...}}: what trainer_state.json records under "optimizer".
nlohmann::json optimizer_record(const Optimizer& optimizer);
// The inverse: the record's name and hyperparameters over default options. Also reads the
// older format (name only, AdamW's beta1/beta2/eps/weight_decay in the pinned options).
OptimizerChoice optimizer_choice_from_state(const nlohmann::json& trainer_state);

// Reads tensor `name` of `file` (of exactly `shape`) into dst in `backend`'s device space:
// directly when the host can address it, else through `staging` (grown as needed) and
// copy_from_host.
void read_into_device(const SafetensorsSet& file, const std::string& name, float* dst,
                      const std::vector<int64_t>& shape, Backend& backend,
                      std::vector<float>& staging);
// The parameter whose part under tensor parallelism a tensor named `name` of numel floats is: the
// parameter itself, or for an optimiser's "<kind>.<parameter>" its parameter when it has the
// parameter's shape; null for a tensor that every rank holds whole. Checkpoints hold whole
// tensors (Note [Tensor-parallel parameters] in model/params.h).
const ParamInfo* split_param(const ParamLayout& layout, const std::string& name, int64_t numel);
// read_into_device of rank layout.shard()'s part of a whole tensor of `split` (its full_shape;
// null: the whole tensor, of `shape`). The part alone is read: host memory holds the part, never
// the whole tensor.
void read_part_into_device(const SafetensorsSet& file, const std::string& name,
                           const ParamLayout& layout, const ParamInfo* split, float* dst,
                           const std::vector<int64_t>& shape, Backend& backend,
                           std::vector<float>& staging);

// Reads every state tensor of `optimizer` from `file` and sets its step count; throws DataError
// naming the tensor when the file lacks one (a checkpoint of another optimiser).
// The state lives in `backend`'s device space: read through a host copy when the host cannot
// address it.
// Under tensor parallelism (layout.shard()), each state tensor of a split parameter is read as
// this rank's part of the whole one.
void restore_optimizer(Optimizer& optimizer, Backend& backend, const SafetensorsSet& file,
                       int64_t steps_done, const std::string& source, const ParamLayout& layout);

}  // namespace memo
