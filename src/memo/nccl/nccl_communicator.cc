#include "memo/nccl/nccl_communicator.h"

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "memo/core/error.h"

namespace memo {
namespace {

using Clock = std::chrono::steady_clock;

void check_cuda(cudaError_t rc, const char* what) {
  if (rc != cudaSuccess) throw Error(str("CUDA: ", what, ": ", cudaGetErrorString(rc)));
}

void check_nccl(ncclResult_t rc, const char* what) {
  if (rc != ncclSuccess) throw Error(str("NCCL: ", what, ": ", ncclGetErrorString(rc)));
}

size_t count_of(const ConstTensor& t, const char* op) {
  MEMO_CHECK(t.contiguous(), op, ": view ", t.shape(), " must be contiguous");
  return size_t(t.numel());
}

// The NCCL type that carries a tensor's elements. Sums are f32 only (gradients and statistics);
// gathers, broadcasts and point-to-point moves carry any dtype.
ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::kF32:
      return ncclFloat;
    case DType::kBF16:
      return ncclBfloat16;
    case DType::kF16:
      return ncclHalf;
    case DType::kF8E4M3:
      return ncclUint8;
  }
  return ncclUint8;
}
void check_sum_dtype(const ConstTensor& t, const char* op) {
  MEMO_CHECK(t.dtype() == DType::kF32, op, ": a ", dtype_name(t.dtype()), " tensor ", t.shape(),
             ": memo sums in f32");
}

}  // namespace

std::unique_ptr<NcclCommunicator> NcclCommunicator::over(MpiCommunicator& world, int device) {
  check_cuda(cudaSetDevice(device), "cudaSetDevice");
  // rank 0's unique id, as raw bytes in floats (MPI copies them unchanged between like hosts)
  ncclUniqueId id;
  if (world.rank() == 0) check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
  constexpr int64_t kFloats = (sizeof(id) + sizeof(float) - 1) / sizeof(float);
  float packed[kFloats] = {};
  std::memcpy(packed, &id, sizeof(id));
  world.broadcast(View<float>(packed, {kFloats}), 0);  // host memory: the world is MPI
  std::memcpy(&id, packed, sizeof(id));
  ncclComm_t comm;
  check_nccl(ncclCommInitRank(&comm, world.size(), id, world.rank()), "ncclCommInitRank");
  return std::unique_ptr<NcclCommunicator>(new NcclCommunicator(comm, device, world.timeout_s()));
}

std::unique_ptr<NcclCommunicator> NcclCommunicator::single(int device) {
  check_cuda(cudaSetDevice(device), "cudaSetDevice");
  ncclUniqueId id;
  check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
  ncclComm_t comm;
  check_nccl(ncclCommInitRank(&comm, 1, id, 0), "ncclCommInitRank");
  return std::unique_ptr<NcclCommunicator>(
      new NcclCommunicator(comm, device, kDefaultCommTimeoutS));
}

NcclCommunicator::NcclCommunicator(ncclComm_t comm, int device, double timeout_s)
    : comm_(comm), device_(device), timeout_s_(timeout_s) {
  try {
    check_nccl(ncclCommUserRank(comm_, &rank_), "ncclCommUserRank");
    check_nccl(ncclCommCount(comm_, &size_), "ncclCommCount");
    check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamDefault), "cudaStreamCreate");
  } catch (...) {
    ncclCommDestroy(comm_);
    throw;
  }
}

NcclCommunicator::~NcclCommunicator() {
  if (scratch_) cudaFree(scratch_);
  if (stream_) cudaStreamDestroy(stream_);
  if (comm_) ncclCommDestroy(comm_);  // null once aborted
}

void NcclCommunicator::abort() {
  if (comm_) ncclCommAbort(comm_);
  comm_ = nullptr;
}

void NcclCommunicator::follow(cudaStream_t compute) { follow_ = compute; }

void NcclCommunicator::begin(const char* op) {
  check_alive(op);
  if (!follow_) return;
  // the collective starts once the compute stream's work so far (the gradients) is done
  cudaEvent_t done;
  check_cuda(cudaEventCreateWithFlags(&done, cudaEventDisableTiming), "cudaEventCreate");
  const cudaError_t recorded = cudaEventRecord(done, follow_);
  const cudaError_t waited =
      recorded == cudaSuccess ? cudaStreamWaitEvent(stream_, done, 0) : recorded;
  cudaEventDestroy(done);  // released once the wait has seen it
  check_cuda(waited, "cudaStreamWaitEvent");
}

void NcclCommunicator::check_alive(const char* op) const {
  MEMO_CHECK(comm_ != nullptr, op, ": the NCCL communicator was aborted after an earlier error");
}

void NcclCommunicator::check_peer(const char* op, int peer) const {
  MEMO_CHECK(0 <= peer && peer < size_, op, ": rank ", peer, " is not in a group of ", size_);
}

void* NcclCommunicator::scratch(size_t bytes) {
  if (bytes > scratch_bytes_) {
    if (scratch_) check_cuda(cudaFree(scratch_), "cudaFree");
    check_cuda(cudaMalloc(&scratch_, bytes), "cudaMalloc");
    scratch_bytes_ = bytes;
  }
  return scratch_;
}

void NcclCommunicator::finish(const char* op) {
  const auto t0 = Clock::now();
  for (int polls = 0;; ++polls) {
    const cudaError_t rc = cudaStreamQuery(stream_);
    if (rc == cudaSuccess) return;
    if (rc != cudaErrorNotReady) {
      abort();
      check_cuda(rc, op);
    }
    ncclResult_t async = ncclSuccess;
    const ncclResult_t query = ncclCommGetAsyncError(comm_, &async);
    if (query != ncclSuccess || (async != ncclSuccess && async != ncclInProgress)) {
      abort();
      check_nccl(query != ncclSuccess ? query : async, op);
    }
    if (std::chrono::duration<double>(Clock::now() - t0).count() > timeout_s_) {
      abort();
      throw Error(str("rank ", rank_, " of ", size_, ": ", op, " did not complete within ",
                      timeout_s_,
                      " s (a rank died or hangs; MEMO_COMM_TIMEOUT sets the limit); stopping "
                      "the job"));
    }
    if (polls > 64) std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
}

void NcclCommunicator::finish(const char* op, Clock::time_point t0, int64_t sent,
                              int64_t received) {
  finish(op);
  count(sent, received, std::chrono::duration<double>(Clock::now() - t0).count());
}

void NcclCommunicator::all_reduce_sum(Tensor x) {
  start_all_reduce_sum(x);
  finish_reductions();
}

void NcclCommunicator::start_all_reduce_sum(Tensor x) {
  begin("all_reduce_sum");
  const auto t0 = Clock::now();
  const size_t n = count_of(x, "all_reduce_sum");
  check_sum_dtype(x, "all_reduce_sum");
  check_nccl(ncclAllReduce(x.data(), x.data(), n, ncclFloat, ncclSum, comm_, stream_),
             "ncclAllReduce");
  const int64_t moved = all_reduce_bytes(x.bytes(), size_);
  count(moved, moved, std::chrono::duration<double>(Clock::now() - t0).count());
}

void NcclCommunicator::finish_reductions() {
  const auto t0 = Clock::now();
  finish("all_reduce_sum");
  count_seconds(std::chrono::duration<double>(Clock::now() - t0).count());
}

void NcclCommunicator::reduce_scatter_sum(Tensor out, ConstTensor in) {
  begin("reduce_scatter_sum");
  count_of(in, "reduce_scatter_sum");
  MEMO_CHECK(in.numel() == out.numel() * size_, "reduce_scatter_sum: out ", out.shape(),
             " must hold 1/", size_, " of in ", in.shape());
  const auto t0 = Clock::now();
  check_sum_dtype(in, "reduce_scatter_sum");
  check_sum_dtype(out, "reduce_scatter_sum");
  check_nccl(ncclReduceScatter(in.data(), out.data(), count_of(out, "reduce_scatter_sum"),
                               ncclFloat, ncclSum, comm_, stream_),
             "ncclReduceScatter");
  const int64_t moved = reduce_scatter_bytes(out.bytes(), size_);
  finish("reduce_scatter_sum", t0, moved, moved);
}

void NcclCommunicator::all_gather(Tensor out, ConstTensor in) {
  begin("all_gather");
  count_of(out, "all_gather");
  MEMO_CHECK(out.numel() == in.numel() * size_ && out.dtype() == in.dtype(), "all_gather: out ",
             out.shape(), " ", dtype_name(out.dtype()), " must hold ", size_, " x in ", in.shape(),
             " ", dtype_name(in.dtype()));
  const auto t0 = Clock::now();
  check_nccl(ncclAllGather(in.data(), out.data(), count_of(in, "all_gather"), nccl_type(in.dtype()),
                           comm_, stream_),
             "ncclAllGather");
  const int64_t moved = all_gather_bytes(in.bytes(), size_);
  finish("all_gather", t0, moved, moved);
}

// Host doubles: gathered through the device scratch, summed on the host in rank order.
void NcclCommunicator::all_reduce_sum(std::span<double> x) {
  std::vector<double> all(x.size() * size_t(size_));
  all_gather(std::span<double>(all), std::span<const double>(x.data(), x.size()));
  for (size_t i = 0; i < x.size(); ++i) {
    double sum = all[i];
    for (int r = 1; r < size_; ++r) sum += all[size_t(r) * x.size() + i];
    x[i] = sum;
  }
}

void NcclCommunicator::all_gather(std::span<double> out, std::span<const double> in) {
  begin("all_gather");
  MEMO_CHECK(out.size() == in.size() * size_t(size_), "all_gather: out of ", out.size(),
             " must hold ", size_, " x in of ", in.size());
  const auto t0 = Clock::now();
  const size_t bytes = in.size() * sizeof(double);
  char* dev = static_cast<char*>(scratch(bytes * size_t(size_ + 1)));
  check_cuda(cudaMemcpyAsync(dev, in.data(), bytes, cudaMemcpyHostToDevice, stream_),
             "cudaMemcpyAsync");
  check_nccl(ncclAllGather(dev, dev + bytes, in.size(), ncclDouble, comm_, stream_),
             "ncclAllGather");
  // the gather is polled first: a copy into pageable memory would block the host on it, with
  // no timeout, if a peer never arrived
  finish("all_gather");
  check_cuda(cudaMemcpy(out.data(), dev + bytes, bytes * size_t(size_), cudaMemcpyDeviceToHost),
             "cudaMemcpy");
  const int64_t moved = all_gather_bytes(int64_t(bytes), size_);
  count(moved, moved, std::chrono::duration<double>(Clock::now() - t0).count());
}

void NcclCommunicator::broadcast(Tensor x, int root) {
  begin("broadcast");
  check_peer("broadcast", root);
  const auto t0 = Clock::now();
  check_nccl(ncclBroadcast(x.data(), x.data(), count_of(x, "broadcast"), nccl_type(x.dtype()), root,
                           comm_, stream_),
             "ncclBroadcast");
  finish("broadcast", t0, rank_ == root ? x.bytes() * (size_ - 1) : 0,
         rank_ == root ? 0 : x.bytes());
}

void NcclCommunicator::send(ConstTensor x, int peer) {
  begin("send");
  check_peer("send", peer);
  const auto t0 = Clock::now();
  check_nccl(ncclSend(x.data(), count_of(x, "send"), nccl_type(x.dtype()), peer, comm_, stream_),
             "ncclSend");
  finish("send", t0, x.bytes(), 0);
}

void NcclCommunicator::recv(Tensor x, int peer) {
  begin("recv");
  check_peer("recv", peer);
  const auto t0 = Clock::now();
  check_nccl(ncclRecv(x.data(), count_of(x, "recv"), nccl_type(x.dtype()), peer, comm_, stream_),
             "ncclRecv");
  finish("recv", t0, 0, x.bytes());
}

// One group: NCCL posts both before either waits, so a ring of them cannot deadlock.
void NcclCommunicator::send_recv(ConstTensor x, int to, Tensor y, int from) {
  begin("send_recv");
  check_peer("send_recv", to);
  check_peer("send_recv", from);
  const size_t nx = count_of(x, "send_recv"), ny = count_of(y, "send_recv");  // before the group
  const auto t0 = Clock::now();
  check_nccl(ncclGroupStart(), "ncclGroupStart");
  const ncclResult_t sent = ncclSend(x.data(), nx, nccl_type(x.dtype()), to, comm_, stream_);
  const ncclResult_t received =
      sent == ncclSuccess ? ncclRecv(y.data(), ny, nccl_type(y.dtype()), from, comm_, stream_)
                          : sent;
  const ncclResult_t ended = ncclGroupEnd();  // always: an open group defers every later call
  check_nccl(sent, "ncclSend");
  check_nccl(received, "ncclRecv");
  check_nccl(ended, "ncclGroupEnd");
  finish("send_recv", t0, x.bytes(), y.bytes());
}

void NcclCommunicator::barrier() {
  begin("barrier");
  const auto t0 = Clock::now();
  float* one = static_cast<float*>(scratch(sizeof(float)));
  check_cuda(cudaMemsetAsync(one, 0, sizeof(float), stream_), "cudaMemsetAsync");
  check_nccl(ncclAllReduce(one, one, 1, ncclFloat, ncclSum, comm_, stream_), "ncclAllReduce");
  finish("barrier", t0, 0, 0);
}

std::unique_ptr<Communicator> NcclCommunicator::split(int color, int key) {
  check_alive("split");
  ncclComm_t group;
  check_nccl(ncclCommSplit(comm_, color, key, &group, nullptr), "ncclCommSplit");
  count(0, 0);
  std::unique_ptr<NcclCommunicator> child(new NcclCommunicator(group, device_, timeout_s_));
  child->follow_ = follow_;
  return child;
}

}  // namespace memo
