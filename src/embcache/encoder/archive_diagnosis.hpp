// Why a TorchScript archive did not load, said in one line a user can act on: the operator the
// LibTorch lacks, what the archive says about the torch that wrote it, and what to do.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace embcache {

// What a TorchScript archive records about its producer. TorchScript archives hold no torch
// version; they hold a file-format version, and torch >= 2.1 adds a "byteorder" record.
struct ArchiveFacts {
  std::optional<std::uint64_t> format_version;  // empty when the file is not a readable archive
  bool has_byteorder = false;
};

// Reads the facts above from the archive's zip directory; never throws.
ArchiveFacts read_archive_facts(const std::string& path);

// "aten::scaled_dot_product_attention" from LibTorch's "Unknown builtin op: aten::...", or "".
std::string missing_operator(const std::string& load_error);

// Why the file could not be read, when that is why it did not load: the errno LibTorch's archive
// reader met opening it ("... errno 5 on fopen ..."), or a read of the whole file that fails now.
// "" when the file reads (the archive itself is the problem). Never throws.
std::string read_failure(const std::string& path, const std::string& load_error);

// The InputError message for an archive that failed to load with `load_error` under LibTorch
// `libtorch_version`.
std::string describe_load_failure(const std::string& path, const std::string& load_error, const ArchiveFacts& facts,
                                  const std::string& libtorch_version);

}  // namespace embcache
