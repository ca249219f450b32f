// SPDX-License-Identifier: Apache-2.0
// tests/s3/fake_s3.py (Python's standard library) started by a test program on 127.0.0.1 for
// the program's life, with its control requests: faults on command, a reset, counts. Used by
// unit-s3-faults and by the CUDA build's unit-cuda (device leaves against a bucket on a GPU
// machine, which has Python but no npm).
#pragma once

#include <cairn/core/json.hpp>
#include <cairn/s3.hpp>

#include <doctest/doctest.h>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;

namespace test {

class FakeS3 {
 public:
  // `python` is a path or a name looked up on PATH; the environment (FAKE_S3_DELAY and
  // FAKE_S3_STALL, fake_s3.py's timings) is the caller's.
  FakeS3(const std::string& python, const std::string& script) {
    dir_ = (std::filesystem::temp_directory_path() / ("cairn-fake-s3-" + std::to_string(::getpid()))).string();
    std::filesystem::create_directories(dir_);
    std::vector<std::string> args = {python, script, dir_, "--exit-with-parent"};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    if (posix_spawnp(&pid_, argv[0], nullptr, nullptr, argv.data(), environ) != 0) pid_ = 0;
    for (int i = 0; pid_ > 0 && i < 200 && endpoint_.empty(); ++i) {
      std::ifstream in(dir_ + "/endpoint");
      if (!(in >> endpoint_)) std::this_thread::sleep_for(std::chrono::milliseconds(25));
    }
  }
  FakeS3(const FakeS3&) = delete;
  FakeS3& operator=(const FakeS3&) = delete;
  ~FakeS3() {
    if (pid_ > 0) {
      ::kill(pid_, SIGTERM);
      ::waitpid(pid_, nullptr, 0);
    }
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  // Empty where the server did not start.
  const std::string& endpoint() const { return endpoint_; }

  std::string control(const std::string& what, const std::string& method = "POST") {
    cairn::s3::HttpClient http({}, {});
    cairn::s3::HttpRequest r;
    r.method = method;
    r.url = endpoint_ + "/" + what;
    r.body = "";
    const auto resp = http.perform(r);
    REQUIRE(resp.status == 200);
    return resp.body;
  }
  void reset() { control("_reset"); }
  void fault_at(int n, const std::string& how, int count = 1) {
    control("_fault?at=" + std::to_string(n) + "&how=" + how + "&count=" + std::to_string(count));
  }
  void fault_matching(const std::string& match, const std::string& how, int count = 1) {
    control("_fault?match=" + cairn::s3::uri_encode(match, false) + "&how=" + how + "&count=" + std::to_string(count));
  }
  cairn::Json stats() { return cairn::Json::parse(control("_stats", "GET")); }
  // The requests whose "METHOD path?query" holds `match`: the most in flight at once are
  // stats()'s watched_max_in_flight (until the next reset).
  void watch(const std::string& match) { control("_watch?match=" + cairn::s3::uri_encode(match, false)); }

 private:
  std::string dir_, endpoint_;
  pid_t pid_ = 0;
};

}  // namespace test
