// SPDX-License-Identifier: Apache-2.0
// cairn-bench: cairn's save and load beside a plain write+fsync and read of the same bytes on
// the same filesystem (the physical ceiling), extra memory, and bytes read by a 1% partial
// restore. See docs/benchmarks.md for the figures and how to read them.
#include <cairn/cairn.hpp>

#include "bench_util.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <fcntl.h>
#include <malloc.h>
#include <sys/wait.h>
#include <unistd.h>

namespace {
using bench::evict;
using bench::evict_tree;
using bench::median;
using bench::now_s;
using bench::parse_bytes;

struct Options {
  std::size_t leaves = 64;
  std::uint64_t bytes = std::uint64_t{1} << 30;  // total, split evenly (unless min/max leaf bytes)
  std::uint64_t min_leaf = 0, max_leaf = 0;      // random leaf sizes in [min, max] bytes
  std::string dtype = "float32";
  std::string dir = "/tmp/cairn-bench";
  int repeat = 3;
  bool json = false;
  bool warm = false;  // keep written data in the page cache before reading
  bool async = false;  // the Checkpointer benchmarks instead
  int saves = 1000;    // async saves for the memory-growth measurement
  double step_ms = 50; // compute per training step in the loop benchmark
  bool sharded = false;  // the sharding benchmarks instead
  bool gpu = false;      // the GPU figures of --sharded alone
  bool containers = false;  // the same leaves in each container kind
  bool safetensors = false;  // safetensors export and import
  bool growth = false;  // warm loads of N and 10N leaves, alternately
};


void usage() {
  std::puts(
      "usage: cairn-bench [--leaves N] [--bytes SIZE] [--leaf-bytes MIN:MAX] [--dtype NAME]\n"
      "                   [--dir DIR] [--repeat R] [--warm] [--json]\n"
      "  --leaves N          number of leaves (default 64)\n"
      "  --bytes SIZE        total bytes split evenly over the leaves (default 1G; K, M, G suffixes)\n"
      "  --leaf-bytes A:B    instead, each leaf a random size in [A, B] bytes (e.g. 1K:4K)\n"
      "  --dtype NAME        float32 (default), float64, int32, uint8, bfloat16\n"
      "  --dir DIR           where to write (default /tmp/cairn-bench; use the disk you care about)\n"
      "  --repeat R          runs per measurement, the median is reported (default 3)\n"
      "  --warm              read from the page cache (default: evict written files first)\n"
      "  --json              one JSON object instead of the table\n"
      "  --async             Checkpointer benchmarks: save_async blocking time vs one in-memory copy,\n"
      "                      a loop checkpointing every step vs not, RSS across --saves N async saves\n"
      "  --step-ms MS        compute per training step in the loop benchmark (default 50)\n"
      "  --containers        the leaves as a std::map, unordered_map, vector and struct: save, load<T> and\n"
      "                      load into an existing state of each, beside a plain read of the same bytes\n"
      "  --growth            warm loads of --leaves N and 10N leaves (sizes as --leaf-bytes), alternately in\n"
      "                      one process: how much longer the larger takes, beside the plain read's growth\n"
      "  --safetensors       save_safetensors and load_safetensors (into an existing map) of the leaves,\n"
      "                      beside a plain write+fsync and read of the same bytes\n"
      "  --sharded           sharding benchmarks: box-copy and cast kernels vs memcpy, restoring a\n"
      "                      2x4-sharded --bytes array onto other shardings vs the same sharding\n"
      "                      (and, built with nvcc on a GPU, staging and device casts vs cudaMemcpy)\n"
      "  --gpu               the GPU figures of --sharded alone (a build with nvcc)");
}

using bench::peak_rss_bytes;
using bench::reset_peak_rss;
using bench::rss_bytes;

template <class T>
using State = std::map<std::string, std::vector<std::vector<T>>>;

template <class T>
bool same_bits(const State<T>& a, const State<T>& b) {
  if (a.size() != b.size()) return false;
  for (auto ia = a.begin(), ib = b.begin(); ia != a.end(); ++ia, ++ib) {
    if (ia->first != ib->first || ia->second.size() != ib->second.size()) return false;
    for (std::size_t i = 0; i < ia->second.size(); ++i)
      if (ia->second[i].size() != ib->second[i].size() ||
          std::memcmp(ia->second[i].data(), ib->second[i].data(), ia->second[i].size() * sizeof(T)) != 0)
        return false;
  }
  return true;
}

struct Results {
  std::uint64_t bytes = 0;
  double raw_write = 0, raw_read = 0, raw_read_new = 0, save = 0, load_into = 0, load_noverify = 0, load_new = 0;
  double raw_read_uninit = 0, load_new_array = 0;  // new buffers left uninitialised; load<T> into new cairn::Arrays
  double metadata = 0;              // cairn::metadata() from the page cache
  std::uint64_t metadata_bytes = 0;  // the size of _METADATA
  std::int64_t save_extra = 0, load_extra = 0;
  std::uint64_t partial_bytes = 0, checkpoint_bytes = 0, partial_leaves = 0;
};

// Runs f in a child process and returns its peak RSS above the RSS it started with (the
// parent's state included, shared), in bytes.
template <class F>
std::int64_t extra_peak_rss_in_child(F&& f) {
  int fds[2];
  if (::pipe(fds) != 0) return -1;
  pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    const std::uint64_t base = rss_bytes();
    reset_peak_rss();
    std::int64_t adjust = f();
    std::int64_t extra = static_cast<std::int64_t>(peak_rss_bytes()) - static_cast<std::int64_t>(base) - adjust;
    if (::write(fds[1], &extra, sizeof extra) != sizeof extra) ::_exit(1);
    ::_exit(0);
  }
  ::close(fds[1]);
  std::int64_t extra = -1;
  if (::read(fds[0], &extra, sizeof extra) != sizeof extra) extra = -1;
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return extra;
}

template <class T>
void raw_write(const State<T>& state, const std::string& path) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  for (auto& [k, g] : state)
    for (auto& leaf : g) {
      const char* p = reinterpret_cast<const char*>(leaf.data());
      std::size_t n = leaf.size() * sizeof(T);
      while (n) { ssize_t w = ::write(fd, p, n); if (w <= 0) { std::perror("write"); std::exit(1); } p += w; n -= static_cast<std::size_t>(w); }
    }
  ::fsync(fd);
  ::close(fd);
}

// Reads the next leaf.size() elements of fd into leaf (the plain reads' one loop).
template <class T>
void read_leaf(int fd, std::vector<T>& leaf) {
  char* p = reinterpret_cast<char*>(leaf.data());
  std::size_t n = leaf.size() * sizeof(T);
  while (n) { ssize_t r = ::read(fd, p, n); if (r <= 0) { std::perror("read"); std::exit(1); } p += r; n -= static_cast<std::size_t>(r); }
}

template <class T>
void raw_read(State<T>& into, const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY);
  for (auto& [k, g] : into)
    for (auto& leaf : g) read_leaf(fd, leaf);
  ::close(fd);
}

// `leaves` leaves of random bits, sized as o says, spread over up to 100 groups ("g000"...).
template <class T>
State<T> random_state(const Options& o, std::size_t leaves) {
  std::mt19937_64 rng(42);
  const std::size_t groups = std::min<std::size_t>(100, leaves);
  State<T> state;
  for (std::size_t i = 0; i < leaves; ++i) {
    std::uint64_t bytes = o.max_leaf ? o.min_leaf + rng() % (o.max_leaf - o.min_leaf + 1) : o.bytes / leaves;
    std::vector<T> leaf(bytes / sizeof(T));
    auto* p = reinterpret_cast<unsigned char*>(leaf.data());
    for (std::size_t k = 0; k < leaf.size() * sizeof(T); k += 8) {
      const std::uint64_t w = rng();
      std::memcpy(p + k, &w, std::min<std::size_t>(8, leaf.size() * sizeof(T) - k));
    }
    char name[16];
    std::snprintf(name, sizeof name, "g%03zu", i % groups);
    state[name].push_back(std::move(leaf));
  }
  return state;
}

// The plain read into buffers allocated here, as load<T> allocates its state.
template <class T>
void raw_read_new(const State<T>& shapes, const std::string& path) {
  State<T> buffers;
  for (auto& [k, g] : shapes)
    for (auto& leaf : g) buffers[k].emplace_back(leaf.size());
  raw_read(buffers, path);
}

// The plain read into new buffers that are not initialised first (what a load into new
// cairn::Array targets can match: it writes every element, so it does not zero-fill them).
template <class T>
void raw_read_new_uninitialised(const State<T>& shapes, const std::string& path) {
  std::vector<std::unique_ptr<T[]>> buffers;
  int fd = ::open(path.c_str(), O_RDONLY);
  for (auto& [k, g] : shapes)
    for (auto& leaf : g) {
      buffers.push_back(std::make_unique_for_overwrite<T[]>(leaf.size()));
      char* p = reinterpret_cast<char*>(buffers.back().get());
      std::size_t n = leaf.size() * sizeof(T);
      while (n) { ssize_t r = ::read(fd, p, n); if (r <= 0) { std::perror("read"); std::exit(1); } p += r; n -= static_cast<std::size_t>(r); }
    }
  ::close(fd);
}

template <class T>
Results run(const Options& o) {
  State<T> state = random_state<T>(o, o.leaves);
  Results r;
  for (const auto& [k, g] : state)
    for (const auto& leaf : g) r.bytes += leaf.size() * sizeof(T);
  r.partial_leaves = state["g000"].size();
  std::filesystem::remove_all(o.dir);
  std::filesystem::create_directories(o.dir);
  const std::string raw_dir = o.dir + "/raw", raw = raw_dir + "/raw.bin", ckpt = o.dir + "/ckpt";
  // Memory first, in child processes, before the timing runs leave freed memory in the heap
  // (which a later allocation would reuse without raising the peak).
  ::malloc_trim(0);
  const std::string mem = o.dir + "/mem";
  r.save_extra = extra_peak_rss_in_child([&]() -> std::int64_t { cairn::save(mem, state); return 0; });
  r.load_extra = extra_peak_rss_in_child([&]() -> std::int64_t {
    State<T> back = cairn::load<State<T>>(mem);
    return static_cast<std::int64_t>(r.bytes);
  });
  std::vector<double> raw_w, raw_r, raw_new_t, save_t, load_into_t, load_noverify_t, load_new_t, raw_uninit_t, load_array_t;
  State<T> target = state;  // an existing state to restore into (same shapes)
  for (int rep = 0; rep < o.repeat; ++rep) {
    // Both writers follow the same filesystem pattern: delete their previous output, sync,
    // then write one new file in a new directory (a checkpoint is a directory). Each writer's
    // runs come one after another, so each writes into the space its previous run freed: on
    // this machine's ext4 (mounted with discard) the time of a 1 GiB write depends several-fold
    // on such history, and interleaving the two writers measured the filesystem, not them.
    auto time_raw = [&] {
      std::filesystem::remove_all(raw_dir);
      ::sync();
      double t0 = now_s();
      std::filesystem::create_directories(raw_dir);
      raw_write(state, raw);
      raw_w.push_back(now_s() - t0);
    };
    auto time_save = [&] {
      std::filesystem::remove_all(ckpt);
      ::sync();
      double t0 = now_s();
      cairn::save(ckpt, state);
      save_t.push_back(now_s() - t0);
    };
    // Writes are grouped (all plain runs, then all cairn runs; see below), reads alternate.
    if (rep == 0) {
      for (int k = 0; k < o.repeat; ++k) time_raw();
      for (int k = 0; k < o.repeat; ++k) time_save();
    }

    auto cold = [&] { if (!o.warm) { evict(raw); evict_tree(ckpt); } };
    auto time_read = [&] { cold(); double t0 = now_s(); raw_read(target, raw); raw_r.push_back(now_s() - t0); };
    auto time_load = [&] {
      cold();
      double t0 = now_s();
      cairn::load(ckpt, target);
      load_into_t.push_back(now_s() - t0);
    };
    auto time_load_unverified = [&] {
      cold();
      cairn::LoadOptions trust;
      trust.verify_checksums = false;
      double t0 = now_s();
      cairn::load(ckpt, target, trust);
      load_noverify_t.push_back(now_s() - t0);
    };
    if (rep % 2) { time_load(); time_load_unverified(); time_read(); } else { time_read(); time_load_unverified(); time_load(); }
    if (!same_bits(target, state)) { std::fprintf(stderr, "cairn-bench: restored state differs!\n"); std::exit(1); }
    cold();
    double t0 = now_s();
    raw_read_new(state, raw);
    raw_new_t.push_back(now_s() - t0);
    cold();
    t0 = now_s();
    State<T> fresh = cairn::load<State<T>>(ckpt);
    load_new_t.push_back(now_s() - t0);
    if (!same_bits(fresh, state)) { std::fprintf(stderr, "cairn-bench: restored state differs!\n"); std::exit(1); }
    fresh = {};
    cold();
    t0 = now_s();
    raw_read_new_uninitialised(state, raw);
    raw_uninit_t.push_back(now_s() - t0);
    cold();
    t0 = now_s();
    auto arrays = cairn::load<std::map<std::string, std::vector<cairn::Array<T>>>>(ckpt);
    load_array_t.push_back(now_s() - t0);
    if (arrays.size() != state.size() || arrays.begin()->second.front().size() != state.begin()->second.front().size() ||
        std::memcmp(arrays.begin()->second.front().data(), state.begin()->second.front().data(),
                    state.begin()->second.front().size() * sizeof(T)) != 0) {
      std::fprintf(stderr, "cairn-bench: restored arrays differ!\n");
      std::exit(1);
    }
  }
  r.raw_write = median(raw_w);
  r.raw_read = median(raw_r);
  r.save = median(save_t);
  r.load_into = median(load_into_t);
  r.load_new = median(load_new_t);
  r.load_noverify = median(load_noverify_t);
  r.raw_read_new = median(raw_new_t);
  r.raw_read_uninit = median(raw_uninit_t);
  r.load_new_array = median(load_array_t);
  // Reading the metadata alone (from the page cache: the parse, not the disk).
  std::vector<double> meta_t;
  for (int rep = 0; rep < std::max(3, o.repeat); ++rep) {
    const double t0 = now_s();
    const cairn::CheckpointMetadata m = cairn::metadata(ckpt);
    meta_t.push_back(now_s() - t0);
    if (m.leaves().size() != o.leaves) { std::fprintf(stderr, "cairn-bench: metadata lists the wrong leaves!\n"); std::exit(1); }
  }
  r.metadata = median(meta_t);
  r.metadata_bytes = std::filesystem::file_size(ckpt + "/_METADATA");
  // 1% partial restore: one group of leaves out of (up to) a hundred.
  cairn::LoadOptions sub;
  sub.subtree = "g000";
  std::vector<std::vector<T>> part;
  cairn::LoadReport rep = cairn::load(ckpt, part, sub);
  r.partial_bytes = rep.bytes_read;
  std::uint64_t on_disk = 0;
  for (auto& e : std::filesystem::directory_iterator(ckpt)) on_disk += e.file_size();
  r.checkpoint_bytes = on_disk;
  std::filesystem::remove_all(o.dir);
  return r;
}

// ---- Many leaves in each container kind ----

// The same leaves (sizes as --leaves and --leaf-bytes say) held as a flat std::map, an
// std::unordered_map, a std::vector and a struct of vectors; for each, the load into a fresh
// state (load<T>) and into an existing one of the right shapes, beside a plain read of the
// same bytes into the same buffers.
struct Bucket {
  std::vector<std::vector<float>> a, b;
};
CAIRN_TREE(Bucket, a, b)

int containers_bench(const Options& o) {
  std::mt19937_64 rng(7);
  std::vector<std::vector<float>> leaves(o.leaves);
  std::uint64_t bytes = 0;
  for (auto& leaf : leaves) {
    const std::uint64_t n = o.max_leaf ? o.min_leaf + rng() % (o.max_leaf - o.min_leaf + 1) : o.bytes / o.leaves;
    leaf.resize(n / sizeof(float));
    for (auto& x : leaf) x = static_cast<float>(rng() % 100000);
    bytes += leaf.size() * sizeof(float);
  }
  std::filesystem::remove_all(o.dir);
  std::filesystem::create_directories(o.dir);
  const std::string raw = o.dir + "/raw.bin";
  {
    std::map<std::string, std::vector<std::vector<float>>> as_state{{"x", leaves}};
    raw_write<float>(as_state, raw);
  }
  std::printf("cairn-bench --containers: %zu leaves, %.1f MiB of float32 (%s reads, median of %d)\n", o.leaves,
              static_cast<double>(bytes) / (1 << 20), o.warm ? "warm" : "cold", o.repeat);
  // A fresh load allocates its state, as a plain read into new buffers does: "fresh/new" is the
  // fair ratio for load<T>. A load into an existing state is compared with two plain reads: into
  // a vector of vectors ("read", the same buffers in the cheapest container), and into the same
  // container the load fills ("same": the loop its user would write, which finds each leaf in it
  // and pays for stepping through its nodes as the load does).
  std::printf("  %-14s %8s %8s %8s %8s %8s %8s %10s %9s %9s\n", "container", "save ms", "read ms", "same ms",
              "new ms", "fresh ms", "into ms", "fresh/new", "into/read", "into/same");
  auto key = [](std::size_t i) { char k[32]; std::snprintf(k, sizeof k, "w%06zu", i); return std::string(k); };
  // The plain read into the leaves of `target`, found as `in_file_order(target)` lists them.
  auto read_same = [&](auto& target, auto in_file_order) {
    const std::vector<std::vector<float>*> order = in_file_order(target);
    int fd = ::open(raw.c_str(), O_RDONLY);
    for (std::vector<float>* leaf : order) read_leaf(fd, *leaf);
    ::close(fd);
  };
  auto bench = [&](const char* name, auto state, auto in_file_order) {
    using S = decltype(state);
    const std::string ckpt = o.dir + "/" + name;
    std::vector<double> save_t, read_t, same_t, read_new_t, fresh_t, into_t;
    for (int rep = 0; rep < o.repeat; ++rep) {
      std::filesystem::remove_all(ckpt);
      double t0 = now_s();
      cairn::save(ckpt, state);
      save_t.push_back(now_s() - t0);
    }
    S target = state;
    for (int rep = 0; rep < o.repeat; ++rep) {
      std::map<std::string, std::vector<std::vector<float>>> buffers{{"x", leaves}};
      if (!o.warm) evict(raw);
      double t0 = now_s();
      raw_read<float>(buffers, raw);
      read_t.push_back(now_s() - t0);
      if (!o.warm) evict(raw);
      t0 = now_s();
      raw_read_new(buffers, raw);
      read_new_t.push_back(now_s() - t0);
      if (!o.warm) evict_tree(ckpt);
      t0 = now_s();
      S fresh = cairn::load<S>(ckpt);
      fresh_t.push_back(now_s() - t0);
      // The two reads into `target` alternate, so that neither always finds it in the cache.
      auto time_into = [&] {
        if (!o.warm) evict_tree(ckpt);
        const double t = now_s();
        cairn::load(ckpt, target);
        into_t.push_back(now_s() - t);
      };
      auto time_same = [&] {
        if (!o.warm) evict(raw);
        const double t = now_s();
        read_same(target, in_file_order);
        same_t.push_back(now_s() - t);
      };
      if (rep % 2) { time_into(); time_same(); } else { time_same(); time_into(); }
      if (cairn::leaf_count(fresh) != o.leaves) { std::fprintf(stderr, "cairn-bench: wrong leaf count!\n"); std::exit(1); }
    }
    const auto got = in_file_order(target), want = in_file_order(state);
    bool same = got.size() == want.size();
    for (std::size_t i = 0; same && i < got.size(); ++i)
      same = got[i]->size() == want[i]->size() &&
             std::memcmp(got[i]->data(), want[i]->data(), got[i]->size() * sizeof(float)) == 0;
    if (!same) { std::fprintf(stderr, "cairn-bench: restored state differs!\n"); std::exit(1); }
    std::printf("  %-14s %8.1f %8.1f %8.1f %8.1f %8.1f %8.1f %9.2fx %8.2fx %8.2fx\n", name, median(save_t) * 1e3,
                median(read_t) * 1e3, median(same_t) * 1e3, median(read_new_t) * 1e3, median(fresh_t) * 1e3,
                median(into_t) * 1e3, median(fresh_t) / median(read_new_t), median(into_t) / median(read_t),
                median(into_t) / median(same_t));
    std::filesystem::remove_all(ckpt);
  };
  using Leaves = std::vector<std::vector<float>*>;
  {
    using M = std::map<std::string, std::vector<float>>;
    M m;
    for (std::size_t i = 0; i < leaves.size(); ++i) m[key(i)] = leaves[i];
    bench("map", std::move(m), [](M& t) {  // the keys sort as the leaves were written
      Leaves out;
      for (auto& kv : t) out.push_back(&kv.second);
      return out;
    });
  }
  {
    using M = std::unordered_map<std::string, std::vector<float>>;
    M m;
    for (std::size_t i = 0; i < leaves.size(); ++i) m[key(i)] = leaves[i];
    bench("unordered_map", std::move(m), [&](M& t) {
      Leaves out;
      for (std::size_t i = 0; i < leaves.size(); ++i) out.push_back(&t.find(key(i))->second);
      return out;
    });
  }
  bench("vector", leaves, [](std::vector<std::vector<float>>& t) {
    Leaves out;
    for (auto& v : t) out.push_back(&v);
    return out;
  });
  {
    std::vector<Bucket> buckets(std::max<std::size_t>(1, leaves.size() / 100));
    for (std::size_t i = 0; i < leaves.size(); ++i) {
      Bucket& b = buckets[i % buckets.size()];
      (i / buckets.size() % 2 ? b.b : b.a).push_back(leaves[i]);
    }
    bench("struct", std::move(buckets), [n = leaves.size()](std::vector<Bucket>& t) {
      Leaves out;
      std::vector<std::size_t> next_a(t.size()), next_b(t.size());
      for (std::size_t i = 0; i < n; ++i) {
        const std::size_t k = i % t.size();
        out.push_back(i / t.size() % 2 ? &t[k].b[next_b[k]++] : &t[k].a[next_a[k]++]);
      }
      return out;
    });
  }
  std::filesystem::remove_all(o.dir);
  return 0;
}

// ---- safetensors: export and import beside a plain write and read ----

int safetensors_bench(const Options& o) {
  std::mt19937_64 rng(11);
  std::map<std::string, std::vector<std::vector<float>>> state;  // raw_write/raw_read's shape
  std::map<std::string, std::vector<float>> tensors;
  std::uint64_t bytes = 0;
  for (std::size_t i = 0; i < o.leaves; ++i) {
    const std::uint64_t n = o.max_leaf ? o.min_leaf + rng() % (o.max_leaf - o.min_leaf + 1) : o.bytes / o.leaves;
    std::vector<float> leaf(n / sizeof(float));
    for (auto& x : leaf) x = static_cast<float>(rng() % 100000);
    bytes += leaf.size() * sizeof(float);
    char name[32];
    std::snprintf(name, sizeof name, "layers.%zu.w", i);
    tensors[name] = leaf;
    state["x"].push_back(std::move(leaf));
  }
  std::filesystem::remove_all(o.dir);
  std::filesystem::create_directories(o.dir);
  const std::string raw_dir = o.dir + "/raw", raw = raw_dir + "/raw.bin", file = o.dir + "/model.safetensors";
  std::vector<double> raw_w, save_t, raw_r, load_t;
  cairn::SafetensorsSaveOptions so;
  so.overwrite = true;
  cairn::SafetensorsOptions whole;
  whole.separator = "";
  for (int k = 0; k < o.repeat; ++k) {
    std::filesystem::remove_all(raw_dir);
    ::sync();
    double t0 = now_s();
    std::filesystem::create_directories(raw_dir);
    raw_write<float>(state, raw);
    raw_w.push_back(now_s() - t0);
  }
  for (int k = 0; k < o.repeat; ++k) {
    std::filesystem::remove(file);
    ::sync();
    const double t0 = now_s();
    cairn::save_safetensors(file, tensors, so);
    save_t.push_back(now_s() - t0);
  }
  auto target = tensors;
  for (int k = 0; k < o.repeat; ++k) {
    if (!o.warm) { evict(raw); evict(file); }
    double t0 = now_s();
    raw_read<float>(state, raw);
    raw_r.push_back(now_s() - t0);
    t0 = now_s();
    cairn::load_safetensors(file, target, {}, whole);
    load_t.push_back(now_s() - t0);
  }
  if (target != tensors) { std::fprintf(stderr, "cairn-bench: the imported tensors differ!\n"); std::exit(1); }
  const double gib = static_cast<double>(bytes) / (1u << 30);
  std::printf("cairn-bench --safetensors: %zu float32 tensors, %.3f GiB in %s (%s reads, median of %d)\n", o.leaves, gib,
              o.dir.c_str(), o.warm ? "warm" : "cold", o.repeat);
  std::printf("  %-28s %10.1f ms  %8.2f GiB/s\n", "plain write + fsync", median(raw_w) * 1e3, gib / median(raw_w));
  std::printf("  %-28s %10.1f ms  %8.2f GiB/s  %.2fx of plain\n", "save_safetensors", median(save_t) * 1e3,
              gib / median(save_t), median(raw_w) / median(save_t));
  std::printf("  %-28s %10.1f ms  %8.2f GiB/s\n", "plain read", median(raw_r) * 1e3, gib / median(raw_r));
  std::printf("  %-28s %10.1f ms  %8.2f GiB/s  %.2fx of plain\n", "load_safetensors (into)", median(load_t) * 1e3,
              gib / median(load_t), median(raw_r) / median(load_t));
  std::filesystem::remove_all(o.dir);
  return 0;
}

// ---- Checkpointer (async) benchmarks ----

int async_bench(const Options& o) {
  using Tree = std::vector<std::vector<float>>;
  std::mt19937_64 rng(1);
  Tree state(o.leaves);
  for (auto& leaf : state) {
    leaf.resize(static_cast<std::size_t>(o.bytes / o.leaves / sizeof(float)));
    for (auto& x : leaf) x = static_cast<float>(rng() % 1000);
  }
  const double mib = static_cast<double>(o.bytes) / (1 << 20);
  std::filesystem::remove_all(o.dir);

  // 1. How long save_async blocks, beside one in-memory copy of the state.
  std::vector<double> copy_t, block_t, total_t;
  {
    cairn::CheckpointerOptions co;
    co.retention = cairn::RetentionPolicy::keep_latest(1);
    cairn::Checkpointer ck(o.dir + "/blocking", co);
    for (int rep = 0; rep < o.repeat; ++rep) {
      double t0 = now_s();
      Tree copy = state;
      copy_t.push_back(now_s() - t0);
      copy = Tree();
      t0 = now_s();
      ck.save_async(rep + 1, state);
      block_t.push_back(now_s() - t0);
      ck.wait();
      total_t.push_back(now_s() - t0);
    }
  }
  // 2. A training loop: each step computes for step_ms and updates the state; with and without
  //    an async checkpoint every step.
  auto loop = [&](bool checkpoint, int n) {
    cairn::CheckpointerOptions co;
    co.retention = cairn::RetentionPolicy::keep_latest(2);
    cairn::Checkpointer ck(o.dir + (checkpoint ? "/loop" : "/noloop"), co);
    const double t0 = now_s();
    for (int step = 1; step <= n; ++step) {
      const double until = now_s() + o.step_ms / 1000.0;
      float acc = 0;
      while (now_s() < until) acc += 1.0f;  // stands for the forward and backward pass
      state[static_cast<std::size_t>(step) % state.size()][0] = acc;
      if (checkpoint) ck.save_async(step, state);
    }
    ck.wait();
    return n / (now_s() - t0);
  };
  const int loop_steps = 40;
  const double plain_rate = loop(false, loop_steps);
  const double ckpt_rate = loop(true, loop_steps);

  // 3. RSS across many async saves.
  std::uint64_t rss_first = 0, rss_last = 0;
  {
    cairn::CheckpointerOptions co;
    co.retention = cairn::RetentionPolicy::keep_latest(2);
    cairn::Checkpointer ck(o.dir + "/many", co);
    for (int i = 1; i <= o.saves; ++i) {
      state[0][0] = static_cast<float>(i);
      ck.save_async(i, state);
      if (i == 10) { ck.wait(); rss_first = rss_bytes(); }
    }
    ck.wait();
    rss_last = rss_bytes();
  }
  std::filesystem::remove_all(o.dir);
  const double copy = median(copy_t), block = median(block_t), total = median(total_t);
  if (o.json) {
    std::printf("{\"state_bytes\":%llu,\"leaves\":%zu,\"copy_s\":%.6f,\"save_async_blocks_s\":%.6f,\"blocks_vs_copy\":%.3f,"
                "\"save_async_total_s\":%.6f,\"loop_steps_per_s_plain\":%.3f,\"loop_steps_per_s_checkpointing\":%.3f,"
                "\"loop_ratio\":%.3f,\"saves\":%d,\"rss_after_10_bytes\":%llu,\"rss_after_all_bytes\":%llu}\n",
                static_cast<unsigned long long>(o.bytes), o.leaves, copy, block, block / copy, total, plain_rate, ckpt_rate,
                ckpt_rate / plain_rate, o.saves, static_cast<unsigned long long>(rss_first),
                static_cast<unsigned long long>(rss_last));
    return 0;
  }
  std::printf("cairn-bench --async: state of %.1f MiB in %zu leaves, in %s (median of %d)\n", mib, o.leaves, o.dir.c_str(), o.repeat);
  std::printf("  %-34s %9.2f ms\n", "copy the state once in memory", copy * 1e3);
  std::printf("  %-34s %9.2f ms  %.2fx of the copy\n", "save_async blocks for", block * 1e3, block / copy);
  std::printf("  %-34s %9.2f ms\n", "until committed (wait)", total * 1e3);
  std::printf("  %-34s %9.2f steps/s\n", "loop, no checkpoints", plain_rate);
  std::printf("  %-34s %9.2f steps/s  %.2fx  (%.0f ms of compute per step)\n", "loop, save_async every step", ckpt_rate,
              ckpt_rate / plain_rate, o.step_ms);
  std::printf("  %-34s %9.1f MiB after 10 saves, %.1f MiB after %d\n", "RSS across async saves",
              static_cast<double>(rss_first) / (1 << 20), static_cast<double>(rss_last) / (1 << 20), o.saves);
  return 0;
}

}  // namespace

// ---- Sharding benchmarks ----

// Median seconds of `repeat` runs of f.
template <class F>
double time_median(int repeat, F&& f) {
  std::vector<double> t;
  for (int i = 0; i < repeat; ++i) {
    const double t0 = now_s();
    f();
    t.push_back(now_s() - t0);
  }
  return median(t);
}

// The array of the sharding and GPU figures: [rows, 4096] float32 of about --bytes.
struct ShardedBenchArray {
  std::int64_t rows, cols;
  cairn::Shape shape;
  std::size_t n, bytes;  // elements, bytes
  explicit ShardedBenchArray(const Options& o)
      : rows(std::max<std::int64_t>(8, static_cast<std::int64_t>(o.bytes / (4096 * 4)) / 8 * 8)), cols(4096),
        shape{rows, cols}, n(static_cast<std::size_t>(rows * cols)), bytes(n * 4) {}
};

// ---- GPU figures (cairn-bench --sharded or --gpu, built with nvcc) ----
int gpu_bench(const Options& o) {
#if CAIRN_CUDA
  using cairn::Mesh;
  using cairn::NamedSharding;
  using cairn::PartitionSpec;
  const ShardedBenchArray array(o);
  const std::int64_t rows = array.rows, cols = array.cols;
  const cairn::Shape& shape = array.shape;
  const std::size_t n = array.n, bytes = array.bytes;
  const cairn::Box whole = cairn::whole_box(shape);
  // 3. GPU: staging device shards to pinned host memory, and device casts.
  int devices = 0;
  if (cudaGetDeviceCount(&devices) == cudaSuccess && devices > 0) {
    cairn::detail::DeviceBytes d(bytes, 0), d2(bytes, 0);
    cairn::detail::PinnedBytes pinned(bytes);
    CAIRN_CUDA_CHECK(cudaMemset(d.data(), 1, bytes));
    const double t_pinned = time_median(o.repeat, [&] {
      CAIRN_CUDA_CHECK(cudaMemcpy(pinned.data(), d.data(), bytes, cudaMemcpyDeviceToHost));
    });
    std::printf("  GPU: cudaMemcpy device -> pinned host     %8.1f ms  %6.2f GB/s\n", t_pinned * 1e3, bytes / t_pinned / 1e9);
    // cairn's staging: write-sized pieces through two pinned buffers (no file: the copy alone).
    const std::size_t piece = cairn::detail::write_piece_bytes;
    cairn::detail::PinnedBytes bufs[2] = {cairn::detail::PinnedBytes(piece), cairn::detail::PinnedBytes(piece)};
    const double t_stage = time_median(o.repeat, [&] {
      for (std::size_t off = 0, k = 0; off < bytes; off += piece, ++k)
        cairn::detail::copy_bytes(bufs[k % 2].data(), cairn::MemoryKind::host, static_cast<char*>(d.data()) + off,
                                  cairn::MemoryKind::device, std::min(piece, bytes - off));
    });
    std::printf("  GPU: cairn staging in %zu MiB pieces        %8.1f ms  %6.2f GB/s  %.2fx of cudaMemcpy\n", piece >> 20,
                t_stage * 1e3, bytes / t_stage / 1e9, t_pinned / t_stage);
    const double t_d2d = time_median(o.repeat, [&] {
      CAIRN_CUDA_CHECK(cudaMemcpy(d2.data(), d.data(), bytes, cudaMemcpyDeviceToDevice));
      CAIRN_CUDA_CHECK(cudaDeviceSynchronize());  // a device-to-device copy returns before it is done
    });
    const double bw_d2d = 2.0 * bytes / t_d2d;
    std::printf("  GPU: cudaMemcpy device -> device           %8.1f ms  %6.2f GB/s (read + write)\n", t_d2d * 1e3, bw_d2d / 1e9);
    const double t_cast = time_median(o.repeat, [&] {
      cairn::detail::cast_device(cairn::DType::float32, d.data(), cairn::DType::bfloat16, d2.data(), n,
                                 cairn::OnOverflow::error);
      CAIRN_CUDA_CHECK(cudaDeviceSynchronize());
    });
    std::printf("  GPU: cast float32 -> bfloat16 on device    %8.1f ms  %6.2f GB/s  %.2fx of device copy\n",
                t_cast * 1e3, 6.0 * n / t_cast / 1e9, 6.0 * n / t_cast / bw_d2d);
    // Box copies on the device: the row kernel (what box_copy_device runs for contiguous rows)
    // and the element kernel (strided rows), each beside a device-to-device copy of the same
    // bytes. (The copy engine's 2-D copies that the row kernel replaced: 0.81x for the column
    // block, measured with 18f3323's bench.)
    auto box_figures = [&](const char* what, const cairn::detail::BoxCopyPlan& plan, std::size_t moved) {
      const double t_rows = time_median(o.repeat, [&] {
        cairn::detail::box_copy_device(4, d.data(), d2.data(), plan, 0);
        CAIRN_CUDA_CHECK(cudaDeviceSynchronize());
      });
      std::printf("  GPU: box copy, %-27s %8.2f ms  %6.2f GB/s  %.2fx of device copy (box_copy_device)\n", what,
                  t_rows * 1e3, 2.0 * moved / t_rows / 1e9, 2.0 * moved / t_rows / bw_d2d);
      const double t_elem = time_median(o.repeat, [&] {
        cairn::detail::box_copy(thrust::device, 4, d.data(), d2.data(), plan, 1);  // one thread per element
        CAIRN_CUDA_CHECK(cudaDeviceSynchronize());
      });
      std::printf("  GPU:   the same by the element kernel      %8.2f ms  %6.2f GB/s  %.2fx\n", t_elem * 1e3,
                  2.0 * moved / t_elem / 1e9, 2.0 * moved / t_elem / bw_d2d);
    };
    const cairn::Box column_block{{0, cols / 4}, {rows, cols / 4}};
    box_figures("column block (4 KiB rows)", cairn::detail::plan_box_copy(column_block, whole, false, column_block, false),
                bytes / 4);
    // A 3-D array [rows/16, 16, cols] split on its last axis 64 ways: rows of 256 bytes, more
    // outer indices than the 2-D copies took (4,096), which went to the element kernel.
    const cairn::Shape cube{rows / 16, 16, cols};
    const cairn::Box narrow{{0, 0, cols / 2}, {rows / 16, 16, cols / 64}};
    box_figures("[., 16, 64] of a 3-D array",
                cairn::detail::plan_box_copy(narrow, cairn::whole_box(cube), false, narrow, false), bytes / 64);
    const cairn::Box half{{0, 0}, {rows, cols / 2}};
    box_figures("C -> F order (a transpose)", cairn::detail::plan_box_copy(half, whole, false, half, true), bytes / 2);
    // What a page-locked buffer costs to make (the reason kept buffers are reused).
    {
      const std::size_t pin = cairn::detail::device_read_piece_bytes;
      void* p = nullptr;
      const double t0 = now_s();
      CAIRN_CUDA_CHECK(cudaMallocHost(&p, pin));
      const double t_pin = now_s() - t0;
      CAIRN_CUDA_CHECK(cudaFreeHost(p));
      const double t1 = now_s();
      { cairn::detail::PinnedBytes kept(pin); }
      { cairn::detail::PinnedBytes again(pin); }
      const double t_kept = now_s() - t1;
      std::printf("  GPU: cudaMallocHost of %zu MiB              %8.2f ms (PinnedBytes made twice, kept: %.2f ms)\n",
                  pin >> 20, t_pin * 1e3, t_kept * 1e3);
    }

    // End to end: a device array saved to and loaded from disk, beside the limit measured in
    // this run: the whole array copied to pinned memory, written and fsynced (save), and read
    // into pinned memory and copied to the device (load), as one file.
    std::filesystem::create_directories(o.dir);
    const std::string raw = o.dir + "/gpu-raw.bin", ckpt = o.dir + "/gpu";
    std::vector<float> values(n);  // (src was freed after the host figures)
    for (std::size_t i = 0; i < n; ++i) values[i] = static_cast<float>(i % 100003) * 0.25f;
    auto dev = cairn::ShardedArray<float>::from_host(values, shape, NamedSharding(Mesh::device({{"x", 1}}), PartitionSpec{"x"}));
    const double t_raw_save = time_median(o.repeat, [&] {
      CAIRN_CUDA_CHECK(cudaMemcpy(pinned.data(), dev.shards()[0].data(), bytes, cudaMemcpyDeviceToHost));
      const int fd = ::open(raw.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      for (std::size_t off = 0; off < bytes;) {
        const ssize_t w = ::write(fd, pinned.data() + off, std::min<std::size_t>(bytes - off, 1u << 30));
        if (w <= 0) { std::perror("write"); std::exit(1); }
        off += static_cast<std::size_t>(w);
      }
      ::fsync(fd);
      ::close(fd);
    });
    const double t_save = time_median(o.repeat, [&] {
      std::filesystem::remove_all(ckpt);
      cairn::save(ckpt, dev);
    });
    std::printf("  GPU: raw save (D2H pinned + write + fsync) %8.1f ms  %6.2f GB/s\n", t_raw_save * 1e3,
                bytes / t_raw_save / 1e9);
    std::printf("  GPU: cairn::save of a device array          %8.1f ms  %6.2f GB/s  %.2fx of raw\n", t_save * 1e3,
                bytes / t_save / 1e9, t_raw_save / t_save);
    const double t_raw_load = time_median(o.repeat, [&] {
      if (!o.warm) evict(raw);
      const int fd = ::open(raw.c_str(), O_RDONLY);
      for (std::size_t off = 0; off < bytes;) {
        const ssize_t r = ::read(fd, pinned.data() + off, std::min<std::size_t>(bytes - off, 1u << 30));
        if (r <= 0) { std::perror("read"); std::exit(1); }
        off += static_cast<std::size_t>(r);
      }
      ::close(fd);
      CAIRN_CUDA_CHECK(cudaMemcpy(d2.data(), pinned.data(), bytes, cudaMemcpyHostToDevice));
    });
    cairn::ShardedArray<float> back(NamedSharding(Mesh::device({{"x", 1}}), PartitionSpec{"x"}));
    const double t_load = time_median(o.repeat, [&] {
      if (!o.warm) evict_tree(ckpt);
      cairn::load(ckpt, back);
    });
    const double t_load_cast = time_median(o.repeat, [&] {
      if (!o.warm) evict_tree(ckpt);
      cairn::ShardedArray<double> wide(NamedSharding(Mesh::device({{"x", 1}}), PartitionSpec{"x"}));
      cairn::load(ckpt, wide);
    });
    std::printf("  GPU: raw load (read pinned + H2D)          %8.1f ms  %6.2f GB/s\n", t_raw_load * 1e3,
                bytes / t_raw_load / 1e9);
    std::printf("  GPU: cairn::load into a device array        %8.1f ms  %6.2f GB/s  %.2fx of raw\n", t_load * 1e3,
                bytes / t_load / 1e9, t_raw_load / t_load);
    std::printf("  GPU: cairn::load, cast to float64 on load   %8.1f ms  %6.2f GB/s  %.2fx of raw\n", t_load_cast * 1e3,
                bytes / t_load_cast / 1e9, t_raw_load / t_load_cast);
    if (back.gather() != values) { std::fprintf(stderr, "GPU load differs from the saved array\n"); return 1; }
    // Resharding onto the GPU: a checkpoint of 2x4 host shards loaded into one device shard,
    // each stored chunk placed by the device box copy (beside the same raw load).
    const std::string ckpt8 = o.dir + "/gpu-2x4";
    cairn::save(ckpt8, cairn::ShardedArray<float>::from_host(values, shape, NamedSharding(Mesh::host({{"data", 2}, {"model", 4}}),
                                                                                          PartitionSpec{"data", "model"})));
    const double t_reshard = time_median(o.repeat, [&] {
      if (!o.warm) evict_tree(ckpt8);
      cairn::load(ckpt8, back);
    });
    std::printf("  GPU: cairn::load of 2x4 host shards onto it %8.1f ms  %6.2f GB/s  %.2fx of raw\n", t_reshard * 1e3,
                bytes / t_reshard / 1e9, t_raw_load / t_reshard);
    if (back.gather() != values) { std::fprintf(stderr, "GPU resharded load differs from the saved array\n"); return 1; }
    std::filesystem::remove_all(o.dir);
  } else {
    std::printf("  GPU: none visible, GPU figures skipped\n");
  }
#else
  (void)o;
  std::printf("  GPU: this build has no CUDA (build the bench with nvcc for the GPU figures)\n");
#endif
  return 0;
}

int sharded_bench(const Options& o) {
  using cairn::Mesh;
  using cairn::NamedSharding;
  using cairn::PartitionSpec;
  const ShardedBenchArray array(o);
  const std::int64_t rows = array.rows, cols = array.cols;
  const cairn::Shape& shape = array.shape;
  const std::size_t n = array.n, bytes = array.bytes;
  const double gib = static_cast<double>(bytes) / (1u << 30);
  std::printf("cairn-bench --sharded: float32[%lld, %lld] (%.3f GiB) in %s (median of %d, %s reads)\n",
              static_cast<long long>(rows), static_cast<long long>(cols), gib, o.dir.c_str(), o.repeat,
              o.warm ? "warm" : "cold");

  // 1. Kernels on the host backend beside memcpy (bandwidth = bytes read + bytes written).
  std::vector<float> src(n), dst(n);
  std::mt19937 rng(3);
  for (auto& x : src) x = static_cast<float>(rng() % 100000) * 0.01f;
  std::memset(dst.data(), 0, bytes);
  const double t_memcpy = time_median(o.repeat, [&] { std::memcpy(dst.data(), src.data(), bytes); });
  const double bw_memcpy = 2.0 * bytes / t_memcpy;
  auto report_kernel = [&](const char* name, double seconds, double moved) {
    const double bw = moved / seconds;
    std::printf("  %-44s %8.1f ms  %6.2f GB/s  %.2fx of memcpy\n", name, seconds * 1e3, bw / 1e9, bw / bw_memcpy);
  };
  std::printf("  %-44s %8.1f ms  %6.2f GB/s\n", "memcpy (read + write)", t_memcpy * 1e3, bw_memcpy / 1e9);
  const cairn::Box whole = cairn::whole_box(shape);
  {
    // A column block [rows, cols/4]: the reshard of a 'model'-split chunk into a row shard.
    const cairn::Box block{{0, cols / 4}, {rows, cols / 4}};
    const auto plan = cairn::detail::plan_box_copy(block, whole, false, block, false);
    const double t = time_median(o.repeat, [&] { cairn::detail::box_copy_host(4, src.data(), dst.data(), plan); });
    report_kernel("box copy, column block (rows of 4 KiB)", t, 2.0 * bytes / 4);
    // Strided both sides: an [rows/2, cols/2] box from one [rows, cols] array into another.
    const cairn::Box quarter{{rows / 4, cols / 4}, {rows / 2, cols / 2}};
    const auto plan2 = cairn::detail::plan_box_copy(quarter, whole, false, whole, false);
    const double t2 = time_median(o.repeat, [&] { cairn::detail::box_copy_host(4, src.data(), dst.data(), plan2); });
    report_kernel("box copy, strided on both sides (8 KiB rows)", t2, 2.0 * bytes / 4);
    const auto plan3 = cairn::detail::plan_box_copy(whole, whole, false, whole, false);
    const double t3 = time_median(o.repeat, [&] { cairn::detail::box_copy_host(4, src.data(), dst.data(), plan3); });
    report_kernel("box copy, whole array (one run)", t3, 2.0 * bytes);
  }
  {
    std::vector<cairn::bfloat16> half(n);
    const double t = time_median(o.repeat, [&] {
      cairn::cast_host(cairn::DType::float32, src.data(), cairn::DType::bfloat16, half.data(), n);
    });
    report_kernel("cast float32 -> bfloat16", t, 6.0 * n);
    const double t2 = time_median(o.repeat, [&] {
      cairn::cast_host(cairn::DType::bfloat16, half.data(), cairn::DType::float32, dst.data(), n);
    });
    report_kernel("cast bfloat16 -> float32", t2, 6.0 * n);
    std::vector<double> wide(n / 2);
    const double t3 = time_median(o.repeat, [&] {
      cairn::cast_host(cairn::DType::float32, src.data(), cairn::DType::float64, wide.data(), n / 2);
    });
    report_kernel("cast float32 -> float64", t3, 6.0 * n);
    std::vector<std::int32_t> ints(n);
    for (std::size_t i = 0; i < n; ++i) ints[i] = static_cast<std::int32_t>(rng() % 200) - 100;
    std::vector<std::int8_t> narrow(n);
    const double t4 = time_median(o.repeat, [&] {
      cairn::cast_host(cairn::DType::int32, ints.data(), cairn::DType::int8, narrow.data(), n);
    });
    report_kernel("cast int32 -> int8 (range-checked)", t4, 5.0 * n);
    std::vector<cairn::float16> f16(n);
    const double t4b = time_median(o.repeat, [&] {
      cairn::cast_host(cairn::DType::float32, src.data(), cairn::DType::float16, f16.data(), n);
    });
    report_kernel("cast float32 -> float16", t4b, 6.0 * n);
    const double t4c = time_median(o.repeat, [&] {
      cairn::cast_host(cairn::DType::float16, f16.data(), cairn::DType::float32, dst.data(), n);
    });
    report_kernel("cast float16 -> float32", t4c, 6.0 * n);
    for (std::size_t i = 0; i < n; ++i) dst[i] = static_cast<float>(ints[i]) + 0.25f;  // in range: the check passes
    const double t4d = time_median(o.repeat, [&] {
      cairn::cast_host(cairn::DType::float32, dst.data(), cairn::DType::int32, ints.data(), n);
    });
    report_kernel("cast float32 -> int32 (range-checked)", t4d, 8.0 * n);
    // Pairs without a kernel of their own: the source widens to int64 / uint64 / double a
    // block at a time, then converts (docs/compile-time.md); a source of a wide type skips
    // the first step.
    std::vector<std::int16_t> shorts(n);
    for (std::size_t i = 0; i < n; ++i) shorts[i] = static_cast<std::int16_t>(static_cast<std::int32_t>(rng() % 2000) - 1000);
    const double t5 = time_median(o.repeat, [&] {
      cairn::cast_host(cairn::DType::int16, shorts.data(), cairn::DType::float32, dst.data(), n);
    });
    report_kernel("cast int16 -> float32 (two steps)", t5, 6.0 * n);
    const double t6 = time_median(o.repeat, [&] {
      cairn::cast_host(cairn::DType::bfloat16, half.data(), cairn::DType::float16, narrow.data(), n / 2);
    });
    report_kernel("cast bfloat16 -> float16 (two steps)", t6, 2.0 * n);
    const double t7 = time_median(o.repeat, [&] {
      cairn::cast_host(cairn::DType::float64, wide.data(), cairn::DType::int32, ints.data(), n / 2);
    });
    report_kernel("cast float64 -> int32 (range-checked, one step)", t7, 6.0 * n);
    const double t8 = time_median(o.repeat, [&] {
      cairn::cast_host(cairn::DType::float64, wide.data(), cairn::DType::float32, dst.data(), n / 2);
    });
    report_kernel("cast float64 -> float32 (one step)", t8, 6.0 * n);
    const double t9 = time_median(o.repeat, [&] {
      cairn::cast_host(cairn::DType::float64, wide.data(), cairn::DType::bfloat16, half.data(), n / 2);
    });
    report_kernel("cast float64 -> bfloat16 (one step)", t9, 5.0 * n);
  }
  dst = {};

  // 2. Restoring a 2x4-sharded checkpoint onto other shardings beside the same sharding.
  std::filesystem::remove_all(o.dir);
  const NamedSharding saved(Mesh::host({{"data", 2}, {"model", 4}}), PartitionSpec{"data", "model"});
  {
    auto a = cairn::ShardedArray<float>::from_host(src, shape, saved);
    src = {};
    cairn::save(o.dir + "/c", a);
  }
  struct Case { const char* name; NamedSharding sharding; };
  std::vector<Case> cases = {
      {"same sharding (2x4, 'data', 'model')", saved},
      {"one device", NamedSharding(Mesh::host({{"x", 1}}), PartitionSpec{})},
      {"8x1 ('x', None)", NamedSharding(Mesh::host({{"x", 8}}), PartitionSpec{"x"})},
      {"1x8 (None, 'x')", NamedSharding(Mesh::host({{"x", 8}}), PartitionSpec{cairn::replicated, "x"})},
      {"4x2 ('model', 'data')", NamedSharding(Mesh::host({{"data", 2}, {"model", 4}}), PartitionSpec{"model", "data"})},
  };
  // Rounds over the cases in a shuffled order (not one case after another), so that the
  // disk's slow spells fall on every case alike; the median per case is reported.
  std::vector<cairn::ShardedArray<float>> targets;
  for (const auto& c : cases) targets.emplace_back(c.sharding);
  std::vector<std::vector<double>> times(cases.size());
  std::vector<cairn::LoadReport> last(cases.size());
  std::vector<std::size_t> order(cases.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::mt19937 shuffle_rng(11);
  for (int r = 0; r < o.repeat; ++r) {
    std::shuffle(order.begin(), order.end(), shuffle_rng);  // a case's place in a round was seen to matter
    for (std::size_t i : order) {
      if (!o.warm) evict_tree(o.dir);
      const double t0 = now_s();
      last[i] = cairn::load(o.dir + "/c", targets[i]);
      times[i].push_back(now_s() - t0);
    }
  }
  const double same = median(times[0]);
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const double t = median(times[i]);
    if (std::getenv("CAIRN_BENCH_VERBOSE")) {
      for (double x : times[i]) std::printf(" %.0f", x * 1e3);
      std::printf("\n");
    }
    std::printf("  restore onto %-36s %8.1f ms  %6.2f GiB/s  %.2fx the same-sharding time, read %.3fx the needed bytes\n",
                cases[i].name, t * 1e3, gib / t, t / same,
                static_cast<double>(last[i].bytes_read) / static_cast<double>(last[i].bytes_needed));
  }
  targets.clear();
  // A process holding half the mesh with columns split: it reads parts of every chunk.
  {
    Mesh mesh = Mesh::host({{"a", 2}, {"b", 4}});
    mesh.assign_processes({0, 0, 0, 0, 1, 1, 1, 1}, 1);
    // Columns split 8 ways, b major: this process's four strips are every other 512 columns,
    // half of each stored chunk's columns.
    cairn::ShardedArray<float> target(NamedSharding(mesh, PartitionSpec{cairn::replicated, {"b", "a"}}));
    cairn::LoadReport last;
    const double t = time_median(o.repeat, [&] {
      if (!o.warm) evict_tree(o.dir);
      last = cairn::load(o.dir + "/c", target);
    });
    std::printf("  process 1 of 2, columns over 2x4: %8.1f ms, read %llu bytes for %llu needed (%.3fx), %llu unverified\n",
                t * 1e3, static_cast<unsigned long long>(last.bytes_read),
                static_cast<unsigned long long>(last.bytes_needed),
                static_cast<double>(last.bytes_read) / static_cast<double>(last.bytes_needed),
                static_cast<unsigned long long>(last.unverified_bytes));
  }
  // Partial reads of chunks: rows over 3 processes (each process's rows cut through chunks),
  // and slices read by read_arrays (what `cairn show` does).
  auto partial = [&](const char* name, auto&& load_once) {
    cairn::LoadReport last;
    const double t = time_median(o.repeat, [&] {
      if (!o.warm) evict_tree(o.dir);
      last = load_once();
    });
    std::printf("  %-33s %8.1f ms  %6.2f GiB/s of needed, read %.4fx the needed bytes, %llu unverified\n", name,
                t * 1e3, static_cast<double>(last.bytes_needed) / (1u << 30) / t,
                static_cast<double>(last.bytes_read) / static_cast<double>(last.bytes_needed),
                static_cast<unsigned long long>(last.unverified_bytes));
  };
  for (int p : {0, 1}) {
    Mesh mesh = Mesh::host({{"x", 3}});
    mesh.assign_processes({0, 1, 2}, p);
    cairn::ShardedArray<float> target(NamedSharding(mesh, PartitionSpec{"x"}));
    partial(p == 0 ? "process 0 of 3, rows" : "process 1 of 3, rows", [&] { return cairn::load(o.dir + "/c", target); });
  }
  auto slice = [&](const cairn::Box& box) {
    return [&o, box] {
      cairn::LoadReport report;
      cairn::ReadArraysOptions ro;
      ro.boxes = {box};
      cairn::read_arrays(o.dir + "/c", {}, ro, &report);
      return report;
    };
  };
  partial("slice: middle third of the rows", slice(cairn::Box{{rows / 3, 0}, {rows / 3, cols}}));
  partial("slice: 64 x 64 (as cairn show)",
          slice(cairn::Box{{rows / 2 + 5, cols / 3}, {std::min<std::int64_t>(64, rows - rows / 2 - 5), 64}}));
  std::filesystem::remove_all(o.dir);

  return gpu_bench(o);
}

// ---- Growth with the number of leaves ----
// A time that grows faster than the leaves (a cache miss per leaf once the records outgrow the
// cache, a lookup in a map of every key) shows only at scale, and this machine's speed swings
// from one run to the next by more than the effect: so both sizes are built in one process and
// timed in turn, and the fastest and the median of each are compared with the plain read's.
int growth_bench(const Options& o) {
  if (!o.max_leaf) { std::fprintf(stderr, "cairn-bench --growth needs --leaf-bytes MIN:MAX\n"); return 2; }
  struct Size {
    std::size_t leaves;
    State<float> state, target;
    std::string ckpt, raw;
    std::vector<double> read, load, read_new, load_new;
  };
  std::vector<Size> sizes(2);
  sizes[0].leaves = o.leaves;
  sizes[1].leaves = o.leaves * 10;
  std::filesystem::remove_all(o.dir);
  std::filesystem::create_directories(o.dir);
  for (auto& z : sizes) {
    z.state = random_state<float>(o, z.leaves);
    z.ckpt = o.dir + "/ckpt" + std::to_string(z.leaves);
    z.raw = o.dir + "/raw" + std::to_string(z.leaves) + ".bin";
    cairn::save(z.ckpt, z.state);
    raw_write(z.state, z.raw);
    z.target = z.state;
  }
  for (int rep = 0; rep < o.repeat; ++rep)
    for (auto& z : sizes) {
      double t0 = now_s();
      raw_read(z.target, z.raw);
      z.read.push_back(now_s() - t0);
      t0 = now_s();
      cairn::load(z.ckpt, z.target);
      z.load.push_back(now_s() - t0);
      t0 = now_s();
      raw_read_new(z.state, z.raw);
      z.read_new.push_back(now_s() - t0);
      t0 = now_s();
      {
        State<float> fresh = cairn::load<State<float>>(z.ckpt);
        z.load_new.push_back(now_s() - t0);
        if (!same_bits(fresh, z.state)) { std::fprintf(stderr, "cairn-bench: restored state differs!\n"); return 1; }
      }
      if (!same_bits(z.target, z.state)) { std::fprintf(stderr, "cairn-bench: restored state differs!\n"); return 1; }
    }
  std::printf("cairn-bench --growth: %zu and %zu leaves of %llu-%llu bytes, warm, in turn (%d runs each)\n",
              sizes[0].leaves, sizes[1].leaves, static_cast<unsigned long long>(o.min_leaf),
              static_cast<unsigned long long>(o.max_leaf), o.repeat);
  std::printf("  %-28s %10s %10s %10s   %s\n", "fastest / median ms", "small", "large", "growth", "(goal of #12: at most 11x)");
  auto row = [&](const char* what, std::vector<double> Size::*times) {
    auto best = [](std::vector<double> v) { return *std::min_element(v.begin(), v.end()) * 1e3; };
    const double a = best(sizes[0].*times), b = best(sizes[1].*times);
    const double ma = median(sizes[0].*times) * 1e3, mb = median(sizes[1].*times) * 1e3;
    std::printf("  %-28s %4.1f/%5.1f %4.0f/%5.0f %4.1fx/%4.1fx\n", what, a, ma, b, mb, b / a, mb / ma);
  };
  row("plain read", &Size::read);
  row("cairn load (into a state)", &Size::load);
  row("plain read (new buffers)", &Size::read_new);
  row("cairn load<T> (new state)", &Size::load_new);
  std::filesystem::remove_all(o.dir);
  return 0;
}

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) { usage(); std::exit(2); }
      return argv[++i];
    };
    if (a == "--leaves") o.leaves = std::stoul(next());
    else if (a == "--bytes") o.bytes = parse_bytes(next());
    else if (a == "--leaf-bytes") {
      std::string v = next();
      auto colon = v.find(':');
      if (colon == std::string::npos) { usage(); return 2; }
      o.min_leaf = parse_bytes(v.substr(0, colon));
      o.max_leaf = parse_bytes(v.substr(colon + 1));
    } else if (a == "--dtype") o.dtype = next();
    else if (a == "--dir") o.dir = next();
    else if (a == "--repeat") o.repeat = std::max(1, std::stoi(next()));
    else if (a == "--warm") o.warm = true;
    else if (a == "--json") o.json = true;
    else if (a == "--async") o.async = true;
    else if (a == "--saves") o.saves = std::stoi(next());
    else if (a == "--step-ms") o.step_ms = std::stod(next());
    else if (a == "--sharded") o.sharded = true;
    else if (a == "--gpu") o.gpu = true;
    else if (a == "--containers") o.containers = true;
    else if (a == "--safetensors") o.safetensors = true;
    else if (a == "--growth") o.growth = true;
    else { usage(); return a == "--help" || a == "-h" ? 0 : 2; }
  }
  if (o.leaves == 0) { usage(); return 2; }
  if (o.async) return async_bench(o);
  if (o.gpu) return gpu_bench(o);
  if (o.sharded) return sharded_bench(o);
  if (o.containers) return containers_bench(o);
  if (o.safetensors) return safetensors_bench(o);
  if (o.growth) return growth_bench(o);
  Results r;
  if (o.dtype == "float32") r = run<float>(o);
  else if (o.dtype == "float64") r = run<double>(o);
  else if (o.dtype == "int32") r = run<std::int32_t>(o);
  else if (o.dtype == "uint8") r = run<std::uint8_t>(o);
  else if (o.dtype == "bfloat16") r = run<cairn::bfloat16>(o);
  else { std::fprintf(stderr, "cairn-bench: unsupported dtype %s\n", o.dtype.c_str()); return 2; }

  const double gib = static_cast<double>(r.bytes) / (1u << 30);
  const double partial_frac = static_cast<double>(r.partial_bytes) / static_cast<double>(r.checkpoint_bytes);
  if (o.json) {
    std::printf(
        "{\"leaves\":%zu,\"bytes\":%llu,\"dtype\":\"%s\",\"cold_reads\":%s,\"raw_write_fsync_s\":%.6f,\"save_s\":%.6f,"
        "\"save_vs_raw\":%.3f,\"raw_read_s\":%.6f,\"load_s\":%.6f,\"load_vs_raw\":%.3f,\"load_unverified_s\":%.6f,\"raw_read_new_s\":%.6f,\"load_new_s\":%.6f,\"save_extra_rss_bytes\":%lld,"
        "\"load_extra_rss_bytes\":%lld,\"partial_leaves\":%llu,\"partial_bytes_read\":%llu,\"checkpoint_bytes\":%llu,"
        "\"partial_fraction\":%.5f,\"metadata_s\":%.6f,\"metadata_bytes\":%llu}\n",
        o.leaves, static_cast<unsigned long long>(r.bytes), o.dtype.c_str(), o.warm ? "false" : "true", r.raw_write,
        r.save, r.raw_write / r.save, r.raw_read, r.load_into, r.raw_read / r.load_into, r.load_noverify, r.raw_read_new, r.load_new, static_cast<long long>(r.save_extra),
        static_cast<long long>(r.load_extra), static_cast<unsigned long long>(r.partial_leaves),
        static_cast<unsigned long long>(r.partial_bytes), static_cast<unsigned long long>(r.checkpoint_bytes),
        partial_frac, r.metadata, static_cast<unsigned long long>(r.metadata_bytes));
    return 0;
  }
  std::printf("cairn-bench: %zu leaves, %.3f GiB of %s in %s (%s reads, median of %d)\n", o.leaves, gib, o.dtype.c_str(),
              o.dir.c_str(), o.warm ? "warm" : "cold", o.repeat);
  std::printf("  %-28s %10.1f ms  %8.2f GiB/s\n", "plain write + fsync", r.raw_write * 1e3, gib / r.raw_write);
  std::printf("  %-28s %10.1f ms  %8.2f GiB/s  %.2fx of plain\n", "cairn save", r.save * 1e3, gib / r.save, r.raw_write / r.save);
  std::printf("  %-28s %10.1f ms  %8.2f GiB/s\n", "plain read", r.raw_read * 1e3, gib / r.raw_read);
  std::printf("  %-28s %10.1f ms  %8.2f GiB/s  %.2fx of plain\n", "cairn load (into a state)", r.load_into * 1e3, gib / r.load_into, r.raw_read / r.load_into);
  std::printf("  %-28s %10.1f ms  %8.2f GiB/s  %.2fx of plain\n", "  without CRC32C checks", r.load_noverify * 1e3, gib / r.load_noverify, r.raw_read / r.load_noverify);
  std::printf("  %-28s %10.1f ms  %8.2f GiB/s\n", "plain read (new buffers)", r.raw_read_new * 1e3, gib / r.raw_read_new);
  std::printf("  %-28s %10.1f ms  %8.2f GiB/s  %.2fx of plain\n", "cairn load<T> (new state)", r.load_new * 1e3, gib / r.load_new, r.raw_read_new / r.load_new);
  std::printf("  %-28s %10.1f ms  %8.2f GiB/s\n", "plain read (new, not zeroed)", r.raw_read_uninit * 1e3, gib / r.raw_read_uninit);
  std::printf("  %-28s %10.1f ms  %8.2f GiB/s  %.2fx of plain\n", "cairn load<T> (new Arrays)", r.load_new_array * 1e3,
              gib / r.load_new_array, r.raw_read_uninit / r.load_new_array);
  std::printf("  %-28s %10.1f ms  (%.1f MB of _METADATA, from the page cache)\n", "cairn::metadata()", r.metadata * 1e3,
              static_cast<double>(r.metadata_bytes) / 1e6);
  std::printf("  %-28s %10.1f MiB over the state\n", "save peak RSS", static_cast<double>(r.save_extra) / (1 << 20));
  std::printf("  %-28s %10.1f MiB over the restored state\n", "load peak RSS", static_cast<double>(r.load_extra) / (1 << 20));
  std::printf("  %-28s %llu leaves, %llu of %llu bytes read (%.2f%%)\n", "1% partial restore",
              static_cast<unsigned long long>(r.partial_leaves), static_cast<unsigned long long>(r.partial_bytes),
              static_cast<unsigned long long>(r.checkpoint_bytes), 100 * partial_frac);
  return 0;
}
