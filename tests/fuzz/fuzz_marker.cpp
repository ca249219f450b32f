// SPDX-License-Identifier: Apache-2.0
// libFuzzer target: the bytes of _CHECKPOINT, the commit marker, in front of intact metadata.
#include "fuzz_util.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string dir = fuzz::scratch_dir() + "/marker";
  static const bool ready = [&] {
    std::filesystem::copy(fuzz::template_checkpoint(), dir);
    return true;
  }();
  (void)ready;
  fuzz::write_file(dir + "/_CHECKPOINT", std::string(reinterpret_cast<const char*>(data), size));
  fuzz::read_everything(dir);
  return 0;
}
