// SPDX-License-Identifier: Apache-2.0
// The quickstart: a training state with Eigen matrices, a map of layers, an optimizer and a
// step counter; save it, print its metadata, load it back and check it is identical.
#include <cairn/cairn.hpp>

#include <cstdio>
#include <filesystem>

struct Dense { Eigen::MatrixXf kernel; Eigen::VectorXf bias; };
CAIRN_TREE(Dense, kernel, bias)
struct Adam { std::vector<float> m, v; int64_t count = 0; };
CAIRN_TREE(Adam, m, v, count)
struct TrainState { std::map<std::string, Dense> params; Adam opt; int64_t step = 0; std::string note; };
CAIRN_TREE(TrainState, params, opt, step, note)

int main(int argc, char** argv) {
  const std::string dir = argc > 1 ? argv[1] : "/tmp/cairn-quickstart";
  std::filesystem::remove_all(dir);

  TrainState state;
  state.params["dense1"] = {Eigen::MatrixXf::Random(4, 8), Eigen::VectorXf::Random(8)};
  state.params["dense2"] = {Eigen::MatrixXf::Random(8, 2), Eigen::VectorXf::Random(2)};
  state.opt = {std::vector<float>(42, 0.1f), std::vector<float>(42, 0.2f), 7};
  state.step = 100;
  state.note = "quickstart";

  cairn::SaveOptions options;
  options.user_metadata = cairn::Json::object({{"epoch", 3}, {"loss", 0.25}});
  cairn::save(dir + "/100", state, options);

  cairn::CheckpointMetadata meta = cairn::metadata(dir + "/100");
  std::printf("%s", meta.summary().c_str());

  auto restored = cairn::load<TrainState>(dir + "/100");
  const bool same = restored.params.at("dense1").kernel == state.params.at("dense1").kernel &&
                    restored.params.at("dense2").bias == state.params.at("dense2").bias &&
                    restored.opt.m == state.opt.m && restored.opt.count == 7 && restored.step == 100 &&
                    restored.note == state.note;
  std::printf("restored step %lld, epoch %lld: %s\n", static_cast<long long>(restored.step),
              static_cast<long long>(meta.user_metadata.at("epoch").as_int()), same ? "identical" : "DIFFERENT");
  return same ? 0 : 1;
}
