// The one-line explanation of an encoder archive this LibTorch cannot load, and the producer facts
// read from the archive's zip directory.
#include "doctest_torch.hpp"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "embcache/encoder/archive_diagnosis.hpp"
#include "test_support.hpp"

using namespace embcache;
using embcache::testing::fixture;

namespace {

// LibTorch 1.13's error for tests/data/vit_sdpa_torch2.6.pt, as torch::jit::load throws it.
const char* kUnknownOp =
    "\nUnknown builtin op: aten::scaled_dot_product_attention.\nHere are some suggestions: \n"
    "\taten::_scaled_dot_product_attention\n\nThe original call is:\n  File \"code/__torch__.py\", line 12\n";

std::string committed_archive() {
  const char* dir = std::getenv("TEST_DATA");
  REQUIRE_MESSAGE(dir != nullptr, "TEST_DATA is set by ctest");
  return std::string(dir) + "/vit_sdpa_torch2.6.pt";
}

}  // namespace

TEST_SUITE("encoder") {

TEST_CASE("the missing operator is read from LibTorch's compile error") {
  REQUIRE(missing_operator(kUnknownOp) == "aten::scaled_dot_product_attention");
  REQUIRE(missing_operator("Unknown builtin op: aten::foo") == "aten::foo");
  REQUIRE(missing_operator("PytorchStreamReader failed reading zip archive").empty());
}

TEST_CASE("an archive that could not be read is told from one that is not TorchScript") {
  // LibTorch's words when fopen fails (here with EIO, as a failing disk gives).
  const std::string eio = "open file failed because of errno 5 on fopen: , file path: enc.pt";
  CHECK(read_failure(committed_archive(), eio) == std::strerror(EIO));
  // A file that reads whole: the archive itself is the problem.
  CHECK(read_failure(committed_archive(), "PytorchStreamReader failed reading zip archive").empty());
  // A directory opens but cannot be read.
  CHECK(read_failure(std::getenv("TEST_DATA"), "PytorchStreamReader failed reading zip archive") == std::strerror(EISDIR));
}

TEST_CASE("a missing operator: one line naming it, the producer, the LibTorch, and what to do") {
  ArchiveFacts facts;
  facts.format_version = 10;
  facts.has_byteorder = true;
  const std::string m = describe_load_failure("enc.pt", kUnknownOp, facts, "1.13.1");
  INFO(m);
  REQUIRE(m.find('\n') == std::string::npos);
  for (const char* part : {"enc.pt: the encoder calls aten::scaled_dot_product_attention, which this build's "
                           "LibTorch 1.13.1 does not have (torch has it since 2.0)",
                           "TorchScript file format 10, written by torch 2.1 or later",
                           "does not record the exact torch version", "Build embcache against a LibTorch",
                           "-DEMBCACHE_TORCH=python", "fused_attn=False", "attn_implementation=\"eager\""}) {
    REQUIRE(m.find(part) != std::string::npos);
  }
  // An operator outside the table still gets the producer facts and the general advice.
  facts.has_byteorder = false;
  const std::string other = describe_load_failure("enc.pt", "\nUnknown builtin op: aten::new_op.\n", facts, "2.6.0");
  INFO(other);
  REQUIRE(other.find("calls aten::new_op, which this build's LibTorch 2.6.0 does not have;") != std::string::npos);
  REQUIRE(other.find("older than 2.1 (it has no byteorder record)") != std::string::npos);
  REQUIRE(other.find("or export the encoder without that operator") != std::string::npos);
}

TEST_CASE("a file that is not an archive says so, without producer facts") {
  const std::string m = describe_load_failure("x.pt", "PytorchStreamReader failed reading zip archive: failed finding "
                                              "central directory\nException raised from ...", ArchiveFacts{}, "2.6.0");
  REQUIRE(m == "x.pt: not a loadable TorchScript file (PytorchStreamReader failed reading zip archive: failed "
               "finding central directory); save the encoder with torch.jit.script/trace + torch.jit.save");
}

TEST_CASE("archive facts come from the zip directory, and a non-archive has none") {
  const ArchiveFacts committed = read_archive_facts(committed_archive());
  REQUIRE(committed.format_version.has_value());
  REQUIRE(*committed.format_version == 10);
  REQUIRE(committed.has_byteorder);
  const ArchiveFacts fixture_facts = read_archive_facts(fixture("multi_scripted.pt"));
  REQUIRE(fixture_facts.format_version.has_value());
  const ArchiveFacts none = read_archive_facts(fixture("not_torchscript.pt"));
  REQUIRE_FALSE(none.format_version.has_value());
  REQUIRE_FALSE(read_archive_facts("/nonexistent/enc.pt").format_version.has_value());
}

}  // TEST_SUITE
