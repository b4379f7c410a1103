#include "embcache/encoder/encoder.hpp"

#include <ATen/Version.h>
#include <ATen/autocast_mode.h>
#include <torch/cuda.h>
#include <torch/script.h>
#include <torch/version.h>
#include <torch/csrc/jit/api/function_impl.h>
#include <torch/csrc/jit/ir/constants.h>
#include <torch/csrc/jit/runtime/graph_executor.h>
#if __has_include(<torch/csrc/jit/codegen/fuser/interface.h>)
#include <torch/csrc/jit/codegen/fuser/interface.h>
#else
// Debian's libtorch-dev leaves this header out; the function is exported by libtorch_cpu
// (1.13 and 2.x) and is what Python's torch._C._jit_override_can_fuse_on_cpu calls.
namespace torch::jit {
TORCH_API void overrideCanFuseOnCPU(bool value);
}  // namespace torch::jit
#endif

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <set>
#include <stdexcept>
#include <unordered_set>

#include "embcache/core/error.hpp"
#include "embcache/encoder/archive_diagnosis.hpp"
#include "embcache/encoder/onednn_cache_view.hpp"

namespace embcache {
namespace {

// The cause of a failed forward, in one line. The TorchScript interpreter's errors open with
// "The following operation failed..." and two tracebacks; the cause is the last unindented line
// naming an error ("RuntimeError: Given groups=1, weight of size ...").
std::string forward_error_cause(const std::string& text) {
  std::string cause;
  std::size_t start = 0;
  while (start < text.size()) {
    const std::size_t end = std::min(text.find('\n', start), text.size());
    const std::string line = text.substr(start, end - start);
    const std::size_t colon = line.find(": ");
    const std::string name = line.substr(0, colon);
    const bool names_error = colon != std::string::npos && !name.empty() && name.find(' ') == std::string::npos &&
                             (name.find("Error") != std::string::npos || name.find("Exception") != std::string::npos);
    if (names_error) cause = line;
    start = end + 1;
  }
  return cause.empty() ? first_line(text) : cause;
}

// The graph a call node runs: a method of a class (not of an interface) or a function constant.
// Null for a call that is resolved only when it runs, which torch::jit::Inline leaves too.
const torch::jit::Graph* called_graph(const torch::jit::Node* node) {
  torch::jit::Function* function = nullptr;
  if (node->kind() == c10::prim::CallMethod) {
    if (const auto type = node->input(0)->type()->cast<c10::ClassType>()) function = type->findMethod(node->s(c10::attr::name));
  } else if (node->kind() == c10::prim::CallFunction) {
    if (const auto type = node->input(0)->type()->cast<c10::FunctionType>()) function = type->function();
  }
  if (!function || !function->isGraphFunction()) return nullptr;
  return torch::jit::toGraphFunction(*function).graph().get();
}

// Whether `block`, or a method or function it calls, has a node of `kind`: the calls are
// followed where they are, each graph once, which costs far less than inlining a copy of the
// whole graph to search it.
bool runs_node(const torch::jit::Block* block, c10::Symbol kind, std::unordered_set<const torch::jit::Graph*>& seen) {
  for (const torch::jit::Node* node : block->nodes()) {
    if (node->kind() == kind) return true;
    for (const torch::jit::Block* inner : node->blocks()) {
      if (runs_node(inner, kind, seen)) return true;
    }
    const torch::jit::Graph* callee = called_graph(node);
    if (callee && seen.insert(callee).second && runs_node(callee->block(), kind, seen)) return true;
  }
  return false;
}

// `walk(block, seen)` over forward's graph, with no graph seen yet; `unreadable` for a module
// without forward or whose graph cannot be read.
template <typename Result, typename Walk>
Result walk_forward(const torch::jit::script::Module& module, Result unreadable, Walk walk) {
  try {
    const auto method = module.find_method("forward");
    if (!method) return unreadable;
    std::unordered_set<const torch::jit::Graph*> seen;
    return walk(method->graph()->block(), seen);
  } catch (const std::exception&) {
    return unreadable;
  }
}

// Whether forward, or a method or function it calls, has a node of `kind` (a qualified name). A
// graph that cannot be read counts as none.
bool forward_runs(const torch::jit::script::Module& module, const char* kind) {
  const c10::Symbol symbol = c10::Symbol::fromQualString(kind);
  return walk_forward(module, false, [&](const torch::jit::Block* block, auto& seen) {
    return runs_node(block, symbol, seen);
  });
}

bool is_constant_true(const torch::jit::Value* value) {
  const auto constant = torch::jit::toIValue(value);
  return constant && constant->isBool() && constant->toBool();
}

bool is_zero(const torch::jit::Value* value) {
  const auto constant = torch::jit::toIValue(value);
  return constant && constant->isDouble() && constant->toDouble() == 0.0;
}

// What makes a node's result differ from call to call, or with the other crops of its batch, or ""
// when nothing does. Tracing records dropout and batch norm with the training flag they ran with
// as a constant, which eval() cannot change afterwards.
std::string node_randomness(const torch::jit::Node* node) {
  static const std::set<std::string> random = {
      "aten::bernoulli", "aten::bernoulli_", "aten::rand",     "aten::rand_like", "aten::randn",  "aten::randn_like",
      "aten::randint",   "aten::randint_like", "aten::randperm", "aten::normal",    "aten::normal_", "aten::uniform_",
      "aten::exponential_", "aten::multinomial"};
  static const std::set<std::string> dropouts = {
      "aten::dropout",       "aten::dropout_",         "aten::feature_dropout",       "aten::feature_dropout_",
      "aten::alpha_dropout", "aten::alpha_dropout_",   "aten::feature_alpha_dropout", "aten::feature_alpha_dropout_",
      "aten::native_dropout"};
  const std::string kind = node->kind().toQualString();
  if (random.count(kind)) return kind;
  const auto& in = node->inputs();
  if (dropouts.count(kind) && in.size() >= 3 && is_constant_true(in[2]) && !is_zero(in[1])) {
    return kind + " in training mode";
  }
  if ((kind == "aten::batch_norm" || kind == "aten::_batch_norm_impl_index") && in.size() >= 6 &&
      is_constant_true(in[5])) {
    return kind + " on batch statistics";
  }
  return "";
}

// The random operators that `block`, or a method or function it calls, runs on every call: those
// outside any if or loop. A scripted module's dropout sits behind `self.training`, which eval() has
// set; a traced one's is unconditional.
void collect_randomness(const torch::jit::Block* block, std::set<std::string>& found,
                        std::unordered_set<const torch::jit::Graph*>& seen) {
  for (const torch::jit::Node* node : block->nodes()) {
    std::string what = node_randomness(node);
    if (!what.empty()) found.insert(std::move(what));
    const torch::jit::Graph* callee = called_graph(node);
    if (callee && seen.insert(callee).second) collect_randomness(callee->block(), found, seen);
  }
}

// Why the module's features vary from call to call or with the batch, or "" (a graph that cannot
// be read counts as none). Call after eval().
std::string forward_randomness(const torch::jit::script::Module& module, bool saved_training) {
  const std::set<std::string> found =
      walk_forward(module, std::set<std::string>{}, [](const torch::jit::Block* block, auto& seen) {
        std::set<std::string> ops;
        collect_randomness(block, ops, seen);
        return ops;
      });
  if (found.empty()) return "";
  std::string ops;
  for (const auto& what : found) ops += (ops.empty() ? "" : ", ") + what;
  return "its features will differ from call to call or with the rest of the batch: forward runs " + ops +
         (saved_training ? " (the file was saved in training mode, and a traced module keeps what it was traced "
                           "with); trace and save it after model.eval()"
                         : " on every call; make the encoder deterministic for a cache whose rows must not depend "
                           "on when or with what they were computed");
}

// Whether an optimised module runs oneDNN's binary kernel: optimize_for_inference puts a
// BroadcastMKLDNNTensors before each add or multiply of two tensors it keeps in oneDNN's layout
// (the residual adds of MobileNetV2 and ResNet-50).
bool runs_onednn_binary_kernel(const torch::jit::script::Module& module) {
  return forward_runs(module, "prim::BroadcastMKLDNNTensors");
}

// Why the optimised module cannot run on this CPU, or "": oneDNN's binary kernel divides by the
// cache sizes it computed, which some VMs leave at 1 byte (onednn_cache_view.hpp).
std::string cpu_kernel_hazard(const torch::jit::script::Module& optimized) {
  const std::optional<OneDnnCaches> view = onednn_cache_view();
  if (!view || !runs_onednn_binary_kernel(optimized)) return "";
  return onednn_kernel_hazard(*view);
}

}  // namespace

const EnumTable<Amp>& amp_modes() {
  static const EnumTable<Amp> table{{Amp::kNone, "none"}, {Amp::kFp16, "fp16"}, {Amp::kBf16, "bf16"}};
  return table;
}

std::string torch_version_built() { return TORCH_VERSION; }

std::string torch_version_running() {
  const std::string config = at::show_config();
  const std::string key = "TORCH_VERSION=";
  const auto at = config.find(key);
  if (at == std::string::npos) return "unknown";
  const auto end = config.find_first_of(", \n", at + key.size());
  return config.substr(at + key.size(), end == std::string::npos ? std::string::npos : end - at - key.size());
}

struct Encoder::Impl {
  torch::jit::script::Module module;
  std::optional<torch::jit::script::Module> plain;  // once optimised, until the difference is measured
};

Encoder::Encoder(const std::string& path, c10::Device device, Amp amp, Optimization optimization)
    : impl_(std::make_unique<Impl>()), path_(path), device_(device), amp_(amp) {
  if (!std::filesystem::is_regular_file(path)) {
    throw InputError(path + (std::filesystem::is_directory(path) ? ": is a directory" : ": encoder file not found") +
                     "; pass a TorchScript file saved with torch.jit.save");
  }
  if (amp_ != Amp::kNone && !device_.is_cuda()) {
    throw UsageError(OptionName{"amp"}, "needs a CUDA device; on CPU use --amp none");
  }
  // No TorchScript fusion on CPU, as in upstream PyTorch. Debian 13's torch 2.6 turns the
  // TensorExpr fuser (LLVM code generation) on for CPU, and there the second forward of a small
  // ViT (LayerNorm, GELU, attention) never returned: compiling the fused kernel did not finish.
  torch::jit::overrideCanFuseOnCPU(false);
  // The TorchScript compiler throws torch::jit::ErrorReport (a std::exception) for code it cannot
  // compile, such as an operator this LibTorch lacks; the archive reader throws c10::Error.
  std::string failure;
  try {
    impl_->module = torch::jit::load(path, device_);
  } catch (const c10::Error& e) {
    failure = e.what_without_backtrace();
  } catch (const std::exception& e) {
    failure = e.what();
  }
  if (!failure.empty()) {
    // A disk that fails is not a file to save again: an I/O error (exit 4), with the system's reason.
    if (const std::string reason = read_failure(path, failure); !reason.empty()) {
      throw IoError(path + ": cannot read the encoder file: " + reason);
    }
    throw InputError(describe_load_failure(path, failure, read_archive_facts(path), torch_version_running()));
  }
  const bool saved_training = impl_->module.is_training();
  impl_->module.eval();
  randomness_ = forward_randomness(impl_->module, saved_training);
  if (optimization == Optimization::kNone) return;
  std::string failure_to_optimize = optimize_module();
  // Whether the file can be frozen is said first: the user can change that, not the machine.
  if (failure_to_optimize.empty() && device_.is_cpu()) failure_to_optimize = cpu_kernel_hazard(impl_->module);
  if (!failure_to_optimize.empty()) {
    throw InputError(path_ + ": cannot be optimised: " + failure_to_optimize +
                     "; run with --no-optimize (a cache made with an optimised encoder then needs another --out, "
                     "or --overwrite)");
  }
  optimized_ = true;
}

std::string Encoder::optimize_module() {
  // freeze inlines the weights as constants and folds batch norms into the convolutions;
  // optimize_for_inference adds the backend's rewrites (oneDNN weight prepacking on CPU). Both
  // return new modules; the plain one is kept to measure the difference. On failure the module
  // stays as loaded.
  std::string failure;
  try {
    torch::jit::script::Module frozen = torch::jit::freeze(impl_->module);
    torch::jit::script::Module optimized = torch::jit::optimize_for_inference(frozen);
    impl_->plain = impl_->module;
    impl_->module = optimized;
  } catch (const c10::Error& e) {
    failure = first_line(e.what_without_backtrace());
  } catch (const std::exception& e) {
    failure = first_line(e.what());
  }
  return failure.empty() ? failure : "it cannot be frozen (" + failure + ")";
}

OptimizationDifference Encoder::measure_optimization(const at::Tensor& sample) {
  if (!impl_->plain) throw std::logic_error("measure_optimization: the encoder is not optimised, or was measured");
  torch::jit::script::Module plain = *impl_->plain;
  impl_->plain.reset();
  const EncoderOutput fast = forward(sample);
  std::swap(impl_->module, plain);
  EncoderOutput reference;
  try {
    // The plain module runs this once. Without the executor's optimisation (a thread-local
    // switch) its first call skips the profiling run and the passes that would serve later calls,
    // which shortens the wait for a run's first batch and gives the same output bits as the
    // optimised executor's later calls.
    const torch::jit::GraphOptimizerEnabledGuard run_as_loaded(false);
    reference = forward(sample);
  } catch (...) {
    std::swap(impl_->module, plain);
    throw;
  }
  std::swap(impl_->module, plain);
  OptimizationDifference difference;
  for (std::size_t i = 0; i < reference.levels.size() && i < fast.levels.size(); ++i) {
    const at::Tensor b = reference.levels[i].to(at::kDouble);
    const at::Tensor a = fast.levels[i].to(at::kDouble);
    const double scale = b.abs().max().item<double>();
    const double diff = a.sizes() == b.sizes() ? (a - b).abs().max().item<double>() : INFINITY;
    difference.names.push_back(reference.names[i]);
    difference.relative.push_back(scale > 0 ? diff / scale : diff);
  }
  return difference;
}

Encoder::~Encoder() = default;

namespace {

at::Tensor as_level(const c10::IValue& value, const std::string& name, std::int64_t batch) {
  if (!value.isTensor()) {
    throw InputError("encoder output " + name + " is a " + value.tagKind() +
                     ", not a Tensor; return a Tensor, a list/tuple of Tensors or Dict[str, Tensor]");
  }
  at::Tensor t = value.toTensor();
  if (t.dim() < 2 || t.dim() > 5) {
    throw InputError("encoder output " + name + " has " + std::to_string(t.dim()) +
                     " dimensions; a level is [B, C], tokens [B, N, D], a map [B, C, H, W] or a temporal map "
                     "[B, T, C, H, W] (docs/encoders.md)");
  }
  if (t.size(0) != batch) {
    throw InputError("encoder output " + name + " has batch dimension " + std::to_string(t.size(0)) +
                     " for an input batch of " + std::to_string(batch) +
                     "; the first dimension must be the batch");
  }
  if (!at::isFloatingType(t.scalar_type())) {
    throw InputError("encoder output " + name + " has non-float dtype " +
                     std::string(c10::toString(t.scalar_type())));
  }
  // An output with no channel, token or position holds no feature, and every output is cut into
  // levels (selected or not): refused here, in one line, rather than by what it breaks later.
  for (std::int64_t d = 1; d < t.dim(); ++d) {
    if (t.size(d) > 0) continue;
    std::string shape;
    for (std::int64_t k = 0; k < t.dim(); ++k) shape += (k ? ", " : "") + std::to_string(t.size(k));
    throw InputError("encoder output " + name + " has shape [" + shape + "], with an empty axis; every "
                     "output needs at least one channel, token and position: fix the encoder's forward");
  }
  return t;
}

}  // namespace

EncoderOutput Encoder::forward(const at::Tensor& batch) {
  c10::InferenceMode inference;
  if (amp_ != Amp::kNone) {
    const auto dtype = amp_ == Amp::kFp16 ? at::kHalf : at::kBFloat16;
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
    at::autocast::set_autocast_enabled(at::kCUDA, true);
    at::autocast::set_autocast_dtype(at::kCUDA, dtype);
#else
    at::autocast::set_enabled(true);
    at::autocast::set_autocast_gpu_dtype(dtype);
#endif
  }
  const std::int64_t b = batch.size(0);
  c10::IValue out;
  try {
    out = impl_->module.forward({batch.to(device_, /*non_blocking=*/true)});
  } catch (const c10::Error& e) {
    throw InputError(path_ + ": forward failed on a batch of shape " + std::string(c10::str(batch.sizes())) +
                     ": " + forward_error_cause(e.what_without_backtrace()));
  } catch (const std::exception& e) {
    throw InputError(path_ + ": forward failed on a batch of shape " + std::string(c10::str(batch.sizes())) +
                     ": " + forward_error_cause(e.what()));
  }
  EncoderOutput result;
  if (out.isTensor()) {
    result.names.push_back("0");
    result.levels.push_back(as_level(out, "0", b));
  } else if (out.isTuple() || out.isList()) {
    const auto elements = out.isTuple() ? out.toTupleRef().elements().vec() : out.toListRef().vec();
    for (std::size_t i = 0; i < elements.size(); ++i) {
      result.names.push_back(std::to_string(i));
      result.levels.push_back(as_level(elements[i], "[" + std::to_string(i) + "]", b));
    }
  } else if (out.isGenericDict()) {
    for (const auto& entry : out.toGenericDict()) {
      if (!entry.key().isString()) {
        throw InputError("encoder returned a dict with non-string keys; use Dict[str, Tensor]");
      }
      const std::string name = entry.key().toStringRef();
      // Level names become HDF5 dataset names, /levels/NAME.
      if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos) {
        throw InputError(path_ + ": the encoder's Dict output has the key \"" + name + "\", which cannot name a "
                         "level (it becomes the HDF5 dataset /levels/NAME: non-empty, not . or .., no '/'); "
                         "rename the key in the encoder's forward");
      }
      result.names.push_back(name);
      result.levels.push_back(as_level(entry.value(), "\"" + name + "\"", b));
    }
  } else {
    throw InputError("encoder returned a " + out.tagKind() +
                     "; return a Tensor, a list/tuple of Tensors or Dict[str, Tensor]");
  }
  if (result.levels.empty()) throw InputError("encoder returned no outputs");
  return result;
}

}  // namespace embcache
