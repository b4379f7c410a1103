#include "embcache/core/sha256.hpp"

#include <openssl/evp.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "embcache/core/error.hpp"
#include "embcache/core/files.hpp"

namespace embcache {
namespace {

void check(int ok, const char* what) {
  if (ok != 1) throw Error(ExitCode::kInternal, std::string("OpenSSL SHA-256: ") + what + " failed");
}

}  // namespace

Sha256::Sha256() : context_(EVP_MD_CTX_new()) {
  if (context_ == nullptr) throw Error(ExitCode::kInternal, "OpenSSL SHA-256: out of memory");
  if (EVP_DigestInit_ex(context_, EVP_sha256(), nullptr) != 1) {
    EVP_MD_CTX_free(context_);
    throw Error(ExitCode::kInternal, "OpenSSL SHA-256: initialisation failed");
  }
}

Sha256::~Sha256() { EVP_MD_CTX_free(context_); }

void Sha256::update(const void* data, std::size_t size) {
  if (size > 0) check(EVP_DigestUpdate(context_, data, size), "update");
}

std::string Sha256::hex_digest() {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  check(EVP_DigestFinal_ex(context_, digest, &length), "finalisation");
  static const char* hex = "0123456789abcdef";
  std::string text;
  for (unsigned int i = 0; i < length; ++i) {
    text += hex[digest[i] >> 4];
    text += hex[digest[i] & 15];
  }
  return text;
}

std::string sha256_hex(const std::string& bytes) {
  Sha256 hasher;
  hasher.update(bytes.data(), bytes.size());
  return hasher.hex_digest();
}

std::string sha256_file_hex(const std::string& path) {
  // A failing disk or a permission is an I/O error with the system's reason, not a file the user
  // should replace.
  Sha256 hasher;
  const int error = read_file_blocks(path, [&](const char* data, std::size_t size) { hasher.update(data, size); });
  if (error == ENOENT || error == ENOTDIR) throw InputError(path + ": no such file");
  if (error != 0) throw IoError(path + ": cannot read: " + std::strerror(error));
  return hasher.hex_digest();
}

}  // namespace embcache
