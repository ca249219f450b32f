// SPDX-License-Identifier: Apache-2.0
// cairn's headers under the warnings strict projects build with (CMakeLists.txt beside this
// file lists them, with -Werror): a program that includes cairn with -I (add_subdirectory,
// FetchContent, a copied single header), where the compiler does not treat the headers as a
// system library's, sees every warning in them. Header-only, so that the runtime's code is
// compiled here too, and the templates a program instantiates are: every kind of leaf and
// node, saves and loads with casts, sharded arrays, the Checkpointer, safetensors, inspect,
// verify and convert, and the opt-in headers that were found (Orbax, S3, MPI). Compiled only:
// running it is the other tests' work.
#include <cairn/cairn.hpp>
#if CAIRN_STRICT_ORBAX
#include <cairn/orbax.hpp>
#endif
#if CAIRN_STRICT_S3
#include <cairn/s3.hpp>
#endif
#if CAIRN_STRICT_MPI
#include <cairn/mpi.hpp>
#endif

#include <unsupported/Eigen/CXX11/Tensor>

#include <array>
#include <deque>
#include <list>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <unordered_map>
#include <variant>
#include <vector>

namespace strict {

enum class Phase : std::uint8_t { warmup, train };

struct Dense {
  Eigen::MatrixXf kernel;
  Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> rows;
  Eigen::Vector3f fixed;
  Eigen::ArrayXXi counts;
  Eigen::Tensor<float, 3> conv;
  Eigen::Tensor<std::int8_t, 2, Eigen::RowMajor> codes;
};

struct State {
  std::map<std::string, Dense> params;
  std::unordered_map<std::int64_t, std::vector<double>> by_id;
  std::vector<bool> flags;
  std::deque<std::int16_t> history;
  std::array<float, 4> lr{};
  std::tuple<int, std::string, cairn::bfloat16> misc;
  std::pair<std::uint64_t, cairn::float16> pair;
  std::optional<std::vector<cairn::float8_e4m3fn>> maybe;
  cairn::Array<float> grid;
  cairn::ShardedArray<float> sharded;
  Phase phase = Phase::warmup;
  std::string note;
  std::int64_t step = 0;
};

// Parts held by pointer, in a list and as a variant.
struct Holders {
  std::list<float> xs;
  std::unique_ptr<Dense> dense;
  std::shared_ptr<std::vector<float>> shared;
  std::variant<std::monostate, float, Dense> either;
  std::vector<Eigen::Vector3d> positions;  // packed: one [n, 3] leaf
  std::vector<std::array<std::uint8_t, 4>> colors;
};

CAIRN_TREE(Dense, kernel, rows, fixed, counts, conv, codes)
CAIRN_TREE(State, params, by_id, flags, history, lr, misc, pair, maybe, grid, sharded, phase, note, step)
CAIRN_TREE(Holders, xs, dense, shared, either, positions, colors)

// Never called: the point is what the compiler instantiates and checks.
[[maybe_unused]] void everything(const std::string& dir) {
  State s;
  cairn::SaveOptions so;
  so.cast = {{"params/**", cairn::DType::bfloat16}};
  so.user_metadata = cairn::Json::object({{"epoch", 3}, {"loss", 0.25}});
  cairn::save(dir + "/a", s, so);
  State back = cairn::load<State>(dir + "/a");
  Holders h;
  cairn::save(dir + "/h", h);
  (void)cairn::load(dir + "/h", h);
  (void)cairn::leaf_count(h);
  cairn::LoadOptions lo = cairn::LoadOptions::partial();
  lo.allow_lossy_cast = {"**"};
  (void)cairn::load(dir + "/a", back, lo);
  (void)cairn::load_subtree<std::map<std::string, Dense>>(dir + "/a", "params");
  (void)cairn::metadata(dir + "/a").summary();
  std::uint64_t data_position = 7;  // a cereal object beside the tree
  (void)cairn::save(dir + "/items", cairn::Items().tree("state", s).object("data", data_position));

  cairn::ShardedArray<cairn::bfloat16> w(cairn::NamedSharding(cairn::Mesh::host({{"x", 2}}), cairn::PartitionSpec{"x"}));
  (void)cairn::load(dir + "/w", w);

  cairn::Checkpointer ckptr(dir + "/run", {.save_policy = cairn::SavePolicy::every_n_steps(10),
                                           .retention = cairn::RetentionPolicy::best_n(2, "loss", cairn::RetentionPolicy::Mode::min)});
  if (auto latest = ckptr.latest()) (void)ckptr.load(*latest, s);
  (void)ckptr.save_async(s.step, s, {.metrics = cairn::Json::object({{"loss", 0.5}})});
  ckptr.wait();

  (void)cairn::save_safetensors(dir + "/m.safetensors", s.params);
  (void)cairn::load_safetensors<std::map<std::string, Dense>>(dir + "/m.safetensors");
  (void)cairn::inspect(dir + "/a");
  (void)cairn::verify(dir + "/a");
  (void)cairn::read_arrays(dir + "/a", {"grid"});
  (void)cairn::convert(dir + "/a", dir + "/b");
#if CAIRN_STRICT_ORBAX
  (void)cairn::save_orbax(dir + "/orbax", s.params);
  (void)cairn::load_orbax<std::map<std::string, Dense>>(dir + "/orbax");
#endif
#if CAIRN_STRICT_S3
  cairn::S3Store bucket("s3", "bucket", cairn::S3Options{});
  cairn::save(cairn::Location(bucket, "run7/100"), s);
#endif
#if CAIRN_STRICT_MPI
  cairn::MpiCoordinator coordinator(MPI_COMM_WORLD);
  so.coordinator = &coordinator;
  cairn::save(dir + "/mpi", s, so);
#endif
}

}  // namespace strict
