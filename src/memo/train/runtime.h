// What every command runs on: the backend (a device's, under bf16 storage for mixed precision),
// the job's processes and where progress is printed. Built once by the command line from
// --device, --precision and the launcher (cli/runtime.h: the composition root) and handed down;
// nothing below cli/ picks a device, a precision or a process group. Names no concrete backend or
// communicator: a new one plugs in where cli/ builds this.
#pragma once

#include <memory>
#include <ostream>
#include <string>

#include "memo/backend/backend.h"
#include "memo/parallel/communicator.h"

namespace memo {

enum class Precision { kFp32, kBf16 };
// "fp32" or "bf16", as --precision takes it and trainer_state.json records it.
const char* precision_name(Precision precision);

class Runtime {
 public:
  // device: the backend that computes (the CPU's, or a GPU's); owned_device: the same when this
  // runtime owns it (null for the process's CPU backend). kBf16 wraps it in bf16 storage (Note
  // [bf16 storage by conversion] in backend/bf16_storage.h). world: the job's processes, from
  // the launcher (the MPI world, which outlives the runtime so that a failing rank can still take
  // the job down; null: this process alone); owned_world: what the job's collectives go over
  // instead when set (NCCL over that world, between GPUs). out: where rank 0 prints; the other
  // ranks' log() prints nothing.
  Runtime(Backend& device, std::unique_ptr<Backend> owned_device, Precision precision,
          Communicator* world, std::unique_ptr<Communicator> owned_world, std::ostream& out);
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  // What the command computes on: device(), or bf16 storage over it.
  Backend& backend() const { return *backend_; }
  // The device's own backend under any bf16 storage (its GPU, stream and kernel sizes).
  Backend& device() const { return device_; }
  Precision precision() const { return precision_; }
  // The job: every process of it (a SelfCommunicator over backend() for one process).
  Communicator& world() const { return *world_; }
  // The same processes as the launcher connects them, for messages in host memory: the MPI
  // world, which is world() unless the collectives go over NCCL (Note [Host-staged groups] in
  // parallel/host_staged_communicator.h).
  Communicator& processes() const { return *processes_; }
  bool parallel() const { return world_->size() > 1; }
  // Rank 0 speaks for the job.
  bool lead() const { return world_->rank() == 0; }
  // Progress lines and reports: the command's output on rank 0, a stream without a buffer on the
  // other ranks.
  std::ostream& log() { return lead() ? out_ : silent_; }

 private:
  std::unique_ptr<Backend> owned_device_;
  Backend& device_;
  Precision precision_;
  std::unique_ptr<Backend> storage_;  // bf16 storage over device_, for kBf16
  Backend* backend_;
  std::unique_ptr<Communicator> owned_world_;  // NCCL, or the SelfCommunicator of one process
  Communicator* world_;
  Communicator* processes_;
  std::ostream& out_;
  std::ostream silent_{nullptr};
};

}  // namespace memo
