#include "embcache/batch/svg_charts.hpp"

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <sstream>

namespace embcache {
namespace {
const char* kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};

}  // namespace

std::string esc(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '&': out += "&amp;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string num(double v, int precision) {
  std::ostringstream s;
  s << std::setprecision(precision) << v;
  return s.str();
}

namespace {

// The <svg> element's opening: its size, the title, the plot frame, the y range's two ticks and
// the y label. data-points counts what the chart draws.
void open_chart(std::ostringstream& o, std::size_t count, double w, double h, double left, double top, double pw, double ph,
                const std::string& title, const std::string& y_label, double y0, double y1) {
  o << "<svg class=\"chart\" data-points=\"" << count << "\" width=\"" << w << "\" height=\"" << h << "\" viewBox=\"0 0 " << w
    << " " << h << "\" xmlns=\"http://www.w3.org/2000/svg\">";
  o << "<text x=\"" << left << "\" y=\"18\" class=\"title\">" << esc(title) << "</text>";
  o << "<rect x=\"" << left << "\" y=\"" << top << "\" width=\"" << pw << "\" height=\"" << ph << "\" class=\"frame\"/>";
  o << "<text x=\"" << left - 5 << "\" y=\"" << top + ph << "\" class=\"tick\" text-anchor=\"end\">" << num(y0) << "</text>";
  o << "<text x=\"" << left - 5 << "\" y=\"" << top + 10 << "\" class=\"tick\" text-anchor=\"end\">" << num(y1) << "</text>";
  o << "<text x=\"14\" y=\"" << top + ph / 2 << "\" class=\"label\" text-anchor=\"middle\" transform=\"rotate(-90 14 "
    << top + ph / 2 << ")\">" << esc(y_label) << "</text>";
}

}  // namespace

// A line chart with min/max ticks on both axes and a legend; data-points counts the points drawn.
std::string line_chart(const std::string& title, const std::string& x_label, const std::string& y_label,
                       const std::vector<Series>& series, bool log_x) {
  const double w = 520, h = 300, left = 60, right = 150, top = 30, bottom = 45;
  double x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY;
  std::size_t count = 0;
  auto fx = [&](double x) { return log_x ? std::log10(x) : x; };
  for (const auto& s : series) {
    for (const auto& [x, y] : s.points) {
      if (!std::isfinite(y) || (log_x && x <= 0)) continue;
      x0 = std::min(x0, fx(x)), x1 = std::max(x1, fx(x)), y0 = std::min(y0, y), y1 = std::max(y1, y);
      ++count;
    }
  }
  if (count == 0) return "";
  if (x1 == x0) x0 -= 0.5, x1 += 0.5;
  if (y1 == y0) y0 -= 0.5, y1 += 0.5;
  const double pw = w - left - right, ph = h - top - bottom;
  auto px = [&](double x) { return left + (fx(x) - x0) / (x1 - x0) * pw; };
  auto py = [&](double y) { return top + (1 - (y - y0) / (y1 - y0)) * ph; };
  std::ostringstream o;
  open_chart(o, count, w, h, left, top, pw, ph, title, y_label, y0, y1);
  auto tick_x = [&](double v) { return log_x ? num(std::pow(10.0, v), 3) : num(v, 4); };
  o << "<text x=\"" << left << "\" y=\"" << h - bottom + 15 << "\" class=\"tick\">" << tick_x(x0) << "</text>";
  o << "<text x=\"" << left + pw << "\" y=\"" << h - bottom + 15 << "\" class=\"tick\" text-anchor=\"end\">" << tick_x(x1) << "</text>";
  o << "<text x=\"" << left + pw / 2 << "\" y=\"" << h - 8 << "\" class=\"label\" text-anchor=\"middle\">" << esc(x_label) << "</text>";
  for (std::size_t i = 0; i < series.size(); ++i) {
    const char* color = kColors[i % 10];
    std::ostringstream pts;
    for (const auto& [x, y] : series[i].points) {
      if (!std::isfinite(y) || (log_x && x <= 0)) continue;
      pts << num(px(x), 6) << "," << num(py(y), 6) << " ";
    }
    o << "<polyline class=\"series\" fill=\"none\" stroke=\"" << color << "\" stroke-width=\"1.5\" points=\"" << pts.str() << "\"><title>"
      << esc(series[i].name) << "</title></polyline>";
    for (const auto& [x, y] : series[i].points) {
      if (!std::isfinite(y) || (log_x && x <= 0)) continue;
      o << "<circle cx=\"" << num(px(x), 6) << "\" cy=\"" << num(py(y), 6) << "\" r=\"2.5\" fill=\"" << color << "\"><title>"
        << esc(series[i].name) << ": " << num(y) << "</title></circle>";
    }
    if (i < 16) {
      const double ly = top + 12 + double(i) * 14;
      o << "<line x1=\"" << w - right + 8 << "\" x2=\"" << w - right + 22 << "\" y1=\"" << ly - 4 << "\" y2=\"" << ly - 4
        << "\" stroke=\"" << color << "\" stroke-width=\"2\"/><text x=\"" << w - right + 26 << "\" y=\"" << ly
        << "\" class=\"legend\">" << esc(series[i].name.size() > 22 ? series[i].name.substr(0, 21) + "…" : series[i].name)
        << "</text>";
    } else if (i == 16) {
      o << "<text x=\"" << w - right + 8 << "\" y=\"" << top + 12 + 16 * 14 << "\" class=\"legend\">+" << series.size() - 16
        << " more</text>";
    }
  }
  o << "</svg>";
  return o.str();
}

// Grouped bars (val and test) per category.
std::string bar_chart(const std::string& title, const std::string& y_label, const std::vector<std::string>& categories,
                      const std::vector<Series>& series) {
  const double w = 520, h = 300, left = 60, right = 90, top = 30, bottom = 45;
  double y0 = 0, y1 = -INFINITY;
  std::size_t count = 0;
  for (const auto& s : series) {
    for (const auto& [x, y] : s.points) {
      if (std::isfinite(y)) y1 = std::max(y1, y), y0 = std::min(y0, y), ++count;
    }
  }
  if (count == 0) return "";
  if (y1 <= y0) y1 = y0 + 1;
  const double pw = w - left - right, ph = h - top - bottom;
  const double slot = pw / double(categories.size());
  const double bar = slot * 0.8 / double(series.size());
  auto py = [&](double y) { return top + (1 - (y - y0) / (y1 - y0)) * ph; };
  std::ostringstream o;
  open_chart(o, count, w, h, left, top, pw, ph, title, y_label, y0, y1);
  for (std::size_t c = 0; c < categories.size(); ++c) {
    o << "<text x=\"" << left + slot * (double(c) + 0.5) << "\" y=\"" << h - bottom + 15
      << "\" class=\"tick\" text-anchor=\"middle\">" << esc(categories[c]) << "</text>";
    for (std::size_t s = 0; s < series.size(); ++s) {
      const double y = series[s].points[c].second;
      if (!std::isfinite(y)) continue;
      const double x = left + slot * double(c) + slot * 0.1 + bar * double(s);
      o << "<rect class=\"bar\" x=\"" << num(x, 6) << "\" y=\"" << num(py(std::max(y, 0.0)), 6) << "\" width=\"" << num(bar, 6)
        << "\" height=\"" << num(std::abs(py(y) - py(0)), 6) << "\" fill=\"" << kColors[s % 10] << "\"><title>"
        << esc(series[s].name + " " + categories[c]) << ": " << num(y) << "</title></rect>";
    }
  }
  for (std::size_t s = 0; s < series.size(); ++s) {
    const double ly = top + 12 + double(s) * 14;
    o << "<rect x=\"" << w - right + 8 << "\" y=\"" << ly - 9 << "\" width=\"10\" height=\"10\" fill=\"" << kColors[s % 10]
      << "\"/><text x=\"" << w - right + 22 << "\" y=\"" << ly << "\" class=\"legend\">" << esc(series[s].name) << "</text>";
  }
  o << "</svg>";
  return o.str();
}

std::string spread_chart(const std::string& title, const std::string& y_label, const std::vector<Spread>& columns) {
  const double w = 520, h = 300, left = 60, right = 20, top = 30, bottom = 45;
  double y0 = INFINITY, y1 = -INFINITY;
  std::size_t count = 0;
  for (const auto& c : columns) {
    for (double v : c.values) {
      if (std::isfinite(v)) y0 = std::min(y0, v), y1 = std::max(y1, v), ++count;
    }
    if (std::isfinite(c.low)) y0 = std::min(y0, c.low);
    if (std::isfinite(c.high)) y1 = std::max(y1, c.high);
  }
  if (count == 0) return "";
  if (y1 <= y0) y0 -= 0.5, y1 += 0.5;
  const double pad = (y1 - y0) * 0.05;
  y0 -= pad, y1 += pad;
  const double pw = w - left - right, ph = h - top - bottom, slot = pw / double(columns.size());
  auto py = [&](double y) { return top + (1 - (y - y0) / (y1 - y0)) * ph; };
  std::ostringstream o;
  open_chart(o, count, w, h, left, top, pw, ph, title, y_label, y0, y1);
  for (std::size_t c = 0; c < columns.size(); ++c) {
    const Spread& col = columns[c];
    const double cx = left + slot * (double(c) + 0.5);
    const char* color = kColors[c % 10];
    const std::string label = col.category.size() > 18 ? col.category.substr(0, 17) + "…" : col.category;
    o << "<text x=\"" << num(cx, 6) << "\" y=\"" << h - bottom + 15 << "\" class=\"tick\" text-anchor=\"middle\">" << esc(label)
      << "<title>" << esc(col.category) << "</title></text>";
    if (std::isfinite(col.low) && std::isfinite(col.high)) {
      o << "<line class=\"interval\" x1=\"" << num(cx, 6) << "\" x2=\"" << num(cx, 6) << "\" y1=\"" << num(py(col.low), 6)
        << "\" y2=\"" << num(py(col.high), 6) << "\" stroke=\"#999\" stroke-width=\"1\"><title>" << esc(col.category)
        << ": 95% interval [" << num(col.low) << ", " << num(col.high) << "]</title></line>";
    }
    if (std::isfinite(col.mean)) {
      o << "<line class=\"mean\" x1=\"" << num(cx - slot * 0.3, 6) << "\" x2=\"" << num(cx + slot * 0.3, 6) << "\" y1=\""
        << num(py(col.mean), 6) << "\" y2=\"" << num(py(col.mean), 6) << "\" stroke=\"" << color << "\" stroke-width=\"2\"><title>"
        << esc(col.category) << ": mean " << num(col.mean) << "</title></line>";
    }
    for (std::size_t i = 0; i < col.values.size(); ++i) {
      if (!std::isfinite(col.values[i])) continue;
      // Seeds spread a little across the column so equal values stay visible.
      const double dx = col.values.size() > 1 ? (double(i) / double(col.values.size() - 1) - 0.5) * slot * 0.4 : 0.0;
      o << "<circle cx=\"" << num(cx + dx, 6) << "\" cy=\"" << num(py(col.values[i]), 6) << "\" r=\"3\" fill=\"" << color
        << "\" fill-opacity=\"0.7\"><title>" << esc(col.category) << ": " << num(col.values[i]) << "</title></circle>";
    }
  }
  o << "</svg>";
  return o.str();
}

}  // namespace embcache
