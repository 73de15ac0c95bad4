#include "memo/memory/trace.h"

#include <algorithm>

namespace memo {
namespace {

int64_t phase_key(Pass pass, int layer) { return int64_t(layer) * 2 + (pass == Pass::kBackward); }

bool same_structure(const Trace& a, const Trace& b) {
  if (a.requests.size() != b.requests.size() || a.phases.size() != b.phases.size()) return false;
  for (size_t i = 0; i < a.requests.size(); ++i) {
    const TracedRequest &x = a.requests[i], &y = b.requests[i];
    if (x.name != y.name || x.kind != y.kind || x.begin != y.begin || x.end != y.end ||
        x.phase != y.phase)
      return false;
  }
  return true;
}

}  // namespace

const char* pass_name(Pass pass) { return pass == Pass::kForward ? "forward" : "backward"; }

Tensor TraceRecorder::acquire(std::string_view name, Shape shape, ActKind kind, DType dtype) {
  const Tensor t = memory_.acquire(name, shape, kind, dtype);
  const plan::Step step = plan::Step(requests_.size());
  requests_.push_back(TracedRequest{std::string(name), shape.numel() * dtype_bytes(dtype), kind,
                                    dtype, step, -1, -1});
  live_[t.data()] = size_t(step);
  return t;
}

void TraceRecorder::release(const Tensor& t) {
  auto it = live_.find(t.data());
  MEMO_CHECK(it != live_.end(), "trace: release of a buffer the recorder did not hand out, shape ",
             t.shape());
  requests_[it->second].end = plan::Step(requests_.size());
  live_.erase(it);
  memory_.release(t);
}

void TraceRecorder::mark_begin(Pass pass, int layer) {
  open_[phase_key(pass, layer)] = plan::Step(requests_.size());
}

void TraceRecorder::mark_end(Pass pass, int layer) {
  auto it = open_.find(phase_key(pass, layer));
  MEMO_CHECK(it != open_.end(), "trace: layer ", layer, " ", pass_name(pass),
             " ended before it began");
  const TracePhase phase{pass, layer, it->second, plan::Step(requests_.size())};
  open_.erase(it);
  const int index = int(phases_.size());
  phases_.push_back(phase);
  for (plan::Step i = phase.begin; i < phase.end; ++i) {
    TracedRequest& r = requests_[size_t(i)];
    if (r.kind == ActKind::kTransient && r.phase < 0) r.phase = index;
  }
}

Trace TraceRecorder::finish(int64_t batch, int64_t seq) const {
  Trace trace{batch, seq, requests_, phases_};
  for (const TracedRequest& r : trace.requests) {
    MEMO_CHECK(r.end >= 0, "trace: activation '", r.name, "' (request ", r.begin,
               ") was never released in the traced step");
    if (r.phase < 0) continue;
    const TracePhase& p = trace.phases[size_t(r.phase)];
    if (r.end > p.end)
      throw Error(str("trace: transient '", r.name, "' (request ", r.begin, ") made in layer ",
                      p.layer, "'s ", pass_name(p.pass), " outlives it (dead at request ", r.end,
                      ", the pass ends at ", p.end, "); a layer's transients must die inside it"));
  }
  return trace;
}

const SavedActs& TracingStrategy::forward_slot(int layer) {
  const SavedActs& s = inner_.forward_slot(layer);
  recorder_.mark_begin(Pass::kForward, layer);
  return s;
}

void TracingStrategy::forward_done(int layer) {
  recorder_.mark_end(Pass::kForward, layer);
  inner_.forward_done(layer);
}

void TracingStrategy::discard(int layer) {
  recorder_.mark_end(Pass::kForward, layer);
  inner_.discard(layer);
}

const SavedActs& TracingStrategy::backward_ready(int layer) {
  const SavedActs& s = inner_.backward_ready(layer);
  recorder_.mark_begin(Pass::kBackward, layer);
  return s;
}

void TracingStrategy::backward_done(int layer) {
  recorder_.mark_end(Pass::kBackward, layer);
  inner_.backward_done(layer);
}

StrategyFactory keep_strategy_factory() {
  return [](const SkeletalLayout& layout, ActivationAllocator& alloc) {
    return std::make_unique<KeepStrategy>(layout, alloc);
  };
}

Trace record_step(RawAllocator& memory, const SkeletalLayout& layout, int64_t batch, int64_t seq,
                  const StrategyFactory& make_strategy, const StepFunction& step) {
  TraceRecorder recorder(memory);
  {
    std::unique_ptr<ActivationStrategy> inner = make_strategy(layout, recorder);
    TracingStrategy tracing(*inner, recorder);
    step(tracing, recorder);
  }  // the strategy releases what it still holds before the trace is read
  return recorder.finish(batch, seq);
}

Trace scale_trace(const Trace& trace, const Trace& other, int64_t seq) {
  Trace out = trace;
  out.seq = seq;
  const bool affine = same_structure(trace, other) && other.seq != trace.seq;
  for (size_t i = 0; i < out.requests.size(); ++i) {
    const double b1 = double(trace.requests[i].bytes);
    double bytes = b1 * double(seq) / double(trace.seq);
    if (affine) {
      const double slope = (b1 - double(other.requests[i].bytes)) / double(trace.seq - other.seq);
      bytes = b1 + slope * double(seq - trace.seq);
    }
    // whole elements, never negative
    const double elem = double(dtype_bytes(out.requests[i].dtype));
    out.requests[i].bytes = std::max<int64_t>(0, int64_t(bytes / elem + 0.5) * int64_t(elem));
  }
  return out;
}

}  // namespace memo
