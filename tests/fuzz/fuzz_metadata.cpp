// SPDX-License-Identifier: Apache-2.0
// libFuzzer target: the bytes of _METADATA, signed into the commit marker so that the fuzzer
// gets past the checksum to the JSON parser, the record checks and the loaders.
#include "fuzz_util.hpp"

#include <cairn/checkpoint/read_ahead.hpp>  // data_files_in_head

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string dir = fuzz::scratch_dir() + "/metadata";
  static const bool ready = [&] {
    std::filesystem::copy(fuzz::template_checkpoint(), dir);
    return true;
  }();
  (void)ready;
  const std::string text(reinterpret_cast<const char*>(data), size);
  // The read-ahead's look at the head of the text, before anything validated it: whatever it
  // returns must be plain data file names (it opens them).
  for (const auto& name : cairn::detail::data_files_in_head(text))
    if (name.rfind("data-", 0) != 0 || name.find('/') != std::string::npos || name.size() < 12) __builtin_trap();
  fuzz::write_file(dir + "/_METADATA", text);
  fuzz::write_file(dir + "/_CHECKPOINT", fuzz::signed_marker(text, fuzz::read_file(dir + "/_USER_METADATA")));
  fuzz::read_everything(dir);
  return 0;
}
