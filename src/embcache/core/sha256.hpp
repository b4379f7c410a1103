// SHA-256 of files and byte strings, used to sign caches with the encoder's identity.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace embcache {

class Sha256 {
 public:
  Sha256();
  void update(const void* data, std::size_t size);
  std::string hex_digest();  // finalises; call once

 private:
  void transform(const std::uint8_t* block);
  std::uint32_t state_[8];
  std::uint8_t buffer_[64];
  std::size_t buffered_ = 0;
  std::uint64_t total_bytes_ = 0;
};

std::string sha256_hex(const std::string& bytes);
// Throws InputError naming the path when the file cannot be read.
std::string sha256_file_hex(const std::string& path);

}  // namespace embcache
