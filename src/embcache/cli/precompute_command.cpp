#include "embcache/cli/precompute_command.hpp"

#include <CLI/CLI.hpp>

#include <cstdio>
#include <fstream>
#include <memory>

#include "embcache/core/error.hpp"
#include "embcache/core/files.hpp"
#include "embcache/pipeline/precompute.hpp"

namespace embcache {

void setup_precompute(CLI::App& app) {
  auto options = std::make_shared<PrecomputeOptions>();
  CLI::App* sub = app.add_subcommand(
      "precompute", "Run a TorchScript encoder over every crop of a dataset into an HDF5 cache");
  sub->add_option("--encoder", options->encoder, "TorchScript encoder file (torch.jit.save)")->required();
  sub->add_option("--dataset", options->dataset, "Array dataset (HDF5 with /images [N,C,H,W])")->required();
  sub->add_option("--out", options->out, "Cache file to create or extend")->required();
  sub->add_option("--crop-size", options->crop_size, "Crop size S or WxH (default: whole window)");
  sub->add_option("--overlap", options->overlap, "Pixels shared by neighbouring crops")->capture_default_str();
  sub->add_option("--pad-value", options->pad_value, "Pixel value past a small window's edge")->capture_default_str();
  sub->add_option("--levels", options->levels, "Encoder outputs to store: names or indices, comma list (default: all)");
  sub->add_option("--bands", options->bands, "Input channels to use, in order, comma list (default: all)");
  sub->add_option("--scale", options->scale, "value = (raw * scale - mean) / std")->capture_default_str();
  sub->add_option("--mean", options->mean, "One mean, or one per channel (comma list)")->capture_default_str();
  sub->add_option("--std", options->std, "One std, or one per channel (comma list)")->capture_default_str();
  sub->add_option("--batch-size", options->batch_size, "Crops per encoder call, or auto (time a few sizes)")->capture_default_str();
  sub->add_option("--device", options->device, "auto, cpu, cuda or cuda:N")->capture_default_str();
  sub->add_option("--threads", options->threads, "Intra-op threads for the encoder (0 = one per core)")->capture_default_str();
  sub->add_option("--amp", options->amp, "Autocast on CUDA: none, fp16 or bf16")->capture_default_str();
  sub->add_option("--dtype", options->dtype, "Storage dtype: float32, float16 or bfloat16")->capture_default_str();
  sub->add_option("--compression", options->compression, "none, gzip[:LEVEL], lz4 or blosc-zstd")->capture_default_str();
  sub->add_flag("--overwrite", options->overwrite, "Replace an existing cache instead of extending it");
  sub->add_flag("--allow-nonfinite", options->allow_nonfinite, "Store NaN/Inf features instead of failing");
  sub->add_flag("--quiet", options->quiet, "No progress output");
  sub->add_option("--summary-json", options->summary_json, "Write the run summary as JSON to this file");
  sub->add_option("--commit-seconds", options->commit_seconds, "Commit finished crops at least this often")->capture_default_str();
  sub->add_option("--segment-mb", options->segment_mb, "... or whenever this many MiB of features are pending")->capture_default_str();
  sub->add_flag("!--no-fsync", options->fsync, "Skip fsync on commit (survives SIGKILL, not power loss)");
  sub->add_option("--stage-priority", options->stage_priority,
                  "Scheduling of reading/converting/writing: idle (leave the cores to the encoder) or normal (machines shared with other busy jobs)")
      ->capture_default_str();
  sub->callback([options] { run_precompute_command(*options); });
}

void run_precompute_command(const PrecomputeOptions& options) {
  const PrecomputeSummary summary = run_precompute(options);
  std::printf("%s\n", summary.one_line().c_str());
  std::fflush(stdout);
  if (!options.summary_json.empty()) {
    write_text_atomically(options.summary_json, summary.to_json().dump(2) + "\n", "--summary-json");
  }
  if (summary.interrupted) {
    throw Interrupted("interrupted: " + std::to_string(summary.crops_computed + summary.crops_skipped) +
                      " of " + std::to_string(summary.crops_total) +
                      " crops are in the cache; rerun the same command to finish");
  }
}

}  // namespace embcache
