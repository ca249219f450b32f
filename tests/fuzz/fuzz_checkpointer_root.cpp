// SPDX-License-Identifier: Apache-2.0
// libFuzzer target: the shape of a Checkpointer root. The input is a list of entries, each a
// name and a kind (a step directory copied from a real checkpoint, an empty directory, a file,
// a staging or lock name, a set-aside .old): what a crash, a copy or a person leaves in a
// root. Opening the root, cleaning it, listing, loading the latest and saving must only ever
// throw cairn::Error, and a committed step is never lost to cleanup.
#include "fuzz_util.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string root = fuzz::scratch_dir() + "/root";
  const std::string& ckpt = fuzz::template_checkpoint();
  std::filesystem::remove_all(root);
  std::filesystem::create_directories(root);
  std::size_t committed = 0;
  std::size_t i = 0;
  while (i + 2 <= size) {
    const unsigned kind = data[i] % 6, len = data[i + 1] % 24;
    i += 2;
    std::string name;
    for (; i < size && name.size() < len; ++i) {
      const char c = static_cast<char>(data[i]);
      name += (c == '/' || c == '\0') ? '_' : c;
    }
    if (name.empty() || name == "." || name == "..") continue;
    const std::string p = root + "/" + name;
    // The path this entry creates; an entry whose path is taken is skipped.
    const std::string made = kind == 3 ? p + ".cairn-tmp-1-ab.old" : kind == 4 ? p + ".cairn-tmp-1-ab.lock" : p;
    std::error_code ec;
    if (std::filesystem::exists(std::filesystem::symlink_status(made, ec))) continue;
    switch (kind) {
      case 0: std::filesystem::copy(ckpt, made, ec); break;
      case 1: std::filesystem::create_directories(made, ec); break;
      case 2: fuzz::write_file(made, name); break;
      case 3: std::filesystem::copy(ckpt, made, ec); break;
      case 4: fuzz::write_file(made, ""); break;
      default:
        std::filesystem::copy(ckpt, made, ec);
        std::filesystem::remove(made + "/_METADATA", ec);
        break;
    }
  }
  for (const auto& e : std::filesystem::directory_iterator(root))
    committed += std::filesystem::exists(e.path() / "_CHECKPOINT") &&
                 e.path().filename().string().find(".cairn-") == std::string::npos;
  try {
    cairn::Checkpointer ck(root);
    (void)ck.steps();
    if (ck.latest()) {
      fuzz::Everything e;
      try {
        ck.load(e);
      } catch (const cairn::Error&) {
      }
    }
    ck.save(1'000'000, std::vector<float>{1}, {.force = true, .allow_older = true});
  } catch (const cairn::Error&) {
  }
  std::size_t after = 0;
  for (const auto& e : std::filesystem::directory_iterator(root))
    after += std::filesystem::exists(e.path() / "_CHECKPOINT") &&
             e.path().filename().string().find(".cairn-") == std::string::npos;
  if (after < committed) __builtin_trap();  // cleanup lost a committed checkpoint
  return 0;
}
