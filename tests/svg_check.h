// A structural check of the SVG files memo writes (plots, timelines), for tests: the tags nest and
// close, every coordinate (x, y, x1..y2, cx, cy, width, height, the numbers of points and of path
// data) is a finite number inside the canvas, and the elements are counted by tag, so a test can
// assert "one circle per batch size" instead of looking for a substring.
#pragma once

#include <cmath>
#include <cstdlib>
#include <map>
#include <regex>
#include <string>
#include <vector>

namespace memo::test {

struct SvgSummary {
  bool ok = false;
  std::string error;                    // the first problem found
  double width = 0.0, height = 0.0;     // of the root <svg>
  std::map<std::string, int> elements;  // tag name -> count
  std::vector<std::string> texts;       // the contents of <text> elements, in order
};

inline SvgSummary check_svg(const std::string& svg) {
  SvgSummary s;
  std::vector<std::string> open;
  const std::regex attr_re(R"re(([a-zA-Z0-9_:-]+)="([^"]*)")re");
  const std::regex number_re(R"re([-+]?[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)re");
  size_t pos = 0;
  auto fail = [&](const std::string& why) {
    s.error = why;
    return s;
  };
  while ((pos = svg.find('<', pos)) != std::string::npos) {
    const size_t end = svg.find('>', pos);
    if (end == std::string::npos) return fail("unterminated tag at byte " + std::to_string(pos));
    std::string tag = svg.substr(pos + 1, end - pos - 1);
    const size_t text_start = end + 1;
    pos = end + 1;
    if (tag.empty() || tag[0] == '?' || tag[0] == '!') continue;
    if (tag[0] == '/') {
      const std::string name = tag.substr(1);
      if (open.empty() || open.back() != name) return fail("</" + name + "> closes nothing open");
      open.pop_back();
      continue;
    }
    const bool self_closing = tag.back() == '/';
    if (self_closing) tag.pop_back();
    const std::string name = tag.substr(0, tag.find_first_of(" \n\t"));
    ++s.elements[name];
    for (auto it = std::sregex_iterator(tag.begin(), tag.end(), attr_re);
         it != std::sregex_iterator(); ++it) {
      const std::string key = (*it)[1], value = (*it)[2];
      const bool horizontal = key == "x" || key == "x1" || key == "x2" || key == "cx";
      const bool vertical = key == "y" || key == "y1" || key == "y2" || key == "cy";
      if (name == "svg" && (key == "width" || key == "height")) {
        (key == "width" ? s.width : s.height) = std::atof(value.c_str());
        continue;
      }
      if (!horizontal && !vertical && key != "points" && key != "d") continue;
      if (value.find('%') != std::string::npos) continue;
      std::vector<double> numbers;
      for (auto n = std::sregex_iterator(value.begin(), value.end(), number_re);
           n != std::sregex_iterator(); ++n)
        numbers.push_back(std::atof(n->str().c_str()));
      for (size_t i = 0; i < numbers.size(); ++i) {
        const double v = numbers[i];
        // points and path data alternate x, y
        const bool is_x = horizontal || ((key == "points" || key == "d") && i % 2 == 0);
        const double limit = is_x ? s.width : s.height;
        if (!std::isfinite(v) || v < -1e-6 || (limit > 0 && v > limit + 1e-6))
          return fail("<" + name + "> " + key + " = " + value + " leaves the " +
                      std::to_string(s.width) + " x " + std::to_string(s.height) + " canvas");
      }
    }
    if (name == "text")
      s.texts.push_back(svg.substr(text_start, svg.find('<', text_start) - text_start));
    if (!self_closing) open.push_back(name);
  }
  if (!open.empty()) return fail("<" + open.back() + "> never closed");
  if (s.elements["svg"] != 1) return fail("not one <svg> root");
  s.ok = true;
  return s;
}

}  // namespace memo::test
