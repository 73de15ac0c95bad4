// The one SVG writer of memo's plots (memo plot, memo fit --svg, memo plan --timeline): elements
// built from their geometry in px (one decimal) and their style attributes, written as given;
// text content escaped; a plot area's grid, frame and axis titles; the document around them. Not
// a layout engine or a chart library: each plot places its own elements and formats its labels.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace memo::svg {

struct Point {
  double x = 0.0, y = 0.0;  // px
};

std::string num(double px);                 // one decimal: "12.5"
std::string escape(std::string_view text);  // <, > and & as entities

// One element each, without a line break. `style`: the attributes after the geometry, written as
// given (R"(stroke="#ddd")"), or empty.
std::string line(double x1, double y1, double x2, double y2, std::string_view style);
std::string rect(double x, double y, double width, double height, std::string_view style);
std::string circle(double cx, double cy, int r_px, std::string_view style);
std::string text(double x, double y, std::string_view content, std::string_view style = {});
std::string path(const std::vector<Point>& points, std::string_view style);      // "M x y L x y"
std::string polyline(const std::vector<Point>& points, std::string_view style);  // "x,y x,y"

// The rectangle a chart draws its data in, in px of the canvas.
struct PlotArea {
  double left = 0.0, top = 0.0, right = 0.0, bottom = 0.0;
  // A light grid line across the area at x (or y) and its tick label below (or left of) it.
  std::string x_tick(double x, std::string_view label) const;
  std::string y_tick(double y, std::string_view label) const;
  std::string frame() const;                                    // the black border
  std::string x_title(double y, std::string_view title) const;  // centred under the area, at y
  std::string y_title(std::string_view title) const;  // read upwards, 18 px from the canvas edge
};

// The colour of series k of a chart (a cycle of six).
const char* series_colour(size_t k);

// A whole SVG file: width x height px on white, sans-serif 12 px text.
class Document {
 public:
  Document(double width, double height);
  // The chart's title, its baseline 22 px from the top.
  void title(double x, std::string_view title, int font_px);
  // Appends elements (one, or several joined to share a line) and a line break.
  void add(std::string_view elements);
  std::string finish() &&;  // the file's text, closed

 private:
  std::string svg_;
};

}  // namespace memo::svg
