// Process settings every embcache command wants before its first HDF5 call.
#pragma once

namespace embcache {

// HDF5 does not close files at exit (see the definition), and writes past a file-size limit fail
// with EFBIG instead of killing the process; under AddressSanitizer, large tensors come from a
// pool (host/sanitizer_tensor_pool.hpp). Call before any HDF5 or tensor use. (The allocator
// settings for encoders are scoped to the encoder's run: host/allocator_scope.hpp.)
void tune_process();

}  // namespace embcache
