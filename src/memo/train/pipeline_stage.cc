#include "memo/train/pipeline_stage.h"

#include <algorithm>

#include "memo/core/error.h"

namespace memo {

PipelineStage::PipelineStage(Model& model, Communicator& group, PipelineShape shape,
                             ActivationAllocator& alloc, MakeStrategy make_strategy)
    : model_(model),
      group_(group),
      shape_(shape),
      alloc_(alloc),
      make_strategy_(std::move(make_strategy)) {
  MEMO_CHECK(group.size() == shape.stages && make_strategy_, "PipelineStage: a group of ",
             group.size(), " ranks for ", shape.stages, " stages");
  MEMO_CHECK(model.pipeline(), "PipelineStage: the model is not a pipeline rank's");
}

Tensor PipelineStage::take_hidden(int64_t rows, int64_t cols) {
  const Tensor t = alloc_.acquire("pipeline.hidden", {rows, cols}, ActKind::kSaved,
                                  model_.backend().activation_dtype());
  hidden_bytes_ += t.bytes();
  hidden_peak_bytes_ = std::max(hidden_peak_bytes_, hidden_bytes_);
  return t;
}

void PipelineStage::give_hidden(const Tensor& t) {
  hidden_bytes_ -= t.bytes();
  alloc_.release(t);
}

double PipelineStage::run(int micro_steps, int64_t B, int64_t S, float grad_scale,
                          const Source& source, const std::function<void(int, int)>& finished) {
  const int G = shape_.chunks(), rank = group_.rank();
  const int64_t T = B * S, C = model_.config().hidden_size;
  const int64_t rows = model_.pipeline_rows(B, S);  // this rank's under --cp and --tp
  const std::vector<PipeAction> actions = pipeline_actions(shape_, micro_steps, rank);
  const std::vector<std::vector<int>> completed = sends_completed(shape_, micro_steps, rank);
  inputs_.resize(size_t(T));
  targets_.resize(size_t(T));
  sent_bytes_ = hidden_bytes_ = hidden_peak_bytes_ = 0;
  struct Sent {
    Tensor buffer;
    int64_t ticket;
  };
  std::map<int, Sent> sent;  // by the action that sent it
  auto send = [&](int action, const Tensor& x, const PipeMessage& to) {
    sent.emplace(action, Sent{x, group_.post_send(x, to.peer, to.tag)});
    sent_bytes_ += x.bytes();
  };
  // Note [Pipeline send completion]: what action i's receive vouches for
  auto receive = [&](int i, const Tensor& x) {
    const PipeMessage m = action_receive(shape_, actions[size_t(i)]);
    group_.recv_tagged(x, m.peer, m.tag);
    for (int j : completed[size_t(i)]) {
      const auto it = sent.find(j);
      MEMO_CHECK(it != sent.end(), "pipeline: action ", j, "'s send is not in flight");
      group_.wait_send(it->second.ticket);
      give_hidden(it->second.buffer);
      sent.erase(it);
    }
  };
  auto take_strategy = [&]() {
    if (idle_strategies_.empty()) {
      strategies_.push_back(make_strategy_());
      idle_strategies_.push_back(strategies_.back().get());
    }
    ActivationStrategy* s = idle_strategies_.back();
    idle_strategies_.pop_back();
    return s;
  };
  struct Flight {
    ActivationStrategy* strategy;
    std::unique_ptr<ChunkPass> pass;
  };
  std::map<std::pair<int, int>, Flight> flights;  // (micro-batch, chunk): forward, no backward
  double loss_sum = 0.0;
  for (int i = 0; i < int(actions.size()); ++i) {
    const PipeAction& a = actions[size_t(i)];
    const bool last = a.chunk + 1 == G;
    const std::pair<int, int> key{a.micro_batch, a.chunk};
    if (a.op == PipeOp::kForward) {
      source(a.micro_batch, inputs_.data(), targets_.data());
      Tensor x;  // the previous chunk's output (chunk 0 embeds the inputs instead)
      if (a.chunk > 0) {
        x = take_hidden(rows, C);
        receive(i, x);
      }
      ActivationStrategy* strategy = take_strategy();
      if (last) {  // forward, loss and backward: x becomes the gradient of the chunk's input
        loss_sum += model_.pipeline_last(inputs_.data(), targets_.data(), B, S, grad_scale, x,
                                         *strategy, alloc_);
        idle_strategies_.push_back(strategy);
        send(i, x, action_send(shape_, a));
        if (finished) finished(a.micro_batch, a.chunk / shape_.stages);
        continue;
      }
      Flight& f = flights[key];
      f.strategy = strategy;
      f.pass = std::make_unique<ChunkPass>(*strategy);
      const Tensor y = take_hidden(rows, C);
      model_.pipeline_forward(*f.pass, a.chunk / shape_.stages, inputs_.data(), B, S, x, y, alloc_);
      if (a.chunk > 0) give_hidden(x);
      send(i, y, action_send(shape_, a));
    } else if (!last) {
      const Tensor dx = take_hidden(rows, C);
      receive(i, dx);
      const auto it = flights.find(key);
      MEMO_CHECK(it != flights.end(), "pipeline: the backward of micro-batch ", a.micro_batch,
                 " on chunk ", a.chunk, " before its forward");
      model_.pipeline_backward(*it->second.pass, dx, alloc_);
      idle_strategies_.push_back(it->second.strategy);
      flights.erase(it);
      if (a.chunk > 0)
        send(i, dx, action_send(shape_, a));
      else
        give_hidden(dx);  // the embedding's gradient is accumulated: nothing to send
      if (finished) finished(a.micro_batch, a.chunk / shape_.stages);
    }
  }
  group_.wait_sends();
  for (const auto& [action, s] : sent) give_hidden(s.buffer);  // in action order
  MEMO_CHECK(flights.empty() && hidden_bytes_ == 0, "pipeline: ", flights.size(), " passes and ",
             hidden_bytes_, " bytes of hidden states left after the step");
  return loss_sum;
}

}  // namespace memo
