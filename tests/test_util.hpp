// Helpers shared by the tests: fresh temporary directories and random data.
#pragma once

#include <cairn/cairn.hpp>
#include <doctest/doctest.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>

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
std::vector<T> random_bits(std::size_t n) {
  std::vector<T> v(n);
  auto* bytes = reinterpret_cast<unsigned char*>(v.data());
  for (std::size_t i = 0; i < n * sizeof(T); ++i) bytes[i] = static_cast<unsigned char>(rng()());
  return v;
}

inline std::string read_file(const std::string& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}
inline void write_file(const std::string& p, const std::string& content) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out << content;
}

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
