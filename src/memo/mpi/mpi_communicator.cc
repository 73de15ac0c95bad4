#include "memo/mpi/mpi_communicator.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <thread>

#include "memo/core/error.h"

namespace memo {

// Note [Deterministic reductions]
// A sum over ranks must not depend on timing or on which algorithm MPI picks, so that runs repeat
// bit for bit: MPI_Allreduce promises neither a fixed order nor the same order on every rank.
// memo reduces as a reduce-scatter then an all-gather, by hand: the buffer is cut into size()
// slices, every rank sends slice j to rank j (MPI_Alltoallv), rank j adds the size() copies of
// its slice in rank order (((x_0 + x_1) + x_2) + ...), and an all-gather hands every slice to
// every rank. Each rank sends and receives 2 (P - 1) / P of the buffer, as a ring all-reduce
// does. Buffers larger than kMaxChunk floats go in chunks, so the scratch stays bounded.
//
// Note [Collective timeouts]
// MPI's blocking collectives wait forever for a rank that died or hangs. memo starts every call
// non-blocking and polls it (MPI_Test, then a sleep of up to 1 ms so an oversubscribed core is
// left to the ranks still computing); past the timeout the rank prints one line saying which
// collective timed out and calls MPI_Abort, which ends every rank of the job with a non-zero exit.
// A rank that exits on an error calls abort_job_if_parallel for the same reason. mpirun itself
// ends the job when a rank is killed.

namespace {

constexpr int64_t kMaxChunk = int64_t(1) << 24;  // floats per reduction chunk (64 MiB)

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

int to_int(int64_t n, const char* what) {
  MEMO_CHECK(n >= 0 && n <= int64_t(1) << 30, what, ": ", n, " elements exceed one MPI call");
  return int(n);
}

double timeout_from_env() {
  const char* v = std::getenv("MEMO_COMM_TIMEOUT");
  if (!v || !*v) return kDefaultCommTimeoutS;
  char* end = nullptr;
  const double s = std::strtod(v, &end);
  if (end == v || *end != '\0' || !(s > 0.0))
    throw ConfigError(str("MEMO_COMM_TIMEOUT='", v, "' must be a positive number of seconds"));
  return s;
}

// The MPI element type that moves a tensor's elements: reductions add f32 (Note [Deterministic
// reductions] adds by hand); gathers, broadcasts and point-to-point moves carry any dtype's bits.
MPI_Datatype moved_type(DType t) {
  switch (dtype_bytes(t)) {
    case 4:
      return MPI_FLOAT;
    case 2:
      return MPI_UINT16_T;
    default:
      return MPI_UINT8_T;
  }
}

}  // namespace

bool MpiCommunicator::launched_by_mpirun() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE"})
    if (std::getenv(v)) return true;
  return false;
}

std::unique_ptr<MpiCommunicator> MpiCommunicator::world() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  MEMO_CHECK(!initialized, "MPI is already initialised: one world per process");
  MEMO_CHECK(launched_by_mpirun(), "not started by mpirun: no MPI world to join");
  const double timeout = timeout_from_env();
  int provided = 0;
  MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
  // Errors come back as codes (checked by the calls below), not as MPI's default abort.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  std::unique_ptr<MpiCommunicator> w(new MpiCommunicator(MPI_COMM_WORLD, false, true));
  w->timeout_s_ = timeout;
  MPI_Comm node;  // the ranks that share this node's memory: a GPU each, in rank order
  if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, w->rank_, MPI_INFO_NULL, &node) ==
      MPI_SUCCESS) {
    MPI_Comm_rank(node, &w->local_rank_);
    MPI_Comm_free(&node);
  }
  return w;
}

MpiCommunicator::MpiCommunicator(MPI_Comm comm, bool owns_comm, bool finalizes)
    : comm_(comm), owns_comm_(owns_comm), finalizes_(finalizes) {
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
}

MpiCommunicator::~MpiCommunicator() {
  // reductions still in flight (a step that stopped on an error ends the job instead)
  if (std::uncaught_exceptions() == 0) {
    finish_reductions();
    wait_sends();
  }
  if (owns_comm_) MPI_Comm_free(&comm_);
  if (finalizes_) MPI_Finalize();
}

void MpiCommunicator::wait(MPI_Request& request, const char* op) {
  const auto t0 = Clock::now();
  int polls = 0;
  for (;;) {
    if (test(request, op)) return;
    if (seconds_since(t0) > timeout_s_) {
      std::fprintf(stderr,
                   "memo: error: rank %d of %d: %s did not complete within %g s (a rank died or "
                   "hangs; MEMO_COMM_TIMEOUT sets the limit); stopping the job\n",
                   rank_, size_, op, timeout_s_);
      std::fflush(stderr);
      MPI_Abort(comm_, 3);
    }
    if (++polls > 64)
      std::this_thread::sleep_for(std::chrono::microseconds(std::min(1000, 10 * (polls - 64))));
  }
}

void MpiCommunicator::check_peer(const char* op, int peer) const {
  MEMO_CHECK(peer >= 0 && peer < size_, op, ": peer ", peer, " is outside a group of ", size_,
             " ranks");
}

void MpiCommunicator::all_reduce_chunk(float* x, int64_t n) {
  const int p = size_;
  const int64_t slice = (n + p - 1) / p;
  std::vector<int> counts(static_cast<size_t>(p)), displs(counts.size());
  std::vector<int> recv_counts(counts.size()), recv_displs(counts.size());
  for (int j = 0; j < p; ++j) {
    const int64_t begin = std::min(n, j * slice), end = std::min(n, (j + 1) * slice);
    counts[size_t(j)] = int(end - begin);
    displs[size_t(j)] = int(begin);
  }
  const int mine = counts[size_t(rank_)];
  for (int j = 0; j < p; ++j) {
    recv_counts[size_t(j)] = mine;
    recv_displs[size_t(j)] = int(j * slice);
  }
  scratch_.resize(size_t(p * slice));
  MPI_Request request;
  MPI_Ialltoallv(x, counts.data(), displs.data(), MPI_FLOAT, scratch_.data(), recv_counts.data(),
                 recv_displs.data(), MPI_FLOAT, comm_, &request);
  wait(request, "all_reduce_sum");
  float* out = x + displs[size_t(rank_)];
  for (int64_t i = 0; i < mine; ++i) {  // rank order: Note [Deterministic reductions]
    float sum = scratch_[size_t(i)];
    for (int j = 1; j < p; ++j) sum += scratch_[size_t(j * slice + i)];
    out[i] = sum;
  }
  MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_FLOAT, x, counts.data(), displs.data(), MPI_FLOAT, comm_,
                  &request);
  wait(request, "all_reduce_sum");
}

bool MpiCommunicator::advance(Pending& p, bool blocking) {
  const int np = size_;
  for (;;) {
    if (p.phase == 0) {  // post the next chunk's exchange of slices
      const int64_t n = std::min(kMaxChunk, p.n - p.begin);
      const int64_t slice = (n + np - 1) / np;
      p.counts.assign(size_t(np), 0);
      p.displs.assign(size_t(np), 0);
      for (int j = 0; j < np; ++j) {
        const int64_t begin = std::min(n, j * slice), end = std::min(n, (j + 1) * slice);
        p.counts[size_t(j)] = int(end - begin);
        p.displs[size_t(j)] = int(begin);
      }
      p.recv_counts.assign(size_t(np), p.counts[size_t(rank_)]);
      p.recv_displs.assign(size_t(np), 0);
      for (int j = 0; j < np; ++j) p.recv_displs[size_t(j)] = int(j * slice);
      p.scratch.resize(size_t(np * slice));
      MPI_Ialltoallv(p.x + p.begin, p.counts.data(), p.displs.data(), MPI_FLOAT, p.scratch.data(),
                     p.recv_counts.data(), p.recv_displs.data(), MPI_FLOAT, comm_, &p.request);
      p.phase = 1;
    }
    if (blocking) {
      wait(p.request, "all_reduce_sum");
    } else {
      int done = 0;
      if (MPI_Test(&p.request, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) {
        std::fprintf(stderr,
                     "memo: error: rank %d: all_reduce_sum failed in MPI; stopping the job\n",
                     rank_);
        MPI_Abort(comm_, 3);
      }
      if (!done) return false;
    }
    float* x = p.x + p.begin;
    if (p.phase == 1) {  // sum this rank's slice in rank order, then gather the sums
      const int mine = p.counts[size_t(rank_)];
      const int64_t slice = p.recv_displs.size() > 1 ? p.recv_displs[1] : 0;
      float* out = x + p.displs[size_t(rank_)];
      for (int64_t i = 0; i < mine; ++i) {  // rank order: Note [Deterministic reductions]
        float sum = p.scratch[size_t(i)];
        for (int j = 1; j < np; ++j) sum += p.scratch[size_t(j * slice + i)];
        out[i] = sum;
      }
      MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_FLOAT, x, p.counts.data(), p.displs.data(), MPI_FLOAT,
                      comm_, &p.request);
      p.phase = 2;
      continue;
    }
    p.begin += std::min(kMaxChunk, p.n - p.begin);  // phase 2 done: the chunk is reduced
    p.phase = 0;
    if (p.begin >= p.n) return true;
  }
}

void MpiCommunicator::start_all_reduce_sum(Tensor x) {
  MEMO_CHECK(x.contiguous(), "start_all_reduce_sum: view ", x.shape(), " must be contiguous");
  const auto t0 = Clock::now();
  Pending p;
  p.x = x.as<float>().data();  // memo reduces in f32
  p.n = x.numel();
  pending_.push_back(std::move(p));
  const int64_t moved = all_reduce_bytes(x.numel() * 4, size_);
  if (size_ == 1 || x.numel() == 0) {
    pending_.pop_back();
  } else {
    while (!pending_.empty() && advance(pending_.front(), false)) pending_.pop_front();
  }
  count(moved, moved, seconds_since(t0));
}

void MpiCommunicator::progress() {
  const auto t0 = Clock::now();
  while (!pending_.empty() && advance(pending_.front(), false)) pending_.pop_front();
  count_seconds(seconds_since(t0));
}

void MpiCommunicator::finish_reductions() {
  if (pending_.empty()) return;
  const auto t0 = Clock::now();
  while (!pending_.empty()) {
    advance(pending_.front(), true);
    pending_.pop_front();
  }
  count_seconds(seconds_since(t0));
}

void MpiCommunicator::all_reduce_sum(Tensor x) {
  MEMO_CHECK(x.contiguous(), "all_reduce_sum: view ", x.shape(), " must be contiguous");
  finish_reductions();
  const auto t0 = Clock::now();
  const int64_t n = x.numel();
  // memo reduces in f32: bf16 values (mixed precision's activations) are widened, summed in the
  // same rank order and rounded once
  const bool narrow = x.dtype() == DType::kBF16;
  std::vector<float> wide;
  if (narrow) {
    const bf16* v = static_cast<const bf16*>(x.data());
    wide.resize(size_t(n));
    for (int64_t i = 0; i < n; ++i) wide[size_t(i)] = bf16_to_float(v[i]);
  }
  float* data = narrow ? wide.data() : x.as<float>().data();
  for (int64_t begin = 0; begin < n; begin += kMaxChunk)
    all_reduce_chunk(data + begin, std::min(kMaxChunk, n - begin));
  if (narrow) {
    bf16* v = static_cast<bf16*>(x.data());
    for (int64_t i = 0; i < n; ++i) v[i] = float_to_bf16(wide[size_t(i)]);
  }
  const int64_t moved = all_reduce_bytes(n * 4, size_);
  count(moved, moved, seconds_since(t0));
}

void MpiCommunicator::reduce_scatter_sum(Tensor out, ConstTensor in) {
  finish_reductions();  // Note [Overlapped reductions]
  MEMO_CHECK(out.contiguous() && in.contiguous() && in.numel() == out.numel() * size_,
             "reduce_scatter_sum: out ", out.shape(), " must hold 1/", size_, " of in ",
             in.shape());
  MEMO_CHECK(out.dtype() == in.dtype() && (in.dtype() == DType::kF32 || in.dtype() == DType::kBF16),
             "reduce_scatter_sum: ", dtype_name(in.dtype()), " into ", dtype_name(out.dtype()),
             "; memo sums f32, and bf16 in f32");
  const auto t0 = Clock::now();
  const int n = to_int(out.numel(), "reduce_scatter_sum");
  MPI_Request request;
  // bf16 (mixed precision's activations) moves as bf16 and is summed in f32, in rank order, and
  // rounded once; f32 is summed in f32 in the same order
  if (in.dtype() == DType::kBF16) {
    scratch16_.resize(size_t(size_) * size_t(n));
    MPI_Ialltoall(in.data(), n, MPI_UINT16_T, scratch16_.data(), n, MPI_UINT16_T, comm_, &request);
    wait(request, "reduce_scatter_sum");
    bf16* const sums = static_cast<bf16*>(out.data());
    for (int64_t i = 0; i < n; ++i) {
      float sum = bf16_to_float(scratch16_[size_t(i)]);
      for (int j = 1; j < size_; ++j) sum += bf16_to_float(scratch16_[size_t(int64_t(j) * n + i)]);
      sums[i] = float_to_bf16(sum);
    }
  } else {
    scratch_.resize(size_t(size_) * size_t(n));
    float* const sums = out.as<float>().data();
    MPI_Ialltoall(in.as<const float>().data(), n, MPI_FLOAT, scratch_.data(), n, MPI_FLOAT, comm_,
                  &request);
    wait(request, "reduce_scatter_sum");
    for (int64_t i = 0; i < n; ++i) {
      float sum = scratch_[size_t(i)];
      for (int j = 1; j < size_; ++j) sum += scratch_[size_t(int64_t(j) * n + i)];
      sums[i] = sum;
    }
  }
  const int64_t moved = reduce_scatter_bytes(int64_t(n) * in.element_bytes(), size_);
  count(moved, moved, seconds_since(t0));
}

void MpiCommunicator::all_gather(Tensor out, ConstTensor in) {
  finish_reductions();  // Note [Overlapped reductions]
  MEMO_CHECK(out.contiguous() && in.contiguous() && out.numel() == in.numel() * size_,
             "all_gather: out ", out.shape(), " must hold ", size_, " x in ", in.shape());
  MEMO_CHECK(out.dtype() == in.dtype(), "all_gather: out is ", dtype_name(out.dtype()), ", in ",
             dtype_name(in.dtype()));
  const auto t0 = Clock::now();
  const int n = to_int(in.numel(), "all_gather");
  MPI_Request request;
  const MPI_Datatype type = moved_type(in.dtype());
  MPI_Iallgather(in.data(), n, type, out.data(), n, type, comm_, &request);
  wait(request, "all_gather");
  const int64_t moved = all_gather_bytes(in.bytes(), size_);
  count(moved, moved, seconds_since(t0));
}

void MpiCommunicator::all_reduce_sum(std::span<double> x) {
  finish_reductions();  // Note [Overlapped reductions]
  const auto t0 = Clock::now();
  const int n = to_int(int64_t(x.size()), "all_reduce_sum");
  std::vector<double> all(size_t(size_) * x.size());
  MPI_Request request;
  MPI_Iallgather(x.data(), n, MPI_DOUBLE, all.data(), n, MPI_DOUBLE, comm_, &request);
  wait(request, "all_reduce_sum");
  for (size_t i = 0; i < x.size(); ++i) {  // rank order
    double sum = all[i];
    for (int j = 1; j < size_; ++j) sum += all[size_t(j) * x.size() + i];
    x[i] = sum;
  }
  const int64_t moved = all_gather_bytes(int64_t(n) * 8, size_);
  count(moved, moved, seconds_since(t0));
}

void MpiCommunicator::all_gather(std::span<double> out, std::span<const double> in) {
  finish_reductions();  // Note [Overlapped reductions]
  MEMO_CHECK(out.size() == in.size() * size_t(size_), "all_gather: out of ", out.size(),
             " must hold ", size_, " x in of ", in.size());
  const auto t0 = Clock::now();
  const int n = to_int(int64_t(in.size()), "all_gather");
  MPI_Request request;
  MPI_Iallgather(in.data(), n, MPI_DOUBLE, out.data(), n, MPI_DOUBLE, comm_, &request);
  wait(request, "all_gather");
  const int64_t moved = all_gather_bytes(int64_t(n) * 8, size_);
  count(moved, moved, seconds_since(t0));
}

void MpiCommunicator::broadcast(Tensor x, int root) {
  finish_reductions();  // Note [Overlapped reductions]
  check_peer("broadcast", root);
  MEMO_CHECK(x.contiguous(), "broadcast: view ", x.shape(), " must be contiguous");
  const auto t0 = Clock::now();
  MPI_Request request;
  MPI_Ibcast(x.data(), to_int(x.numel(), "broadcast"), moved_type(x.dtype()), root, comm_,
             &request);
  wait(request, "broadcast");
  const int64_t bytes = x.bytes();
  count(rank_ == root ? bytes * (size_ - 1) : 0, rank_ == root ? 0 : bytes, seconds_since(t0));
}

void MpiCommunicator::send(ConstTensor x, int peer) {
  finish_reductions();  // Note [Overlapped reductions]
  check_peer("send", peer);
  MEMO_CHECK(x.contiguous(), "send: view ", x.shape(), " must be contiguous");
  const auto t0 = Clock::now();
  MPI_Request request;
  MPI_Isend(x.data(), to_int(x.numel(), "send"), moved_type(x.dtype()), peer, 0, comm_, &request);
  wait(request, "send");
  count(x.bytes(), 0, seconds_since(t0));
}

void MpiCommunicator::recv(Tensor x, int peer) {
  finish_reductions();  // Note [Overlapped reductions]
  check_peer("recv", peer);
  MEMO_CHECK(x.contiguous(), "recv: view ", x.shape(), " must be contiguous");
  const auto t0 = Clock::now();
  MPI_Request request;
  MPI_Irecv(x.data(), to_int(x.numel(), "recv"), moved_type(x.dtype()), peer, 0, comm_, &request);
  wait(request, "recv");
  count(0, x.bytes(), seconds_since(t0));
}

void MpiCommunicator::send_recv(ConstTensor x, int to, Tensor y, int from) {
  finish_reductions();  // Note [Overlapped reductions]
  check_peer("send_recv", to);
  check_peer("send_recv", from);
  MEMO_CHECK(x.contiguous() && y.contiguous(), "send_recv: views ", x.shape(), " and ", y.shape(),
             " must be contiguous");
  const auto t0 = Clock::now();
  MPI_Request receive, send;  // both posted before either wait: no rank waits on an unposted peer
  MPI_Irecv(y.data(), to_int(y.numel(), "send_recv"), moved_type(y.dtype()), from, 0, comm_,
            &receive);
  MPI_Isend(x.data(), to_int(x.numel(), "send_recv"), moved_type(x.dtype()), to, 0, comm_, &send);
  wait(receive, "send_recv");
  wait(send, "send_recv");
  count(x.bytes(), y.bytes(), seconds_since(t0));
}

// Note [Pipeline sends]: tag t travels as MPI tag t + 1, apart from send and recv's tag 0; the
// standard promises tags up to 32767 on every MPI.
namespace {
int pipeline_tag(int tag) {
  MEMO_CHECK(tag >= 0 && tag < 32766, "pipeline message tag ", tag, " outside [0, 32766)");
  return tag + 1;
}
}  // namespace

int64_t MpiCommunicator::post_send(ConstTensor x, int peer, int tag) {
  finish_reductions();  // Note [Overlapped reductions]
  check_peer("post_send", peer);
  MEMO_CHECK(x.contiguous(), "post_send: view ", x.shape(), " must be contiguous");
  Posted p;
  p.bytes = x.bytes();
  p.ticket = ++sends_posted_;
  MPI_Isend(x.data(), to_int(x.numel(), "post_send"), moved_type(x.dtype()), peer,
            pipeline_tag(tag), comm_, &p.request);
  posted_.push_back(p);
  count(p.bytes, 0);
  return p.ticket;
}

bool MpiCommunicator::test(MPI_Request& request, const char* op) {
  int done = 0;
  if (const int rc = MPI_Test(&request, &done, MPI_STATUS_IGNORE); rc != MPI_SUCCESS) {
    std::fprintf(stderr, "memo: error: rank %d: %s failed in MPI (error %d); stopping the job\n",
                 rank_, op, rc);
    MPI_Abort(comm_, 3);
  }
  return done != 0;
}

void MpiCommunicator::wait_send(int64_t ticket) {
  const auto it = std::find_if(posted_.begin(), posted_.end(),
                               [&](const Posted& p) { return p.ticket == ticket; });
  if (it == posted_.end()) return;  // completed and forgotten
  const auto t0 = Clock::now();
  wait(it->request, "a pipeline send");
  posted_.erase(it);
  count_seconds(seconds_since(t0));
}

void MpiCommunicator::recv_tagged(Tensor x, int peer, int tag) {
  finish_reductions();  // Note [Overlapped reductions]
  check_peer("recv_tagged", peer);
  MEMO_CHECK(x.contiguous(), "recv_tagged: view ", x.shape(), " must be contiguous");
  const auto t0 = Clock::now();
  MPI_Request request;
  MPI_Irecv(x.data(), to_int(x.numel(), "recv_tagged"), moved_type(x.dtype()), peer,
            pipeline_tag(tag), comm_, &request);
  wait(request, "a pipeline receive");
  count(0, x.bytes(), seconds_since(t0));
}

void MpiCommunicator::wait_sends() {
  const auto t0 = Clock::now();
  for (Posted& p : posted_) wait(p.request, "a pipeline send");
  posted_.clear();
  count_seconds(seconds_since(t0));
}

void MpiCommunicator::barrier() {
  finish_reductions();  // Note [Overlapped reductions]
  const auto t0 = Clock::now();
  MPI_Request request;
  MPI_Ibarrier(comm_, &request);
  wait(request, "barrier");
  count(0, 0, seconds_since(t0));
}

std::unique_ptr<Communicator> MpiCommunicator::split(int color, int key) {
  finish_reductions();  // Note [Overlapped reductions]
  MPI_Comm group;
  MEMO_CHECK(MPI_Comm_split(comm_, color, key, &group) == MPI_SUCCESS, "split: MPI_Comm_split ",
             "failed on rank ", rank_);
  std::unique_ptr<MpiCommunicator> c(new MpiCommunicator(group, true, false));
  c->timeout_s_ = timeout_s_;
  count(0, 0);
  return c;
}

void abort_job_if_parallel(int code) {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (!initialized || finalized) return;
  int size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size > 1) {
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, code);
  }
}

}  // namespace memo
