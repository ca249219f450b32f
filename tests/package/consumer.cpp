// SPDX-License-Identifier: Apache-2.0
// A user's program: the packaging tests build it against installed, vendored and
// single-header cairn.
#include <cairn/cairn.hpp>

#include <cstdio>
#include <filesystem>

struct Params { Eigen::MatrixXf w; std::vector<double> b; };
CAIRN_TREE(Params, w, b)

int main(int argc, char** argv) {
  const std::string dir = std::string(argc > 1 ? argv[1] : "/tmp/cairn-consumer") + "/ckpt";
  std::filesystem::remove_all(dir);
  Params p{Eigen::MatrixXf::Identity(3, 3), {1.0, 2.0}};
  cairn::save(dir, p);
  Params q = cairn::load<Params>(dir);
  const bool ok = q.w == p.w && q.b == p.b;
  std::printf("consumer: %s\n", ok ? "ok" : "MISMATCH");
  return ok ? 0 : 1;
}
