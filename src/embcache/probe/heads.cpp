#include "embcache/probe/heads.hpp"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <torch/script.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <sstream>

#include "embcache/core/error.hpp"

namespace embcache {
namespace {

struct ParamDef {
  std::string name;
  std::vector<std::int64_t> shape;  // one member's shape
  std::int64_t fan_in = 0;          // > 0: uniform(±1/sqrt(fan_in)), PyTorch's Linear/Conv default
  double fill = 0.0;                // fan_in == 0: constant (norm weights 1, norm biases 0)
};

std::int64_t group_count(std::int64_t width) { return width % 8 == 0 ? 8 : 1; }

std::string shape_list(const std::vector<std::int64_t>& v) {
  std::string s = "[";
  for (std::size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

// Writes the TorchScript of one architecture. Parameters are stacked: member g is self.<name>[g].
class SourceWriter {
 public:
  explicit SourceWriter(const HeadConfig& c) : c_(c) {}

  std::string write() {
    line("def forward(self, feats: List[Tensor]) -> Tensor:");
    line("    drop: List[Tensor] = []");
    line("    return self.forward_bank(feats, drop)[0]");
    line("");
    line("def forward_bank(self, feats: List[Tensor], drop: List[Tensor]) -> Tensor:");
    if (c_.pooled_input()) {
      write_pooled();
    } else {
      for (std::size_t i = 0; i < c_.levels.size(); ++i) standardized_map(i);
      switch (c_.type) {
        case HeadType::kLinear: write_dense_linear(1); break;
        case HeadType::kPixelShuffle: write_dense_linear(c_.out_size[0] / c_.level_shapes[0][1]); break;
        case HeadType::kConv: write_conv(); break;
        case HeadType::kFpn: write_fpn(); break;
        case HeadType::kUnet: write_unet(); break;
        case HeadType::kUpernet: write_upernet(); break;
        case HeadType::kMlp:
        case HeadType::kLogreg:
        case HeadType::kKnn: break;  // validate() rejects them on dense tasks
      }
    }
    return out_.str();
  }

  std::vector<ParamDef> params;

 private:
  void line(const std::string& text) { out_ << text << "\n"; }
  void body(const std::string& text) { out_ << "    " << text << "\n"; }
  void param(const std::string& name, std::vector<std::int64_t> shape, std::int64_t fan_in, double fill = 0.0) {
    params.push_back({name, std::move(shape), fan_in, fill});
  }
  std::int64_t channels(std::size_t i) const { return c_.level_shapes[i][0]; }
  std::int64_t width() const { return c_.hidden.empty() ? 128 : c_.hidden[0]; }
  std::string x(std::size_t i) const { return "x" + std::to_string(i); }

  bool temporal(std::size_t i) const { return i < c_.temporal.size() && c_.temporal[i]; }

  // A level stored with a time axis: head.pt gets it as read from the cache and reduces it as
  // the feed did while training (whose inputs come reduced, so the branch is not taken there).
  void reduce_time(std::size_t i, bool pooled) {
    if (!temporal(i)) return;
    if (pooled) {
      body("if " + x(i) + ".dim() == 5:");
      body("    " + x(i) + " = " + x(i) + ".mean([3, 4])");
    }
    body("if " + x(i) + ".dim() == " + (pooled ? "3" : "5") + ":");
    body("    " + x(i) + " = " + pool_time_source(x(i), c_.temporal_pool));
  }

  void standardized_map(std::size_t i) {
    body(x(i) + " = feats[" + std::to_string(i) + "]");
    reduce_time(i, false);
    if (c_.standardize) {
      body(x(i) + " = (" + x(i) + " - self.mean_" + std::to_string(i) + ".view(1, -1, 1, 1)) / self.std_" +
           std::to_string(i) + ".view(1, -1, 1, 1)");
    }
  }

  void write_pooled() {
    std::string cat;
    std::int64_t d = 0;
    for (std::size_t i = 0; i < c_.levels.size(); ++i) {
      body(x(i) + " = feats[" + std::to_string(i) + "]");
      reduce_time(i, true);
      body("if " + x(i) + ".dim() == 4:");
      body("    " + x(i) + " = " + x(i) + ".mean([2, 3])");
      if (c_.standardize) {
        body(x(i) + " = (" + x(i) + " - self.mean_" + std::to_string(i) + ") / self.std_" + std::to_string(i));
      }
      cat += (cat.empty() ? "" : ", ") + x(i);
      d += channels(i);
    }
    body(c_.levels.size() == 1 ? "z = x0" : "z = torch.cat([" + cat + "], 1)");
    // The first layer of every member reads the same z: one GEMM against all members' weights
    // ([B, D] x [D, G*out]) instead of G small ones. Later layers are per member (bmm).
    std::int64_t in = d;
    std::size_t layer = 0;
    const std::size_t layers = c_.type == HeadType::kMlp ? c_.hidden.size() + 1 : 1;
    for (; layer < layers; ++layer) {
      const std::string l = std::to_string(layer);
      const bool last = layer + 1 == layers;
      const std::int64_t out = last ? c_.outputs : c_.hidden[layer];
      param("w" + l, {out, in}, in);
      param("b" + l, {out}, in);
      if (layer == 0) {
        body("g = self.w0.size(0)");
        body("h = torch.linear(z, self.w0.reshape(-1, " + std::to_string(in) + "), self.b0.reshape(-1))");
        body("h = h.reshape(h.size(0), g, " + std::to_string(out) + ").transpose(0, 1)");
      } else {
        body("h = torch.baddbmm(self.b" + l + ".unsqueeze(1), h, self.w" + l + ".transpose(1, 2))");
      }
      if (!last) {
        body("h = torch.relu(h)");
        body("if len(drop) > 0:");
        body("    h = h * drop[" + l + "]");
      }
      in = out;
    }
    body("return h");
  }

  void upsample_to_mask(const std::string& v) {
    body(v + " = torch.upsample_bilinear2d(" + v + ", " + shape_list(c_.out_size) + ", False, None, None)");
  }

  // 1x1 conv per member (as one conv over G*K*r*r output channels), then pixel shuffle by r
  // (r = 1: bilinear upsampling instead).
  void write_dense_linear(std::int64_t r) {
    const std::int64_t c = channels(0), k = c_.outputs;
    param("w0", {k * r * r, c}, c);
    param("b0", {k * r * r}, c);
    body("g = self.w0.size(0)");
    body("y = torch.conv2d(x0, self.w0.reshape(-1, " + std::to_string(c) + ", 1, 1), self.b0.reshape(-1))");
    if (r > 1) {
      body("y = torch.pixel_shuffle(y, " + std::to_string(r) + ")");
    } else {
      upsample_to_mask("y");
    }
    body("return y.reshape(y.size(0), g, " + std::to_string(k) + ", " + std::to_string(c_.out_size[0]) + ", " +
         std::to_string(c_.out_size[1]) + ").transpose(0, 1)");
  }

  // conv (3x3, or 1x1) + GroupNorm + ReLU, one member (banks of these heads hold one member).
  void conv_block(const std::string& v, const std::string& in, const std::string& name, std::int64_t cin, std::int64_t cout,
                  std::int64_t kernel = 3) {
    const std::string pad = kernel == 3 ? "[1, 1]" : "[0, 0]";
    param("w" + name, {cout, cin, kernel, kernel}, cin * kernel * kernel);
    param("b" + name, {cout}, cin * kernel * kernel);
    param("gw" + name, {cout}, 0, 1.0);
    param("gb" + name, {cout}, 0, 0.0);
    body(v + " = torch.conv2d(" + in + ", self.w" + name + "[0], self.b" + name + "[0], [1, 1], " + pad + ", [1, 1], 1)");
    body(v + " = torch.relu(torch.group_norm(" + v + ", " + std::to_string(group_count(cout)) + ", self.gw" + name +
         "[0], self.gb" + name + "[0], 1e-05, False))");
  }

  void finish_map(const std::string& v, std::int64_t cin) {
    param("wo", {c_.outputs, cin, 1, 1}, cin);
    param("bo", {c_.outputs}, cin);
    body("y = torch.conv2d(" + v + ", self.wo[0], self.bo[0])");
    if (is_dense(c_.task)) {
      upsample_to_mask("y");
    } else {
      body("y = y.mean([2, 3])");
    }
    body("return y.unsqueeze(0)");
  }

  void write_conv() {
    std::int64_t cin = channels(0);
    body("x = x0");
    for (std::int64_t i = 0; i < c_.conv_blocks; ++i) {
      conv_block("x", "x", std::to_string(i), cin, width());
      cin = width();
    }
    finish_map("x", cin);
  }

  // Levels ordered finest first (largest maps), as FPN and U-Net walk them.
  std::vector<std::size_t> finest_first() const {
    std::vector<std::size_t> order(c_.levels.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
      return c_.level_shapes[a][1] * c_.level_shapes[a][2] > c_.level_shapes[b][1] * c_.level_shapes[b][2];
    });
    return order;
  }
  std::string size_of(std::size_t level) const {
    return shape_list({c_.level_shapes[level][1], c_.level_shapes[level][2]});
  }

  void write_fpn() {
    const auto order = finest_first();
    const std::size_t n = order.size();
    const std::int64_t w = width();
    for (std::size_t j = 0; j < n; ++j) {
      const std::string s = std::to_string(j);
      param("lw" + s, {w, channels(order[j]), 1, 1}, channels(order[j]));
      param("lb" + s, {w}, channels(order[j]));
      body("p" + s + " = torch.conv2d(" + x(order[j]) + ", self.lw" + s + "[0], self.lb" + s + "[0])");
    }
    for (std::size_t j = n - 1; j-- > 0;) {
      body("p" + std::to_string(j) + " = p" + std::to_string(j) + " + torch.upsample_nearest2d(p" +
           std::to_string(j + 1) + ", " + size_of(order[j]) + ", None, None)");
    }
    if (is_dense(c_.task)) {
      param("sw", {w, w, 3, 3}, w * 9);
      param("sb", {w}, w * 9);
      body("x = torch.relu(torch.conv2d(p0, self.sw[0], self.sb[0], [1, 1], [1, 1], [1, 1], 1))");
      finish_map("x", w);
      return;
    }
    std::string cat;
    for (std::size_t j = 0; j < n; ++j) cat += (j ? ", p" : "p") + std::to_string(j) + ".mean([2, 3])";
    param("wo", {c_.outputs, w * std::int64_t(n)}, w * std::int64_t(n));
    param("bo", {c_.outputs}, w * std::int64_t(n));
    body("return torch.linear(torch.cat([" + cat + "], 1), self.wo[0], self.bo[0]).unsqueeze(0)");
  }

  void write_unet() {
    const auto order = finest_first();
    const std::size_t n = order.size();
    const std::int64_t w = width();
    body("x = " + x(order[n - 1]));
    std::int64_t cin = channels(order[n - 1]);
    for (std::size_t j = n - 1; j-- > 0;) {
      body("x = torch.cat([torch.upsample_bilinear2d(x, " + size_of(order[j]) + ", False, None, None), " +
           x(order[j]) + "], 1)");
      conv_block("x", "x", std::to_string(j), cin + channels(order[j]), w);
      cin = w;
    }
    finish_map("x", cin);
  }

  std::string bilinear(const std::string& v, const std::string& size) const {
    return "torch.upsample_bilinear2d(" + v + ", " + size + ", False, None, None)";
  }

  // UPerNet as mmsegmentation's UPerHead (PANGAEA's decoder): a pyramid pooling module (scales 1,
  // 2, 3, 6) on the coarsest level, 1x1 laterals on the others, a top-down sum with bilinear
  // upsampling, 3x3 convs, every level upsampled to the finest and concatenated, a 3x3 fusion
  // conv, then the 1x1 prediction. Conv blocks use GroupNorm (no batch statistics, so a head is
  // the same in training, evaluation and head.pt); mmsegmentation uses BatchNorm and dropout 0.1.
  void write_upernet() {
    const auto order = finest_first();
    const std::size_t n = order.size();
    const std::int64_t w = width();
    const std::size_t coarse = order[n - 1];
    const std::string coarse_size = size_of(coarse);
    std::string ppm = x(coarse);
    for (const std::int64_t scale : {1, 2, 3, 6}) {
      const std::string q = "q" + std::to_string(scale);
      body(q + " = torch.adaptive_avg_pool2d(" + x(coarse) + ", [" + std::to_string(scale) + ", " + std::to_string(scale) + "])");
      conv_block(q, q, "ppm" + std::to_string(scale), channels(coarse), w, 1);
      body(q + " = " + bilinear(q, coarse_size));
      ppm += ", " + q;
    }
    const std::string top = "l" + std::to_string(n - 1);
    body(top + " = torch.cat([" + ppm + "], 1)");
    conv_block(top, top, "bottleneck", channels(coarse) + 4 * w, w);
    for (std::size_t j = 0; j + 1 < n; ++j) {
      conv_block("l" + std::to_string(j), x(order[j]), "lateral" + std::to_string(j), channels(order[j]), w, 1);
    }
    for (std::size_t j = n - 1; j > 0; --j) {
      const std::string lo = "l" + std::to_string(j - 1);
      body(lo + " = " + lo + " + " + bilinear("l" + std::to_string(j), size_of(order[j - 1])));
    }
    std::string fused;
    for (std::size_t j = 0; j < n; ++j) {
      const std::string f = "f" + std::to_string(j), l = "l" + std::to_string(j);
      if (j + 1 < n) {
        conv_block(f, l, "fpn" + std::to_string(j), w, w);
      } else {
        body(f + " = " + l);
      }
      if (j > 0) body(f + " = " + bilinear(f, size_of(order[0])));
      fused += (j ? ", " : "") + f;
    }
    body("y = torch.cat([" + fused + "], 1)");
    conv_block("y", "y", "fuse", std::int64_t(n) * w, w);
    finish_map("y", w);
  }

  const HeadConfig& c_;
  std::ostringstream out_;
};

}  // namespace

const EnumTable<HeadType>& head_types() {
  static const EnumTable<HeadType> table{
      {HeadType::kLinear, "linear"}, {HeadType::kMlp, "mlp"},       {HeadType::kConv, "conv"},
      {HeadType::kFpn, "fpn"},       {HeadType::kUnet, "unet"},     {HeadType::kPixelShuffle, "pixel-shuffle"},
      {HeadType::kUpernet, "upernet"}, {HeadType::kLogreg, "logreg"}, {HeadType::kKnn, "knn"}};
  return table;
}

const char* head_name(HeadType type) { return head_types().name(type); }

void check_head_loads(const std::string& path) {
  try {
    torch::jit::load(path);
  } catch (const std::exception& e) {
    const std::string reason = dynamic_cast<const c10::Error*>(&e)
                                   ? first_line(static_cast<const c10::Error&>(e).what_without_backtrace())
                                   : first_line(e.what());
    throw IoError(path + ": the head written does not load back (" + reason + "); is the disk full?");
  }
}

bool HeadConfig::pooled_input() const {
  return !is_dense(task) &&
         (type == HeadType::kLinear || type == HeadType::kMlp || type == HeadType::kLogreg || type == HeadType::kKnn);
}

bool HeadConfig::bankable() const {
  return type == HeadType::kLinear || type == HeadType::kMlp || type == HeadType::kPixelShuffle ||
         type == HeadType::kLogreg || type == HeadType::kKnn;
}

std::string HeadConfig::levels_text() const {
  std::string s;
  for (const auto& l : levels) s += (s.empty() ? "" : "+") + l;
  return s;
}

void check_head_levels(HeadType type, ProbeTask task, std::size_t level_count, const std::string& levels_text) {
  const std::string head = head_name(type);
  const bool multi = type == HeadType::kFpn || type == HeadType::kUnet;
  const bool pooled = !is_dense(task) &&
                      (type == HeadType::kLinear || type == HeadType::kMlp || type == HeadType::kLogreg || type == HeadType::kKnn);
  if (type == HeadType::kLogreg && task != ProbeTask::kClassification) {
    throw UsageError(OptionName{"head"}, "logreg is multinomial logistic regression; use it with --task classification");
  }
  if (type == HeadType::kKnn && task != ProbeTask::kClassification) {
    throw UsageError(OptionName{"head"}, "knn votes for a class; use it with --task classification");
  }
  if (multi && level_count < 2) {
    throw UsageError(OptionName{"levels"}, head + " combines several levels; give at least two joined with '+' "
                     "(e.g. --levels 1+2+3), got " + levels_text);
  }
  if (type == HeadType::kUpernet && !is_dense(task)) {
    throw UsageError(OptionName{"head"}, "upernet predicts per pixel; use it with --task segmentation or pixel-regression");
  }
  if (!multi && type != HeadType::kUpernet && level_count > 1 && !pooled) {
    throw UsageError(OptionName{"levels"}, head + " on --task " + task_name(task) + " reads one level; got " +
                     levels_text + " (use fpn, unet or upernet to combine levels)");
  }
  if (type == HeadType::kMlp && is_dense(task)) {
    throw UsageError(OptionName{"head"}, "mlp predicts one value per image; for --task " + std::string(task_name(task)) +
                     " use linear, conv, fpn, unet, upernet or pixel-shuffle");
  }
  if (type == HeadType::kPixelShuffle && !is_dense(task)) {
    throw UsageError(OptionName{"head"}, "pixel-shuffle predicts per pixel; use it with --task segmentation or pixel-regression");
  }
}

void HeadConfig::validate() const {
  check_head_levels(type, task, levels.size(), levels_text());
  if (!pooled_input()) {
    for (std::size_t i = 0; i < levels.size(); ++i) {
      if (level_shapes[i].size() != 3) {
        throw UsageError(OptionName{"levels"}, std::string(head_name(type)) + " needs feature maps, but level " + levels[i] +
                         " is a vector [" +
                         std::to_string(level_shapes[i][0]) + "]; use --head linear or mlp, or another level");
      }
    }
  }
  if (type == HeadType::kPixelShuffle) {
    const auto& s = level_shapes[0];
    if (out_size[0] % s[1] != 0 || out_size[1] % s[2] != 0 || out_size[0] / s[1] != out_size[1] / s[2]) {
      throw UsageError(OptionName{"head"}, "pixel-shuffle needs the mask size " + std::to_string(out_size[0]) + "x" +
                       std::to_string(out_size[1]) + " to be a whole multiple r of level " + levels[0] + "'s " +
                       std::to_string(s[1]) + "x" + std::to_string(s[2]) + "; use linear (bilinear upsampling)");
    }
  }
  for (auto h : hidden) {
    if (h <= 0) throw UsageError(OptionName{"hidden"}, "widths must be positive");
  }
  if (dropout < 0 || dropout >= 1) throw UsageError(OptionName{"dropout"}, "expected a probability in [0, 1)");
  if (conv_blocks < 1) throw UsageError(OptionName{"conv-blocks"}, "expected at least 1");
}

struct HeadBank::Impl {
  HeadConfig config;
  std::int64_t members;
  std::uint64_t seed;
  c10::Device device;
  std::string source;
  std::vector<ParamDef> defs;
  std::vector<at::Tensor> params;
  torch::jit::Module module{"EmbcacheHead"};
  at::Generator dropout_gen;

  Impl(const HeadConfig& c, std::int64_t g, std::uint64_t s, c10::Device d)
      : config(c), members(g), seed(s), device(d), dropout_gen(at::make_generator<at::CPUGeneratorImpl>(s ^ 0xd40f)) {}

  torch::jit::Module build(const std::vector<at::Tensor>& values, const std::vector<at::Tensor>& mean,
                           const std::vector<at::Tensor>& std) const {
    torch::jit::Module m("EmbcacheHead");
    for (std::size_t i = 0; i < defs.size(); ++i) m.register_parameter(defs[i].name, values[i], false);
    if (config.standardize) {
      for (std::size_t i = 0; i < config.levels.size(); ++i) {
        m.register_buffer("mean_" + std::to_string(i), mean[i]);
        m.register_buffer("std_" + std::to_string(i), std[i]);
      }
    }
    m.define(source);
    return m;
  }

  std::vector<at::Tensor> stats(bool want_mean) const {
    std::vector<at::Tensor> out;
    for (std::size_t i = 0; i < config.levels.size(); ++i) {
      if (config.standardize) {
        out.push_back(module.attr((want_mean ? "mean_" : "std_") + std::to_string(i)).toTensor());
      } else {
        out.push_back(at::Tensor());
      }
    }
    return out;
  }
};

HeadBank::HeadBank(const HeadConfig& config, std::int64_t members, std::uint64_t seed, c10::Device device)
    : HeadBank(config, std::vector<std::uint64_t>(std::size_t(members), seed), seed, device) {}

HeadBank::HeadBank(const HeadConfig& config, const std::vector<std::uint64_t>& member_seeds, std::uint64_t pass_seed,
                   c10::Device device)
    : impl_(std::make_unique<Impl>(config, std::int64_t(member_seeds.size()), pass_seed, device)) {
  config.validate();
  const std::int64_t members = std::int64_t(member_seeds.size());
  if (members > 1 && !config.bankable()) throw std::logic_error("HeadBank: this head type holds one member");
  SourceWriter writer(config);
  impl_->source = writer.write();
  impl_->defs = writer.params;
  // Each member starts from the draw a lone head with its seed would get; members that share a
  // seed share one draw.
  std::vector<std::uint64_t> seeds;
  std::vector<at::Generator> gens;
  std::vector<std::size_t> draw_of;
  for (auto s : member_seeds) {
    const auto found = std::find(seeds.begin(), seeds.end(), s);
    draw_of.push_back(std::size_t(found - seeds.begin()));
    if (found != seeds.end()) continue;
    seeds.push_back(s);
    gens.push_back(at::make_generator<at::CPUGeneratorImpl>(s));
  }
  for (const auto& def : impl_->defs) {
    std::vector<at::Tensor> draws;
    for (auto& gen : gens) {
      at::Tensor one = at::empty(def.shape, at::kFloat);
      if (def.fan_in > 0) {
        const double bound = 1.0 / std::sqrt(double(def.fan_in));
        one.uniform_(-bound, bound, gen);
      } else {
        one.fill_(def.fill);
      }
      draws.push_back(one);
    }
    std::vector<at::Tensor> stacked;
    for (auto d : draw_of) stacked.push_back(draws[d]);
    impl_->params.push_back(at::stack(stacked).to(device).set_requires_grad(true));
  }
  std::vector<at::Tensor> mean, std;
  for (const auto& shape : config.level_shapes) {
    mean.push_back(at::zeros({shape[0]}, at::TensorOptions().device(device)));
    std.push_back(at::ones({shape[0]}, at::TensorOptions().device(device)));
  }
  impl_->module = impl_->build(impl_->params, mean, std);
}

HeadBank::~HeadBank() = default;
HeadBank::HeadBank(HeadBank&&) noexcept = default;

const HeadConfig& HeadBank::config() const { return impl_->config; }
std::int64_t HeadBank::members() const { return impl_->members; }
std::string HeadBank::source() const { return impl_->source; }
std::vector<at::Tensor> HeadBank::parameters() const { return impl_->params; }

at::Tensor HeadBank::pooled_features(const std::vector<at::Tensor>& inputs) const {
  const HeadConfig& c = impl_->config;
  if (!c.pooled_input()) throw std::logic_error("HeadBank::pooled_features: not a pooled head");
  const std::vector<at::Tensor> mean = impl_->stats(true), std = impl_->stats(false);
  std::vector<at::Tensor> parts;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    at::Tensor x = inputs[i];
    if (x.dim() == 4) x = x.mean({2, 3});
    if (c.standardize) x = (x - mean[i]) / std[i];
    parts.push_back(x);
  }
  return parts.size() == 1 ? parts.front() : at::cat(parts, 1);
}

void HeadBank::set_standardization(const std::vector<at::Tensor>& mean, const std::vector<at::Tensor>& std) {
  if (!impl_->config.standardize) return;
  for (std::size_t i = 0; i < mean.size(); ++i) {
    impl_->module.setattr("mean_" + std::to_string(i), mean[i].to(impl_->device, at::kFloat));
    impl_->module.setattr("std_" + std::to_string(i), std[i].to(impl_->device, at::kFloat));
  }
}

at::Tensor HeadBank::forward(const std::vector<at::Tensor>& inputs, bool train) {
  const auto& c = impl_->config;
  c10::List<at::Tensor> drop;
  if (train && c.type == HeadType::kMlp && c.dropout > 0) {
    // One mask per layer shared by the members: each member sees what it would see alone.
    const std::int64_t batch = inputs.at(0).size(0);
    for (auto h : c.hidden) {
      at::Tensor mask = at::empty({1, batch, h}, at::kFloat).bernoulli_(1.0 - c.dropout, impl_->dropout_gen);
      drop.push_back(mask.div_(1.0 - c.dropout).to(impl_->device));
    }
  }
  c10::List<at::Tensor> feats;
  for (const auto& t : inputs) feats.push_back(t);
  return impl_->module.get_method("forward_bank")({feats, drop}).toTensor();
}

std::vector<at::Tensor> HeadBank::member_state(std::int64_t g) const {
  std::vector<at::Tensor> state;
  for (const auto& p : impl_->params) state.push_back(p[g].detach().clone());
  return state;
}

void HeadBank::load_member_state(std::int64_t g, const std::vector<at::Tensor>& state) {
  c10::NoGradGuard no_grad;
  for (std::size_t i = 0; i < impl_->params.size(); ++i) impl_->params[i][g].copy_(state[i]);
}

void HeadBank::save_member(std::int64_t g, const std::string& path) const {
  std::vector<at::Tensor> values, mean, std;
  for (const auto& p : impl_->params) values.push_back(p.narrow(0, g, 1).detach().to(at::kCPU).clone());
  for (const auto& t : impl_->stats(true)) mean.push_back(t.defined() ? t.to(at::kCPU).clone() : t);
  for (const auto& t : impl_->stats(false)) std.push_back(t.defined() ? t.to(at::kCPU).clone() : t);
  torch::jit::Module m = impl_->build(values, mean, std);
  m.eval();
  try {
    m.save(path);
  } catch (const c10::Error& e) {
    throw IoError(path + ": cannot write the head (" + first_line(e.what_without_backtrace()) + ")");
  }
}

}  // namespace embcache
