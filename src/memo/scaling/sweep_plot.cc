#include "memo/scaling/sweep_plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "memo/core/error.h"

namespace memo::scaling {
namespace {

constexpr double kW = 900, kH = 480;                                 // canvas, px
constexpr double kLeft = 80, kRight = 340, kTop = 40, kBottom = 60;  // margins; legend on the right
const char* const kColours[] = {"#d62728", "#1f77b4", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"};

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

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
};

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
  std::string s = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + num(kW) + "\" height=\"" +
                  num(kH) +
                  "\" font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" "
                  "height=\"100%\" fill=\"white\"/>\n";
  s += "<text x=\"" + num(kLeft) + "\" y=\"22\" font-size=\"14\">" + title + "</text>\n";
  // grid and tick labels at powers of ten (and 2x, 5x on x when the range is short)
  for (int e = int(std::floor(ax.x0)); e <= int(std::ceil(ax.x1)); ++e)
    for (double m : {1.0, 2.0, 5.0}) {
      const double b = m * std::pow(10.0, e);
      if (std::log10(b) < ax.x0 || std::log10(b) > ax.x1) continue;
      const double x = ax.px(b);
      s += "<line x1=\"" + num(x) + "\" y1=\"" + num(kTop) + "\" x2=\"" + num(x) + "\" y2=\"" +
           num(kH - kBottom) + "\" stroke=\"#ddd\"/>\n<text x=\"" + num(x) + "\" y=\"" +
           num(kH - kBottom + 16) + "\" text-anchor=\"middle\">" + label(b) + "</text>\n";
    }
  for (int e = int(std::floor(ax.y0)); e <= int(std::ceil(ax.y1)); ++e)
    for (double m : {1.0, 3.0}) {
      const double lr = m * std::pow(10.0, e);
      if (std::log10(lr) < ax.y0 || std::log10(lr) > ax.y1) continue;
      const double y = ax.py(lr);
      s += "<line x1=\"" + num(kLeft) + "\" y1=\"" + num(y) + "\" x2=\"" + num(kW - kRight) +
           "\" y2=\"" + num(y) + "\" stroke=\"#ddd\"/>\n<text x=\"" + num(kLeft - 6) + "\" y=\"" +
           num(y + 4) + "\" text-anchor=\"end\">" + label(lr) + "</text>\n";
    }
  s += "<rect x=\"" + num(kLeft) + "\" y=\"" + num(kTop) + "\" width=\"" +
       num(kW - kLeft - kRight) + "\" height=\"" + num(kH - kTop - kBottom) +
       "\" fill=\"none\" stroke=\"black\"/>\n";
  s += "<text x=\"" + num((kLeft + kW - kRight) / 2) + "\" y=\"" + num(kH - 18) +
       "\" text-anchor=\"middle\">batch size (tokens per step)</text>\n";
  s += "<text transform=\"translate(18," + num((kTop + kH - kBottom) / 2) +
       ") rotate(-90)\" text-anchor=\"middle\">optimal learning rate</text>\n";
  double legend_y = kTop + 10;
  auto legend = [&](const std::string& swatch, const std::string& text) {
    s += swatch + "<text x=\"" + num(kW - kRight + 42) + "\" y=\"" + num(legend_y + 4) + "\">" +
         text + "</text>\n";
    legend_y += 18;
  };
  for (size_t k = 0; k < analyses.size(); ++k) {
    const SweepAnalysis& a = analyses[k];
    const std::string colour = kColours[k % 6];
    const std::string& name = a.series;
    for (const LawFit& f : a.laws.fits) {
      if (f.law == Law::kPower) continue;
      std::string path;
      for (int i = 0; i <= 200; ++i) {
        const double b = std::pow(10.0, ax.x0 + (ax.x1 - ax.x0) * i / 200.0);
        const double y = std::clamp(ax.py(law_lr(f.law, f.params, b)), kTop, kH - kBottom);
        path += (i ? " L" : "M") + num(ax.px(b)) + " " + num(y);
      }
      const std::string dash = f.law == Law::kSgd ? " stroke-dasharray=\"6,4\"" : "";
      s += "<path d=\"" + path + "\" fill=\"none\" stroke=\"" + colour + "\" stroke-width=\"1.5\"" +
           dash + "/>\n";
      char text[120];
      std::snprintf(text, sizeof text, "%s %s law%s", name.c_str(), law_name(f.law).c_str(),
                    f.law != Law::kSurge         ? ""
                    : f.params[1] > 100.0 * bmax ? ", B_noise far beyond the sweep"
                                                 : str(", B_noise ", label(f.params[1])).c_str());
      legend("<line x1=\"" + num(kW - kRight + 10) + "\" y1=\"" + num(legend_y) + "\" x2=\"" +
                 num(kW - kRight + 36) + "\" y2=\"" + num(legend_y) + "\" stroke=\"" + colour +
                 "\" stroke-width=\"1.5\"" + dash + "/>",
             text);
    }
    for (const BatchSummary& b : a.batches) {
      if (b.seed_lrs.size() > 1)  // the seeds' own optima: a bar from the lowest to the highest
        s += "<line x1=\"" + num(ax.px(b.optimum.batch)) + "\" y1=\"" +
             num(ax.py(b.seed_lrs.front())) + "\" x2=\"" + num(ax.px(b.optimum.batch)) +
             "\" y2=\"" + num(ax.py(b.seed_lrs.back())) + "\" stroke=\"" + colour +
             "\" stroke-width=\"1\"/>\n";
      const std::string fill = b.optimum.at_grid_edge ? "white" : colour;
      s += "<circle cx=\"" + num(ax.px(b.optimum.batch)) + "\" cy=\"" + num(ax.py(b.optimum.lr)) +
           "\" r=\"4\" fill=\"" + fill + "\" stroke=\"" + colour + "\"/>\n";
    }
    legend("<circle cx=\"" + num(kW - kRight + 23) + "\" cy=\"" + num(legend_y) +
               "\" r=\"4\" fill=\"" + colour + "\" stroke=\"" + colour + "\"/>",
           name + " optimal lr (hollow: grid edge" + (a.seeds > 1 ? "; bar: seeds' range)" : ")"));
    for (const LawFit& f : a.laws.fits)
      if (f.law == Law::kSurge && std::log10(f.params[1]) > ax.x0 &&
          std::log10(f.params[1]) < ax.x1)
        s += "<line x1=\"" + num(ax.px(f.params[1])) + "\" y1=\"" + num(kTop) + "\" x2=\"" +
             num(ax.px(f.params[1])) + "\" y2=\"" + num(kH - kBottom) + "\" stroke=\"" + colour +
             "\" stroke-dasharray=\"2,3\"/>\n";
    legend_y += 6;
  }
  s += "</svg>\n";
  return s;
}

}  // namespace memo::scaling
