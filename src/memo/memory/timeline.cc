#include "memo/memory/timeline.h"

#include <algorithm>
#include <cstdio>
#include <utility>
#include <vector>

#include "memo/core/error.h"
#include "memo/core/svg.h"
#include "memo/core/units.h"

namespace memo {
namespace {

constexpr double kWidth = 960, kHeight = 480;
constexpr double kLeft = 90, kRight = 20, kTop = 40, kBottom = 50;
const char* const kColors[] = {"#1f77b4", "#2ca02c", "#9467bd", "#8c564b"};
constexpr const char* kBlack = R"(stroke="black")";
constexpr const char* kEnd = R"(text-anchor="end")";

}  // namespace

TimelineSeries timeline_series(const std::string& name, const ActivationPlan& plan,
                               int64_t fixed_bytes) {
  TimelineSeries s{name, fixed_bytes, fixed_bytes + plan.arena_bytes, {}, {}};
  const auto& requests = plan.trace.requests;
  for (size_t t = 0; t < requests.size(); ++t) {
    int64_t live = 0, top = 0;
    for (size_t i = 0; i < requests.size(); ++i) {
      const TracedRequest& r = requests[i];
      if (r.begin > plan::Step(t) || r.end <= plan::Step(t)) continue;
      const int64_t bytes = (r.bytes + kAlignBytes - 1) / kAlignBytes * kAlignBytes;
      live += bytes;
      top = std::max(top, plan.offsets[i] + bytes);
    }
    s.live_bytes.push_back(fixed_bytes + live);
    s.top_bytes.push_back(fixed_bytes + top);
  }
  return s;
}

std::string timeline_svg(const std::vector<TimelineSeries>& series, int64_t budget_bytes,
                         const std::string& title) {
  size_t steps = 1;
  int64_t y_max = budget_bytes;
  for (const TimelineSeries& s : series) {
    steps = std::max(steps, s.live_bytes.size());
    y_max = std::max(y_max, s.plan_peak_bytes);
  }
  y_max = std::max<int64_t>(1, y_max + y_max / 20);
  const double plot_w = kWidth - kLeft - kRight, plot_h = kHeight - kTop - kBottom;
  const auto x = [&](double step) { return kLeft + plot_w * step / double(steps); };
  const auto y = [&](double bytes) { return kTop + plot_h * (1.0 - bytes / double(y_max)); };
  svg::Document doc(kWidth, kHeight);
  doc.title(kLeft, title, 15);
  // axes and ticks
  doc.add(svg::line(kLeft, kTop, kLeft, kTop + plot_h, kBlack));
  doc.add(svg::line(kLeft, kTop + plot_h, kLeft + plot_w, kTop + plot_h, kBlack));
  for (int k = 0; k <= 5; ++k) {
    const double bytes = double(y_max) * k / 5.0;
    doc.add(svg::text(kLeft - 6, y(bytes) + 4, format_bytes(int64_t(bytes)), kEnd));
    doc.add(svg::line(kLeft, y(bytes), kLeft + plot_w, y(bytes), R"(stroke="#eee")"));
    const double step = double(steps) * k / 5.0;
    doc.add(svg::text(x(step), kTop + plot_h + 18, std::to_string(int64_t(step)),
                      R"(text-anchor="middle")"));
  }
  doc.add(svg::text(kLeft + plot_w / 2, kHeight - 10, "activation request (one training step)",
                    R"(text-anchor="middle")"));
  // budget and plan peak lines, then the step curves
  const auto hline = [&](int64_t bytes, const char* color, const char* dash,
                         const std::string& label) {
    const double at = y(double(bytes));
    doc.add(svg::line(kLeft, at, kLeft + plot_w, at,
                      str("stroke=\"", color, "\" stroke-dasharray=\"", dash, "\"")));
    doc.add(svg::text(kLeft + plot_w - 4, at - 4, label, str(kEnd, " fill=\"", color, "\"")));
  };
  if (budget_bytes > 0)
    hline(budget_bytes, "#d62728", "6,3", "budget " + format_bytes(budget_bytes));
  for (size_t k = 0; k < series.size(); ++k) {
    const TimelineSeries& s = series[k];
    const char* color = kColors[k % 4];
    hline(s.plan_peak_bytes, color, "2,2",
          s.name + " plan peak " + format_bytes(s.plan_peak_bytes));
    const auto curve = [&](const std::vector<int64_t>& v, const char* width, const char* opacity) {
      std::vector<svg::Point> points;  // a step per request
      for (size_t t = 0; t < v.size(); ++t) {
        points.push_back({x(double(t)), y(double(v[t]))});
        points.push_back({x(double(t + 1)), y(double(v[t]))});
      }
      doc.add(svg::polyline(points, str("fill=\"none\" stroke=\"", color, "\" stroke-width=\"",
                                        width, "\" stroke-opacity=\"", opacity, "\"")));
    };
    curve(s.top_bytes, "1", "0.45");
    curve(s.live_bytes, "2", "1");
    doc.add(svg::text(kLeft + 8, kTop + 16 + 16 * double(k),
                      s.name + ": live bytes (thick), planned arena top (thin)",
                      str("fill=\"", color, "\"")));
  }
  return std::move(doc).finish();
}

}  // namespace memo
