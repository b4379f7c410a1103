#include "embcache/encoder/archive_diagnosis.hpp"

#include <caffe2/serialize/inline_container.h>
#include <c10/util/Exception.h>

#include <cstdlib>
#include <cstring>
#include <map>

#include "embcache/core/error.hpp"
#include "embcache/core/files.hpp"

namespace embcache {
namespace {

// Operators that encoders saved by current torch call and older LibTorch releases lack, with the
// torch release that brought them and the export settings that avoid them.
struct NewOperator {
  const char* since;
  const char* avoid;
};

const std::map<std::string, NewOperator>& known_new_operators() {
  static const std::map<std::string, NewOperator> table = {
      {"aten::scaled_dot_product_attention",
       {"2.0",
        "export the attention without it (timm: fused_attn=False or TIMM_FUSED_ATTN=0; Hugging Face: "
        "attn_implementation=\"eager\"; by hand: softmax(q @ k.transpose(-2, -1) * scale) @ v)"}},
  };
  return table;
}

std::string producer_text(const ArchiveFacts& facts) {
  if (!facts.format_version) return "the file is not a readable TorchScript archive";
  std::string text = "the archive is TorchScript file format " + std::to_string(*facts.format_version);
  text += facts.has_byteorder ? ", written by torch 2.1 or later (it has a byteorder record)"
                              : ", written by a torch older than 2.1 (it has no byteorder record)";
  return text + "; it does not record the exact torch version";
}

}  // namespace

ArchiveFacts read_archive_facts(const std::string& path) {
  ArchiveFacts facts;
  try {
    caffe2::serialize::PyTorchStreamReader reader(path);
    facts.format_version = reader.version();
    facts.has_byteorder = reader.hasRecord("byteorder");
  } catch (const std::exception&) {
    // Not a zip archive, or no version record: the facts stay empty.
  }
  return facts;
}

std::string missing_operator(const std::string& load_error) {
  const std::string key = "Unknown builtin op: ";
  const auto at = load_error.find(key);
  if (at == std::string::npos) return "";
  const auto begin = at + key.size();
  const auto end = load_error.find_first_of(". \n", begin);
  return load_error.substr(begin, end == std::string::npos ? std::string::npos : end - begin);
}

std::string read_failure(const std::string& path, const std::string& load_error) {
  const std::string key = "errno ";
  const auto at = load_error.find(key);
  if (at != std::string::npos && load_error.find(" on fopen", at) != std::string::npos) {
    const int error = std::atoi(load_error.c_str() + at + key.size());
    if (error > 0) return std::strerror(error);
  }
  const int error = read_file_blocks(path, [](const char*, std::size_t) {});
  return error != 0 ? std::strerror(error) : "";
}

std::string describe_load_failure(const std::string& path, const std::string& load_error, const ArchiveFacts& facts,
                                  const std::string& libtorch_version) {
  const std::string op = missing_operator(load_error);
  if (op.empty()) {
    const std::string producer = facts.format_version ? "; " + producer_text(facts) : "";
    return path + ": not a loadable TorchScript file (" + first_line(load_error) + producer +
           "); save the encoder with torch.jit.script/trace + torch.jit.save";
  }
  std::string message = path + ": the encoder calls " + op + ", which this build's LibTorch " + libtorch_version +
                        " does not have";
  const auto known = known_new_operators().find(op);
  if (known != known_new_operators().end()) message += std::string(" (torch has it since ") + known->second.since + ")";
  message += "; " + producer_text(facts) + ". Build embcache against a LibTorch at least as new as the torch that " +
             "saved the encoder (docs/install.md: -DEMBCACHE_TORCH=python uses an installed PyTorch's)";
  message += known != known_new_operators().end() ? std::string(", or ") + known->second.avoid
                                                  : ", or export the encoder without that operator";
  return message;
}

}  // namespace embcache
