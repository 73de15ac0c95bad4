#include "memo/memory/timeline.h"

#include <algorithm>
#include <cstdio>

#include "memo/core/units.h"

namespace memo {
namespace {

constexpr double kWidth = 960, kHeight = 480;
constexpr double kLeft = 90, kRight = 20, kTop = 40, kBottom = 50;
const char* const kColors[] = {"#1f77b4", "#2ca02c", "#9467bd", "#8c564b"};

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '<')
      out += "&lt;";
    else if (c == '>')
      out += "&gt;";
    else if (c == '&')
      out += "&amp;";
    else
      out += c;
  }
  return out;
}

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
  std::string svg =
      str("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"", kWidth, "\" height=\"", kHeight,
          "\" font-family=\"sans-serif\" font-size=\"12\">\n",
          "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n", "<text x=\"", kLeft,
          "\" y=\"22\" font-size=\"15\">", escape(title), "</text>\n");
  // axes and ticks
  svg += str("<line x1=\"", kLeft, "\" y1=\"", kTop, "\" x2=\"", kLeft, "\" y2=\"", kTop + plot_h,
             "\" stroke=\"black\"/>\n<line x1=\"", kLeft, "\" y1=\"", kTop + plot_h, "\" x2=\"",
             kLeft + plot_w, "\" y2=\"", kTop + plot_h, "\" stroke=\"black\"/>\n");
  for (int k = 0; k <= 5; ++k) {
    const double bytes = double(y_max) * k / 5.0;
    svg +=
        str("<text x=\"", kLeft - 6, "\" y=\"", num(y(bytes) + 4), "\" text-anchor=\"end\">",
            format_bytes(int64_t(bytes)), "</text>\n<line x1=\"", kLeft, "\" y1=\"", num(y(bytes)),
            "\" x2=\"", kLeft + plot_w, "\" y2=\"", num(y(bytes)), "\" stroke=\"#eee\"/>\n");
    const double step = double(steps) * k / 5.0;
    svg += str("<text x=\"", num(x(step)), "\" y=\"", kTop + plot_h + 18,
               "\" text-anchor=\"middle\">", int64_t(step), "</text>\n");
  }
  svg += str("<text x=\"", kLeft + plot_w / 2, "\" y=\"", kHeight - 10,
             "\" text-anchor=\"middle\">activation request (one training step)</text>\n");
  // budget and plan peak lines, then the step curves
  const auto hline = [&](int64_t bytes, const char* color, const char* dash,
                         const std::string& label) {
    svg += str("<line x1=\"", kLeft, "\" y1=\"", num(y(double(bytes))), "\" x2=\"", kLeft + plot_w,
               "\" y2=\"", num(y(double(bytes))), "\" stroke=\"", color, "\" stroke-dasharray=\"",
               dash, "\"/>\n<text x=\"", kLeft + plot_w - 4, "\" y=\"", num(y(double(bytes)) - 4),
               "\" text-anchor=\"end\" fill=\"", color, "\">", escape(label), "</text>\n");
  };
  if (budget_bytes > 0)
    hline(budget_bytes, "#d62728", "6,3", "budget " + format_bytes(budget_bytes));
  for (size_t k = 0; k < series.size(); ++k) {
    const TimelineSeries& s = series[k];
    const char* color = kColors[k % 4];
    hline(s.plan_peak_bytes, color, "2,2",
          s.name + " plan peak " + format_bytes(s.plan_peak_bytes));
    const auto curve = [&](const std::vector<int64_t>& v, const char* width, const char* opacity) {
      std::string pts;
      for (size_t t = 0; t < v.size(); ++t)
        pts += num(x(double(t))) + "," + num(y(double(v[t]))) + " " + num(x(double(t + 1))) + "," +
               num(y(double(v[t]))) + " ";
      svg += str("<polyline fill=\"none\" stroke=\"", color, "\" stroke-width=\"", width,
                 "\" stroke-opacity=\"", opacity, "\" points=\"", pts, "\"/>\n");
    };
    curve(s.top_bytes, "1", "0.45");
    curve(s.live_bytes, "2", "1");
    svg += str("<text x=\"", kLeft + 8, "\" y=\"", kTop + 16 + 16 * double(k), "\" fill=\"", color,
               "\">", escape(s.name), ": live bytes (thick), planned arena top (thin)</text>\n");
  }
  svg += "</svg>\n";
  return svg;
}

}  // namespace memo
