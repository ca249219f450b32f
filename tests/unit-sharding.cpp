// Sharded arrays: the shard-box rule, per-shard save, resharding restore (a randomized
// matrix checked bit-exactly against the unsharded truth), casts and partial restore on
// sharded leaves, device-memory leaves, and corrupt chunk metadata.
#include "test_util.hpp"

#include <thrust/device_vector.h>

using cairn::Box;
using cairn::Mesh;
using cairn::NamedSharding;
using cairn::PartitionSpec;
using cairn::ShardedArray;
using cairn::Shape;

namespace {

struct Model {
  ShardedArray<float> w;
  ShardedArray<float> b;
  std::int64_t step = 0;
};
CAIRN_TREE(Model, w, b, step)


// Rewrites _METADATA (from records) and signs it in the commit marker.
void replace_metadata(const std::string& ckpt, const cairn::CheckpointMetadata& m) {
  test::write_file(ckpt + "/_METADATA", cairn::detail::metadata_to_json(m));
  test::resign(ckpt);
}

// A random mesh from 1x1 to 2x4 (or 8 on one axis) of host or device-system memory.
Mesh random_mesh(bool device) {
  static const std::vector<std::pair<std::int64_t, std::int64_t>> grids = {{1, 1}, {1, 2}, {2, 1}, {2, 2}, {2, 4},
                                                                           {4, 2}, {1, 8}, {8, 1}, {3, 1}};
  const auto [a, b] = grids[test::rng()() % grids.size()];
  std::vector<cairn::MeshAxis> axes = {{"x", a}, {"y", b}};
  return device ? Mesh::device(axes) : Mesh::host(axes);
}

// A random spec over `rank` dimensions: each dimension replicated, or split over x, y, or both.
PartitionSpec random_spec(std::size_t rank) {
  std::vector<PartitionSpec::Dim> dims;
  bool x = false, y = false;
  for (std::size_t d = 0; d < rank; ++d) {
    std::vector<std::string> axes;
    switch (test::rng()() % 5) {
      case 1: if (!x) { axes = {"x"}; x = true; } break;
      case 2: if (!y) { axes = {"y"}; y = true; } break;
      case 3: if (!x && !y) { axes = {"x", "y"}; x = y = true; } break;
      case 4: if (!x && !y) { axes = {"y", "x"}; x = y = true; } break;
      default: break;
    }
    dims.emplace_back(axes);
  }
  if (test::rng()() % 4 == 0 && !dims.empty()) dims.pop_back();  // trailing dims replicated by omission
  return PartitionSpec(std::move(dims));
}

Shape random_shape() {
  Shape s(1 + test::rng()() % 3);
  for (auto& d : s) d = 1 + static_cast<std::int64_t>(test::rng()() % 13);  // odd sizes included
  return s;
}

template <class T>
void check_same_bits(const std::vector<T>& got, const std::vector<T>& want) {
  REQUIRE(got.size() == want.size());
  CHECK(std::memcmp(got.data(), want.data(), got.size() * sizeof(T)) == 0);
}

}  // namespace

TEST_CASE("shard boxes follow JAX's rule: ceil-sized parts, the last ones short or empty") {
  NamedSharding s(Mesh::host({{"x", 4}}), PartitionSpec{"x"});
  auto boxes = s.shard_boxes({5});
  std::vector<std::int64_t> sizes, starts;
  for (const auto& b : boxes) { sizes.push_back(b.shape[0]); starts.push_back(b.start[0]); }
  CHECK(sizes == std::vector<std::int64_t>{2, 2, 1, 0});
  CHECK(starts == std::vector<std::int64_t>{0, 2, 4, 5});

  // Two axes on one dimension: the first named is the major one.
  NamedSharding xy(Mesh::host({{"x", 2}, {"y", 3}}), PartitionSpec{{"x", "y"}, cairn::replicated});
  auto b = xy.shard_boxes({12, 7});
  for (std::size_t i = 0; i < b.size(); ++i) {
    const auto c = xy.mesh.coordinates(i);
    CHECK(b[i].start[0] == (c[0] * 3 + c[1]) * 2);
    CHECK(b[i].shape[0] == 2);
    CHECK(b[i].start[1] == 0);
    CHECK(b[i].shape[1] == 7);  // replicated
  }
  NamedSharding yx(Mesh::host({{"x", 2}, {"y", 3}}), PartitionSpec{{"y", "x"}});
  auto b2 = yx.shard_boxes({12});
  CHECK(b2[1].start[0] == 4);  // device (0, 1): y=1 major -> part 2
  CHECK(b2[3].start[0] == 2);  // device (1, 0): x=1 minor -> part 1

  CHECK_CAIRN_ERROR(NamedSharding(Mesh::host({{"x", 2}}), PartitionSpec{"z"}).shard_boxes({4}),
                    cairn::ErrorKind::invalid_argument, "names axis 'z', not in the mesh");
  CHECK_CAIRN_ERROR(NamedSharding(Mesh::host({{"x", 2}}), PartitionSpec({"x", "x"})).shard_boxes({4, 4}),
                    cairn::ErrorKind::invalid_argument, "uses mesh axis 'x' twice");
  CHECK_CAIRN_ERROR(NamedSharding(Mesh::host({{"x", 2}}), PartitionSpec({"x", cairn::replicated})).shard_boxes({4}),
                    cairn::ErrorKind::invalid_argument, "for an array of rank 1");
  CHECK_CAIRN_ERROR(Mesh::host({{"x", 0}}), cairn::ErrorKind::invalid_argument, "has size 0");
  CHECK_CAIRN_ERROR(Mesh({{"x", 2}}, {{cairn::MemoryKind::host, 1, 0}, {cairn::MemoryKind::host, 1, 0}}),
                    cairn::ErrorKind::invalid_argument, "appears twice");
  CHECK(PartitionSpec({{"x", "y"}, cairn::replicated, "z"}).str() == "PartitionSpec(('x', 'y'), None, 'z')");
}

TEST_CASE("each distinct shard is written once; metadata records the sharding") {
  test::TempDir dir;
  const auto truth = test::random_bits<float>(6 * 10);
  NamedSharding rows(Mesh::host({{"data", 2}, {"model", 4}}), PartitionSpec{"data", cairn::replicated});
  auto a = ShardedArray<float>::from_host(truth, {6, 10}, rows);
  CHECK(a.shards().size() == 8);
  int primaries = 0;
  for (const auto& s : a.shards()) primaries += s.primary();
  CHECK(primaries == 2);
  auto report = cairn::save(dir / "c", a);
  CHECK(report.bytes_written == truth.size() * sizeof(float));  // replicas not written
  const auto meta = cairn::metadata(dir / "c");
  const auto& leaf = meta.leaves().at(0);
  CHECK(leaf.chunks.size() == 2);
  REQUIRE(leaf.sharding);
  CHECK(leaf.sharding->mesh.axes() == rows.mesh.axes());
  CHECK(leaf.sharding->spec == rows.spec);
  CHECK(meta.summary().find("sharded over mesh {data: 2, model: 4} on host, PartitionSpec('data', None)") !=
        std::string::npos);

  // Fully replicated: one chunk.
  auto r = ShardedArray<float>::from_host(truth, {6, 10}, NamedSharding(rows.mesh, PartitionSpec{}));
  CHECK(cairn::save(dir / "r", r).bytes_written == truth.size() * sizeof(float));
  CHECK(cairn::metadata(dir / "r").leaves().at(0).chunks.size() == 1);

  // Without a target sharding, the stored one is used.
  ShardedArray<float> back;
  cairn::load(dir / "c", back);
  CHECK(back.sharding() == rows);
  check_same_bits(back.gather(), truth);
}

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

TEST_CASE("thrust vectors and raw device views are leaves") {
  test::TempDir dir;
  const auto values = test::random_bits<std::int32_t>(1000);
  thrust::host_vector<std::int32_t> hv(values.begin(), values.end());
  thrust::device_vector<std::int32_t> dv(values.begin(), values.end());
  // (No element access through device_reference: Thrust 1.17's binds a null reference,
  // which UBSan reports. Whole-vector copies only.)
  std::vector<float> halves(12);
  for (int i = 0; i < 12; ++i) halves[static_cast<std::size_t>(i)] = static_cast<float>(i) * 0.5f;
  thrust::device_vector<float> raw(halves.begin(), halves.end());
  cairn::DeviceArrayView<float> view{thrust::raw_pointer_cast(raw.data()), {3, 4}, 0};
  cairn::save(dir / "t", std::make_tuple(hv, dv, view));

  std::tuple<thrust::host_vector<std::int32_t>, thrust::device_vector<std::int32_t>, cairn::DeviceArrayView<float>> back;
  thrust::device_vector<float> raw_back(12, -1.0f);
  std::get<2>(back) = {thrust::raw_pointer_cast(raw_back.data()), {3, 4}, 0};
  cairn::load(dir / "t", back);
  thrust::host_vector<std::int32_t> h1 = std::get<0>(back), h2 = std::get<1>(back);
  check_same_bits(std::vector<std::int32_t>(h1.begin(), h1.end()), values);
  check_same_bits(std::vector<std::int32_t>(h2.begin(), h2.end()), values);
  thrust::host_vector<float> raw_host = raw_back;
  CHECK(std::vector<float>(raw_host.begin(), raw_host.end()) == halves);

  // A raw view has a fixed shape.
  std::tuple<thrust::host_vector<std::int32_t>, thrust::device_vector<std::int32_t>, cairn::DeviceArrayView<float>> wrong;
  std::get<2>(wrong) = {thrust::raw_pointer_cast(raw_back.data()), {4, 3}, 0};
  CHECK_CAIRN_ERROR(cairn::load(dir / "t", wrong), cairn::ErrorKind::shape_mismatch, "[3, 4]");
  // A device vector loads with a cast, from a sharded checkpoint.
  cairn::save(dir / "s", ShardedArray<std::int32_t>::from_host(values, {1000}, NamedSharding(Mesh::host({{"x", 3}}),
                                                                                            PartitionSpec{"x"})));
  auto as_double = cairn::load<thrust::device_vector<double>>(dir / "s");
  REQUIRE(as_double.size() == 1000);
  thrust::host_vector<double> doubles = as_double;
  for (std::size_t i = 0; i < 1000; ++i) CHECK(doubles[i] == static_cast<double>(values[i]));
}

TEST_CASE("async saves snapshot sharded leaves") {
  test::TempDir dir;
  const auto truth = test::random_bits<float>(40 * 8);
  auto a = ShardedArray<float>::from_host(truth, {40, 8},
                                          NamedSharding(Mesh::device({{"x", 2}, {"y", 2}}), PartitionSpec{"x", "y"}));
  cairn::CheckpointerOptions opts;
  opts.async_memory_budget = 1 << 20;
  cairn::Checkpointer ckpt(dir.path, opts);
  ckpt.save_async(1, a);
  std::vector<float> zeros(a.shards().front().size(), 0.0f);
  for (auto& s : a.shards()) s.from_host(zeros.data());  // changed at once: the save has its copy
  ckpt.wait();
  ShardedArray<float> back;
  ckpt.load(1, back);
  check_same_bits(back.gather(), truth);
}

TEST_CASE("corrupt or inconsistent chunk metadata of sharded leaves is a clear error") {
  test::TempDir dir;
  const auto truth = test::random_bits<float>(8 * 4);
  const std::string good = dir / "good";
  cairn::save(good, std::make_tuple(ShardedArray<float>::from_host(
                        truth, {8, 4}, NamedSharding(Mesh::host({{"x", 4}}), PartitionSpec{"x"}))));
  const auto meta = cairn::metadata(good);
  auto variant = [&](const std::string& name, auto&& change) {
    const std::string p = dir / name;
    std::filesystem::copy(good, p);
    auto m = meta;
    change(m.items.at(0).leaves.at(0));
    replace_metadata(p, m);
    return p;
  };
  auto overlapping = variant("overlap", [](cairn::LeafRecord& l) { l.chunks[1].start[0] = 1; });
  CHECK_CAIRN_ERROR(cairn::metadata(overlapping), cairn::ErrorKind::corrupt, "overlap");
  auto outside = variant("outside", [](cairn::LeafRecord& l) { l.chunks[3].start[0] = 7; });
  CHECK_CAIRN_ERROR(cairn::metadata(outside), cairn::ErrorKind::corrupt, "outside the array shape");
  auto missing = variant("missing", [](cairn::LeafRecord& l) { l.chunks.pop_back(); });
  CHECK_CAIRN_ERROR(cairn::metadata(missing), cairn::ErrorKind::corrupt, "a chunk is missing");
  auto rank = variant("rank", [](cairn::LeafRecord& l) { l.chunks[0].shape.push_back(1); });
  CHECK_CAIRN_ERROR(cairn::metadata(rank), cairn::ErrorKind::corrupt, "has rank");
  auto bad_bytes = variant("bytes", [](cairn::LeafRecord& l) { l.chunks[2].nbytes += 4; });
  CHECK_CAIRN_ERROR(cairn::metadata(bad_bytes), cairn::ErrorKind::corrupt, "its box holds");
  auto past_end = variant("past_end", [](cairn::LeafRecord& l) { l.chunks[2].offset = 1 << 20; });
  ShardedArray<float> t;
  std::tuple<ShardedArray<float>> tt;
  CHECK_CAIRN_ERROR(cairn::load(past_end, tt), cairn::ErrorKind::corrupt, "beyond the end of the file");
  // A sharding record that does not fit its mesh.
  const std::string bad_spec = dir / "bad_spec";
  std::filesystem::copy(good, bad_spec);
  std::string text = test::read_file(good + "/_METADATA");
  const auto pos = text.find("\"spec\"");
  REQUIRE(pos != std::string::npos);
  const auto x = text.find("\"x\"", pos);
  text.replace(x, 3, "\"q\"");
  test::write_file(bad_spec + "/_METADATA", text);
  test::resign(bad_spec);
  CHECK_CAIRN_ERROR(cairn::metadata(bad_spec), cairn::ErrorKind::corrupt, "bad sharding record");
  // A flipped data byte is caught by the chunk's checksum when resharding too.
  const std::string flipped = dir / "flipped";
  std::filesystem::copy(good, flipped);
  std::string data = test::read_file(flipped + "/data-0-0.bin");
  data[meta.leaves().at(0).chunks[2].offset + 3] ^= 0x10;
  test::write_file(flipped + "/data-0-0.bin", data);
  std::tuple<ShardedArray<float>> resharded{ShardedArray<float>(NamedSharding(Mesh::host({{"y", 3}}), PartitionSpec{"y"}))};
  CHECK_CAIRN_ERROR(cairn::load(flipped, resharded), cairn::ErrorKind::corrupt, "checksum mismatch");
}

TEST_CASE("random changes to the numbers of signed sharded metadata never crash: they load or throw cairn::Error") {
  test::TempDir dir;
  const std::string c = dir / "c";
  const auto truth = test::random_bits<float>(9 * 5);
  cairn::save(c, ShardedArray<float>::from_host(truth, {9, 5}, NamedSharding(Mesh::host({{"x", 3}, {"y", 2}}),
                                                                            PartitionSpec{"x", "y"})));
  const std::string meta = test::read_file(c + "/_METADATA");
  std::vector<std::size_t> digits;
  for (std::size_t i = 0; i < meta.size(); ++i)
    if (meta[i] >= '0' && meta[i] <= '9') digits.push_back(i);
  int errors = 0, loads = 0;
  for (int trial = 0; trial < 400; ++trial) {
    std::string m = meta;
    for (int k = 0; k < 1 + trial % 3; ++k) {
      const std::size_t at = digits[test::rng()() % digits.size()];
      static const char* swaps[] = {"0", "1", "7", "9", "-1", "99999999999", "18446744073709551615", "4096"};
      m.replace(at, 1, swaps[test::rng()() % 8]);
    }
    test::write_file(c + "/_METADATA", m);
    test::resign(c);
    try {
      ShardedArray<float> back(NamedSharding(Mesh::host({{"z", 4}}), PartitionSpec{cairn::replicated, "z"}));
      cairn::load(c, back);
      ShardedArray<float> stored_layout;
      cairn::load(c, stored_layout);
      ++loads;
    } catch (const cairn::Error&) {
      ++errors;
    }
  }
  CHECK(errors > 0);
  CHECK(loads > 0);  // some changes are harmless (a date, a CRC of an unread file)
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

TEST_CASE("a stored device sharding is recreated only where this process has its devices") {
  const NamedSharding on4(Mesh::device({{"x", 4}}), PartitionSpec{"x"});
  CHECK_NOTHROW(cairn::detail::require_devices(on4, 4));
  CHECK_CAIRN_ERROR(cairn::detail::require_devices(on4, 2), cairn::ErrorKind::invalid_argument,
                    "device ids up to 3), but this process sees 2 devices. Give the target a sharding");
  CHECK_NOTHROW(cairn::detail::require_devices(NamedSharding(Mesh::host({{"x", 64}}), PartitionSpec{}), 0));
}

TEST_CASE("edge shapes: scalars, empty dimensions, bools, and rank above the kernel's 8 when dimensions merge") {
  test::TempDir dir;
  // A 0-d array on a 2-device mesh: every device holds the one element.
  auto scalar = ShardedArray<double>::from_host(std::vector<double>{2.5}, {}, NamedSharding(Mesh::host({{"x", 2}}), PartitionSpec{}));
  cairn::save(dir / "s", scalar);
  CHECK(cairn::metadata(dir / "s").leaves().at(0).chunks.size() == 1);
  CHECK(cairn::load<cairn::Array<double>>(dir / "s")[0] == 2.5);
  // A dimension of 0: nothing written, a shape restored.
  auto empty = ShardedArray<float>({0, 7}, NamedSharding(Mesh::host({{"x", 3}}), PartitionSpec{"x"}));
  cairn::save(dir / "e", empty);
  ShardedArray<float> e_back(NamedSharding(Mesh::host({{"y", 2}}), PartitionSpec{cairn::replicated, "y"}));
  cairn::load(dir / "e", e_back);
  CHECK(e_back.shape() == Shape{0, 7});
  CHECK(e_back.gather().empty());
  // Bools: stored bytes other than 0/1 never reach a bool (plain leaf rules apply).
  std::vector<bool> flags = {true, false, true, true, false};
  cairn::save(dir / "b", flags);
  ShardedArray<bool> b_back(NamedSharding(Mesh::host({{"x", 2}}), PartitionSpec{"x"}));
  cairn::load(dir / "b", b_back);
  const auto got = b_back.gather();
  for (std::size_t i = 0; i < flags.size(); ++i) CHECK(got[i] == flags[i]);
  // Rank 10 with unit and whole inner dimensions: merged to a rank the kernel takes.
  const Shape big{2, 1, 3, 1, 2, 1, 2, 1, 2, 3};
  const auto truth = test::random_bits<std::uint16_t>(static_cast<std::size_t>(cairn::element_count(big)));
  cairn::save(dir / "r", ShardedArray<std::uint16_t>::from_host(truth, big, NamedSharding(Mesh::host({{"x", 2}}), PartitionSpec{"x"})));
  ShardedArray<std::uint16_t> r_back(NamedSharding(Mesh::host({{"x", 3}}), PartitionSpec{cairn::replicated, cairn::replicated, "x"}));
  cairn::load(dir / "r", r_back);
  check_same_bits(r_back.gather(), truth);
}
