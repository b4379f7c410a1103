#include "embcache/host/device.hpp"

#include <ATen/detail/CUDAHooksInterface.h>
#include <torch/cuda.h>

#include "embcache/core/error.hpp"

namespace embcache {

c10::Device resolve_device(const std::string& text) {
  if (text == "auto") return torch::cuda::is_available() ? c10::Device(c10::kCUDA, 0) : c10::Device(c10::kCPU);
  if (text == "cpu") return c10::Device(c10::kCPU);
  const bool indexed = text.rfind("cuda:", 0) == 0 && text.size() > 5 && text.size() <= 8 &&
                       text.find_first_not_of("0123456789", 5) == std::string::npos;
  if (text != "cuda" && !indexed) {
    throw UsageError(OptionName{"device"}, "expected auto, cpu, cuda or cuda:N, got \"" + text + "\"");
  }
  if (!torch::cuda::is_available()) {
    throw UsageError(OptionName{"device"}, text + ": CUDA is not available (this LibTorch build or machine "
                     "has no GPU); use --device cpu or auto");
  }
  const int index = indexed ? std::stoi(text.substr(5)) : 0;
  if (index >= int(torch::cuda::device_count())) {
    throw UsageError(OptionName{"device"}, text + ": there are " + std::to_string(torch::cuda::device_count()) +
                     " CUDA devices (cuda:0 to cuda:" + std::to_string(torch::cuda::device_count() - 1) + ")");
  }
  return c10::Device(c10::kCUDA, c10::DeviceIndex(index));
}

int cuda_device_count() { return torch::cuda::is_available() ? int(torch::cuda::device_count()) : 0; }

std::string cuda_runtime_version() {
  // The CUDA hooks are LibTorch's libtorch_cuda, registered when it is loaded; a CPU LibTorch (or a
  // binary whose linker dropped libtorch_cuda) has only the interface's defaults.
  const auto& hooks = at::detail::getCUDAHooks();
  if (!hooks.hasCUDART()) return "";
  const long version = hooks.versionCUDART();  // CUDART_VERSION: 12040 for 12.4
  return std::to_string(version / 1000) + "." + std::to_string(version % 1000 / 10);
}

}  // namespace embcache
