#include "memo/memory/alpha.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "memo/core/error.h"
#include "memo/memory/budget.h"

namespace memo {

const char* alpha_bound_name(AlphaBound b) {
  switch (b) {
    case AlphaBound::kNone:
      return "none";
    case AlphaBound::kBandwidth:
      return "bandwidth";
    case AlphaBound::kHostMemory:
      return "host memory";
  }
  return "?";
}

double host_bytes_at(const AlphaInputs& in, double alpha) {
  const int offloaded_layers = std::max(0, in.num_layers - 2);
  return double(offloaded_layers) *
         (double(in.input_bytes) + double(in.attn_bytes) + alpha * double(in.other_bytes));
}

AlphaChoice choose_alpha(const AlphaInputs& in) {
  MEMO_CHECK(in.input_bytes >= 0 && in.attn_bytes >= 0 && in.other_bytes >= 0 &&
                 in.num_layers >= 1 && in.layer_forward_s >= 0.0 &&
                 in.bandwidth_bytes_per_s >= 0.0 && in.host_memory_bytes >= 0,
             "choose_alpha: inputs S_in ", in.input_bytes, " S_attn ", in.attn_bytes, " S_oth ",
             in.other_bytes, " L ", in.num_layers, " T_layer ", in.layer_forward_s, " s B ",
             in.bandwidth_bytes_per_s, " B/s M_host ", in.host_memory_bytes);
  constexpr double kInf = std::numeric_limits<double>::infinity();
  AlphaChoice c;
  if (in.num_layers <= 2) return c;  // nothing is ever offloaded
  const double fixed = double(in.input_bytes) + double(in.attn_bytes);
  const double other = double(in.other_bytes);
  // Each bound solves its constraint for alpha; with S_oth = 0 alpha does not matter.
  auto solve = [&](double budget_per_layer) {
    if (other == 0.0) return budget_per_layer >= fixed ? kInf : -kInf;
    return (budget_per_layer - fixed) / other;
  };
  c.alpha_bandwidth =
      in.bandwidth_bytes_per_s > 0.0 ? solve(in.bandwidth_bytes_per_s * in.layer_forward_s) : kInf;
  c.alpha_host = in.host_memory_bytes > 0
                     ? solve(double(in.host_memory_bytes) / double(in.num_layers - 2))
                     : kInf;
  const double bound = std::min(c.alpha_bandwidth, c.alpha_host);
  c.alpha = std::clamp(bound, 0.0, 1.0);
  if (bound < 1.0)
    c.binding =
        c.alpha_host <= c.alpha_bandwidth ? AlphaBound::kHostMemory : AlphaBound::kBandwidth;
  c.host_fits = c.alpha_host >= 0.0;
  c.copy_hidden = c.alpha_bandwidth >= 0.0;
  const double need_host = host_bytes_at(in, 0.0);
  if (!c.host_fits) {
    // Every per-layer size is linear in the tokens, so a sequence shorter by the shortfall's ratio
    // fits (rounded down).
    const int64_t seq_fit =
        int64_t(std::floor(double(in.seq) * double(in.host_memory_bytes) / need_host));
    c.advice =
        str("host memory ", gib(double(in.host_memory_bytes)),
            " cannot hold even alpha = 0: ", in.num_layers - 2, " offloaded layers x (input ",
            gib(double(in.input_bytes)), " + attention output ", gib(double(in.attn_bytes)),
            ") = ", gib(need_host), " (short ", gib(need_host - double(in.host_memory_bytes)),
            "); ", seq_fit > 0 ? str("--seq ", seq_fit, " or ") : std::string(), "--host-memory ",
            budget_flag_value(int64_t(std::ceil(need_host))), " would fit");
  } else if (!c.copy_hidden) {
    const double need_bw = fixed / in.layer_forward_s;
    c.advice =
        str("copying one layer's input and attention output (", gib(fixed), ") at ",
            in.bandwidth_bytes_per_s / 1e9, " GB/s takes ", fixed / in.bandwidth_bytes_per_s * 1e3,
            " ms, longer than the ", in.layer_forward_s * 1e3,
            " ms layer forward: the forward will wait on copies "
            "even at alpha = 0; ",
            need_bw / 1e9,
            " GB/s or a longer sequence (the forward "
            "grows as seq^2, the copy as seq) would hide it");
  }
  return c;
}

// Per-layer sizes in MiB: at the lengths a CPU run reaches they round to 0.00 GiB.
std::string describe(const AlphaInputs& in, const AlphaChoice& c) {
  const auto mib = [](int64_t bytes) { return str(double(bytes) / 1048576.0, " MiB"); };
  return str(
      "alpha ", c.alpha, " (binding: ", alpha_bound_name(c.binding), "; bandwidth bound ",
      c.alpha_bandwidth, ", host bound ", c.alpha_host, ") from S_in ", mib(in.input_bytes),
      ", S_attn ", mib(in.attn_bytes), ", S_other ", mib(in.other_bytes), " per layer, L ",
      in.num_layers, ", T_layer ", in.layer_forward_s * 1e3, " ms, bandwidth ",
      in.bandwidth_bytes_per_s / 1e9, " GB/s, host memory ",
      in.host_memory_bytes > 0 ? gib(double(in.host_memory_bytes)) : std::string("unlimited"));
}

}  // namespace memo
