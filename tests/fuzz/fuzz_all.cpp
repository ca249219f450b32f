// SPDX-License-Identifier: Apache-2.0
// Every fuzz target in one program, so that a build compiles cairn's headers once for all of
// them. Two builds of this file:
//  - ordinary (fuzz-regressions): main() replays each target's seed corpus and every input that
//    ever failed (tests/fuzz/regressions/<target>/), so every ctest run, under g++'s and clang's
//    sanitizers too, catches a regression;
//  - with CAIRN_FUZZ_LIBFUZZER and -fsanitize=fuzzer (cairn-fuzz): a libFuzzer binary fuzzing
//    the target named by the environment variable CAIRN_FUZZ_TARGET (tools/fuzz.sh).
// Each fuzz_<target>.cpp also builds alone as a libFuzzer target.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#define LLVMFuzzerTestOneInput fuzz_metadata_one
#include "fuzz_metadata.cpp"
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerTestOneInput fuzz_user_metadata_one
#include "fuzz_user_metadata.cpp"
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerTestOneInput fuzz_marker_one
#include "fuzz_marker.cpp"
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerTestOneInput fuzz_checkpointer_root_one
#include "fuzz_checkpointer_root.cpp"
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerTestOneInput fuzz_safetensors_one
#include "fuzz_safetensors.cpp"
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerTestOneInput fuzz_cli_one
#include "fuzz_cli.cpp"
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerTestOneInput fuzz_s3_response_one
#include "fuzz_s3_response.cpp"
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerTestOneInput fuzz_s3_marker_one
#include "fuzz_s3_marker.cpp"
#undef LLVMFuzzerTestOneInput
#ifdef CAIRN_FUZZ_ORBAX  // where libzstd is found (cairn::orbax)
#define LLVMFuzzerTestOneInput fuzz_orbax_one
#include "fuzz_orbax.cpp"
#undef LLVMFuzzerTestOneInput
#endif

namespace {
struct Target {
  const char* name;
  int (*run)(const std::uint8_t*, std::size_t);
};
const Target targets[] = {{"metadata", fuzz_metadata_one},
                          {"user_metadata", fuzz_user_metadata_one},
                          {"marker", fuzz_marker_one},
                          {"checkpointer_root", fuzz_checkpointer_root_one},
                          {"safetensors", fuzz_safetensors_one},
                          {"cli", fuzz_cli_one},
                          {"s3_response", fuzz_s3_response_one},
                          {"s3_marker", fuzz_s3_marker_one},
#ifdef CAIRN_FUZZ_ORBAX
                          {"orbax", fuzz_orbax_one},
#endif
};
}  // namespace

#ifdef CAIRN_FUZZ_LIBFUZZER
namespace {
const Target* chosen = nullptr;
}

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const char* name = std::getenv("CAIRN_FUZZ_TARGET");
  for (const auto& t : targets)
    if (name && std::strcmp(name, t.name) == 0) chosen = &t;
  if (!chosen) {
    std::fprintf(stderr, "cairn-fuzz: set CAIRN_FUZZ_TARGET to metadata, user_metadata, marker, checkpointer_root, safetensors, cli, s3_response, s3_marker or orbax\n");
    std::exit(2);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return chosen->run(data, size);
}
#else
int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: fuzz-regressions tests/fuzz\n");
    return 2;
  }
  const std::filesystem::path root = argv[1];
  int passed = 0;
  for (const auto& t : targets) {
    int inputs = 0;
    for (const char* kind : {"corpus", "regressions"}) {
      const auto dir = root / kind / t.name;
      if (!std::filesystem::is_directory(dir)) continue;
      for (const auto& e : std::filesystem::directory_iterator(dir)) {
        if (!e.is_regular_file() || e.path().filename() == "README.md") continue;
        std::ifstream in(e.path(), std::ios::binary);
        const std::string bytes(std::istreambuf_iterator<char>(in), {});
        t.run(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size());
        ++inputs;
      }
    }
    std::printf("fuzz target %s: %d inputs ran without a crash\n", t.name, inputs);
    passed += inputs > 0;
  }
  std::filesystem::remove_all(fuzz::scratch_dir());
  const int all = static_cast<int>(std::size(targets));
  std::printf("%d passed, %d failed\n", passed, all - passed);
  return passed == all ? 0 : 1;
}
#endif
