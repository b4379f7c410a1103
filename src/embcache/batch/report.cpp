#include "embcache/batch/report.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iomanip>
#include <map>
#include <set>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

#include "embcache/batch/results_table.hpp"
#include "embcache/batch/svg_charts.hpp"
#include "embcache/core/error.hpp"
#include "embcache/core/files.hpp"
#include "embcache/probe/seed_statistics.hpp"

namespace embcache {
namespace {

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
  for (const char* h : {"run", "group", "cache", "head", "levels", "lr", "weight decay", "train fraction", "seed", "best epoch"}) {
    html << "<th>" << h << "</th>";
  }
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
         << cell(r.value("train_fraction", nlohmann::json(1))) << "</td><td>" << cell(r.value("seed", nlohmann::json(nullptr)))
         << "</td><td>" << cell(r["best_epoch"]) << "</td>";
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

// A grid point over its seeds: the mean of its runs' primary metrics (one run: its own).
struct PointMean {
  const SeedGroup* runs = nullptr;
  std::string head, levels;
  double fraction = 1, lr = 0;
  double val = NAN, test = NAN;
};

std::vector<PointMean> point_means(const std::vector<SeedGroup>& groups) {
  std::vector<PointMean> points;
  for (const auto& g : groups) {
    PointMean p;
    p.runs = &g;
    const nlohmann::json& first = *g.rows.front();
    p.head = first["head"].get<std::string>();
    p.levels = first["levels"].get<std::string>();
    p.fraction = first.value("train_fraction", 1.0);
    p.lr = first["lr"].get<double>();
    std::vector<double> val, test;
    for (const auto* r : g.rows) val.push_back(primary_value(*r, "val")), test.push_back(primary_value(*r, "test"));
    p.val = summarize_seeds(val, 1).mean;
    p.test = summarize_seeds(test, 1).mean;
    points.push_back(p);
  }
  return points;
}

bool better(double v, double held, bool higher) {
  return std::isnan(held) || (std::isfinite(v) && (higher ? v > held : v < held));
}

// Metric vs learning rate: one line per (head, levels), best over the other options (a point
// with several seeds by its mean).
void write_lr_chart(std::ostringstream& html, const std::vector<PointMean>& points, const std::string& metric_name,
                    bool higher) {
  std::map<std::string, std::map<double, double>> by_series;
  for (const auto& p : points) {
    auto& slot = by_series[p.head + " levels " + p.levels];
    // A run without a result (it diverged) has NaN: any finite value beats it.
    if (!slot.count(p.lr) || better(p.val, slot[p.lr], higher)) slot[p.lr] = p.val;
  }
  std::vector<Series> lr_series;
  for (const auto& [key, at] : by_series) {
    Series s{key, {}};
    for (const auto& [lr, v] : at) s.points.emplace_back(lr, v);
    lr_series.push_back(s);
  }
  html << line_chart("best val " + metric_name + " vs learning rate", "learning rate (log scale)", "val " + metric_name,
                     lr_series, true)
       << "\n";
}

// Layer-wise probing: per level set, the best point (by val) of each head, or, with one head,
// its val and test metric.
void write_levels_chart(std::ostringstream& html, const std::vector<PointMean>& points, const std::string& metric_name,
                        bool higher) {
  std::vector<std::string> level_sets, heads;
  std::map<std::pair<std::string, std::string>, const PointMean*> best;  // (head, levels)
  for (const auto& p : points) {
    add_unique(level_sets, p.levels);
    add_unique(heads, p.head);
    const auto key = std::make_pair(p.head, p.levels);
    if (!best.count(key) || better(p.val, best[key]->val, higher)) best[key] = &p;
  }
  if (heads.size() == 1) {
    Series val_bars{"val", {}}, test_bars{"test", {}};
    for (std::size_t i = 0; i < level_sets.size(); ++i) {
      val_bars.points.emplace_back(double(i), best[{heads[0], level_sets[i]}]->val);
      test_bars.points.emplace_back(double(i), best[{heads[0], level_sets[i]}]->test);
    }
    html << bar_chart("levels compared (best run per level set)", metric_name, level_sets, {val_bars, test_bars}) << "\n";
    return;
  }
  std::vector<Series> per_head;
  for (const auto& head : heads) {
    Series s{head, {}};
    for (std::size_t i = 0; i < level_sets.size(); ++i) {
      const auto it = best.find({head, level_sets[i]});
      s.points.emplace_back(double(i), it == best.end() ? NAN : it->second->val);
    }
    per_head.push_back(s);
  }
  html << bar_chart("layer-wise probing: best val " + metric_name + " per level, by head", "val " + metric_name, level_sets,
                    per_head)
       << "\n";
}

// Metric against label fraction: one line per (head, levels), the test metric (val without a
// test split) of the point the val metric picks at each fraction.
void write_fraction_chart(std::ostringstream& html, const std::vector<PointMean>& points, const std::string& metric_name,
                          bool higher) {
  std::map<std::string, std::map<double, const PointMean*>> by_series;
  std::set<double> fractions;
  bool tested = false;
  for (const auto& p : points) {
    fractions.insert(p.fraction);
    tested = tested || std::isfinite(p.test);
    auto& slot = by_series[p.head + " levels " + p.levels][p.fraction];
    if (!slot || better(p.val, slot->val, higher)) slot = &p;
  }
  if (fractions.size() < 2) return;
  std::vector<Series> series;
  for (const auto& [name, at] : by_series) {
    Series s{name, {}};
    for (const auto& [f, p] : at) s.points.emplace_back(f, tested ? p->test : p->val);
    series.push_back(s);
  }
  const std::string y = std::string(tested ? "test " : "val ") + metric_name;
  html << line_chart(y + " vs label fraction (best val per fraction)", "train fraction (log scale)", y, series, true) << "\n";
}

// The spread over seeds of every point trained with several: one column each, its seeds' test
// metrics (val without a test split), their mean and the bootstrap interval of their IQM.
void write_seed_chart(std::ostringstream& html, const std::vector<SeedGroup>& groups, const std::string& group,
                      const std::string& metric_name) {
  std::vector<Spread> columns;
  bool tested = false;
  for (const auto& g : groups) {
    for (const auto* r : g.rows) tested = tested || std::isfinite(primary_value(*r, "test"));
  }
  for (const auto& g : groups) {
    if (g.rows.size() < 2) continue;
    Spread c;
    c.category = g.name.size() > group.size() ? g.name.substr(group.size() + 1) : g.name;
    for (const auto* r : g.rows) c.values.push_back(primary_value(*r, tested ? "test" : "val"));
    const SeedSummary s = summarize_seeds(c.values);
    c.mean = s.mean, c.low = s.ci_low, c.high = s.ci_high;
    columns.push_back(c);
  }
  if (columns.empty()) return;
  const std::string y = std::string(tested ? "test " : "val ") + metric_name;
  html << spread_chart(y + " over seeds (dots: seeds; bar: mean; line: 95% interval of the IQM)", y, columns) << "\n";
}

// Per point with several seeds: mean +- std, IQM and its bootstrap interval, val and test.
void write_seed_table(std::ostringstream& html, const std::vector<SeedGroup>& groups, const std::string& metric_name) {
  std::ostringstream body;
  auto cells = [](const std::vector<double>& v) {
    const SeedSummary s = summarize_seeds(v);
    if (s.n == 0) return std::string("<td>-</td><td>-</td><td>-</td>");
    return "<td>" + num(s.mean) + " &plusmn; " + num(s.std, 2) + "</td><td>" + num(s.iqm) + "</td><td>[" + num(s.ci_low) +
           ", " + num(s.ci_high) + "]</td>";
  };
  for (const auto& g : groups) {
    if (g.rows.size() < 2) continue;
    std::vector<double> val, test;
    for (const auto* r : g.rows) val.push_back(primary_value(*r, "val")), test.push_back(primary_value(*r, "test"));
    body << "<tr><td class=\"t\">" << esc(g.name) << "</td><td>" << g.rows.size() << "</td>" << cells(val) << cells(test)
         << "</tr>\n";
  }
  if (body.str().empty()) return;
  html << "<table class=\"seeds\"><thead><tr><th>runs over seeds</th><th>seeds</th><th>val " << esc(metric_name)
       << " mean &plusmn; std</th><th>val IQM</th><th>val 95% interval</th><th>test " << esc(metric_name)
       << " mean &plusmn; std</th><th>test IQM</th><th>test 95% interval</th></tr></thead><tbody>\n"
       << body.str() << "</tbody></table>\n";
}

void write_group_charts(std::ostringstream& html, const std::vector<nlohmann::json>& rows, const std::string& group) {
  std::vector<const nlohmann::json*> mine;
  for (const auto& r : rows) {
    if (r["group"] == group) mine.push_back(&r);
  }
  const std::string metric_name = mine.front()->value("primary_metric", std::string("metric"));
  const bool higher = mine.front()->value("higher_is_better", true);
  const std::vector<SeedGroup> seeds = seed_groups(rows, group);
  const std::vector<PointMean> points = point_means(seeds);
  html << "<h2>" << esc(group) << "</h2><div class=\"charts\">\n";
  write_learning_curves(html, group, mine, metric_name);
  write_lr_chart(html, points, metric_name, higher);
  write_levels_chart(html, points, metric_name, higher);
  write_fraction_chart(html, points, metric_name, higher);
  write_seed_chart(html, seeds, group, metric_name);
  html << "</div>\n";
  write_seed_table(html, seeds, metric_name);
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
