// SPDX-License-Identifier: Apache-2.0
// The commit protocol (checkpoint/commit.hpp) under injected faults and kills: every I/O call
// of an overwrite failing in turn, the overwrite fallback without an atomic exchange, kills
// between its renames, leftovers of dead saves, and saves that are still running.
#include "test_util.hpp"

#include <atomic>
#include <csignal>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include <sys/stat.h>
#include <sys/wait.h>

namespace {
struct State {
  std::vector<float> small;
  std::vector<double> large;  // over 1 MiB: written straight from memory, checksummed on a thread
  std::int64_t step = 0;
};
CAIRN_TREE(State, small, large, step)

bool operator==(const State& a, const State& b) {
  return a.step == b.step && std::memcmp(a.small.data(), b.small.data(), a.small.size() * 4) == 0 &&
         a.small.size() == b.small.size() && a.large.size() == b.large.size() &&
         std::memcmp(a.large.data(), b.large.data(), a.large.size() * 8) == 0;
}

State make_state(std::int64_t step) {
  return {test::random_bits<float>(300), test::random_bits<double>(200'000), step};
}

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

cairn::SaveOptions overwrite() {
  cairn::SaveOptions o;
  o.overwrite = true;
  return o;
}

// The exchange path (renameat2) where the filesystem has it, or the fallback of two renames.
enum class Publish { exchange, fallback };
}  // namespace

TEST_CASE("every I/O call of an overwrite failing in turn leaves the old checkpoint or the new one") {
  for (Publish mode : {Publish::exchange, Publish::fallback}) {
    CAPTURE(mode == Publish::exchange ? "exchange" : "fallback");
    test::TempDir dir;
    const std::string path = dir / "c";
    const State old_state = make_state(1), new_state = make_state(2);
    cairn::save(path, old_state);
    int n = 1, failed = 0, after_commit = 0;
    for (;; ++n) {
      int calls = 0;
      bool injected = false, threw = false;
      cairn::ErrorKind kind{};
      {
        test::FaultInjection faults([&](const std::string& call, const std::string&) {
          if (call == "renameat2" && mode == Publish::fallback) return EINVAL;
          if (++calls != n) return 0;
          injected = true;
          return call == "close" ? EIO : (call == "pwrite" ? ENOSPC : EIO);
        });
        try {
          cairn::save(path, new_state, overwrite());
        } catch (const cairn::Error& e) {
          threw = true;
          kind = e.kind();
        }
      }
      if (!injected) {
        CHECK_FALSE(threw);
        break;
      }
      CAPTURE(n);
      failed += threw;
      after_commit += threw && kind == cairn::ErrorKind::after_commit;
      // The new checkpoint when the save said so (or said it committed), else the old one, bit-exact.
      const State back = cairn::load<State>(path);
      CHECK(back == (!threw || kind == cairn::ErrorKind::after_commit ? new_state : old_state));
      // Nothing is left beside it once a later save (or cleanup) has looked.
      cairn::detail::clean_leftovers(dir.path);
      CHECK(test::leftovers(dir.path).empty());
      cairn::save(path, old_state, overwrite());
    }
    const std::string summary = std::to_string(n - 1) + " calls, " + std::to_string(failed) + " failed saves, " +
                                std::to_string(after_commit) + " after the commit";
    MESSAGE(summary);
    CHECK(n > 15);            // every call of the protocol was reached
    CHECK(failed == n - 2);   // only a failed lock attempt is not an error (it means "no locks here")
    CHECK(after_commit >= 1);
  }
}

TEST_CASE("a failed close() fails the save: it is where NFS reports write errors") {
  test::TempDir dir;
  const State s = make_state(3);
  for (const std::string file : {"data-0-0.bin", "_METADATA", "_CHECKPOINT"}) {
    CAPTURE(file);
    const std::string path = dir / ("c" + file);
    test::FaultInjection faults([&](const std::string& call, const std::string& p) {
      return call == "close" && ends_with(p, "/" + file) ? EIO : 0;
    });
    CHECK_CAIRN_ERROR(cairn::save(path, s), cairn::ErrorKind::io, "close failed");
    CHECK_FALSE(std::filesystem::exists(path));
  }
  CHECK(test::leftovers(dir.path).empty());
}

TEST_CASE("a failure after the publish is ErrorKind::after_commit, and the checkpoint is there") {
  test::TempDir dir;
  const std::string path = dir / "c";
  const State s = make_state(4);
  {
    test::FaultInjection faults([&](const std::string& call, const std::string& p) {
      return call == "fsync" && p == dir.path ? EIO : 0;  // the parent's fsync after the rename
    });
    CHECK_CAIRN_ERROR(cairn::save(path, s), cairn::ErrorKind::after_commit, "committed and loads");
  }
  CHECK(cairn::load<State>(path) == s);
  // The Checkpointer lists such a step although the save threw.
  cairn::Checkpointer ck(dir / "root");
  {
    test::FaultInjection faults([&](const std::string& call, const std::string& p) {
      return call == "fsync" && p == dir / "root" ? EIO : 0;
    });
    CHECK_CAIRN_ERROR(ck.save(5, s), cairn::ErrorKind::after_commit, "committed and loads");
  }
  CHECK(ck.steps() == std::vector<std::int64_t>{5});
  State back;
  ck.load(back);
  CHECK(back == s);
}

TEST_CASE("the overwrite fallback: a kill between its two renames loses nothing") {
  test::TempDir dir;
  const std::string path = dir / "c";
  const State old_state = make_state(1), new_state = make_state(2);
  cairn::save(path, old_state);
  pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    test::FaultInjection faults([&](const std::string& call, const std::string& p) {
      if (call == "renameat2") return EINVAL;  // as on NFS, CIFS and most FUSE filesystems
      if (call == "rename" && p.find(".cairn-tmp-") != std::string::npos && !ends_with(p, ".old")) ::_exit(7);
      return 0;
    });
    cairn::save(path, new_state, overwrite());
    ::_exit(0);
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 7);
  CHECK_FALSE(std::filesystem::exists(path));  // the moment the fallback leaves F empty
  // load and metadata read the set-aside checkpoint meanwhile.
  CHECK(cairn::load<State>(path) == old_state);
  CHECK(cairn::metadata(path).leaves().size() == 3);
  // The next save of the path puts it back first, so the overwrite rule holds.
  CHECK_CAIRN_ERROR(cairn::save(path, new_state), cairn::ErrorKind::already_exists, "already exists");
  CHECK(std::filesystem::exists(path + "/_CHECKPOINT"));
  CHECK(cairn::load<State>(path) == old_state);
  CHECK(test::leftovers(dir.path).empty());
}

TEST_CASE("the overwrite fallback: a failed second rename puts the old checkpoint back") {
  test::TempDir dir;
  const std::string path = dir / "c";
  const State old_state = make_state(1), new_state = make_state(2);
  cairn::save(path, old_state);
  {
    test::FaultInjection faults([&](const std::string& call, const std::string& p) {
      if (call == "renameat2") return EINVAL;
      return call == "rename" && !ends_with(p, ".old") && p.find(".cairn-tmp-") != std::string::npos ? EIO : 0;
    });
    CHECK_CAIRN_ERROR(cairn::save(path, new_state, overwrite()), cairn::ErrorKind::io, "rename failed");
  }
  CHECK(cairn::load<State>(path) == old_state);
  CHECK(test::leftovers(dir.path).empty());
  // And without faults the fallback replaces it.
  test::FaultInjection faults([](const std::string& call, const std::string&) { return call == "renameat2" ? EINVAL : 0; });
  cairn::save(path, new_state, overwrite());
  CHECK(cairn::load<State>(path) == new_state);
  CHECK(test::leftovers(dir.path).empty());
}

TEST_CASE("SIGKILL during overwrites with slow renames and no atomic exchange: the path always loads") {
  test::TempDir dir;
  const std::string path = dir / "c";
  State s = make_state(0);
  s.large.resize(20'000);
  cairn::save(path, s);
  int gaps = 0;
  const int trials = 40;
  for (int trial = 0; trial < trials; ++trial) {
    pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {
      test::FaultInjection faults([](const std::string& call, const std::string&) {
        if (call == "renameat2") return EINVAL;
        if (call == "rename") ::usleep(20'000);  // a rename as slow as on NFS
        return 0;
      });
      State next = s;
      for (std::int64_t step = 1;; ++step) {
        next.step = step;
        next.small[0] = static_cast<float>(step);
        cairn::save(path, next, overwrite());
      }
    }
    ::usleep(static_cast<useconds_t>(5'000 + test::rng()() % 80'000));
    ::kill(child, SIGKILL);
    ::waitpid(child, nullptr, 0);
    gaps += !std::filesystem::exists(path);
    // Some complete checkpoint loads, whole: the step and the first value agree.
    const State back = cairn::load<State>(path);
    // Compared as bits: the state's values are random bits, and where the first is a NaN (one
    // run in 250) == failed every load that found step 0 (CI met it on 2026-11-27).
    const float want = back.step == 0 ? s.small[0] : static_cast<float>(back.step);
    CHECK(std::memcmp(&back.small[0], &want, sizeof want) == 0);
    if (trial % 2) {
      cairn::detail::clean_leftovers(dir.path);  // as the next save or Checkpointer does
      CHECK(std::filesystem::exists(path + "/_CHECKPOINT"));
      CHECK(test::leftovers(dir.path).empty());
    }
  }
  const std::string summary = std::to_string(gaps) + " of " + std::to_string(trials) +
                              " kills landed between the fallback's two renames";
  MESSAGE(summary);
  cairn::detail::clean_leftovers(dir.path);
  CHECK(test::leftovers(dir.path).empty());
}

// A file's fsync puts its bytes on disk; its name is there only once the directory holding it
// is fsynced, and a new directory's once its parent is. What the hook sees, in order.
struct SyncLog {
  std::mutex mu;
  std::vector<std::pair<std::string, std::string>> calls;  // (call, path)
  std::size_t index_of(const std::string& call, const std::string& path) {
    for (std::size_t i = 0; i < calls.size(); ++i)
      if (calls[i].first == call && calls[i].second == path) return i;
    return calls.size();
  }
  // The rename (renameat2, or rename where it falls back) of a path that starts with `prefix`.
  std::size_t rename_of(const std::string& prefix) {
    for (std::size_t i = 0; i < calls.size(); ++i)
      if ((calls[i].first == "renameat2" || calls[i].first == "rename") && calls[i].second.rfind(prefix, 0) == 0) return i;
    return calls.size();
  }
};

TEST_CASE("every directory of a staged checkpoint, and every parent made for it, is fsynced before the publish") {
  test::TempDir dir;
  SyncLog log;
  test::FaultInjection record([&](const std::string& call, const std::string& p) {
    std::lock_guard<std::mutex> lock(log.mu);  // (the directories are fsynced on several threads)
    log.calls.emplace_back(call, p);
    return 0;
  });
  SUBCASE("a staged tree with subdirectories, under parents that did not exist") {
    cairn::PosixStore store(dir.path);
    auto staging = store.stage("made/for/it/c", false);
    const std::string staged = dir / staging->key();
    std::map<std::string, std::uint64_t> expected;
    for (const std::string name : {"top.bin", "a/x.bin", "a/b/y.bin", "a/b/c/z.bin", "d/w.bin"}) {
      const std::string bytes = "bytes of " + name;
      auto w = store.create(cairn::detail::join_key(staging->key(), name));
      w->write_at(bytes.data(), bytes.size(), 0);
      w->finish(bytes.size());
      expected[name] = bytes.size();
    }
    staging->publish(expected);
    const std::size_t rename = log.rename_of(staged);
    REQUIRE(rename < log.calls.size());
    for (const std::string sub : {"", "/a", "/a/b", "/a/b/c", "/d"}) {
      CAPTURE(sub);
      CHECK(std::filesystem::is_directory(dir / ("made/for/it/c" + sub)));
      CHECK(log.index_of("fsync", staged + sub) < rename);
    }
    // Each parent made is in its own parent's listing on disk before the checkpoint is; the
    // checkpoint's own parent is fsynced after the rename, which puts the checkpoint there.
    for (const std::string& parent : {dir.path, dir / "made", dir / "made/for"}) {
      CAPTURE(parent);
      CHECK(log.index_of("fsync", parent) < rename);
    }
    CHECK(log.index_of("fsync", dir / "made/for/it") > rename);
    CHECK(log.index_of("fsync", dir / "made/for/it") < log.calls.size());
  }
  SUBCASE("a save into parents that did not exist") {
    const State s = make_state(3);
    cairn::save(dir / "x/y/c", s);
    const std::size_t publish = log.rename_of(dir / "x/y/c.cairn-tmp-");
    REQUIRE(publish < log.calls.size());
    CHECK(log.index_of("fsync", dir.path) < publish);
    CHECK(log.index_of("fsync", dir / "x") < publish);
    CHECK(cairn::load<State>(dir / "x/y/c") == s);
  }
  SUBCASE("a single file published atomically (a safetensors export) into parents that did not exist") {
    cairn::PosixStore store(dir.path);
    const std::string bytes = "one blob";
    auto w = store.create_atomically("p/q/file.bin", false);
    w->write_at(bytes.data(), bytes.size(), 0);
    w->finish(bytes.size());
    CHECK(test::read_file(dir / "p/q/file.bin") == bytes);
    const std::size_t publish = log.rename_of(dir / "p/q/file.bin.cairn-tmp-");
    REQUIRE(publish < log.calls.size());
    CHECK(log.index_of("fsync", dir.path) < publish);   // p's name
    CHECK(log.index_of("fsync", dir / "p") < publish);  // q's name
    CHECK(log.index_of("fsync", dir / "p/q") > publish);  // the file's name, after its rename
    CHECK(log.index_of("fsync", dir / "p/q") < log.calls.size());
  }
}

TEST_CASE("interrupted plain saves leave nothing behind after the next save of the path") {
  test::TempDir dir;
  const std::string path = dir / "c";
  const State s = make_state(1);
  for (int trial = 0; trial < 5; ++trial) {
    pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {
      test::FaultInjection faults([](const std::string& call, const std::string& p) {
        if (call == "close" && ends_with(p, "data-0-0.bin")) ::raise(SIGKILL);  // dies with its staging directory
        return 0;
      });
      cairn::save(path, s, overwrite());
      ::_exit(0);
    }
    ::waitpid(child, nullptr, 0);
  }
  // Each save first removed the leftovers of the one killed before it: only the last one's
  // staging directory and lock file are here.
  CHECK(test::leftovers(dir.path).size() == 2);
  cairn::save(path, s, overwrite());
  CHECK(test::leftovers(dir.path).empty());
  CHECK(cairn::load<State>(path) == s);
}

TEST_CASE("a save still running in another process is never cleaned up") {
  test::TempDir dir;
  const std::string root = dir / "root";
  State s = make_state(1);
  cairn::Checkpointer first(root);
  first.save(1, s);

  // Another process, stopped in the middle of its save.
  int ready[2];
  REQUIRE(::pipe(ready) == 0);
  pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    test::FaultInjection faults([&](const std::string& call, const std::string&) {
      if (call == "pwrite") {
        (void)!::write(ready[1], "x", 1);
        ::pause();
      }
      return 0;
    });
    cairn::save(root + "/2", s);
    ::_exit(0);
  }
  char c;
  REQUIRE(::read(ready[0], &c, 1) == 1);
  const auto live = test::leftovers(root);
  CHECK(live.size() == 2);  // its staging directory and lock file
  { cairn::Checkpointer other(root); }
  CHECK(test::leftovers(root) == live);
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  { cairn::Checkpointer other(root); }  // now they are a dead save's
  CHECK(test::leftovers(root).empty());
}

TEST_CASE("a second Checkpointer in this process never removes the first one's save in flight") {
  test::TempDir dir;
  const std::string root = dir / "root";
  State s = make_state(1);
  cairn::Checkpointer first(root);
  first.save(1, s);
  // Each round must commit complete: it used to lose its staging directory to the second
  // Checkpointer's cleanup (and once committed a checkpoint without its data file).
  std::atomic<bool> slow{true};
  test::FaultInjection faults([&](const std::string& call, const std::string&) {
    if (call == "pwrite" && slow) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    return 0;
  });
  for (std::int64_t step = 2; step < 6; ++step) {
    s = make_state(step);
    first.save_async(step, s);
    cairn::Checkpointer second(root);
    first.wait();
    CHECK(cairn::load<State>(first.step_path(step)) == s);
  }
  slow = false;
  CHECK(first.steps() == std::vector<std::int64_t>{1, 2, 3, 4, 5});
  CHECK(test::leftovers(root).empty());
}

TEST_CASE("a leftover lock file alone, or a staging directory without one, is a dead save's") {
  test::TempDir dir;
  cairn::save(dir / "c", make_state(1));
  test::write_file(dir / "c.cairn-tmp-1-abc.lock", "");
  std::filesystem::create_directories(dir / "c.cairn-tmp-1-def");
  std::filesystem::create_directories(dir / "d.cairn-tmp-1-def");  // another path's: left to its own saves
  cairn::save(dir / "c", make_state(2), overwrite());
  CHECK(test::leftovers(dir.path) == std::vector<std::string>{"d.cairn-tmp-1-def"});
  // cairn 0.1 set old checkpoints aside as F.cairn-old-<pid>: put back when F is gone.
  std::filesystem::rename(dir / "c", dir / "c.cairn-old-42");
  CHECK(cairn::load<State>(dir / "c").step == 2);
  cairn::detail::clean_leftovers(dir.path);
  CHECK(cairn::load<State>(dir / "c").step == 2);
  CHECK(test::leftovers(dir.path).empty());
}

// Two saves of one new path without overwrite, racing: exactly one publishes, the other gets
// already_exists, and the path holds the winner's data whole. Both publish paths: a checkpoint
// directory (save) and a single file (save_safetensors); with renameat2 RENAME_NOREPLACE, and
// with the fallback of filesystems that lack it (rename for a directory, link for a file).
namespace {
enum class Racer { save, safetensors };

// What one racing save did: 0 published, 1 already_exists, 2 anything else (printed).
int race_once(Racer kind, const std::string& path, float value) {
  const std::vector<float> data(64, value);
  try {
    if (kind == Racer::save) cairn::save(path, data);
    else cairn::save_safetensors(path, data);
    return 0;
  } catch (const cairn::Error& e) {
    if (e.kind() == cairn::ErrorKind::already_exists) return 1;
    std::fprintf(stderr, "racing save: %s\n", e.what());
    return 2;
  }
}

float stored_value(Racer kind, const std::string& path) {
  std::vector<float> back;
  if (kind == Racer::save) cairn::load(path, back);
  else cairn::load_safetensors(path, back);
  if (back.size() != 64 || std::count(back.begin(), back.end(), back[0]) != 64) return -1;  // mixed: a torn file
  return back[0];
}

void check_race_rounds(Racer kind, bool fallback, bool processes, int rounds) {
  CAPTURE(kind == Racer::save ? "save" : "save_safetensors");
  CAPTURE(fallback);
  std::optional<test::FaultInjection> no_renameat2;
  if (fallback)
    no_renameat2.emplace([](const std::string& call, const std::string&) { return call == "renameat2" ? EINVAL : 0; });
  test::TempDir dir;
  int bad = 0;
  for (int round = 0; round < rounds && bad == 0; ++round) {
    const std::string path = dir / ("r" + std::to_string(round) + (kind == Racer::save ? "" : ".safetensors"));
    int outcome[2] = {-1, -1};
    if (processes) {
      pid_t pids[2];
      for (int i = 0; i < 2; ++i) {
        pids[i] = ::fork();
        if (pids[i] == 0) ::_exit(race_once(kind, path, static_cast<float>(i + 1)));
      }
      for (int i = 0; i < 2; ++i) {
        int status = 0;
        ::waitpid(pids[i], &status, 0);
        outcome[i] = WIFEXITED(status) ? WEXITSTATUS(status) : 3;
      }
    } else {
      std::atomic<int> ready{0};
      std::thread threads[2];
      for (int i = 0; i < 2; ++i)
        threads[i] = std::thread([&, i] {
          ready.fetch_add(1);
          while (ready.load() < 2) {}
          outcome[i] = race_once(kind, path, static_cast<float>(i + 1));
        });
      for (auto& t : threads) t.join();
    }
    const int winners = (outcome[0] == 0) + (outcome[1] == 0);
    const int losers = (outcome[0] == 1) + (outcome[1] == 1);
    if (winners != 1 || losers != 1) {
      ++bad;
      FAIL_CHECK("round " << round << ": outcomes " << outcome[0] << " and " << outcome[1]);
      continue;
    }
    const float winner = outcome[0] == 0 ? 1.0f : 2.0f;
    if (stored_value(kind, path) != winner) {
      ++bad;
      FAIL_CHECK("round " << round << ": the path holds the loser's data");
    }
  }
  CHECK(bad == 0);
  CHECK(test::leftovers(dir.path).empty());
}
}  // namespace

// 1,000 rounds (200 with the fallback) in the optimized build, where the race is measured;
// under a sanitizer, which checks the same code for memory and thread errors at a tenth of the
// speed (a fork of an ASan process is slow), a tenth of them.
constexpr int race_rounds = test::under_sanitizer ? 100 : 1000;

TEST_CASE("two saves racing to one new path on threads: one publishes, the other gets already_exists") {
  for (Racer kind : {Racer::save, Racer::safetensors})
    for (bool fallback : {false, true}) check_race_rounds(kind, fallback, false, fallback ? race_rounds / 5 : race_rounds);
}

TEST_CASE("two saves racing to one new path from another process: one publishes, the other gets already_exists") {
  for (Racer kind : {Racer::save, Racer::safetensors})
    for (bool fallback : {false, true}) check_race_rounds(kind, fallback, true, fallback ? race_rounds / 5 : race_rounds);
}

TEST_CASE("loads racing overwrites of their path get the old checkpoint or the new one, never an error") {
  // Two states of several leaves (a load opens its data files one after another), overwritten
  // in turn by a writer thread while this thread loads. A load that opened one commit and read
  // files of the next used to fail `corrupt` (145 of 9,400 tries); it now runs once more.
  test::TempDir dir;
  const std::string path = dir / "ckpt";
  std::vector<std::vector<float>> states[2];
  for (int s = 0; s < 2; ++s)
    for (int leaf = 0; leaf < 8; ++leaf) states[s].push_back(std::vector<float>(4096 + 1024 * leaf, static_cast<float>(s + 1)));
  cairn::save(path, states[0]);
  std::atomic<bool> stop{false};
  std::atomic<int> overwrites{0};
  std::thread writer([&] {
    for (int i = 1; !stop.load(); ++i) {
      cairn::save(path, states[i % 2], overwrite());
      overwrites.fetch_add(1);
    }
  });
  int loads = 0, errors = 0, mixed = 0;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(8);
  while ((loads < 3000 || overwrites.load() < race_rounds / 5) && std::chrono::steady_clock::now() < until) {
    std::vector<std::vector<float>> back;
    try {
      cairn::load(path, back);
    } catch (const cairn::Error& e) {
      if (++errors <= 3) MESSAGE(std::string(e.what()));
      continue;
    }
    ++loads;
    if (back != states[0] && back != states[1]) ++mixed;
  }
  stop = true;
  writer.join();
  MESSAGE(loads << " loads during " << overwrites.load() << " overwrites");
  CHECK(overwrites.load() > 10);
  CHECK(errors == 0);
  CHECK(mixed == 0);
}
