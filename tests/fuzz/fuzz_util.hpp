// SPDX-License-Identifier: Apache-2.0
// Shared by the fuzz targets: a scratch checkpoint directory per process (in /dev/shm when it
// exists, so thousands of runs a second do not touch a disk), files written into it, and the
// re-signing that lets fuzzed metadata past the commit marker's checksums.
#pragma once

#include <cairn/cairn.hpp>
#include <cairn/format/files.hpp>  // marker_json, crc32c
#include <cairn/store/posix_staging.hpp>

#include <cstdint>
#include <deque>
#include <unordered_map>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include <unistd.h>

namespace fuzz {

inline std::string scratch_dir() {
  static const std::string dir = [] {
    const std::string base = std::filesystem::is_directory("/dev/shm") ? "/dev/shm" : "/tmp";
    std::string d = base + "/cairn-fuzz-" + std::to_string(::getpid());
    std::filesystem::remove_all(d);
    std::filesystem::create_directories(d);
    return d;
  }();
  return dir;
}

inline void write_file(const std::string& path, const std::string& content) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << content;
}

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// A commit marker whose digests match the given files, as a buggy or malicious writer makes.
inline std::string signed_marker(const std::string& metadata, const std::string& user) {
  return cairn::detail::marker_json({metadata.size(), cairn::crc32c(metadata.data(), metadata.size())},
                                    {user.size(), cairn::crc32c(user.data(), user.size())})
      .dump();
}

// A checkpoint of a little of everything (plain and chunked leaves, a nested vector, a map, a
// string), whose data file the fuzzed metadata can point into.
struct Everything {
  std::vector<std::vector<float>> layers;
  std::map<std::string, std::vector<std::int32_t>> named;
  std::string note;
  cairn::ShardedArray<float> sharded;
  std::int64_t step = 0;
};
CAIRN_TREE(Everything, layers, named, note, sharded, step)

// The same keys in other types: casts, another sharding, other containers.
struct Other {
  std::deque<std::vector<std::int8_t>> layers;
  std::unordered_map<std::string, std::vector<std::int64_t>> named;
  std::vector<std::uint8_t> note;
  cairn::ShardedArray<cairn::bfloat16> sharded;
  double step = 0;
};
CAIRN_TREE(Other, layers, named, note, sharded, step)

inline Everything make_everything() {
  using namespace cairn;
  Everything e;
  e.layers = {{1, 2, 3}, {4}};
  e.named = {{"a", {1, 2}}, {"b", {}}};
  e.note = "hello";
  std::vector<float> values(24);
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i);
  e.sharded = ShardedArray<float>::from_host(values, {4, 6}, NamedSharding(Mesh::host({{"x", 2}, {"y", 2}}),
                                                                           PartitionSpec{"x", "y"}));
  e.step = 7;
  return e;
}

// A committed checkpoint to start each input from (written once per process).
inline const std::string& template_checkpoint() {
  static const std::string dir = [] {
    const std::string d = scratch_dir() + "/template";
    cairn::save(d, make_everything());
    return d;
  }();
  return dir;
}

// Everything a reader may do with a checkpoint: the metadata, a strict load into the tree it
// was written from, a partial load, a resharding load. Only cairn::Error may come out.
inline void read_everything(const std::string& dir) {
  try {
    (void)cairn::metadata(dir).summary();
  } catch (const cairn::Error&) {
  }
  try {
    Everything e;
    (void)cairn::load(dir, e, cairn::LoadOptions::partial());
  } catch (const cairn::Error&) {
  }
  try {
    cairn::LoadOptions o = cairn::LoadOptions::partial();
    o.allow_lossy_cast = {"**"};
    o.on_overflow = cairn::OnOverflow::saturate;
    Other other;
    other.sharded = cairn::ShardedArray<cairn::bfloat16>(
        cairn::NamedSharding(cairn::Mesh::host({{"z", 3}}), cairn::PartitionSpec{cairn::replicated, "z"}));
    (void)cairn::load(dir, other, o);
  } catch (const cairn::Error&) {
  }
}

}  // namespace fuzz
