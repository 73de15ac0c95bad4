// Implementation of train/eval_plots.h.
#include "memo/train/eval_plots.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <utility>

#include "memo/core/error.h"
#include "memo/core/svg.h"

namespace memo {
namespace {

constexpr double kW = 900, kH = 420;                                 // canvas, px
constexpr double kLeft = 80, kRight = 220, kTop = 40, kBottom = 60;  // margins; legend right

std::string label(double v) {  // 3 significant digits
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", v);
  return buf;
}

}  // namespace

std::string loss_by_position_svg(const std::vector<PositionCurve>& curves,
                                 const std::string& title) {
  double x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY;
  for (const PositionCurve& c : curves)
    for (const PositionLoss& b : c.buckets) {
      if (b.tokens == 0) continue;
      x0 = std::min(x0, double(b.from)), x1 = std::max(x1, double(b.to));
      y0 = std::min(y0, b.loss), y1 = std::max(y1, b.loss);
    }
  if (!std::isfinite(x0)) throw DataError("loss by position: no bucket holds a token");
  if (y1 - y0 < 1e-9) y0 -= 0.5, y1 += 0.5;
  const double pad = 0.05 * (y1 - y0);
  y0 -= pad, y1 += pad;
  const svg::PlotArea area{kLeft, kTop, kW - kRight, kH - kBottom};
  auto px = [&](double x) { return area.left + (x - x0) / (x1 - x0) * (area.right - area.left); };
  auto py = [&](double y) { return area.bottom - (y - y0) / (y1 - y0) * (area.bottom - area.top); };
  svg::Document doc(kW, kH);
  doc.title(kLeft, title, 14);
  for (int i = 0; i <= 4; ++i) {
    const double y = y0 + (y1 - y0) * i / 4.0, x = x0 + (x1 - x0) * i / 4.0;
    doc.add(area.y_tick(py(y), label(y)));
    doc.add(area.x_tick(px(x), label(std::round(x))));
  }
  doc.add(area.frame());
  doc.add(area.y_title("loss (nats per token)"));
  doc.add(area.x_title(kH - 20, "position in the window (tokens)"));
  for (size_t k = 0; k < curves.size(); ++k) {
    std::vector<svg::Point> points;
    for (const PositionLoss& b : curves[k].buckets)
      if (b.tokens > 0) points.push_back({px(0.5 * double(b.from + b.to)), py(b.loss)});
    const std::string colour = svg::series_colour(k);
    doc.add(svg::path(points, str("fill=\"none\" stroke=\"", colour, "\" stroke-width=\"1.5\"")));
    for (const svg::Point& p : points)
      doc.add(svg::circle(p.x, p.y, 3, str("fill=\"", colour, "\"")));
    const double y = kTop + 10 + 18 * double(k);
    doc.add(svg::line(kW - kRight + 10, y, kW - kRight + 36, y,
                      str("stroke=\"", colour, "\" stroke-width=\"1.5\"")) +
            svg::text(kW - kRight + 42, y + 4, curves[k].name));
  }
  return std::move(doc).finish();
}

std::string retrieval_heatmap_svg(const std::vector<int64_t>& lengths,
                                  const std::vector<double>& depths,
                                  const std::vector<std::vector<double>>& accuracy,
                                  const std::string& title) {
  MEMO_CHECK(!lengths.empty() && !depths.empty() && accuracy.size() == lengths.size(),
             "retrieval_heatmap_svg: ", lengths.size(), " lengths, ", depths.size(), " depths, ",
             accuracy.size(), " rows");
  constexpr double kCell = 56;
  const double width = kLeft + kCell * double(lengths.size()) + 40;
  const double height = kTop + kCell * double(depths.size()) + kBottom;
  svg::Document doc(width, height);
  doc.title(kLeft, title, 14);
  const svg::PlotArea area{kLeft, kTop, kLeft + kCell * double(lengths.size()),
                           kTop + kCell * double(depths.size())};
  for (size_t l = 0; l < lengths.size(); ++l) {
    MEMO_CHECK(accuracy[l].size() == depths.size(), "retrieval_heatmap_svg: row ", l, " has ",
               accuracy[l].size(), " depths");
    const double x = kLeft + kCell * double(l);
    doc.add(svg::text(x + kCell / 2, area.bottom + 16, std::to_string(lengths[l]),
                      "text-anchor=\"middle\""));
    for (size_t d = 0; d < depths.size(); ++d) {
      const double a = std::clamp(accuracy[l][d], 0.0, 1.0), y = kTop + kCell * double(d);
      char fill[16];
      std::snprintf(fill, sizeof fill, "#%02x%02x40", int(std::lround(220 * (1 - a))),
                    int(std::lround(40 + 160 * a)));
      doc.add(svg::rect(x, y, kCell, kCell, str("fill=\"", fill, "\" stroke=\"white\"")) +
              svg::text(x + kCell / 2, y + kCell / 2 + 4, label(a),
                        "text-anchor=\"middle\" fill=\"white\""));
      if (l == 0)
        doc.add(svg::text(kLeft - 6, y + kCell / 2 + 4, label(depths[d]), "text-anchor=\"end\""));
    }
  }
  doc.add(area.frame());
  doc.add(area.y_title("depth of the key (fraction of the context)"));
  doc.add(area.x_title(height - 20, "context length (tokens)"));
  return std::move(doc).finish();
}

}  // namespace memo
