// --device and --precision: which backend a command runs on (backend/backend.h).
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <string>

#include "memo/backend/backend.h"

namespace memo::cli {

struct DeviceFlags {
  std::string device = "cpu";
  std::string precision = "fp32";
};
void add_device_flags(CLI::App& cmd, DeviceFlags& flags);

// "cpu": the process's CPU backend; "cuda": the CUDA backend on GPU 0 (ConfigError with the reason
// where this build has none or no GPU can be used). precision: "fp32", or "bf16", which no backend
// runs yet (refused with a ConfigError that says so). Owns what it made.
class DeviceChoice {
 public:
  explicit DeviceChoice(const DeviceFlags& flags);
  Backend& backend() const { return *backend_; }
  // Null for the CPU (train()'s default).
  Backend* backend_or_null() const { return owned_.get(); }

 private:
  std::unique_ptr<Backend> owned_;
  Backend* backend_;
};

}  // namespace memo::cli
