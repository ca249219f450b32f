// SPDX-License-Identifier: Apache-2.0
// libFuzzer target: the bytes of _USER_METADATA, signed, read by cairn::metadata and by a
// Checkpointer that ranks steps by the metrics and times in it (best_n, every_n_seconds) and
// then saves, which runs retention over the fuzzed step.
#include "fuzz_util.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const std::string clean = [] {
    const std::string r = fuzz::scratch_dir() + "/user-clean";
    cairn::Checkpointer ck(r);
    for (std::int64_t step : {1, 2}) {
      cairn::StepSaveOptions a;
      a.metrics = cairn::Json::object({{"loss", 1.0 / static_cast<double>(step)}});
      ck.save(step, std::vector<float>{1, 2}, a);
    }
    return r;
  }();
  const std::string root = fuzz::scratch_dir() + "/user-root";
  std::filesystem::remove_all(root);
  std::filesystem::copy(clean, root, std::filesystem::copy_options::recursive);
  const std::string text(reinterpret_cast<const char*>(data), size);
  const std::string step = root + "/1";
  fuzz::write_file(step + "/_USER_METADATA", text);
  fuzz::write_file(step + "/_CHECKPOINT", fuzz::signed_marker(fuzz::read_file(step + "/_METADATA"), text));
  try {
    (void)cairn::metadata(step).user_metadata.dump();
  } catch (const cairn::Error&) {
  }
  try {
    cairn::CheckpointerOptions o;
    o.save_policy = cairn::SavePolicy::every_n_seconds(1e9);
    o.retention = cairn::RetentionPolicy::any_of(
        {cairn::RetentionPolicy::best_n(1, "loss", cairn::RetentionPolicy::Mode::min),
         cairn::RetentionPolicy::keep_every_n_seconds(1), cairn::RetentionPolicy::keep_latest(1)});
    cairn::Checkpointer ck(root, o);
    (void)ck.should_save(3);
    for (auto s : ck.steps()) {
      try {
        (void)ck.metrics(s).dump();
      } catch (const cairn::Error&) {
      }
    }
    ck.save(3, std::vector<float>{3}, {.force = true});
  } catch (const cairn::Error&) {
  }
  return 0;
}
