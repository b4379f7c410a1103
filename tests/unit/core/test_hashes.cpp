#include "doctest_torch.hpp"

#include <fstream>

#include "embcache/core/crop_key.hpp"
#include "embcache/core/error.hpp"
#include "embcache/core/pixel_hash.hpp"
#include "embcache/core/sha256.hpp"
#include "test_support.hpp"

using namespace embcache;

TEST_SUITE_BEGIN("core");

TEST_CASE("sha256 matches the FIPS 180-2 test vectors") {
  REQUIRE(sha256_hex("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  REQUIRE(sha256_hex("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  REQUIRE(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq") ==
          "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  REQUIRE(sha256_hex(std::string(1000000, 'a')) ==
          "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST_CASE("sha256 of a file equals sha256 of its bytes; a missing file is an InputError") {
  testing::TempDir dir;
  const std::string content(3 * 1024 * 1024 + 17, 'x');
  std::ofstream(dir.file("f.bin"), std::ios::binary) << content;
  REQUIRE(sha256_file_hex(dir.file("f.bin")) == sha256_hex(content));
  REQUIRE_THROWS_AS(sha256_file_hex(dir.file("missing")), InputError);
}

TEST_CASE("pixel hash changes with any byte and with length, and is stable") {
  std::vector<unsigned char> bytes(1000);
  for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<unsigned char>(i * 7);
  const auto base = pixel_hash(bytes.data(), bytes.size());
  REQUIRE(pixel_hash(bytes.data(), bytes.size()) == base);
  for (std::size_t i : {0, 31, 32, 500, 999}) {
    auto copy = bytes;
    copy[i] ^= 1;
    REQUIRE(pixel_hash(copy.data(), copy.size()) != base);
  }
  REQUIRE(pixel_hash(bytes.data(), 999) != base);
}

TEST_CASE("crop keys: the same window name in two groups is two keys") {
  const CropKey a{"g1", "w", {0, 0, 8, 8}};
  const CropKey b{"g2", "w", {0, 0, 8, 8}};
  const CropKey c{"g1", "w", {0, 0, 8, 9}};
  REQUIRE(a.map_key() != b.map_key());
  REQUIRE(a.map_key() != c.map_key());
  REQUIRE(a.map_key() == CropKey{"g1", "w", {0, 0, 8, 8}}.map_key());
  // A separator inside a name must not make two keys collide.
  REQUIRE(CropKey{"a", "bc", {}}.map_key() != CropKey{"ab", "c", {}}.map_key());
  REQUIRE(a.describe() == "g1/w[0,0,8,8]");
}

TEST_SUITE_END();
