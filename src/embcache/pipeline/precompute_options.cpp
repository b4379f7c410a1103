#include "embcache/pipeline/precompute_options.hpp"

#include "embcache/dataset/rslearn_windows.hpp"
#include "embcache/encoder/encoder.hpp"
#include "embcache/pipeline/core_sharing.hpp"
#include "embcache/pipeline/precompute_plan.hpp"
#include "embcache/store/storage_options.hpp"

namespace embcache {

const std::vector<OptionField<PrecomputeOptions>>& precompute_fields() {
  using O = PrecomputeOptions;
  using F = OptionField<O>;
  using S = F::Shape;
  static const std::vector<F> fields = [] {
    OptionTable<O> t;
    t.add("encoder", "TorchScript encoder file (torch.jit.save)", &O::encoder).required = true;
    t.last().path = true;
    t.add("dataset", "Array dataset (HDF5 with /images [N,C,H,W]) or rslearn dataset root", &O::dataset).required = true;
    t.last().path = true;
    t.add("format", "Dataset format: " + format_requests().choices() + " (auto: rslearn when DATASET/windows exists)",
          &O::format);
    t.add("layers", "rslearn: layers and bands, LAYER:BAND,BAND[;LAYER:BAND...], channels in this order", &O::layers)
        .show_default = false;
    t.add("groups", "rslearn: only these window groups (comma list)", &O::groups).shape = S::kList;
    t.last().show_default = false;
    t.add("window-names", "rslearn: only these window names (comma list)", &O::window_names).shape = S::kList;
    t.last().show_default = false;
    t.add("tags", "rslearn: only windows whose metadata options match key=value (comma list)", &O::tags).shape = S::kList;
    t.last().show_default = false;
    t.add("split-key", "rslearn: the metadata option that holds the split", &O::split_key);
    t.add("label-layer", "rslearn: labels from this layer (one-band raster: masks; GeoJSON: image labels)", &O::label_layer)
        .show_default = false;
    t.add("label-property", "rslearn: the GeoJSON feature property holding the label", &O::label_property).show_default = false;
    t.add("label-type", "rslearn labels: " + label_types().choices() + " (auto: float rasters and numeric vector labels "
          "are values, the rest classes)", &O::label_type);
    t.add("classes", "rslearn vector labels: class names in id order (default: sorted distinct values)", &O::classes).shape = S::kList;
    t.last().show_default = false;
    t.add("reader-threads", "rslearn: windows read in parallel", &O::reader_threads);
    t.add("out", "Cache file to create or extend", &O::out).required = true;
    t.last().path = true;
    t.add("crop-size", "Crop size S or WxH (default: whole window)", &O::crop_size).show_default = false;
    t.add("overlap", "Pixels shared by neighbouring crops", &O::overlap);
    t.add("pad-value", "Pixel value past a small window's edge", &O::pad_value);
    t.add("levels", "Encoder outputs to store: names or indices, comma list (default: all)", &O::levels).shape = S::kList;
    t.last().show_default = false;
    t.add("patch-size", "Token outputs [B, N, D]: patch size P, or OUTPUT=P,... (default: inferred from N and the crop)",
          &O::patch_size).show_default = false;
    t.last().identity_when_set = true;
    t.add("prefix-tokens", "Token outputs: tokens before the patches (class + registers), K or OUTPUT=K,... (default: inferred)",
          &O::prefix_tokens).show_default = false;
    t.last().identity_when_set = true;
    t.add("keep-prefix-tokens", "Store every prefix token as a level OUTPUT#prefixK (the class token OUTPUT#cls is always stored)",
          &O::keep_prefix_tokens).identity_when_set = true;
    t.add("channels-last", "Outputs that are [B, H, W, C] maps (comma list of output names)", &O::channels_last).shape = S::kList;
    t.last().show_default = false;
    t.last().identity_when_set = true;
    t.add("temporal-tokens", "4-D outputs that are temporal tokens [B, T, N, D] (comma list of output names)",
          &O::temporal_tokens).shape = S::kList;
    t.last().show_default = false;
    t.last().identity_when_set = true;
    t.add("time-axis", "Give the encoder [B, T, C, h, w]: rslearn layers' timesteps on a time axis (array datasets "
          "with /images [N, T, C, H, W] always have one)", &O::time_axis).identity_when_set = true;
    t.add("bands", "Input channels to use, in order, comma list (default: all)", &O::bands).shape = S::kList;
    t.last().show_default = false;
    t.add("scale", "value = (raw * scale - mean) / std", &O::scale);
    t.add("mean", "One mean, or one per channel (comma list)", &O::mean).shape = S::kList;
    t.last().numeric = true;
    t.add("std", "One std, or one per channel (comma list)", &O::std).shape = S::kList;
    t.last().numeric = true;
    t.add("batch-size", "Crops per encoder call, or auto (time a few sizes)", &O::batch_size);
    t.add("device", "auto, cpu, cuda or cuda:N", &O::device);
    t.add("threads", "Intra-op threads for the encoder (0 = one per CPU this process may run on: its affinity, as taskset or a Slurm job sets it, capped by a cgroup CPU quota)", &O::threads);
    t.add("amp", "Autocast on CUDA: " + amp_modes().choices(), &O::amp);
    t.add("optimize", "Freeze the encoder and optimise it for inference (batch-norm folding, weight prepacking): "
          "MobileNetV2 and ResNet-50 ran 0.5x and 0.8x as long; fail if it cannot be frozen. Features then differ "
          "from the plain encoder's (up to 1e-4 of their largest value; the run measures it), so the cache records "
          "it and refuses to mix the two. Without --optimize or --no-optimize, a new cache's encoder runs as "
          "loaded, and an existing cache keeps what it was made with", &O::optimize)
        .identity_when_set = true;
    t.add("no-optimize", "Never optimise the encoder, not even to extend a cache made with --optimize (which "
          "then refuses the run)", &O::no_optimize).identity_when_set = true;
    t.add("dtype", "Storage dtype: " + storage_dtypes().choices() + " (int8: quantised, with scales)", &O::dtype);
    t.add("compression", "none, gzip[:LEVEL], lz4 or blosc-zstd", &O::compression);
    t.add("shard", "Process shard I of N of the windows (I/N, from 0), or slurm (from SLURM_ARRAY_TASK_ID, _MIN and "
          "_COUNT); shards write into one cache, concurrently (docs/scale-out.md)", &O::shard).show_default = false;
    t.last().in_json = false;
    t.add("only-new-windows", "Read only windows with crops the cache lacks: windows already cached are not read, so "
          "their pixels are not checked for changes (adding windows to a large cache costs what is new)",
          &O::only_new_windows).identity_when_set = true;
    t.add("overwrite", "Replace an existing cache instead of extending it", &O::overwrite);
    t.add("allow-nonfinite", "Store NaN/Inf features instead of failing", &O::allow_nonfinite);
    t.add("quiet", "No progress output", &O::quiet).in_json = false;
    t.add("summary-json", "Write the run summary as JSON to this file", &O::summary_json).show_default = false;
    t.last().path = true;
    t.add("commit-seconds", "Commit finished crops at least this often", &O::commit_seconds);
    t.add("segment-mb", "... or whenever this many MiB of features are pending", &O::segment_mb);
    t.add("no-fsync", "Skip fsync on commit (survives SIGKILL, not power loss)", &O::fsync).negated = true;
    t.add("drop-behind",
          "Evict written features from the page cache once they are on disk: for caches larger than "
          "memory, or VMs where fresh page-cache pages are slow; writes then go at disk speed and the "
          "next train-probe reads from disk",
          &O::drop_behind);
    t.add("stage-priority",
        "Scheduling of reading/converting/writing: " + stage_schedulings().choices() + " (auto: idle while the "
        "encoder keeps the cores busy, normal for light encoders and when --threads leaves cores free; idle: leave "
        "the cores to the encoder; normal: machines shared with other busy jobs)",
        &O::stage_priority);
    return t.take();
  }();
  return fields;
}

}  // namespace embcache
