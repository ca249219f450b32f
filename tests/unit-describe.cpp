// SPDX-License-Identifier: Apache-2.0
#include "test_util.hpp"

#include <list>
#include <memory>
#include <sstream>

#include <cereal/archives/binary.hpp>
#include <cereal/archives/json.hpp>

namespace wide {
// A struct at exactly the documented field limit (CAIRN_TREE_MAX_FIELDS = 64).
#define F8(p) int p##0 = 0, p##1 = 1, p##2 = 2, p##3 = 3, p##4 = 4, p##5 = 5, p##6 = 6, p##7 = 7;
struct Wide { F8(a) F8(b) F8(c) F8(d) F8(e) F8(f) F8(g) F8(h) };
#undef F8
#define N8(p) p##0, p##1, p##2, p##3, p##4, p##5, p##6, p##7
CAIRN_TREE(Wide, N8(a), N8(b), N8(c), N8(d), N8(e), N8(f), N8(g), N8(h))
#undef N8
}  // namespace wide

namespace priv {
class Model {
 public:
  Model() = default;
  Model(float w, int s) : weights_(4, w), step_(s) {}
  bool operator==(const Model& o) const { return weights_ == o.weights_ && step_ == o.step_; }
 private:
  std::vector<float> weights_;
  int step_ = 0;
  CAIRN_TREE_INTRUSIVE(Model, weights_, step_)
};

struct WithEigen { Eigen::Matrix<double, 2, 3, Eigen::RowMajor> m; Eigen::ArrayXi a; cairn::Array<float> t; std::map<int, std::string> names; };
CAIRN_TREE(WithEigen, m, a, t, names)

// Parts held by pointer and a list: cereal's own types for them come with cairn/cairn.hpp.
struct Owning { std::unique_ptr<WithEigen> part; std::shared_ptr<std::vector<int>> shared; std::unique_ptr<float> none; std::list<double> xs; };
CAIRN_TREE(Owning, part, shared, none, xs)
}  // namespace priv

TEST_CASE("the macro works at its documented field limit") {
  static_assert(CAIRN_TREE_MAX_FIELDS == 64);
  wide::Wide w;
  CHECK(cairn::leaf_count(w) == 64);
  auto keys = cairn::key_paths(w);
  CHECK(keys.front() == "a0");
  CHECK(keys.back() == "h7");
  w.h7 = 99;
  test::TempDir dir;
  cairn::save(dir / "w", w);
  CHECK(cairn::load<wide::Wide>(dir / "w").h7 == 99);
}

TEST_CASE("the intrusive form reaches private members") {
  priv::Model m(0.5f, 3);
  CHECK(cairn::key_paths(m) == std::vector<std::string>{"weights_", "step_"});
  test::TempDir dir;
  cairn::save(dir / "m", m);
  CHECK(cairn::load<priv::Model>(dir / "m") == m);
  std::stringstream ss;
  { cereal::BinaryOutputArchive ar(ss); ar(m); }
  priv::Model back;
  { cereal::BinaryInputArchive ar(ss); ar(back); }
  CHECK(back == m);
}

TEST_CASE("annotated structs serialize with cereal's JSON archive, Eigen and cairn::Array members included") {
  priv::WithEigen v;
  v.m << 1, 2, 3, 4, 5, 6;
  v.a = Eigen::ArrayXi::LinSpaced(5, 0, 4);
  v.t = cairn::Array<float>({2, 2}, {1, 2, 3, 4});
  v.names = {{1, "one"}, {2, "two"}};
  std::stringstream ss;
  { cereal::JSONOutputArchive ar(ss); ar(cereal::make_nvp("state", v)); }
  CHECK(ss.str().find("\"m\"") != std::string::npos);
  priv::WithEigen back;
  { cereal::JSONInputArchive ar(ss); ar(cereal::make_nvp("state", back)); }
  CHECK(back.m == v.m);
  CHECK((back.a == v.a).all());
  CHECK(back.t == v.t);
  CHECK(back.names == v.names);
}

TEST_CASE("annotated structs holding smart pointers and lists serialize with cereal archives") {
  priv::Owning v;
  v.part = std::make_unique<priv::WithEigen>();
  v.part->a = Eigen::ArrayXi::LinSpaced(3, 7, 9);
  v.shared = std::make_shared<std::vector<int>>(std::vector<int>{4, 5});
  v.xs = {0.5, -1.25};
  for (int binary = 0; binary < 2; ++binary) {
    std::stringstream ss;
    priv::Owning back;
    back.none = std::make_unique<float>(3);  // reset: it was saved null
    if (binary) {
      { cereal::BinaryOutputArchive ar(ss); ar(v); }
      cereal::BinaryInputArchive ar(ss);
      ar(back);
    } else {
      { cereal::JSONOutputArchive ar(ss); ar(cereal::make_nvp("state", v)); }
      cereal::JSONInputArchive ar(ss);
      ar(cereal::make_nvp("state", back));
    }
    REQUIRE(back.part);
    CHECK((back.part->a == v.part->a).all());
    REQUIRE(back.shared);
    CHECK(*back.shared == *v.shared);
    CHECK(back.none == nullptr);
    CHECK(back.xs == v.xs);
  }
}

TEST_CASE("a cairn::Shape is written by cereal as the std::vector<int64_t> it once was, and read back") {
  for (const std::vector<std::int64_t>& dims : {std::vector<std::int64_t>{}, {3, 4}, {1, 2, 3, 4, 5, 6, 7}}) {
    CAPTURE(dims.size());
    const cairn::Shape shape(dims);
    std::stringstream as_shape, as_vector;
    { cereal::JSONOutputArchive ar(as_shape); ar(cereal::make_nvp("s", shape)); }
    { cereal::JSONOutputArchive ar(as_vector); ar(cereal::make_nvp("s", dims)); }
    CHECK(as_shape.str() == as_vector.str());
    cairn::Shape back{9};
    { cereal::JSONInputArchive ar(as_vector); ar(cereal::make_nvp("s", back)); }
    CHECK(back == shape);
    std::stringstream bin_shape, bin_vector;
    { cereal::BinaryOutputArchive ar(bin_shape); ar(shape); }
    { cereal::BinaryOutputArchive ar(bin_vector); ar(dims); }
    CHECK(bin_shape.str() == bin_vector.str());
    cairn::Shape bin_back;
    { cereal::BinaryInputArchive ar(bin_shape); ar(bin_back); }
    CHECK(bin_back == shape);
  }
}
