// The array dataset: one HDF5 file whose rows are windows (/images, /labels, /masks, /names, ...).
#pragma once

#include <memory>
#include <string>

#include "embcache/dataset/window_source.hpp"

namespace embcache {

// Opens and validates the whole file layout up front (shapes, types, lengths, unique names), so
// that a bad dataset fails before any work starts; windows are then read in blocks of
// consecutive rows.
std::unique_ptr<WindowSource> open_array_dataset(const std::string& path);

}  // namespace embcache
