// SPDX-License-Identifier: Apache-2.0
// Helpers shared by the tests: fresh temporary directories and random data.
#pragma once

#include <cairn/cairn.hpp>
#include <cairn/format/files.hpp>  // marker_json, crc32c: test::resign
#include <cairn/io/file.hpp>  // fault_hook: test::FaultInjection
#include <cairn/store/posix_staging.hpp>  // clean_leftovers, the staging names
#include <doctest/doctest.h>

#include <atomic>
#include <cstdlib>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <fcntl.h>
#include <linux/magic.h>
#include <sys/resource.h>
#include <sys/statfs.h>
#include <unistd.h>

namespace test {

// A fresh directory under the system temp dir, removed when the object goes.
struct TempDir {
  std::string path;
  TempDir() {
    static std::atomic<int> n{0};
    path = (std::filesystem::temp_directory_path() /
            ("cairn-test-" + std::to_string(::getpid()) + "-" + std::to_string(n++))).string();
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  std::string operator/(const std::string& name) const { return path + "/" + name; }
};

// Whether this build runs under AddressSanitizer or ThreadSanitizer (g++ defines
// __SANITIZE_*; clang answers __has_feature): tests that repeat a slow step many times run
// fewer rounds there, where each is many times slower and the same code is what is checked.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
inline constexpr bool under_sanitizer = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
inline constexpr bool under_sanitizer = true;
#else
inline constexpr bool under_sanitizer = false;
#endif
#else
inline constexpr bool under_sanitizer = false;
#endif

inline std::mt19937_64& rng() {
  static std::mt19937_64 g(0xC0FFEE ^ static_cast<unsigned>(::getpid()));
  return g;
}

// Random bits for any trivially copyable element type (every bit pattern, NaNs included). All
// eight bytes of each draw are used: a draw per byte made the tests that fill hundreds of
// megabytes spend most of their time here (GatheredWriter's case of unit-store: 21 s).
template <class T>
std::vector<T> random_bits(std::size_t n, std::mt19937_64& g = rng()) {
  std::vector<T> v(n);
  auto* bytes = reinterpret_cast<unsigned char*>(v.data());
  const std::size_t total = n * sizeof(T);
  std::size_t i = 0;
  for (; i + 8 <= total; i += 8) {
    const std::uint64_t x = g();
    std::memcpy(bytes + i, &x, 8);
  }
  if (i < total) {
    const std::uint64_t x = g();
    std::memcpy(bytes + i, &x, total - i);
  }
  return v;
}

// Bit-exact equality of two vectors (== is false for NaNs, which random_bits makes).
template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

inline std::string read_file(const std::string& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}
// JSON text without white space outside strings: cairn before 0.2 wrote _METADATA through
// cereal, one value per line; it now writes it compact. The same records read the same.
inline std::string compact_json(const std::string& json) {
  std::string out;
  bool in_string = false;
  for (std::size_t i = 0; i < json.size(); ++i) {
    const char c = json[i];
    if (in_string) {
      out += c;
      if (c == '\\' && i + 1 < json.size()) out += json[++i];
      else if (c == '"') in_string = false;
    } else if (c != ' ' && c != '\n' && c != '\t' && c != '\r') {
      out += c;
      in_string = c == '"';
    }
  }
  return out;
}

inline void write_file(const std::string& p, const std::string& content) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out << content;
}

// Writes a file's pages back and drops them from the page cache, so that the next read of it
// goes to the disk (a cold read). False where that cannot be done: on a tmpfs the pages are
// the file.
inline bool drop_from_page_cache(const std::string& p) {
  struct statfs fs {};
  if (::statfs(p.c_str(), &fs) != 0 || fs.f_type == TMPFS_MAGIC) return false;
  const int fd = ::open(p.c_str(), O_RDONLY);
  if (fd < 0) return false;
  ::fdatasync(fd);
  const bool dropped = ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED) == 0;
  ::close(fd);
  return dropped;
}

// Signs whatever _METADATA and _USER_METADATA a checkpoint holds in its commit marker, as a
// buggy or malicious writer would: the checks that follow must come from parsing and
// validation, not from the checksums.
inline void resign(const std::string& ckpt) {
  const std::string meta = read_file(ckpt + "/_METADATA"), user = read_file(ckpt + "/_USER_METADATA");
  auto marker = cairn::detail::marker_json({meta.size(), cairn::crc32c(meta.data(), meta.size())},
                                           {user.size(), cairn::crc32c(user.data(), user.size())});
  write_file(ckpt + "/_CHECKPOINT", marker.dump());
}

// Runs f(rank, coordinator) on `n` ranks that are threads of this process (cairn's ThreadGroup
// coordinator); returns each rank's cairn::Error, if it threw one. No doctest assertion may run
// in f: a failed REQUIRE would throw past the thread.
template <class F>
std::vector<std::optional<cairn::Error>> on_thread_ranks(int n, F&& f) {
  cairn::ThreadGroup group(n);
  std::vector<std::optional<cairn::Error>> errors(static_cast<std::size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      try {
        f(r, group.rank(r));
      } catch (const cairn::Error& e) {
        errors[static_cast<std::size_t>(r)] = e;
      }
    });
  for (auto& t : threads) t.join();
  return errors;
}

// Ranks holding device shards (each rank's mesh says its shard is on its device 0, as every
// process of an MPI job has its GPU 0), as threads of this process: two ranks save a
// [rows, cols] float32 array together, then each count in `load_ranks` loads it resharded by
// rows. Every shard must be on the device, hold its rows' bits and be verified; rank 0 of more
// than two reads part of the first chunk only (its blocks). unit-sharding runs it on the host
// backend, unit-cuda on a GPU.
inline void device_ranks_round_trip(const std::string& dir, std::int64_t rows, std::int64_t cols,
                                    const std::vector<int>& load_ranks) {
  using cairn::Mesh;
  using cairn::NamedSharding;
  using cairn::PartitionSpec;
  using cairn::ShardedArray;
  const auto truth = random_bits<float>(static_cast<std::size_t>(rows * cols));
  const std::string path = dir + "/device-ranks";
  for (const auto& e : on_thread_ranks(2, [&](int r, cairn::Coordinator& c) {
         auto a = ShardedArray<float>::from_host(truth, {rows, cols},
                                                 NamedSharding(Mesh::device_per_process({{"p", 2}}, 1, r), PartitionSpec{"p"}));
         // (No doctest assertion in a rank's thread: a failed REQUIRE would throw past it.)
         if (a.shards().size() != 1 || !a.shards()[0].on_device())
           throw cairn::Error(cairn::ErrorKind::invalid_argument, "rank " + std::to_string(r) + " holds no one device shard");
         cairn::save(path, a, {.coordinator = &c});
       }))
    CHECK_MESSAGE(!e, (e ? e->what() : ""));
  REQUIRE(cairn::verify(path).ok());
  for (const int n : load_ranks) {
    CAPTURE(n);
    std::vector<ShardedArray<float>> got(static_cast<std::size_t>(n));
    std::vector<cairn::LoadReport> reports(static_cast<std::size_t>(n));
    const auto errors = on_thread_ranks(n, [&](int r, cairn::Coordinator& c) {
      got[static_cast<std::size_t>(r)] =
          ShardedArray<float>(NamedSharding(Mesh::device_per_process({{"q", n}}, 1, r), PartitionSpec{"q"}));
      reports[static_cast<std::size_t>(r)] = cairn::load(path, got[static_cast<std::size_t>(r)], {.coordinator = &c});
    });
    for (int r = 0; r < n; ++r) {
      CAPTURE(r);
      const auto& e = errors[static_cast<std::size_t>(r)];
      CHECK_MESSAGE(!e, (e ? e->what() : ""));
      const auto& shards = got[static_cast<std::size_t>(r)].shards();
      REQUIRE(shards.size() == 1);
      CHECK(shards[0].on_device());
      const auto values = shards[0].to_host();
      CHECK(std::memcmp(values.data(), truth.data() + shards[0].box().start[0] * cols, values.size() * sizeof(float)) == 0);
      CHECK(reports[static_cast<std::size_t>(r)].unverified_bytes == 0);
      if (n > 2 && r == 0) CHECK(reports[0].bytes_read < static_cast<std::uint64_t>(rows * cols * 4 / 2));
    }
  }
}

// Entries of a directory whose names contain ".cairn-": staging directories, lock files and
// set-aside checkpoints that a save left behind.
inline std::vector<std::string> leftovers(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name.find(".cairn-") != std::string::npos) out.push_back(name);
  }
  return out;
}

// While alive, every system call of cairn's I/O first asks `rule(call, path)`: an errno value
// makes the call fail with it, 0 lets it run (cairn::detail::fault_hook, the test seam).
class FaultInjection {
 public:
  using Rule = std::function<int(const std::string& call, const std::string& path)>;
  explicit FaultInjection(Rule r) {
    rule() = std::move(r);
    cairn::detail::fault_hook() = &call;
  }
  ~FaultInjection() {
    cairn::detail::fault_hook() = nullptr;
    rule() = nullptr;
  }
  FaultInjection(const FaultInjection&) = delete;
  FaultInjection& operator=(const FaultInjection&) = delete;

 private:
  static Rule& rule() {
    static Rule r;
    return r;
  }
  static int call(const char* c, const std::string& p) { return rule() ? rule()(c, p) : 0; }
};

// Expects a cairn::Error of the given kind whose message contains `needle`.
#define CHECK_CAIRN_ERROR(expr, error_kind, needle)                                        \
  do {                                                                                     \
    bool thrown_ = false;                                                                  \
    try {                                                                                  \
      (void)(expr);                                                                        \
    } catch (const cairn::Error& e_) {                                                     \
      thrown_ = true;                                                                      \
      const std::string what_ = e_.what(); /* (doctest logs a const char* as a pointer) */ \
      CHECK_MESSAGE(e_.kind() == (error_kind), what_);                                     \
      CHECK_MESSAGE(what_.find(needle) != std::string::npos, what_);                       \
    }                                                                                      \
    CHECK_MESSAGE(thrown_, "expected a cairn::Error from " #expr);                         \
  } while (0)

// Sets environment variables for a scope, and puts back what was there.
struct ScopedEnv {
  std::vector<std::pair<std::string, std::optional<std::string>>> saved;
  void set(const std::string& k, const std::string& v) {
    const char* old = std::getenv(k.c_str());
    saved.push_back({k, old ? std::optional<std::string>(old) : std::nullopt});
    ::setenv(k.c_str(), v.c_str(), 1);
  }
  void unset(const std::string& k) {
    const char* old = std::getenv(k.c_str());
    saved.push_back({k, old ? std::optional<std::string>(old) : std::nullopt});
    ::unsetenv(k.c_str());
  }
  ~ScopedEnv() {
    for (auto it = saved.rbegin(); it != saved.rend(); ++it) {
      if (it->second) ::setenv(it->first.c_str(), it->second->c_str(), 1);
      else ::unsetenv(it->first.c_str());
    }
  }
};

// A store over a MemoryStore (`inner`) that a test wraps to watch or change one part: the
// members below forward to it (describe() names the wrapper, `name:key`); the rest of Store
// keeps its defaults. A test derives from it and overrides what it watches.
class ForwardingStore : public cairn::Store {
 public:
  explicit ForwardingStore(std::string name) : name_(std::move(name)) {}
  std::string describe(const std::string& key) const override { return name_ + ":" + key; }
  std::unique_ptr<cairn::StoreReader> open(const std::string& key) const override { return inner.open(key); }
  std::unique_ptr<cairn::StoreWriter> create(const std::string& key) override { return inner.create(key); }
  bool exists(const std::string& key) const override { return inner.exists(key); }
  bool is_blob(const std::string& key) const override { return inner.is_blob(key); }
  std::vector<cairn::StoreEntry> list(const std::string& prefix) const override { return inner.list(prefix); }
  void remove(const std::string& key) override { inner.remove(key); }
  std::unique_ptr<cairn::CheckpointStaging> stage(const std::string& key, bool overwrite) override {
    return inner.stage(key, overwrite);
  }
  void remove_checkpoints(const std::vector<std::string>& keys) override { inner.remove_checkpoints(keys); }
  void write_atomically(const std::string& key, const std::string& content) override { inner.write_atomically(key, content); }
  std::unique_ptr<cairn::StoreWriter> create_atomically(const std::string& key, bool overwrite) override {
    return inner.create_atomically(key, overwrite);
  }
  cairn::MemoryStore inner;

 private:
  std::string name_;
};

// The process's limit on open files lowered to `extra` above the files open now, until the
// object goes (so that a test can ask for more files than the limit without using thousands).
struct LowFileLimit {
  rlimit was{};
  explicit LowFileLimit(std::size_t extra) {
    std::size_t open_now = 0;
    for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) ++open_now;
    REQUIRE(getrlimit(RLIMIT_NOFILE, &was) == 0);
    rlimit low = was;
    low.rlim_cur = open_now + extra;
    REQUIRE(setrlimit(RLIMIT_NOFILE, &low) == 0);
  }
  ~LowFileLimit() { setrlimit(RLIMIT_NOFILE, &was); }
  LowFileLimit(const LowFileLimit&) = delete;
  LowFileLimit& operator=(const LowFileLimit&) = delete;
};

// Converts `src` to `dst` with options `o` and returns how far the source's reading ran ahead
// of the writing at most: the bytes read (progress) less `leaf_bytes` for each write into `dst`
// seen so far (each leaf of the tests is one write of its own, at least). A convert that reads
// its source a batch at a time stays within a batch and a leaf.
inline std::uint64_t convert_read_ahead(const std::string& src, const std::string& dst, cairn::ConvertOptions o,
                                        std::uint64_t leaf_bytes) {
  std::atomic<std::uint64_t> writes{0}, most{0};
  FaultInjection hook([&](const std::string& call, const std::string& path) {
    if (call == "pwrite" && path.rfind(dst, 0) == 0) ++writes;
    return 0;
  });
  o.progress = [&](std::uint64_t done, std::uint64_t) {
    const std::uint64_t written = writes.load() * leaf_bytes;
    if (done > written && done - written > most) most = done - written;
  };
  cairn::convert(src, dst, o);
  return most.load();
}

}  // namespace test
