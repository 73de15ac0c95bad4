#include "memo/memory/budget.h"

#include <cmath>
#include <cstdio>
#include <string>

#include "memo/core/error.h"
#include "memo/core/units.h"

namespace memo {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

std::string gib_and_bytes(int64_t bytes) { return str(gib(double(bytes)), " (", bytes, " B)"); }

}  // namespace

int64_t DeviceNeed::fixed_bytes() const {
  return weight_bytes + working_weight_bytes + gradient_bytes + optimizer_bytes;
}

int64_t DeviceNeed::total_bytes() const {
  return fixed_bytes() + conversion_scratch_bytes + activation_arena_bytes;
}

DeviceNeed device_need(int64_t param_numel, const std::string& optimizer, int64_t optimizer_bytes,
                       int64_t activation_arena_bytes, int64_t working_weight_bytes) {
  const int64_t param_bytes = param_numel * int64_t(sizeof(float));
  DeviceNeed need;
  need.weight_bytes = param_bytes;
  need.working_weight_bytes = working_weight_bytes;
  need.gradient_bytes = param_bytes;
  need.optimizer = optimizer;
  need.optimizer_bytes = optimizer_bytes;
  need.activation_arena_bytes = activation_arena_bytes;
  return need;
}

std::string need_breakdown(const DeviceNeed& need) {
  std::string out;
  const auto line = [&](const char* what, int64_t bytes) {
    char buf[160];
    std::snprintf(buf, sizeof buf, "  %-20s %10.2f GiB  %14lld B\n", what, double(bytes) / kGiB,
                  static_cast<long long>(bytes));
    out += buf;
  };
  line("weights", need.weight_bytes);
  if (need.working_weight_bytes > 0) line("bf16 working weights", need.working_weight_bytes);
  if (need.conversion_scratch_bytes > 0) line("bf16 conversion", need.conversion_scratch_bytes);
  line("gradients", need.gradient_bytes);
  line(str("optimizer (", need.optimizer, ")").c_str(), need.optimizer_bytes);
  line("activation arena", need.activation_arena_bytes);
  line("total", need.total_bytes());
  return out;
}

std::optional<int64_t> longest_fitting_seq(const Trace& trace, const Trace& other,
                                           int64_t fixed_bytes, int64_t scratch,
                                           int64_t other_scratch, int64_t budget_bytes,
                                           int64_t max_seq) {
  const auto scratch_at = [&](int64_t seq) -> int64_t {
    if (seq <= other.seq || trace.seq == other.seq) return other_scratch;
    const double slope = double(scratch - other_scratch) / double(trace.seq - other.seq);
    return other_scratch + int64_t(std::ceil(slope * double(seq - other.seq)));
  };
  const auto fits = [&](int64_t seq) {
    const ActivationPlan p = plan_activations(scale_trace(trace, other, seq));
    return fixed_bytes + scratch_at(seq) + p.arena_bytes <= budget_bytes;
  };
  if (max_seq < 1 || !fits(1)) return std::nullopt;
  int64_t lo = 1, hi = max_seq;  // fits(lo); find the largest that fits
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo + 1) / 2;
    if (fits(mid))
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

std::string budget_flag_value(int64_t bytes) {
  char buf[48];
  if (double(bytes) >= kGiB)
    std::snprintf(buf, sizeof buf, "%.2fGiB", std::ceil(double(bytes) / kGiB * 100.0) / 100.0);
  else
    std::snprintf(buf, sizeof buf, "%lldMiB",
                  static_cast<long long>((bytes + (int64_t(1) << 20) - 1) >> 20));
  return buf;
}

std::string over_budget_message(const DeviceNeed& need, int64_t budget_bytes, int64_t batch,
                                int64_t seq, const FitAdvice& advice) {
  std::string fit;
  if (advice.longest_seq)
    fit = str("--seq ", *advice.longest_seq,
              " fits this budget (estimated from the scaled plan) or ");
  else
    fit = str("no sequence length fits this budget (the weights, gradients and optimizer state",
              need.working_weight_bytes > 0 ? " with the bf16 working weights" : "", " alone need ",
              gib(double(need.fixed_bytes())), "); ");
  // every term of total_bytes(), so the sum reads true
  std::string bf16;
  if (need.working_weight_bytes > 0)
    bf16 += str(" + bf16 working weights ", gib(double(need.working_weight_bytes)));
  if (need.conversion_scratch_bytes > 0)
    bf16 += str(" + bf16 conversion ", gib(double(need.conversion_scratch_bytes)));
  return str(
      "device memory: needs ", gib_and_bytes(need.total_bytes()), " = weights ",
      gib(double(need.weight_bytes)), bf16, " + gradients ", gib(double(need.gradient_bytes)),
      " + ", need.optimizer, " state ", gib(double(need.optimizer_bytes)), " + activation arena ",
      gib(double(need.activation_arena_bytes)), ", budget is ", gib_and_bytes(budget_bytes),
      " (short ", gib(double(need.total_bytes() - budget_bytes)), ") at batch ", batch, " x seq ",
      seq, "; ", fit, "--device-memory ", budget_flag_value(advice.smallest_budget_bytes), " fits");
}

}  // namespace memo
