// SPDX-License-Identifier: Apache-2.0
// Import of Orbax-layout checkpoints (cairn/orbax.hpp) beside the limit measured in the same
// run: a plain read of the same bytes into new buffers, plus, for zstd, ZSTD_decompressDCtx of the
// same frames (one context per thread), on as many threads as the load reads large leaves on
// (one per core, at most 16).
// The checkpoints are written here as
// Orbax v1 writes a pytree on one device (zarr v3, one sharding_indexed shard per array holding
// one inner chunk, its index CRC32C-checked), in both of Orbax's layouts: an OCDBT database
// (the default; cairn's OcdbtWriter) and one directory per parameter (use_ocdbt=False). Then the
// export, cairn::save_orbax, beside a plain write + fsync of the same bytes.
//   cairn-bench-orbax [--dir DIR] [--bytes 1G] [--leaves 64] [--small 10000] [--repeat 3] [--warm] [--keep] [--export] [--samples]
#include <cairn/orbax.hpp>
#include <cairn/orbax/ocdbt_writer.hpp>
#include <cairn/io/batched_reads.hpp>
#include <zstd.h>

#include "bench_util.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
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
  bool samples = false;  // --samples: every run's figures of the export, not only the medians
  bool export_only = false;  // --export: the export figures alone
  std::string only;          // --only CASE: that case alone ("ocdbt-small-raw", ...: for a profiler)
};

// The threads the limit of a load reads on: as many as cairn's load reads large leaves on.
std::size_t bench_threads() { return std::min<std::size_t>(cairn::detail::usable_cores(), 16); }

void put_le(std::string& s, std::uint64_t v, int n) {
  for (int i = 0; i < n; ++i) s += static_cast<char>((v >> (8 * i)) & 0xff);
}

// One float32 array of n elements as Orbax v1 writes it on one device: its zarr.json and its
// one shard (the chunk, then the index of one inner chunk and the index's CRC32C).
struct Encoded {
  std::string zarr_json, shard;
};
Encoded encode_array(const std::vector<float>& v, bool zstd) {
  Encoded e;
  const std::string n = std::to_string(v.size());
  e.zarr_json = R"({"zarr_format":3,"node_type":"array","shape":[)" + n +
                R"(],"data_type":"float32","chunk_grid":{"name":"regular","configuration":{"chunk_shape":[)" + n +
                R"(]}},"chunk_key_encoding":{"name":"default"},"fill_value":0,"codecs":[{"name":"sharding_indexed",)"
                R"("configuration":{"chunk_shape":[)" + n + R"(],"codecs":[{"name":"bytes","configuration":{"endian":"little"}})" +
                (zstd ? R"(,{"name":"zstd","configuration":{"level":3}})" : "") +
                R"(],"index_codecs":[{"name":"bytes","configuration":{"endian":"little"}},{"name":"crc32c"}]}}]})";
  const std::size_t raw = v.size() * sizeof(float);
  if (zstd) {
    e.shard.resize(ZSTD_compressBound(raw));
    e.shard.resize(ZSTD_compress(e.shard.data(), e.shard.size(), v.data(), raw, 3));
  } else {
    e.shard.assign(reinterpret_cast<const char*>(v.data()), raw);
  }
  std::string index;
  put_le(index, 0, 8);
  put_le(index, e.shard.size(), 8);
  put_le(index, cairn::crc32c(index.data(), index.size()), 4);
  e.shard += index;
  return e;
}

// Where the plain read finds each array's bytes: a file and a byte range, for its zarr.json
// and its shard's chunk (without the index).
struct Range {
  std::string file;
  std::uint64_t offset = 0, size = 0;
};
struct ArrayFiles {
  Range json, chunk;
};

// Orbax's two layouts: an OCDBT database (v0 and v1's default: every value in one data file,
// small ones inline in the B+tree), or one directory per parameter (use_ocdbt=False).
std::vector<ArrayFiles> write_checkpoint(const std::string& dir, int leaves, std::uint64_t elements, bool zstd, bool ocdbt) {
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 0.02f);  // weights: compressible a little, as real ones are
  std::string tree;
  std::vector<ArrayFiles> files;
  cairn::PosixStore store;
  std::unique_ptr<cairn::detail::orbax::OcdbtWriter> db;
  if (ocdbt) db = std::make_unique<cairn::detail::orbax::OcdbtWriter>(store, dir);
  std::uint64_t at = 0;  // every value is larger than the inline limit: in the data file, in order
  // In the order Orbax writes a dict's entries into _METADATA: JAX flattens a dict by its sorted
  // keys ("p0", "p1", "p10", "p100", ...), not in the order the numbers count.
  std::vector<std::string> names;
  for (int i = 0; i < leaves; ++i) names.push_back("p" + std::to_string(i));
  std::sort(names.begin(), names.end());
  for (int i = 0; i < leaves; ++i) {
    std::vector<float> v(elements);
    for (auto& x : v) x = normal(rng);
    const std::string& name = names[static_cast<std::size_t>(i)];
    const std::string param = "params." + name;  // the parameter name: the keys joined with "."
    const Encoded e = encode_array(v, zstd);
    if (ocdbt) {
      db->put(param + "/zarr.json", e.zarr_json);
      db->put(param + "/c/0", e.shard);
      files.push_back({{"", at, e.zarr_json.size()}, {"", at + e.zarr_json.size(), e.shard.size() - 20}});
      at += e.zarr_json.size() + e.shard.size();
    } else {
      fs::create_directories(dir + "/" + param + "/c");
      std::ofstream(dir + "/" + param + "/zarr.json") << e.zarr_json;
      std::ofstream(dir + "/" + param + "/c/0", std::ios::binary) << e.shard;
      files.push_back({{dir + "/" + param + "/zarr.json", 0, e.zarr_json.size()}, {dir + "/" + param + "/c/0", 0, e.shard.size() - 20}});
    }
    tree += std::string(i ? "," : "") + R"J("('params', ')J" + name + R"J(')":{"key_metadata":[{"key":"params","key_type":2},)J" +
            R"J({"key":")J" + name + R"J(","key_type":2}],"value_metadata":{"value_type":"jax.Array","skip_deserialize":false}})J";
  }
  if (ocdbt) {
    db->finish();
    std::string data;
    for (const auto& e : fs::directory_iterator(dir + "/d")) data = e.path().string();
    for (auto& f : files) f.json.file = f.chunk.file = data;
  }
  std::ofstream(dir + "/_METADATA") << R"({"tree_metadata":{)" << tree << R"(},"use_ocdbt":)" << (ocdbt ? "true" : "false")
                                    << R"(,"use_zarr3":true})";
  return files;
}

// The limit: the same bytes read plainly: _METADATA (and an OCDBT database's manifest), then
// per array its zarr.json and its chunk into a new buffer (decompressed into another, for
// zstd), the arrays on bench_threads() threads, each file opened once per thread. The buffers the values
// end in are kept to the end and zero-initialised, as load<T> allocates its state (the same
// page faults).
// With `fstat_each`, each file is also fstat'ed once it is open, as cairn must to refuse what
// is no regular file (a FIFO would block it, a device node would feed it a disk's bytes): the
// least any safe reader of these files pays, printed beside the limit for a file per chunk.
double plain_read(const std::string& dir, const std::vector<ArrayFiles>& arrays, bool zstd, std::uint64_t& bytes,
                  bool fstat_each = false) {
  std::vector<std::vector<char>> kept(arrays.size());
  const double t0 = bench::now_s();
  auto slurp = [](const std::string& f) {
    std::ifstream in(f, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  std::uint64_t meta = slurp(dir + "/_METADATA").size();
  if (fs::exists(dir + "/manifest.ocdbt")) meta += slurp(dir + "/manifest.ocdbt").size();
  // The arrays on as many threads as cairn's load reads large leaves on (one per core, at most
  // 16), each taking the next array as it is done.
  std::atomic<std::size_t> next{0};
  std::atomic<std::uint64_t> total{0}, meta_bytes{meta};
  auto work = [&] {
    std::string open_file;  // one file open at a time: an OCDBT database's data file, or each array's in turn
    int fd = -1;
    // One decompression context per thread, used for every frame (ZSTD_decompress makes and
    // frees one per call: 4-5 us, most of a small array's time; cairn keeps its decoders too).
    std::unique_ptr<ZSTD_DCtx, std::size_t (*)(ZSTD_DCtx*)> dctx(ZSTD_createDCtx(), ZSTD_freeDCtx);
    auto pread_all = [&](const Range& r, char* dst) {
      if (r.file != open_file) {
        if (fd >= 0) ::close(fd);
        fd = ::open(r.file.c_str(), O_RDONLY);
        if (fd < 0) std::abort();
        struct stat st;
        if (fstat_each && (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))) std::abort();
        open_file = r.file;
      }
      for (std::uint64_t done = 0; done < r.size;) {
        const ssize_t n = ::pread(fd, dst + done, r.size - done, static_cast<off_t>(r.offset + done));
        if (n <= 0) std::abort();
        done += static_cast<std::uint64_t>(n);
      }
    };
    for (std::size_t i; (i = next.fetch_add(1)) < arrays.size();) {
      const ArrayFiles& a = arrays[i];
      std::string json(a.json.size, '\0');
      pread_all(a.json, json.data());
      meta_bytes += json.size();
      std::vector<char> buf(a.chunk.size);
      pread_all(a.chunk, buf.data());
      if (zstd) {
        const unsigned long long n = ZSTD_getFrameContentSize(buf.data(), buf.size());
        std::vector<char> out(n);
        if (ZSTD_isError(ZSTD_decompressDCtx(dctx.get(), out.data(), out.size(), buf.data(), buf.size()))) std::abort();
        total += out.size();
        kept[i] = std::move(out);
      } else {
        total += buf.size();
        kept[i] = std::move(buf);
      }
    }
    if (fd >= 0) ::close(fd);
  };
  std::vector<std::thread> helpers;
  for (std::size_t t = 1; t < bench_threads(); ++t) helpers.emplace_back(work);
  work();
  for (auto& h : helpers) h.join();
  const double t = bench::now_s() - t0;
  bytes = total;
  if (meta_bytes == 0) std::abort();
  return t;
}

// The plain read's work, with the files read through io_uring as cairn reads many small files
// (io/batched_reads.hpp: per batch of 64, each opened, read (4 KiB at most at first; one that
// fills that checked to be a regular file within its limit by a statx and read on) and closed,
// three io_uring_enter calls a batch): each array's zarr.json and shard file, 512 arrays a
// call, on as many threads as the plain read.
// What a reader that batches its system calls reaches on a file per chunk. A negative time:
// no io_uring here.
double uring_read(const std::vector<ArrayFiles>& arrays, bool zstd) {
  std::vector<std::vector<char>> kept(arrays.size());
  const double t0 = bench::now_s();
  std::atomic<std::size_t> next{0};
  std::atomic<bool> failed{false}, unavailable{false};
  constexpr std::size_t per_batch = 512;  // one ring per call: its setup is worth 1,024 files
  auto work = [&] {
    std::unique_ptr<ZSTD_DCtx, std::size_t (*)(ZSTD_DCtx*)> dctx(ZSTD_createDCtx(), ZSTD_freeDCtx);
    std::vector<cairn::detail::WholeFileRead> files;
    for (std::size_t from; (from = next.fetch_add(per_batch)) < arrays.size();) {
      const std::size_t to = std::min(arrays.size(), from + per_batch);
      files.assign(2 * (to - from), {});
      for (std::size_t i = from; i < to; ++i) {
        const ArrayFiles& a = arrays[i];
        files[2 * (i - from)].path = a.json.file, files[2 * (i - from)].limit = a.json.size;
        files[2 * (i - from) + 1].path = a.chunk.file, files[2 * (i - from) + 1].limit = a.chunk.size + 20;  // + its index and CRC32C
      }
      const std::size_t read = cairn::detail::read_files_batched(files);
      if (read == 0) {
        unavailable = true;
        return;
      }
      if (read != files.size()) {
        failed = true;
        return;
      }
      for (std::size_t i = from; i < to; ++i) {
        const std::string& shard = files[2 * (i - from) + 1].bytes;
        if (zstd) {
          const unsigned long long n = ZSTD_getFrameContentSize(shard.data(), shard.size() - 20);
          std::vector<char> out(n);
          if (ZSTD_isError(ZSTD_decompressDCtx(dctx.get(), out.data(), out.size(), shard.data(), shard.size() - 20))) std::abort();
          kept[i] = std::move(out);
        } else {
          kept[i].assign(shard.begin(), shard.end() - 20);
        }
      }
    }
  };
  std::vector<std::thread> helpers;
  for (std::size_t t = 1; t < bench_threads(); ++t) helpers.emplace_back(work);
  work();
  for (auto& h : helpers) h.join();
  if (failed) {
    std::fprintf(stderr, "the io_uring read failed\n");
    std::exit(1);
  }
  return unavailable ? -1.0 : bench::now_s() - t0;
}

// The load's time; `extra` gets its peak resident memory beyond the state it returns (the
// growth of the process's peak from before the load, less the state's bytes).
double cairn_load(const std::string& dir, std::uint64_t& bytes, std::int64_t& extra) {
  bench::reset_peak_rss();
  const std::uint64_t base = bench::rss_bytes();
  const double t0 = bench::now_s();
  auto state = cairn::load_orbax<std::map<std::string, std::map<std::string, cairn::Array<float>>>>(dir);
  const double t = bench::now_s() - t0;
  bytes = 0;
  for (const auto& [k, v] : state.at("params")) bytes += v.size() * sizeof(float);
  extra = static_cast<std::int64_t>(bench::peak_rss_bytes()) - static_cast<std::int64_t>(base) - static_cast<std::int64_t>(bytes);
  return t;
}

void run(const Args& a, const std::string& what, int leaves, std::uint64_t elements, bool zstd, bool ocdbt) {
  if (!a.only.empty() && a.only != what) return;
  const std::string dir = a.dir + "/" + what;
  const std::vector<ArrayFiles> arrays = write_checkpoint(dir, leaves, elements, zstd, ocdbt);
  std::vector<double> plain, load, safe, uring;
  std::uint64_t plain_bytes = 0, load_bytes = 0;
  std::int64_t extra = 0, most = 0;
  auto run_both = [&] {
    // Alternated, each from the same cache state.
    if (!a.warm) bench::evict_tree(dir);
    plain.push_back(plain_read(dir, arrays, zstd, plain_bytes));
    if (!a.warm) bench::evict_tree(dir);
    load.push_back(cairn_load(dir, load_bytes, extra));
    most = std::max(most, extra);
    if (!ocdbt) {
      std::uint64_t ignored = 0;
      if (!a.warm) bench::evict_tree(dir);
      safe.push_back(plain_read(dir, arrays, zstd, ignored, true));
      if (!a.warm) bench::evict_tree(dir);
      uring.push_back(uring_read(arrays, zstd));
    }
  };
  // As for the export (run_export): a process's first loads of small arrays fault in the
  // working memory that later loads reuse (10,000 small arrays in OCDBT: 30-90 ms for the
  // first against about 20 ms after it, 2026-12-01), so below 64 MiB each side's first two
  // runs are printed apart and left out of the medians. The first figure is what a one-off
  // load (a conversion, a server's start) pays; the medians, what a loop that loads again sees.
  std::vector<double> first_plain, first_load;
  if (static_cast<std::uint64_t>(leaves) * elements * sizeof(float) < (std::uint64_t{64} << 20))
    for (int r = 0; r < 2; ++r) {
      run_both();
      first_plain.push_back(plain.back()), first_load.push_back(load.back());
      plain.clear(), load.clear(), safe.clear(), uring.clear();
    }
  for (int r = 0; r < a.repeat; ++r) run_both();
  if (plain_bytes != load_bytes) {
    std::fprintf(stderr, "the load returned %llu bytes, the plain read %llu\n", (unsigned long long)load_bytes,
                 (unsigned long long)plain_bytes);
    std::exit(1);
  }
  const double gib = double(load_bytes) / (1u << 30);
  std::printf("%s: %d leaves, %.3f GiB (%s)\n", what.c_str(), leaves, gib, a.warm ? "page cache" : "evicted before each read");
  std::printf("  %-36s %9.1f ms  %7.2f GiB/s\n", zstd ? "plain read + ZSTD_decompressDCtx" : "plain read", bench::median(plain) * 1e3,
              gib / bench::median(plain));
  std::printf("  %-36s %9.1f ms  %7.2f GiB/s  %.2fx of the limit; peak memory beside the state %.1f MiB\n",
              "cairn::load_orbax<T>", bench::median(load) * 1e3, gib / bench::median(load),
              bench::median(plain) / bench::median(load), static_cast<double>(most) / (1 << 20));
  if (!safe.empty())
    std::printf("  %-36s %9.1f ms  %7.2f GiB/s  %.2fx of the limit: the most a reader that checks each file can reach\n",
                "plain read + an fstat per file", bench::median(safe) * 1e3, gib / bench::median(safe),
                bench::median(plain) / bench::median(safe));
  if (!uring.empty() && bench::median(uring) > 0)
    std::printf("  %-36s %9.1f ms  %7.2f GiB/s  %.2fx of the limit: the same checks, the system calls batched\n",
                "the same read through io_uring", bench::median(uring) * 1e3, gib / bench::median(uring),
                bench::median(plain) / bench::median(uring));
  else if (!uring.empty())
    std::printf("  (no io_uring here: its line is left out)\n");
  if (!first_load.empty())
    std::printf("  (the process's first two runs, left out above: limit %.1f, %.1f ms; cairn %.1f, %.1f ms)\n",
                first_plain[0] * 1e3, first_plain[1] * 1e3, first_load[0] * 1e3, first_load[1] * 1e3);
}

// The export (cairn::save_orbax) of `leaves` float32 arrays beside the limit measured in the
// same run: the same bytes (compressed by ZSTD_compressCCtx at the same level on one thread,
// one context for every leaf, for zstd) written plainly into one new file and fsynced.
void run_export(const Args& a, const std::string& what, int leaves, std::uint64_t elements, int zstd_level) {
  if (!a.only.empty() && a.only != what) return;
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  std::map<std::string, std::map<std::string, cairn::Array<float>>> state;
  std::uint64_t bytes = 0;
  for (int i = 0; i < leaves; ++i) {
    cairn::Array<float> v({static_cast<std::int64_t>(elements)});
    for (std::uint64_t k = 0; k < elements; ++k) v.data()[k] = normal(rng);
    bytes += elements * sizeof(float);
    state["params"]["p" + std::to_string(i)] = std::move(v);
  }
  const std::string dir = a.dir + "/" + what, raw = a.dir + "/" + what + ".raw";
  fs::create_directories(a.dir);
  std::vector<double> plain, save;
  std::vector<char> packed;
  // Each side in turn goes first: the disk here (a VM's) is still taking in the last gigabyte
  // when fsync returns, and the side that follows a large write was measured up to 2x slower.
  // Before each side: the other's files removed, and sync() with a pause, outside the timing.
  auto settle = [] {
    ::sync();
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  };
  auto run_plain = [&] {
    fs::remove(raw);
    settle();
    const double t0 = bench::now_s();
    const int fd = ::open(raw.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    std::uint64_t off = 0;
    std::unique_ptr<ZSTD_CCtx, std::size_t (*)(ZSTD_CCtx*)> cctx(ZSTD_createCCtx(), ZSTD_freeCCtx);  // one for every leaf
    for (const auto& [name, v] : state.at("params")) {
      const char* src = reinterpret_cast<const char*>(v.data());
      std::size_t n = v.size() * sizeof(float);
      if (zstd_level > 0) {
        packed.resize(ZSTD_compressBound(n));
        n = ZSTD_compressCCtx(cctx.get(), packed.data(), packed.size(), src, n, zstd_level);
        src = packed.data();
      }
      if (::pwrite(fd, src, n, static_cast<off_t>(off)) != static_cast<ssize_t>(n)) { std::perror("pwrite"); std::exit(1); }
      off += n;
    }
    ::fsync(fd);
    ::close(fd);
    plain.push_back(bench::now_s() - t0);
    fs::remove(raw);
  };
  auto run_save = [&] {
    fs::remove_all(dir);
    settle();
    cairn::OrbaxSaveOptions o;
    o.zstd_level = zstd_level;
    const double t0 = bench::now_s();
    cairn::save_orbax(dir, state, o);
    save.push_back(bench::now_s() - t0);
    if (!a.keep) fs::remove_all(dir);
  };
  // A process's first export of small arrays faults in its working memory (the metadata text,
  // the tree walk's leaves, the database's entries: about 3,000 pages for 10,000 arrays) and
  // its second some of it again; a loop's later exports reuse what the allocator kept. Below
  // 64 MiB, each side's first two runs are printed apart and left out of the medians, which
  // are then what a loop that exports again sees; the first figure is what a one-off export
  // (a conversion) pays.
  std::vector<double> first_plain, first_save;
  if (bytes < (std::uint64_t{64} << 20))
    for (int r = 0; r < 2; ++r) {
      run_plain(), run_save();
      first_plain.push_back(plain.back()), first_save.push_back(save.back());
      plain.clear(), save.clear();
    }
  for (int r = 0; r < a.repeat; ++r) {
    if (r % 2 == 0) run_plain(), run_save();
    else run_save(), run_plain();
    if (a.samples) std::printf("  run %d: limit %.1f ms, cairn %.1f ms\n", r, plain.back() * 1e3, save.back() * 1e3);
  }
  const double gib = double(bytes) / (1u << 30);
  std::printf("%s: %d leaves, %.3f GiB, export\n", what.c_str(), leaves, gib);
  std::printf("  %-36s %9.1f ms  %7.2f GiB/s\n", zstd_level ? "ZSTD_compressCCtx + write + fsync" : "plain write + fsync",
              bench::median(plain) * 1e3, gib / bench::median(plain));
  std::printf("  %-36s %9.1f ms  %7.2f GiB/s  %.2fx of the limit\n", "cairn::save_orbax", bench::median(save) * 1e3,
              gib / bench::median(save), bench::median(plain) / bench::median(save));
  if (!first_save.empty())
    std::printf("  (the process's first two runs, left out above: limit %.1f, %.1f ms; cairn %.1f, %.1f ms)\n",
                first_plain[0] * 1e3, first_plain[1] * 1e3, first_save[0] * 1e3, first_save[1] * 1e3);
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
    else if (s == "--samples") a.samples = true;
    else if (s == "--export") a.export_only = true;
    else if (s == "--only") a.only = next();
    else {
      std::fprintf(stderr, "usage: cairn-bench-orbax [--dir DIR] [--bytes 1G] [--leaves 64] [--small 10000] [--repeat 3] [--warm] [--keep] [--export] [--samples] [--only CASE]\n");
      return 2;
    }
  }
  const std::uint64_t per_leaf = a.bytes / a.leaves / sizeof(float);
  for (const bool ocdbt : {true, false}) {
    if (a.export_only) break;
    const std::string layout = ocdbt ? "ocdbt" : "dirs";
    run(a, layout + "-large-raw", a.leaves, per_leaf, false, ocdbt);
    run(a, layout + "-large-zstd", a.leaves, per_leaf, true, ocdbt);
    if (a.small > 0) {
      run(a, layout + "-small-raw", a.small, 64, false, ocdbt);
      run(a, layout + "-small-zstd", a.small, 64, true, ocdbt);
    }
  }
  run_export(a, "export-large-raw", a.leaves, per_leaf, 0);
  run_export(a, "export-large-zstd", a.leaves, per_leaf, 3);
  if (a.small > 0) run_export(a, "export-small-raw", a.small, 64, 0);
  if (!a.keep) fs::remove_all(a.dir);
  return 0;
}
