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
#include "memo/io/safetensors.h"
#include "memo/optim/factory.h"

namespace memo {

struct OptimizerChoice {
  std::string name = "adamw";
  OptimizerOptions options;  // only `name`'s fields are read
};

// The chosen optimiser's hyperparameters as Optimizer::hyperparameters() reports them; null for
// an unknown name.
nlohmann::json hyperparameters_of(const OptimizerChoice& choice);

// {"name": ..., "hyperparameters": {...}}: what trainer_state.json records under "optimizer".
nlohmann::json optimizer_record(const Optimizer& optimizer);
// The inverse: the record's name and hyperparameters over default options. Also reads the
// older format (name only, AdamW's beta1/beta2/eps/weight_decay in the pinned options).
OptimizerChoice optimizer_choice_from_state(const nlohmann::json& trainer_state);

// Reads tensor `name` of `file` (numel floats) into dst in `backend`'s device space: directly when
// the host can address it, else through `staging` (grown as needed) and copy_from_host.
void read_into_device(const SafetensorsFile& file, const std::string& name, float* dst,
                      int64_t numel, Backend& backend, std::vector<float>& staging);

// Reads every state tensor of `optimizer` from `file` and sets its step count; throws DataError
// naming the tensor when the file lacks one (a checkpoint of another optimiser).
// The state lives in `backend`'s device space: read through a host copy when the host cannot
// address it.
void restore_optimizer(Optimizer& optimizer, Backend& backend, const SafetensorsFile& file,
                       int64_t steps_done, const std::string& source);

}  // namespace memo
