// SPDX-License-Identifier: Apache-2.0
// Partial restore: after a refactor renamed the optimizer and added a field, load what still
// matches, see what did not, then load only the parameters, and a single leaf.
#include <cairn/cairn.hpp>

#include <cstdio>
#include <filesystem>

struct Dense { Eigen::MatrixXf kernel; Eigen::VectorXf bias; };
CAIRN_TREE(Dense, kernel, bias)
struct Adam { std::vector<float> m, v; int64_t count = 0; };
CAIRN_TREE(Adam, m, v, count)
struct TrainState { std::map<std::string, Dense> params; Adam opt; int64_t step = 0; };
CAIRN_TREE(TrainState, params, opt, step)
// Version 2 of the program: "opt" became "optimizer", and a learning rate was added.
struct TrainStateV2 { std::map<std::string, Dense> params; Adam optimizer; int64_t step = 0; float lr = 1e-3f; };
CAIRN_TREE(TrainStateV2, params, optimizer, step, lr)

int main(int argc, char** argv) {
  const std::string dir = argc > 1 ? argv[1] : "/tmp/cairn-partial";
  std::filesystem::remove_all(dir);
  TrainState state;
  state.params["encoder"] = {Eigen::MatrixXf::Random(64, 64), Eigen::VectorXf::Random(64)};
  state.params["decoder"] = {Eigen::MatrixXf::Random(64, 8), Eigen::VectorXf::Random(8)};
  state.opt = {std::vector<float>(4232, 0.f), std::vector<float>(4232, 0.f), 10};
  state.step = 1000;
  cairn::save(dir + "/1000", state);

  TrainStateV2 v2;
  try {
    cairn::load(dir + "/1000", v2);  // strict by default: lists every key that does not match
  } catch (const cairn::Error& e) {
    std::printf("strict load refused:\n  %s\n\n", e.what());
  }
  cairn::LoadReport report = cairn::load(dir + "/1000", v2, cairn::LoadOptions::partial());
  std::printf("partial load:\n%s\n", report.summary().c_str());

  auto params = cairn::load_subtree<std::map<std::string, Dense>>(dir + "/1000", "params");
  auto kernel = cairn::load_subtree<Eigen::MatrixXf>(dir + "/1000", "params/decoder/kernel");
  std::printf("params only: %zu layers; decoder kernel alone: %ldx%ld\n", params.size(),
              static_cast<long>(kernel.rows()), static_cast<long>(kernel.cols()));
  return kernel == state.params["decoder"].kernel ? 0 : 1;
}
