// --device and --precision: which backend a command runs on (backend/backend.h).
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <string>

#include "memo/backend/backend.h"

namespace memo::cli {

struct DeviceFlags {
  std::string device = "cpu";
  std::string precision;  // fp32 or bf16; unset: the device's default (default_precision)
};
void add_device_flags(CLI::App& cmd, DeviceFlags& flags);
// A run's precision where --precision is not given: bf16 mixed precision on cuda (the tensor
// cores' format), fp32 on the CPU (whose kernels are f32; bf16 there is storage by conversion).
inline std::string default_precision(const std::string& device) {
  return device == "cuda" ? "bf16" : "fp32";
}

// "cpu": the process's CPU backend; "cuda": the CUDA backend on GPU 0 (ConfigError with the reason
// where this build has none or no GPU can be used). precision "bf16": bf16 weights and activations
// over that backend's f32 kernels (Note [bf16 storage by conversion] in backend/bf16_storage.h).
// Owns what it made.
class DeviceChoice {
 public:
  explicit DeviceChoice(const DeviceFlags& flags);
  // What the command computes on.
  Backend& backend() const { return *backend_; }
  // Null for the CPU in fp32 (train()'s default).
  Backend* backend_or_null() const { return device_owned_ || bf16_ ? backend_ : nullptr; }
  // The device's own backend, under any bf16 storage: the CUDA backend, for its GPU and stream.
  Backend& device() const { return *device_; }
  bool cuda() const { return device_owned_ != nullptr; }

 private:
  std::unique_ptr<Backend> device_owned_;  // the CUDA backend; null for the CPU
  std::unique_ptr<Backend> bf16_;          // bf16 storage over device_, with --precision bf16
  Backend* device_;
  Backend* backend_;
};

}  // namespace memo::cli
