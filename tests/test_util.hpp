// SPDX-License-Identifier: Apache-2.0
// Helpers shared by the tests: fresh temporary directories and random data.
#pragma once

#include <cairn/cairn.hpp>
#include <cairn/format/files.hpp>  // marker_json, crc32c: test::resign
#include <cairn/io/file.hpp>  // fault_hook: test::FaultInjection
#include <cairn/store/posix_staging.hpp>  // clean_leftovers, the staging names
#include <doctest/doctest.h>

#include <atomic>
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

inline std::mt19937_64& rng() {
  static std::mt19937_64 g(0xC0FFEE ^ static_cast<unsigned>(::getpid()));
  return g;
}

// Random bits for any trivially copyable element type (every bit pattern, NaNs included).
template <class T>
std::vector<T> random_bits(std::size_t n, std::mt19937_64& g = rng()) {
  std::vector<T> v(n);
  auto* bytes = reinterpret_cast<unsigned char*>(v.data());
  for (std::size_t i = 0; i < n * sizeof(T); ++i) bytes[i] = static_cast<unsigned char>(g());
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
      CHECK_MESSAGE(e_.kind() == (error_kind), e_.what());                                 \
      CHECK_MESSAGE(std::string(e_.what()).find(needle) != std::string::npos, e_.what());  \
    }                                                                                      \
    CHECK_MESSAGE(thrown_, "expected a cairn::Error from " #expr);                         \
  } while (0)

}  // namespace test
