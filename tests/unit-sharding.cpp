// SPDX-License-Identifier: Apache-2.0
// Sharded arrays: the shard-box rule, per-shard save, device-memory leaves, async snapshots,
// corrupt chunk metadata and edge shapes. Restoring onto other shardings is unit-reshard.cpp.
#include "sharding_util.hpp"

#include <cairn/leaves/thrust_leaves.hpp>  // thrust::host_vector and device_vector leaves
#include <thrust/device_vector.h>

#include <thread>

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

TEST_CASE("large device leaves load in pieces through the staging buffers, verified, and resharded onto device shards") {
  // The device paths of the loader (box_reader.hpp, read_direct_to_device; pieces gathered
  // for a device shard) on the host-side device system: over two device read pieces, so the
  // copy of one piece overlaps the read of the next, and a last short piece.
  test::TempDir dir;
  const std::size_t piece = cairn::detail::device_read_piece_bytes;
  const std::int64_t rows = static_cast<std::int64_t>(2 * piece / (4 * 512) + 3), cols = 512;
  const auto truth = test::random_bits<float>(static_cast<std::size_t>(rows * cols));
  const NamedSharding one(Mesh::device({{"x", 1}}), PartitionSpec{"x"});
  cairn::save(dir / "one", ShardedArray<float>::from_host(truth, {rows, cols}, one));
  ShardedArray<float> back(one);
  const cairn::LoadReport report = cairn::load(dir / "one", back);
  check_same_bits(back.gather(), truth);
  CHECK(report.unverified_bytes == 0);

  // Bools over several pieces: each stored byte is normalized on the way to the device.
  std::vector<std::uint8_t> raw(2 * piece + 1001);
  for (std::size_t i = 0; i < raw.size(); ++i) raw[i] = static_cast<std::uint8_t>(test::rng()() % 2);
  const std::vector<bool> bits(raw.begin(), raw.end());
  auto flags = ShardedArray<bool>::from_host(bits, {static_cast<std::int64_t>(raw.size())}, one);
  cairn::save(dir / "bools", flags);
  ShardedArray<bool> flags_back(one);
  cairn::load(dir / "bools", flags_back);
  const auto flags_host = flags_back.gather();
  REQUIRE(flags_host.size() == bits.size());
  bool equal = true;
  for (std::size_t i = 0; i < bits.size(); ++i) equal = equal && static_cast<bool>(flags_host[i]) == bits[i];
  CHECK(equal);

  // Two row chunks onto one device shard (pieces gathered, then copied), and onto three device
  // shards (each reads blocks of both chunks in part).
  cairn::save(dir / "two", ShardedArray<float>::from_host(truth, {rows, cols},
                                                          NamedSharding(Mesh::host({{"r", 2}}), PartitionSpec{"r"})));
  ShardedArray<float> gathered(one);
  cairn::load(dir / "two", gathered);
  check_same_bits(gathered.gather(), truth);
  ShardedArray<float> three(NamedSharding(Mesh::device({{"x", 3}}), PartitionSpec{"x"}));
  const cairn::LoadReport parts = cairn::load(dir / "two", three);
  check_same_bits(three.gather(), truth);
  CHECK(parts.unverified_bytes == 0);

  // A byte flipped in the last piece of the one-chunk leaf: refused, naming the file and key.
  const std::string file = dir / "one" + "/data-0-0.bin";
  std::string bytes = test::read_file(file);
  bytes[bytes.size() - 100] ^= 0x20;
  test::write_file(file, bytes);
  ShardedArray<float> damaged(one);
  CHECK_CAIRN_ERROR(cairn::load(dir / "one", damaged), cairn::ErrorKind::corrupt, "data-0-0.bin");
}

TEST_CASE("ranks holding device shards (each its device 0) save together and load resharded onto other rank counts") {
  // On the host backend; tests/cuda/unit-cuda.cu runs the same on a GPU.
  test::TempDir dir;
  test::device_ranks_round_trip(dir.path, 301, 1024, {3, 4, 1});  // chunks of several 256 KiB blocks
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
