// SPDX-License-Identifier: Apache-2.0
// Export for inference: a float32 training state saved as a bfloat16, parameters-only
// checkpoint, then loaded by an "inference server" that keeps bfloat16 weights.
#include <cairn/cairn.hpp>

#include <cstdio>
#include <filesystem>

struct Dense { Eigen::MatrixXf kernel; Eigen::VectorXf bias; };
CAIRN_TREE(Dense, kernel, bias)
struct TrainState { std::map<std::string, Dense> params; std::vector<float> adam_m, adam_v; int64_t step = 0; };
CAIRN_TREE(TrainState, params, adam_m, adam_v, step)

using Bf16Matrix = Eigen::Matrix<cairn::bfloat16, Eigen::Dynamic, Eigen::Dynamic>;
using Bf16Vector = Eigen::Matrix<cairn::bfloat16, Eigen::Dynamic, 1>;
struct ServingDense { Bf16Matrix kernel; Bf16Vector bias; };
CAIRN_TREE(ServingDense, kernel, bias)

int main(int argc, char** argv) {
  const std::string dir = argc > 1 ? argv[1] : "/tmp/cairn-export";
  std::filesystem::remove_all(dir);
  TrainState state;
  for (const char* name : {"layer0", "layer1", "layer2"})
    state.params[name] = {Eigen::MatrixXf::Random(256, 256), Eigen::VectorXf::Random(256)};
  state.adam_m.assign(200000, 0.1f);
  state.adam_v.assign(200000, 0.2f);
  state.step = 5000;
  cairn::save(dir + "/train", state);

  // Only the parameters, stored as bfloat16: save the subtree, with a cast rule.
  cairn::SaveOptions o;
  o.cast = {{"*", cairn::DType::bfloat16}};
  o.user_metadata = cairn::Json::object({{"exported_from_step", state.step}});
  cairn::SaveReport r = cairn::save(dir + "/export", state.params, o);
  std::printf("export: %zu leaves, %zu cast to bfloat16, %llu bytes (training checkpoint: %llu)\n", r.leaves, r.cast.size(),
              static_cast<unsigned long long>(r.bytes_written),
              static_cast<unsigned long long>(cairn::metadata(dir + "/train").total_bytes()));

  auto serving = cairn::load<std::map<std::string, ServingDense>>(dir + "/export");
  const float w = serving.at("layer1").kernel(3, 4).to_float();
  const float ref = cairn::bfloat16(state.params.at("layer1").kernel(3, 4)).to_float();
  std::printf("layer1 kernel(3,4): float32 %.8f, bfloat16 %.8f\n", state.params.at("layer1").kernel(3, 4), w);
  std::printf("%s", cairn::metadata(dir + "/export").summary().c_str());
  return w == ref ? 0 : 1;
}
