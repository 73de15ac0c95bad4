// Builds an optimiser by name ("sgd", "signsgd", "adam", "adamw", "adagrad", "rmsprop",
// "adafactor", "lion") from one options struct holding every optimiser's options; only the named
// one's are read. An unknown name throws ConfigError listing the valid ones.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "memo/optim/adafactor.h"
#include "memo/optim/adagrad.h"
#include "memo/optim/adam.h"
#include "memo/optim/adamw.h"
#include "memo/optim/lion.h"
#include "memo/optim/optimizer.h"
#include "memo/optim/rmsprop.h"
#include "memo/optim/sgd.h"
#include "memo/optim/signsgd.h"

namespace memo {

struct OptimizerOptions {
  SgdOptions sgd;
  SignSgdOptions signsgd;
  AdamOptions adam;
  AdamWOptions adamw;
  AdagradOptions adagrad;
  RmspropOptions rmsprop;
  AdafactorOptions adafactor;
  LionOptions lion;
  std::vector<bool> decay;  // one weight-decay flag per tensor; empty: decay_matrices_only(layout)
};

// The valid names, in the order above.
const std::vector<std::string>& optimizer_names();

// The optimiser keeps a reference to layout, which must outlive it; its state lives in the
// device space of `backend`, whose kernels run its updates.
std::unique_ptr<Optimizer> make_optimizer(const std::string& name, const ParamLayout& layout,
                                          const OptimizerOptions& options, Backend& backend);

// Bytes of the named optimiser's state tensors (what Optimizer::state() lists) for `layout`,
// without allocating them: what the device budget counts. Throws ConfigError for an unknown name.
int64_t optimizer_state_bytes(const std::string& name, const ParamLayout& layout,
                              const OptimizerOptions& options);

// options with the named optimiser's fields replaced by those in hyperparameters (as written by
// Optimizer::hyperparameters(), e.g. from a checkpoint). Throws ConfigError for an unknown
// optimiser, an unknown key (naming the valid keys) or a value of the wrong type.
OptimizerOptions with_hyperparameters(OptimizerOptions options, const std::string& name,
                                      const nlohmann::json& hyperparameters);

}  // namespace memo
