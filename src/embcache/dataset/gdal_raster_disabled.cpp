// gdal_raster.hpp in a build without GDAL (-DEMBCACHE_GDAL=OFF): array datasets work, and an
// rslearn dataset stops at its first raster need with one line saying how to get GDAL.
#include "embcache/dataset/gdal_raster.hpp"

#include "embcache/core/error.hpp"

namespace embcache {
namespace {

[[noreturn]] void no_gdal() {
  throw UsageError(OptionName{"dataset"},
                   "this embcache was built without GDAL (-DEMBCACHE_GDAL=OFF), so it cannot read rslearn "
                   "rasters; rebuild with GDAL (docs/install.md) or pass an HDF5 array dataset");
}

}  // namespace

std::string gdal_version_built() { return "none"; }
std::string gdal_version_running() { return "none"; }

void init_gdal() { no_gdal(); }
void check_crs(const std::string&, const std::string&) { no_gdal(); }
at::ScalarType raster_pixel_type(const std::string&, const std::string&) { no_gdal(); }
bool raster_is_float(const std::string&, const std::string&) { no_gdal(); }
void read_raster_bands(const std::string&, const RslearnWindow&, const std::vector<int>&, at::Tensor, double) {
  no_gdal();
}

}  // namespace embcache
