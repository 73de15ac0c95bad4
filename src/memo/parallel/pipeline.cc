#include "memo/parallel/pipeline.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>

#include "memo/core/error.h"

namespace memo {

namespace {

// A split's cost: its costliest chunk, then the sum of the chunks' squared costs.
struct SplitCost {
  double max = std::numeric_limits<double>::infinity();
  double sum_sq = std::numeric_limits<double>::infinity();
  bool finite() const { return std::isfinite(max); }
};

constexpr double kCostEps = 1e-9;  // costs are integers plus one head_cost: exact to far below it

bool cheaper(const SplitCost& a, const SplitCost& b) {
  if (a.max < b.max - kCostEps) return true;
  return std::abs(a.max - b.max) <= kCostEps && a.sum_sq < b.sum_sq - kCostEps;
}

bool same(const SplitCost& a, const SplitCost& b) { return !cheaper(a, b) && !cheaper(b, a); }

std::string describe(const PipeAction& a) {
  return str(a.op == PipeOp::kForward ? "forward" : "backward", " of micro-batch ", a.micro_batch,
             " on chunk ", a.chunk);
}

}  // namespace

std::vector<int> balance_layers(int layers, int chunks, double head_cost) {
  if (chunks < 1) throw ConfigError(str("pipeline: ", chunks, " chunks; at least 1"));
  if (layers < chunks)
    throw ConfigError(str("pipeline: ", layers, " layers do not fill ", chunks,
                          " chunks (--pp x --virtual-stages) of at least one layer each"));
  MEMO_CHECK(std::isfinite(head_cost) && head_cost >= 0.0, "balance_layers: head cost ", head_cost);
  const auto L = size_t(layers), S = size_t(chunks);
  // best[s][k]: the cheapest split of chunks s.. holding k layers
  std::vector<std::vector<SplitCost>> best(S + 1, std::vector<SplitCost>(L + 1));
  best[S][0] = {0.0, 0.0};
  auto with = [&](size_t s, size_t n, size_t rest) {
    const SplitCost& sub = best[s + 1][rest];
    if (!sub.finite()) return SplitCost{};
    const double c = double(n) + (s + 1 == S ? head_cost : 0.0);
    return SplitCost{std::max(c, sub.max), c * c + sub.sum_sq};
  };
  for (size_t s = S; s-- > 0;)
    for (size_t k = 1; k <= L; ++k)
      for (size_t n = 1; n <= k; ++n)
        if (const SplitCost c = with(s, n, k - n); cheaper(c, best[s][k])) best[s][k] = c;
  std::vector<int> counts;
  size_t rest = L;
  for (size_t s = 0; s < S; ++s)
    for (size_t n = 1; n <= rest; ++n)
      if (const SplitCost c = with(s, n, rest - n); c.finite() && same(c, best[s][rest])) {
        counts.push_back(int(n));
        rest -= n;
        break;
      }
  MEMO_CHECK(counts.size() == S && rest == 0, "balance_layers: no split of ", layers, " into ",
             chunks);
  return counts;
}

std::vector<int> parse_pipeline_layers(const std::string& text, int layers, int chunks) {
  std::vector<int> counts;
  int64_t sum = 0;
  size_t at = 0;
  while (true) {
    const size_t end = std::min(text.find(',', at), text.size());
    int n = 0;
    const char* first = text.data() + at;
    const char* last = text.data() + end;
    const auto [ptr, ec] = std::from_chars(first, last, n);
    if (ec != std::errc() || ptr != last || n < 1)
      throw ConfigError(str("--pp-layers ", text, ": '", std::string(first, last),
                            "' is not a positive layer count (e.g. --pp-layers 9,8,8,7)"));
    if (n > layers)
      throw ConfigError(
          str("--pp-layers ", text, ": ", n, " layers in one chunk, the model has ", layers));
    counts.push_back(n);
    sum += n;
    if (end == text.size()) break;
    at = end + 1;
  }
  if (int(counts.size()) != chunks)
    throw ConfigError(str("--pp-layers ", text, ": ", counts.size(), " counts for ", chunks,
                          " chunks (--pp x --virtual-stages); give one per chunk"));
  if (sum != layers)
    throw ConfigError(str("--pp-layers ", text, ": the counts add up to ", sum, ", the model has ",
                          layers, " layers"));
  return counts;
}

std::vector<int> chunk_first_layers(const std::vector<int>& counts) {
  std::vector<int> first(1, 0);
  for (int n : counts) first.push_back(first.back() + n);
  return first;
}

void validate_pipeline(int64_t P, int64_t V, int64_t micro_batches) {
  if (P < 1 || V < 1 || micro_batches < 1)
    throw ConfigError(str("pipeline: --pp ", P, ", --virtual-stages ", V, " and ", micro_batches,
                          " micro-batches per step must each be at least 1"));
  // (P and V each at most the bound first, so that their product does not overflow)
  if (P > kMaxPipelineChunks || V > kMaxPipelineChunks || P * V > kMaxPipelineChunks)
    throw ConfigError(str("pipeline: --pp ", P, " x --virtual-stages ", V, " chunks: more than ",
                          kMaxPipelineChunks, ", the most layers a model has"));
  if (micro_batches > kMaxPipelineMicroBatches / V)  // (m x V would overflow for a huge m)
    throw ConfigError(str("pipeline: ", micro_batches,
                          " micro-batches per step x --virtual-stages ", V, ": more than the ",
                          kMaxPipelineMicroBatches, " a schedule runs; use larger micro-batches"));
  if (V > 1 && micro_batches % P != 0)
    throw ConfigError(str("interleaved pipeline (--virtual-stages ", V, "): ", micro_batches,
                          " micro-batches per step is not a multiple of --pp ", P,
                          "; the schedule runs them in groups of P (e.g. ",
                          (micro_batches / P + 1) * P, " micro-batches)"));
}

int warmup_forwards(PipelineShape shape, int micro_batches, int rank) {
  validate_pipeline(shape, micro_batches);
  const int P = shape.stages, V = shape.virtual_stages;
  MEMO_CHECK(rank >= 0 && rank < P, "pipeline: rank ", rank, " of ", P);
  if (V == 1) return std::min(P - rank - 1, micro_batches);
  return std::min(2 * (P - rank - 1) + (V - 1) * P, micro_batches * V);
}

std::vector<PipeAction> pipeline_actions(PipelineShape shape, int micro_batches, int rank) {
  const int warmup = warmup_forwards(shape, micro_batches, rank);
  const int P = shape.stages, V = shape.virtual_stages, total = micro_batches * V;
  // the k-th forward (backward) of the rank, Note [Pipeline schedules]
  auto action = [&](PipeOp op, int k) {
    const int group = k / (P * V), in_group = k % (P * V);
    int v = in_group / P;
    if (op == PipeOp::kBackward) v = V - 1 - v;
    const int mb = V == 1 ? k : group * P + in_group % P;
    return PipeAction{op, mb, shape.chunk_of(rank, v)};
  };
  std::vector<PipeAction> actions;
  actions.reserve(size_t(2 * total));
  for (int k = 0; k < warmup; ++k) actions.push_back(action(PipeOp::kForward, k));
  const int steady = total - warmup;
  for (int i = 0; i < steady; ++i) {
    actions.push_back(action(PipeOp::kForward, warmup + i));
    actions.push_back(action(PipeOp::kBackward, i));
  }
  for (int i = steady; i < total; ++i) actions.push_back(action(PipeOp::kBackward, i));
  return actions;
}

int peak_in_flight(const std::vector<PipeAction>& actions) {
  int live = 0, peak = 0;
  for (const PipeAction& a : actions) {
    live += a.op == PipeOp::kForward ? 1 : -1;
    peak = std::max(peak, live);
  }
  return peak;
}

ParkedLayers parked_layers(PipelineShape shape, const std::vector<int>& counts, int micro_batches,
                           int rank) {
  const int G = shape.chunks();
  MEMO_CHECK(int(counts.size()) == G, "pipeline: ", counts.size(), " chunk counts for ", G,
             " chunks");
  ParkedLayers p{peak_in_flight(pipeline_actions(shape, micro_batches, rank)), 0};
  for (int v = 0; v < shape.virtual_stages; ++v) {
    const int g = shape.chunk_of(rank, v), n = counts[size_t(g)];
    p.layers = std::max(p.layers, g + 1 == G ? std::max(0, n - 2) : n);
  }
  return p;
}

PipeMessage action_receive(PipelineShape shape, const PipeAction& a) {
  const int G = shape.chunks();
  if (a.op == PipeOp::kForward)
    return a.chunk > 0 ? PipeMessage{shape.rank_of(a.chunk - 1), a.micro_batch, 2 * a.chunk}
                       : PipeMessage{};
  return a.chunk + 1 < G ? PipeMessage{shape.rank_of(a.chunk + 1), a.micro_batch, 2 * a.chunk + 1}
                         : PipeMessage{};  // the last chunk's backward ran with its forward
}

PipeMessage action_send(PipelineShape shape, const PipeAction& a) {
  const int G = shape.chunks();
  const bool last = a.chunk + 1 == G;
  if (a.op == PipeOp::kForward && !last)
    return {shape.rank_of(a.chunk + 1), a.micro_batch, 2 * (a.chunk + 1)};
  // the gradient of the chunk's input: the last chunk's forward, or a backward below it
  const bool sends_gradient = a.op == PipeOp::kForward ? last : !last;
  if (sends_gradient && a.chunk > 0)
    return {shape.rank_of(a.chunk - 1), a.micro_batch, 2 * (a.chunk - 1) + 1};
  return {};
}

std::vector<std::vector<int>> sends_completed(PipelineShape shape, int micro_batches, int rank) {
  const int P = shape.stages;
  MEMO_CHECK(rank >= 0 && rank < P, "sends_completed: rank ", rank, " of ", P);
  std::vector<std::vector<PipeAction>> lists;
  for (int r = 0; r < P; ++r) lists.push_back(pipeline_actions(shape, micro_batches, r));
  // each message by (micro-batch, tag): the index of the action that sends it on its rank, and of
  // the one that receives it
  auto key = [&](int mb, int tag) { return size_t(mb) * size_t(2 * shape.chunks()) + size_t(tag); };
  std::vector<int> sent_at(size_t(micro_batches) * size_t(2 * shape.chunks()), -1);
  std::vector<int> received_at(sent_at.size(), -1);
  for (int r = 0; r < P; ++r)
    for (size_t i = 0; i < lists[size_t(r)].size(); ++i) {
      const PipeAction& a = lists[size_t(r)][i];
      if (const PipeMessage s = action_send(shape, a); s.peer >= 0)
        sent_at[key(s.micro_batch, s.tag)] = int(i);
      if (const PipeMessage m = action_receive(shape, a); m.peer >= 0)
        received_at[key(m.micro_batch, m.tag)] = int(i);
    }
  const std::vector<PipeAction>& mine = lists[size_t(rank)];
  std::vector<std::vector<int>> out(mine.size());
  struct Pending {
    int action, peer, received;  // our sending action; the receiver and its receiving action
  };
  std::vector<Pending> pending;
  for (size_t i = 0; i < mine.size(); ++i) {
    if (const PipeMessage m = action_receive(shape, mine[i]); m.peer >= 0) {
      // the peer sent this message at action `after`, after every receive of its actions before
      const int after = sent_at[key(m.micro_batch, m.tag)];
      MEMO_CHECK(after >= 0, "sends_completed: a message nobody sends");
      std::erase_if(pending, [&](const Pending& p) {
        if (p.peer != m.peer || p.received > after) return false;
        out[i].push_back(p.action);
        return true;
      });
    }
    if (const PipeMessage s = action_send(shape, mine[i]); s.peer >= 0)
      pending.push_back({int(i), s.peer, received_at[key(s.micro_batch, s.tag)]});
  }
  return out;
}

double pipeline_bubble(PipelineShape shape, int micro_batches) {
  validate_pipeline(shape, micro_batches);
  return double(shape.stages - 1) / (double(shape.virtual_stages) * double(micro_batches));
}

PipeTimes PipeTimes::uniform(PipelineShape shape, double f, double b, double transfer) {
  PipeTimes t;
  t.forward_s.assign(size_t(shape.chunks()), f);
  t.backward_s.assign(size_t(shape.chunks()), b);
  t.transfer_s = transfer;
  return t;
}

double PipeSimulation::bubble() const {
  const double busy = busy_s.empty() ? 0.0 : *std::max_element(busy_s.begin(), busy_s.end());
  return busy > 0.0 ? (step_s - busy) / busy : 0.0;
}

PipeSimulation simulate_pipeline(PipelineShape shape, int micro_batches,
                                 const std::vector<std::vector<PipeAction>>& actions,
                                 const PipeTimes& times) {
  validate_pipeline(shape, micro_batches);
  const int P = shape.stages, G = shape.chunks(), m = micro_batches;
  MEMO_CHECK(int(actions.size()) == P, "simulate_pipeline: ", actions.size(), " lists for ", P,
             " ranks");
  MEMO_CHECK(int(times.forward_s.size()) == G && int(times.backward_s.size()) == G,
             "simulate_pipeline: times for ", times.forward_s.size(), " and ",
             times.backward_s.size(), " chunks, the pipeline has ", G);
  // end[op][mb * G + chunk]: when that action ended; NaN until it has
  const double unset = std::numeric_limits<double>::quiet_NaN();
  std::vector<double> end[2] = {std::vector<double>(size_t(m * G), unset),
                                std::vector<double>(size_t(m * G), unset)};
  std::vector<int> seen(size_t(2 * m * G), 0);
  for (int r = 0; r < P; ++r)
    for (const PipeAction& a : actions[size_t(r)]) {
      MEMO_CHECK(a.micro_batch >= 0 && a.micro_batch < m && a.chunk >= 0 && a.chunk < G &&
                     shape.rank_of(a.chunk) == r,
                 "simulate_pipeline: rank ", r, " runs the ", describe(a));
      ++seen[size_t(int(a.op) * m * G + a.micro_batch * G + a.chunk)];
    }
  for (size_t i = 0; i < seen.size(); ++i)
    MEMO_CHECK(seen[i] == 1, "simulate_pipeline: the ",
               describe({PipeOp(i / size_t(m * G)), int(i % size_t(m * G)) / G, int(i) % G}),
               " runs ", seen[i], " times, not once");
  PipeSimulation sim;
  sim.busy_s.assign(size_t(P), 0.0);
  std::vector<double> free_at(size_t(P), 0.0);
  std::vector<size_t> next(size_t(P), 0);
  size_t left = size_t(2 * m * G);
  while (left > 0) {
    bool moved = false;
    for (int r = 0; r < P; ++r) {
      auto& list = actions[size_t(r)];
      while (next[size_t(r)] < list.size()) {
        const PipeAction& a = list[next[size_t(r)]];
        const bool fwd = a.op == PipeOp::kForward;
        // the input: the previous chunk's forward, the next chunk's backward, or this chunk's
        // own forward for the last chunk's backward
        const int from = fwd ? a.chunk - 1 : (a.chunk + 1 < G ? a.chunk + 1 : a.chunk);
        const bool needs = fwd ? a.chunk > 0 : true;
        const PipeOp from_op = fwd || from == a.chunk ? PipeOp::kForward : PipeOp::kBackward;
        double ready = 0.0;
        if (needs) {
          const double e = end[int(from_op)][size_t(a.micro_batch * G + from)];
          if (std::isnan(e)) break;
          ready = e + (shape.rank_of(from) != r ? times.transfer_s : 0.0);
        }
        if (!fwd && from != a.chunk && std::isnan(end[0][size_t(a.micro_batch * G + a.chunk)]))
          break;  // a backward also needs its own forward's activations
        const double d = fwd ? times.forward_s[size_t(a.chunk)] : times.backward_s[size_t(a.chunk)];
        const double start = std::max(free_at[size_t(r)], ready);
        free_at[size_t(r)] = start + d;
        end[int(a.op)][size_t(a.micro_batch * G + a.chunk)] = start + d;
        sim.busy_s[size_t(r)] += d;
        sim.step_s = std::max(sim.step_s, start + d);
        ++next[size_t(r)];
        --left;
        moved = true;
      }
    }
    if (!moved) {
      std::string waits;
      for (int r = 0; r < P; ++r)
        if (next[size_t(r)] < actions[size_t(r)].size())
          waits += str(waits.empty() ? "" : "; ", "rank ", r, " waits at the ",
                       describe(actions[size_t(r)][next[size_t(r)]]));
      throw Error(str("pipeline schedule deadlocks: ", waits));
    }
  }
  return sim;
}

}  // namespace memo
