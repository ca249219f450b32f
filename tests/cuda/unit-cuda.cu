// SPDX-License-Identifier: Apache-2.0
// The device paths on a real GPU. CI builds this file with nvcc (CUDA 13, CCCL 3 Thrust), so
// the whole library compiles in a CUDA translation unit and the cast and box-copy kernels
// instantiate for device memory; where no GPU is present every case says so and passes, since
// the same code paths run on the host-side device system in the other tests. On a GPU (run it
// there: docs/sharding.md, "CUDA builds"), each case compares the device against the host bit for bit:
//   - the cast kernels for every pair of numeric dtypes, overflow errors included;
//   - the box-copy kernels for random boxes, orders and element sizes, and the row kernel for
//     many short rows, long rows and every unit width;
//   - pinned buffers kept and reused;
//   - every device leaf (thrust::device_vector, DeviceArrayView, ShardedArray on device
//     meshes) saved and loaded, with casts on save and on load, larger than a write piece;
//   - resharding between host meshes and device shards, from C- and F-order chunks;
//   - device shards exported to safetensors with and without a cast;
//   - device leaves exported to Orbax (every layout, zstd, casts) and loaded back onto the
//     device, host-sharded Orbax blocks loaded onto device shards, a linked export;
//   - ranks (threads of this process) holding device shards, saved together and resharded;
//   - async saves, whose snapshot must hold the values of the moment it returned, also
//     through a Checkpointer on a MemoryStore, with a failed step and a resume;
//   - device leaves in a bucket (the S3 store against tests/s3/fake_s3.py, which this program
//     starts: Python's standard library, which a GPU machine has): parts uploaded side by side
//     from the save's staging and ranged GETs into the load's page-locked pieces, with device
//     memory on the other side (a device pointer handed to libcurl would pass on the host-side
//     device system and fail only here); casts, resharding, async saves and a Checkpointer;
//   - CUDA failures as cairn::Error naming the call.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <cairn/cairn.hpp>
#include <cairn/leaves/thrust_leaves.hpp>
#include <cairn/s3.hpp>

#include "../test_util.hpp"
#include "../orbax/device_round_trip.hpp"
#include "../s3/fake_s3_server.hpp"

#include <Eigen/Core>
#include <thrust/device_vector.h>

#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

using cairn::DType;
using cairn::Mesh;
using cairn::NamedSharding;
using cairn::OnOverflow;
using cairn::PartitionSpec;
using cairn::ShardedArray;

namespace {

int gpu_count() {
  static const int n = [] {
    int d = 0;
    if (cudaGetDeviceCount(&d) != cudaSuccess) d = 0;
    if (d == 0) std::printf("unit-cuda: built with nvcc; no GPU here, so the device checks are skipped\n");
    return d;
  }();
  return n;
}

// Host bytes to a fresh device buffer and back.
cairn::detail::DeviceBytes to_device(const std::vector<unsigned char>& host, int device = 0) {
  cairn::detail::DeviceBytes d(std::max<std::size_t>(host.size(), 1), device);
  cairn::detail::copy_bytes(d.data(), cairn::MemoryKind::device, host.data(), cairn::MemoryKind::host, host.size());
  return d;
}
std::vector<unsigned char> to_host(const cairn::detail::DeviceBytes& d, std::size_t n) {
  std::vector<unsigned char> out(n);
  cairn::detail::copy_bytes(out.data(), cairn::MemoryKind::host, d.data(), cairn::MemoryKind::device, n);
  return out;
}

template <class T>
std::vector<T> device_to_host(const thrust::device_vector<T>& v) {
  std::vector<T> out(v.size());
  thrust::copy(v.begin(), v.end(), out.begin());
  return out;
}

// What one cast does on either side: the bytes, or the error's message.
struct CastResult {
  std::vector<unsigned char> bytes;
  std::string error;
};

template <class F>
CastResult run_cast(F&& f) {
  CastResult r;
  try {
    r.bytes = f();
  } catch (const cairn::Error& e) {
    r.error = e.what();
  }
  return r;
}

}  // namespace

TEST_CASE("device cast kernels equal the host kernels for every pair of numeric dtypes, bit for bit") {
  if (!gpu_count()) return;
  // Two full blocks and a partial one, as the host test; random bits hold NaNs, infinities,
  // subnormals and values out of range of the narrower types.
  const std::size_t n = 2 * 4096 + 37;
  int pairs = 0, errors_compared = 0;
  for (DType from : cairn::all_numeric_dtypes)
    for (DType to : cairn::all_numeric_dtypes) {
      auto src = test::random_bits<unsigned char>(n * cairn::dtype_size(from));
      if (from == DType::bool_)
        for (auto& b : src) b &= 1;
      const std::size_t out = n * cairn::dtype_size(to);
      const auto dsrc = to_device(src);
      cairn::detail::DeviceBytes ddst(out, 0);
      for (OnOverflow mode : {OnOverflow::saturate, OnOverflow::error}) {
        const CastResult host = run_cast([&] {
          std::vector<unsigned char> h(out);
          cairn::cast_host(from, src.data(), to, h.data(), n, mode);
          return h;
        });
        const CastResult dev = run_cast([&] {
          cairn::detail::cast_device(from, dsrc.data(), to, ddst.data(), n, mode);
          return to_host(ddst, out);
        });
        INFO(cairn::dtype_name(from), " -> ", cairn::dtype_name(to), mode == OnOverflow::error ? " (error)" : " (saturate)");
        CHECK(host.error == dev.error);
        if (host.error.empty() && dev.error.empty()) CHECK(host.bytes == dev.bytes);
        if (!host.error.empty()) ++errors_compared;
      }
      ++pairs;
    }
  CHECK(pairs == static_cast<int>(std::size(cairn::all_numeric_dtypes) * std::size(cairn::all_numeric_dtypes)));
  CHECK(errors_compared > 0);
  std::printf("unit-cuda: %d dtype pairs cast on the GPU equal the host; %d overflow errors equal\n", pairs,
              errors_compared);
}

TEST_CASE("a device cast of many blocks equals the host's (float32 -> bfloat16, float16 -> float64)") {
  if (!gpu_count()) return;
  const std::size_t n = (std::size_t{1} << 22) + 12345;
  for (auto [from, to] : {std::pair{DType::float32, DType::bfloat16}, std::pair{DType::float16, DType::float64},
                          std::pair{DType::float64, DType::float8_e4m3fn}}) {
    const auto src = test::random_bits<unsigned char>(n * cairn::dtype_size(from));
    const std::size_t out = n * cairn::dtype_size(to);
    std::vector<unsigned char> host(out);
    cairn::cast_host(from, src.data(), to, host.data(), n, OnOverflow::saturate);
    const auto dsrc = to_device(src);
    cairn::detail::DeviceBytes ddst(out, 0);
    cairn::detail::cast_device(from, dsrc.data(), to, ddst.data(), n, OnOverflow::saturate);
    CHECK_MESSAGE(to_host(ddst, out) == host, cairn::dtype_name(from) << " -> " << cairn::dtype_name(to));
  }
}

TEST_CASE("the device box copy equals the host box copy for random boxes, orders and element sizes") {
  if (!gpu_count()) return;
  std::mt19937_64& rng = test::rng();
  for (int iter = 0; iter < 300; ++iter) {
    const std::size_t rank = 1 + rng() % 4;
    cairn::Box region{cairn::Shape(rank), cairn::Shape(rank)}, src_box, dst_box;
    for (std::size_t d = 0; d < rank; ++d) {
      region.start[d] = static_cast<std::int64_t>(rng() % 5);
      region.shape[d] = 1 + static_cast<std::int64_t>(rng() % 9);
    }
    src_box = region;
    dst_box = region;
    for (cairn::Box* b : {&src_box, &dst_box})
      for (std::size_t d = 0; d < rank; ++d) {
        const auto before = static_cast<std::int64_t>(rng() % 3), after = static_cast<std::int64_t>(rng() % 3);
        b->start[d] -= before;
        b->shape[d] += before + after;
      }
    const bool src_f = rng() % 2, dst_f = rng() % 2;
    const std::size_t item = std::size_t{1} << (rng() % 4);
    CAPTURE(iter);
    const auto src = test::random_bits<unsigned char>(src_box.elements() * item);
    const auto dst0 = test::random_bits<unsigned char>(dst_box.elements() * item);
    const auto plan = cairn::detail::plan_box_copy(region, src_box, src_f, dst_box, dst_f);
    std::vector<unsigned char> want = dst0;
    cairn::detail::box_copy_host(item, src.data(), want.data(), plan);
    const auto dsrc = to_device(src);
    auto ddst = to_device(dst0);
    cairn::detail::box_copy_device(item, dsrc.data(), ddst.data(), plan, 0);
    CHECK(to_host(ddst, dst0.size()) == want);
  }
}

TEST_CASE("the device row kernel equals the host box copy: many short rows, long rows, every unit width, unaligned starts") {
  if (!gpu_count()) return;
  struct Case {
    cairn::Shape src, start, extent;
    std::size_t item;
  };
  const Case cases[] = {
      {{64, 96, 40}, {0, 0, 8}, {64, 96, 16}, 4},     // 6,144 rows of 64 bytes (the 2-D copies' limit was 4,096)
      {{64, 96, 40}, {1, 3, 5}, {61, 90, 33}, 2},     // odd width and start: 2-byte units
      {{50, 70, 9}, {2, 1, 1}, {47, 66, 7}, 1},       // 1-byte elements, rows of 7
      {{40, 30, 20}, {1, 1, 2}, {38, 28, 16}, 16},    // 16-byte elements
      {{24, 3, 262144}, {0, 1, 0}, {24, 2, 262144}, 4}, // few long rows of 1 MiB: several segments each
      {{5, 7, 11, 13}, {1, 2, 3, 4}, {3, 4, 5, 6}, 8},  // rank 4
  };
  for (const Case& k : cases) {
    CAPTURE(k.item);
    const cairn::Box src_box{cairn::Shape(k.src.size(), 0), k.src};
    const cairn::Box region{k.start, k.extent};
    // The destination: the region with a margin, so rows land at other offsets.
    cairn::Box dst_box = region;
    for (std::size_t d = 0; d < dst_box.rank(); ++d) { dst_box.start[d] -= 1; dst_box.shape[d] += 3; }
    const auto src = test::random_bits<unsigned char>(src_box.elements() * k.item);
    const auto dst0 = test::random_bits<unsigned char>(dst_box.elements() * k.item);
    const auto plan = cairn::detail::plan_box_copy(region, src_box, false, dst_box, false);
    std::vector<unsigned char> want = dst0;
    cairn::detail::box_copy_host(k.item, src.data(), want.data(), plan);
    const auto dsrc = to_device(src);
    auto ddst = to_device(dst0);
    cairn::detail::box_copy_device(k.item, dsrc.data(), ddst.data(), plan, 0);
    CHECK(to_host(ddst, dst0.size()) == want);
  }
}

TEST_CASE("pinned buffers given back are reused, within twice the size asked for") {
  if (!gpu_count()) return;
  void* first = nullptr;
  {
    cairn::detail::PinnedBytes a(std::size_t{6} << 20);
    first = a.data();
    CHECK(a.size() == (std::size_t{6} << 20));
  }
  cairn::detail::PinnedBytes b(std::size_t{5} << 20);  // the kept 6 MiB buffer
  CHECK(static_cast<void*>(b.data()) == first);
  CHECK(b.size() == (std::size_t{5} << 20));
  cairn::detail::PinnedBytes c(std::size_t{2} << 20);  // none kept small enough: a new one
  CHECK(static_cast<void*>(c.data()) != first);
  std::memset(c.data(), 1, c.size());  // page-locked host memory, writable
}

struct DeviceState {
  thrust::device_vector<float> w;
  cairn::DeviceArrayView<cairn::bfloat16> view;
  ShardedArray<double> sharded;
  int step = 0;
};
CAIRN_TREE(DeviceState, w, view, sharded, step)

// The round-trip cases' state (on disk and in a bucket): random values over two write pieces
// of float32 (so the save's device scratch and staging run in pieces), a view of device
// memory and a device ShardedArray of `rows` x `cols` on one GPU; and a target of the same
// shapes to load into.
struct DeviceRoundTrip {
  DeviceRoundTrip(std::int64_t rows, std::int64_t cols)
      : wv(test::random_bits<float>(n)), vv(test::random_bits<cairn::bfloat16>(6 * 7)),
        sv(test::random_bits<double>(static_cast<std::size_t>(rows * cols))), view_mem(vv.begin(), vv.end()),
        view_back(vv.size()) {
    const NamedSharding gpu(Mesh::device({{"x", 1}}), PartitionSpec{"x"});
    s.w = thrust::device_vector<float>(wv.begin(), wv.end());
    s.view = {thrust::raw_pointer_cast(view_mem.data()), {6, 7}, 0};
    s.sharded = ShardedArray<double>::from_host(sv, {rows, cols}, gpu);
    s.step = 12;
    t.view = {thrust::raw_pointer_cast(view_back.data()), {6, 7}, 0};
    t.sharded = ShardedArray<double>(NamedSharding(Mesh::device({{"x", 1}}), PartitionSpec{}));
  }
  // The target loaded from what `s` saved.
  void check_loaded() {
    CHECK(test::same_bits(device_to_host(t.w), wv));
    CHECK(test::same_bits(device_to_host(view_back), vv));
    CHECK(test::same_bits(t.sharded.gather(), sv));
    CHECK(t.step == 12);
  }
  // Cast on save (float32 -> bfloat16 on the GPU, in pieces) to `at`, then the stored bfloat16
  // into float64 on the GPU; the host's cast kernels are the reference.
  void check_casts(const cairn::Location& at) {
    cairn::SaveOptions so;
    so.cast = {{"w", DType::bfloat16}};
    cairn::save(at, s, so);
    std::vector<cairn::bfloat16> want16(n);
    cairn::cast_host(DType::float32, wv.data(), DType::bfloat16, want16.data(), n, OnOverflow::error);
    CHECK(test::same_bits(cairn::load_subtree<std::vector<cairn::bfloat16>>(at, "w"), want16));
    auto wide = cairn::load_subtree<thrust::device_vector<double>>(at, "w");
    std::vector<double> want64(n);
    cairn::cast_host(DType::bfloat16, want16.data(), DType::float64, want64.data(), n, OnOverflow::error);
    CHECK(test::same_bits(device_to_host(wide), want64));
  }
  const std::size_t n = 2 * cairn::detail::write_piece_bytes / 4 + 4099;
  const std::vector<float> wv;
  const std::vector<cairn::bfloat16> vv;
  const std::vector<double> sv;
  thrust::device_vector<cairn::bfloat16> view_mem, view_back;
  DeviceState s, t;
};

TEST_CASE("device leaves round-trip bit-exactly, larger than a write piece, with casts on save and load") {
  if (!gpu_count()) return;
  test::TempDir dir;
  DeviceRoundTrip r(33, 17);
  cairn::save(dir / "plain", r.s);
  cairn::load(dir / "plain", r.t);
  r.check_loaded();
  CHECK(cairn::verify(dir / "plain").ok());
  r.check_casts(dir / "cast");
  std::printf("unit-cuda: %zu-element device leaf saved, cast on the GPU and loaded bit-exactly\n", r.n);
}

TEST_CASE("host-sharded and column-major checkpoints reshard onto device shards, casting on the way, and back") {
  if (!gpu_count()) return;
  test::TempDir dir;
  const std::int64_t rows = 37, cols = 53;
  const auto truth = test::random_bits<float>(static_cast<std::size_t>(rows * cols));
  // 2x4 host shards: every stored chunk is a sub-box of the one device shard, so the load
  // places each through device scratch and the device box copy.
  cairn::save(dir / "host8", ShardedArray<float>::from_host(truth, {rows, cols},
                                                               NamedSharding(Mesh::host({{"x", 2}, {"y", 4}}),
                                                                             PartitionSpec{"x", "y"})));
  ShardedArray<float> same(NamedSharding(Mesh::device({{"d", 1}}), PartitionSpec{}));
  cairn::load(dir / "host8", same);
  CHECK(same.shards().at(0).on_device());
  CHECK(test::same_bits(same.gather(), truth));

  // With a cast: float32 -> float64 (exact), then -> bfloat16 (lossy: allowed by key).
  ShardedArray<double> wide(NamedSharding(Mesh::device({{"d", 1}}), PartitionSpec{"d"}));
  cairn::load(dir / "host8", wide);
  std::vector<double> want64(truth.size());
  cairn::cast_host(DType::float32, truth.data(), DType::float64, want64.data(), truth.size(), OnOverflow::error);
  CHECK(test::same_bits(wide.gather(), want64));
  ShardedArray<cairn::bfloat16> narrow(NamedSharding(Mesh::device({{"d", 1}}), PartitionSpec{}));
  cairn::LoadOptions lossy;
  lossy.allow_lossy_cast = {"**"};
  cairn::load(dir / "host8", narrow, lossy);
  std::vector<cairn::bfloat16> want16(truth.size());
  cairn::cast_host(DType::float32, truth.data(), DType::bfloat16, want16.data(), truth.size(), OnOverflow::error);
  CHECK(test::same_bits(narrow.gather(), want16));

  // Column-major chunks (Eigen) onto a device shard.
  Eigen::MatrixXf m(rows, cols);  // (filled by hand: Eigen's Random is host-only, and nvcc warns of it)
  const auto mv = test::random_bits<float>(static_cast<std::size_t>(rows * cols));
  std::memcpy(m.data(), mv.data(), mv.size() * sizeof(float));
  cairn::save(dir / "eigen", m);
  ShardedArray<float> from_f(NamedSharding(Mesh::device({{"d", 1}}), PartitionSpec{}));
  cairn::load(dir / "eigen", from_f);
  const auto got = from_f.gather();
  bool same_values = true;
  for (std::int64_t i = 0; i < rows; ++i)
    for (std::int64_t j = 0; j < cols; ++j)
      same_values = same_values && std::memcmp(&got[static_cast<std::size_t>(i * cols + j)], &m(i, j), sizeof(float)) == 0;
  CHECK(same_values);

  // Device shard saved, resharded onto 3x2 host shards and onto a thrust::device_vector.
  cairn::save(dir / "dev", same);
  ShardedArray<float> host6(NamedSharding(Mesh::host({{"a", 3}, {"b", 2}}), PartitionSpec{"b", "a"}));
  cairn::load(dir / "dev", host6);
  CHECK(test::same_bits(host6.gather(), truth));
  auto flat = cairn::load<Eigen::MatrixXf>(dir / "dev");
  CHECK(flat.rows() == rows);

  // Every GPU here, if there are several: save over all, restore over all in another layout.
  const int g = gpu_count();
  if (g >= 2) {
    auto over = ShardedArray<float>::from_host(truth, {rows, cols},
                                               NamedSharding(Mesh::device({{"x", g}}), PartitionSpec{"x"}));
    cairn::save(dir / "multi", over);
    ShardedArray<float> back(NamedSharding(Mesh::device({{"y", g}}), PartitionSpec{cairn::replicated, "y"}));
    cairn::load(dir / "multi", back);
    CHECK(test::same_bits(back.gather(), truth));
  } else {
    std::printf("unit-cuda: one GPU here; the multi-GPU reshard is skipped\n");
  }
}

TEST_CASE("large chunks load onto a device shard in pinned pieces: whole, gathered from two chunks, and refused when damaged") {
  if (!gpu_count()) return;
  test::TempDir dir;
  const std::size_t piece = cairn::detail::device_read_piece_bytes;
  const std::int64_t cols = 1024, rows = static_cast<std::int64_t>(2 * piece / (4 * cols) + 5);
  const auto truth = test::random_bits<float>(static_cast<std::size_t>(rows * cols));
  const NamedSharding one(Mesh::device({{"x", 1}}), PartitionSpec{"x"});
  cairn::save(dir / "one", ShardedArray<float>::from_host(truth, {rows, cols}, one));
  ShardedArray<float> back(one);
  CHECK(cairn::load(dir / "one", back).unverified_bytes == 0);
  CHECK(test::same_bits(back.gather(), truth));
  // Two row chunks and 2x2 chunks onto the one device shard: read in pieces into pinned
  // memory, each chunk's rows copied over, then placed by the row kernel.
  for (const auto& spec : {PartitionSpec{"r"}, PartitionSpec{"r", "c"}}) {
    const Mesh mesh = Mesh::host({{"r", 2}, {"c", 2}});
    cairn::save(dir / "split", ShardedArray<float>::from_host(truth, {rows, cols}, NamedSharding(mesh, spec)));
    ShardedArray<float> gathered(one);
    cairn::load(dir / "split", gathered);
    CHECK(test::same_bits(gathered.gather(), truth));
    std::filesystem::remove_all(dir / "split");
  }
  // A byte flipped in the last piece: corrupt, naming the file.
  const std::string file = dir / "one" + "/data-0-0.bin";
  std::string bytes = test::read_file(file);
  bytes[bytes.size() - 100] ^= 0x20;
  test::write_file(file, bytes);
  ShardedArray<float> damaged(one);
  CHECK_CAIRN_ERROR(cairn::load(dir / "one", damaged), cairn::ErrorKind::corrupt, "data-0-0.bin");
}

TEST_CASE("device shards export to safetensors a piece at a time, cast on the GPU, bit-exactly") {
  if (!gpu_count()) return;
  test::TempDir dir;
  // Over two write pieces: the export stages the device rows in pieces (leaf_encoder.hpp).
  const std::int64_t cols = 512, rows = static_cast<std::int64_t>(2 * cairn::detail::write_piece_bytes / (4 * cols) + 7);
  std::vector<float> truth(static_cast<std::size_t>(rows * cols));
  for (auto& x : truth) x = static_cast<float>(test::rng()() % 200001) * 0.01f - 1000.0f;
  std::map<std::string, ShardedArray<float>> tree;
  tree["w"] = ShardedArray<float>::from_host(truth, {rows, cols}, NamedSharding(Mesh::device({{"x", 1}}), PartitionSpec{"x"}));
  auto values = [](const auto& a) {
    using T = std::remove_cvref_t<decltype(*a.data())>;
    return std::vector<T>(a.data(), a.data() + a.size());
  };
  cairn::save_safetensors(dir / "plain.safetensors", tree);
  auto plain = cairn::load_safetensors<std::map<std::string, cairn::Array<float>>>(dir / "plain.safetensors");
  CHECK(test::same_bits(values(plain.at("w")), truth));
  cairn::SafetensorsSaveOptions cast;
  cast.cast = {{"*", DType::bfloat16}};
  cairn::save_safetensors(dir / "half.safetensors", tree, cast);
  std::vector<cairn::bfloat16> want(truth.size());
  cairn::cast_host(DType::float32, truth.data(), DType::bfloat16, want.data(), truth.size(), OnOverflow::error);
  auto half = cairn::load_safetensors<std::map<std::string, cairn::Array<cairn::bfloat16>>>(dir / "half.safetensors");
  CHECK(test::same_bits(values(half.at("w")), want));
}

TEST_CASE("device leaves export to Orbax and load back onto the GPU: every layout, zstd, casts, shards, linked") {
  if (!gpu_count()) return;
  test::TempDir dir;
  // Over two write pieces of float32: the export's staging from the device runs in pieces.
  test::orbax_device_round_trip(dir.path, 2 * cairn::detail::write_piece_bytes / 4 + 4099);
  std::printf("unit-cuda: device leaves exported to Orbax and loaded back onto the GPU bit-exactly\n");
}

TEST_CASE("ranks holding device shards save together and load resharded onto three ranks, each reading its blocks") {
  if (!gpu_count()) return;
  // Ranks as threads of this process: every rank's device is its GPU 0, so here this GPU.
  test::TempDir dir;
  test::device_ranks_round_trip(dir.path, 4099, 1024, {3, 1});  // 16 MiB: chunks of several pieces and blocks
}

struct AsyncState {
  thrust::device_vector<float> v;
  ShardedArray<float> s;
};
CAIRN_TREE(AsyncState, v, s)

TEST_CASE("an async save of device arrays keeps the values of the moment it returned") {
  if (!gpu_count()) return;
  test::TempDir dir;
  const std::size_t n = 3 * cairn::detail::write_piece_bytes / 4 + 77;
  const auto values = test::random_bits<float>(n);
  thrust::device_vector<float> v(values.begin(), values.end());
  auto sharded = ShardedArray<float>::from_host(values, {static_cast<std::int64_t>(n)},
                                                NamedSharding(Mesh::device({{"x", 1}}), PartitionSpec{"x"}));
  AsyncState state{std::move(v), std::move(sharded)};
  auto pending = cairn::save_async(dir / "a", state);
  // Overwritten on the device at once: the snapshot has its own copy.
  thrust::fill(state.v.begin(), state.v.end(), -1.0f);
  CAIRN_CUDA_CHECK(cudaMemset(state.s.shards()[0].data(), 0xFF, n * sizeof(float)));
  pending.wait();
  CHECK(test::same_bits(cairn::load_subtree<std::vector<float>>(dir / "a", "v"), values));
  CHECK(test::same_bits(cairn::load_subtree<std::vector<float>>(dir / "a", "s"), values));
}

namespace {

// A Checkpointer of device state on `store`, under both snapshot regimes: the default budget
// copies the device leaves and returns, a budget below one leaf streams them from the GPU.
// Four async steps, the device memory overwritten as each call returns; step 5 made to fail by
// `fail` (then `clear`), its error holding `failure_holds`, the steps before it kept; then a
// restart resumes the latest step and the one before onto fresh device memory, bit for bit.
void device_checkpointer_steps(const std::function<std::shared_ptr<cairn::Store>(std::uint64_t budget)>& make_store,
                               const std::function<void(std::uint64_t budget)>& fail, const std::function<void()>& clear,
                               const std::string& failure_holds) {
  const std::size_t n = 3 * cairn::detail::write_piece_bytes / 4 + 77;
  for (const std::uint64_t budget : {std::uint64_t{1} << 30, std::uint64_t{4} << 20}) {
    CAPTURE(budget);
    const std::shared_ptr<cairn::Store> store = make_store(budget);
    cairn::CheckpointerOptions options;
    options.retention = cairn::RetentionPolicy::keep_latest(2);
    options.async_memory_budget = budget;
    std::map<std::int64_t, std::vector<float>> truth;
    {
      cairn::Checkpointer ckptr({store, "run"}, options);
      AsyncState state;
      for (std::int64_t step = 1; step <= 4; ++step) {
        truth[step] = test::random_bits<float>(n);
        state.v = thrust::device_vector<float>(truth[step].begin(), truth[step].end());
        state.s = ShardedArray<float>::from_host(truth[step], {static_cast<std::int64_t>(n)},
                                                 NamedSharding(Mesh::device({{"x", 1}}), PartitionSpec{"x"}));
        CHECK(ckptr.save_async(step, state));
        // The training step goes on at once: the save must hold the values of its moment.
        thrust::fill(state.v.begin(), state.v.end(), -1.0f);
        CAIRN_CUDA_CHECK(cudaMemset(state.s.shards()[0].data(), 0xFF, n * sizeof(float)));
      }
      ckptr.wait();
      CHECK(ckptr.steps() == std::vector<std::int64_t>{3, 4});
      fail(budget);
      std::string failure;
      try {
        ckptr.save_async(5, state);
        ckptr.wait();
      } catch (const cairn::Error& e) {
        failure = e.what();
      }
      clear();
      CHECK(failure.find(failure_holds) != std::string::npos);
      CHECK(ckptr.steps() == std::vector<std::int64_t>{3, 4});
    }
    cairn::Checkpointer resumed({store, "run"}, options);
    REQUIRE(resumed.latest() == std::optional<std::int64_t>{4});
    for (const std::int64_t step : {std::int64_t{4}, std::int64_t{3}}) {
      AsyncState back;
      back.s = ShardedArray<float>(NamedSharding(Mesh::device({{"x", 1}}), PartitionSpec{}));
      resumed.load(step, back);
      CHECK(back.s.shards().at(0).on_device());
      CHECK(test::same_bits(device_to_host(back.v), truth[step]));
      CHECK(test::same_bits(back.s.gather(), truth[step]));
    }
  }
}

}  // namespace

TEST_CASE("a Checkpointer of device state on a store in memory: async steps snapshot the GPU, a failed step loses nothing, the latest resumes onto the GPU") {
  if (!gpu_count()) return;
  // A store that is not a filesystem (the path an object store takes: blobs written whole or
  // streamed, published under a key). Step 5's first fsync fails (in the background, or in the
  // call when it streams).
  std::shared_ptr<cairn::MemoryStore> store;
  device_checkpointer_steps([&](std::uint64_t) { return store = std::make_shared<cairn::MemoryStore>(); },
                            [&](std::uint64_t) { store->fail(cairn::MemoryStore::Op::finish, 1); },
                            [&] { store->clear_failures(); }, "(injected)");
  std::printf("unit-cuda: a Checkpointer of device state on a MemoryStore: async steps, a failed step, resumed bit-exactly\n");
}

TEST_CASE("a CUDA failure is a cairn::Error naming the call") {
  if (!gpu_count()) return;
  // Far more than any GPU has.
  CHECK_CAIRN_ERROR(cairn::detail::DeviceBytes(std::size_t{1} << 52, 0), cairn::ErrorKind::io, "cudaMalloc");
  CHECK_CAIRN_ERROR(cairn::detail::DeviceBytes(16, gpu_count() + 3), cairn::ErrorKind::io, "cudaSetDevice");
  // A sharding over more devices than this process has asks for a target sharding.
  const int g = gpu_count();
  std::vector<int> ids(static_cast<std::size_t>(g + 1));
  for (int i = 0; i <= g; ++i) ids[static_cast<std::size_t>(i)] = i;
  const Mesh wide = Mesh::device({{"x", g + 1}}, ids);
  CHECK_CAIRN_ERROR(cairn::detail::require_devices(NamedSharding(wide, PartitionSpec{"x"}), g),
                    cairn::ErrorKind::invalid_argument, "this process sees " + std::to_string(g) + " devices");
}

// Device leaves in a bucket. The bucket is tests/s3/fake_s3.py, started on first use; run this
// program from the repository's root (or define CAIRN_S3_TEST_DIR), with python3 on PATH.
#ifndef CAIRN_S3_TEST_DIR
#define CAIRN_S3_TEST_DIR "tests/s3"
#endif

namespace {

test::FakeS3& server() {
  static test::FakeS3 s("python3", std::string(CAIRN_S3_TEST_DIR) + "/fake_s3.py");
  return s;
}

// Small parts, so a leaf of two write pieces goes up in many parts side by side and comes
// back in many ranged GETs.
std::shared_ptr<cairn::S3Store> bucket(const std::string& root) {
  cairn::S3Options o;
  o.endpoint = server().endpoint();
  o.access_key_id = "AKID";  // never the machine's credential chain (fake_s3.py checks none)
  o.secret_access_key = "secret";
  o.part_size = 1 << 20;
  o.multipart_threshold = 1 << 20;
  o.read_part_size = 1 << 20;
  o.concurrency = 6;
  return std::make_shared<cairn::S3Store>("s3", "bucket", o, root);
}

// Skips where no GPU is, and fails (not skips) where a GPU is but the bucket did not start.
bool ready() {
  if (!gpu_count()) return false;
  REQUIRE_MESSAGE(!server().endpoint().empty(), "tests/s3/fake_s3.py did not start (run from the repository's root, with python3 on PATH)");
  return true;
}

NamedSharding one_gpu(PartitionSpec spec = {}) { return NamedSharding(Mesh::device({{"x", 1}}), std::move(spec)); }

}  // namespace

TEST_CASE("device leaves round-trip through a bucket bit-exactly, over two write pieces, with casts on the GPU") {
  if (!ready()) return;
  auto store = bucket("leaves");
  DeviceRoundTrip r(333, 170);
  cairn::save({store, "plain"}, r.s);
  cairn::load({store, "plain"}, r.t);
  r.check_loaded();
  CHECK(r.t.sharded.shards().at(0).on_device());
  CHECK(cairn::verify({store, "plain"}).ok());
  // The same bytes read onto the host: what the device wrote is what a host reader sees.
  CHECK(test::same_bits(cairn::load_subtree<std::vector<float>>({store, "plain"}, "w"), r.wv));
  r.check_casts({store, "cast"});
  std::printf("unit-cuda: %zu-element device leaf through a bucket in 1 MiB parts, cast on the GPU, bit-exact\n", r.n);
}

TEST_CASE("host-sharded checkpoints in a bucket load onto a device shard, and a device shard's reshards onto a host mesh") {
  if (!ready()) return;
  auto store = bucket("reshard");
  const std::int64_t rows = 1031, cols = 517;  // 2 MiB of float32: chunks span parts
  const auto truth = test::random_bits<float>(static_cast<std::size_t>(rows * cols));
  const NamedSharding host8(Mesh::host({{"x", 2}, {"y", 4}}), PartitionSpec{"x", "y"});
  cairn::save({store, "host8"}, ShardedArray<float>::from_host(truth, {rows, cols}, host8));
  ShardedArray<float> dev(one_gpu());
  cairn::load({store, "host8"}, dev);
  CHECK(dev.shards().at(0).on_device());
  CHECK(test::same_bits(dev.gather(), truth));

  // With a cast on the GPU on the way (float32 -> float64, exact, so no option is needed).
  ShardedArray<double> wide(one_gpu());
  cairn::load({store, "host8"}, wide);
  std::vector<double> want(truth.size());
  cairn::cast_host(DType::float32, truth.data(), DType::float64, want.data(), truth.size(), OnOverflow::error);
  CHECK(test::same_bits(wide.gather(), want));

  // The device shard saved, then loaded onto 2x4 host shards: each reads its sub-box.
  cairn::save({store, "dev1"}, dev);
  ShardedArray<float> back(host8);
  cairn::load({store, "dev1"}, back);
  CHECK_FALSE(back.shards().at(0).on_device());
  CHECK(test::same_bits(back.gather(), truth));
}

TEST_CASE("an async save of device arrays to a bucket keeps the values of the moment it returned") {
  if (!ready()) return;
  auto store = bucket("async");
  const std::size_t n = 3 * cairn::detail::write_piece_bytes / 4 + 77;
  const auto values = test::random_bits<float>(n);
  AsyncState state{thrust::device_vector<float>(values.begin(), values.end()),
                   ShardedArray<float>::from_host(values, {static_cast<std::int64_t>(n)}, one_gpu(PartitionSpec{"x"}))};
  auto pending = cairn::save_async({store, "a"}, state);
  thrust::fill(state.v.begin(), state.v.end(), -1.0f);  // the training step goes on at once
  CAIRN_CUDA_CHECK(cudaMemset(state.s.shards()[0].data(), 0xFF, n * sizeof(float)));
  pending.wait();
  CHECK(test::same_bits(cairn::load_subtree<std::vector<float>>({store, "a"}, "v"), values));
  CHECK(test::same_bits(cairn::load_subtree<std::vector<float>>({store, "a"}, "s"), values));
}

TEST_CASE("a Checkpointer of device state on a bucket: async steps, retention, a refused step loses nothing, the latest resumes onto the GPU") {
  if (!ready()) return;
  // Step 5's commit marker is refused (403, not retried), after its data went up.
  const auto root = [](std::uint64_t budget) { return "ckptr" + std::to_string(budget); };
  device_checkpointer_steps([&](std::uint64_t budget) { return bucket(root(budget)); },
                            [&](std::uint64_t budget) { server().fault_matching("PUT /bucket/" + root(budget) + "/run/5/_CHECKPOINT", "403", 1000); },
                            [] { server().reset(); }, "403");
  std::printf("unit-cuda: a Checkpointer of device state on a bucket: async steps, a refused step, resumed bit-exactly\n");
}
