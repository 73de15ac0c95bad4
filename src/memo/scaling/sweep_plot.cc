// Implementation of scaling/sweep_plot.h, over the SVG writer of core/svg.h.
#include "memo/scaling/sweep_plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "memo/core/error.h"
#include "memo/core/svg.h"

namespace memo::scaling {
namespace {

constexpr double kW = 900, kH = 480;                                 // canvas, px
constexpr double kLeft = 80, kRight = 340, kTop = 40, kBottom = 60;  // margins; legend on the right
constexpr svg::PlotArea kArea{kLeft, kTop, kW - kRight, kH - kBottom};

std::string label(double v) {  // 1e-3 -> "1e-03", 2048 -> "2048"
  char buf[32];
  if (v >= 1 && v < 1e6)
    std::snprintf(buf, sizeof buf, "%.0f", v);
  else
    std::snprintf(buf, sizeof buf, "%.0e", v);
  return buf;
}

struct Axes {
  double x0, x1, y0, y1;  // log10 ranges
  double px(double b) const {
    return kLeft + (std::log10(b) - x0) / (x1 - x0) * (kW - kLeft - kRight);
  }
  double py(double lr) const {
    return kH - kBottom - (std::log10(lr) - y0) / (y1 - y0) * (kH - kTop - kBottom);
  }
  // Grid lines at m x 10^e for each multiple m inside the range [lo, hi] (log10).
  template <typename Tick>
  static void grid(double lo, double hi, std::initializer_list<double> multiples, Tick tick) {
    for (int e = int(std::floor(lo)); e <= int(std::ceil(hi)); ++e)
      for (double m : multiples) {
        const double v = m * std::pow(10.0, e);
        if (std::log10(v) >= lo && std::log10(v) <= hi) tick(v);
      }
  }
};

// The legend's entries, one under the other right of the plot area.
struct Legend {
  svg::Document& doc;
  double y = kTop + 10;
  void add(const std::string& swatch, const std::string& text) {
    doc.add(swatch + svg::text(kW - kRight + 42, y + 4, text));
    y += 18;
  }
};

// One fitted law as a curve over the whole batch range, with its legend entry.
void draw_law(svg::Document& doc, Legend& legend, const Axes& ax, const LawFit& f,
              const std::string& name, const std::string& colour, double bmax) {
  std::vector<svg::Point> points;
  for (int i = 0; i <= 200; ++i) {
    const double b = std::pow(10.0, ax.x0 + (ax.x1 - ax.x0) * i / 200.0);
    points.push_back({ax.px(b), std::clamp(ax.py(law_lr(f.law, f.params, b)), kTop, kH - kBottom)});
  }
  const std::string style = "stroke=\"" + colour + "\" stroke-width=\"1.5\"" +
                            (f.law == Law::kSgd ? " stroke-dasharray=\"6,4\"" : "");
  doc.add(svg::path(points, "fill=\"none\" " + style));
  const std::string noise = f.law != Law::kSurge         ? ""
                            : f.params[1] > 100.0 * bmax ? ", B_noise far beyond the sweep"
                                                         : ", B_noise " + label(f.params[1]);
  legend.add(svg::line(kW - kRight + 10, legend.y, kW - kRight + 36, legend.y, style),
             name + " " + law_name(f.law) + " law" + noise);
}

}  // namespace

std::string sweep_svg(const std::vector<SweepAnalysis>& analyses, const std::string& title) {
  double bmin = INFINITY, bmax = 0, lmin = INFINITY, lmax = 0;
  for (const SweepAnalysis& a : analyses)
    for (const BatchSummary& b : a.batches) {
      bmin = std::min(bmin, b.optimum.batch), bmax = std::max(bmax, b.optimum.batch);
      lmin = std::min(lmin, b.optimum.lr), lmax = std::max(lmax, b.optimum.lr);
      for (double lr : b.seed_lrs) lmin = std::min(lmin, lr), lmax = std::max(lmax, lr);
    }
  const Axes ax{std::floor(std::log10(bmin / 1.5) * 2) / 2,
                std::ceil(std::log10(bmax * 1.5) * 2) / 2, std::floor(std::log10(lmin / 2) * 2) / 2,
                std::ceil(std::log10(lmax * 2) * 2) / 2};
  svg::Document doc(kW, kH);
  doc.title(kLeft, title, 14);
  // grid and tick labels at powers of ten (and 2x, 5x on x when the range is short)
  Axes::grid(ax.x0, ax.x1, {1.0, 2.0, 5.0},
             [&](double b) { doc.add(kArea.x_tick(ax.px(b), label(b))); });
  Axes::grid(ax.y0, ax.y1, {1.0, 3.0},
             [&](double lr) { doc.add(kArea.y_tick(ax.py(lr), label(lr))); });
  doc.add(kArea.frame());
  doc.add(kArea.x_title(kH - 18, "batch size (tokens per step)"));
  doc.add(kArea.y_title("optimal learning rate"));
  Legend legend{doc};
  for (size_t k = 0; k < analyses.size(); ++k) {
    const SweepAnalysis& a = analyses[k];
    const std::string colour = svg::series_colour(k);
    const std::string stroke = "stroke=\"" + colour + "\"";
    for (const LawFit& f : a.laws.fits)
      if (f.law != Law::kPower) draw_law(doc, legend, ax, f, a.series, colour, bmax);
    for (const BatchSummary& b : a.batches) {
      const double x = ax.px(b.optimum.batch);
      if (b.seed_lrs.size() > 1)  // the seeds' own optima: a bar from the lowest to the highest
        doc.add(svg::line(x, ax.py(b.seed_lrs.front()), x, ax.py(b.seed_lrs.back()),
                          stroke + " stroke-width=\"1\""));
      const std::string fill = b.optimum.at_grid_edge ? "white" : colour;
      doc.add(svg::circle(x, ax.py(b.optimum.lr), 4, "fill=\"" + fill + "\" " + stroke));
    }
    legend.add(
        svg::circle(kW - kRight + 23, legend.y, 4, "fill=\"" + colour + "\" " + stroke),
        a.series + " optimal lr (hollow: grid edge" + (a.seeds > 1 ? "; bar: seeds' range)" : ")"));
    for (const LawFit& f : a.laws.fits)
      if (f.law == Law::kSurge && std::log10(f.params[1]) > ax.x0 &&
          std::log10(f.params[1]) < ax.x1)
        doc.add(svg::line(ax.px(f.params[1]), kTop, ax.px(f.params[1]), kH - kBottom,
                          stroke + " stroke-dasharray=\"2,3\""));
    legend.y += 6;
  }
  return std::move(doc).finish();
}

}  // namespace memo::scaling
