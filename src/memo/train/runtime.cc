#include "memo/train/runtime.h"

#include "memo/backend/bf16_storage.h"
#include "memo/parallel/self_communicator.h"

namespace memo {

const char* precision_name(Precision precision) {
  return precision == Precision::kBf16 ? "bf16" : "fp32";
}

Runtime::Runtime(Backend& device, std::unique_ptr<Backend> owned_device, Precision precision,
                 Communicator* world, std::unique_ptr<Communicator> owned_world, std::ostream& out)
    : owned_device_(std::move(owned_device)),
      device_(device),
      precision_(precision),
      storage_(precision == Precision::kBf16 ? std::make_unique<Bf16StorageBackend>(device)
                                             : nullptr),
      backend_(storage_ ? storage_.get() : &device_),
      owned_world_(owned_world ? std::move(owned_world)
                   : world     ? nullptr
                               : std::make_unique<SelfCommunicator>(*backend_)),
      world_(owned_world_ ? owned_world_.get() : world),
      processes_(world ? world : world_),
      out_(out) {}

Runtime::~Runtime() = default;

}  // namespace memo
