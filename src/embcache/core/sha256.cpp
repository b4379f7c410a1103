#include "embcache/core/sha256.hpp"

#include <openssl/evp.h>

#include <fstream>
#include <vector>

#include "embcache/core/error.hpp"

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
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(path + ": cannot open file for reading");
  Sha256 hasher;
  std::vector<char> buffer(1 << 20);
  while (in) {
    in.read(buffer.data(), std::streamsize(buffer.size()));
    hasher.update(buffer.data(), std::size_t(in.gcount()));
  }
  if (in.bad()) throw InputError(path + ": read error");
  return hasher.hex_digest();
}

}  // namespace embcache
