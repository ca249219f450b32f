// cairn-bench: cairn's save and load beside a plain write+fsync and read of the same bytes on
// the same filesystem (the physical ceiling), extra memory, and bytes read by a 1% partial
// restore. See docs/benchmarks.md for the figures and how to read them.
#include <cairn/cairn.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <fcntl.h>
#include <malloc.h>
#include <sys/wait.h>
#include <unistd.h>

namespace {

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
};

std::uint64_t parse_bytes(const std::string& s) {
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  std::string unit = end;
  if (unit == "K" || unit == "KiB") v *= 1024;
  else if (unit == "M" || unit == "MiB") v *= 1024 * 1024;
  else if (unit == "G" || unit == "GiB") v *= 1024.0 * 1024 * 1024;
  return static_cast<std::uint64_t>(v);
}

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
      "  --step-ms MS        compute per training step in the loop benchmark (default 50)");
}

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::uint64_t proc_status_kib(const char* field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(field, 0) == 0) return std::strtoull(line.c_str() + std::strlen(field), nullptr, 10);
  return 0;
}
std::uint64_t rss_bytes() { return proc_status_kib("VmRSS:") * 1024; }
std::uint64_t peak_rss_bytes() { return proc_status_kib("VmHWM:") * 1024; }
// Resets the peak-RSS counter (Linux 4.0+), so each phase measures its own peak.
void reset_peak_rss() { std::ofstream("/proc/self/clear_refs") << "5"; }

void evict(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return;
  ::fdatasync(fd);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}
void evict_tree(const std::string& dir) {
  for (auto& e : std::filesystem::recursive_directory_iterator(dir))
    if (e.is_regular_file()) evict(e.path().string());
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

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

template <class T>
void raw_read(State<T>& into, const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY);
  for (auto& [k, g] : into)
    for (auto& leaf : g) {
      char* p = reinterpret_cast<char*>(leaf.data());
      std::size_t n = leaf.size() * sizeof(T);
      while (n) { ssize_t r = ::read(fd, p, n); if (r <= 0) { std::perror("read"); std::exit(1); } p += r; n -= static_cast<std::size_t>(r); }
    }
  ::close(fd);
}

template <class T>
Results run(const Options& o) {
  std::mt19937_64 rng(42);
  const std::size_t groups = std::min<std::size_t>(100, o.leaves);
  State<T> state;
  Results r;
  for (std::size_t i = 0; i < o.leaves; ++i) {
    std::uint64_t bytes = o.max_leaf ? o.min_leaf + rng() % (o.max_leaf - o.min_leaf + 1) : o.bytes / o.leaves;
    std::vector<T> leaf(bytes / sizeof(T));
    auto* p = reinterpret_cast<unsigned char*>(leaf.data());
    for (std::size_t k = 0; k < leaf.size() * sizeof(T); k += 8) {
      const std::uint64_t w = rng();
      std::memcpy(p + k, &w, std::min<std::size_t>(8, leaf.size() * sizeof(T) - k));
    }
    r.bytes += leaf.size() * sizeof(T);
    char name[16];
    std::snprintf(name, sizeof name, "g%03zu", i % groups);
    state[name].push_back(std::move(leaf));
  }
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
  std::vector<double> raw_w, raw_r, raw_new_t, save_t, load_into_t, load_noverify_t, load_new_t;
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
    {
      State<T> buffers;
      for (auto& [k, g] : state)
        for (auto& leaf : g) buffers[k].emplace_back(leaf.size());
      raw_read(buffers, raw);
    }
    raw_new_t.push_back(now_s() - t0);
    cold();
    t0 = now_s();
    State<T> fresh = cairn::load<State<T>>(ckpt);
    load_new_t.push_back(now_s() - t0);
    if (!same_bits(fresh, state)) { std::fprintf(stderr, "cairn-bench: restored state differs!\n"); std::exit(1); }
  }
  r.raw_write = median(raw_w);
  r.raw_read = median(raw_r);
  r.save = median(save_t);
  r.load_into = median(load_into_t);
  r.load_new = median(load_new_t);
  r.load_noverify = median(load_noverify_t);
  r.raw_read_new = median(raw_new_t);
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
    else { usage(); return a == "--help" || a == "-h" ? 0 : 2; }
  }
  if (o.leaves == 0) { usage(); return 2; }
  if (o.async) return async_bench(o);
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
        "\"partial_fraction\":%.5f}\n",
        o.leaves, static_cast<unsigned long long>(r.bytes), o.dtype.c_str(), o.warm ? "false" : "true", r.raw_write,
        r.save, r.raw_write / r.save, r.raw_read, r.load_into, r.raw_read / r.load_into, r.load_noverify, r.raw_read_new, r.load_new, static_cast<long long>(r.save_extra),
        static_cast<long long>(r.load_extra), static_cast<unsigned long long>(r.partial_leaves),
        static_cast<unsigned long long>(r.partial_bytes), static_cast<unsigned long long>(r.checkpoint_bytes),
        partial_frac);
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
  std::printf("  %-28s %10.1f MiB over the state\n", "save peak RSS", static_cast<double>(r.save_extra) / (1 << 20));
  std::printf("  %-28s %10.1f MiB over the restored state\n", "load peak RSS", static_cast<double>(r.load_extra) / (1 << 20));
  std::printf("  %-28s %llu leaves, %llu of %llu bytes read (%.2f%%)\n", "1% partial restore",
              static_cast<unsigned long long>(r.partial_leaves), static_cast<unsigned long long>(r.partial_bytes),
              static_cast<unsigned long long>(r.checkpoint_bytes), 100 * partial_frac);
  return 0;
}
