#include "embcache/pipeline/precompute_options.hpp"

namespace embcache {

const std::vector<OptionField<PrecomputeOptions>>& precompute_fields() {
  using O = PrecomputeOptions;
  using F = OptionField<O>;
  using S = F::Shape;
  static const std::vector<F> fields = [] {
    std::vector<F> f;
    auto add = [&](const char* name, const char* help, F::Member member) -> F& {
      f.push_back(F{name, help, member});
      return f.back();
    };
    add("encoder", "TorchScript encoder file (torch.jit.save)", &O::encoder).required = true;
    f.back().path = true;
    add("dataset", "Array dataset (HDF5 with /images [N,C,H,W]) or rslearn dataset root", &O::dataset).required = true;
    f.back().path = true;
    add("format", "Dataset format: auto (rslearn when DATASET/windows exists), array or rslearn", &O::format);
    add("layers", "rslearn: layers and bands, LAYER:BAND,BAND[;LAYER:BAND...], channels in this order", &O::layers)
        .show_default = false;
    add("groups", "rslearn: only these window groups (comma list)", &O::groups).shape = S::kList;
    f.back().show_default = false;
    add("window-names", "rslearn: only these window names (comma list)", &O::window_names).shape = S::kList;
    f.back().show_default = false;
    add("tags", "rslearn: only windows whose metadata options match key=value (comma list)", &O::tags).shape = S::kList;
    f.back().show_default = false;
    add("split-key", "rslearn: the metadata option that holds the split", &O::split_key);
    add("label-layer", "rslearn: labels from this layer (one-band raster: masks; GeoJSON: image labels)", &O::label_layer)
        .show_default = false;
    add("label-property", "rslearn: the GeoJSON feature property holding the label", &O::label_property).show_default = false;
    add("label-type", "rslearn vector labels: auto (strings: classes, numbers: values), class or value", &O::label_type);
    add("classes", "rslearn vector labels: class names in id order (default: sorted distinct values)", &O::classes).shape = S::kList;
    f.back().show_default = false;
    add("reader-threads", "rslearn: windows read in parallel", &O::reader_threads);
    add("out", "Cache file to create or extend", &O::out).required = true;
    f.back().path = true;
    add("crop-size", "Crop size S or WxH (default: whole window)", &O::crop_size).show_default = false;
    add("overlap", "Pixels shared by neighbouring crops", &O::overlap);
    add("pad-value", "Pixel value past a small window's edge", &O::pad_value);
    add("levels", "Encoder outputs to store: names or indices, comma list (default: all)", &O::levels).shape = S::kList;
    f.back().show_default = false;
    add("bands", "Input channels to use, in order, comma list (default: all)", &O::bands).shape = S::kList;
    f.back().show_default = false;
    add("scale", "value = (raw * scale - mean) / std", &O::scale);
    add("mean", "One mean, or one per channel (comma list)", &O::mean).shape = S::kList;
    f.back().numeric = true;
    add("std", "One std, or one per channel (comma list)", &O::std).shape = S::kList;
    f.back().numeric = true;
    add("batch-size", "Crops per encoder call, or auto (time a few sizes)", &O::batch_size);
    add("device", "auto, cpu, cuda or cuda:N", &O::device);
    add("threads", "Intra-op threads for the encoder (0 = one per core)", &O::threads);
    add("amp", "Autocast on CUDA: none, fp16 or bf16", &O::amp);
    add("dtype", "Storage dtype: float32, float16 or bfloat16", &O::dtype);
    add("compression", "none, gzip[:LEVEL], lz4 or blosc-zstd", &O::compression);
    add("overwrite", "Replace an existing cache instead of extending it", &O::overwrite);
    add("allow-nonfinite", "Store NaN/Inf features instead of failing", &O::allow_nonfinite);
    add("quiet", "No progress output", &O::quiet).in_json = false;
    add("summary-json", "Write the run summary as JSON to this file", &O::summary_json).show_default = false;
    f.back().path = true;
    add("commit-seconds", "Commit finished crops at least this often", &O::commit_seconds);
    add("segment-mb", "... or whenever this many MiB of features are pending", &O::segment_mb);
    add("no-fsync", "Skip fsync on commit (survives SIGKILL, not power loss)", &O::fsync).negated = true;
    add("stage-priority",
        "Scheduling of reading/converting/writing: idle (leave the cores to the encoder) or normal "
        "(machines shared with other busy jobs)",
        &O::stage_priority);
    return f;
  }();
  return fields;
}

}  // namespace embcache
