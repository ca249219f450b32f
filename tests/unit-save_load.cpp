// SPDX-License-Identifier: Apache-2.0
#include "test_util.hpp"

#include <cairn/checkpoint/box_reader.hpp>  // usable_cores
#include <cairn/checkpoint/data_files.hpp>  // parallel_read_bytes, crc_piece_bytes
#include <cairn/checkpoint/read_ahead.hpp>  // read_ahead_min_metadata_bytes, data_files_in_head

#include <cereal/archives/binary.hpp>
#include <unsupported/Eigen/CXX11/Tensor>  // Eigen::Tensor leaves (after cairn: either order works)
#include <Eigen/Geometry>                    // Quaternion and Transform leaves (after cairn too)

#include <chrono>
#include <deque>
#include <fstream>
#include <list>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <variant>

namespace rt {
struct Leaves {
  bool flag = false;
  std::int8_t i8 = 0;
  std::uint16_t u16 = 0;
  std::int64_t i64 = 0;
  double f64 = 0;
  cairn::float16 h{};
  cairn::bfloat16 bf{};
  cairn::float8_e4m3fn f8{};
  std::string text;
  std::vector<float> vf;
  std::vector<bool> vb;
  std::array<std::int32_t, 5> arr{};
  Eigen::MatrixXf col_major;
  Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> row_major;
  Eigen::Matrix3f fixed;
  Eigen::ArrayXXi arr2d;
  Eigen::RowVectorXf row_vec;
  cairn::Array<std::uint8_t> nd;
  std::deque<float> dq;
  std::optional<std::vector<double>> maybe;
  std::map<int, std::vector<std::int16_t>> by_int;
  cairn::Shape dims;  // a 1-D int64 leaf, its values inline or on the heap
};
CAIRN_TREE(Leaves, flag, i8, u16, i64, f64, h, bf, f8, text, vf, vb, arr, col_major, row_major, fixed, arr2d, row_vec,
           nd, dq, maybe, by_int, dims)

template <class T> T pick() { return static_cast<T>(test::rng()()); }

Leaves random_leaves() {
  auto& g = test::rng();
  Leaves v;
  v.flag = g() & 1;
  v.i8 = pick<std::int8_t>();
  v.u16 = pick<std::uint16_t>();
  v.i64 = pick<std::int64_t>();
  auto d = test::random_bits<double>(1);
  v.f64 = d[0];
  v.h = cairn::float16::from_bits(pick<std::uint16_t>());
  v.bf = cairn::bfloat16::from_bits(pick<std::uint16_t>());
  v.f8 = cairn::float8_e4m3fn::from_bits(pick<std::uint8_t>());
  for (std::size_t i = g() % 40; i > 0; --i) v.text += static_cast<char>(g());
  v.vf = test::random_bits<float>(g() % 1000);
  for (std::size_t i = g() % 100; i > 0; --i) v.vb.push_back(g() & 1);
  for (auto& x : v.arr) x = pick<std::int32_t>();
  const auto r = static_cast<Eigen::Index>(1 + g() % 9), c = static_cast<Eigen::Index>(1 + g() % 9);
  v.col_major = Eigen::MatrixXf::Random(r, c);
  v.row_major = Eigen::MatrixXd::Random(c, r);
  v.fixed = Eigen::Matrix3f::Random();
  v.arr2d = Eigen::ArrayXXi::Random(r, 3);
  v.row_vec = Eigen::RowVectorXf::Random(c);
  v.nd = cairn::Array<std::uint8_t>({2, static_cast<std::int64_t>(g() % 4), 3});
  for (auto& x : v.nd) x = pick<std::uint8_t>();
  for (std::size_t i = g() % 5; i > 0; --i) v.dq.push_back(static_cast<float>(g() % 100));
  if (g() & 1) v.maybe = test::random_bits<double>(g() % 7);
  for (std::size_t i = g() % 4; i > 0; --i) v.by_int[static_cast<int>(g() % 1000) - 500] = {1, 2, static_cast<std::int16_t>(i)};
  for (std::size_t i = g() % 9; i > 0; --i) v.dims.push_back(pick<std::int64_t>());
  return v;
}

bool bits_equal(const void* a, const void* b, std::size_t n) { return n == 0 || std::memcmp(a, b, n) == 0; }

void check_same(const Leaves& a, const Leaves& b) {
  CHECK(a.flag == b.flag);
  CHECK(a.i8 == b.i8);
  CHECK(a.u16 == b.u16);
  CHECK(a.i64 == b.i64);
  CHECK(bits_equal(&a.f64, &b.f64, 8));
  CHECK(a.h.bits == b.h.bits);
  CHECK(a.bf.bits == b.bf.bits);
  CHECK(a.f8.bits == b.f8.bits);
  CHECK(a.text == b.text);
  REQUIRE(a.vf.size() == b.vf.size());
  CHECK(bits_equal(a.vf.data(), b.vf.data(), a.vf.size() * 4));
  CHECK(a.vb == b.vb);
  CHECK(a.arr == b.arr);
  REQUIRE(a.col_major.rows() == b.col_major.rows());
  REQUIRE(a.col_major.cols() == b.col_major.cols());
  CHECK(bits_equal(a.col_major.data(), b.col_major.data(), a.col_major.size() * 4));
  CHECK(a.row_major == b.row_major);
  CHECK(a.fixed == b.fixed);
  CHECK((a.arr2d == b.arr2d).all());
  CHECK(a.row_vec == b.row_vec);
  CHECK(a.nd == b.nd);
  CHECK(a.dq == b.dq);
  CHECK(a.maybe.has_value() == b.maybe.has_value());
  if (a.maybe && b.maybe) CHECK(bits_equal(a.maybe->data(), b.maybe->data(), a.maybe->size() * 8));
  CHECK(a.by_int == b.by_int);
  CHECK(a.dims == b.dims);
}
}  // namespace rt

TEST_CASE("randomized round trips of every leaf and node kind are bit-exact") {
  test::TempDir dir;
  for (int trial = 0; trial < 25; ++trial) {
    rt::Leaves v = rt::random_leaves();
    const std::string path = dir / std::string("t").append(std::to_string(trial));
    cairn::save(path, v);
    rt::Leaves back = cairn::load<rt::Leaves>(path);
    rt::check_same(v, back);
    // Loading into a target that already holds other sizes takes the stored ones.
    rt::Leaves other = rt::random_leaves();
    other.by_int.clear();  // maps keep entries the checkpoint lacks (see the partial-restore tests)
    cairn::LoadReport r = cairn::load(path, other);
    rt::check_same(v, other);
    CHECK(r.missing.empty());
    CHECK(r.cast.empty());
    CHECK(r.loaded.size() == cairn::leaf_count(v));
  }
}

TEST_CASE("large leaves (over the small-leaf threshold) round-trip too") {
  test::TempDir dir;
  std::map<std::string, std::vector<float>> big;
  big["a"] = test::random_bits<float>((3u << 20) / 4 + 17);
  big["b"] = test::random_bits<float>(5);
  big["c"] = test::random_bits<float>((1u << 20) / 4);
  cairn::save(dir / "big", big);
  auto back = cairn::load<decltype(big)>(dir / "big");
  for (auto& [k, v] : big) CHECK(std::memcmp(v.data(), back.at(k).data(), v.size() * 4) == 0);
}

namespace runs {
// Small leaves that a load reads in one scattered request: some straight into their targets,
// some cast or reordered on the way (the target's dtype or memory order differs).
struct Saved {
  std::vector<std::vector<float>> f;
  std::vector<Eigen::MatrixXf> m;  // F order
  std::vector<std::vector<bool>> b;
};
CAIRN_TREE(Saved, f, m, b)
struct Mixed {
  std::vector<std::vector<double>> f;  // cast from float32
  std::vector<Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>> m;  // C order
  std::vector<std::vector<bool>> b;
};
CAIRN_TREE(Mixed, f, m, b)
}  // namespace runs

TEST_CASE("runs of small leaves: read in place, cast and reordered in one request, checked per leaf") {
  test::TempDir dir;
  for (int trial = 0; trial < 5; ++trial) {
    runs::Saved v;
    for (int i = 0; i < 300; ++i) {
      v.f.push_back(test::random_bits<float>(test::rng()() % 600));
      v.m.push_back(Eigen::MatrixXf::Random(1 + test::rng()() % 9, 1 + test::rng()() % 9));
      std::vector<bool> bits(test::rng()() % 50);
      for (std::size_t k = 0; k < bits.size(); ++k) bits[k] = test::rng()() % 2;
      v.b.push_back(bits);
    }
    const std::string path = dir / ("t" + std::to_string(trial));
    cairn::save(path, v);
    // All in place, bit-exact.
    runs::Saved same = cairn::load<runs::Saved>(path);
    REQUIRE(same.f.size() == v.f.size());
    for (std::size_t i = 0; i < v.f.size(); ++i) {
      CHECK((v.f[i].empty() || std::memcmp(v.f[i].data(), same.f[i].data(), v.f[i].size() * 4) == 0));
      CHECK(v.m[i] == same.m[i]);
      CHECK(v.b[i] == same.b[i]);
    }
    // Floats widened, matrices reordered, bools in place: all in the same runs.
    runs::Mixed mixed;
    const cairn::LoadReport report = cairn::load(path, mixed);
    CHECK(report.cast.size() == v.f.size());
    CHECK(report.bytes_needed == cairn::metadata(path).total_bytes());
    CHECK(report.bytes_read >= report.bytes_needed);
    for (std::size_t i = 0; i < v.f.size(); ++i) {
      REQUIRE(mixed.f[i].size() == v.f[i].size());
      for (std::size_t k = 0; k < v.f[i].size(); ++k)
        if (!std::isnan(v.f[i][k])) CHECK(mixed.f[i][k] == static_cast<double>(v.f[i][k]));
      CHECK(mixed.m[i] == v.m[i]);
      CHECK(mixed.b[i] == v.b[i]);
    }
    // A flipped byte inside a run names the leaf it belongs to, in place or staged.
    const cairn::CheckpointMetadata meta = cairn::metadata(path);
    const auto& leaves = meta.leaves();
    const auto& victim = leaves[test::rng()() % leaves.size()];
    if (victim.chunks.front().nbytes == 0) continue;
    const std::string file = path + "/" + victim.chunks.front().file;
    std::string bytes = test::read_file(file);
    bytes[victim.chunks.front().offset + test::rng()() % victim.chunks.front().nbytes] ^= 0x10;
    test::write_file(file, bytes);
    for (int target = 0; target < 2; ++target) {
      try {
        if (target == 0) (void)cairn::load<runs::Saved>(path);
        else (void)cairn::load<runs::Mixed>(path);
        FAIL("expected a checksum error");
      } catch (const cairn::Error& e) {
        CHECK(e.kind() == cairn::ErrorKind::corrupt);
        CHECK(e.key_path() == victim.key());
        CHECK(e.file() == file);
      }
    }
  }
}

TEST_CASE("Eigen keeps the logical shape across memory orders and refuses fixed shapes that differ") {
  test::TempDir dir;
  Eigen::MatrixXf m(2, 3);
  m << 1, 2, 3, 4, 5, 6;
  cairn::save(dir / "m", m);
  auto row = cairn::load<Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>(dir / "m");
  CHECK(row.rows() == 2);
  CHECK(row(1, 0) == 4.0f);
  CHECK(row == m);
  cairn::save(dir / "r", row);
  CHECK(cairn::load<Eigen::MatrixXf>(dir / "r") == m);
  CHECK(cairn::load<Eigen::Matrix<float, 2, 3>>(dir / "r") == m);
  // A big matrix converted in pieces (several 16 MiB pieces), with a cast on the way.
  Eigen::MatrixXd big = Eigen::MatrixXd::Random(1500, 3000);
  cairn::save(dir / "big", big);
  Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> big_row;
  cairn::LoadOptions narrowing;
  narrowing.allow_lossy_cast = {"**"};  // float64 -> float32 rounds
  auto report = cairn::load(dir / "big", big_row, narrowing);
  CHECK(report.cast.size() == 1);
  CHECK(big_row == big.cast<float>());
  Eigen::Matrix<float, 3, 2> wrong;
  CHECK_CAIRN_ERROR(cairn::load(dir / "m", wrong), cairn::ErrorKind::shape_mismatch, "[2, 3]");
  // A dimension of any extent says so, not Eigen::Dynamic's -1.
  Eigen::Matrix<float, 3, Eigen::Dynamic> three_rows;
  CHECK_CAIRN_ERROR(cairn::load(dir / "m", three_rows), cairn::ErrorKind::shape_mismatch,
                    "stored shape [2, 3] does not fit the target's fixed shape [3, any]");
  std::array<float, 4> fixed{};
  std::vector<float> v = {1, 2, 3};
  cairn::save(dir / "v", v);
  CHECK_CAIRN_ERROR(cairn::load(dir / "v", fixed), cairn::ErrorKind::shape_mismatch, "[3]");
  Eigen::MatrixXf as_matrix;
  CHECK_CAIRN_ERROR(cairn::load(dir / "v", as_matrix), cairn::ErrorKind::shape_mismatch, "not 2-D");
}

namespace maps {
// Weights in one arena the program owns, seen through Eigen::Map.
struct Arena {
  Eigen::Map<Eigen::MatrixXf> w;
  Eigen::Map<Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>> r;
  Eigen::Map<Eigen::VectorXi> v;
  Eigen::Map<Eigen::Matrix3f> fixed;
};
CAIRN_TREE(Arena, w, r, v, fixed)
struct Owned {
  Eigen::MatrixXf w;
  Eigen::MatrixXd r;  // column-major: the other order
  Eigen::VectorXi v;
  Eigen::Matrix3f fixed;
};
CAIRN_TREE(Owned, w, r, v, fixed)
struct Buffers {
  std::vector<float> w = test::random_bits<float>(5 * 7);
  std::vector<double> r = test::random_bits<double>(4 * 6);
  std::vector<int> v = test::random_bits<int>(9);
  std::vector<float> fixed = test::random_bits<float>(9);
  Arena arena() {
    return {{w.data(), 5, 7}, {r.data(), 4, 6}, {v.data(), 9}, Eigen::Map<Eigen::Matrix3f>(fixed.data())};
  }
};
}  // namespace maps

TEST_CASE("Eigen::Map leaves save the memory they map and load into it in place, in its shape") {
  test::TempDir dir;
  maps::Buffers saved;
  const maps::Arena arena = saved.arena();
  cairn::save(dir / "a", arena);
  // Into other memory through maps: the bytes land in the buffers the maps point at.
  maps::Buffers into;
  maps::Arena target = into.arena();
  cairn::load(dir / "a", target);
  CHECK(test::same_bits(into.w, saved.w));
  CHECK(test::same_bits(into.r, saved.r));
  CHECK(into.v == saved.v);
  CHECK(test::same_bits(into.fixed, saved.fixed));
  // As owned matrices, the row-major map into a column-major matrix included; and back.
  const auto owned = cairn::load<maps::Owned>(dir / "a");
  auto same_elements = [](const auto& a, const auto& b) {  // bit for bit (random bits hold NaNs)
    if (a.rows() != b.rows() || a.cols() != b.cols()) return false;
    for (Eigen::Index i = 0; i < a.rows(); ++i)
      for (Eigen::Index j = 0; j < a.cols(); ++j)
        if (const auto x = a(i, j), y = b(i, j); std::memcmp(&x, &y, sizeof x) != 0) return false;
    return true;
  };
  CHECK(same_elements(owned.w, arena.w));
  CHECK(same_elements(owned.r, arena.r));
  CHECK(owned.v == arena.v);
  CHECK(same_elements(owned.fixed, arena.fixed));
  cairn::save(dir / "o", owned);
  maps::Buffers again;
  maps::Arena from_owned = again.arena();
  cairn::load(dir / "o", from_owned);
  CHECK(test::same_bits(again.r, saved.r));
  CHECK(test::same_bits(again.w, saved.w));
  // A map of const data saves.
  cairn::save(dir / "c", Eigen::Map<const Eigen::MatrixXf>(saved.w.data(), 7, 5));
  CHECK(same_elements(cairn::load<Eigen::MatrixXf>(dir / "c"), Eigen::Map<const Eigen::MatrixXf>(saved.w.data(), 7, 5)));
  // A map cannot be resized: another shape is refused before anything is written to it.
  std::vector<float> other(35, 0.5f);
  Eigen::Map<Eigen::MatrixXf> wrong(other.data(), 5, 7);
  CHECK_CAIRN_ERROR(cairn::load(dir / "c", wrong), cairn::ErrorKind::shape_mismatch,
                    "stored shape [7, 5] does not fit the target, an Eigen::Map of shape [5, 7]");
  CHECK(std::all_of(other.begin(), other.end(), [](float x) { return x == 0.5f; }));
}

namespace geometry {
// A rigid body's state as a simulator holds it.
struct Body {
  Eigen::Quaterniond orientation;
  Eigen::Quaternionf orientation_f;
  Eigen::Isometry3d pose;
  Eigen::Affine2f affine;
  Eigen::AffineCompact3f compact;
  Eigen::Projective3d projective;
  Eigen::Transform<double, 3, Eigen::Isometry, Eigen::RowMajor> row_pose;
};
CAIRN_TREE(Body, orientation, orientation_f, pose, affine, compact, projective, row_pose)

template <class T>
T random_bits_of() {
  T t;
  const auto bits = test::random_bits<std::decay_t<decltype(*t.data())>>(sizeof(T) / sizeof(*t.data()));
  std::memcpy(static_cast<void*>(&t), bits.data(), sizeof(T));
  return t;
}
template <class T>
bool same_bits(const T& a, const T& b) { return std::memcmp(static_cast<const void*>(&a), static_cast<const void*>(&b), sizeof(T)) == 0; }
}  // namespace geometry

TEST_CASE("Eigen::Quaternion and Eigen::Transform leaves: coefficients and matrices, bit-exact, their shapes checked") {
  test::TempDir dir;
  geometry::Body b;
  b.orientation.coeffs() = geometry::random_bits_of<Eigen::Vector4d>();
  b.orientation_f.coeffs() = geometry::random_bits_of<Eigen::Vector4f>();
  b.pose.matrix() = geometry::random_bits_of<Eigen::Matrix4d>();
  b.affine.matrix() = geometry::random_bits_of<Eigen::Matrix3f>();
  b.compact.matrix() = geometry::random_bits_of<Eigen::Matrix<float, 3, 4>>();
  b.projective.matrix() = geometry::random_bits_of<Eigen::Matrix4d>();
  b.row_pose.matrix() = geometry::random_bits_of<Eigen::Matrix<double, 4, 4, Eigen::RowMajor>>();
  cairn::save(dir / "b", b);
  const auto md = cairn::metadata(dir / "b");
  std::map<std::string, cairn::Shape> shapes;
  for (const auto& l : md.items.at(0).leaves) shapes[l.key()] = l.shape;
  CHECK(shapes["orientation"] == cairn::Shape{4});
  CHECK(shapes["pose"] == cairn::Shape{4, 4});
  CHECK(shapes["affine"] == cairn::Shape{3, 3});
  CHECK(shapes["compact"] == cairn::Shape{3, 4});
  const auto back = cairn::load<geometry::Body>(dir / "b");
  CHECK(geometry::same_bits(back.orientation.coeffs().eval(), b.orientation.coeffs().eval()));
  CHECK(geometry::same_bits(back.orientation_f.coeffs().eval(), b.orientation_f.coeffs().eval()));
  CHECK(geometry::same_bits(back.pose.matrix(), b.pose.matrix()));
  CHECK(geometry::same_bits(back.affine.matrix(), b.affine.matrix()));
  CHECK(geometry::same_bits(back.compact.matrix(), b.compact.matrix()));
  CHECK(geometry::same_bits(back.projective.matrix(), b.projective.matrix()));
  CHECK(geometry::same_bits(back.row_pose.matrix(), b.row_pose.matrix()));
  // The coefficients are x, y, z, w, as Eigen stores them.
  const Eigen::Quaterniond q(0.5, 0.1, 0.2, 0.3);  // (w, x, y, z)
  cairn::save(dir / "q", q);
  CHECK(cairn::load<std::vector<double>>(dir / "q") == std::vector<double>{0.1, 0.2, 0.3, 0.5});
  // A pose loads from any matrix of its shape, in either memory order; others are refused.
  const Eigen::Matrix4d m = Eigen::Matrix4d::Random();
  cairn::save(dir / "m", Eigen::Matrix<double, 4, 4, Eigen::RowMajor>(m));
  CHECK(cairn::load<Eigen::Isometry3d>(dir / "m").matrix() == m);
  Eigen::Isometry2d planar;
  CHECK_CAIRN_ERROR(cairn::load(dir / "m", planar), cairn::ErrorKind::shape_mismatch, "fixed shape [3, 3]");
  Eigen::Quaterniond from_vector;
  cairn::save(dir / "v3", std::vector<double>{1, 2, 3});
  CHECK_CAIRN_ERROR(cairn::load(dir / "v3", from_vector), cairn::ErrorKind::shape_mismatch, "fixed shape [4]");
}

namespace pointers {
// A model as C++ code often holds one: submodules by pointer, a table shared with another
// owner, an optional head that some configurations leave null.
struct Layer {
  std::vector<float> w;
  std::vector<double> b;
};
CAIRN_TREE(Layer, w, b)
struct Head {  // abstract: cairn cannot make one
  virtual ~Head() = default;
  virtual float apply(float) const = 0;
  std::vector<float> scale;
};
CAIRN_TREE(Head, scale)
struct Doubler : Head {
  float apply(float x) const override { return 2 * x; }
};
struct Model {
  std::vector<std::unique_ptr<Layer>> layers;
  std::shared_ptr<std::vector<std::int32_t>> vocab;
  std::unique_ptr<Layer> aux;                 // null in some configurations
  std::shared_ptr<Head> head;
  std::list<std::map<std::string, std::unique_ptr<float>>> history;
};
CAIRN_TREE(Model, layers, vocab, aux, head, history)
// The same state held by value: what key paths a pointer must not change.
struct ModelByValue {
  std::vector<Layer> layers;
  std::vector<std::int32_t> vocab;
  std::optional<Layer> aux;
  Layer head;  // scale only, as Head saves
  std::vector<std::map<std::string, float>> history;
};
CAIRN_TREE(ModelByValue, layers, vocab, aux, head, history)
struct HeadByValue {
  std::vector<float> scale;
};
CAIRN_TREE(HeadByValue, scale)

Model random_model(std::size_t n_layers) {
  auto& g = test::rng();
  Model m;
  for (std::size_t i = 0; i < n_layers; ++i)
    m.layers.push_back(std::make_unique<Layer>(Layer{test::random_bits<float>(g() % 50), test::random_bits<double>(g() % 9)}));
  m.vocab = std::make_shared<std::vector<std::int32_t>>(test::random_bits<std::int32_t>(g() % 100));
  auto head = std::make_shared<Doubler>();
  head->scale = test::random_bits<float>(3);
  m.head = head;
  for (std::size_t i = g() % 4; i > 0; --i) {
    auto& step = m.history.emplace_back();
    for (std::size_t k = g() % 3; k > 0; --k) step["k" + std::to_string(g() % 100)] = std::make_unique<float>(test::random_bits<float>(1)[0]);
  }
  return m;
}
bool same_layer(const Layer& a, const Layer& b) { return test::same_bits(a.w, b.w) && test::same_bits(a.b, b.b); }
}  // namespace pointers

TEST_CASE("std::unique_ptr and std::shared_ptr are saved as what they point to, at the same key paths") {
  test::TempDir dir;
  for (int round = 0; round < 5; ++round) {
    const pointers::Model m = pointers::random_model(test::rng()() % 5);
    cairn::save(dir / "m", m, {.overwrite = true});
    // No level for the pointer: the key paths of the same state held by value.
    pointers::ModelByValue v;
    for (const auto& l : m.layers) v.layers.push_back(*l);
    v.vocab = *m.vocab;
    v.head.w = m.head->scale;
    for (const auto& step : m.history) {
      auto& s = v.history.emplace_back();
      for (const auto& [k, x] : step) s[k] = *x;
    }
    std::vector<std::string> stored;
    const auto md = cairn::metadata(dir / "m");
    for (const auto& l : md.items.at(0).leaves) stored.push_back(l.key());
    CHECK(stored == cairn::key_paths(m));
    CHECK(cairn::leaf_count(m) == stored.size());
    std::vector<std::string> by_value = cairn::key_paths(v);
    for (auto& k : by_value)  // Head's field is `scale` where the by-value stand-in's first is `w`
      if (k == "head/w") k = "head/scale";
    by_value.erase(std::remove(by_value.begin(), by_value.end(), "head/b"), by_value.end());
    std::sort(by_value.begin(), by_value.end());
    std::vector<std::string> sorted = stored;
    std::sort(sorted.begin(), sorted.end());
    CHECK(sorted == by_value);

    // Into null pointers: each is pointed at a new object where the checkpoint holds a value.
    // The abstract head cannot be made: the target points it at one first.
    pointers::Model back;
    back.head = std::make_shared<pointers::Doubler>();
    const auto* head_before = back.head.get();
    cairn::load(dir / "m", back);
    REQUIRE(back.layers.size() == m.layers.size());
    for (std::size_t i = 0; i < m.layers.size(); ++i) CHECK(pointers::same_layer(*back.layers[i], *m.layers[i]));
    REQUIRE(back.vocab);
    CHECK(*back.vocab == *m.vocab);
    CHECK(back.aux == nullptr);  // null when saved: nothing stored, nothing made
    CHECK(back.head.get() == head_before);  // loaded in place: whoever shares it sees the values
    CHECK(test::same_bits(back.head->scale, m.head->scale));
    REQUIRE(back.history.size() == m.history.size());
    auto a = back.history.begin();
    for (const auto& step : m.history) {
      REQUIRE(a->size() == step.size());
      for (const auto& [k, x] : step) CHECK(std::memcmp(a->at(k).get(), x.get(), sizeof(float)) == 0);
      ++a;
    }
  }
}

TEST_CASE("a null pointer is an absent subtree: strict loads name its keys, and what cannot be made is named") {
  test::TempDir dir;
  pointers::Model m = pointers::random_model(2);
  m.aux = std::make_unique<pointers::Layer>(pointers::Layer{test::random_bits<float>(4), {}});
  cairn::save(dir / "with_aux", m);
  const pointers::Layer aux = *m.aux;
  m.aux.reset();
  cairn::save(dir / "without_aux", m);

  // A target whose pointer is set, from a checkpoint that saved it null: the keys it lacks.
  pointers::Model into;
  into.head = std::make_shared<pointers::Doubler>();
  into.aux = std::make_unique<pointers::Layer>();
  CHECK_CAIRN_ERROR(cairn::load(dir / "without_aux", into), cairn::ErrorKind::structure_mismatch, "aux/w, aux/b");
  // Partial restore leaves it as it is; with the value saved, it is loaded in place.
  into.aux->w = {1, 2};
  const auto* aux_before = into.aux.get();
  cairn::load(dir / "without_aux", into, cairn::LoadOptions::partial());
  CHECK(into.aux->w == std::vector<float>{1, 2});
  cairn::load(dir / "with_aux", into);
  CHECK(into.aux.get() == aux_before);
  CHECK(pointers::same_layer(*into.aux, aux));

  // A skipped key is not made either.
  pointers::Model skipping;
  skipping.head = std::make_shared<pointers::Doubler>();
  cairn::LoadOptions skip_aux;
  skip_aux.skip = {"aux/*"};
  const auto report = cairn::load(dir / "with_aux", skipping, skip_aux);
  CHECK(skipping.aux == nullptr);
  CHECK(report.skipped.empty());  // nothing was walked below the null pointer

  // The abstract head, null: the error names its key and the way out.
  pointers::Model no_head;
  CHECK_CAIRN_ERROR(cairn::load(dir / "with_aux", no_head), cairn::ErrorKind::invalid_argument,
                    "point it at an object before loading");
  try {
    cairn::load(dir / "with_aux", no_head);
  } catch (const cairn::Error& e) {
    CHECK(e.key_path() == "head");
  }
  // A pointer at the top of a tree, and under a subtree.
  const auto whole = cairn::load<std::unique_ptr<pointers::Layer>>(dir / "with_aux", {.subtree = "aux"});
  REQUIRE(whole);
  CHECK(pointers::same_layer(*whole, aux));
  std::unique_ptr<std::vector<float>> leaf;
  cairn::load(dir / "with_aux", leaf, {.subtree = "aux/w"});
  REQUIRE(leaf);
  CHECK(test::same_bits(*leaf, aux.w));
  // A null pointer at the top saves an empty tree, and loading it leaves a null pointer null.
  cairn::save(dir / "null", std::unique_ptr<pointers::Layer>{});
  CHECK(cairn::metadata(dir / "null").items.at(0).leaves.empty());
  std::unique_ptr<pointers::Layer> stays_null;
  cairn::load(dir / "null", stays_null);
  CHECK(stays_null == nullptr);
}

namespace particles {
// A simulator's particles, as C++ code holds them: a vector of small fixed-size arrays each.
struct Cloud {
  std::vector<Eigen::Vector3d> position;
  std::vector<Eigen::RowVector2f> uv;
  std::vector<Eigen::Array4i> cell;
  std::vector<Eigen::Quaterniond> orientation;
  std::vector<std::array<std::int16_t, 5>> code;
};
CAIRN_TREE(Cloud, position, uv, cell, orientation, code)
// How a checkpoint before 2026-11-30 held the same: a sequence of one leaf per element.
struct OldCloud {
  std::vector<std::vector<double>> position;
  std::vector<std::vector<float>> uv;
  std::vector<std::vector<std::int32_t>> cell;
  std::vector<std::vector<double>> orientation;
  std::vector<std::vector<std::int16_t>> code;
};
CAIRN_TREE(OldCloud, position, uv, cell, orientation, code)

template <class T>
std::vector<T> random_elements(std::size_t n) {
  std::vector<T> v(n);
  if (n) {
    const auto bits = test::random_bits<unsigned char>(n * sizeof(T));
    std::memcpy(static_cast<void*>(v.data()), bits.data(), bits.size());
  }
  return v;
}
template <class T>
bool same_elements(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}
template <class T>
std::vector<std::vector<typename cairn::packed_element<T>::scalar>> as_rows(const std::vector<T>& v) {
  using S = typename cairn::packed_element<T>::scalar;
  std::vector<std::vector<S>> rows;
  for (const T& x : v) {
    const auto* first = reinterpret_cast<const S*>(&x);
    rows.emplace_back(first, first + cairn::packed_element<T>::size);
  }
  return rows;
}
}  // namespace particles

TEST_CASE("a std::vector of small fixed-size arrays is one [n, size] leaf, and loads from the sequence older checkpoints hold") {
  test::TempDir dir;
  auto& g = test::rng();
  for (int round = 0; round < 6; ++round) {
    particles::Cloud c;
    const std::size_t n = round == 0 ? 0 : g() % 2000;
    c.position = particles::random_elements<Eigen::Vector3d>(n);
    c.uv = particles::random_elements<Eigen::RowVector2f>(n);
    c.cell = particles::random_elements<Eigen::Array4i>(g() % 50);
    c.orientation = particles::random_elements<Eigen::Quaterniond>(g() % 50);
    c.code = particles::random_elements<std::array<std::int16_t, 5>>(g() % 50);
    cairn::save(dir / "new", c, {.overwrite = true});
    const auto md = cairn::metadata(dir / "new");
    std::map<std::string, cairn::Shape> shapes;
    for (const auto& l : md.items.at(0).leaves) shapes[l.key()] = l.shape;
    CHECK(shapes.size() == 5);  // one leaf a field
    CHECK(shapes["position"] == cairn::Shape{static_cast<std::int64_t>(n), 3});
    CHECK(shapes["uv"] == cairn::Shape{static_cast<std::int64_t>(n), 2});
    CHECK(shapes["orientation"] == cairn::Shape{static_cast<std::int64_t>(c.orientation.size()), 4});
    CHECK(shapes["code"] == cairn::Shape{static_cast<std::int64_t>(c.code.size()), 5});
    particles::Cloud back;
    back.position.resize(7);  // the stored length wins
    cairn::load(dir / "new", back);
    CHECK(particles::same_elements(back.position, c.position));
    CHECK(particles::same_elements(back.uv, c.uv));
    CHECK(particles::same_elements(back.cell, c.cell));
    CHECK(particles::same_elements(back.orientation, c.orientation));
    CHECK(particles::same_elements(back.code, c.code));

    // The layout of checkpoints before 2026-11-30: position/0, position/1, ... Each element's
    // chunk is read where it lies, verified, into its row.
    particles::OldCloud old{particles::as_rows(c.position), particles::as_rows(c.uv), particles::as_rows(c.cell),
                            particles::as_rows(c.orientation), particles::as_rows(c.code)};
    cairn::save(dir / "old", old, {.overwrite = true});
    particles::Cloud from_old;
    const cairn::LoadReport report = cairn::load(dir / "old", from_old);
    CHECK(report.unexpected.empty());
    CHECK(report.cast.empty());
    CHECK(particles::same_elements(from_old.position, c.position));
    CHECK(particles::same_elements(from_old.uv, c.uv));
    CHECK(particles::same_elements(from_old.cell, c.cell));
    CHECK(particles::same_elements(from_old.orientation, c.orientation));
    CHECK(particles::same_elements(from_old.code, c.code));
  }
  // Old elements of another dtype take the cast rules of any leaf: float32 into double is exact.
  std::vector<std::vector<float>> narrow{{1.5f, 2.5f, 3.5f}, {4, 5, 6}};
  cairn::save(dir / "narrow", narrow);
  cairn::LoadReport report;
  std::vector<Eigen::Vector3d> wide;
  report = cairn::load(dir / "narrow", wide);
  REQUIRE(wide.size() == 2);
  CHECK(wide[0] == Eigen::Vector3d(1.5, 2.5, 3.5));
  REQUIRE(report.cast.size() == 1);
  CHECK(report.cast[0].key.empty());
  // A subtree of an old checkpoint, and a flipped byte in one element: found by its checksum.
  particles::OldCloud old{{{1, 2, 3}, {4, 5, 6}}, {}, {}, {}, {}};
  cairn::save(dir / "one", old);
  const auto positions = cairn::load_subtree<std::vector<Eigen::Vector3d>>(dir / "one", "position");
  REQUIRE(positions.size() == 2);
  CHECK(positions[1] == Eigen::Vector3d(4, 5, 6));
  const auto md = cairn::metadata(dir / "one");
  const cairn::ChunkRecord& second = md.items.at(0).find_leaf("position/1")->chunks.front();
  {
    std::fstream f(dir / ("one/" + second.file), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(second.offset + 3));
    f.put('\x7f');
  }
  particles::Cloud corrupt;
  CHECK_CAIRN_ERROR(cairn::load(dir / "one", corrupt), cairn::ErrorKind::corrupt, "position");
  // An old sequence whose elements differ in length is not this vector: each key is named.
  old.position = {{1, 2, 3}, {4, 5}};
  cairn::save(dir / "ragged", old);
  CHECK_CAIRN_ERROR(cairn::load(dir / "ragged", corrupt), cairn::ErrorKind::structure_mismatch,
                    "In the target but not in the checkpoint (1): position. In the checkpoint but not in the target (2): "
                    "position/0, position/1");
  // Any [n, 3] array loads into it: here one that safetensors holds, as numpy writes positions.
  const cairn::Array<double> rows({2, 3}, {1, 2, 3, 4, 5, 6});
  cairn::save_safetensors(dir / "p.safetensors", std::map<std::string, cairn::Array<double>>{{"position", rows}});
  const auto from_safetensors = cairn::load_safetensors<std::map<std::string, std::vector<Eigen::Vector3d>>>(dir / "p.safetensors");
  REQUIRE(from_safetensors.at("position").size() == 2);
  CHECK(from_safetensors.at("position")[1] == Eigen::Vector3d(4, 5, 6));
  // A stored array of another width is refused with the shape the target takes.
  cairn::save(dir / "wide", std::vector<std::array<float, 4>>(3));
  std::vector<std::array<float, 3>> three;
  CHECK_CAIRN_ERROR(cairn::load(dir / "wide", three), cairn::ErrorKind::shape_mismatch, "(shape [any, 3])");
}

namespace variants {
// A simulator's bodies: each shape one of several kinds.
struct Sphere {
  double radius = 0;
};
CAIRN_TREE(Sphere, radius)
struct Box {
  std::vector<float> half_extents;
};
CAIRN_TREE(Box, half_extents)
struct Mesh {  // no default constructor: a load cannot make one
  explicit Mesh(int) {}
  std::vector<std::int32_t> faces;
};
CAIRN_TREE(Mesh, faces)
struct Body {
  std::variant<Sphere, Box> shape;
  std::variant<std::monostate, float, std::string> label;  // a leaf alternative, or none
  std::vector<std::variant<std::int64_t, Box>> parts;
};
CAIRN_TREE(Body, shape, label, parts)
}  // namespace variants

TEST_CASE("a std::variant is saved as the alternative it holds, keyed by its index, and a load switches to it") {
  test::TempDir dir;
  auto& g = test::rng();
  for (int round = 0; round < 8; ++round) {
    variants::Body b;
    if (g() & 1) b.shape = variants::Sphere{test::random_bits<double>(1)[0]};
    else b.shape = variants::Box{test::random_bits<float>(g() % 4)};
    switch (g() % 3) {
      case 0: break;  // std::monostate: an empty struct, no leaf
      case 1: b.label = test::random_bits<float>(1)[0]; break;
      default: b.label = std::string(g() % 9, 'x');
    }
    for (std::size_t i = g() % 4; i > 0; --i) {
      if (g() & 1) b.parts.emplace_back(static_cast<std::int64_t>(g()));
      else b.parts.emplace_back(variants::Box{test::random_bits<float>(2)});
    }
    cairn::save(dir / "b", b, {.overwrite = true});
    std::vector<std::string> keys = cairn::key_paths(b);
    CHECK(keys.front() == (b.shape.index() == 0 ? "shape/0/radius" : "shape/1/half_extents"));
    // Into a target holding other alternatives everywhere: each is switched to the stored one.
    variants::Body back;
    if (b.shape.index() == 0) back.shape = variants::Box{{7}};
    else back.shape = variants::Sphere{7};
    back.label = b.label.index() == 1 ? std::variant<std::monostate, float, std::string>("other")
                                      : std::variant<std::monostate, float, std::string>(1.5f);
    back.parts.assign(b.parts.size() + 1, std::variant<std::int64_t, variants::Box>(variants::Box{{1}}));
    cairn::load(dir / "b", back);
    REQUIRE(back.shape.index() == b.shape.index());
    if (b.shape.index() == 0)
      CHECK(std::memcmp(&std::get<0>(back.shape).radius, &std::get<0>(b.shape).radius, sizeof(double)) == 0);
    else
      CHECK(test::same_bits(std::get<1>(back.shape).half_extents, std::get<1>(b.shape).half_extents));
    REQUIRE(back.label.index() == b.label.index());
    if (b.label.index() == 1) CHECK(std::memcmp(&std::get<1>(back.label), &std::get<1>(b.label), sizeof(float)) == 0);
    if (b.label.index() == 2) CHECK(std::get<2>(back.label) == std::get<2>(b.label));
    REQUIRE(back.parts.size() == b.parts.size());
    for (std::size_t i = 0; i < b.parts.size(); ++i) {
      REQUIRE(back.parts[i].index() == b.parts[i].index());
      if (b.parts[i].index() == 0) CHECK(std::get<0>(back.parts[i]) == std::get<0>(b.parts[i]));
      else CHECK(test::same_bits(std::get<1>(back.parts[i]).half_extents, std::get<1>(b.parts[i]).half_extents));
    }
  }
  // An alternative the target's variant does not have, and one it cannot make, are named.
  cairn::save(dir / "box", variants::Body{variants::Box{{1, 2}}, {}, {}}, {.overwrite = true});
  std::variant<variants::Sphere> only_spheres;
  CHECK_CAIRN_ERROR(cairn::load(dir / "box", only_spheres, {.subtree = "shape"}), cairn::ErrorKind::structure_mismatch,
                    "holds alternative 1 of a std::variant here, and the target's has 1 alternative");
  std::variant<variants::Sphere, variants::Mesh> no_default;
  cairn::save(dir / "mesh", std::variant<variants::Sphere, variants::Mesh>(variants::Mesh(3)), {.overwrite = true});
  CHECK_CAIRN_ERROR(cairn::load(dir / "mesh", no_default), cairn::ErrorKind::invalid_argument,
                    "set the target to that alternative before loading");
  // Set to it first, it loads in place.
  no_default = variants::Mesh(0);
  cairn::load(dir / "mesh", no_default);
  CHECK(no_default.index() == 1);
  // A map's entries stored where a variant is: refused, naming what is there.
  cairn::save(dir / "map", std::map<std::string, float>{{"a", 1}, {"b", 2}}, {.overwrite = true});
  std::variant<float, double> from_map;
  CHECK_CAIRN_ERROR(cairn::load(dir / "map", from_map), cairn::ErrorKind::structure_mismatch,
                    "the checkpoint holds 2 here, the first 'a'");
}

namespace tensors {
struct Model {
  Eigen::Tensor<float, 3> col;                    // the module's default: column-major
  Eigen::Tensor<double, 4, Eigen::RowMajor> row;
  Eigen::Tensor<std::int16_t, 1> line;
  Eigen::Tensor<float, 0> scalar;
  Eigen::Tensor<std::uint8_t, 2> empty;
};
CAIRN_TREE(Model, col, row, line, scalar, empty)
// The same shapes in the other memory order.
struct Flipped {
  Eigen::Tensor<float, 3, Eigen::RowMajor> col;
  Eigen::Tensor<double, 4> row;
  Eigen::Tensor<std::int16_t, 1, Eigen::RowMajor> line;
  Eigen::Tensor<float, 0> scalar;
  Eigen::Tensor<std::uint8_t, 2, Eigen::RowMajor> empty;
};
CAIRN_TREE(Flipped, col, row, line, scalar, empty)

template <class T>
void fill_random(T& t) {
  const auto bits = test::random_bits<typename T::Scalar>(static_cast<std::size_t>(t.size()));
  std::copy(bits.begin(), bits.end(), t.data());
}
// Element (i, j, ...) of a and b has the same bits, whatever their memory orders.
template <class A, class B>
bool same_elements(const A& a, const B& b) {
  if (a.dimensions().size() != b.dimensions().size()) return false;
  for (std::size_t d = 0; d < a.dimensions().size(); ++d)
    if (a.dimension(static_cast<Eigen::Index>(d)) != b.dimension(static_cast<Eigen::Index>(d))) return false;
  std::array<Eigen::Index, A::NumDimensions> at{};
  for (Eigen::Index n = 0; n < a.size(); ++n) {
    Eigen::Index rest = n;  // n in C order
    for (std::size_t d = at.size(); d-- > 0;) {
      at[d] = rest % a.dimension(static_cast<Eigen::Index>(d));
      rest /= a.dimension(static_cast<Eigen::Index>(d));
    }
    if (std::memcmp(&a(at), &b(at), sizeof(typename A::Scalar)) != 0) return false;
  }
  return true;
}
template <class A, class B>
bool same(const A& a, const B& b) {
  return same_elements(a.col, b.col) && same_elements(a.row, b.row) && same_elements(a.line, b.line) &&
         std::memcmp(a.scalar.data(), b.scalar.data(), sizeof(float)) == 0 && same_elements(a.empty, b.empty);
}
}  // namespace tensors

TEST_CASE("Eigen::Tensor leaves of any rank round-trip bit-exactly, into either memory order, and through safetensors") {
  test::TempDir dir;
  tensors::Model m;
  m.col.resize(3, 4, 5);
  m.row.resize(2, 3, 1, 4);
  m.line.resize(7);
  m.empty.resize(0, 3);
  tensors::fill_random(m.col);
  tensors::fill_random(m.row);
  tensors::fill_random(m.line);
  tensors::fill_random(m.scalar);
  cairn::save(dir / "t", m);
  const cairn::CheckpointMetadata meta = cairn::metadata(dir / "t");
  const cairn::ItemRecord& item = meta.items.at(0);
  REQUIRE(item.find_leaf("col"));
  CHECK(item.find_leaf("col")->shape == cairn::Shape{3, 4, 5});
  CHECK(item.find_leaf("col")->order == cairn::Order::F);
  CHECK(item.find_leaf("row")->shape == cairn::Shape{2, 3, 1, 4});
  CHECK(item.find_leaf("row")->order == cairn::Order::C);
  CHECK(item.find_leaf("scalar")->shape == cairn::Shape{});
  CHECK(tensors::same(cairn::load<tensors::Model>(dir / "t"), m));
  CHECK(tensors::same(cairn::load<tensors::Flipped>(dir / "t"), m));
  // Saved row-major, loaded column-major, and the other way: the same elements.
  const auto flipped = cairn::load<tensors::Flipped>(dir / "t");
  cairn::save(dir / "f", flipped);
  CHECK(tensors::same(cairn::load<tensors::Model>(dir / "f"), m));
  // safetensors holds C order: the column-major tensors are written transposed, and read back.
  cairn::save_safetensors(dir / "t.safetensors", m);
  CHECK(tensors::same(cairn::load_safetensors<tensors::Model>(dir / "t.safetensors"), m));
  CHECK(tensors::same(cairn::load_safetensors<tensors::Flipped>(dir / "t.safetensors"), m));
  // A rank that differs is refused, naming both.
  using Rank2 = Eigen::Tensor<float, 2>;  // (a comma in a macro argument)
  CHECK_CAIRN_ERROR(cairn::load_subtree<Rank2>(dir / "t", "col"), cairn::ErrorKind::shape_mismatch,
                    "stored shape [3, 4, 5] is 3-D, but the target is an Eigen::Tensor of rank 2");
  // A struct holding tensors serializes with cereal, as every CAIRN_TREE struct does.
  std::stringstream bytes;
  {
    cereal::BinaryOutputArchive out(bytes);
    out(m);
  }
  tensors::Model back;
  {
    cereal::BinaryInputArchive in(bytes);
    in(back);
  }
  CHECK(tensors::same(back, m));
}

namespace misfit {
struct Saved { std::vector<float> w; Eigen::Matrix3d m; std::array<int, 4> a; std::string name; };
CAIRN_TREE(Saved, w, m, a, name)
struct Changed { std::vector<std::int32_t> w; Eigen::Matrix<double, 2, 3> m; std::array<int, 5> a; std::string name; };
CAIRN_TREE(Changed, w, m, a, name)
struct OneChanged { std::vector<float> w; Eigen::Matrix3d m; std::array<int, 5> a; std::string name; };
CAIRN_TREE(OneChanged, w, m, a, name)
struct OneAndLossy { std::vector<std::int32_t> w; Eigen::Matrix3d m; std::array<int, 5> a; std::string name; };
CAIRN_TREE(OneAndLossy, w, m, a, name)
struct Named { std::vector<float> w; Eigen::Matrix3d m; std::array<int, 4> a; std::vector<float> name; };
CAIRN_TREE(Named, w, m, a, name)
}  // namespace misfit

TEST_CASE("a load names every leaf the target cannot take in one error, before it reads any") {
  test::TempDir dir;
  misfit::Saved saved{test::random_bits<float>(7), Eigen::Matrix3d::Random(), {1, 2, 3, 4}, "run7"};
  cairn::save(dir / "c", saved);
  // Two shapes and a lossy cast, all in one error (a changed model is seen whole).
  misfit::Changed changed{};
  changed.w = {9};
  try {
    cairn::load(dir / "c", changed);
    FAIL("loaded");
  } catch (const cairn::Error& e) {
    CHECK(e.kind() == cairn::ErrorKind::shape_mismatch);
    CHECK(e.key_path().empty());  // several leaves
    CHECK(e.message() == "2 leaves do not fit the target: m: stored shape [3, 3] does not fit the target's fixed shape "
                         "[2, 3]; a: stored shape [4] does not fit the target's fixed shape [5]; and casts that can lose "
                         "information (LoadOptions::allow_lossy_cast): w (float32 -> int32)");
  }
  CHECK(changed.w.at(0) == 9);  // nothing read (the vector took the stored length)
  // One leaf alone: its own error, with its key, as before.
  misfit::OneChanged one{};
  try {
    cairn::load(dir / "c", one);
    FAIL("loaded");
  } catch (const cairn::Error& e) {
    CHECK(e.kind() == cairn::ErrorKind::shape_mismatch);
    CHECK(e.key_path() == "a");
    CHECK(e.message() == "stored shape [4] does not fit the target's fixed shape [5]");
  }
  // Casts that are never done are misfits too; the first one's kind is the error's.
  cairn::LoadOptions no_casts;
  no_casts.allow_cast = false;
  misfit::Named named{};
  CHECK_CAIRN_ERROR(cairn::load(dir / "c", named), cairn::ErrorKind::dtype_mismatch, "key 'name': cannot cast string to float32");
  // One with a lossy cast beside it: both named.
  misfit::OneAndLossy one_and_lossy{};
  CHECK_CAIRN_ERROR(cairn::load(dir / "c", one_and_lossy), cairn::ErrorKind::shape_mismatch,
                    "1 leaf does not fit the target: a: stored shape [4] does not fit the target's fixed shape [5]; and casts "
                    "that can lose information (LoadOptions::allow_lossy_cast): w (float32 -> int32)");
  CHECK_CAIRN_ERROR(cairn::load(dir / "c", changed, no_casts), cairn::ErrorKind::dtype_mismatch,
                    "3 leaves do not fit the target: w: stored as float32, the target is int32 and casting is disabled; m: ");
  // Many: the first twenty, and how many in all.
  std::map<std::string, std::array<float, 4>> many;
  for (int i = 0; i < 25; ++i) many[std::to_string(100 + i)] = {1, 2, 3, 4};
  cairn::save(dir / "many", many);
  std::map<std::string, std::array<float, 3>> narrower;
  for (int i = 0; i < 25; ++i) narrower[std::to_string(100 + i)] = {};
  CHECK_CAIRN_ERROR(cairn::load(dir / "many", narrower), cairn::ErrorKind::shape_mismatch,
                    "25 leaves do not fit the target: 100: stored shape [4]");
  CHECK_CAIRN_ERROR(cairn::load(dir / "many", narrower), cairn::ErrorKind::shape_mismatch,
                    "; 119: stored shape [4] does not fit the target's fixed shape [3]; ... (25 in all)");
}

TEST_CASE("save refuses an existing path unless overwrite, and never overwrites a non-checkpoint") {
  test::TempDir dir;
  std::vector<int> a = {1, 2, 3}, b = {4, 5};
  cairn::save(dir / "c", a);
  CHECK_CAIRN_ERROR(cairn::save(dir / "c", b), cairn::ErrorKind::already_exists, "overwrite");
  CHECK(cairn::load<std::vector<int>>(dir / "c") == a);
  cairn::SaveOptions o;
  o.overwrite = true;
  cairn::save(dir / "c", b, o);
  CHECK(cairn::load<std::vector<int>>(dir / "c") == b);
  std::filesystem::create_directories(dir / "precious");
  test::write_file(dir / "precious/notes.txt", "keep me");
  CHECK_CAIRN_ERROR(cairn::save(dir / "precious", a, o), cairn::ErrorKind::already_exists, "holds no cairn checkpoint");
  CHECK_CAIRN_ERROR(cairn::save(dir / "precious", a), cairn::ErrorKind::already_exists, "not empty");
  CHECK(test::read_file(dir / "precious/notes.txt") == "keep me");
  // A file: the same answer with or without overwrite, and it says what is there.
  test::write_file(dir / "file", "x");
  CHECK_CAIRN_ERROR(cairn::save(dir / "file", a), cairn::ErrorKind::already_exists, "a file (not a directory)");
  CHECK_CAIRN_ERROR(cairn::save(dir / "file", a, o), cairn::ErrorKind::already_exists, "a file (not a directory)");
  CHECK(test::read_file(dir / "file") == "x");
  CHECK_CAIRN_ERROR(cairn::load<std::vector<int>>(dir / "file"), cairn::ErrorKind::not_found, "is a file, not a checkpoint");
  // An empty directory (`mkdir -p ckpt/100` first) is the same as nothing there.
  std::filesystem::create_directories(dir / "empty");
  cairn::save(dir / "empty", a);
  CHECK(cairn::load<std::vector<int>>(dir / "empty") == a);
  std::filesystem::create_directories(dir / "empty2");
  cairn::save(dir / "empty2", a, o);
  CHECK(cairn::load<std::vector<int>>(dir / "empty2") == a);
  // Nothing left behind: no temporary directories next to the checkpoints.
  for (auto& e : std::filesystem::directory_iterator(dir.path))
    CHECK(e.path().filename().string().find(".cairn-") == std::string::npos);
}

TEST_CASE("nothing is saved inside a checkpoint, where replacing or deleting it would take the new one along") {
  // Accepted before: an overwrite of "outer" (or a Checkpointer's retention of that step) then
  // deleted "outer/inner" with it, unasked.
  test::TempDir dir;
  std::vector<int> a = {1, 2, 3}, b = {4, 5};
  cairn::save(dir / "outer", a);
  const std::string listed = test::read_file(dir / "outer/_CHECKPOINT");
  for (const std::string inner : {"outer/inner", "outer/deeper/still", "outer/inner/"})
    CHECK_CAIRN_ERROR(cairn::save(dir / inner, b), cairn::ErrorKind::invalid_argument, "inside the checkpoint");
  CHECK_CAIRN_ERROR(cairn::save_safetensors(dir / "outer/model.safetensors", b), cairn::ErrorKind::invalid_argument,
                    "inside the checkpoint");
  cairn::SafetensorsSaveOptions sharded;
  sharded.max_file_bytes = 4;
  CHECK_CAIRN_ERROR(cairn::save_safetensors(dir / "outer/set", b, sharded), cairn::ErrorKind::invalid_argument,
                    "inside the checkpoint");
  std::vector<std::string> names;
  for (auto& e : std::filesystem::directory_iterator(dir / "outer")) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  CHECK(names == std::vector<std::string>{"_CHECKPOINT", "_METADATA", "_USER_METADATA", "data-0-0.bin"});
  CHECK(test::read_file(dir / "outer/_CHECKPOINT") == listed);
  CHECK(cairn::load<std::vector<int>>(dir / "outer") == a);
  cairn::Checkpointer manager(dir / "outer/run");  // a root inside a checkpoint: its steps are refused
  CHECK_CAIRN_ERROR(manager.save(1, b), cairn::ErrorKind::invalid_argument, "inside the checkpoint");
  CHECK(!std::filesystem::exists(dir / "outer/run"));
  // The same through a store other than the file system.
  cairn::MemoryStore mem;
  cairn::save({mem, "runs/outer"}, a);
  CHECK_CAIRN_ERROR(cairn::save({mem, "runs/outer/inner"}, b), cairn::ErrorKind::invalid_argument, "inside the checkpoint");
  CHECK(!mem.is_blob("runs/outer/inner/_CHECKPOINT"));
  // Beside a checkpoint, and in a directory of checkpoints, saves go on as before.
  cairn::save(dir / "outer2", b);
  cairn::save(dir / "runs/1", a);
  cairn::save(dir / "runs/2", b);
  CHECK(cairn::load<std::vector<int>>(dir / "runs/2") == b);
}

namespace keys {
// A custom node whose children all have one key: a user's mistake a save must refuse.
struct SameKey {
  std::vector<std::vector<std::uint32_t>> parts;
};
}  // namespace keys
template <>
struct cairn::node_traits<keys::SameKey> {
  static constexpr NodeKind kind = NodeKind::custom;
  template <class Self, class F>
  static void for_each_child(Self& node, F&& f) {
    for (auto& p : node.parts) f(KeyEntry::key("part"), p);
  }
};

TEST_CASE("empty string map keys: nested ones round-trip, one at the top and repeated key paths are refused unwritten") {
  using Flat = std::map<std::string, std::vector<std::uint32_t>>;
  using Nested = std::map<std::string, Flat>;
  test::TempDir dir;
  // Below the top an empty key prints as an empty last segment ("a/"), which no other path
  // prints as: loads into new and existing maps find it.
  const Nested nested{{"a", {{"", test::random_bits<std::uint32_t>(5)}, {"x", test::random_bits<std::uint32_t>(3)}}},
                      {"y", {{"", test::random_bits<std::uint32_t>(4)}}}};
  cairn::save(dir / "nested", nested);
  const auto md = cairn::metadata(dir / "nested");
  std::vector<std::string> stored;
  for (const auto& l : md.items.at(0).leaves) stored.push_back(l.key());
  CHECK(stored == std::vector<std::string>{"a/", "a/x", "y/"});
  CHECK(cairn::load<Nested>(dir / "nested") == nested);
  Nested into{{"a", {{"", {}}, {"x", {}}}}, {"y", {{"", {}}}}};
  cairn::load(dir / "nested", into);
  CHECK(into == nested);

  // At the top it would print as "", the root's key path: the save says so and writes nothing,
  // and a checkpoint it would have overwritten still loads.
  const Flat earlier{{"w", test::random_bits<std::uint32_t>(7)}};
  cairn::save(dir / "c", earlier);
  cairn::SaveOptions overwrite;
  overwrite.overwrite = true;
  const Flat top{{"", test::random_bits<std::uint32_t>(2)}, {"b", test::random_bits<std::uint32_t>(2)}};
  CHECK_CAIRN_ERROR(cairn::save(dir / "c", top, overwrite), cairn::ErrorKind::invalid_argument, "the empty string");
  CHECK(cairn::load<Flat>(dir / "c") == earlier);
  CHECK_CAIRN_ERROR(cairn::save(dir / "new", top), cairn::ErrorKind::invalid_argument, "root's own");
  CHECK(!std::filesystem::exists(dir / "new"));
  for (auto& e : std::filesystem::directory_iterator(dir.path))
    CHECK(e.path().filename().string().find(".cairn-") == std::string::npos);

  // A custom node whose children repeat a key: refused, naming the key path.
  keys::SameKey same{{test::random_bits<std::uint32_t>(2), test::random_bits<std::uint32_t>(3)}};
  try {
    cairn::save(dir / "same", same);
    FAIL("a tree with a repeated key path was saved");
  } catch (const cairn::Error& e) {
    CHECK(e.kind() == cairn::ErrorKind::invalid_argument);
    CHECK(e.key_path() == "part");
    CHECK(std::string(e.what()).find("distinct keys") != std::string::npos);
  }
  CHECK(!std::filesystem::exists(dir / "same"));
  // One child is fine.
  same.parts.pop_back();
  cairn::save(dir / "same", same);
  CHECK(cairn::metadata(dir / "same").items.at(0).leaves.at(0).key() == "part");
}

TEST_CASE("an empty string key is named by the key path it prints as: subtrees, leaves and reads find it") {
  // "m/a/" is the entry "" under m/a: a subtree or a key to read spelled that way means that
  // entry, not m/a. "params/" still means "params" where params holds no empty key.
  using Inner = std::map<std::string, std::vector<std::uint32_t>>;
  using Outer = std::map<std::string, Inner>;
  test::TempDir dir;
  Outer m{{"", {{"", test::random_bits<std::uint32_t>(3)}, {"x", test::random_bits<std::uint32_t>(4)}}},
          {"a", {{"", test::random_bits<std::uint32_t>(5)}, {"b", test::random_bits<std::uint32_t>(6)}}}};
  const std::map<std::string, Outer> tree{{"m", m}, {"n", {{"p", {{"q", test::random_bits<std::uint32_t>(2)}}}}}};
  cairn::save(dir / "c", tree);
  using V = std::vector<std::uint32_t>;
  CHECK(cairn::load_subtree<V>(dir / "c", "m/a/") == m["a"][""]);
  CHECK(cairn::load_subtree<V>(dir / "c", "m//") == m[""][""]);
  CHECK(cairn::load_subtree<V>(dir / "c", "m//x") == m[""]["x"]);
  // A map holding the empty key, loaded as a subtree: its entry "" is below the subtree, not it.
  CHECK(cairn::load_subtree<Inner>(dir / "c", "m/a") == m["a"]);
  CHECK(cairn::load_subtree<Inner>(dir / "c", "m/") == m[""]);
  Inner into{{"", {}}, {"b", {}}};
  cairn::LoadOptions under_a;
  under_a.subtree = "m/a";
  cairn::load(dir / "c", into, under_a);
  CHECK(into == m["a"]);
  // Where nothing holds an empty key, a '/' before or after still names the same subtree.
  CHECK(cairn::load_subtree<Inner>(dir / "c", "n/p/") == tree.at("n").at("p"));
  CHECK(cairn::load_subtree<V>(dir / "c", "/n/p/q") == tree.at("n").at("p").at("q"));
  // read_arrays of every stored key, as `cairn diff` reads them, and of the spelled ones.
  std::vector<std::string> every;
  const auto md = cairn::metadata(dir / "c");
  for (const auto& l : md.items.at(0).leaves) every.push_back(l.key());
  CHECK(every == std::vector<std::string>{"m//", "m//x", "m/a/", "m/a/b", "n/p/q"});
  const auto read = cairn::read_arrays(dir / "c", every);
  REQUIRE(read.size() == every.size());
  auto values = [&](const std::string& k) {
    const auto v = read.at(k).values<std::uint32_t>();
    return V(v.begin(), v.end());
  };
  CHECK(values("m/a/") == m["a"][""]);
  CHECK(values("m//") == m[""][""]);
  CHECK(values("m//x") == m[""]["x"]);
  // A spelling that names nothing is refused as spelled, and the hint names the empty key.
  CHECK_CAIRN_ERROR(cairn::load_subtree<V>(dir / "c", "m/c/"), cairn::ErrorKind::not_found, "no subtree 'm/c/'");
  CHECK_CAIRN_ERROR(cairn::load_subtree<V>(dir / "c", "m/zz"), cairn::ErrorKind::not_found, "'m' holds \"\" (the empty key), a");
}

TEST_CASE("uint64 map keys of 2^63 and more round-trip and print as themselves") {
  // Integer keys are stored as int64; these used to be stored cast to it (UINT64_MAX as -1),
  // and the checkpoint then loaded into no unsigned map.
  using Ids = std::map<std::uint64_t, std::vector<std::uint32_t>>;
  using Signed = std::map<std::int64_t, std::vector<std::uint32_t>>;
  using Narrow = std::map<std::uint32_t, std::vector<std::uint32_t>>;
  test::TempDir dir;
  auto& g = test::rng();
  constexpr std::uint64_t top = std::numeric_limits<std::uint64_t>::max();
  constexpr std::uint64_t half = std::uint64_t{1} << 63;
  Ids ids;
  for (const std::uint64_t k : {std::uint64_t{0}, half - 1, half, top, g() | half, g() >> 1})
    ids[k] = test::random_bits<std::uint32_t>(1 + g() % 5);
  cairn::save(dir / "ids", ids);
  const cairn::CheckpointMetadata md = cairn::metadata(dir / "ids");
  std::vector<std::string> stored;
  for (const auto& l : md.items.at(0).leaves) stored.push_back(l.key());
  std::vector<std::string> printed;
  for (const auto& [k, v] : ids) printed.push_back(std::to_string(k));
  CHECK(stored == printed);  // in the map's order, each the key's own digits
  CHECK(cairn::load<Ids>(dir / "ids") == ids);
  Ids into;
  for (const auto& [k, v] : ids) into[k].resize(v.size());
  cairn::load(dir / "ids", into);
  CHECK(into == ids);
  // An unordered map, with unsigned long long keys, saves the same checkpoint and loads it back.
  std::unordered_map<unsigned long long, std::vector<std::uint32_t>> hashed(ids.begin(), ids.end());
  cairn::save(dir / "hashed", hashed);
  CHECK(test::read_file(dir / "hashed/data-0-0.bin") == test::read_file(dir / "ids/data-0-0.bin"));
  const auto hashed_back = cairn::load<std::unordered_map<unsigned long long, std::vector<std::uint32_t>>>(dir / "hashed");
  CHECK(hashed_back.size() == ids.size());
  for (const auto& [k, v] : ids) CHECK((hashed_back.count(k) && hashed_back.at(k) == v));
  CHECK(cairn::load_subtree<std::vector<std::uint32_t>>(dir / "ids", std::to_string(top)) == ids.at(top));
  // Into a map whose keys cannot hold them they are unexpected keys, not wrapped around.
  CHECK_CAIRN_ERROR(cairn::load<Signed>(dir / "ids"),
                    cairn::ErrorKind::structure_mismatch, std::to_string(top));
  CHECK_CAIRN_ERROR(cairn::load<Narrow>(dir / "ids"),
                    cairn::ErrorKind::structure_mismatch, std::to_string(half));
  const auto as_text = cairn::load<std::map<std::string, std::vector<std::uint32_t>>>(dir / "ids");
  CHECK(as_text.count(std::to_string(top)) == 1);
  // A checkpoint of such keys written before this (UINT64_MAX stored as the int64 -1) loads
  // into a map of int64 keys, whose values cast back to the ids.
  Signed old;
  for (const auto& [k, v] : ids) old[static_cast<std::int64_t>(k)] = v;
  cairn::save(dir / "old", old);
  CHECK_CAIRN_ERROR(cairn::load<Ids>(dir / "old"),
                    cairn::ErrorKind::structure_mismatch, "-1");
  Ids recovered;
  for (auto& [k, v] : cairn::load<Signed>(dir / "old"))
    recovered[static_cast<std::uint64_t>(k)] = std::move(v);
  CHECK(recovered == ids);
}

TEST_CASE("metadata returns structure, dtypes, shapes and user metadata without reading data") {
  test::TempDir dir;
  std::map<std::string, Eigen::MatrixXf> params = {{"w", Eigen::MatrixXf::Zero(3, 5)}};
  cairn::SaveOptions o;
  o.user_metadata = cairn::Json::object({{"epoch", 7}, {"loss", 0.125}, {"tags", cairn::Json::array({"a", "b"})}});
  cairn::save(dir / "c", params, o);
  // Remove the data: metadata() must not need it.
  for (auto& e : std::filesystem::directory_iterator(dir / "c"))
    if (e.path().extension() == ".bin") std::filesystem::remove(e.path());
  cairn::CheckpointMetadata m = cairn::metadata(dir / "c");
  REQUIRE(m.leaves().size() == 1);
  CHECK(m.leaves()[0].key() == "w");
  CHECK(m.leaves()[0].dtype == cairn::DType::float32);
  CHECK(m.leaves()[0].shape == cairn::Shape{3, 5});
  CHECK(m.leaves()[0].order == cairn::Order::F);
  CHECK(m.user_metadata.at("epoch").as_int() == 7);
  CHECK(m.user_metadata.at("loss").as_double() == 0.125);
  CHECK(m.user_metadata.at("tags").as_array().size() == 2);
  CHECK(m.created.size() == 20);
  CHECK(m.summary().find("w: float32[3, 5]") != std::string::npos);
  CHECK_CAIRN_ERROR(cairn::load<decltype(params)>(dir / "c"), cairn::ErrorKind::not_found, "data-0-0.bin");
}

TEST_CASE("user metadata: NaN and infinity are stored as null, uint64 seeds as their digits; a value that is not an object is refused before writing") {
  test::TempDir dir;
  std::vector<float> w(100, 1.5f);
  cairn::SaveOptions o;
  const double inf = std::numeric_limits<double>::infinity();
  o.user_metadata = cairn::Json::object({{"loss", std::nan("")}, {"grad_norm", inf}, {"floor", -inf},
                                         {"lr", 0.5}, {"list", cairn::Json::array({1.0, std::nan("")})},
                                         {"seed", std::numeric_limits<std::uint64_t>::max()}});
  cairn::save(dir / "c", w, o);  // before, one NaN failed the whole save
  const cairn::Json m = cairn::metadata(dir / "c").user_metadata;
  CHECK(m.at("loss").is_null());
  CHECK(m.at("grad_norm").is_null());
  CHECK(m.at("floor").is_null());
  CHECK(m.at("lr").as_double() == 0.5);
  CHECK(m.at("list").as_array()[1].is_null());
  CHECK(m.at("seed").as_uint() == std::numeric_limits<std::uint64_t>::max());  // not -1
  CHECK(cairn::load<std::vector<float>>(dir / "c") == w);
  CHECK(cairn::Json(std::nan("")).dump() == "null");

  // Not an object: refused, and nothing is written at the path.
  for (const cairn::Json& bad : {cairn::Json(3.0), cairn::Json("text"), cairn::Json::array({1})}) {
    o.user_metadata = bad;
    CHECK_CAIRN_ERROR(cairn::save(dir / "bad", w, o), cairn::ErrorKind::invalid_argument, "user metadata must be a JSON object");
    CHECK_FALSE(std::filesystem::exists(dir / "bad"));
  }
  o.user_metadata = cairn::Json();  // null: no user metadata
  cairn::save(dir / "null", w, o);
  CHECK(cairn::metadata(dir / "null").user_metadata.size() == 0);
}

// A reader takes JSON nested at most Json::max_parse_depth deep (128): user metadata nested
// deeper was saved, and the checkpoint then could not be loaded at all ("corrupt"). It is
// refused before a byte is written; as deep as the reader takes saves and loads.
TEST_CASE("user metadata nested deeper than a load reads is refused by the save, and as deep as it reads round-trips") {
  test::TempDir dir;
  std::vector<float> w(10, 2.5f);
  auto nested = [](int depth, bool arrays) {
    cairn::Json j = arrays ? cairn::Json::array({1}) : cairn::Json::object({{"x", 1}});
    for (int i = 1; i < depth; ++i) j = arrays ? cairn::Json::array({j}) : cairn::Json::object({{"n", j}});
    return arrays ? cairn::Json::object({{"a", j}}) : j;  // (the arrays inside an object: one level more)
  };
  CHECK(nested(128, false).depth() == 128);
  CHECK(nested(127, true).depth() == 128);
  CHECK(nested(300, false).depth() == 129);  // counted no further than the limit and one
  CHECK(cairn::Json(1).depth() == 0);
  CHECK(cairn::Json::object({{"a", cairn::Json::array({})}}).depth() == 2);
  cairn::SaveOptions o;
  for (const bool arrays : {false, true}) {
    CAPTURE(arrays);
    o.user_metadata = nested(arrays ? 127 : 128, arrays);
    cairn::save(dir / ("ok" + std::to_string(arrays)), w, o);
    CHECK(cairn::metadata(dir / ("ok" + std::to_string(arrays))).user_metadata == o.user_metadata);
    CHECK(cairn::load<std::vector<float>>(dir / ("ok" + std::to_string(arrays))) == w);
    o.user_metadata = nested(arrays ? 128 : 129, arrays);
    CHECK_CAIRN_ERROR(cairn::save(dir / "deep", w, o), cairn::ErrorKind::invalid_argument, "more than 128 deep");
    CHECK_FALSE(std::filesystem::exists(dir / "deep"));
    CHECK_CAIRN_ERROR(cairn::save_async(dir / "deep", w, o).wait(), cairn::ErrorKind::invalid_argument, "more than 128 deep");
    CHECK_FALSE(std::filesystem::exists(dir / "deep"));
  }
}

TEST_CASE("empty containers and zero-size arrays round-trip") {
  test::TempDir dir;
  std::tuple<std::vector<float>, std::string, Eigen::MatrixXf, std::vector<std::vector<int>>, std::map<std::string, int>> t;
  std::get<2>(t).resize(0, 4);
  cairn::save(dir / "e", t);
  auto back = cairn::load<decltype(t)>(dir / "e");
  CHECK(std::get<0>(back).empty());
  CHECK(std::get<2>(back).cols() == 4);
  CHECK(std::get<3>(back).empty());
  std::vector<std::vector<int>> nonempty = {{1}, {2, 3}};
  std::vector<std::vector<int>> target = {{9}, {9}, {9}};
  cairn::save(dir / "n", nonempty);
  cairn::load(dir / "n", target);
  CHECK(target == nonempty);  // sequences take the stored length
}

namespace rt {
struct Resumable {
  std::vector<float> w;
  std::mt19937 rng;
  std::mt19937_64 rng64;
  std::minstd_rand lcg;
  std::ranlux48 ranlux;
};
CAIRN_TREE(Resumable, w, rng, rng64, lcg, ranlux)
}  // namespace rt

namespace en {
enum class Phase : std::uint8_t { warmup, train, eval };
enum Mode : int { sgd = -2, adam = 70000 };  // unscoped, with a fixed underlying type
enum Loose { loose_a, loose_b };               // no fixed underlying type: not a leaf
static_assert(cairn::has_dtype<Phase> && cairn::has_dtype<Mode> && !cairn::has_dtype<Loose>);
enum class Wide : std::int64_t {};
struct State {
  Phase phase = Phase::warmup;
  Mode mode = sgd;
  std::vector<Phase> history;
  std::array<Wide, 3> ids{};
  cairn::Array<Mode> grid;
};
CAIRN_TREE(State, phase, mode, history, ids, grid)
}  // namespace en

TEST_CASE("enumerations are leaves of their underlying integer type: bit-exact, and casts stay exact") {
  test::TempDir dir;
  std::mt19937_64 rng(5);
  for (int round = 0; round < 20; ++round) {
    en::State s;
    // Any value of a fixed underlying type is a valid value of the enum.
    s.phase = static_cast<en::Phase>(rng());
    s.mode = static_cast<en::Mode>(static_cast<std::underlying_type_t<en::Mode>>(rng()));
    s.history.resize(rng() % 50);
    for (auto& h : s.history) h = static_cast<en::Phase>(rng());
    for (auto& id : s.ids) id = static_cast<en::Wide>(rng());
    s.grid = cairn::Array<en::Mode>({static_cast<std::int64_t>(rng() % 4), 3});
    for (auto& g : s.grid) g = static_cast<en::Mode>(static_cast<std::underlying_type_t<en::Mode>>(rng()));
    const std::string path = dir / ("s" + std::to_string(round));
    cairn::save(path, s);
    const auto back = cairn::load<en::State>(path);
    CHECK(back.phase == s.phase);
    CHECK(back.mode == s.mode);
    CHECK(back.history == s.history);
    CHECK(back.ids == s.ids);
    REQUIRE(back.grid.shape() == s.grid.shape());
    CHECK(std::memcmp(back.grid.data(), s.grid.data(), s.grid.size() * sizeof(en::Mode)) == 0);
    if (round == 0) {
      const auto m = cairn::metadata(path);
      CHECK(m.leaves()[0].dtype == cairn::DType::uint8);
      CHECK(m.leaves()[0].shape.empty());
      CHECK(m.leaves()[3].dtype == cairn::DType::int64);
    }
  }
  // A stored int32 loads into an enum of uint8 only where the values fit, as for any integer.
  cairn::save(dir / "small", std::map<std::string, std::int32_t>{{"phase", 2}});
  cairn::save(dir / "big", std::map<std::string, std::int32_t>{{"phase", 300}});
  std::map<std::string, en::Phase> target;
  cairn::LoadOptions exact;
  exact.allow_lossy_cast = {"**"};
  cairn::load(dir / "small", target, exact);
  CHECK(target.at("phase") == en::Phase::eval);
  CHECK_CAIRN_ERROR(cairn::load(dir / "big", target), cairn::ErrorKind::dtype_mismatch, "int32 -> uint8");
  CHECK_THROWS_AS(cairn::load(dir / "big", target, exact), cairn::Error);  // 300 does not fit: never wrapped
  CHECK(target.at("phase") == en::Phase::eval);
}

TEST_CASE("standard random number engines are leaves: a restored engine continues the same sequence") {
  test::TempDir dir;
  rt::Resumable r{{1, 2, 3}, std::mt19937(test::rng()()), std::mt19937_64(test::rng()()),
                  std::minstd_rand(static_cast<unsigned>(test::rng()() % 1000 + 1)), std::ranlux48(test::rng()())};
  for (int i = 0; i < 1000; ++i) { r.rng(); r.rng64(); r.lcg(); r.ranlux(); }  // mid-sequence state
  cairn::save(dir / "c", r);
  rt::Resumable back = cairn::load<rt::Resumable>(dir / "c");
  for (int i = 0; i < 100; ++i) {
    CHECK(back.rng() == r.rng());
    CHECK(back.rng64() == r.rng64());
    CHECK(back.lcg() == r.lcg());
    CHECK(back.ranlux() == r.ranlux());
  }
  CHECK(cairn::metadata(dir / "c").summary().find("rng") != std::string::npos);
  // A damaged state is an error naming the key, not a silently reseeded engine.
  cairn::save(dir / "d", std::map<std::string, std::string>{{"rng", "not a state"}});
  CHECK_CAIRN_ERROR((cairn::load<std::map<std::string, std::mt19937>>(dir / "d")), cairn::ErrorKind::corrupt,
                    "key 'rng'");
}

#include "data/compat_state.hpp"

namespace {
void check_compat_state(const compat::State& got, const compat::State& want) {
  auto same = [](const auto& a, const auto& b) {
    return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(a[0])) == 0);
  };
  CHECK(same(got.small, want.small));
  CHECK(same(got.large, want.large));
  // Stored as bfloat16: the values rounded to it.
  std::vector<cairn::bfloat16> rounded(want.cast_on_save.size());
  cairn::cast_host(cairn::DType::float32, want.cast_on_save.data(), cairn::DType::bfloat16, rounded.data(), rounded.size());
  std::vector<float> want_cast(rounded.size());
  cairn::cast_host(cairn::DType::bfloat16, rounded.data(), cairn::DType::float32, want_cast.data(), rounded.size());
  CHECK(same(got.cast_on_save, want_cast));
  CHECK(got.column_major == want.column_major);
  CHECK(got.flags == want.flags);
  CHECK(got.step == want.step);
  CHECK(got.name == want.name);
  REQUIRE(got.table.size() == 2);
  CHECK(got.table.at("alpha").counts == want.table.at("alpha").counts);
  CHECK(got.table.at("alpha").lr == want.table.at("alpha").lr);
  CHECK(got.table.at("beta").counts.empty());
  CHECK(!got.table.at("beta").lr);
  CHECK(same(got.sharded.gather(), want.sharded.gather()));
}

// _METADATA without the two fields that hold the time it was written.
std::string without_times(std::string meta) {
  for (const char* field : {"\"created_unix_ms\":", "\"created\":"}) {
    const auto at = meta.find(field);
    REQUIRE(at != std::string::npos);
    const auto end = meta.find(',', at);
    meta.erase(at, end - at);
  }
  return meta;
}
}  // namespace

TEST_CASE("a checkpoint written before the storage seam loads bit-exactly, and the same state is written with the same chunks and records, aligned as format.md says") {
  const std::string old = std::string(CAIRN_TEST_DATA) + "/v1-checkpoint";
  const compat::State want = compat::make();
  compat::State got;
  got.sharded = cairn::ShardedArray<float>(compat::sharding());
  cairn::load(old, got);
  check_compat_state(got, want);
  CHECK(cairn::metadata(old).user_metadata.at("epoch").as_int() == 3);

  test::TempDir dir;
  cairn::SaveOptions options;
  options.cast = {{"cast_on_save", cairn::DType::bfloat16}};
  options.user_metadata = cairn::Json::object({{"epoch", 3}, {"note", "written before the storage seam"}});
  cairn::save(dir / "new", want, options);
  CHECK(test::read_file(dir / "new/_USER_METADATA") == test::read_file(old + "/_USER_METADATA"));
  // The same chunks, byte for byte, each where docs/format.md's alignment puts it today: the
  // old file started every chunk under 64 KiB at a multiple of 64 bytes, a writer's choice
  // (readers take offsets from the records) that became 16 bytes below 4 KiB on 2026-12-04.
  cairn::CheckpointMetadata old_meta = cairn::metadata(old);
  const cairn::CheckpointMetadata new_meta = cairn::metadata(dir / "new");
  const std::string old_data = test::read_file(old + "/data-0-0.bin"), new_data = test::read_file(dir / "new/data-0-0.bin");
  REQUIRE(old_meta.items.size() == new_meta.items.size());
  std::string covered(new_data.size(), '\0');  // bytes of the new file some chunk holds
  std::uint64_t end = 0;
  for (std::size_t i = 0; i < old_meta.items.size(); ++i) {
    auto& old_leaves = old_meta.items[i].leaves;
    const auto& new_leaves = new_meta.items[i].leaves;
    REQUIRE(old_leaves.size() == new_leaves.size());
    for (std::size_t l = 0; l < old_leaves.size(); ++l) {
      auto& old_chunks = old_leaves[l].chunks;
      const auto& new_chunks = new_leaves[l].chunks;
      REQUIRE(old_chunks.size() == new_chunks.size());
      for (std::size_t c = 0; c < old_chunks.size(); ++c) {
        const auto& oc = old_chunks[c];
        const auto& nc = new_chunks[c];
        INFO(new_leaves[l].key(), " chunk ", c);
        REQUIRE(oc.nbytes == nc.nbytes);
        const std::uint64_t align = nc.nbytes >= (64u << 10) ? 4096 : nc.nbytes >= (4u << 10) ? 64 : 16;
        CHECK(nc.offset % align == 0);
        CHECK(nc.offset >= end);  // in order, none overlapping, and packed: no more than the alignment's gap
        CHECK(nc.offset < end + align);
        REQUIRE(nc.offset + nc.nbytes <= new_data.size());
        CHECK(new_data.compare(nc.offset, nc.nbytes, old_data, oc.offset, oc.nbytes) == 0);
        covered.replace(nc.offset, nc.nbytes, nc.nbytes, '\1');
        end = std::max(end, nc.offset + nc.nbytes);
        old_chunks[c].offset = nc.offset;  // for the records' comparison below
      }
    }
  }
  CHECK(new_data.size() == end);
  for (std::size_t b = 0; b < new_data.size(); ++b)
    if (!covered[b] && new_data[b] != 0) FAIL_CHECK("a gap's byte ", b, " is not zero");
  // The stored file is format 1, written through cereal, one value per line; the records are
  // the same (at the new offsets): written again they give the new file's text (format 2, with
  // its record counts), and the writer's short form is lossless (unit-records).
  CHECK(old_meta.format_version == 1);
  CHECK(new_meta.format_version == 2);  // few leaves: records, no leaf table
  CHECK(without_times(test::read_file(dir / "new/_METADATA")) == without_times(cairn::detail::metadata_to_json(old_meta)));
  CHECK(test::read_file(old + "/_METADATA").find("\"saved_from\"") != std::string::npos);
}

namespace {
struct ManyLeaves {
  std::map<std::string, std::vector<std::int16_t>> params;
  std::vector<std::vector<float>> layers;
};
CAIRN_TREE(ManyLeaves, params, layers)

// For tests/format_ref.py, which reads the checkpoint by docs/format.md alone (a ctest of its
// own, after this one): a copy of it, and each leaf's key, dtype, shape and bytes as this
// test knows them, not as cairn's records say.
void export_for_reference_reader([[maybe_unused]] const std::string& name, [[maybe_unused]] const std::string& checkpoint,
                                 [[maybe_unused]] const ManyLeaves& s, [[maybe_unused]] int format_version) {
#ifdef CAIRN_FORMAT_EXPORT
  const std::filesystem::path dir = std::filesystem::path(CAIRN_FORMAT_EXPORT) / name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  std::filesystem::copy(checkpoint, dir / "checkpoint", std::filesystem::copy_options::recursive);
  std::string bytes;
  cairn::Json leaves = cairn::Json::array();
  auto add = [&](const std::string& key, const char* dtype, const void* data, std::size_t count, std::size_t size) {
    leaves.push_back(cairn::Json::object({{"key", key}, {"dtype", dtype},
                                          {"shape", cairn::Json::array({static_cast<std::int64_t>(count)})},
                                          {"offset", static_cast<std::int64_t>(bytes.size())},
                                          {"nbytes", static_cast<std::int64_t>(count * size)}}));
    if (count) bytes.append(static_cast<const char*>(data), count * size);  // (an empty vector's data() may be null)
  };
  for (const auto& [k, v] : s.params) {
    std::string escaped;  // a map key's '/' and '%' as docs/format.md spells them
    for (char ch : k) escaped += ch == '/' ? std::string("%2F") : ch == '%' ? std::string("%25") : std::string(1, ch);
    add("params/" + escaped, "int16", v.data(), v.size(), sizeof(std::int16_t));
  }
  for (std::size_t i = 0; i < s.layers.size(); ++i)
    add("layers/" + std::to_string(i), "float32", s.layers[i].data(), s.layers[i].size(), sizeof(float));
  test::write_file((dir / "expected.bin").string(), bytes);
  test::write_file((dir / "expected.json").string(),
                   cairn::Json::object({{"format_version", format_version}, {"leaves", leaves}}).dump());
#endif
}
}  // namespace

TEST_CASE("a tree of many small leaves is written with a leaf table (format 3) and loads bit-exactly; damage is named") {
  test::TempDir dir;
  ManyLeaves s;
  for (int i = 0; i < 700; ++i)
    s.params["p\xc3\xa9/" + std::to_string(test::rng()())] = test::random_bits<std::int16_t>(test::rng()() % 40);
  for (int i = 0; i < 900; ++i) s.layers.push_back(test::random_bits<float>(test::rng()() % 300));
  const std::string c = dir / "c";
  cairn::save(c, s);
  CHECK(test::read_file(c + "/_METADATA").find("\"leaf_table\"") != std::string::npos);
  CHECK(test::read_file(c + "/_CHECKPOINT").find("\"format_version\":3") != std::string::npos);
  const cairn::CheckpointMetadata meta = cairn::metadata(c);
  CHECK(meta.format_version == 3);
  REQUIRE(meta.leaves().size() == 1600);
  ManyLeaves back = cairn::load<ManyLeaves>(c);
  CHECK(back.params == s.params);
  REQUIRE(back.layers.size() == s.layers.size());
  for (std::size_t i = 0; i < s.layers.size(); ++i) CHECK(test::same_bits(back.layers[i], s.layers[i]));
  // Few leaves: their records, format 2, as before.
  ManyLeaves few;
  few.layers = {{1.0f}, {2.0f, 3.0f}};
  cairn::save(dir / "few", few);
  CHECK(cairn::metadata(dir / "few").format_version == 2);
  CHECK(test::read_file(dir / "few/_CHECKPOINT").find("\"format_version\":2") != std::string::npos);
  export_for_reference_reader("table", c, s, 3);
  export_for_reference_reader("records", dir / "few", few, 2);
  // A flipped byte in any leaf is found by its checksum and named by its key.
  for (int round = 0; round < 4; ++round) {
    const auto& victim = meta.leaves()[test::rng()() % meta.leaves().size()];
    if (victim.chunks.front().nbytes == 0) continue;
    const std::string file = c + "/" + victim.chunks.front().file;
    const std::string good = test::read_file(file);
    std::string bytes = good;
    bytes[victim.chunks.front().offset + test::rng()() % victim.chunks.front().nbytes] ^= 0x10;
    test::write_file(file, bytes);
    CHECK_CAIRN_ERROR((void)cairn::load<ManyLeaves>(c), cairn::ErrorKind::corrupt, "");
    try {
      (void)cairn::load<ManyLeaves>(c);
    } catch (const cairn::Error& e) {
      CHECK(e.key_path() == victim.key());
      CHECK(e.file() == file);
    }
    test::write_file(file, good);
  }
}

namespace {
struct TwoLayers { std::vector<std::vector<float>> layers; };
CAIRN_TREE(TwoLayers, layers)

bool bit_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}
}  // namespace

// Also under ThreadSanitizer in CI: the second half of the chunk is read on a helper thread.
TEST_CASE("a large leaf read by two threads: bit-exact, and a flipped byte in either half or a cut file is found") {
  test::TempDir dir;
  const std::string c = dir / "c";
  // Above the size at which a chunk read straight into memory is read in two halves at once
  // (parallel_read_bytes), and not a whole number of read pieces.
  const std::size_t n = (cairn::detail::parallel_read_bytes + 3 * cairn::detail::crc_piece_bytes + 20) / sizeof(float);
  TwoLayers s{{test::random_bits<float>(n), test::random_bits<float>(1000)}};
  cairn::save(c, s);
  TwoLayers back;
  back.layers = {std::vector<float>(n), std::vector<float>(1000)};
  cairn::load(c, back);  // into the state: the direct path
  CHECK(bit_equal(back.layers[0], s.layers[0]));
  CHECK(bit_equal(cairn::load<TwoLayers>(c).layers[0], s.layers[0]));
  const std::string original = test::read_file((c + "/data-0-0.bin"));
  const std::uint64_t leaf_bytes = n * sizeof(float);
  for (std::uint64_t at : {std::uint64_t{0}, leaf_bytes / 2 - 1, leaf_bytes / 2 + 1, leaf_bytes - 1}) {
    CAPTURE(at);
    std::string bytes = original;
    bytes[at] ^= 0x01;  // layers/0 starts at offset 0
    test::write_file((c + "/data-0-0.bin"), bytes);
    try {
      cairn::load(c, back);
      FAIL("expected corrupt");
    } catch (const cairn::Error& e) {
      CHECK(e.kind() == cairn::ErrorKind::corrupt);
      CHECK(e.key_path() == "layers/0");
      CHECK(e.file() == c + "/data-0-0.bin");  // described only once the check fails
      CHECK(std::string(e.what()).find("checksum mismatch") != std::string::npos);
    }
  }
  // Cut inside the second half: an error from the helper thread, not a crash or a hang.
  test::write_file((c + "/data-0-0.bin"), original.substr(0, leaf_bytes - 100));
  try {
    cairn::load(c, back);
    FAIL("expected corrupt");
  } catch (const cairn::Error& e) {
    CHECK(e.kind() == cairn::ErrorKind::corrupt);
  }
}

namespace {
// Runs of small leaves on both sides of a leaf too large for a run.
struct ManySmall {
  std::vector<std::vector<float>> a;
  std::vector<float> big;
  std::vector<std::vector<float>> b;
};
CAIRN_TREE(ManySmall, a, big, b)
struct ManySmallWide {
  std::vector<std::vector<double>> a;
  std::vector<float> big;
  std::vector<std::vector<double>> b;
};
CAIRN_TREE(ManySmallWide, a, big, b)
}  // namespace

// Also under ThreadSanitizer in CI: a checkpoint just written is in the page cache, so its runs
// of small leaves are read by two threads (every other run each) on a machine with two cores.
TEST_CASE("runs of small leaves from memory on two threads: bit-exact, cast, counted, and a flipped byte in any run is found") {
  test::TempDir dir;
  const std::string c = dir / "c";
  ManySmall s;
  std::uint64_t small_bytes = 0;
  for (auto* side : {&s.a, &s.b})
    for (int i = 0; i < 900; ++i) {
      side->push_back(test::random_bits<float>(256 + test::rng()() % 768));
      small_bytes += side->back().size() * sizeof(float);
    }
  s.big = test::random_bits<float>(cairn::detail::small_leaf_bytes / sizeof(float) + 1000);
  REQUIRE(small_bytes > 4 * cairn::detail::small_run_bytes);  // several runs on each side
  cairn::save(c, s);
  ManySmall back = s;
  for (auto* side : {&back.a, &back.b})
    for (auto& leaf : *side) std::fill(leaf.begin(), leaf.end(), 0.0f);
  const cairn::LoadReport report = cairn::load(c, back);
  for (std::size_t i = 0; i < s.a.size(); ++i) CHECK(bit_equal(back.a[i], s.a[i]));
  for (std::size_t i = 0; i < s.b.size(); ++i) CHECK(bit_equal(back.b[i], s.b[i]));
  CHECK(bit_equal(back.big, s.big));
  CHECK(report.loaded.size() == 1801);
  CHECK(report.bytes_needed == cairn::metadata(c).total_bytes());
  CHECK(report.bytes_read >= report.bytes_needed);
  // Widened on the way (staged in each run, cast by the thread that read it).
  ManySmallWide wide;
  const cairn::LoadReport cast = cairn::load(c, wide);
  CHECK(cast.cast.size() == 1800);
  CHECK(cast.bytes_needed == report.bytes_needed);
  bool widened = wide.a.size() == s.a.size() && wide.b.size() == s.b.size();
  for (std::size_t i = 0; widened && i < s.a.size(); ++i)
    for (std::size_t k = 0; k < s.a[i].size(); ++k)
      widened = widened && (std::isnan(s.a[i][k]) || wide.a[i][k] == static_cast<double>(s.a[i][k]));
  CHECK(widened);
  // A flipped byte in the first, a middle and the last small leaf of each side: whichever
  // thread reads its run names the leaf.
  const std::string file = c + "/data-0-0.bin";
  const std::string original = test::read_file(file);
  const cairn::CheckpointMetadata meta = cairn::metadata(c);
  for (const char* key : {"a/0", "a/450", "a/899", "b/0", "b/450", "b/899"}) {
    CAPTURE(key);
    const cairn::LeafRecord* victim = meta.find_item("state")->find_leaf(key);
    REQUIRE(victim);
    std::string bytes = original;
    bytes[victim->chunks.front().offset + test::rng()() % victim->chunks.front().nbytes] ^= 0x04;
    test::write_file(file, bytes);
    for (int target = 0; target < 2; ++target) {
      try {
        if (target == 0) cairn::load(c, back);
        else cairn::load(c, wide);
        FAIL("expected a checksum error");
      } catch (const cairn::Error& e) {
        CHECK(e.kind() == cairn::ErrorKind::corrupt);
        CHECK(e.key_path() == key);
        CHECK(e.file() == file);
      }
    }
  }
}

// Also under ThreadSanitizer in CI. Leaves over the small-leaf size whose bytes are in memory
// (a checkpoint just written) are read side by side, one thread per core
// (read_scheduler.hpp's read_leaves_in_parallel): the values, the report and the errors must be
// those of a one-thread read.
TEST_CASE("large leaves read side by side on every core: bit-exact, cast, reported in order, and damage in any is named") {
  test::TempDir dir;
  const std::string c = dir / "c";
  std::map<std::string, std::vector<float>> s;
  for (int i = 0; i < 12; ++i)  // sizes that differ, so that threads finish at different times
    s["w" + std::to_string(10 + i)] = test::random_bits<float>(cairn::detail::small_leaf_bytes / sizeof(float) + 1 + test::rng()() % 300000);
  cairn::save(c, s);
  std::map<std::string, std::vector<float>> back;
  for (const auto& [k, v] : s) back[k].assign(v.size(), 0.0f);
  const cairn::LoadReport report = cairn::load(c, back);
  for (const auto& [k, v] : s) {
    const std::string key = k;  // (clang 14 cannot capture a structured binding in CAPTURE's lambda)
    CAPTURE(key);
    CHECK(bit_equal(back.at(k), v));
  }
  std::vector<std::string> want_keys;
  std::uint64_t total = 0;
  for (const auto& [k, v] : s) want_keys.push_back(k), total += v.size() * sizeof(float);
  CHECK(report.loaded == want_keys);
  CHECK(report.bytes_needed == total);
  CHECK(report.bytes_read >= total);
  CHECK(report.unverified_bytes == 0);
  // Widened on the way (each thread casts its own leaves).
  const auto wide = cairn::load<std::map<std::string, std::vector<double>>>(c);
  bool widened = wide.size() == s.size();
  for (const auto& [k, v] : s)
    for (std::size_t i = 0; widened && i < v.size(); ++i) widened = std::isnan(v[i]) || wide.at(k)[i] == static_cast<double>(v[i]);
  CHECK(widened);
  // A flipped byte in the first, a middle or the last leaf: the error names that leaf, the
  // same whichever thread read it; with two damaged, the first in file order.
  const std::string file = c + "/data-0-0.bin";
  const std::string original = test::read_file(file);
  const cairn::CheckpointMetadata meta = cairn::metadata(c);
  auto flip = [&](std::string& bytes, const char* key) {
    const cairn::LeafRecord* victim = meta.find_item("state")->find_leaf(key);
    REQUIRE(victim);
    bytes[victim->chunks.front().offset + test::rng()() % victim->chunks.front().nbytes] ^= 0x10;
  };
  for (const char* key : {"w10", "w16", "w21"}) {
    CAPTURE(key);
    std::string bytes = original;
    flip(bytes, key);
    test::write_file(file, bytes);
    CHECK_CAIRN_ERROR(cairn::load(c, back), cairn::ErrorKind::corrupt, "checksum mismatch");
    try {
      cairn::load(c, back);
    } catch (const cairn::Error& e) {
      CHECK(e.key_path() == key);
      CHECK(e.file() == file);
    }
  }
  std::string two = original;
  flip(two, "w13");
  flip(two, "w19");
  test::write_file(file, two);
  try {
    cairn::load(c, back);
    FAIL("expected a checksum error");
  } catch (const cairn::Error& e) {
    CHECK(e.key_path() == "w13");
  }
}

// A store whose bytes are never in memory already (StoreReader::cached_bytes says 0, as for a
// file that must come from the disk), over a MemoryStore, noting the threads that read.
// (Its reads wait 5 ms each.)
class FromDiskStore final : public test::ForwardingStore {
 public:
  FromDiskStore() : ForwardingStore("from-disk") {}
  std::unique_ptr<cairn::StoreReader> open(const std::string& key) const override {
    return std::make_unique<Reader>(inner.open(key), *this);
  }
  std::set<std::thread::id> readers() const {
    std::lock_guard<std::mutex> lock(mutex);
    return threads;
  }

 private:
  class Reader final : public cairn::StoreReader {
   public:
    Reader(std::unique_ptr<cairn::StoreReader> r, const FromDiskStore& s) : r_(std::move(r)), s_(s) {}
    std::uint64_t size() const override { return r_->size(); }
    void read_at(void* dst, std::uint64_t n, std::uint64_t offset) const override {
      {
        std::lock_guard<std::mutex> lock(s_.mutex);
        s_.threads.insert(std::this_thread::get_id());
      }
      // As a disk would, the read waits a little: on a busy machine the loading thread could
      // otherwise take every leaf before its helper starts.
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      r_->read_at(dst, n, offset);
    }

   private:
    std::unique_ptr<cairn::StoreReader> r_;
    const FromDiskStore& s_;
  };
  mutable std::mutex mutex;
  mutable std::set<std::thread::id> threads;
};

// Also under ThreadSanitizer in CI. Large leaves whose bytes must come from the disk are read
// side by side too (read_scheduler.hpp's leaf_threads: there a second thread overlaps the
// disk's requests and the first touch of the targets' pages): bit-exact, in the report's order.
TEST_CASE("large leaves that must come from the disk are read side by side on every core too") {
  if (cairn::detail::usable_cores() < 2) {
    MESSAGE("skipped: this process may use one core only");
    return;
  }
  FromDiskStore store;
  std::map<std::string, std::vector<float>> s;
  for (int i = 0; i < 8; ++i)
    s["w" + std::to_string(i)] = test::random_bits<float>(cairn::detail::small_leaf_bytes / sizeof(float) + 1 + test::rng()() % 100000);
  cairn::save({store, "c"}, s);
  const auto back = cairn::load<std::map<std::string, std::vector<float>>>({store, "c"});
  REQUIRE(back.size() == s.size());
  for (const auto& [k, v] : s) CHECK(bit_equal(back.at(k), v));
  CHECK(store.readers().size() >= 2);
  std::map<std::string, std::vector<float>> into;
  for (const auto& [k, v] : s) into[k].assign(v.size(), 0.0f);
  const cairn::LoadReport report = cairn::load({store, "c"}, into);
  for (const auto& [k, v] : s) CHECK(bit_equal(into.at(k), v));
  std::vector<std::string> keys;
  for (const auto& [k, v] : s) keys.push_back(k);
  CHECK(report.loaded == keys);
}

// Also under ThreadSanitizer in CI. A metadata text this long starts the read-ahead
// (checkpoint/read_ahead.hpp): a helper thread reads the data file into the page cache while
// the load parses and plans, and on until the load's reads are done. What the load returns
// and every error it raises come from its own reads, as before.
TEST_CASE("a load that reads its data file ahead while it parses: bit-exact from the disk, and damage is still found") {
  test::TempDir dir;
  const std::string c = dir / "c";
  std::map<std::string, std::vector<float>> s;
  // Enough leaves for a leaf table (format 3) of 64 KiB.
  for (int i = 0; i < 6000; ++i) s["layer" + std::to_string(i) + ".weight"] = test::random_bits<float>(1 + test::rng()() % 256);
  cairn::save(c, s);
  const std::string text = test::read_file(c + "/_METADATA");
  REQUIRE(text.size() >= cairn::detail::read_ahead_min_metadata_bytes);
  REQUIRE(cairn::detail::data_files_in_head(text) == cairn::metadata(c).data_files);
  const std::string file = c + "/data-0-0.bin";
  for (int round = 0; round < 3; ++round) {
    test::drop_from_page_cache(file);
    const auto fresh = cairn::load<std::map<std::string, std::vector<float>>>(c);
    REQUIRE(fresh.size() == s.size());
    for (const auto& [k, v] : s) CHECK(bit_equal(fresh.at(k), v));
    auto into = s;
    for (auto& [k, v] : into) std::fill(v.begin(), v.end(), 0.0f);
    test::drop_from_page_cache(file);
    cairn::load(c, into);
    for (const auto& [k, v] : s) CHECK(bit_equal(into.at(k), v));
  }
  // A load of some leaves (the others skipped) stops the read-ahead before it reads: the same
  // bytes, and the skipped leaves untouched.
  {
    auto some = s;
    for (auto& [k, v] : some) std::fill(v.begin(), v.end(), 0.0f);
    cairn::LoadOptions o;
    o.skip = {"layer1*"};
    test::drop_from_page_cache(file);
    const cairn::LoadReport r = cairn::load(c, some, o);
    CHECK(r.loaded.size() == 6000 - 1111);  // layer1, layer10-19, layer100-199, layer1000-1999
    for (const auto& [k, v] : s) {
      if (k.rfind("layer1", 0) == 0) CHECK(std::all_of(some.at(k).begin(), some.at(k).end(), [](float x) { return x == 0.0f; }));
      else CHECK(bit_equal(some.at(k), v));
    }
  }
  // A flipped byte is found and named, read ahead or not; so is a file cut short.
  const std::string original = test::read_file(file);
  const cairn::CheckpointMetadata meta = cairn::metadata(c);
  const cairn::LeafRecord* victim = meta.find_item("state")->find_leaf("layer1234.weight");
  REQUIRE(victim);
  std::string bytes = original;
  bytes[victim->chunks.front().offset + test::rng()() % victim->chunks.front().nbytes] ^= 0x10;
  test::write_file(file, bytes);
  test::drop_from_page_cache(file);
  auto back = s;
  CHECK_CAIRN_ERROR(cairn::load(c, back), cairn::ErrorKind::corrupt, "checksum");
  try {
    cairn::load(c, back);
  } catch (const cairn::Error& e) {
    CHECK(e.key_path() == "layer1234.weight");
    CHECK(e.file() == file);
  }
  test::write_file(file, original.substr(0, original.size() / 2));
  test::drop_from_page_cache(file);
  CHECK_CAIRN_ERROR(cairn::load(c, back), cairn::ErrorKind::corrupt, "");
  test::write_file(file, original);
  cairn::load(c, back);
  for (const auto& [k, v] : s) CHECK(bit_equal(back.at(k), v));
}

// A load writes every element of the arrays it allocates (the stored chunks are validated to
// cover the array), so it does not zero-fill them first (issue 37: the fill was a third of a
// load into new arrays). Observed through the one case where the buffer is kept: a reshape to
// the same element count leaves the old values, where resize() resets them.
TEST_CASE("a load allocates cairn::Array and ShardedArray targets without zero-filling them, and fills them whole") {
  cairn::Array<float> a({2, 3}, 7.0f);
  const float* before = a.data();
  cairn::StoredLeafInfo stored{cairn::DType::float32, {3, 2}};
  const cairn::LeafBuffer b = cairn::leaf_traits<cairn::Array<float>>::prepare(a, stored);
  CHECK(a.shape() == cairn::Shape{3, 2});
  CHECK(a.data() == before);
  CHECK(b.data == a.data());
  CHECK(std::all_of(a.begin(), a.end(), [](float x) { return x == 7.0f; }));  // not reset to 0
  a.resize({6});
  CHECK(std::all_of(a.begin(), a.end(), [](float x) { return x == 0.0f; }));  // resize still does
  // And a load into new targets of every kind returns the saved bits, in and out of place.
  test::TempDir dir;
  std::map<std::string, cairn::Array<double>> m;
  m["w"] = cairn::Array<double>({33, 17});
  const auto bits = test::random_bits<double>(33 * 17);
  std::memcpy(m["w"].data(), bits.data(), bits.size() * sizeof(double));
  cairn::save(dir / "a", m);
  auto back = cairn::load<std::map<std::string, cairn::Array<double>>>(dir / "a");
  CHECK(std::memcmp(back["w"].data(), bits.data(), bits.size() * sizeof(double)) == 0);
  auto sharded = cairn::ShardedArray<double>(
      cairn::NamedSharding(cairn::Mesh::host({{"x", 3}, {"y", 2}}), cairn::PartitionSpec{"x", "y"}));
  cairn::LoadOptions w;
  w.subtree = "w";
  cairn::load(dir / "a", sharded, w);
  CHECK(test::same_bits(sharded.gather(), bits));
}
