// Under AddressSanitizer, LibTorch's large CPU tensors reuse poisoned blocks instead of fresh
// mappings, so the sanitizer leg of the suite runs at a fraction of the cost (see the .cpp).
#pragma once

namespace embcache {

// In a build with AddressSanitizer, makes a pool LibTorch's CPU allocator for tensors of 128 KiB
// or more and returns true; in every other build, does nothing and returns false. Call once at
// the start of main, before the first tensor.
bool install_sanitizer_tensor_pool();

}  // namespace embcache
