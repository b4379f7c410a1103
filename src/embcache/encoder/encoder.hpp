// A TorchScript encoder: loading, device placement, and normalising its output to named levels.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <memory>
#include <string>
#include <vector>

#include "embcache/core/enum_table.hpp"

namespace embcache {

// LibTorch's version as this build was compiled against ("1.13.0") and as the library loaded
// reports it in its build settings.
std::string torch_version_built();
std::string torch_version_running();

enum class Amp { kNone, kFp16, kBf16 };
const EnumTable<Amp>& amp_modes();  // --amp

struct EncoderOutput {
  std::vector<std::string> names;  // dict keys, or "0", "1", ... in output order
  std::vector<at::Tensor> levels;  // [B, ...] as returned (rank 2 to 5), on the encoder's device
};

// How far an optimised encoder's outputs are from the plain encoder's on one input, per output:
// max |optimised - plain| / max |plain|.
struct OptimizationDifference {
  std::vector<std::string> names;
  std::vector<double> relative;
};

// The name of what --optimize does, as the cache signature records it.
inline constexpr const char* kEncoderOptimization = "freeze+optimize_for_inference";

// What the loaded module becomes before it runs: frozen (weights inlined as constants, batch
// norms folded into the convolutions before them) and optimised for inference (oneDNN weight
// prepacking on CPU), or left as loaded.
enum class Optimization {
  kNone,      // as loaded
  kRequired,  // optimised; InputError when the module cannot be frozen or oneDNN cannot run it here
};

class Encoder {
 public:
  // InputError when the file is missing or not TorchScript, or (kRequired) cannot be frozen.
  Encoder(const std::string& path, c10::Device device, Amp amp, Optimization optimization = Optimization::kNone);
  ~Encoder();
  Encoder(const Encoder&) = delete;
  Encoder& operator=(const Encoder&) = delete;

  // Runs forward on a float32 [B, C, h, w] or [B, T, C, h, w] batch (any device; it is moved). Call from the thread
  // that owns the encoder: inference mode and autocast are thread-local and entered here. Throws
  // InputError for outputs of the wrong type, rank or batch size.
  EncoderOutput forward(const at::Tensor& batch);
  // Optimised encoders only: runs `sample` through the plain and the optimised module and
  // measures their difference; the plain module is then released. Call once, before forward.
  OptimizationDifference measure_optimization(const at::Tensor& sample);
  bool optimized() const { return optimized_; }
  // Why this encoder's features vary from call to call or with the other crops of a batch, in a
  // sentence for a warning, or "": its forward runs a random operator (a module traced in training
  // mode keeps its dropout and stochastic depth, and batch norm on batch statistics) outside any
  // if or loop.
  const std::string& randomness() const { return randomness_; }
  c10::Device device() const { return device_; }
  const std::string& path() const { return path_; }

 private:
  // "" when the module was frozen and optimised, else why not, with the first line of freeze's error.
  std::string optimize_module();
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::string path_;
  c10::Device device_;
  Amp amp_;
  bool optimized_ = false;
  std::string randomness_;
};

}  // namespace embcache
