// SPDX-License-Identifier: Apache-2.0
// A user's program with the opt-in Orbax import: the packaging tests build it against the
// installed cairn with cairn::orbax (CMake) and cairn-orbax (pkg-config). It writes a one-array
// checkpoint in Orbax's older layout (a zarr v2 directory with a zstd chunk) and loads it.
#include <cairn/cairn.hpp>
#include <cairn/orbax.hpp>
#include <zstd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  const std::filesystem::path dir = std::filesystem::path(argc > 1 ? argv[1] : ".") / "orbax-consumer";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir / "w");
  const std::vector<float> w = {1.5f, -2.0f, 3.25f, 0.0f};
  std::string z(ZSTD_compressBound(sizeof(float) * w.size()), '\0');
  z.resize(ZSTD_compress(z.data(), z.size(), w.data(), sizeof(float) * w.size(), 1));
  std::ofstream(dir / "w" / "0", std::ios::binary) << z;
  std::ofstream(dir / "w" / ".zarray") << R"({"chunks":[4],"compressor":{"id":"zstd","level":1},"dtype":"<f4",)"
                                          R"("fill_value":null,"filters":null,"order":"C","shape":[4],"zarr_format":2})";
  std::ofstream(dir / "_METADATA") << R"J({"tree_metadata":{"('w',)":{"key_metadata":[{"key":"w","key_type":2}],)J"
                                      R"J("value_metadata":{"value_type":"np.ndarray","skip_deserialize":false}}}})J";
  const auto got = cairn::load_orbax<std::map<std::string, std::vector<float>>>(dir.string());
  const bool ok = got.size() == 1 && got.at("w") == w;
  std::printf("consumer_orbax: %s\n", ok ? "ok" : "MISMATCH");
  return ok ? 0 : 1;
}
