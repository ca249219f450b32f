// SPDX-License-Identifier: Apache-2.0
// Orbax exports and imports of device leaves, shared by unit-orbax (Thrust's host system, where
// "device" memory is host memory: every code path, in CI) and unit-cuda (the same paths on a
// GPU, where the bytes cross between host and device). Every array is compared bit for bit
// with the values it came from; the first failing comparison names the layout.
#pragma once

#include <cairn/leaves/thrust_leaves.hpp>
#include <cairn/orbax.hpp>
#include <thrust/device_vector.h>

#include "../test_util.hpp"

#include <doctest/doctest.h>

#include <string>
#include <vector>

namespace test {

struct OrbaxDeviceState {
  thrust::device_vector<float> w;
  cairn::DeviceArrayView<cairn::bfloat16> view;
  cairn::ShardedArray<double> sharded;
  std::int64_t step = 0;
};
CAIRN_TREE(OrbaxDeviceState, w, view, sharded, step)

struct OrbaxHostSharded {
  cairn::ShardedArray<float> kernel;
};
CAIRN_TREE(OrbaxHostSharded, kernel)

template <class T>
std::vector<T> device_values(const thrust::device_vector<T>& v) {
  std::vector<T> out(v.size());
  thrust::copy(v.begin(), v.end(), out.begin());
  return out;
}

// `n` float32 elements in the device vector (over a write piece: its staging runs in pieces).
inline void orbax_device_round_trip(const std::string& dir, std::size_t n) {
  using cairn::DType;
  using cairn::Mesh;
  using cairn::NamedSharding;
  using cairn::PartitionSpec;
  using cairn::ShardedArray;
  const auto wv = random_bits<float>(n);
  const auto vv = random_bits<cairn::bfloat16>(6 * 7);
  const auto sv = random_bits<double>(33 * 17);
  thrust::device_vector<cairn::bfloat16> view_mem(vv.begin(), vv.end());
  OrbaxDeviceState s;
  s.w = thrust::device_vector<float>(wv.begin(), wv.end());
  s.view = {thrust::raw_pointer_cast(view_mem.data()), {6, 7}, 0};
  s.sharded = ShardedArray<double>::from_host(sv, {33, 17}, NamedSharding(Mesh::device({{"x", 1}}), PartitionSpec{"x"}));
  s.step = 41;

  const auto load_back = [&](const std::string& path) {
    thrust::device_vector<cairn::bfloat16> view_back(vv.size());
    OrbaxDeviceState t;
    t.view = {thrust::raw_pointer_cast(view_back.data()), {6, 7}, 0};
    t.sharded = ShardedArray<double>(NamedSharding(Mesh::device({{"y", 1}}), PartitionSpec{}));
    cairn::load_orbax(path, t);
    CHECK(test::same_bits(device_values(t.w), wv));
    CHECK(test::same_bits(device_values(view_back), vv));
    REQUIRE(t.sharded.shards().size() == 1);
    CHECK(t.sharded.shards()[0].on_device());
    CHECK(test::same_bits(t.sharded.gather(), sv));
    CHECK(t.step == 41);
  };

  struct Way {
    const char* name;
    cairn::OrbaxSaveOptions options;
  };
  std::vector<Way> ways(4);
  ways[0].name = "v1";
  ways[1].name = "v1-zstd";
  ways[1].options.zstd_level = 3;
  ways[2].name = "v0-zarr2-zstd";
  ways[2].options.layout = cairn::OrbaxLayout::v0_standard;
  ways[2].options.zarr3 = false;
  ways[2].options.zstd_level = 1;
  ways[3].name = "v1-directories";
  ways[3].options.ocdbt = false;
  for (const auto& way : ways) {
    CAPTURE(std::string(way.name));
    const std::string path = dir + "/" + way.name;
    const auto report = cairn::save_orbax(path, s, way.options);
    CHECK(report.bytes >= n * sizeof(float));
    load_back(path);
    // Stored float32 loads into float64 device memory (a widening cast, on the device).
    cairn::LoadOptions only_w;
    only_w.subtree = "w";
    const auto wide = cairn::load_orbax<thrust::device_vector<double>>(path, only_w);
    std::vector<double> want(n);
    cairn::cast_host(DType::float32, wv.data(), DType::float64, want.data(), n, cairn::OnOverflow::error);
    CHECK(test::same_bits(device_values(wide), want));
  }

  // A cast on export: the device's float32 stored as bfloat16, as the host casts the same values.
  cairn::OrbaxSaveOptions cast;
  cast.cast = {{"w", DType::bfloat16}};
  const auto cast_report = cairn::save_orbax(dir + "/cast", s, cast);
  CHECK(cast_report.cast == std::vector<std::string>{"w"});
  std::vector<cairn::bfloat16> want16(n);
  cairn::cast_host(DType::float32, wv.data(), DType::bfloat16, want16.data(), n, cairn::OnOverflow::error);
  cairn::LoadOptions only_w;
  only_w.subtree = "w";
  CHECK(test::same_bits(device_values(cairn::load_orbax<thrust::device_vector<cairn::bfloat16>>(dir + "/cast", only_w)), want16));

  // Host shards of a 2x4 mesh exported block by block (8 chunks), then loaded onto one device
  // shard (every block copied in) and onto a device shard holding rows 3..8 of 12 rows split 2 ways.
  const auto kv = random_bits<float>(12 * 20);
  OrbaxHostSharded h{ShardedArray<float>::from_host(kv, {12, 20}, NamedSharding(Mesh::host({{"a", 2}, {"b", 4}}), PartitionSpec{"a", "b"}))};
  cairn::save_orbax(dir + "/host-2x4", h);
  OrbaxHostSharded whole{ShardedArray<float>(NamedSharding(Mesh::device({{"x", 1}}), PartitionSpec{}))};
  cairn::load_orbax(dir + "/host-2x4", whole);
  REQUIRE(whole.kernel.shards().size() == 1);
  CHECK(whole.kernel.shards()[0].on_device());
  CHECK(test::same_bits(whole.kernel.gather(), kv));
  for (int r = 0; r < 2; ++r) {
    CAPTURE(r);
    OrbaxHostSharded part{ShardedArray<float>(NamedSharding(Mesh::device_per_process({{"p", 2}}, 1, r), PartitionSpec{"p"}))};
    cairn::load_orbax(dir + "/host-2x4", part);
    REQUIRE(part.kernel.shards().size() == 1);
    const auto& shard = part.kernel.shards()[0];
    CHECK(shard.on_device());
    const auto values = shard.to_host();
    REQUIRE(values.size() == 6 * 20);
    CHECK(std::memcmp(values.data(), kv.data() + r * 6 * 20, values.size() * sizeof(float)) == 0);
  }

  // A cairn checkpoint saved from the device, shown to Orbax without copying, loads back onto it.
  cairn::save(dir + "/cairn", s);
  const auto linked = cairn::link_as_orbax(dir + "/cairn", dir + "/linked");
  CHECK(linked.leaves == 4);
  load_back(dir + "/linked");
}

}  // namespace test
