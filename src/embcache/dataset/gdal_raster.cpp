#include "embcache/dataset/gdal_raster.hpp"

#include <ATen/ATen.h>
#include <cpl_conv.h>
#include <cpl_error.h>
#include <gdal.h>
#include <gdal_version.h>
#include <ogr_srs_api.h>

#include <cmath>
#include <cstdint>
#include <mutex>
#include <sstream>

#include "embcache/core/error.hpp"

namespace embcache {
namespace {

std::string gdal_message() {
  const std::string m = CPLGetLastErrorMsg();
  return m.empty() ? "GDAL could not read it" : first_line(m);
}

struct GdalDataset {
  GDALDatasetH handle = nullptr;
  explicit GdalDataset(const std::string& path) {
    CPLErrorReset();
    handle = GDALOpenEx(path.c_str(), GDAL_OF_RASTER | GDAL_OF_READONLY, nullptr, nullptr, nullptr);
  }
  ~GdalDataset() {
    if (handle) GDALClose(handle);
  }
  GdalDataset(const GdalDataset&) = delete;
  GdalDataset& operator=(const GdalDataset&) = delete;
};

struct SpatialRef {
  OGRSpatialReferenceH handle = OSRNewSpatialReference(nullptr);
  ~SpatialRef() { OSRDestroySpatialReference(handle); }
  SpatialRef() = default;
  SpatialRef(const SpatialRef&) = delete;
  SpatialRef& operator=(const SpatialRef&) = delete;
};

at::ScalarType torch_type_for(GDALDataType t) {
  switch (t) {
    case GDT_Byte: return at::kByte;
    case GDT_Int16: return at::kShort;
    case GDT_UInt16:
    case GDT_Int32: return at::kInt;  // uint16 widened to int32, as for array datasets
    default: return at::kFloat;
  }
}

GDALDataType gdal_type_for(at::ScalarType t) {
  switch (t) {
    case at::kByte: return GDT_Byte;
    case at::kShort: return GDT_Int16;
    case at::kInt: return GDT_Int32;
    default: return GDT_Float32;
  }
}

// Opens a window's GeoTIFF and checks it lies on the window's pixel grid, exactly.
void check_georeference(GDALDatasetH ds, const RslearnWindow& e, const std::string& path) {
  double gt[6];
  if (GDALGetGeoTransform(ds, gt) != CE_None) {
    throw InputError(path + ": has no georeference (corrupt, or not written by rslearn); rslearn GeoTIFFs place pixel "
                           "(x1, y1) of the window at their top-left");
  }
  const double tol = 1e-6 * std::max(std::abs(e.x_resolution), std::abs(e.y_resolution));
  if (std::abs(gt[1] - e.x_resolution) > tol || std::abs(gt[5] - e.y_resolution) > tol || gt[2] != 0 || gt[4] != 0) {
    throw InputError(path + ": pixel size (" + std::to_string(gt[1]) + ", " + std::to_string(gt[5]) +
                     ") differs from the window's resolution (" + std::to_string(e.x_resolution) + ", " +
                     std::to_string(e.y_resolution) + "); embcache does not resample");
  }
  const double x0 = gt[0] / gt[1], y0 = gt[3] / gt[5];
  const std::int64_t w = GDALGetRasterXSize(ds), h = GDALGetRasterYSize(ds);
  const Bounds have{std::llround(x0), std::llround(y0), std::llround(x0) + w, std::llround(y0) + h};
  if (std::abs(x0 - double(have.x1)) > 1e-3 || std::abs(y0 - double(have.y1)) > 1e-3 || !(have == e.info.bounds)) {
    std::ostringstream msg;
    msg << path << ": covers pixels [" << x0 << ", " << y0 << ", " << x0 + double(w) << ", " << y0 + double(h)
        << "] but the window's bounds are [" << e.info.bounds.x1 << ", " << e.info.bounds.y1 << ", " << e.info.bounds.x2
        << ", " << e.info.bounds.y2 << "]; embcache reads rasters materialised for their window";
    throw InputError(msg.str());
  }
  const char* wkt = GDALGetProjectionRef(ds);
  if (wkt && *wkt) {
    SpatialRef have_srs, want_srs;
    if (OSRImportFromWkt(have_srs.handle, const_cast<char**>(&wkt)) == OGRERR_NONE &&
        OSRSetFromUserInput(want_srs.handle, e.crs.c_str()) == OGRERR_NONE && !OSRIsSame(have_srs.handle, want_srs.handle)) {
      throw InputError(path + ": its CRS is not the window's " + e.crs + "; embcache does not reproject");
    }
  }
}

}  // namespace

void read_raster_bands(const std::string& path, const RslearnWindow& e, const std::vector<int>& bands, at::Tensor out,
                       double fill) {
  GdalDataset ds(path);
  if (!ds.handle) throw InputError(path + ": cannot open the GeoTIFF (" + gdal_message() + ")");
  check_georeference(ds.handle, e, path);
  const int count = GDALGetRasterCount(ds.handle);
  for (int b : bands) {
    if (b > count) {
      throw InputError(path + ": needs band " + std::to_string(b) + " but the GeoTIFF has " + std::to_string(count) +
                       " (the band set or the timestep count does not match the file)");
    }
  }
  const int w = int(e.info.bounds.width()), h = int(e.info.bounds.height());
  std::vector<int> band_list(bands.begin(), bands.end());
  const auto type = gdal_type_for(out.scalar_type());
  CPLErrorReset();
  if (GDALDatasetRasterIO(ds.handle, GF_Read, 0, 0, w, h, out.data_ptr(), w, h, type, int(band_list.size()),
                          band_list.data(), 0, 0, 0) != CE_None) {
    throw InputError(path + ": cannot read its pixels (" + gdal_message() + "); the file may be corrupt");
  }
  for (std::size_t i = 0; i < band_list.size(); ++i) {
    int has = 0;
    const double nodata = GDALGetRasterNoDataValue(GDALGetRasterBand(ds.handle, band_list[i]), &has);
    if (!has) continue;
    at::Tensor plane = out[std::int64_t(i)];
    if (std::isnan(nodata)) {
      plane.masked_fill_(at::isnan(plane), fill);
    } else {
      plane.masked_fill_(plane == at::scalar_tensor(nodata, plane.options()), fill);
    }
  }
}

std::string gdal_version_built() { return GDAL_RELEASE_NAME; }

std::string gdal_version_running() { return GDALVersionInfo("RELEASE_NAME"); }

void init_gdal() {
  static std::once_flag once;
  std::call_once(once, [] {
    GDALAllRegister();
    // Bound GDAL's block cache: windows are read once, so a large cache only costs memory.
    GDALSetCacheMax64(std::int64_t(256) << 20);
    CPLSetErrorHandler(CPLQuietErrorHandler);
  });
}

void check_crs(const std::string& crs, const std::string& where) {
  SpatialRef srs;
  if (OSRSetFromUserInput(srs.handle, crs.c_str()) != OGRERR_NONE) {
    throw InputError(where + ": projection.crs \"" + crs + "\" is not a CRS GDAL knows (expected e.g. EPSG:32610)");
  }
}

at::ScalarType raster_pixel_type(const std::string& path, const std::string& what) {
  GdalDataset ds(path);
  if (!ds.handle) throw InputError(path + ": cannot open the GeoTIFF of " + what + " (" + gdal_message() + ")");
  return torch_type_for(GDALGetRasterDataType(GDALGetRasterBand(ds.handle, 1)));
}

bool raster_is_float(const std::string& path, const std::string& what) {
  GdalDataset ds(path);
  if (!ds.handle) throw InputError(path + ": cannot open the " + what + " (" + gdal_message() + ")");
  const GDALDataType t = GDALGetRasterDataType(GDALGetRasterBand(ds.handle, 1));
  return t == GDT_Float32 || t == GDT_Float64;
}

}  // namespace embcache
