# Where LibTorch comes from (docs/install.md):
#   system  find_package(Torch) on the default paths: Debian's libtorch-dev (or CMAKE_PREFIX_PATH).
#   python  the LibTorch inside the PyTorch that Python3_EXECUTABLE imports
#           (torch.utils.cmake_prefix_path): how a GPU cluster node with a PyTorch install builds.
#   auto    system when it is found, python otherwise (the default).
set(EMBCACHE_TORCH "auto" CACHE STRING "Where LibTorch comes from: auto, system or python")
set_property(CACHE EMBCACHE_TORCH PROPERTY STRINGS auto system python)
if(NOT EMBCACHE_TORCH MATCHES "^(auto|system|python)$")
  message(FATAL_ERROR "EMBCACHE_TORCH is \"${EMBCACHE_TORCH}\"; use auto, system or python")
endif()

# The CMake prefix of Python's torch, or "" with the reason in `why`.
function(embcache_python_torch_prefix prefix why)
  execute_process(
    COMMAND "${Python3_EXECUTABLE}" -c "import torch.utils; print(torch.utils.cmake_prefix_path)"
    OUTPUT_VARIABLE path ERROR_VARIABLE err RESULT_VARIABLE rc OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(NOT rc EQUAL 0)
    string(REGEX REPLACE ".*\n([^\n]+)\n?$" "\\1" err "${err}")
    set(${why} "${Python3_EXECUTABLE} cannot import torch (${err})" PARENT_SCOPE)
    set(${prefix} "" PARENT_SCOPE)
  elseif(NOT EXISTS "${path}/Torch/TorchConfig.cmake")
    set(${why} "${Python3_EXECUTABLE}'s torch has no ${path}/Torch/TorchConfig.cmake (Debian's python3-torch ships it in libtorch-dev instead)" PARENT_SCOPE)
    set(${prefix} "" PARENT_SCOPE)
  else()
    set(${prefix} "${path}" PARENT_SCOPE)
  endif()
endfunction()

if(EMBCACHE_TORCH STREQUAL "system")
  find_package(Torch REQUIRED)
elseif(EMBCACHE_TORCH STREQUAL "auto")
  find_package(Torch QUIET)
endif()
if(NOT Torch_FOUND)
  embcache_python_torch_prefix(torch_prefix torch_why)
  if(NOT torch_prefix)
    message(FATAL_ERROR "No LibTorch: EMBCACHE_TORCH=${EMBCACHE_TORCH}, no system LibTorch was found, and "
      "${torch_why}. Install libtorch-dev (scripts/setup.sh), or pass -DPython3_EXECUTABLE=<a python with torch> "
      "(docs/install.md)")
  endif()
  find_package(Torch REQUIRED PATHS "${torch_prefix}" NO_DEFAULT_PATH)
  set(EMBCACHE_TORCH_SOURCE "python (${Python3_EXECUTABLE})")
else()
  set(EMBCACHE_TORCH_SOURCE "system")
endif()
message(STATUS "embcache: LibTorch ${Torch_VERSION} from ${EMBCACHE_TORCH_SOURCE}: ${Torch_DIR}")

# The C++ standard LibTorch's config declares for code that includes its headers: 14 for Debian
# 12's 1.13, 17 for 2.6, 20 from 2.13 on (whose ATen.h stops with "#error C++20 or later").
# embcache is written in C++17 and is built as C++20 where LibTorch asks for it.
get_target_property(EMBCACHE_TORCH_CXX_STANDARD torch CXX_STANDARD)
if(EMBCACHE_TORCH_CXX_STANDARD AND EMBCACHE_TORCH_CXX_STANDARD GREATER CMAKE_CXX_STANDARD)
  set(CMAKE_CXX_STANDARD ${EMBCACHE_TORCH_CXX_STANDARD})
  message(STATUS "embcache: built as C++${CMAKE_CXX_STANDARD}, as LibTorch ${Torch_VERSION} requires")
endif()

# The OpenMP runtime a PyTorch wheel bundles next to libtorch_cpu (Debian's LibTorch uses the
# system libgomp and bundles none).
file(GLOB EMBCACHE_TORCH_OPENMP "${TORCH_INSTALL_PREFIX}/lib/libgomp*.so*")
if(EMBCACHE_TORCH_OPENMP)
  list(GET EMBCACHE_TORCH_OPENMP 0 EMBCACHE_TORCH_OPENMP)
  message(STATUS "embcache: OpenMP runtime from LibTorch: ${EMBCACHE_TORCH_OPENMP}")
endif()
