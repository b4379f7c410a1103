// Inline SVG charts for the HTML report: self-contained markup (no scripts, no network), each
// <svg class="chart"> with data-points counting what it draws.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace embcache {

struct Series {
  std::string name;
  std::vector<std::pair<double, double>> points;  // (x, y); NaN y: not drawn
};

// HTML-escaped text, and a number with `precision` significant digits.
std::string esc(const std::string& s);
std::string num(double v, int precision = 4);

// Lines with min/max ticks on both axes and a legend (log10 x when `log_x`); "" with no point.
std::string line_chart(const std::string& title, const std::string& x_label, const std::string& y_label,
                       const std::vector<Series>& series, bool log_x = false);
// Grouped bars: series s's points[c].second is its bar in category c.
std::string bar_chart(const std::string& title, const std::string& y_label, const std::vector<std::string>& categories,
                      const std::vector<Series>& series);
// One column per category: a dot per value (a seed's result), the mean as a bar across the
// column and [low, high] (a bootstrap interval) as a whisker.
struct Spread {
  std::string category;
  std::vector<double> values;
  double mean = 0, low = 0, high = 0;
};
std::string spread_chart(const std::string& title, const std::string& y_label, const std::vector<Spread>& columns);

}  // namespace embcache
