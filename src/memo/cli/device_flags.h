// --device and --precision: which backend a command runs on (backend/backend.h).
#pragma once

#include <memory>
#include <string>

#include "memo/backend/backend.h"

namespace memo::cli {

// "cpu": null (the process's CPU backend); "cuda": the CUDA backend on GPU 0 (ConfigError with the
// reason where this build has none or no GPU can be used). precision: "fp32", or "bf16" which no
// backend runs yet (refused with a ConfigError that says so).
std::unique_ptr<Backend> make_backend(const std::string& device, const std::string& precision);

}  // namespace memo::cli
