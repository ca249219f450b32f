// SPDX-License-Identifier: Apache-2.0
// Import of Orbax-layout checkpoints (cairn/orbax.hpp) beside the limit measured in the same
// run: a plain read of the same chunk bytes into new buffers, plus, for zstd, ZSTD_decompress of
// the same frames on the same one thread the load decodes on. The checkpoints are written here
// as Orbax v1 writes a pytree on one device (zarr v3, one sharding_indexed shard per array
// holding one inner chunk, its index CRC32C-checked), in per-parameter directories: cairn has
// no OCDBT writer yet, and OCDBT only adds the B+tree lookups that the metadata read measures.
//   cairn-bench-orbax [--dir DIR] [--bytes 1G] [--leaves 64] [--small 10000] [--repeat 3] [--warm] [--keep]
#include <cairn/orbax.hpp>
#include <zstd.h>

#include "bench_util.hpp"

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

namespace fs = std::filesystem;

namespace {

struct Args {
  std::string dir = "/tmp/cairn-bench-orbax";
  std::uint64_t bytes = 1ull << 30;
  int leaves = 64;
  int small = 10000;
  int repeat = 3;
  bool warm = false;
  bool keep = false;  // leave the checkpoints in --dir (for a profiler)
};

void put_le(std::string& s, std::uint64_t v, int n) {
  for (int i = 0; i < n; ++i) s += static_cast<char>((v >> (8 * i)) & 0xff);
}

// One float32 array of n elements as Orbax v1 writes it on one device; returns the stored
// chunk's byte range in its shard file.
void write_array(const std::string& dir, const std::string& name, const std::vector<float>& v, bool zstd) {
  const std::string p = dir + "/" + name;
  fs::create_directories(p + "/c");
  const std::string n = std::to_string(v.size());
  std::ofstream(p + "/zarr.json") << R"({"zarr_format":3,"node_type":"array","shape":[)" << n
      << R"(],"data_type":"float32","chunk_grid":{"name":"regular","configuration":{"chunk_shape":[)" << n
      << R"(]}},"chunk_key_encoding":{"name":"default"},"fill_value":0,"codecs":[{"name":"sharding_indexed",)"
      << R"("configuration":{"chunk_shape":[)" << n << R"(],"codecs":[{"name":"bytes","configuration":{"endian":"little"}})"
      << (zstd ? R"(,{"name":"zstd","configuration":{"level":3}})" : "")
      << R"(],"index_codecs":[{"name":"bytes","configuration":{"endian":"little"}},{"name":"crc32c"}]}}]})";
  std::string data;
  const std::size_t raw = v.size() * sizeof(float);
  if (zstd) {
    data.resize(ZSTD_compressBound(raw));
    data.resize(ZSTD_compress(data.data(), data.size(), v.data(), raw, 3));
  } else {
    data.assign(reinterpret_cast<const char*>(v.data()), raw);
  }
  std::string index;
  put_le(index, 0, 8);
  put_le(index, data.size(), 8);
  put_le(index, cairn::crc32c(index.data(), index.size()), 4);
  std::ofstream(p + "/c/0", std::ios::binary) << data << index;
}

void write_checkpoint(const std::string& dir, int leaves, std::uint64_t elements, bool zstd) {
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 0.02f);  // weights: compressible a little, as real ones are
  std::string tree;
  for (int i = 0; i < leaves; ++i) {
    std::vector<float> v(elements);
    for (auto& x : v) x = normal(rng);
    const std::string name = "p" + std::to_string(i);
    write_array(dir, "params." + name, v, zstd);  // the parameter name: the keys joined with "."
    tree += std::string(i ? "," : "") + R"J("('params', ')J" + name + R"J(')":{"key_metadata":[{"key":"params","key_type":2},)J" +
            R"J({"key":")J" + name + R"J(","key_type":2}],"value_metadata":{"value_type":"jax.Array","skip_deserialize":false}})J";
  }
  std::ofstream(dir + "/_METADATA") << R"({"tree_metadata":{)" << tree << R"(},"use_ocdbt":false,"use_zarr3":true})";
}

// The limit: the same files read plainly, one after another on one thread: _METADATA, and per
// array its zarr.json and its shard's chunk bytes into a new buffer (decompressed into another,
// for zstd). The buffers the values end in are
// kept to the end and zero-initialised, as load<T> allocates its state (the same page faults).
double plain_read(const std::string& dir, bool zstd, std::uint64_t& bytes) {
  std::vector<std::vector<char>> kept;
  const double t0 = bench::now_s();
  bytes = 0;
  auto slurp = [](const std::string& f) {
    std::ifstream in(f, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  std::uint64_t meta = slurp(dir + "/_METADATA").size();
  for (const auto& e : fs::directory_iterator(dir)) {
    if (!e.is_directory()) continue;
    meta += slurp(e.path().string() + "/zarr.json").size();
    const std::string f = e.path().string() + "/c/0";
    std::ifstream in(f, std::ios::binary);
    const std::uint64_t size = fs::file_size(f) - 20;
    std::vector<char> buf(size);
    in.read(buf.data(), static_cast<std::streamsize>(size));
    if (zstd) {
      const unsigned long long n = ZSTD_getFrameContentSize(buf.data(), buf.size());
      std::vector<char> out(n);
      if (ZSTD_isError(ZSTD_decompress(out.data(), out.size(), buf.data(), buf.size()))) std::abort();
      bytes += out.size();
      kept.push_back(std::move(out));
    } else {
      bytes += size;
      kept.push_back(std::move(buf));
    }
  }
  const double t = bench::now_s() - t0;
  if (meta == 0) std::abort();
  return t;
}

double cairn_load(const std::string& dir, std::uint64_t& bytes) {
  const double t0 = bench::now_s();
  auto state = cairn::load_orbax<std::map<std::string, std::map<std::string, cairn::Array<float>>>>(dir);
  const double t = bench::now_s() - t0;
  bytes = 0;
  for (const auto& [k, v] : state.at("params")) bytes += v.size() * sizeof(float);
  return t;
}

void run(const Args& a, const char* what, int leaves, std::uint64_t elements, bool zstd) {
  const std::string dir = a.dir + "/" + what;
  write_checkpoint(dir, leaves, elements, zstd);
  std::vector<double> plain, load;
  std::uint64_t plain_bytes = 0, load_bytes = 0;
  for (int r = 0; r < a.repeat; ++r) {
    // Alternated, each from the same cache state.
    if (!a.warm) bench::evict_tree(dir);
    plain.push_back(plain_read(dir, zstd, plain_bytes));
    if (!a.warm) bench::evict_tree(dir);
    load.push_back(cairn_load(dir, load_bytes));
  }
  if (plain_bytes != load_bytes) {
    std::fprintf(stderr, "the load returned %llu bytes, the plain read %llu\n", (unsigned long long)load_bytes,
                 (unsigned long long)plain_bytes);
    std::exit(1);
  }
  const double gib = double(load_bytes) / (1u << 30);
  std::printf("%s: %d leaves, %.3f GiB (%s)\n", what, leaves, gib, a.warm ? "page cache" : "evicted before each read");
  std::printf("  %-36s %9.1f ms  %7.2f GiB/s\n", zstd ? "plain read + ZSTD_decompress" : "plain read", bench::median(plain) * 1e3,
              gib / bench::median(plain));
  std::printf("  %-36s %9.1f ms  %7.2f GiB/s  %.2fx of the limit\n", "cairn::load_orbax<T>", bench::median(load) * 1e3,
              gib / bench::median(load), bench::median(plain) / bench::median(load));
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string s = argv[i];
    auto next = [&] { return std::string(i + 1 < argc ? argv[++i] : ""); };
    if (s == "--dir") a.dir = next();
    else if (s == "--bytes") a.bytes = bench::parse_bytes(next());
    else if (s == "--leaves") a.leaves = std::stoi(next());
    else if (s == "--small") a.small = std::stoi(next());
    else if (s == "--repeat") a.repeat = std::stoi(next());
    else if (s == "--warm") a.warm = true;
    else if (s == "--keep") a.keep = true;
    else {
      std::fprintf(stderr, "usage: cairn-bench-orbax [--dir DIR] [--bytes 1G] [--leaves 64] [--small 10000] [--repeat 3] [--warm] [--keep]\n");
      return 2;
    }
  }
  const std::uint64_t per_leaf = a.bytes / a.leaves / sizeof(float);
  run(a, "large-raw", a.leaves, per_leaf, false);
  run(a, "large-zstd", a.leaves, per_leaf, true);
  if (a.small > 0) {
    run(a, "small-raw", a.small, 64, false);
    run(a, "small-zstd", a.small, 64, true);
  }
  if (!a.keep) fs::remove_all(a.dir);
  return 0;
}
