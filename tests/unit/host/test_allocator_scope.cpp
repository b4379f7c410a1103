#include "doctest_torch.hpp"

#include <malloc.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "embcache/host/allocator_scope.hpp"

using namespace embcache;

TEST_SUITE_BEGIN("host");

TEST_CASE("the encoder allocator scope keeps large blocks in the heap, and only while it lives") {
  // glibc reports memory in mmapped blocks (hblkhd): a 64 MiB block is mmapped by default, taken
  // from the heap inside the scope, and mmapped again once the scope has ended.
  auto mmapped_by = [](std::size_t bytes) {
    const std::size_t before = mallinfo2().hblkhd;
    void* p = std::malloc(bytes);
    REQUIRE(p != nullptr);
    static_cast<volatile char*>(p)[0] = 1;
    const std::size_t during = mallinfo2().hblkhd;
    std::free(p);
    return during - before;
  };
  const std::size_t block = std::size_t(64) << 20;
  CHECK(mmapped_by(block) >= block);
  {
    EncoderAllocatorScope outer;
    {
      EncoderAllocatorScope inner;  // nested: the settings hold until the outer one ends
    }
    CHECK(mmapped_by(block) == 0);
  }
  CHECK(mmapped_by(block) >= block);
}

namespace {

// The VmFlags line of the mapping that holds `p`, from /proc/self/smaps ("" when none does).
std::string mapping_flags(const void* p) {
  std::ifstream smaps("/proc/self/smaps");
  const auto at = reinterpret_cast<std::uintptr_t>(p);
  bool inside = false;
  for (std::string line; std::getline(smaps, line);) {
    unsigned long lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx ", &lo, &hi) == 2) inside = lo <= at && at < hi;
    if (inside && line.rfind("VmFlags:", 0) == 0) return line + " ";
  }
  return "";
}

}  // namespace

TEST_CASE("the encoder allocator scope asks for huge pages for the heap, where the kernel gives them on request") {
  std::ifstream modes_file("/sys/kernel/mm/transparent_hugepage/enabled");
  std::ifstream overcommit_file("/proc/sys/vm/overcommit_memory");
  std::string modes, overcommit;
  std::getline(modes_file, modes);
  std::getline(overcommit_file, overcommit);
  // Strict overcommit would count the reservation against the commit limit: none is made there.
  const bool asked = modes.find("[always]") != std::string::npos || modes.find("[madvise]") != std::string::npos;
  const bool on_request = asked && overcommit != "2";
  INFO("transparent_hugepage/enabled: " << modes << ", vm/overcommit_memory: " << overcommit);
  for (int scope_number = 0; scope_number < 2; ++scope_number) {  // each outermost scope asks again
    CAPTURE(scope_number);
    const EncoderAllocatorScope scope;
    void* p = std::malloc(std::size_t(64) << 20);  // an activation's worth, from the heap's top
    REQUIRE(p != nullptr);
    char* const middle = static_cast<char*>(p) + (std::size_t(32) << 20);
    *static_cast<volatile char*>(middle) = 1;
    const std::string flags = mapping_flags(middle);
    std::free(p);
    REQUIRE_FALSE(flags.empty());
    CHECK((flags.find(" hg ") != std::string::npos) == on_request);
  }
}

TEST_SUITE_END();
