// train() in one process, on a runtime made as the command line makes it (cli/runtime.h).
#pragma once

#include <ostream>

#include "memo/cpu/cpu_backend.h"
#include "memo/train/runtime.h"
#include "memo/train/trainer.h"

namespace memo::test {

// On `device` (the process's CPU backend by default), in `precision` (bf16: bf16 storage over it).
inline TrainResult train_on(const TrainOptions& options, std::ostream& out,
                            Backend& device = cpu_backend(),
                            Precision precision = Precision::kFp32) {
  Runtime runtime(device, nullptr, precision, nullptr, nullptr, out);
  return train(options, runtime);
}

}  // namespace memo::test
