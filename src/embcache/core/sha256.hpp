// SHA-256 of files and byte strings, used to sign caches with the encoder's identity. Computed by
// OpenSSL's libcrypto, which uses the CPU's SHA instructions where there are any (several times
// a portable implementation's speed): a precompute hashes the whole encoder file, and real
// encoders are hundreds of MB.
#pragma once

#include <cstddef>
#include <string>

struct evp_md_ctx_st;  // OpenSSL's EVP_MD_CTX, kept out of this header

namespace embcache {

class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;
  void update(const void* data, std::size_t size);
  std::string hex_digest();  // finalises; call once

 private:
  evp_md_ctx_st* context_;
};

std::string sha256_hex(const std::string& bytes);
// Throws InputError naming the path when there is no such file, IoError with the system's
// reason when it cannot be read.
std::string sha256_file_hex(const std::string& path);

}  // namespace embcache
