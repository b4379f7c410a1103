#include "embcache/cli/inspect_command.hpp"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <set>

#include "embcache/core/error.hpp"
#include "embcache/core/parse.hpp"
#include "embcache/store/cache_description.hpp"
#include "embcache/store/cache_reader.hpp"
#include "embcache/store/cache_schema.hpp"

namespace fs = std::filesystem;

namespace embcache {

void setup_inspect(CLI::App& app) {
  auto options = std::make_shared<InspectOptions>();
  CLI::App* sub = app.add_subcommand("inspect", "Describe a cache: signature, rows per split, levels, labels");
  sub->add_option("cache", options->cache, "Cache file")->required();
  sub->add_flag("--json", options->json, "Print JSON instead of text");
  sub->callback([options] { run_inspect_command(*options); });
}

namespace {

// "cpu, torch 2.6.0, amp none", and for an optimised encoder the largest difference from the
// plain encoder that precompute measured (docs/precompute.md).
std::string describe_computed_with(const nlohmann::json& with) {
  if (!with.is_object()) return "provenance not recorded";
  std::string text = with.value("device", std::string("?")) + ", torch " + with.value("torch", std::string("?")) +
                     ", amp " + with.value("amp", std::string("?"));
  const auto difference = with.find("optimize_difference");
  if (difference != with.end()) {
    double largest = 0;
    if (difference->is_object()) {
      // NaN and Inf (an encoder with non-finite outputs) are stored as JSON null.
      for (const auto& [name, value] : difference->items()) {
        largest = std::max(largest, value.is_number() ? value.get<double>() : INFINITY);
      }
    }
    char buffer[96];
    std::snprintf(buffer, sizeof buffer, ", optimised (outputs within %.1e of the plain encoder's, relative)", largest);
    text += buffer;
  }
  return text;
}

// "0 1 5" from a JSON list of numbers.
std::string join_ints(const nlohmann::json& values) {
  std::string out;
  for (const auto& v : values) out += (out.empty() ? "" : " ") + std::to_string(v.get<std::int64_t>());
  return out;
}

void print_parts_and_shards(const nlohmann::json& j) {
  const auto& parts = j["parts"];
  if (!parts.empty()) {
    std::printf("  parts: %zu (view over %s.parts/)\n", parts.size(), j["path"].get<std::string>().c_str());
    const std::size_t shown = std::min<std::size_t>(parts.size(), 20);
    for (std::size_t p = 0; p < shown; ++p) {
      const auto& part = parts[p];
      const std::string how = describe_computed_with(part["computed_with"]);
      std::printf("    %-52s shard %-7s rows %lld/%lld%s  %s\n", part["file"].get<std::string>().c_str(),
                  part["shard"].get<std::string>().c_str(), (long long)part["visible_rows"].get<std::int64_t>(),
                  (long long)part["rows"].get<std::int64_t>(), part["complete"].get<bool>() ? "" : " (interrupted)",
                  how.c_str());
    }
    if (shown < parts.size()) std::printf("    ... and %zu more (--json lists them all)\n", parts.size() - shown);
  } else if (j["computed_with"].is_object()) {
    std::printf("  computed with: %s\n", describe_computed_with(j["computed_with"]).c_str());
  }
  for (const auto& shards : j["shards"]) {
    std::printf("  shards of %lld:", (long long)shards["count"].get<std::int64_t>());
    for (const char* key : {"done", "interrupted", "failed", "running", "missing"}) {
      if (!shards[key].empty()) std::printf(" %s %s;", key, join_ints(shards[key]).c_str());
    }
    std::printf("\n");
  }
}

// The label datasets a cache holds, in words, with their paths for h5py users.
std::string describe_labels(const LabelKinds& kinds) {
  std::vector<std::string> parts;
  if (kinds.has_class) {
    std::string part = std::string("class ids /") + cache_paths::kLabelClass;
    if (!kinds.class_names.empty()) {
      part += " (" + std::to_string(kinds.class_names.size()) + " named:";
      for (const auto& name : kinds.class_names) part += " " + name;
      part += ")";
    }
    parts.push_back(part);
  }
  if (kinds.has_value) {
    parts.push_back(std::string("values /") + cache_paths::kLabelValue +
                    (kinds.value_width > 0 ? " [N, " + std::to_string(kinds.value_width) + "]" : " [N]"));
  }
  if (kinds.has_mask) {
    parts.push_back(std::string("masks /") + cache_paths::kLabelMask + " (ignore_index " +
                    std::to_string(kinds.ignore_index) + ")");
  }
  if (kinds.has_pixel_value) parts.push_back(std::string("pixel values /") + cache_paths::kLabelPixelValue);
  if (parts.empty()) return "none (features only)";
  std::string out;
  for (const auto& part : parts) out += (out.empty() ? "" : ", ") + part;
  return out;
}

// What a level came from, in words: "" for a map or vector as the encoder returned it.
std::string describe_origin(const nlohmann::json& level) {
  const std::string source = level.value("source", std::string("map"));
  const std::string output = level.value("source_output", std::string());
  std::string text;
  if (source == "patch_tokens") {
    text = "patch tokens of output " + output + " (patch " + std::to_string(level.value("patch_size", 0)) + ", " +
           std::to_string(level.value("prefix_tokens", 0)) + " prefix tokens)";
  } else if (source == "class_token") {
    text = "class token of output " + output;
  } else if (source == "prefix_token") {
    text = "prefix token " + std::to_string(level.value("token", 0)) + " of output " + output;
  } else if (source == "channels_last") {
    text = "output " + output + " turned from [B, H, W, C]";
  }
  if (level.contains("time_steps")) {
    text += std::string(text.empty() ? "" : ", ") + std::to_string(level["time_steps"].get<std::int64_t>()) + " time steps";
  }
  return text;
}

// "1 2 3" from a JSON list of numbers.
std::string join_numbers(const nlohmann::json& values) {
  std::string out;
  for (const auto& v : values) out += (out.empty() ? "" : " ") + format_number(v.get<double>());
  return out;
}

// "scale 0.0001, mean [0.4 0.4], std [0.2 0.2]", or "none (raw pixel values)" when it changes nothing.
std::string describe_preprocessing(const nlohmann::json& p) {
  const double scale = p.value("scale", 1.0);
  const auto all_equal = [](const nlohmann::json& values, double x) {
    for (const auto& v : values) {
      if (v.get<double>() != x) return false;
    }
    return true;
  };
  const nlohmann::json none = nlohmann::json::array();
  const nlohmann::json& mean = p.contains("mean") ? p["mean"] : none;
  const nlohmann::json& stdev = p.contains("std") ? p["std"] : none;
  if (scale == 1.0 && all_equal(mean, 0.0) && all_equal(stdev, 1.0)) return "none (raw pixel values)";
  return "scale " + format_number(scale) + ", mean [" + join_numbers(mean) + "], std [" + join_numbers(stdev) + "]";
}

// "64x64, overlap 8" (width x height), or "whole windows".
std::string describe_crops(const nlohmann::json& sig) {
  const nlohmann::json& size = sig["crop_size"];
  if (!size.is_array() || size.size() != 2) return "whole windows";
  return std::to_string(size[0].get<std::int64_t>()) + "x" + std::to_string(size[1].get<std::int64_t>()) +
         ", overlap " + std::to_string(sig.value("overlap", std::int64_t(0)));
}

}  // namespace

void run_inspect_command(const InspectOptions& options) {
  const nlohmann::json j = describe_cache(options.cache);
  // Missing parts: everything readable is described, then one line says which parts are not.
  const auto refuse_missing = [&] {
    if (j["missing_parts"].empty()) return;
    std::string list;
    for (const auto& m : j["missing_parts"]) list += (list.empty() ? "" : ", ") + m.get<std::string>();
    throw InputError(options.cache + ": parts cannot be read: " + list +
                     "; the other parts are intact; rerun the precompute of their shards to compute their rows again");
  };
  if (options.json) {
    std::printf("%s\n", j.dump(2).c_str());
    refuse_missing();
    return;
  }
  const auto& sig = j["signature"];
  std::printf("%s: embcache cache, format %lld, written by embcache %s\n", options.cache.c_str(),
              (long long)j["format"].get<std::int64_t>(), j["embcache_version"].get<std::string>().c_str());
  std::printf("  rows: %lld   file: %s   dtype: %s   compression: %s\n",
              (long long)j["rows"].get<std::int64_t>(), format_bytes(j["file_bytes"].get<double>()).c_str(),
              j["dtype"].get<std::string>().c_str(), j["compression"].get<std::string>().c_str());
  std::printf("  encoder: %s (sha256 %s)\n", sig.value("encoder_path", std::string("?")).c_str(),
              sig.value("encoder_sha256", std::string("?")).substr(0, 16).c_str());
  std::printf("  preprocessing: %s   bands: %s   crops: %s\n", describe_preprocessing(sig["preprocessing"]).c_str(),
              sig["bands"].empty() ? "all" : join_numbers(sig["bands"]).c_str(), describe_crops(sig).c_str());
  std::printf("  dataset: %s (%s)\n", sig.value("dataset_path", std::string("?")).c_str(),
              sig.value("dataset_format", std::string("array")).c_str());
  if (sig.contains("layers")) {
    std::printf("  layers:");
    for (const auto& l : sig["layers"]) {
      std::string bands;
      for (const auto& b : l["bands"]) bands += (bands.empty() ? "" : ",") + b.get<std::string>();
      std::printf(" %s:%s", l["layer"].get<std::string>().c_str(), bands.c_str());
      if (l.value("timesteps", 1) > 1) std::printf(" (x%lld timesteps)", (long long)l["timesteps"].get<std::int64_t>());
    }
    if (sig.contains("label_layer")) {
      std::printf("   labels from: %s%s", sig["label_layer"].get<std::string>().c_str(),
                  sig.contains("label_property") ? ("." + sig["label_property"].get<std::string>()).c_str() : "");
    }
    std::printf("\n");
  }
  std::printf("  splits (crops / windows):");
  for (auto it = j["splits"].begin(); it != j["splits"].end(); ++it) {
    std::printf(" %s=%lld/%lld", it.key().c_str(), (long long)it.value().get<std::int64_t>(),
                (long long)j["split_windows"].value(it.key(), std::int64_t(0)));
  }
  std::printf("\n  levels:\n");
  for (const auto& level : j["levels"]) {
    const std::int64_t stride = level["stride"].get<std::int64_t>();
    const std::string where = stride > 0 ? "stride " + std::to_string(stride) : "vector";
    const std::string origin = describe_origin(level);
    const std::string bytes = format_bytes(level["bytes"].get<double>());
    std::printf("    %-12s shape %-18s %-10s %s\n", level["name"].get<std::string>().c_str(), level["shape"].dump().c_str(),
                where.c_str(), origin.empty() ? bytes.c_str() : (bytes + std::string(bytes.size() < 10 ? 10 - bytes.size() : 0, ' ') + "  " + origin).c_str());
  }
  std::printf("  labels: %s\n", describe_labels(label_kinds_from_json(j["labels"])).c_str());
  print_parts_and_shards(j);
  if (j["pending_segments"].get<std::int64_t>() > 0) {
    std::printf("  note: %lld commits of a run are not yet in this file (a run is active or was "
                "interrupted; the next precompute installs them)\n",
                (long long)j["pending_segments"].get<std::int64_t>());
  } else if (j["complete"] == false) {
    std::printf("  note: incomplete: the precompute that wrote it was interrupted, so crops are missing; "
                "rerun it to finish\n");
  }
  refuse_missing();
}

}  // namespace embcache
