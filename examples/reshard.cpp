// SPDX-License-Identifier: Apache-2.0
// Resharding: save a model whose weights are sharded over a 2x4 mesh ("data" x "model"),
// then restore it onto an 8x1 mesh and onto one device, printing what each target shard read.
// The meshes here are host "devices" (plain memory); Mesh::device(...) puts the same shards
// on CUDA GPUs when this file is compiled with nvcc.
#include <cairn/cairn.hpp>

#include <cstdio>
#include <filesystem>
#include <random>

using cairn::Mesh;
using cairn::NamedSharding;
using cairn::PartitionSpec;
using cairn::ShardedArray;

struct Layer {
  ShardedArray<float> kernel;  // [in, out]
  ShardedArray<float> bias;    // [out]
};
CAIRN_TREE(Layer, kernel, bias)
struct Model {
  std::vector<Layer> layers;
  std::int64_t step = 0;
};
CAIRN_TREE(Model, layers, step)

static void print_reads(const char* title, const cairn::LoadReport& report) {
  std::printf("%s: %llu bytes read for %llu needed\n", title, static_cast<unsigned long long>(report.bytes_read),
              static_cast<unsigned long long>(report.bytes_needed));
  for (const auto& r : report.shard_reads) {
    if (r.key != "layers/0/kernel") continue;  // one leaf is enough to see the pattern
    std::printf("  %s shard %s on %s %d <- chunks", r.key.c_str(), cairn::to_string(r.box).c_str(),
                cairn::memory_kind_name(r.memory), r.device);
    for (const auto& c : r.from_chunks) std::printf(" %s", cairn::to_string(c).c_str());
    std::printf("\n");
  }
}

int main(int argc, char** argv) {
  const std::string dir = argc > 1 ? argv[1] : "/tmp/cairn-reshard";
  std::filesystem::remove_all(dir);

  // Saved from a 2x4 mesh: kernels split rows over "data" and columns over "model" (as
  // PartitionSpec('data', 'model') in JAX); biases split over "model", replicated over "data".
  const NamedSharding kernel_2x4(Mesh::host({{"data", 2}, {"model", 4}}), PartitionSpec{"data", "model"});
  const NamedSharding bias_2x4(kernel_2x4.mesh, PartitionSpec{"model"});
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.f, 0.05f);
  Model model;
  std::vector<std::vector<float>> truth;
  for (auto [in, out] : {std::pair{256, 512}, std::pair{512, 128}}) {
    std::vector<float> k(static_cast<std::size_t>(in * out)), b(static_cast<std::size_t>(out));
    for (auto& v : k) v = normal(rng);
    for (auto& v : b) v = normal(rng);
    model.layers.push_back({ShardedArray<float>::from_host(k, {in, out}, kernel_2x4),
                            ShardedArray<float>::from_host(b, {out}, bias_2x4)});
    truth.push_back(std::move(k));
    truth.push_back(std::move(b));
  }
  model.step = 1200;
  auto saved = cairn::save(dir + "/1200", model);
  std::printf("saved %zu leaves, %llu bytes (replicated bias shards written once)\n", saved.leaves,
              static_cast<unsigned long long>(saved.bytes_written));
  std::printf("%s\n", cairn::metadata(dir + "/1200").summary().c_str());

  // Restore onto 8 devices in one axis: rows of every kernel and bias split 8 ways.
  const NamedSharding rows_8(Mesh::host({{"x", 8}}), PartitionSpec{"x"});
  Model on8;
  on8.layers.resize(2, Layer{ShardedArray<float>(rows_8), ShardedArray<float>(rows_8)});
  print_reads("restore onto 8x1", cairn::load(dir + "/1200", on8));

  // Restore onto one device: plain arrays, or a ShardedArray over a 1-device mesh.
  const NamedSharding one(Mesh::host({{"x", 1}}), PartitionSpec{});
  Model on1;
  on1.layers.resize(2, Layer{ShardedArray<float>(one), ShardedArray<float>(one)});
  print_reads("restore onto 1 device", cairn::load(dir + "/1200", on1));

  // Both restores hold exactly the saved values.
  bool same = true;
  for (std::size_t l = 0; l < 2; ++l) {
    same = same && on8.layers[l].kernel.gather() == truth[2 * l] && on8.layers[l].bias.gather() == truth[2 * l + 1];
    same = same && on1.layers[l].kernel.gather() == truth[2 * l] && on1.layers[l].bias.gather() == truth[2 * l + 1];
  }
  std::printf("restored values %s the saved ones\n", same ? "equal" : "DIFFER from");
  return same ? 0 : 1;
}
