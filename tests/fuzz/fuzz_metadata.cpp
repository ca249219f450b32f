// libFuzzer target: the bytes of _METADATA, signed into the commit marker so that the fuzzer
// gets past the checksum to the JSON parser, the record checks and the loaders; and reads the
// text by one thread and by two, which must agree.
#include "fuzz_util.hpp"

#include <cstdlib>

namespace fuzz_metadata {
// What reading the text gives, by one thread or (`parallel_from` 1) with every item's leaves
// split between two: the records written again with the printed keys, or the error.
inline std::string outcome(const std::string& text, std::uint64_t parallel_from) {
  try {
    cairn::detail::PrintedKeys printed;
    std::string s = cairn::detail::metadata_to_json(cairn::detail::metadata_from_json(text, "_METADATA", &printed, parallel_from));
    for (const auto& item : printed)
      for (const auto& key : item) s += "\n" + key;
    return s;
  } catch (const cairn::Error& e) {
    return std::string("error: ") + e.what() + " at key " + e.key_path();
  }
}
}  // namespace fuzz_metadata

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string dir = fuzz::scratch_dir() + "/metadata";
  static const bool ready = [&] {
    std::filesystem::copy(fuzz::template_checkpoint(), dir);
    return true;
  }();
  (void)ready;
  const std::string text(reinterpret_cast<const char*>(data), size);
  fuzz::write_file(dir + "/_METADATA", text);
  fuzz::write_file(dir + "/_CHECKPOINT", fuzz::signed_marker(text, fuzz::read_file(dir + "/_USER_METADATA")));
  fuzz::read_everything(dir);
  // A read on two threads gives exactly what a read on one gives, whatever the text.
  if (fuzz_metadata::outcome(text, 1) != fuzz_metadata::outcome(text, cairn::detail::never_parallel)) std::abort();
  return 0;
}
