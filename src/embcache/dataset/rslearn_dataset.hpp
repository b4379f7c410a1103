// The rslearn dataset reader: windows listed from the dataset's JSON (rslearn_windows), their
// GeoTIFFs read through GDAL (gdal_raster), read ahead in parallel (read_ahead).
// docs/dataset-formats.md describes what is read and how.
#pragma once

#include <memory>

#include "embcache/dataset/rslearn_windows.hpp"
#include "embcache/dataset/window_shard.hpp"
#include "embcache/dataset/window_source.hpp"

namespace embcache {

// Lists and validates the windows (InputError naming the file and field), resolves the band
// sets, and skips windows whose layers are not completed (see WindowSource::skipped). With
// options.reader_threads > 0 the windows are read ahead on that many threads. Only the windows
// `filter` accepts are listed (and read ahead).
std::unique_ptr<WindowSource> open_rslearn_dataset(const RslearnOptions& options, const WindowFilter& filter = {});

}  // namespace embcache
