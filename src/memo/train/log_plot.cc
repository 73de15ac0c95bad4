// Implementation of train/log_plot.h.
#include "memo/train/log_plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "memo/core/error.h"

namespace memo {
namespace {

constexpr double kW = 900, kPanelH = 220;                         // canvas width, panel height, px
constexpr double kLeft = 80, kRight = 220, kTop = 40, kGap = 50;  // margins; legend on the right
const char* const kColours[] = {"#d62728", "#1f77b4", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"};

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

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
      if (r.contains(key) && r[key].is_number() && r.contains("step"))
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
Panel draw_panel(std::string& s, double top, double x0, double x1,
                 const std::vector<const std::vector<Series>*>& all, const std::string& ylabel) {
  double y0 = INFINITY, y1 = -INFINITY;
  for (const auto* set : all)
    for (const Series& se : *set)
      for (const auto& [x, y] : se.points) y0 = std::min(y0, y), y1 = std::max(y1, y);
  if (!std::isfinite(y0)) y0 = 0, y1 = 1;
  if (y1 - y0 < 1e-12 * std::max(1.0, std::fabs(y1))) y0 -= 0.5, y1 += 0.5;
  const double pad = 0.05 * (y1 - y0);
  const Panel p{top, x0, x1 > x0 ? x1 : x0 + 1, y0 - pad, y1 + pad};
  for (int i = 0; i <= 4; ++i) {
    const double y = p.y0 + (p.y1 - p.y0) * i / 4.0, yy = p.py(y);
    s += "<line x1=\"" + num(kLeft) + "\" y1=\"" + num(yy) + "\" x2=\"" + num(kW - kRight) +
         "\" y2=\"" + num(yy) + "\" stroke=\"#ddd\"/>\n<text x=\"" + num(kLeft - 6) + "\" y=\"" +
         num(yy + 4) + "\" text-anchor=\"end\">" + label(y) + "</text>\n";
    const double x = p.x0 + (p.x1 - p.x0) * i / 4.0, xx = p.px(x);
    s += "<line x1=\"" + num(xx) + "\" y1=\"" + num(top) + "\" x2=\"" + num(xx) + "\" y2=\"" +
         num(top + kPanelH) + "\" stroke=\"#ddd\"/>\n<text x=\"" + num(xx) + "\" y=\"" +
         num(top + kPanelH + 16) + "\" text-anchor=\"middle\">" + label(std::round(x)) +
         "</text>\n";
  }
  s += "<rect x=\"" + num(kLeft) + "\" y=\"" + num(top) + "\" width=\"" + num(kW - kLeft - kRight) +
       "\" height=\"" + num(kPanelH) + "\" fill=\"none\" stroke=\"black\"/>\n";
  s += "<text transform=\"translate(18," + num(top + kPanelH / 2) +
       ") rotate(-90)\" text-anchor=\"middle\">" + ylabel + "</text>\n";
  return p;
}

void draw_lines(std::string& s, const Panel& p, const std::vector<Series>& series,
                const std::string& dash) {
  for (size_t k = 0; k < series.size(); ++k) {
    if (series[k].points.empty()) continue;
    std::string path;
    for (size_t i = 0; i < series[k].points.size(); ++i)
      path += (i ? " L" : "M") + num(p.px(series[k].points[i].first)) + " " +
              num(p.py(series[k].points[i].second));
    s += "<path d=\"" + path + "\" fill=\"none\" stroke=\"" + kColours[k % 6] +
         "\" stroke-width=\"1.5\"" + dash + "/>\n";
  }
}

void draw_points(std::string& s, const Panel& p, const std::vector<Series>& series) {
  for (size_t k = 0; k < series.size(); ++k)
    for (const auto& [x, y] : series[k].points)
      s += "<circle cx=\"" + num(p.px(x)) + "\" cy=\"" + num(p.py(y)) +
           "\" r=\"4\" fill=\"white\" " + "stroke=\"" + kColours[k % 6] +
           "\" stroke-width=\"2\"/>\n";
}

}  // namespace

TrainLog read_train_log(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw DataError(str("cannot open log ", path));
  TrainLog log{std::filesystem::path(path).stem().string(), {}};
  std::string line;
  for (int64_t n = 1; std::getline(in, line); ++n) {
    if (line.empty()) continue;
    try {
      log.records.push_back(nlohmann::json::parse(line));
    } catch (const nlohmann::json::exception& e) {
      throw FormatError(str(path, " line ", n, " is not JSON: ", e.what()));
    }
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
  std::string s = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + num(kW) + "\" height=\"" +
                  num(height) +
                  "\" font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" "
                  "height=\"100%\" fill=\"white\"/>\n";
  s += "<text x=\"" + num(kLeft) + "\" y=\"22\" font-size=\"14\">" + title + "</text>\n";
  double top = kTop;
  Panel p = draw_panel(s, top, x0, x1, {&loss, &val}, "loss (train line, validation points)");
  draw_lines(s, p, loss, "");
  draw_points(s, p, val);
  top += kPanelH + kGap;
  p = draw_panel(s, top, x0, x1, {&lr}, "learning rate");
  draw_lines(s, p, lr, "");
  top += kPanelH + kGap;
  p = draw_panel(s, top, x0, x1, {&tps}, "tokens / s");
  draw_lines(s, p, tps, "");
  top += kPanelH + kGap;
  p = draw_panel(s, top, x0, x1, {&mem}, "device peak (MiB)");
  draw_lines(s, p, mem, "");
  s += "<text x=\"" + num((kLeft + kW - kRight) / 2) + "\" y=\"" + num(height - 10) +
       "\" text-anchor=\"middle\">step</text>\n";
  for (size_t k = 0; k < logs.size(); ++k) {
    const double y = kTop + 10 + 18 * double(k);
    s += "<line x1=\"" + num(kW - kRight + 10) + "\" y1=\"" + num(y) + "\" x2=\"" +
         num(kW - kRight + 36) + "\" y2=\"" + num(y) + "\" stroke=\"" + kColours[k % 6] +
         "\" stroke-width=\"1.5\"/><text x=\"" + num(kW - kRight + 42) + "\" y=\"" + num(y + 4) +
         "\">" + logs[k].name + "</text>\n";
  }
  s += "</svg>\n";
  return s;
}

}  // namespace memo
