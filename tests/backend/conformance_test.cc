// The conformance suite's backends in memo_tests (tests/backend/conformance.h): the CPU (against
// itself: the harness and the entry checks), bf16 storage over the CPU (its f32 arguments pass
// through: the CPU's bits) and meta (shapes only: the CPU's errors, no crash).
#include "backend/conformance.h"

#include "memo/backend/bf16_storage.h"
#include "memo/cpu/cpu_backend.h"
#include "memo/meta/meta_backend.h"

namespace memo::test {
namespace {

const bool kCpu = register_conformance_backend(
    {"cpu", [] { return std::unique_ptr<Backend>(std::make_unique<CpuBackend>()); },
     Promise::kCpuBits});
const bool kBf16 = register_conformance_backend(
    {"bf16_storage_over_cpu",
     [] { return std::unique_ptr<Backend>(std::make_unique<Bf16StorageBackend>(cpu_backend())); },
     Promise::kCpuBits});
const bool kMeta = register_conformance_backend(
    {"meta", [] { return std::unique_ptr<Backend>(std::make_unique<MetaBackend>(cpu_backend())); },
     Promise::kShapesOnly});

}  // namespace
}  // namespace memo::test
