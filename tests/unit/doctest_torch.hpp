// Include this instead of doctest.h: Debian's LibTorch pulls in glog, whose CHECK macros would
// silently replace doctest's and abort the whole binary on the first failure.
#pragma once

#include <ATen/ATen.h>

#undef CHECK
#undef CHECK_EQ
#undef CHECK_NE
#undef CHECK_LT
#undef CHECK_LE
#undef CHECK_GT
#undef CHECK_GE
#undef CHECK_NOTNULL

#include <doctest/doctest.h>
