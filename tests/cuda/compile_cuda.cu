// SPDX-License-Identifier: Apache-2.0
// Built by CI with nvcc (CUDA 13, CCCL 3 Thrust): the whole library compiles in a CUDA
// translation unit, and the cast and box-copy kernels instantiate for device memory. Runs
// its checks only where a GPU is present (exit code 0 and a note otherwise): a device cast
// against the host's, and sharded device arrays saved, resharded and restored bit-exactly.
#include <cairn/cairn.hpp>

#include <cstdio>
#include <filesystem>
#include <tuple>

#include <unistd.h>
#include <vector>

#include <thrust/device_vector.h>

struct Small { std::vector<float> w; int step = 0; };
CAIRN_TREE(Small, w, step)

int main() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("compile_cuda: built with nvcc; no GPU here, device checks skipped\n");
    return 0;
  }
  std::vector<float> host = {1.0f, 2.5f, -3.25f, 65504.0f, 1e6f};
  thrust::device_vector<float> src(host.begin(), host.end());
  thrust::device_vector<cairn::bfloat16> dst(host.size());
  cairn::detail::cast_typed<cairn::bfloat16, float>(thrust::device, thrust::raw_pointer_cast(src.data()),
                                                    thrust::raw_pointer_cast(dst.data()), host.size(),
                                                    cairn::OnOverflow::error);
  std::vector<cairn::bfloat16> back(host.size());
  thrust::copy(dst.begin(), dst.end(), back.begin());
  int bad = 0;
  for (std::size_t i = 0; i < host.size(); ++i)
    if (back[i].bits != cairn::bfloat16(host[i]).bits) ++bad;
  std::printf("compile_cuda: device bfloat16 cast %s\n", bad ? "DIFFERS from host" : "matches host");

  // Sharded device arrays over every GPU here: save, reshard onto another layout, compare.
  const std::string dir = "/tmp/cairn-compile-cuda-" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  const std::int64_t n = devices;
  std::vector<float> truth(static_cast<std::size_t>(97 * 33));
  for (std::size_t i = 0; i < truth.size(); ++i) truth[i] = static_cast<float>(i) * 0.37f - 100.0f;
  using cairn::Mesh;
  using cairn::NamedSharding;
  using cairn::PartitionSpec;
  auto a = cairn::ShardedArray<float>::from_host(truth, {97, 33},
                                                 NamedSharding(Mesh::device({{"x", n}}), PartitionSpec{"x"}));
  cairn::SaveOptions so;
  so.cast = {{"1", cairn::DType::bfloat16}};
  cairn::save(dir + "/s", std::make_tuple(a, a), so);
  std::tuple<cairn::ShardedArray<float>, cairn::ShardedArray<cairn::bfloat16>> restored{
      cairn::ShardedArray<float>(NamedSharding(Mesh::device({{"y", n}}), PartitionSpec{cairn::replicated, "y"})),
      cairn::ShardedArray<cairn::bfloat16>(NamedSharding(Mesh::device({{"y", n}}), PartitionSpec{"y"}))};
  cairn::load(dir + "/s", restored);
  const auto got = std::get<0>(restored).gather();
  const auto got16 = std::get<1>(restored).gather();
  int bad_shards = 0;
  for (std::size_t i = 0; i < truth.size(); ++i) {
    if (got[i] != truth[i]) ++bad_shards;
    if (got16[i].bits != cairn::bfloat16(truth[i]).bits) ++bad_shards;
  }
  thrust::device_vector<double> dv(truth.begin(), truth.end());
  cairn::save(dir + "/v", dv);
  auto dv_back = cairn::load<thrust::device_vector<float>>(dir + "/v");
  for (std::size_t i = 0; i < truth.size(); i += 101)
    if (static_cast<float>(dv_back[i]) != truth[i]) ++bad_shards;
  std::filesystem::remove_all(dir);
  std::printf("compile_cuda: sharded device arrays over %d GPU(s) %s\n", devices,
              bad_shards ? "DIFFER after resharding" : "round-trip bit-exactly with resharding and casts");
  return bad || bad_shards ? 1 : 0;
}
