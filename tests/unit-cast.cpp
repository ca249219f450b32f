#include "test_util.hpp"

namespace ct {
struct Model { std::map<std::string, Eigen::MatrixXf> params; std::vector<double> stats; std::int64_t step = 0; std::vector<std::int64_t> ids; };
CAIRN_TREE(Model, params, stats, step, ids)
struct Bf16Params { std::map<std::string, Eigen::Matrix<cairn::bfloat16, Eigen::Dynamic, Eigen::Dynamic>> params; };
CAIRN_TREE(Bf16Params, params)
}  // namespace ct

TEST_CASE("cast on save by key-path pattern stores bfloat16 and records the original dtype") {
  test::TempDir dir;
  ct::Model m;
  m.params["w"] = Eigen::MatrixXf::Random(8, 4);
  m.params["b"] = Eigen::MatrixXf::Random(1, 4);
  m.stats = {1.0, 2.0};
  m.step = 5;
  cairn::SaveOptions o;
  o.cast = {{"params/*", cairn::DType::bfloat16}, {"step", cairn::DType::int32}};
  cairn::SaveReport sr = cairn::save(dir / "c", m, o);
  CHECK(sr.cast.size() == 2);  // step is an integer: the float-only rule leaves it alone
  auto meta = cairn::metadata(dir / "c");
  const auto* w = meta.find_item("state")->find_leaf("params/w");
  REQUIRE(w);
  CHECK(w->dtype == cairn::DType::bfloat16);
  CHECK(w->saved_from == cairn::DType::float32);
  CHECK(meta.find_item("state")->find_leaf("step")->dtype == cairn::DType::int64);
  // Loading into float32 casts back (reported), values are the bf16-rounded ones.
  ct::Model back;
  cairn::LoadReport r = cairn::load(dir / "c", back);
  CHECK(r.cast.size() == 2);
  for (const auto& c : r.cast) { CHECK(c.from == cairn::DType::bfloat16); CHECK(c.to == cairn::DType::float32); }
  for (Eigen::Index i = 0; i < m.params["w"].size(); ++i)
    CHECK(back.params["w"].data()[i] == cairn::bfloat16(m.params["w"].data()[i]).to_float());
  // Loading into bfloat16 targets reads the stored bits unchanged.
  auto bf = cairn::load<ct::Bf16Params>(dir / "c", cairn::LoadOptions::partial());
  CHECK(bf.params["w"](3, 2).bits == cairn::bfloat16(m.params["w"](3, 2)).bits);
  cairn::SaveOptions ints;
  ints.cast = {{"ids", cairn::DType::int8, false}};
  m.ids = {1, 2, 1000};
  CHECK_CAIRN_ERROR(cairn::save(dir / "d", m, ints), cairn::ErrorKind::value_out_of_range, "ids");
  CHECK_FALSE(std::filesystem::exists(dir / "d"));
}

TEST_CASE("cast on load converts, reports each cast, and can be refused") {
  test::TempDir dir;
  std::vector<double> v = {1.5, -2.25, 1e300};
  cairn::save(dir / "c", v);
  std::vector<float> f;
  cairn::LoadReport r = cairn::load(dir / "c", f);
  REQUIRE(r.cast.size() == 1);
  CHECK(r.cast[0].key.empty());
  CHECK(f[0] == 1.5f);
  CHECK(std::isinf(f[2]));
  cairn::LoadOptions no_cast;
  no_cast.allow_cast = false;
  CHECK_CAIRN_ERROR(cairn::load(dir / "c", f, no_cast), cairn::ErrorKind::dtype_mismatch, "casting is disabled");
  std::vector<std::int16_t> ints;
  CHECK_CAIRN_ERROR(cairn::load(dir / "c", ints), cairn::ErrorKind::value_out_of_range, "element 2");
  cairn::LoadOptions sat;
  sat.on_overflow = cairn::OnOverflow::saturate;
  cairn::load(dir / "c", ints, sat);
  CHECK(ints == std::vector<std::int16_t>{1, -2, 32767});
  std::string s;
  CHECK_CAIRN_ERROR(cairn::load(dir / "c", s), cairn::ErrorKind::dtype_mismatch, "cannot cast");
}
