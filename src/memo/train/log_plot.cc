// Implementation of train/log_plot.h.
#include "memo/train/log_plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <utility>
#include <vector>

#include "memo/core/error.h"
#include "memo/core/json_excerpt.h"
#include "memo/core/svg.h"

namespace memo {
namespace {

constexpr double kW = 900, kPanelH = 220;                         // canvas width, panel height, px
constexpr double kLeft = 80, kRight = 220, kTop = 40, kGap = 50;  // margins; legend on the right

std::string label(double v) {  // 3 significant digits, exponent form outside [1e-2, 1e6)
  char buf[32];
  const double a = std::fabs(v);
  if (v == 0 || (a >= 1e-2 && a < 1e6))
    std::snprintf(buf, sizeof buf, "%.3g", v);
  else
    std::snprintf(buf, sizeof buf, "%.1e", v);
  return buf;
}

struct Series {
  std::vector<std::pair<double, double>> points;  // (step, value)
};

// One metric of every log: (step, value) for records that have it as a number.
std::vector<Series> metric(const std::vector<TrainLog>& logs, const char* key, double scale) {
  std::vector<Series> out(logs.size());
  for (size_t k = 0; k < logs.size(); ++k)
    for (const nlohmann::json& r : logs[k].records)
      if (r.contains(key) && r[key].is_number() && r.contains("step") && r["step"].is_number())
        out[k].points.emplace_back(r["step"].get<double>(), r[key].get<double>() * scale);
  return out;
}

struct Panel {
  double top;             // px
  double x0, x1, y0, y1;  // data ranges
  double px(double x) const { return kLeft + (x - x0) / (x1 - x0) * (kW - kLeft - kRight); }
  double py(double y) const { return top + kPanelH - (y - y0) / (y1 - y0) * kPanelH; }
};

// Axes, grid and title of a panel whose y range covers every series given.
Panel draw_panel(svg::Document& doc, double top, double x0, double x1,
                 const std::vector<const std::vector<Series>*>& all, const std::string& ylabel) {
  double y0 = INFINITY, y1 = -INFINITY;
  for (const auto* set : all)
    for (const Series& se : *set)
      for (const auto& [x, y] : se.points) y0 = std::min(y0, y), y1 = std::max(y1, y);
  if (!std::isfinite(y0)) y0 = 0, y1 = 1;
  if (y1 - y0 < 1e-12 * std::max(1.0, std::fabs(y1))) y0 -= 0.5, y1 += 0.5;
  const double pad = 0.05 * (y1 - y0);
  // a quantity that is never negative (lr, tokens/s, bytes) gets no negative axis label
  const Panel p{top, x0, x1 > x0 ? x1 : x0 + 1, y0 >= 0 ? std::max(0.0, y0 - pad) : y0 - pad,
                y1 + pad};
  const svg::PlotArea area{kLeft, top, kW - kRight, top + kPanelH};
  for (int i = 0; i <= 4; ++i) {
    const double y = p.y0 + (p.y1 - p.y0) * i / 4.0;
    doc.add(area.y_tick(p.py(y), label(y)));
    const double x = p.x0 + (p.x1 - p.x0) * i / 4.0;
    doc.add(area.x_tick(p.px(x), label(std::round(x))));
  }
  doc.add(area.frame());
  doc.add(area.y_title(ylabel));
  return p;
}

void draw_lines(svg::Document& doc, const Panel& p, const std::vector<Series>& series) {
  for (size_t k = 0; k < series.size(); ++k) {
    if (series[k].points.empty()) continue;
    std::vector<svg::Point> points;
    for (const auto& [x, y] : series[k].points) points.push_back({p.px(x), p.py(y)});
    doc.add(svg::path(
        points, str("fill=\"none\" stroke=\"", svg::series_colour(k), "\" stroke-width=\"1.5\"")));
  }
}

void draw_points(svg::Document& doc, const Panel& p, const std::vector<Series>& series) {
  for (size_t k = 0; k < series.size(); ++k)
    for (const auto& [x, y] : series[k].points)
      doc.add(svg::circle(
          p.px(x), p.py(y), 4,
          str("fill=\"white\" stroke=\"", svg::series_colour(k), "\" stroke-width=\"2\"")));
}

}  // namespace

TrainLog read_train_log(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw DataError(str("log ", path, " is a directory"));
  std::ifstream in(path);
  if (!in) throw DataError(str("cannot open log ", path));
  TrainLog log{std::filesystem::path(path).stem().string(), {}};
  std::string line;
  for (int64_t n = 1; std::getline(in, line); ++n) {
    if (line.empty()) continue;
    nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object())
      throw FormatError(str(path, " line ", n, " is not a JSON object: ", line.substr(0, 60),
                            line.size() > 60 ? "..." : ""));
    if (j.contains("step") && !j.at("step").is_number())
      throw FormatError(
          str(path, " line ", n, ": 'step' = ", json_excerpt(j.at("step")), " is not a number"));
    log.records.push_back(std::move(j));
  }
  return log;
}

std::string train_log_svg(const std::vector<TrainLog>& logs, const std::string& title) {
  const auto loss = metric(logs, "loss", 1.0), val = metric(logs, "val_loss", 1.0);
  const auto lr = metric(logs, "lr", 1.0), tps = metric(logs, "tokens_per_s", 1.0);
  const auto mem = metric(logs, "device_peak_bytes", 1.0 / (1024.0 * 1024.0));
  double x0 = INFINITY, x1 = -INFINITY;
  for (const auto* set : {&loss, &lr, &tps, &mem})
    for (const Series& se : *set)
      for (const auto& pt : se.points) x0 = std::min(x0, pt.first), x1 = std::max(x1, pt.first);
  if (!std::isfinite(x0))
    throw DataError("the logs hold no step records (lines with \"step\" and \"loss\")");
  const double height = kTop + 4 * (kPanelH + kGap);
  svg::Document doc(kW, height);
  doc.title(kLeft, title, 14);
  double top = kTop;
  Panel p = draw_panel(doc, top, x0, x1, {&loss, &val}, "loss (train line, validation points)");
  draw_lines(doc, p, loss);
  draw_points(doc, p, val);
  top += kPanelH + kGap;
  p = draw_panel(doc, top, x0, x1, {&lr}, "learning rate");
  draw_lines(doc, p, lr);
  top += kPanelH + kGap;
  p = draw_panel(doc, top, x0, x1, {&tps}, "tokens / s");
  draw_lines(doc, p, tps);
  top += kPanelH + kGap;
  p = draw_panel(doc, top, x0, x1, {&mem}, "device peak (MiB)");
  draw_lines(doc, p, mem);
  doc.add(svg::PlotArea{kLeft, kTop, kW - kRight, height}.x_title(height - 10, "step"));
  for (size_t k = 0; k < logs.size(); ++k) {
    const double y = kTop + 10 + 18 * double(k);
    doc.add(svg::line(kW - kRight + 10, y, kW - kRight + 36, y,
                      str("stroke=\"", svg::series_colour(k), "\" stroke-width=\"1.5\"")) +
            svg::text(kW - kRight + 42, y + 4, logs[k].name));
  }
  return std::move(doc).finish();
}

}  // namespace memo
