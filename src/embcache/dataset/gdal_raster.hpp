// Reading rslearn's GeoTIFFs through GDAL: a raster must lie on its window's pixel grid exactly
// (embcache neither resamples nor reprojects), and nodata pixels take a fill value.
#pragma once

#include <ATen/core/Tensor.h>

#include <string>
#include <vector>

#include "embcache/dataset/rslearn_windows.hpp"

namespace embcache {

// GDAL's release as this build was compiled against ("3.6.2") and as the library loaded says.
std::string gdal_version_built();
std::string gdal_version_running();

// Registers GDAL's drivers, bounds its block cache and keeps its messages off stderr (errors
// become one-line InputErrors). Once per process; cheap after the first call.
void init_gdal();

// InputError naming `where` when GDAL does not know the CRS (EPSG:32610, WKT, ...).
void check_crs(const std::string& crs, const std::string& where);

// The tensor type the first band of `path` reads into (uint16 widened to int32, floats as
// float32); InputError naming `what` when the file cannot be opened.
at::ScalarType raster_pixel_type(const std::string& path, const std::string& what);
// Whether the first band of `path` holds floating-point values.
bool raster_is_float(const std::string& path, const std::string& what);

// Reads bands (1-based numbers) of one GeoTIFF into `out` [n, H, W] (uint8, int16, int32 or
// float32), after checking the file lies on `window`'s grid; nodata pixels become `fill`.
void read_raster_bands(const std::string& path, const RslearnWindow& window, const std::vector<int>& bands,
                       at::Tensor out, double fill);

}  // namespace embcache
