// SPDX-License-Identifier: Apache-2.0
#include "test_util.hpp"

#include <csignal>
#include <sys/wait.h>

namespace {
struct Big { std::vector<std::vector<float>> layers; std::int64_t step = 0; };
CAIRN_TREE(Big, layers, step)

// A leaf type whose view fails: a save that breaks half-way through writing.
struct Exploding { int after = 0; };
}  // namespace

template <>
struct cairn::leaf_traits<Exploding> {
  static LeafView view(const Exploding&) { throw std::runtime_error("device lost"); }
  static LeafBuffer prepare(Exploding&, const StoredLeafInfo&) { return {}; }
};

TEST_CASE("a save that fails half-way leaves no checkpoint and no temporary directory") {
  test::TempDir dir;
  std::pair<std::vector<float>, Exploding> bad{std::vector<float>(1 << 20, 1.0f), {}};
  CHECK_THROWS_WITH(cairn::save(dir / "c", bad), "device lost");
  CHECK_FALSE(std::filesystem::exists(dir / "c"));
  CHECK(std::filesystem::is_empty(dir.path));
}

TEST_CASE("a failed overwrite keeps the previous checkpoint loadable") {
  test::TempDir dir;
  std::pair<std::vector<float>, std::vector<float>> good{{1, 2}, {3}};
  cairn::save(dir / "c", good);
  cairn::SaveOptions o;
  o.overwrite = true;
  std::pair<std::vector<float>, Exploding> bad{std::vector<float>(1000, 1.0f), {}};
  CHECK_THROWS(cairn::save(dir / "c", bad, o));
  CHECK(cairn::load<decltype(good)>(dir / "c") == good);
}

TEST_CASE("SIGKILL at random moments of saves leaves either no checkpoint or a complete one") {
  test::TempDir dir;
  Big big;
  for (int i = 0; i < 24; ++i) big.layers.push_back(std::vector<float>(64 * 1024, static_cast<float>(i)));
  int complete = 0, absent = 0;
  for (int trial = 0; trial < 12; ++trial) {
    const std::string path = dir / std::string("c").append(std::to_string(trial));
    // Each trial starts from an older checkpoint that an overwrite replaces.
    big.step = 1;
    cairn::save(path, big);
    pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {
      Big next = big;
      cairn::SaveOptions o;
      o.overwrite = true;
      for (int step = 2;; ++step) {
        next.step = step;
        for (auto& l : next.layers) l[0] = static_cast<float>(step);
        cairn::save(path, next, o);
      }
    }
    ::usleep(static_cast<useconds_t>(2000 + test::rng()() % 60000));
    ::kill(child, SIGKILL);
    int status = 0;
    ::waitpid(child, &status, 0);
    // The path always holds a complete checkpoint (the old one or a newer one) whose leaves agree.
    if (std::filesystem::exists(path)) {
      Big back = cairn::load<Big>(path);
      REQUIRE(back.layers.size() == 24);
      for (auto& l : back.layers) CHECK(l[0] == static_cast<float>(back.step == 1 ? l[1] : back.step));
      ++complete;
    } else {
      ++absent;
    }
  }
  CHECK(absent == 0);  // an overwrite is an atomic exchange: there is never a gap
  CHECK(complete == 12);
}
