#include "memo/memory/memo.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace memo {

int64_t memo_offload_rows(double alpha, int64_t tokens, int64_t granularity) {
  const double rows = alpha * double(tokens);
  if (rows >= double(tokens)) return tokens;
  const int64_t g = std::max<int64_t>(granularity, 1);
  return int64_t(std::floor(rows / double(g))) * g;
}

AlphaInputs memo_alpha_sizes(const SkeletalLayout& layout, int64_t batch, int64_t seq) {
  AlphaInputs in;
  for (int i = 0; i < layout.num_fields(); ++i) {
    const int64_t bytes = layout.fields[size_t(i)].bytes(batch, seq);
    if (layout.fields[size_t(i)].per_token)
      in.other_bytes += bytes;
    else if (i == 0)
      in.input_bytes += bytes;  // x
    else
      in.attn_bytes += bytes;  // attn and lse
  }
  in.num_layers = layout.num_layers;
  in.seq = seq;
  return in;
}

MemoStrategy::MemoStrategy(const SkeletalLayout& layout, ActivationAllocator& alloc,
                           const SwapOptions& swap, const MemoOptions& options)
    : SwapStrategy(layout, alloc, swap),
      options_(options),
      host_memory_bytes_(swap.host_memory_bytes) {
  MEMO_CHECK(!options.alpha || (*options.alpha >= 0.0 && *options.alpha <= 1.0), "memo: alpha ",
             *options.alpha, " must be in [0, 1]");
}

bool MemoStrategy::wants_warmup() const {
  const bool given = options_.layer_forward_s > 0.0 && options_.bandwidth_bytes_per_s > 0.0;
  return !options_.alpha && !given && !profile().valid;
}

MemoStrategy::Decision MemoStrategy::decide(int64_t batch, int64_t seq, bool all_rows) const {
  AlphaInputs in = memo_alpha_sizes(layout(), batch, seq);
  in.num_layers = offloaded_layers() + 2;  // a pipeline chunk's (alpha.h counts L - 2)
  in.host_memory_bytes = host_memory_bytes_;
  in.layer_forward_s =
      options_.layer_forward_s > 0.0 ? options_.layer_forward_s : profile().layer_forward_s;
  in.bandwidth_bytes_per_s = options_.bandwidth_bytes_per_s > 0.0 ? options_.bandwidth_bytes_per_s
                                                                  : profile().d2h_bytes_per_s;
  const AlphaChoice choice = choose_alpha(in);
  if (!choice.host_fits) throw BudgetError(str("memo: ", choice.advice));
  Decision d{};
  const int64_t g = backend()->reproducible_rows();
  const int64_t T = layout().token_rows(batch, seq);
  if (options_.alpha) {
    d.alpha = *options_.alpha;
    // the pool holds the rows alpha rounds down to (memo_offload_rows), as memo plan, the
    // session's check before step 1 and the pool itself count them
    const int64_t need = planned_host_bytes(batch, seq, memo_offload_rows(d.alpha, T, g));
    if (host_memory_bytes_ > 0 && need > host_memory_bytes_) {
      // the most rows, in panels, that fit, and an alpha that rounds to no more
      int64_t lo = 0, hi = (T + g - 1) / g;
      while (lo < hi) {
        const int64_t mid = (lo + hi + 1) / 2;
        if (planned_host_bytes(batch, seq, std::min(mid * g, T)) <= host_memory_bytes_)
          lo = mid;
        else
          hi = mid - 1;
      }
      // the fewest decimals whose alpha rounds to those rows (rows / T cut to 2 decimals could
      // round down a panel)
      const int64_t rows = std::min(lo * g, T);
      double fits = 0.0;
      std::string shown;
      for (double scale = 100.0; scale <= 1e6 && shown.empty(); scale *= 10.0) {
        fits = std::ceil(double(rows) / double(T) * scale) / scale;
        if (memo_offload_rows(fits, T, g) == rows) shown = str(fits);
      }
      if (shown.empty()) {  // rows / T itself a short decimal that alpha x T floors below
        fits = double(rows) / double(T);
        while (memo_offload_rows(fits, T, g) < rows) fits = std::nextafter(fits, 2.0);
        char text[32];
        std::snprintf(text, sizeof text, "%.17g", fits);
        shown = text;
      }
      throw BudgetError(str("memo: --alpha ", d.alpha, " needs ", gib(double(need)), " (", need,
                            " bytes) of host memory for ", in.num_layers - 2,
                            " offloaded layers, budget ", gib(double(host_memory_bytes_)), " (",
                            host_memory_bytes_, " bytes); --alpha ", shown, " fits"));
    }
    d.text = str("memo: alpha ", d.alpha, " (given)");
  } else if (wants_warmup()) {
    d.alpha = 0.0;  // the warm-up: least host memory; every alpha gives the same
                    // values
    d.text = "memo: profiling a warm-up micro-batch at alpha 0";
  } else {
    d.alpha = choice.alpha;
    d.text = str("memo: ", describe(in, choice));
    if (!choice.copy_hidden) d.text += str("; warning: ", choice.advice);
  }
  if (all_rows) {  // Note [Tensor-parallel activations]
    const int64_t need = planned_host_bytes(batch, seq, T);
    if (host_memory_bytes_ > 0 && need > host_memory_bytes_)
      throw BudgetError(str("memo: under --tp a rank's ", T, " token rows are not whole ", g,
                            "-row panels, so all of them travel: ", gib(double(need)), " (", need,
                            " bytes) of host memory, budget ", gib(double(host_memory_bytes_)),
                            "; give --host-memory ", need, " or more, or a --seq whose rank rows ",
                            "are whole panels"));
    d.alpha = 1.0;
    d.rows = T;
    d.text += str("; offloading all ", T, " token rows (under --tp a rank's rows must be whole ", g,
                  "-row panels to be rebuilt), host ", gib(double(need)));
    return d;
  }
  // the cost model sizes alpha from unrounded bytes; the pool takes each field rounded to 64
  // bytes, so the rows come down a panel at a time to what the pool holds
  d.rows = memo_offload_rows(d.alpha, T, g);
  while (host_memory_bytes_ > 0 && d.rows > 0 &&
         planned_host_bytes(batch, seq, d.rows) > host_memory_bytes_)
    d.rows = std::max<int64_t>(0, (d.rows - 1) / std::max<int64_t>(g, 1) * std::max<int64_t>(g, 1));
  d.text += str("; offloading ", d.rows, " of ", T, " token rows (alpha ",
                double(d.rows) / double(T), " after rounding to ", g, "-row panels), host ",
                gib(double(planned_host_bytes(batch, seq, d.rows))));
  return d;
}

std::string MemoStrategy::summary() const {
  if (batch_ > 0) return decide(batch_, seq_, all_rows_).text;
  if (options_.alpha)
    return str("memo: alpha ", *options_.alpha,
               " (given; the step log's \"alpha\" is the fraction of token rows offloaded after "
               "rounding to panels)");
  return "memo: alpha not chosen yet";
}

double MemoStrategy::offloaded_alpha() const {
  const int64_t T = batch_ > 0 ? layout().token_rows(batch_, seq_) : 0;
  // a model of one or two layers (or a pipeline chunk's last two) offloads nothing: alpha 0
  return T > 0 && offloaded_layers() > 0 ? double(offload_rows()) / double(T) : 0.0;
}

int64_t MemoStrategy::choose_offload_rows(int64_t batch, int64_t seq) {
  const bool all_rows = layers() && layers()->all_rows_travel(layout().token_rows(batch, seq));
  const Decision d = decide(batch, seq, all_rows);
  all_rows_ = all_rows;
  alpha_ = d.alpha;
  batch_ = batch;
  seq_ = seq;
  return d.rows;
}

}  // namespace memo
