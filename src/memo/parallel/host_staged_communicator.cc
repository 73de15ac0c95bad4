#include "memo/parallel/host_staged_communicator.h"

#include <utility>

#include "memo/core/error.h"

namespace memo {

HostStagedCommunicator::HostStagedCommunicator(std::unique_ptr<Communicator> host, Backend& backend)
    : host_(std::move(host)), backend_(backend) {
  MEMO_CHECK(host_ != nullptr, "HostStagedCommunicator without a host communicator");
}

// The host communicator goes first (members in reverse order): it waits for the sends still in
// flight, whose buffers posted_ holds until then.
HostStagedCommunicator::~HostStagedCommunicator() = default;

HostStagedCommunicator::Staged HostStagedCommunicator::stage_for(ConstTensor x, const char* op) {
  MEMO_CHECK(x.contiguous(), op, ": view ", x.shape(), " must be contiguous");
  Staged s;
  s.bytes.resize(size_t(x.bytes()));
  s.tensor = Tensor(s.bytes.data(), x.shape(), x.dtype(), MemSpace::kHost);
  return s;
}

HostStagedCommunicator::Staged HostStagedCommunicator::stage_out(ConstTensor x, const char* op) {
  Staged s = stage_for(x, op);
  backend_.copy_to_host(s.bytes.data(), x.data(), x.bytes());
  return s;
}

void HostStagedCommunicator::stage_in(Tensor x, const Staged& s) {
  MEMO_CHECK(x.contiguous(), "host-staged: view ", x.shape(), " must be contiguous");
  backend_.copy_from_host(x.data(), s.bytes.data(), x.bytes());
}

template <class F>
void HostStagedCommunicator::counted(F&& f) {
  const CommCounters before = host_->counters();
  f();
  const CommCounters& after = host_->counters();
  if (after.calls == before.calls) return count_seconds(after.seconds - before.seconds);
  count(after.bytes_sent - before.bytes_sent, after.bytes_received - before.bytes_received,
        after.seconds - before.seconds);
  for (int64_t c = before.calls + 1; c < after.calls; ++c) count(0, 0);
}

void HostStagedCommunicator::all_reduce_sum(Tensor x) {
  Staged s = stage_out(x, "all_reduce_sum");
  counted([&] { host_->all_reduce_sum(s.tensor); });
  stage_in(x, s);
}

void HostStagedCommunicator::reduce_scatter_sum(Tensor out, ConstTensor in) {
  Staged i = stage_out(in, "reduce_scatter_sum"), o = stage_for(out, "reduce_scatter_sum");
  counted([&] { host_->reduce_scatter_sum(o.tensor, i.tensor); });
  stage_in(out, o);
}

void HostStagedCommunicator::all_gather(Tensor out, ConstTensor in) {
  Staged i = stage_out(in, "all_gather"), o = stage_for(out, "all_gather");
  counted([&] { host_->all_gather(o.tensor, i.tensor); });
  stage_in(out, o);
}

void HostStagedCommunicator::all_reduce_sum(std::span<double> x) {
  counted([&] { host_->all_reduce_sum(x); });
}

void HostStagedCommunicator::all_gather(std::span<double> out, std::span<const double> in) {
  counted([&] { host_->all_gather(out, in); });
}

void HostStagedCommunicator::broadcast(Tensor x, int root) {
  Staged s = stage_out(x, "broadcast");
  counted([&] { host_->broadcast(s.tensor, root); });
  stage_in(x, s);
}

void HostStagedCommunicator::send(ConstTensor x, int peer) {
  Staged s = stage_out(x, "send");
  counted([&] { host_->send(s.tensor, peer); });
}

void HostStagedCommunicator::recv(Tensor x, int peer) {
  Staged s = stage_for(x, "recv");
  counted([&] { host_->recv(s.tensor, peer); });
  stage_in(x, s);
}

void HostStagedCommunicator::send_recv(ConstTensor x, int to, Tensor y, int from) {
  Staged sx = stage_out(x, "send_recv"), sy = stage_for(y, "send_recv");
  counted([&] { host_->send_recv(sx.tensor, to, sy.tensor, from); });
  stage_in(y, sy);
}

int64_t HostStagedCommunicator::post_send(ConstTensor x, int peer, int tag) {
  Posted p;
  p.staged = stage_out(x, "post_send");
  counted([&] { p.host_ticket = host_->post_send(p.staged.tensor, peer, tag); });
  const int64_t ticket = ++sends_posted_;
  posted_.emplace(ticket, std::move(p));  // the buffer's bytes do not move with it
  return ticket;
}

void HostStagedCommunicator::wait_send(int64_t ticket) {
  const auto it = posted_.find(ticket);
  if (it == posted_.end()) return;  // waited on already (wait_sends)
  counted([&] { host_->wait_send(it->second.host_ticket); });
  posted_.erase(it);
}

void HostStagedCommunicator::recv_tagged(Tensor x, int peer, int tag) {
  Staged s = stage_for(x, "recv_tagged");
  counted([&] { host_->recv_tagged(s.tensor, peer, tag); });
  stage_in(x, s);
}

void HostStagedCommunicator::wait_sends() {
  counted([&] { host_->wait_sends(); });
  posted_.clear();
}

void HostStagedCommunicator::barrier() {
  counted([&] { host_->barrier(); });
}

std::unique_ptr<Communicator> HostStagedCommunicator::split(int color, int key) {
  std::unique_ptr<Communicator> host;
  counted([&] { host = host_->split(color, key); });
  return std::make_unique<HostStagedCommunicator>(std::move(host), backend_);
}

}  // namespace memo
