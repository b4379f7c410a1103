// Views replaced while a reader still has them open. A reader that opened CACHE.h5 when it was a
// view (an h5py user holding the file through a training run) reads rows through the parts that
// view names, and HDF5 opens each part only when it first reads from it. Removing those parts
// after an install or a compact replaced the view would turn the reader's rows into the view's
// fill values (NaN features, empty keys) without an error. HDF5 holds a shared flock(2) on every
// file it has open, so a replaced view is kept as a hard link in CACHE.h5.parts/retired/ and a
// part file goes only once no retired view that names it is held open. docs/cache-format.md,
// "Readers of a view that is replaced", is its human form.
#pragma once

#include <cstdint>
#include <string>

namespace embcache {

// Before a new view is renamed over CACHE.h5, and only when CACHE.h5 is a view: keeps it as a
// hard link CACHE.h5.parts/retired/<n>.h5. Under the install lock. A file system without hard
// links gets no retired view (its readers are not protected). IoError naming the folder when it
// cannot be made.
void retire_view(const std::string& cache_path);

// After CACHE.h5 was replaced, with every handle this process had on the old view closed, under
// the install lock: removes each retired view no process holds open, then each part file that
// neither CACHE.h5 (when a view) nor a retired view still held names, and the folders left
// empty. Returns the retired views kept because a reader holds them.
std::int64_t sweep_parts(const std::string& cache_path);

}  // namespace embcache
