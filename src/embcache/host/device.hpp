// The compute device an option names: "auto", "cpu", "cuda" or "cuda:N", checked against this
// build and machine. Used by precompute (the encoder) and train-probe (the heads).
#pragma once

#include <c10/core/Device.h>

#include <string>

namespace embcache {

// auto = CUDA when this build and machine have it. UsageError for CUDA without CUDA, and for a
// device index past the last GPU.
c10::Device resolve_device(const std::string& text);

// CUDA devices this build and machine can use (0 without CUDA).
int cuda_device_count();

// The CUDA runtime version LibTorch was built with ("12.4"), or "" for a LibTorch without CUDA.
std::string cuda_runtime_version();

}  // namespace embcache
