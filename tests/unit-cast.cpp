// SPDX-License-Identifier: Apache-2.0
#include "test_util.hpp"

#include <cairn/kernels/cast.hpp>  // cast_value (with separate compilation, included where used)

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
  // float64 -> float32 rounds: only where allowed.
  CHECK_CAIRN_ERROR(cairn::load(dir / "c", f), cairn::ErrorKind::dtype_mismatch, "the root leaf (float64 -> float32)");
  cairn::LoadOptions lossy;
  lossy.allow_lossy_cast = {"**"};
  cairn::LoadReport r = cairn::load(dir / "c", f, lossy);
  REQUIRE(r.cast.size() == 1);
  CHECK(r.cast[0].key.empty());
  CHECK(f[0] == 1.5f);
  CHECK(std::isinf(f[2]));
  cairn::LoadOptions no_cast;
  no_cast.allow_cast = false;
  CHECK_CAIRN_ERROR(cairn::load(dir / "c", f, no_cast), cairn::ErrorKind::dtype_mismatch, "casting is disabled");
  std::vector<std::int16_t> ints;
  CHECK_CAIRN_ERROR(cairn::load(dir / "c", ints, lossy), cairn::ErrorKind::value_out_of_range, "element 2");
  cairn::LoadOptions sat = lossy;
  sat.on_overflow = cairn::OnOverflow::saturate;
  cairn::load(dir / "c", ints, sat);
  CHECK(ints == std::vector<std::int16_t>{1, -2, 32767});
  std::string s;
  CHECK_CAIRN_ERROR(cairn::load(dir / "c", s), cairn::ErrorKind::dtype_mismatch, "cannot cast");
}

namespace {
// Values of a dtype to try: every bit pattern of the 1- and 2-byte types, edge values and
// random bits of the wider ones.
std::vector<unsigned char> sample_values(cairn::DType d) {
  using cairn::DType;
  const std::size_t size = cairn::dtype_size(d);
  std::vector<unsigned char> out;
  if (d == DType::bool_) return {0, 1};
  if (size <= 2) {
    for (std::uint32_t v = 0; v < (1u << (8 * size)); ++v)
      for (std::size_t b = 0; b < size; ++b) out.push_back(static_cast<unsigned char>(v >> (8 * b)));
    return out;
  }
  auto add = [&](auto v) {
    const auto* p = reinterpret_cast<const unsigned char*>(&v);
    out.insert(out.end(), p, p + sizeof v);
  };
  cairn::visit_dtype(d, [&](auto* t) {
    using T = std::remove_pointer_t<decltype(t)>;
    if constexpr (sizeof(T) >= 4) {  // the narrower types were enumerated above
      using L = std::numeric_limits<T>;
      for (T v : {L::max(), L::lowest(), L::min(), T(0), T(1), T(-1), T(100)}) add(v);
      if constexpr (std::is_floating_point_v<T>) {
        for (T v : {T(0.1), T(16777217.0), T(1e-40), L::denorm_min(), L::infinity(), T(3e38)}) add(v);
      } else {
        for (std::uint64_t v : {(std::uint64_t{1} << 24) + 1, (std::uint64_t{1} << 53) + 1}) add(static_cast<T>(v));
      }
    }
  });
  const auto random = test::random_bits<unsigned char>(size * 4096);
  out.insert(out.end(), random.begin(), random.end());
  return out;
}
}  // namespace

TEST_CASE("cast_is_exact agrees with round trips of every pair of dtypes") {
  using cairn::DType;
  for (DType from : cairn::all_numeric_dtypes) {
    const std::vector<unsigned char> values = sample_values(from);
    const std::size_t n = values.size() / cairn::dtype_size(from);
    std::vector<double> as_double(n);
    cairn::cast_host(from, values.data(), DType::float64, as_double.data(), n, cairn::OnOverflow::saturate);
    for (DType to : cairn::all_numeric_dtypes) {
      CAPTURE(cairn::dtype_name(from));
      CAPTURE(cairn::dtype_name(to));
      std::vector<unsigned char> there(n * cairn::dtype_size(to)), back(values.size());
      cairn::cast_host(from, values.data(), to, there.data(), n, cairn::OnOverflow::saturate);
      cairn::cast_host(to, there.data(), from, back.data(), n, cairn::OnOverflow::saturate);
      std::vector<double> back_double(n);
      cairn::cast_host(from, back.data(), DType::float64, back_double.data(), n, cairn::OnOverflow::saturate);
      bool all_exact = true;
      const std::size_t size = cairn::dtype_size(from);
      for (std::size_t i = 0; i < n && all_exact; ++i) {
        const bool same_bits = std::memcmp(&values[i * size], &back[i * size], size) == 0;
        all_exact = same_bits || (std::isnan(as_double[i]) && std::isnan(back_double[i]));
      }
      CHECK(cairn::cast_is_exact(from, to) == all_exact);
    }
  }
}

namespace ct {
struct Saved { std::vector<float> v; double dt = 0; };
CAIRN_TREE(Saved, v, dt)
struct AsIntegers { std::vector<std::int32_t> v; std::int64_t dt = 0; };
CAIRN_TREE(AsIntegers, v, dt)
struct Wider { std::vector<double> v; double dt = 0; };
CAIRN_TREE(Wider, v, dt)
}  // namespace ct

TEST_CASE("load never casts with loss unless the keys are allowed, and names each key and dtype") {
  test::TempDir dir;
  cairn::save(dir / "c", ct::Saved{{0.9f, 2.5f, -0.7f}, 0.001});
  CHECK_CAIRN_ERROR(cairn::load<ct::AsIntegers>(dir / "c"), cairn::ErrorKind::dtype_mismatch,
                    "v (float32 -> int32), dt (float64 -> int64)");
  ct::AsIntegers target;
  cairn::LoadOptions o;
  o.allow_lossy_cast = {"v"};
  CHECK_CAIRN_ERROR(cairn::load(dir / "c", target, o), cairn::ErrorKind::dtype_mismatch, "key 'dt'");
  o.allow_lossy_cast = {"**"};
  cairn::LoadReport r = cairn::load(dir / "c", target, o);
  CHECK(target.v == std::vector<std::int32_t>{0, 2, 0});
  CHECK(target.dt == 0);
  CHECK(r.cast.size() == 2);
  // Widening casts lose nothing: allowed, and reported.
  ct::Wider wide;
  r = cairn::load(dir / "c", wide);
  CHECK(wide.v == std::vector<double>{0.9f, 2.5f, -0.7f});
  CHECK(r.cast.size() == 1);
  CHECK(r.cast.front().key == "v");
}

TEST_CASE("a plain leaf larger than a write piece is cast a piece at a time, exactly as a whole cast") {
  test::TempDir dir;
  std::vector<double> v(static_cast<std::size_t>(3) << 20);  // 24 MiB: three pieces and more
  const auto bits = test::random_bits<double>(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = std::isfinite(bits[i]) ? bits[i] : 0.5;
  std::map<std::string, std::vector<double>> tree{{"v", v}};
  cairn::SaveOptions o;
  o.cast = {{"v", cairn::DType::bfloat16}};
  const cairn::SaveReport r = cairn::save(dir / "c", tree, o);
  REQUIRE(r.cast.size() == 1);
  CHECK(r.bytes_written == v.size() * 2);
  const auto stored = cairn::read_arrays(dir / "c", {"v"});
  const auto sv = stored.at("v").values<cairn::bfloat16>();
  REQUIRE(sv.size() == v.size());
  bool same = true;
  for (std::size_t i = 0; i < v.size() && same; ++i) same = sv[i].bits == cairn::cast_value<cairn::bfloat16>(v[i]).bits;
  CHECK(same);
}
