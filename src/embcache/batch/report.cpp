#include "embcache/batch/report.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iomanip>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

#include "embcache/batch/results_table.hpp"
#include "embcache/core/error.hpp"
#include "embcache/core/files.hpp"

namespace embcache {
namespace {

const char* kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};

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

std::string num(double v, int precision = 4) {
  std::ostringstream s;
  s << std::setprecision(precision) << v;
  return s.str();
}

struct Series {
  std::string name;
  std::vector<std::pair<double, double>> points;
};

// A line chart with min/max ticks on both axes and a legend; data-points counts the points drawn.
std::string line_chart(const std::string& title, const std::string& x_label, const std::string& y_label,
                       const std::vector<Series>& series, bool log_x = false) {
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
  o << "<svg class=\"chart\" data-points=\"" << count << "\" width=\"" << w << "\" height=\"" << h
    << "\" viewBox=\"0 0 " << w << " " << h << "\" xmlns=\"http://www.w3.org/2000/svg\">";
  o << "<text x=\"" << left << "\" y=\"18\" class=\"title\">" << esc(title) << "</text>";
  o << "<rect x=\"" << left << "\" y=\"" << top << "\" width=\"" << pw << "\" height=\"" << ph << "\" class=\"frame\"/>";
  auto tick_x = [&](double v) { return log_x ? num(std::pow(10.0, v), 3) : num(v, 4); };
  o << "<text x=\"" << left << "\" y=\"" << h - bottom + 15 << "\" class=\"tick\">" << tick_x(x0) << "</text>";
  o << "<text x=\"" << left + pw << "\" y=\"" << h - bottom + 15 << "\" class=\"tick\" text-anchor=\"end\">" << tick_x(x1) << "</text>";
  o << "<text x=\"" << left - 5 << "\" y=\"" << top + ph << "\" class=\"tick\" text-anchor=\"end\">" << num(y0) << "</text>";
  o << "<text x=\"" << left - 5 << "\" y=\"" << top + 10 << "\" class=\"tick\" text-anchor=\"end\">" << num(y1) << "</text>";
  o << "<text x=\"" << left + pw / 2 << "\" y=\"" << h - 8 << "\" class=\"label\" text-anchor=\"middle\">" << esc(x_label) << "</text>";
  o << "<text x=\"14\" y=\"" << top + ph / 2 << "\" class=\"label\" text-anchor=\"middle\" transform=\"rotate(-90 14 "
    << top + ph / 2 << ")\">" << esc(y_label) << "</text>";
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
  o << "<svg class=\"chart\" data-points=\"" << count << "\" width=\"" << w << "\" height=\"" << h << "\" viewBox=\"0 0 " << w
    << " " << h << "\" xmlns=\"http://www.w3.org/2000/svg\">";
  o << "<text x=\"" << left << "\" y=\"18\" class=\"title\">" << esc(title) << "</text>";
  o << "<rect x=\"" << left << "\" y=\"" << top << "\" width=\"" << pw << "\" height=\"" << ph << "\" class=\"frame\"/>";
  o << "<text x=\"" << left - 5 << "\" y=\"" << top + ph << "\" class=\"tick\" text-anchor=\"end\">" << num(y0) << "</text>";
  o << "<text x=\"" << left - 5 << "\" y=\"" << top + 10 << "\" class=\"tick\" text-anchor=\"end\">" << num(y1) << "</text>";
  o << "<text x=\"14\" y=\"" << top + ph / 2 << "\" class=\"label\" text-anchor=\"middle\" transform=\"rotate(-90 14 "
    << top + ph / 2 << ")\">" << esc(y_label) << "</text>";
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

// The fields the report reads from a results.jsonl row, and the JSON type each must have.
void check_result_row(const nlohmann::json& row, const std::string& where) {
  using T = nlohmann::json::value_t;
  static const std::pair<const char*, std::vector<T>> kFields[] = {
      {"name", {T::string}},           {"group", {T::string}},
      {"cache", {T::string}},          {"head", {T::string}},
      {"levels", {T::string}},         {"run_dir", {T::string}},
      {"val", {T::object}},            {"test", {T::object}},
      {"lr", {T::number_float, T::number_integer, T::number_unsigned}},
      {"weight_decay", {T::number_float, T::number_integer, T::number_unsigned}},
      {"best_epoch", {T::number_integer, T::number_unsigned}},
      {"seconds", {T::number_float, T::number_integer, T::number_unsigned}},
  };
  const std::string rerun = "; it was not written by `embcache run`: rerun the study to rewrite it";
  if (!row.is_object()) throw InputError(where + " is not a JSON object" + rerun);
  for (const auto& [key, types] : kFields) {
    const auto it = row.find(key);
    if (it == row.end()) throw InputError(where + " has no \"" + key + "\"" + rerun);
    if (std::find(types.begin(), types.end(), it->type()) == types.end()) {
      throw InputError(where + ": \"" + key + "\" is a " + it->type_name() + ", not a " +
                       nlohmann::json(types.front()).type_name() + rerun);
    }
  }
}

// The rows of OUTPUT_DIR/results.jsonl, each checked.
std::vector<nlohmann::json> read_result_rows(const std::string& output_dir) {
  std::ifstream in(output_dir + "/results.jsonl");
  if (!in) {
    throw InputError(output_dir + ": no results.jsonl; run `embcache run CONFIG.json` first (report reads its output_dir)");
  }
  std::vector<nlohmann::json> rows;
  std::string line;
  std::size_t line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.empty()) continue;
    try {
      rows.push_back(nlohmann::json::parse(line));
    } catch (const nlohmann::json::exception&) {
      throw InputError(output_dir + "/results.jsonl: line " + std::to_string(line_no) + " is not JSON; rerun `embcache run`");
    }
    check_result_row(rows.back(), output_dir + "/results.jsonl: line " + std::to_string(line_no));
  }
  if (rows.empty()) throw InputError(output_dir + "/results.jsonl: no finished runs yet");
  return rows;
}

void add_unique(std::vector<std::string>& keys, const std::string& key) {
  if (std::find(keys.begin(), keys.end(), key) == keys.end()) keys.push_back(key);
}

// The sortable table of every run.
void write_results_table(std::ostringstream& html, const std::vector<nlohmann::json>& rows) {
  std::vector<std::string> val_keys, test_keys;
  for (const auto& r : rows) {
    for (const auto& [k, v] : r["val"].items()) add_unique(val_keys, k);
    for (const auto& [k, v] : r["test"].items()) add_unique(test_keys, k);
  }
  html << "<h2>Results</h2><table id=\"results\"><thead><tr>";
  for (const char* h : {"run", "group", "cache", "head", "levels", "lr", "weight decay", "best epoch"}) html << "<th>" << h << "</th>";
  for (const auto& k : val_keys) html << "<th>val " << esc(k) << "</th>";
  for (const auto& k : test_keys) html << "<th>test " << esc(k) << "</th>";
  html << "<th>seconds</th></tr></thead><tbody>\n";
  auto cell = [](const nlohmann::json& v) {
    if (v.is_number_float()) return num(v.get<double>(), 4);
    if (v.is_string()) return esc(v.get<std::string>());
    return v.is_null() ? std::string("-") : v.dump();
  };
  for (const auto& r : rows) {
    html << "<tr><td class=\"t\">" << esc(run_label(r)) << "</td><td class=\"t\">" << cell(r["group"])
         << "</td><td class=\"t\">" << cell(r["cache"]) << "</td><td class=\"t\">" << cell(r["head"]) << "</td><td class=\"t\">"
         << cell(r["levels"]) << "</td><td>" << cell(r["lr"]) << "</td><td>" << cell(r["weight_decay"]) << "</td><td>"
         << cell(r["best_epoch"]) << "</td>";
    for (const auto& k : val_keys) html << "<td>" << cell(r["val"].value(k, nlohmann::json(nullptr))) << "</td>";
    for (const auto& k : test_keys) html << "<td>" << cell(r["test"].value(k, nlohmann::json(nullptr))) << "</td>";
    html << "<td>" << cell(r["seconds"]) << "</td></tr>\n";
  }
  html << "</tbody></table>\n";
}

// Learning curves: validation metric and training loss per epoch, one line per run of a group.
void write_learning_curves(std::ostringstream& html, const std::string& group, const std::vector<const nlohmann::json*>& mine,
                           const std::string& metric_name) {
  std::vector<Series> val_curves, loss_curves;
  for (const auto* r : mine) {
    std::ifstream m_in((*r)["run_dir"].get<std::string>() + "/metrics.json");
    if (!m_in) continue;
    nlohmann::json m;
    try {
      m = nlohmann::json::parse(m_in);
    } catch (const nlohmann::json::exception&) {
      continue;
    }
    Series v{(*r)["name"].get<std::string>().substr(group.size() + ((*r)["name"].get<std::string>().size() > group.size() ? 1 : 0)), {}};
    if (v.name.empty()) v.name = group;
    Series l = v;
    try {
      for (const auto& h : m.at("history")) {
        const double epoch = h.at("epoch").get<double>();
        const auto& val = h.at("val").value(metric_name, nlohmann::json(nullptr));
        v.points.emplace_back(epoch, val.is_number() ? val.get<double>() : NAN);
        l.points.emplace_back(epoch, h.at("train_loss").get<double>());
      }
    } catch (const nlohmann::json::exception&) {
      continue;  // like an unreadable metrics.json: the run stays in the table, without curves
    }
    val_curves.push_back(v);
    loss_curves.push_back(l);
  }
  html << line_chart("validation " + metric_name + " per epoch", "epoch", "val " + metric_name, val_curves) << "\n";
  html << line_chart("training loss per epoch", "epoch", "train loss", loss_curves) << "\n";
}

// Metric vs learning rate: one line per (head, levels), best over the other options.
void write_lr_chart(std::ostringstream& html, const std::vector<const nlohmann::json*>& mine, const std::string& metric_name,
                    bool higher) {
  std::map<std::string, std::map<double, double>> by_series;
  for (const auto* r : mine) {
    const std::string key = (*r)["head"].get<std::string>() + " levels " + (*r)["levels"].get<std::string>();
    const double lr = (*r)["lr"].get<double>(), v = primary_value(*r, "val");
    auto& slot = by_series[key];
    // A run without a result (it diverged) has NaN: any finite value beats it.
    if (!slot.count(lr) || std::isnan(slot[lr]) || (higher ? v > slot[lr] : v < slot[lr])) slot[lr] = v;
  }
  std::vector<Series> lr_series;
  for (const auto& [key, points] : by_series) {
    Series s{key, {}};
    for (const auto& [lr, v] : points) s.points.emplace_back(lr, v);
    lr_series.push_back(s);
  }
  html << line_chart("best val " + metric_name + " vs learning rate", "learning rate (log scale)", "val " + metric_name,
                     lr_series, true)
       << "\n";
}

// Levels compared: the best run per level set, its val and test metric.
void write_levels_chart(std::ostringstream& html, const std::vector<const nlohmann::json*>& mine, const std::string& metric_name,
                        bool higher) {
  std::vector<std::string> level_sets;
  std::map<std::string, const nlohmann::json*> best;
  for (const auto* r : mine) {
    const std::string lv = (*r)["levels"].get<std::string>();
    if (!best.count(lv)) level_sets.push_back(lv);
    const double v = primary_value(*r, "val"), held = best.count(lv) ? primary_value(*best[lv], "val") : NAN;
    const bool better = best.count(lv) && (std::isnan(held) || (higher ? v > held : v < held));
    if (!best.count(lv) || better) best[lv] = r;
  }
  Series val_bars{"val", {}}, test_bars{"test", {}};
  for (std::size_t i = 0; i < level_sets.size(); ++i) {
    val_bars.points.emplace_back(double(i), primary_value(*best[level_sets[i]], "val"));
    test_bars.points.emplace_back(double(i), primary_value(*best[level_sets[i]], "test"));
  }
  html << bar_chart("levels compared (best run per level set)", metric_name, level_sets, {val_bars, test_bars}) << "\n";
}

void write_group_charts(std::ostringstream& html, const std::vector<nlohmann::json>& rows, const std::string& group) {
  std::vector<const nlohmann::json*> mine;
  for (const auto& r : rows) {
    if (r["group"] == group) mine.push_back(&r);
  }
  const std::string metric_name = mine.front()->value("primary_metric", std::string("metric"));
  const bool higher = mine.front()->value("higher_is_better", true);
  html << "<h2>" << esc(group) << "</h2><div class=\"charts\">\n";
  write_learning_curves(html, group, mine, metric_name);
  write_lr_chart(html, mine, metric_name, higher);
  write_levels_chart(html, mine, metric_name, higher);
  html << "</div>\n";
}

// Sorting the results table by a click on its header.
constexpr const char* kSortScript =
    "<script>\n"
    "document.querySelectorAll('#results th').forEach(function(th, col) {\n"
    "  th.addEventListener('click', function() {\n"
    "    var body = th.closest('table').tBodies[0];\n"
    "    var rows = Array.from(body.rows), asc = th.dataset.asc !== '1';\n"
    "    th.dataset.asc = asc ? '1' : '0';\n"
    "    rows.sort(function(a, b) {\n"
    "      var x = a.cells[col].textContent, y = b.cells[col].textContent;\n"
    "      var nx = parseFloat(x), ny = parseFloat(y);\n"
    "      var r = (!isNaN(nx) && !isNaN(ny)) ? nx - ny : x.localeCompare(y);\n"
    "      return asc ? r : -r;\n"
    "    });\n"
    "    rows.forEach(function(r) { body.appendChild(r); });\n"
    "  });\n"
    "});\n"
    "</script>\n";

}  // namespace

std::string write_report(const std::string& output_dir) {
  const std::vector<nlohmann::json> rows = read_result_rows(output_dir);
  std::vector<std::string> groups;
  for (const auto& r : rows) add_unique(groups, r["group"].get<std::string>());

  std::ostringstream html;
  html << "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>embcache report</title><style>"
          "body{font-family:sans-serif;margin:24px;color:#222}table{border-collapse:collapse;font-size:13px}"
          "th,td{border:1px solid #ccc;padding:3px 8px;text-align:right}th{background:#eee;cursor:pointer}"
          "td.t{text-align:left}.chart{margin:8px;border:1px solid #eee}.title{font-size:13px;font-weight:bold}"
          ".tick,.legend{font-size:10px}.label{font-size:11px}.frame{fill:none;stroke:#999}"
          ".charts{display:flex;flex-wrap:wrap}</style></head><body>\n";
  html << "<h1>embcache report</h1><p>" << esc(output_dir) << ": " << rows.size() << " finished runs in " << groups.size()
       << " probe groups. Click a column header to sort.</p>\n";
  write_results_table(html, rows);
  for (const auto& group : groups) write_group_charts(html, rows, group);
  html << kSortScript << "</body></html>\n";
  const std::string path = output_dir + "/report.html";
  write_text_atomically(path, html.str(), "report");
  return path;
}

}  // namespace embcache
