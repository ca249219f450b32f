// SPDX-License-Identifier: Apache-2.0
// Multi-process tests, run under mpiexec (tests/CMakeLists.txt runs them with 4 ranks and with
// 1). Every rank runs every test case in the same order. Groups of 1 to 4 ranks are carved out
// of MPI_COMM_WORLD, so one run saves on S ranks and loads on L ranks for every S and L up to
// the world size: the reshard matrix across process counts, bit-exact against the global
// arrays that every rank can regenerate from a shared seed.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cairn/mpi.hpp>
#ifdef CAIRN_MPI_ORBAX
#include <cairn/orbax.hpp>
#endif
#ifdef CAIRN_MPI_S3
#include <cairn/s3.hpp>

#include <fstream>
#endif

#include "../test_util.hpp"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

namespace mpitest {

int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}
int world_size() {
  int n = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}
void world_barrier() { MPI_Barrier(MPI_COMM_WORLD); }

// A deadline short enough that a test whose ranks fall out of step fails instead of hanging.
cairn::MpiOptions test_options() {
  cairn::MpiOptions o;
  o.deadline = std::chrono::seconds(60);
  return o;
}

// The first n world ranks as a coordinator; null on the other ranks.
std::unique_ptr<cairn::MpiCoordinator> group(int n, cairn::MpiOptions options = test_options()) {
  MPI_Comm sub = MPI_COMM_NULL;
  MPI_Comm_split(MPI_COMM_WORLD, world_rank() < n ? 0 : MPI_UNDEFINED, world_rank(), &sub);
  if (sub == MPI_COMM_NULL) return nullptr;
  auto c = std::make_unique<cairn::MpiCoordinator>(sub, options);
  MPI_Comm_free(&sub);
  return c;
}

// A directory every rank sees: made by world rank 0, its name broadcast, removed at the end.
struct SharedDir {
  std::string path;
  SharedDir() {
    char buf[256] = {};
    if (world_rank() == 0) {
      std::string p = (std::filesystem::temp_directory_path() / "cairn-mpi-XXXXXX").string();
      std::snprintf(buf, sizeof buf, "%s", p.c_str());
      if (!::mkdtemp(buf)) buf[0] = 0;
    }
    MPI_Bcast(buf, sizeof buf, MPI_CHAR, 0, MPI_COMM_WORLD);
    path = buf;
    REQUIRE(!path.empty());
  }
  ~SharedDir() {
    world_barrier();
    if (world_rank() == 0) std::filesystem::remove_all(path);
  }
  std::string operator/(const std::string& name) const { return path + "/" + name; }
};

// One random engine with the same seed on every rank.
std::mt19937_64& rng() {
  static std::mt19937_64 g = [] {
    std::uint64_t seed = std::random_device{}();
    MPI_Bcast(&seed, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);
    std::printf("mpi_tests: rank %d, seed %llu\n", world_rank(), static_cast<unsigned long long>(seed));
    return std::mt19937_64(seed);
  }();
  return g;
}

template <class T>
std::vector<T> random_bits(std::size_t n) {
  return test::random_bits<T>(n, rng());
}

cairn::Shape random_shape() {
  cairn::Shape s(1 + rng()() % 3);
  for (auto& d : s) d = 1 + static_cast<std::int64_t>(rng()() % 11);
  return s;
}

// A random mesh over `processes` ranks, 1 or 2 devices each, in one or two axes, and a
// random spec over it.
cairn::NamedSharding random_sharding(int processes, int this_process, std::size_t rank) {
  const int per = 1 + static_cast<int>(rng()() % 2);
  const std::int64_t n = static_cast<std::int64_t>(processes) * per;
  std::vector<cairn::MeshAxis> axes;
  if (n % 2 == 0 && rng()() % 2) axes = {{"x", n / 2}, {"y", 2}};
  else axes = {{"x", n}, {"y", 1}};
  if (rng()() % 2) std::swap(axes[0].size, axes[1].size);
  cairn::Mesh mesh = cairn::Mesh::host_per_process(axes, per, this_process);
  std::vector<cairn::PartitionSpec::Dim> dims;
  bool x = false, y = false;
  for (std::size_t d = 0; d < rank; ++d) {
    std::vector<std::string> a;
    switch (rng()() % 4) {
      case 1: if (!x) { a = {"x"}; x = true; } break;
      case 2: if (!y) { a = {"y"}; y = true; } break;
      case 3: if (!x && !y) { a = {"x", "y"}; x = y = true; } break;
      default: break;
    }
    dims.emplace_back(a);
  }
  return cairn::NamedSharding(mesh, cairn::PartitionSpec(std::move(dims)));
}

// The elements of `box` out of a row-major global array, in C order.
template <class T>
std::vector<T> box_of(const std::vector<T>& global, const cairn::Shape& shape, const cairn::Box& box) {
  std::vector<T> out;
  const std::size_t n = shape.size();
  std::vector<std::int64_t> idx(n, 0);
  if (box.elements() == 0) return out;
  for (;;) {
    std::int64_t linear = 0;
    for (std::size_t d = 0; d < n; ++d) linear = linear * shape[d] + box.start[d] + idx[d];
    out.push_back(global[static_cast<std::size_t>(linear)]);
    std::size_t d = n;
    while (d > 0) {
      --d;
      if (++idx[d] < box.shape[d]) break;
      idx[d] = 0;
      if (d == 0) return out;
    }
    if (n == 0) return out;
  }
}

template <class T>
void check_local_shards(const cairn::ShardedArray<T>& a, const std::vector<T>& global, const cairn::Shape& shape) {
  REQUIRE(a.shape() == shape);
  for (const auto& s : a.shards()) {
    const auto want = box_of(global, shape, s.box());
    const auto got = s.to_host();
    REQUIRE(got.size() == want.size());
    CHECK(std::memcmp(got.data(), want.data(), got.size() * sizeof(T)) == 0);
  }
}

struct Iterator {
  std::int64_t position = 0;
  std::uint64_t rng_state = 0;
  template <class A> void serialize(A& ar) { ar(position, rng_state); }
};

struct State {
  cairn::ShardedArray<float> a;
  cairn::ShardedArray<std::int16_t> b;
  cairn::ShardedArray<double> c;
  std::vector<std::uint8_t> plain;
  std::int64_t step = 0;
};
CAIRN_TREE(State, a, b, c, plain, step)

// The global truth of one round: shapes and values, the same on every rank.
struct Truth {
  cairn::Shape sa, sb, sc;
  std::vector<float> a;
  std::vector<std::int16_t> b;
  std::vector<double> c;
  std::vector<std::uint8_t> plain;
  std::int64_t step = 0;
  static Truth make() {
    Truth t;
    t.sa = random_shape();
    t.sb = random_shape();
    t.sc = random_shape();
    t.a = random_bits<float>(cairn::element_count(t.sa));
    t.b = random_bits<std::int16_t>(cairn::element_count(t.sb));
    t.c = random_bits<double>(cairn::element_count(t.sc));
    t.plain = random_bits<std::uint8_t>(1 + rng()() % 100);
    t.step = static_cast<std::int64_t>(rng()() % 100000);
    return t;
  }
  // This rank's state, sharded over `ranks` processes.
  State state(int ranks, int rank) const {
    State s;
    s.a = cairn::ShardedArray<float>::from_host(a, sa, random_sharding(ranks, rank, sa.size()));
    s.b = cairn::ShardedArray<std::int16_t>::from_host(b, sb, random_sharding(ranks, rank, sb.size()));
    s.c = cairn::ShardedArray<double>::from_host(c, sc, random_sharding(ranks, rank, sc.size()));
    s.plain = plain;
    s.step = step;
    return s;
  }
  // An empty target sharded over `ranks` processes.
  State target(int ranks, int rank) const {
    State s;
    s.a = cairn::ShardedArray<float>(random_sharding(ranks, rank, sa.size()));
    s.b = cairn::ShardedArray<std::int16_t>(random_sharding(ranks, rank, sb.size()));
    s.c = cairn::ShardedArray<double>(random_sharding(ranks, rank, sc.size()));
    return s;
  }
  // Every rank's state (or empty target) over `ranks` processes, each drawn from the same
  // position of the shared stream; every rank draws them all, also the ranks outside the group.
  std::vector<State> states(int ranks) const {
    std::vector<State> out;
    for (int r = 0; r < ranks; ++r) {
      auto saved = rng();
      out.push_back(state(ranks, r));
      if (r + 1 < ranks) rng() = saved;
    }
    return out;
  }
  std::vector<State> targets(int ranks) const {
    std::vector<State> out;
    for (int r = 0; r < ranks; ++r) {
      auto saved = rng();
      out.push_back(target(ranks, r));
      if (r + 1 < ranks) rng() = saved;
    }
    return out;
  }
  void check(const State& s) const {
    check_local_shards(s.a, a, sa);
    check_local_shards(s.b, b, sb);
    check_local_shards(s.c, c, sc);
    CHECK(s.plain == plain);
    CHECK(s.step == step);
  }
};

// What S ranks saved, loaded on every rank count L up to the world size, each rank checking
// its shards bit-exactly. load(target, options) is the load (a checkpoint's, an Orbax one's).
template <class Load>
void load_on_every_rank_count(const Truth& truth, int saving, Load&& load) {
  for (int loading = 1; loading <= world_size(); ++loading) {
    std::vector<State> targets = truth.targets(loading);
    if (auto c = group(loading)) {
      CAPTURE(saving);
      CAPTURE(loading);
      State& target = targets[static_cast<std::size_t>(c->rank())];
      cairn::LoadOptions options;
      options.coordinator = c.get();
      const cairn::LoadReport report = load(target, options);
      CHECK(report.loaded.size() == 5);
      truth.check(target);
    }
    world_barrier();
  }
}

}  // namespace mpitest

using namespace mpitest;

TEST_CASE("save on S ranks, load on L ranks, for every S and L up to the world size: bit-exact") {
  SharedDir dir;
  const int world = world_size();
  for (int round = 0; round < 3; ++round)
    for (int saving = 1; saving <= world; ++saving) {
      const Truth truth = Truth::make();
      const auto replicas = rng()() % 2 ? cairn::ReplicaWrites::split : cairn::ReplicaWrites::primary_holder;
      const std::string path = dir / ("r" + std::to_string(round) + "-s" + std::to_string(saving));
      std::vector<State> states = truth.states(saving);
      if (auto c = group(saving)) {
        CAPTURE(saving);
        const cairn::SaveReport report =
            cairn::save(path, states[static_cast<std::size_t>(c->rank())], {.coordinator = c.get(), .replicas = replicas});
        CHECK(report.leaves == 5);
      }
      world_barrier();
      const auto meta = cairn::metadata(path);
      CHECK(meta.data_files.size() <= static_cast<std::size_t>(saving));
      load_on_every_rank_count(truth, saving, [&](State& target, const cairn::LoadOptions& o) { return cairn::load(path, target, o); });
      // One process, no coordinator: plain leaves take the whole arrays.
      if (world_rank() == 0) {
        cairn::LoadOptions o;
        o.subtree = "a";
        const auto whole = cairn::load<cairn::Array<float>>(path, o);
        CHECK(std::memcmp(whole.data(), truth.a.data(), truth.a.size() * sizeof(float)) == 0);
        // A target without a sharding takes the stored host mesh whole.
        State adopted = cairn::load<State>(path);
        CHECK(adopted.b.gather() == truth.b);
      }
      world_barrier();
    }
}

#ifdef CAIRN_MPI_ORBAX
// Orbax on several hosts: each process writes the blocks it holds into its own database
// (ocdbt.process_<rank>/), rank 0 the root database that points into them. Random meshes,
// specs and shapes (uneven splits: padded edge blocks), then every load rank count.
TEST_CASE("Orbax: S ranks export their blocks, L ranks load them resharded, for every S and L") {
  SharedDir dir;
  const int world = world_size();
  for (int saving = 1; saving <= world; ++saving) {
    const Truth truth = Truth::make();
    const std::string path = dir / ("orbax-s" + std::to_string(saving));
    std::vector<State> states = truth.states(saving);
    if (auto c = group(saving)) {
      CAPTURE(saving);
      cairn::OrbaxSaveOptions o;
      o.coordinator = c.get();
      o.zstd_level = saving % 2 ? 0 : 3;
      const cairn::OrbaxSaveReport report = cairn::save_orbax(path, states[static_cast<std::size_t>(c->rank())], o);
      CHECK(report.leaves == 5);
    }
    world_barrier();
    if (saving > 1)
      for (int r = 0; r < saving; ++r)
        CHECK(std::filesystem::is_regular_file(path + "/state/ocdbt.process_" + std::to_string(r) + "/manifest.ocdbt"));
    load_on_every_rank_count(truth, saving, [&](State& target, const cairn::LoadOptions& o) { return cairn::load_orbax(path, target, o); });
    if (world_rank() == 0) CHECK(cairn::verify(path).ok());
    world_barrier();
  }
}
#endif

#ifdef CAIRN_MPI_S3
// No shared filesystem: the ranks meet in a bucket (s3rver on 127.0.0.1, ctest's fixture).
TEST_CASE("S3: every rank uploads its own shards, the primary commits; fewer ranks load them resharded") {
  std::string endpoint;
  {
    std::ifstream in(CAIRN_S3_ENDPOINT_FILE);
    in >> endpoint;
  }
  if (endpoint.empty()) {
    MESSAGE("no S3 test server (tools/s3rver.sh start): skipped");
    return;
  }
  ::setenv("AWS_ENDPOINT_URL", endpoint.c_str(), 1);
  ::setenv("AWS_ACCESS_KEY_ID", "S3RVER", 1);
  ::setenv("AWS_SECRET_ACCESS_KEY", "S3RVER", 1);
  const int world = world_size();
  const std::string uri = "s3://cairn-test/mpi-" + std::to_string(rng()()) + "/ckpt";
  const Truth truth = Truth::make();
  std::vector<State> states = truth.states(world);
  {
    auto c = group(world);
    cairn::save(uri, states[static_cast<std::size_t>(c->rank())], {.coordinator = c.get()});
  }
  world_barrier();
  CHECK(cairn::metadata(uri).data_files.size() <= static_cast<std::size_t>(world));
  for (int loading = 1; loading <= world; ++loading) {
    std::vector<State> targets = truth.targets(loading);
    if (auto c = group(loading)) {
      CAPTURE(loading);
      State& target = targets[static_cast<std::size_t>(c->rank())];
      cairn::LoadOptions options;
      options.coordinator = c.get();
      CHECK(cairn::load(uri, target, options).loaded.size() == 5);
      truth.check(target);
    }
    world_barrier();
  }
}
#endif

TEST_CASE("replicas are written once by their primary holder, or in slabs by every holder") {
  SharedDir dir;
  const int world = world_size();
  if (world < 2) return;
  auto c = group(world);
  // Replicated over every process: one box held by all of them.
  const cairn::Shape shape{static_cast<std::int64_t>(8 * world), 3};
  const auto values = random_bits<float>(static_cast<std::size_t>(cairn::element_count(shape)));
  const cairn::NamedSharding sh(cairn::Mesh::host_per_process({{"x", world}}, 1, c->rank()), cairn::PartitionSpec{});
  const auto a = cairn::ShardedArray<float>::from_host(values, shape, sh);
  cairn::save(dir / "primary", a, {.coordinator = c.get()});
  cairn::save(dir / "split", a, {.coordinator = c.get(), .replicas = cairn::ReplicaWrites::split});
  const auto m1 = cairn::metadata(dir / "primary"), m2 = cairn::metadata(dir / "split");
  CHECK(m1.leaves().at(0).chunks.size() == 1);
  CHECK(m2.leaves().at(0).chunks.size() == static_cast<std::size_t>(world));
  CHECK(m2.data_files.size() == static_cast<std::size_t>(world));
  for (const char* name : {"primary", "split"}) {
    cairn::ShardedArray<float> back(sh);
    cairn::load(dir / name, back, {.coordinator = c.get()});
    const auto got = back.gather();
    CHECK(std::memcmp(got.data(), values.data(), values.size() * sizeof(float)) == 0);  // NaNs included
  }
}

TEST_CASE("per-rank items come back to their rank; another rank count is refused or left alone") {
  SharedDir dir;
  const int world = world_size();
  auto c = group(world);
  Iterator it{1000 * c->rank() + 7, 0x9E3779B97F4A7C15ull ^ static_cast<std::uint64_t>(c->rank())};
  std::vector<double> weights = {1.5, 2.5};
  cairn::save(dir / "ckpt", cairn::Items().tree("weights", weights).object("iterator", it, cairn::per_rank),
              {.coordinator = c.get()});
  const auto meta = cairn::metadata(dir / "ckpt");
  for (int r = 0; r < world; ++r) CHECK(meta.find_item("iterator@" + std::to_string(r)) != nullptr);
  Iterator back;
  std::vector<double> w2;
  cairn::LoadOptions options;
  options.coordinator = c.get();
  cairn::load(dir / "ckpt", cairn::Items().tree("weights", w2).object("iterator", back, cairn::per_rank), options);
  CHECK(back.position == it.position);
  CHECK(back.rng_state == it.rng_state);
  CHECK(w2 == weights);
  world_barrier();
  if (world > 1) {
    // Another number of ranks: an error that says why, or (allow_missing) left as it is.
    if (auto fewer = group(world - 1)) {
      Iterator other{-1, 0};
      cairn::LoadOptions o;
      o.coordinator = fewer.get();
      try {
        cairn::load(dir / "ckpt", cairn::Items().object("iterator", other, cairn::per_rank), o);
        FAIL("loaded per-rank items on another number of ranks");
      } catch (const cairn::Error& e) {
        CHECK(e.kind() == cairn::ErrorKind::structure_mismatch);
        CHECK(std::string(e.what()).find("saved per rank by " + std::to_string(world) + " ranks and is loaded by " +
                                         std::to_string(world - 1)) != std::string::npos);
      }
      o.allow_missing = true;
      const auto reports = cairn::load(dir / "ckpt", cairn::Items().object("iterator", other, cairn::per_rank), o);
      CHECK(other.position == -1);
      CHECK(reports.at(0).second.missing.size() == 1);
    }
    world_barrier();
  }
}

TEST_CASE("one rank fails: nobody publishes, every rank throws naming it, the earlier checkpoint stays") {
  SharedDir dir;
  const int world = world_size();
  auto c = group(world);
  const Truth truth = Truth::make();
  State s = truth.state(world, c->rank());
  cairn::save(dir / "ckpt", s, {.coordinator = c.get()});
  const int failing = world - 1;
  State bad = s;
  bad.plain.assign(3, 9);
  if (c->rank() == failing) bad.a = cairn::ShardedArray<float>();  // cannot be saved
  try {
    cairn::save(dir / "ckpt", bad, {.overwrite = true, .coordinator = c.get()});
    FAIL("the save succeeded");
  } catch (const cairn::Error& e) {
    const std::string what = e.what();
    if (c->rank() == failing) CHECK(what.find("cannot be saved") != std::string::npos);
    else CHECK(what.find("rank " + std::to_string(failing) + " failed") != std::string::npos);
  }
  State back = truth.target(world, c->rank());
  cairn::load(dir / "ckpt", back, {.coordinator = c.get()});
  truth.check(back);
  world_barrier();
  if (world_rank() == 0)
    for (const auto& e : std::filesystem::directory_iterator(dir.path))
      CHECK(e.path().filename() == "ckpt");  // no staging left behind
}

TEST_CASE("a rank whose tree differs only in a shape: nothing is committed, every rank names the leaf and both shapes") {
  SharedDir dir;
  const int world = world_size();
  if (world < 2) return;
  auto c = group(world);
  const std::int64_t cols = c->rank() == world - 1 ? 8 : 7;
  const Eigen::MatrixXf m = Eigen::MatrixXf::Constant(13, cols, 1.0f);
  std::string what;
  try {
    cairn::save(dir / "ckpt", m, {.coordinator = c.get()});
  } catch (const cairn::Error& e) {
    what = e.what();
  }
  CHECK(what.find("float32[13, 7] (column-major) on rank 0 but float32[13, 8] (column-major) on rank " +
                  std::to_string(world - 1)) != std::string::npos);
  world_barrier();
  CHECK(!std::filesystem::exists(dir / "ckpt"));
}

TEST_CASE("a Checkpointer across ranks: same decisions, retention by the primary, async commit from wait()") {
  SharedDir dir;
  const int world = world_size();
  auto c = group(world);
  cairn::CheckpointerOptions options;
  options.coordinator = c.get();
  options.retention = cairn::RetentionPolicy::keep_latest(2);
  options.save_policy = cairn::SavePolicy::every_n_steps(2);
  std::vector<Truth> truths;
  {
    cairn::Checkpointer ckptr(dir / "run", options);
    for (std::int64_t step = 0; step < 8; ++step) {
      truths.push_back(Truth::make());
      State s = truths.back().state(world, c->rank());
      std::int64_t position = step * 10 + c->rank();
      const bool saved = step % 4 == 0
          ? ckptr.save(step, cairn::Items().tree("state", s).object("position", position, cairn::per_rank)).has_value()
          : ckptr.save_async(step, cairn::Items().tree("state", s).object("position", position, cairn::per_rank));
      CHECK(saved == (step % 2 == 0));
    }
    ckptr.wait();
    CHECK(ckptr.steps() == std::vector<std::int64_t>{4, 6});
  }
  world_barrier();
  if (world_rank() == 0) {
    CHECK(!std::filesystem::exists(dir / "run/0"));
    CHECK(std::filesystem::exists(dir / "run/6"));
  }
  // A fresh manager on every rank resumes from the latest step.
  cairn::Checkpointer again(dir / "run", options);
  CHECK(again.latest() == std::optional<std::int64_t>(6));
  State back = truths[6].target(world, c->rank());
  std::int64_t position = -1;
  again.load(cairn::Items().tree("state", back).object("position", position, cairn::per_rank));
  truths[6].check(back);
  CHECK(position == 60 + c->rank());
}

TEST_CASE("a rank that never arrives is a timeout error naming the phase, not a hang") {
  const int world = world_size();
  if (world < 2) return;
  SharedDir dir;
  cairn::MpiOptions o;
  o.deadline = std::chrono::milliseconds(2500);
  {
    auto c = group(world, o);
    std::vector<float> v = {1, 2, 3};
    const int absent = 1;
    if (c->rank() != absent) {
      try {
        cairn::save(dir / "ckpt", v, {.coordinator = c.get()});
        FAIL("the save succeeded without rank 1");
      } catch (const cairn::Error& e) {
        CHECK(e.kind() == cairn::ErrorKind::timeout);
        const std::string what = e.what();
        CHECK(what.find("in phase '") != std::string::npos);
        // Rank 1 is missing (a rank slowed by a loaded machine may be named beside it).
        if (c->rank() == 0)
          CHECK((what.find("rank 1 did not arrive") != std::string::npos || what.find("ranks 1, ") != std::string::npos));
      }
      // The coordinator is out of step now, and says so.
      try {
        cairn::save(dir / "again", v, {.coordinator = c.get()});
        FAIL("a timed-out coordinator was used again");
      } catch (const cairn::Error& e) {
        CHECK(std::string(e.what()).find("timed out earlier") != std::string::npos);
      }
    }
    world_barrier();
  }
  if (world_rank() == 0) CHECK(!std::filesystem::exists(dir / "ckpt"));
}

// Run on its own (ctest mpi-timeout-abort): the job is meant to die.
TEST_CASE("on_timeout = abort: a rank that never arrives stops the job with a message" * doctest::skip()) {
  if (world_size() < 2) return;
  cairn::MpiOptions o;
  o.deadline = std::chrono::milliseconds(1000);
  o.on_timeout = cairn::MpiOptions::OnTimeout::abort;
  auto c = group(world_size(), o);
  SharedDir dir;
  std::vector<float> v = {1, 2, 3};
  if (c->rank() != 1) cairn::save(dir / "ckpt", v, {.coordinator = c.get()});
  std::this_thread::sleep_for(std::chrono::seconds(60));  // rank 1: never arrives
  FAIL("the job was not aborted");
}

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  doctest::Context context(argc, argv);
  // Each rank reports; one rank's failure fails the run.
  const int failed = context.run() != 0 ? 1 : 0;
  int any = 0;
  MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return any;
}
