// SPDX-License-Identifier: Apache-2.0
// Resharding restore: a randomized matrix checked bit-exactly against the unsharded truth,
// casts during reshard, partial restore of sharded trees, plain leaves into shards, and a
// process that holds part of the mesh reading only its byte ranges.
#include "sharding_util.hpp"

#include <cairn/leaves/thrust_leaves.hpp>  // thrust::host_vector and device_vector leaves
#include <thrust/device_vector.h>

using cairn::Box;
using cairn::Mesh;
using cairn::NamedSharding;
using cairn::PartitionSpec;
using cairn::ShardedArray;
using cairn::Shape;
using test::check_same_bits;
using test::random_mesh;
using test::random_shape;
using test::random_spec;
using test::replace_metadata;

namespace {
struct Model {
  ShardedArray<float> w;
  ShardedArray<float> b;
  std::int64_t step = 0;
};
CAIRN_TREE(Model, w, b, step)
}  // namespace



TEST_CASE("randomized resharding matrix: 1-D to 3-D, meshes 1x1 to 2x4, host and device memory") {
  test::TempDir dir;
  for (int iter = 0; iter < 120; ++iter) {
    const Shape shape = random_shape();
    const auto n = static_cast<std::size_t>(cairn::element_count(shape));
    NamedSharding from(random_mesh(iter % 3 == 1), random_spec(shape.size()));
    NamedSharding to(random_mesh(iter % 3 == 2), random_spec(shape.size()));
    CAPTURE(iter);
    CAPTURE(cairn::to_string(shape));
    CAPTURE(from.describe());
    CAPTURE(to.describe());
    const std::string path = dir / ("c" + std::to_string(iter));
    if (iter % 2 == 0) {
      const auto truth = test::random_bits<float>(n);
      cairn::save(path, ShardedArray<float>::from_host(truth, shape, from));
      ShardedArray<float> target(to);
      auto report = cairn::load(path, target);
      check_same_bits(target.gather(), truth);
      CHECK(report.bytes_read == n * sizeof(float));  // every stored byte once
      CHECK(report.bytes_needed == n * sizeof(float));
      CHECK(report.unverified_bytes == 0);
      // Each shard holds its own box of the truth.
      for (const auto& s : target.shards()) CHECK(s.box() == to.shard_box(shape, s.mesh_position()));
      // Single-host restore of the sharded checkpoint into plain arrays.
      auto plain = cairn::load<cairn::Array<float>>(path);
      CHECK(plain.shape() == shape);
      check_same_bits(std::vector<float>(plain.begin(), plain.end()), truth);
    } else {
      const auto truth = test::random_bits<std::uint8_t>(n);
      cairn::save(path, ShardedArray<std::uint8_t>::from_host(truth, shape, from));
      ShardedArray<std::uint8_t> target(to);
      cairn::load(path, target);
      check_same_bits(target.gather(), truth);
    }
  }
}

TEST_CASE("casting during reshard, on save and on load, for host and device shards") {
  test::TempDir dir;
  for (bool device : {false, true}) {
    std::vector<float> truth(37 * 5);
    std::normal_distribution<float> normal(0.f, 100.f);
    for (auto& v : truth) v = normal(test::rng());
    truth[3] = std::numeric_limits<float>::quiet_NaN();
    truth[4] = -std::numeric_limits<float>::infinity();
    std::vector<cairn::bfloat16> want(truth.size());
    cairn::cast_host(cairn::DType::float32, truth.data(), cairn::DType::bfloat16, want.data(), truth.size());
    const Mesh mesh = device ? Mesh::device({{"x", 2}, {"y", 4}}) : Mesh::host({{"x", 2}, {"y", 4}});
    const NamedSharding from(mesh, PartitionSpec{"x", "y"});
    const NamedSharding to(Mesh::host({{"x", 8}}), PartitionSpec{cairn::replicated, "x"});
    const std::string a = dir / (device ? "load-cast-d" : "load-cast-h");
    cairn::save(a, ShardedArray<float>::from_host(truth, {37, 5}, from));
    ShardedArray<cairn::bfloat16> target(to);
    CHECK_CAIRN_ERROR(cairn::load(a, target), cairn::ErrorKind::dtype_mismatch, "float32 -> bfloat16");
    cairn::LoadOptions narrowing;
    narrowing.allow_lossy_cast = {"**"};
    auto report = cairn::load(a, target, narrowing);
    REQUIRE(report.cast.size() == 1);
    check_same_bits(target.gather(), want);

    // Cast on save (the device shards are cast on the device), then reshard on load.
    cairn::SaveOptions so;
    so.cast = {{"**", cairn::DType::bfloat16}};
    const std::string b = dir / (device ? "save-cast-d" : "save-cast-h");
    auto saved = cairn::save(b, ShardedArray<float>::from_host(truth, {37, 5}, from), so);
    CHECK(saved.bytes_written == truth.size() * 2);
    CHECK(cairn::metadata(b).leaves().at(0).dtype == cairn::DType::bfloat16);
    ShardedArray<cairn::bfloat16> t2(NamedSharding(Mesh::device({{"x", 3}}), PartitionSpec{"x"}));
    cairn::load(b, t2);
    check_same_bits(t2.gather(), want);
    // Narrowing with an out-of-range value is an error naming the key, as for plain leaves.
    ShardedArray<std::int8_t> narrow(to);
    CHECK_CAIRN_ERROR(cairn::load(a, narrow, narrowing), cairn::ErrorKind::value_out_of_range, "does not fit in int8");
  }
}

TEST_CASE("partial restore and single leaves of sharded trees") {
  test::TempDir dir;
  const auto w = test::random_bits<float>(16 * 6), b = test::random_bits<float>(16);
  const NamedSharding s2x4(Mesh::host({{"data", 2}, {"model", 4}}), PartitionSpec{"data", "model"});
  const NamedSharding s8(Mesh::host({{"data", 2}, {"model", 4}}), PartitionSpec{"model"});
  Model m{ShardedArray<float>::from_host(w, {16, 6}, s2x4), ShardedArray<float>::from_host(b, {16}, s8), 42};
  cairn::save(dir / "m", m);

  const NamedSharding other(Mesh::host({{"x", 8}}), PartitionSpec{"x"});
  Model target{ShardedArray<float>(other), ShardedArray<float>(other), 0};
  cairn::LoadOptions skip_b;
  skip_b.skip = {"b"};
  auto report = cairn::load(dir / "m", target, skip_b);
  CHECK(report.skipped == std::vector<std::string>{"b"});
  check_same_bits(target.w.gather(), w);
  CHECK(!target.b.allocated());
  CHECK(target.step == 42);

  auto single = cairn::load_subtree<ShardedArray<float>>(dir / "m", "b");
  CHECK(single.sharding() == s8);
  check_same_bits(single.gather(), b);
  auto plain_w = cairn::load_subtree<Eigen::MatrixXf>(dir / "m", "w");  // column-major target
  REQUIRE(plain_w.rows() == 16);
  for (int i = 0; i < 16; ++i)
    for (int j = 0; j < 6; ++j) CHECK(std::memcmp(&plain_w(i, j), &w[static_cast<std::size_t>(i * 6 + j)], 4) == 0);
}

TEST_CASE("plain leaves load into shards, including column-major ones") {
  test::TempDir dir;
  Eigen::MatrixXd m = Eigen::MatrixXd::Random(9, 7);
  std::vector<double> v = test::random_bits<double>(11);
  cairn::save(dir / "p", std::make_tuple(m, v));
  std::tuple<ShardedArray<double>, ShardedArray<double>> target{
      ShardedArray<double>(NamedSharding(Mesh::host({{"x", 2}, {"y", 2}}), PartitionSpec{"y", "x"})),
      ShardedArray<double>(NamedSharding(Mesh::device({{"x", 4}}), PartitionSpec{"x"}))};
  cairn::load(dir / "p", target);
  const auto got = std::get<0>(target).gather();
  for (int i = 0; i < 9; ++i)
    for (int j = 0; j < 7; ++j) CHECK(got[static_cast<std::size_t>(i * 7 + j)] == m(i, j));
  check_same_bits(std::get<1>(target).gather(), v);
  // A plain leaf loaded into a default ShardedArray: one host shard.
  auto one = cairn::load_subtree<ShardedArray<double>>(dir / "p", "1");
  CHECK(one.shards().size() == 1);
  check_same_bits(one.gather(), v);
}

TEST_CASE("a process holding part of the mesh reads only the byte ranges its shards overlap") {
  test::TempDir dir;
  const Shape shape{64, 48};
  const auto truth = test::random_bits<float>(64 * 48);
  // Saved with rows over 8 devices; restored with columns over 4, by "process 1" of 2.
  cairn::save(dir / "c", ShardedArray<float>::from_host(truth, shape, NamedSharding(Mesh::host({{"x", 8}}),
                                                                                    PartitionSpec{"x"})));
  Mesh mesh = Mesh::host({{"a", 2}, {"b", 2}});
  mesh.assign_processes({0, 0, 1, 1}, 1);
  for (const auto& spec : {PartitionSpec{cairn::replicated, {"a", "b"}}, PartitionSpec{"a", "b"}, PartitionSpec{"b", "a"}}) {
    CAPTURE(spec.str());
    ShardedArray<float> target(NamedSharding(mesh, spec));
    auto report = cairn::load(dir / "c", target);
    REQUIRE(target.shards().size() == 2);
    std::uint64_t held = 0;
    for (const auto& s : target.shards()) {
      CHECK(s.device().process == 1);
      held += s.size();
      // Compare the shard with its box of the truth.
      const auto got = s.to_host();
      std::size_t k = 0;
      for (std::int64_t i = 0; i < s.box().shape[0]; ++i)
        for (std::int64_t j = 0; j < s.box().shape[1]; ++j, ++k)
          CHECK(std::memcmp(&got[k], &truth[static_cast<std::size_t>((s.box().start[0] + i) * 48 + s.box().start[1] + j)], 4) == 0);
    }
    CHECK(report.bytes_needed == held * 4);
    CHECK(report.bytes_read <= report.bytes_needed * 11 / 10);
    CHECK(report.bytes_read >= report.bytes_needed);
    // Rows 32..63 whole (spec 'a', 'b'): the chunks are needed whole and checksummed;
    // column strips need parts of every chunk, which are read without their checksum.
    if (spec == PartitionSpec{"a", "b"}) CHECK(report.unverified_bytes == 0);
    else CHECK(report.unverified_bytes == report.bytes_read);
    // What each shard read: the chunk boxes it overlaps.
    for (const auto& r : report.shard_reads) CHECK(!r.from_chunks.empty());
  }
}

TEST_CASE("a column-major plain leaf read in part by a process holding half the mesh") {
  test::TempDir dir;
  Eigen::MatrixXf m = Eigen::MatrixXf::Random(40, 30);  // stored in F order
  cairn::save(dir / "m", m);
  Mesh mesh = Mesh::host({{"a", 2}, {"b", 3}});
  mesh.assign_processes({0, 0, 0, 1, 1, 1}, 1);
  for (const auto& spec : {PartitionSpec{"a", "b"}, PartitionSpec{"b", "a"}, PartitionSpec{cairn::replicated, {"b", "a"}}}) {
    CAPTURE(spec.str());
    ShardedArray<float> t(NamedSharding(mesh, spec));
    auto report = cairn::load(dir / "m", t);
    CHECK(report.bytes_read <= report.bytes_needed * 11 / 10);
    for (const auto& s : t.shards()) {
      const auto got = s.to_host();
      std::size_t k = 0;
      for (std::int64_t i = 0; i < s.box().shape[0]; ++i)
        for (std::int64_t j = 0; j < s.box().shape[1]; ++j, ++k)
          CHECK(got[k] == m(s.box().start[0] + i, s.box().start[1] + j));
    }
  }
}

