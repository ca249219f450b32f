// SPDX-License-Identifier: Apache-2.0
// Resharding restore: a randomized matrix checked bit-exactly against the unsharded truth,
// casts during reshard, partial restore of sharded trees, plain leaves into shards, and a
// process that holds part of the mesh reading only its byte ranges.
#include "sharding_util.hpp"

#include <cairn/io/block_crc32c.hpp>
#include <cairn/leaves/thrust_leaves.hpp>  // thrust::host_vector and device_vector leaves
#include <optional>
#include <thread>
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

// Compares each shard of `target` with its box of the row-major `truth` of `cols` columns.
static void check_shards(const ShardedArray<float>& target, const std::vector<float>& truth, std::int64_t cols) {
  for (const auto& s : target.shards()) {
    const auto got = s.to_host();
    const std::int64_t width = s.box().shape[1];
    for (std::int64_t i = 0; i < s.box().shape[0]; ++i) {
      const float* want = &truth[static_cast<std::size_t>((s.box().start[0] + i) * cols + s.box().start[1])];
      REQUIRE(std::memcmp(&got[static_cast<std::size_t>(i * width)], want, static_cast<std::size_t>(width) * 4) == 0);
    }
  }
}

TEST_CASE("a process holding part of the mesh reads whole the small chunks it overlaps, verified") {
  test::TempDir dir;
  const Shape shape{64, 48};
  const auto truth = test::random_bits<float>(64 * 48);
  // Saved with rows over 8 devices (chunks of 1,536 bytes: one checksum block each); restored
  // with columns over 4, by "process 1" of 2.
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
    }
    check_shards(target, truth, 48);
    CHECK(report.bytes_needed == held * 4);
    // Rows 32..63 (spec 'a', 'b'): the four chunks there; column strips touch every chunk.
    // Each touched chunk is read once, whole, and verified.
    CHECK(report.bytes_read == (spec == PartitionSpec{"a", "b"} ? 4u : 8u) * 1536);
    CHECK(report.unverified_bytes == 0);
    // What each shard read: the chunk boxes it overlaps.
    for (const auto& r : report.shard_reads) CHECK(!r.from_chunks.empty());
  }
}

TEST_CASE("a process holding part of the mesh reads the checksum blocks around its part of large chunks") {
  test::TempDir dir;
  // 8 row chunks of 256 rows x 8 KiB: 2 MiB, 8 checksum blocks each.
  const std::int64_t rows = 2048, cols = 2048;
  const auto truth = test::random_bits<float>(static_cast<std::size_t>(rows * cols));
  cairn::save(dir / "c", ShardedArray<float>::from_host(truth, Shape{rows, cols}, NamedSharding(Mesh::host({{"x", 8}}),
                                                                                              PartitionSpec{"x"})));
  const auto meta = cairn::metadata(dir / "c");
  const auto& chunks = meta.leaves()[0].chunks;
  REQUIRE(chunks.size() == 8);
  for (const auto& c : chunks) {
    REQUIRE(c.blocks);
    CHECK(c.blocks->block_bytes == cairn::detail::crc_block_bytes);
    CHECK(c.blocks->crc32c.size() == 8);
  }
  const std::uint64_t block = chunks[0].blocks->block_bytes;
  // Rows over 3 processes: each process's rows start and end inside chunks. Process p reads
  // the rows it needs, widened to whole blocks: at most one block more at each end of its run
  // in each chunk, all verified.
  for (int p = 0; p < 3; ++p) {
    CAPTURE(p);
    Mesh mesh = Mesh::host({{"x", 3}});
    mesh.assign_processes({0, 1, 2}, p);
    ShardedArray<float> target(NamedSharding(mesh, PartitionSpec{"x"}));
    const auto report = cairn::load(dir / "c", target);
    check_shards(target, truth, cols);
    const Box mine = target.shards().at(0).box();
    std::uint64_t expect = 0;  // the blocks that hold this process's rows, chunk by chunk
    for (const auto& c : chunks) {
      const std::int64_t lo = std::max(c.start[0], mine.start[0]);
      const std::int64_t hi = std::min(c.start[0] + c.shape[0], mine.start[0] + mine.shape[0]);
      if (lo >= hi) continue;
      const std::uint64_t from = static_cast<std::uint64_t>((lo - c.start[0]) * cols * 4) / block * block;
      const std::uint64_t to = std::min<std::uint64_t>(
          (static_cast<std::uint64_t>((hi - c.start[0]) * cols * 4) + block - 1) / block * block, c.nbytes);
      expect += to - from;
    }
    CHECK(report.bytes_read == expect);
    CHECK(report.bytes_read < report.bytes_needed + 4 * block);
    CHECK(report.unverified_bytes == 0);
  }
  // The same checkpoint as a cairn before block checksums wrote it: parts of its large chunks
  // are read unverified, at most 1.1x what is needed; require_verified reads them whole.
  cairn::CheckpointMetadata legacy = meta;
  for (auto& c : legacy.items[0].leaves[0].chunks) c.blocks = std::nullopt;
  test::replace_metadata(dir / "c", legacy);
  Mesh mesh = Mesh::host({{"x", 3}});
  mesh.assign_processes({0, 1, 2}, 1);
  ShardedArray<float> target(NamedSharding(mesh, PartitionSpec{"x"}));
  auto report = cairn::load(dir / "c", target);
  check_shards(target, truth, cols);
  CHECK(report.bytes_read <= report.bytes_needed * 11 / 10);
  CHECK(report.unverified_bytes > 0);
  CHECK(report.unverified_bytes < report.bytes_read);  // the chunks it needs whole are verified
  cairn::LoadOptions strict;
  strict.require_verified = true;
  report = cairn::load(dir / "c", target, strict);
  check_shards(target, truth, cols);
  CHECK(report.unverified_bytes == 0);
  CHECK(report.bytes_read % (std::uint64_t{2} << 20) == 0);  // whole chunks
  strict.verify_checksums = false;
  CHECK_CAIRN_ERROR(cairn::load(dir / "c", target, strict), cairn::ErrorKind::invalid_argument, "require_verified");
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
    CHECK(report.bytes_read == 40 * 30 * 4);  // one checksum block: read whole, once
    CHECK(report.unverified_bytes == 0);
    for (const auto& s : t.shards()) {
      const auto got = s.to_host();
      std::size_t k = 0;
      for (std::int64_t i = 0; i < s.box().shape[0]; ++i)
        for (std::int64_t j = 0; j < s.box().shape[1]; ++j, ++k)
          CHECK(got[k] == m(s.box().start[0] + i, s.box().start[1] + j));
    }
  }
}


namespace {
struct Verified {
  ShardedArray<float> a;
  std::vector<double> b;
};
CAIRN_TREE(Verified, a, b)

}  // namespace

// Issue 37's test: every byte of a sharded checkpoint's data file flipped in turn, and the
// checkpoint loaded resharded on 1, 3 and 4 ranks, by subtree and by slice. Every load either
// returns the original bits or throws `corrupt` naming the data file, the byte range and the
// key. Blocks of 32 bytes (readers take the size from the records) make every chunk several
// blocks in a small file, so that each of its bytes can be flipped.
TEST_CASE("every byte of a sharded checkpoint flipped: resharded, partial and sliced loads return the original bits or throw corrupt") {
  test::TempDir dir;
  const std::string path = dir / "c";
  const Shape shape{12, 10};
  const auto truth = test::random_bits<float>(120);
  Verified saved{ShardedArray<float>::from_host(truth, shape, NamedSharding(Mesh::host({{"x", 2}, {"y", 2}}), PartitionSpec{"x", "y"})),
                 test::random_bits<double>(40)};
  cairn::save(path, saved);
  cairn::CheckpointMetadata m = cairn::metadata(path);
  const std::string file = path + "/data-0-0.bin";
  const std::string original = test::read_file(file);
  const std::uint64_t block = 32;
  for (auto& leaf : m.items[0].leaves)
    for (auto& c : leaf.chunks) {
      cairn::detail::BlockCrc32c crc(block);
      crc.extend(original.data() + c.offset, static_cast<std::size_t>(c.nbytes));
      REQUIRE(crc.whole() == c.crc32c);
      c.blocks = cairn::BlockChecksums{block, crc.blocks()};
    }
  replace_metadata(path, m);

  // The element (i, j) of `a`, and a shard's bits against the truth.
  auto same_shard = [&](const auto& s) {
    const auto got = s.to_host();
    std::size_t k = 0;
    for (std::int64_t i = 0; i < s.box().shape[0]; ++i)
      for (std::int64_t j = 0; j < s.box().shape[1]; ++j, ++k)
        if (std::memcmp(&got[k], &truth[static_cast<std::size_t>((s.box().start[0] + i) * 10 + s.box().start[1] + j)], 4) != 0)
          return false;
    return true;
  };
  auto same_b = [&](const std::vector<double>& b) {
    return b.size() == saved.b.size() && std::memcmp(b.data(), saved.b.data(), b.size() * 8) == 0;
  };
  std::size_t loads = 0, refused = 0;
  std::string problems;  // the first few, as text (CHECKs over every byte would flood the output)
  auto problem = [&](const std::string& what) {
    if (problems.size() < 2000) problems += what + "\n";
  };
  // A refusal must be `corrupt`, naming the file, a byte range and a key of the tree.
  auto check_refusal = [&](const cairn::Error& e, std::size_t at, const char* load) {
    ++refused;
    const std::string text = e.what();
    if (e.kind() != cairn::ErrorKind::corrupt || text.find("data-0-0.bin") == std::string::npos ||
        text.find("bytes ") == std::string::npos || (e.key_path() != "a" && e.key_path() != "b"))
      problem(std::string(load) + ", byte " + std::to_string(at) + ": " + text);
  };
  // A multi-rank load: every rank throws or none does; each rank returns its own bits.
  auto ranks_load = [&](int n, const PartitionSpec& spec, std::size_t at, const char* load) {
    std::vector<Verified> targets(static_cast<std::size_t>(n));
    const auto errors = test::on_thread_ranks(n, [&](int r, cairn::Coordinator& c) {
      Mesh mesh = Mesh::host({{"p", n}});
      std::vector<int> procs(static_cast<std::size_t>(n));
      for (int k = 0; k < n; ++k) procs[static_cast<std::size_t>(k)] = k;
      mesh.assign_processes(procs, r);
      targets[static_cast<std::size_t>(r)].a = ShardedArray<float>(NamedSharding(mesh, spec));
      cairn::load(path, targets[static_cast<std::size_t>(r)], {.coordinator = &c});
    });
    ++loads;
    const bool any = std::any_of(errors.begin(), errors.end(), [](const auto& e) { return e.has_value(); });
    for (int r = 0; r < n; ++r) {
      const auto& e = errors[static_cast<std::size_t>(r)];
      if (any && !e) problem(std::string(load) + ", byte " + std::to_string(at) + ": rank " + std::to_string(r) + " succeeded");
      if (e) {
        check_refusal(*e, at, load);
        continue;
      }
      const Verified& t = targets[static_cast<std::size_t>(r)];
      bool same = same_b(t.b);
      for (const auto& s : t.a.shards()) same = same && same_shard(s);
      if (!same) problem(std::string(load) + ", byte " + std::to_string(at) + ": rank " + std::to_string(r) + " got other bits");
    }
  };
  auto loads_of = [&](std::size_t at) {
    // One process, onto a 3x1 layout (every chunk needed whole).
    try {
      Verified t;
      t.a = ShardedArray<float>(NamedSharding(Mesh::host({{"p", 3}}), PartitionSpec{"p"}));
      cairn::load(path, t);
      ++loads;
      bool same = same_b(t.b);
      for (const auto& s : t.a.shards()) same = same && same_shard(s);
      if (!same) problem("one process, byte " + std::to_string(at) + ": other bits");
    } catch (const cairn::Error& e) {
      ++loads;
      check_refusal(e, at, "one process");
    }
    ranks_load(3, PartitionSpec{"p"}, at, "3 ranks, rows");                     // rows 4..7 cut both chunks
    ranks_load(4, PartitionSpec{cairn::replicated, "p"}, at, "4 ranks, columns");  // strips of 3 columns
    try {
      const auto b = cairn::load_subtree<std::vector<double>>(path, "b");
      ++loads;
      if (!same_b(b)) problem("subtree, byte " + std::to_string(at) + ": other bits");
    } catch (const cairn::Error& e) {
      ++loads;
      check_refusal(e, at, "subtree");
    }
    try {
      cairn::ReadArraysOptions slice;
      slice.boxes = {Box{{5, 3}, {2, 4}}};  // rows 5..6 of both column halves: four chunks, in part
      const auto got = cairn::read_arrays(path, {"a"}, slice);
      ++loads;
      const auto& bytes = got.at("a").bytes;
      for (std::int64_t i = 0; i < 2; ++i)
        if (std::memcmp(bytes.data() + i * 16, &truth[static_cast<std::size_t>((5 + i) * 10 + 3)], 16) != 0)
          problem("slice, byte " + std::to_string(at) + ": other bits");
    } catch (const cairn::Error& e) {
      ++loads;
      check_refusal(e, at, "slice");
    }
  };
  loads_of(original.size());  // intact: everything loads (no refusal)
  CHECK(refused == 0);
  CHECK(problems.empty());
  for (std::size_t at = 0; at < original.size(); ++at) {
    std::string damaged = original;
    damaged[at] = static_cast<char>(damaged[at] ^ (1 << (at % 8)));
    test::write_file(file, damaged);
    loads_of(at);
  }
  test::write_file(file, original);
  MESSAGE("every-byte flips: " << original.size() << " bytes, " << loads << " loads, " << refused << " refusals");
  CHECK(problems.empty());
  if (!problems.empty()) MESSAGE(problems);
  CHECK(refused > original.size());  // most flips land in bytes some load needs
}

TEST_CASE("block checksums of every rank's chunks reach the metadata in a multi-rank save") {
  test::TempDir dir;
  const std::string path = dir / "c";
  const Shape shape{1024, 256};  // two row chunks of 512 KiB: two blocks each
  const auto truth = test::random_bits<float>(1024 * 256);
  const auto errors = test::on_thread_ranks(2, [&](int r, cairn::Coordinator& c) {
    Mesh mesh = Mesh::host({{"p", 2}});
    mesh.assign_processes({0, 1}, r);
    cairn::save(path, ShardedArray<float>::from_host(truth, shape, NamedSharding(mesh, PartitionSpec{"p"})),
                {.coordinator = &c});
  });
  REQUIRE(!errors[0]);
  REQUIRE(!errors[1]);
  const auto meta = cairn::metadata(path);
  const auto& chunks = meta.leaves()[0].chunks;
  REQUIRE(chunks.size() == 2);
  for (const auto& c : chunks) {
    REQUIRE(c.blocks);
    CHECK(c.blocks->crc32c.size() == 2);
    CHECK(cairn::detail::join_block_crcs(c.blocks->crc32c, c.blocks->block_bytes, c.nbytes) == c.crc32c);
  }
  CHECK(chunks[0].file != chunks[1].file);  // each rank's own data file
  CHECK(cairn::verify(path).ok());
  // Rows 600..601 lie in rank 1's chunk: read through its blocks, verified.
  cairn::LoadReport report;
  const auto got = cairn::read_arrays(path, {}, {.boxes = {Box{{600, 0}, {2, 256}}}}, &report);
  CHECK(std::memcmp(got.at("").bytes.data(), &truth[600 * 256], 2 * 256 * 4) == 0);
  CHECK(report.unverified_bytes == 0);
  CHECK(report.bytes_read == chunks[1].blocks->block_bytes);
}

TEST_CASE("a part of a large chunk in the page cache is read by two threads taking every other run, verified") {
  test::TempDir dir;
  const std::string path = dir / "c";
  // One chunk of 40 MiB: each of 2 processes needs 20 MiB of it, two runs of up to 16 MiB,
  // which two threads share where the bytes are in memory already (just written).
  const std::int64_t rows = 10240, cols = 1024;
  std::vector<float> truth(static_cast<std::size_t>(rows * cols));
  for (std::size_t i = 0; i < truth.size(); ++i) truth[i] = static_cast<float>(i % 1000003) * 0.5f;
  cairn::save(path, ShardedArray<float>::from_host(truth, Shape{rows, cols},
                                                   NamedSharding(Mesh::host({{"x", 1}}), PartitionSpec{"x"})));
  for (int p = 0; p < 2; ++p) {
    CAPTURE(p);
    Mesh mesh = Mesh::host({{"x", 2}});
    mesh.assign_processes({0, 1}, p);
    ShardedArray<float> target(NamedSharding(mesh, PartitionSpec{"x"}));
    const auto report = cairn::load(path, target);
    check_shards(target, truth, cols);
    CHECK(report.unverified_bytes == 0);
    CHECK(report.bytes_read >= report.bytes_needed);
    CHECK(report.bytes_read <= report.bytes_needed + 4 * cairn::detail::crc_block_bytes);
  }
  // A flipped byte in the second run of process 1's part: the thread that reads it fails the
  // load, naming the range; the other stops.
  const auto meta = cairn::metadata(path);
  const auto& chunk = meta.leaves()[0].chunks[0];
  const std::string file = path + "/" + chunk.file;
  std::string data = test::read_file(file);
  const std::uint64_t at = chunk.offset + static_cast<std::uint64_t>(rows / 2) * cols * 4 + (std::uint64_t{18} << 20);
  data[at] ^= 4;
  test::write_file(file, data);
  (void)test::read_file(file);  // in the page cache again
  Mesh mesh = Mesh::host({{"x", 2}});
  mesh.assign_processes({0, 1}, 1);
  ShardedArray<float> target(NamedSharding(mesh, PartitionSpec{"x"}));
  const std::uint64_t block = chunk.blocks->block_bytes, first = (at - chunk.offset) / block * block + chunk.offset;
  CHECK_CAIRN_ERROR(cairn::load(path, target), cairn::ErrorKind::corrupt, "checksum mismatch in bytes " + std::to_string(first));
}
