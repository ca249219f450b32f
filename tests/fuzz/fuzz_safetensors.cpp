// SPDX-License-Identifier: Apache-2.0
// libFuzzer target: the bytes of a .safetensors file (header length, header and buffer), read
// by safetensors_metadata (also with tied-weight aliases) and loaded whole into a flat map of float arrays (every dtype cast,
// names kept whole) from a MemoryStore.
#include "fuzz_util.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  cairn::MemoryStore store;
  store.put("m/x.safetensors", std::string(reinterpret_cast<const char*>(data), size));
  cairn::SafetensorsOptions whole;
  whole.separator = "";
  try {
    (void)cairn::safetensors_metadata({store, "m/x.safetensors"}).summary();
  } catch (const cairn::Error&) {
  }
  try {  // tied weights recorded in __metadata__, as leaves of their own
    cairn::SafetensorsOptions tied;
    tied.aliases = true;
    (void)cairn::safetensors_metadata({store, "m/x.safetensors"}, tied).summary();
  } catch (const cairn::Error&) {
  }
  try {
    std::map<std::string, cairn::Array<float>> all;
    cairn::LoadOptions o;
    o.on_overflow = cairn::OnOverflow::saturate;
    cairn::load_safetensors({store, "m/x.safetensors"}, all, o, whole);
  } catch (const cairn::Error&) {
  }
  return 0;
}
