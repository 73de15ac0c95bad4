// Implementation of core/svg.h.
#include "memo/core/svg.h"

#include <cstdio>
#include <utility>

namespace memo::svg {
namespace {

std::string attr(const char* name, double px) { return std::string(name) + "=\"" + num(px) + "\""; }

// " style" when there is one.
std::string after(std::string_view style) {
  std::string out;
  if (!style.empty()) out.append(" ").append(style);
  return out;
}

}  // namespace

std::string num(double px) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", px);
  return buf;
}

std::string escape(std::string_view text) {
  std::string out;
  for (char c : text) {
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

std::string line(double x1, double y1, double x2, double y2, std::string_view style) {
  return "<line " + attr("x1", x1) + " " + attr("y1", y1) + " " + attr("x2", x2) + " " +
         attr("y2", y2) + after(style) + "/>";
}

std::string rect(double x, double y, double width, double height, std::string_view style) {
  return "<rect " + attr("x", x) + " " + attr("y", y) + " " + attr("width", width) + " " +
         attr("height", height) + after(style) + "/>";
}

std::string circle(double cx, double cy, int r_px, std::string_view style) {
  return "<circle " + attr("cx", cx) + " " + attr("cy", cy) + " r=\"" + std::to_string(r_px) +
         "\"" + after(style) + "/>";
}

std::string text(double x, double y, std::string_view content, std::string_view style) {
  return "<text " + attr("x", x) + " " + attr("y", y) + after(style) + ">" + escape(content) +
         "</text>";
}

std::string path(const std::vector<Point>& points, std::string_view style) {
  std::string d;
  for (size_t i = 0; i < points.size(); ++i)
    d += (i ? " L" : "M") + num(points[i].x) + " " + num(points[i].y);
  return "<path d=\"" + d + "\"" + after(style) + "/>";
}

std::string polyline(const std::vector<Point>& points, std::string_view style) {
  std::string p;
  for (size_t i = 0; i < points.size(); ++i) {
    if (i > 0) p += " ";
    p += num(points[i].x) + "," + num(points[i].y);
  }
  return "<polyline points=\"" + p + "\"" + after(style) + "/>";
}

std::string PlotArea::x_tick(double x, std::string_view label) const {
  return line(x, top, x, bottom, R"(stroke="#ddd")") + "\n" +
         text(x, bottom + 16, label, R"(text-anchor="middle")");
}

std::string PlotArea::y_tick(double y, std::string_view label) const {
  return line(left, y, right, y, R"(stroke="#ddd")") + "\n" +
         text(left - 6, y + 4, label, R"(text-anchor="end")");
}

std::string PlotArea::frame() const {
  return rect(left, top, right - left, bottom - top, R"(fill="none" stroke="black")");
}

std::string PlotArea::x_title(double y, std::string_view title) const {
  return text((left + right) / 2, y, title, R"(text-anchor="middle")");
}

std::string PlotArea::y_title(std::string_view title) const {
  return "<text transform=\"translate(18," + num((top + bottom) / 2) +
         ") rotate(-90)\" text-anchor=\"middle\">" + escape(title) + "</text>";
}

const char* series_colour(size_t k) {
  static const char* const kColours[] = {"#d62728", "#1f77b4", "#2ca02c",
                                         "#9467bd", "#ff7f0e", "#8c564b"};
  return kColours[k % 6];
}

Document::Document(double width, double height)
    : svg_("<svg xmlns=\"http://www.w3.org/2000/svg\" " + attr("width", width) + " " +
           attr("height", height) +
           " font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" "
           "fill=\"white\"/>\n") {}

void Document::title(double x, std::string_view title, int font_px) {
  svg_ += "<text " + attr("x", x) + " y=\"22\" font-size=\"" + std::to_string(font_px) + "\">" +
          escape(title) + "</text>\n";
}

void Document::add(std::string_view elements) {
  svg_ += elements;
  svg_ += "\n";
}

std::string Document::finish() && {
  svg_ += "</svg>\n";
  return std::move(svg_);
}

}  // namespace memo::svg
