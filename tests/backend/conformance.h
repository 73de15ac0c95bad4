// The backend conformance suite (the every-backend-against-the-CPU table of STYLE.md section 8):
// a backend registers a factory and what it promises, and one parameterised test
// (BackendConformance.every_kernel_matches_the_cpu, conformance.cc) runs every kernel of the
// Backend interface on random inputs of awkward shapes on it and on cpu_backend(), and compares.
// memo_tests registers the CPU, bf16 storage over the CPU and meta (conformance_test.cc);
// memo_cuda_tests registers CUDA (tests/gpu/cuda_backend_check.cc).
#pragma once

#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "memo/backend/backend.h"

namespace memo::test {

enum class Promise {
  kCpuBits,    // the CPU's bits on every kernel (f32 arguments through bf16 storage pass untouched)
  kTolerance,  // the CPU's results within conformance.cc's kTolerance (another summation order)
  kShapesOnly  // no values (meta): the entry checks' errors, and no crash on good shapes
};

struct ConformanceBackend {
  std::string name;  // a gtest parameter name: letters, digits and _
  // The backend under test, or null where this machine cannot make it (the test then skips).
  std::function<std::unique_ptr<Backend>()> make;
  Promise promise = Promise::kCpuBits;
};

// gtest prints a parameter by its name.
inline void PrintTo(const ConformanceBackend& b, std::ostream* os) { *os << b.name; }

// Adds a backend to the suite; returns true, for a namespace-scope static initialiser.
bool register_conformance_backend(ConformanceBackend backend);
const std::vector<ConformanceBackend>& conformance_backends();

}  // namespace memo::test
