// SPDX-License-Identifier: Apache-2.0
// safetensors import: files written by an independent numpy writer (tests/safetensors_ref.py,
// run by CTest before this program) load bit-exactly into cairn trees with the LoadOptions of
// a checkpoint; every violation of the specification is a corrupt error naming the file and
// the tensor.
#include <cairn/cairn.hpp>
#include <cairn/checkpoint/read_ahead.hpp>  // read_ahead_min_metadata_bytes
#include <cairn/core/utf8.hpp>
#include <cairn/kernels/cast.hpp>  // cast_value
#include <cairn/safetensors/header.hpp>  // safetensors_dtype_name
#include <cairn/safetensors/load.hpp>

#include "test_util.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <random>
#include <map>

#include <sys/wait.h>

namespace {

struct Layer {
  cairn::Array<float> w;
};
CAIRN_TREE(Layer, w)

struct Model {
  std::vector<Layer> layers;
  cairn::Array<cairn::bfloat16> norm;
};
CAIRN_TREE(Model, layers, norm)

// Every tensor of tests/safetensors_ref.py's all.safetensors, under its name.
struct All {
  cairn::Array<bool> b;
  cairn::Array<std::uint8_t> u8;
  cairn::Array<std::int8_t> i8;
  cairn::Array<std::int16_t> i16;
  cairn::Array<std::uint16_t> u16;
  cairn::Array<std::int32_t> i32;
  cairn::Array<std::uint32_t> u32;
  cairn::Array<std::int64_t> i64;
  cairn::Array<std::uint64_t> u64;
  cairn::Array<cairn::float16> f16;
  cairn::Array<float> f32;
  cairn::Array<double> f64;
  cairn::Array<cairn::bfloat16> bf16;
  cairn::Array<cairn::float8_e4m3fn> f8e4m3;
  cairn::Array<cairn::float8_e5m2> f8e5m2;
  Model model;
  double scalar = 0;
  cairn::Array<float> empty;
};
CAIRN_TREE(All, b, u8, i8, i16, u16, i32, u32, i64, u64, f16, f32, f64, bf16, f8e4m3, f8e5m2, model, scalar, empty)

const std::string ref = CAIRN_SAFETENSORS_REF;

// The bytes numpy wrote for a tensor, and its shape.
struct Expected {
  std::string bytes;
  cairn::Shape shape;
};
std::map<std::string, Expected> expected() {
  const std::string bin = test::read_file(ref + "/expected.bin");
  const cairn::Json index = cairn::Json::parse(test::read_file(ref + "/expected.json"));
  std::map<std::string, Expected> out;
  for (const auto& [name, e] : index.items()) {
    Expected x;
    x.bytes = bin.substr(static_cast<std::size_t>(e.at("offset").as_int()), static_cast<std::size_t>(e.at("nbytes").as_int()));
    for (const auto& d : e.at("shape").as_array()) x.shape.push_back(d.as_int());
    out[name] = x;
  }
  return out;
}

template <class T>
void check_bytes(const std::map<std::string, Expected>& want, const std::string& name, const cairn::Array<T>& a) {
  CAPTURE(name);
  const Expected& e = want.at(name);
  CHECK(a.shape() == e.shape);
  REQUIRE(a.size() * sizeof(T) == e.bytes.size());
  CHECK(std::memcmp(a.data(), e.bytes.data(), e.bytes.size()) == 0);
}

void check_all(const All& a) {
  const auto want = expected();
  check_bytes(want, "b", a.b);
  check_bytes(want, "u8", a.u8);
  check_bytes(want, "i8", a.i8);
  check_bytes(want, "i16", a.i16);
  check_bytes(want, "u16", a.u16);
  check_bytes(want, "i32", a.i32);
  check_bytes(want, "u32", a.u32);
  check_bytes(want, "i64", a.i64);
  check_bytes(want, "u64", a.u64);
  check_bytes(want, "f16", a.f16);
  check_bytes(want, "f32", a.f32);
  check_bytes(want, "f64", a.f64);
  check_bytes(want, "bf16", a.bf16);
  check_bytes(want, "f8e4m3", a.f8e4m3);
  check_bytes(want, "f8e5m2", a.f8e5m2);
  REQUIRE(a.model.layers.size() == 2);
  check_bytes(want, "model.layers.0.w", a.model.layers[0].w);
  check_bytes(want, "model.layers.1.w", a.model.layers[1].w);
  check_bytes(want, "model.norm", a.model.norm);
  CHECK(std::memcmp(&a.scalar, want.at("scalar").bytes.data(), 8) == 0);
  check_bytes(want, "empty", a.empty);
}

// A safetensors file from a header text and a buffer size (the bytes are i % 251).
std::string make_file(const std::string& header, std::size_t data_bytes) {
  std::string f(8, '\0');
  std::uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) f[static_cast<std::size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xff);
  f += header;
  for (std::size_t i = 0; i < data_bytes; ++i) f += static_cast<char>(i % 251);
  return f;
}

}  // namespace

TEST_CASE("a file numpy wrote loads bit-exactly: every dtype, nested names into vectors and structs, 0-d and empty") {
  All a = cairn::load_safetensors<All>(ref + "/all.safetensors");
  check_all(a);
  const cairn::CheckpointMetadata m = cairn::safetensors_metadata(ref + "/all.safetensors");
  CHECK(m.user_metadata.at("note").as_string() == "written by numpy");
  CHECK(m.leaves().size() == 20);
  CHECK(m.summary().find("model/layers/1/w: float32[3, 4]") != std::string::npos);
  CHECK(m.summary().rfind("safetensors file\n", 0) == 0);  // what it is, not "cairn checkpoint"
}

TEST_CASE("a sharded Hugging Face set loads through its index, the same as the single file") {
  All a = cairn::load_safetensors<All>(ref + "/sharded/model.safetensors.index.json");
  check_all(a);
  const cairn::CheckpointMetadata m = cairn::safetensors_metadata(ref + "/sharded/model.safetensors.index.json");
  CHECK(m.data_files.size() == 2);
  CHECK(m.user_metadata.at("total_size").as_int() > 0);
}

TEST_CASE("LoadOptions apply as to a checkpoint: strict lists every key, partial, subtree, skip, casts") {
  const std::string file = ref + "/all.safetensors";
  // Strict: a model alone is missing nothing but the file holds more.
  Model m;
  CHECK_CAIRN_ERROR(cairn::load_safetensors(file, m), cairn::ErrorKind::structure_mismatch, "f8e5m2");
  cairn::LoadOptions sub;
  sub.subtree = "model";
  cairn::LoadReport r = cairn::load_safetensors(file, m, sub);
  CHECK(m.layers.size() == 2);
  CHECK(r.missing.empty());
  CHECK(r.unexpected.empty());
  // Whole names as keys of a flat map, casts to double (exact from every float dtype), the
  // integers skipped, a key the file lacks left as it is and reported (allow_missing).
  cairn::SafetensorsOptions whole;
  whole.separator = "";
  cairn::LoadOptions options;
  options.allow_cast = true;
  options.allow_missing = true;
  options.skip = {"b", "u*", "i*"};
  std::map<std::string, cairn::Array<double>> flat;
  flat["not in the file"] = cairn::Array<double>({1}, {1.0});
  r = cairn::load_safetensors(file, flat, options, whole);
  CHECK(std::find(r.missing.begin(), r.missing.end(), "not in the file") != r.missing.end());
  CHECK(flat["not in the file"].data()[0] == 1.0);
  CHECK(r.unexpected.empty());
  CHECK(std::find(r.skipped.begin(), r.skipped.end(), "u64") != r.skipped.end());
  const auto want = expected();
  CHECK(std::memcmp(flat.at("f64").data(), want.at("f64").bytes.data(), 40) == 0);
  for (const char* name : {"f32", "model.layers.1.w"}) {
    CAPTURE(name);
    const std::string& bytes = want.at(name).bytes;
    CHECK(flat.at(name).shape() == want.at(name).shape);
    REQUIRE(flat.at(name).size() * 4 == bytes.size());
    for (std::size_t i = 0; i < flat.at(name).size(); ++i) {
      float x = 0;
      std::memcpy(&x, bytes.data() + 4 * i, 4);
      CHECK(flat.at(name).data()[i] == static_cast<double>(x));
    }
  }
  // Without allow_cast, a dtype that differs is refused and named.
  std::vector<double> norm;
  cairn::LoadOptions just_norm;
  just_norm.subtree = "model/norm";
  just_norm.allow_cast = false;
  CHECK_CAIRN_ERROR(cairn::load_safetensors(file, norm, just_norm), cairn::ErrorKind::dtype_mismatch, "bfloat16");
}

TEST_CASE("an empty file ({}) loads into an empty tree, and a name that is both leaf and parent is explained") {
  std::map<std::string, std::vector<float>> none;
  cairn::load_safetensors(ref + "/empty.safetensors", none);
  CHECK(none.empty());
  test::TempDir dir;
  const std::string f = dir / "clash.safetensors";
  test::write_file(f, make_file(R"({"a.b":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"a.b.c":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}})", 2));
  CHECK_CAIRN_ERROR(cairn::safetensors_metadata(f), cairn::ErrorKind::invalid_argument, "separator");
  cairn::SafetensorsOptions whole;
  whole.separator = "";
  std::map<std::string, std::vector<std::uint8_t>> flat = {{"a.b", {}}, {"a.b.c", {}}};
  cairn::load_safetensors(f, flat, {}, whole);
  CHECK(flat["a.b.c"] == std::vector<std::uint8_t>{1});
}

TEST_CASE("every violation of the specification is a corrupt error naming the file and the tensor") {
  test::TempDir dir;
  const std::string f = dir / "bad.safetensors";
  const std::string ok = R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  struct Case { std::string header; std::size_t data; std::string error; };
  const std::vector<Case> cases = {
      {ok, 9, "buffer after the header is 9"},
      {ok, 7, "data_offsets [0, 8) run past the end of the buffer after the header, which is 7 bytes"},
      // The tensor that runs past the end is named, not the hole it leaves before it.
      {R"({"w":{"dtype":"U8","shape":[16],"data_offsets":[16,32]}})", 16, "data_offsets [16, 32) run past the end"},
      // (A name of capitals, digits and '_' is a dtype cairn does not have: see the case below.)
      {R"({"w":{"dtype":"f32","shape":[2],"data_offsets":[0,8]}})", 8, "unknown dtype 'f32'"},
      {R"({"w":{"dtype":"","shape":[2],"data_offsets":[0,8]}})", 8, "unknown dtype ''"},
      {R"({"w":{"dtype":"F8 E8M0","shape":[2],"data_offsets":[0,8]}})", 8, "unknown dtype 'F8 E8M0'"},
      // A tensor of a dtype cairn does not have still takes part in the offsets' checks.
      {R"({"w":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"v":{"dtype":"F8_E8M0","shape":[2],"data_offsets":[1,3]}})", 3, "data_offsets [1, 3) overlap those of 'w' [0, 2)"},
      {R"({"w":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"v":{"dtype":"C64","shape":[1],"data_offsets":[3,11]}})", 11, "belong to no tensor"},
      {R"({"v":{"dtype":"C64","shape":[1],"data_offsets":[0,8]}})", 9, "buffer after the header is 9"},
      {R"({"v":{"dtype":"C64","shape":[4294967296,4294967296],"data_offsets":[0,8]}})", 8, "overflow"},
      {R"({"v":{"dtype":"C64","shape":[2],"data_offsets":[8,0]}})", 8, "end before they begin"},
      {R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8, "needs 12"},
      {R"({"w":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", 8, "negative dimension"},
      {R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", 8, "end before they begin"},
      {R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0]}})", 8, "[begin, end]"},
      {R"({"w":{"dtype":"F32","shape":[2]}})", 8, "lacks 'data_offsets'"},
      {R"({"w":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]}})", 8, "overflow"},
      {R"({"w":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"v":{"dtype":"U8","shape":[2],"data_offsets":[1,3]}})", 3, "data_offsets [1, 3) overlap those of 'w' [0, 2)"},
      {R"({"w":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"v":{"dtype":"U8","shape":[2],"data_offsets":[3,5]}})", 5, "belong to no tensor"},
      {R"({"w":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"w":{"dtype":"U8","shape":[2],"data_offsets":[2,4]}})", 4, "listed twice"},
      {R"({"__metadata__":{"a":1}})", 0, "not a string"},
      {R"( {})", 0, "does not begin with '{'"},
      {R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})", 8, "invalid safetensors header"},
      {R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8.0]}})", 8, "not an integer"},
      // A member given twice (the shapes were concatenated into [2, 2], the last dtype won).
      {R"({"w":{"dtype":"F32","shape":[2],"shape":[2],"data_offsets":[0,8]}})", 8, "'shape' twice"},
      {R"({"w":{"dtype":"F32","dtype":"I32","shape":[2],"data_offsets":[0,8]}})", 8, "'dtype' twice"},
      {R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"data_offsets":[0,8]}})", 8, "'data_offsets' twice"},
      {R"({"__metadata__":{"a":"1","a":"2"}})", 0, "'a' twice"},
      // The header is UTF-8: invalid bytes, overlong forms and surrogates are refused.
      {"{\"w\xff\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "not valid UTF-8 (w\\xff)"},
      {"{\"\xc0\xaf\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "not valid UTF-8"},
      {"{\"\xed\xa0\x80\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "not valid UTF-8"},
      {"{\"w\xe2\x82\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "not valid UTF-8"},
      {"{\"__metadata__\":{\"k\":\"\xf8\x88\x80\x80\x80\"}}", 0, "value of 'k' is not valid UTF-8"},
      {"{\"__metadata__\":{\"\xe0\x80\x80\":\"v\"}}", 0, "key is not valid UTF-8"},
  };
  for (const auto& k : cases) {
    CAPTURE(k.header);
    test::write_file(f, make_file(k.header, k.data));
    CHECK_CAIRN_ERROR(cairn::safetensors_metadata(f), cairn::ErrorKind::corrupt, k.error);
    CHECK_CAIRN_ERROR(cairn::safetensors_metadata(f), cairn::ErrorKind::corrupt, "bad.safetensors");
  }
  // The length prefix itself: too short a file, over the 100 MB cap, longer than the file.
  test::write_file(f, "abc");
  CHECK_CAIRN_ERROR(cairn::safetensors_metadata(f), cairn::ErrorKind::corrupt, "too short");
  std::string big = make_file("{}", 0);
  big[4] = 1;  // 2^32 + 2
  test::write_file(f, big);
  CHECK_CAIRN_ERROR(cairn::safetensors_metadata(f), cairn::ErrorKind::corrupt, "100 MB");
  std::string longer = make_file("{}", 0);
  longer[0] = 50;
  test::write_file(f, longer);
  CHECK_CAIRN_ERROR(cairn::safetensors_metadata(f), cairn::ErrorKind::corrupt, "longer than the file");
  // Tensor errors name the tensor.
  test::write_file(f, make_file(R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8));
  try {
    (void)cairn::safetensors_metadata(f);
    FAIL("no error");
  } catch (const cairn::Error& e) {
    CHECK(e.key_path() == "w");
  }
  // An index that points outside its directory, or at a file without the tensor.
  const std::string index = dir / "m.safetensors.index.json";
  test::write_file(index, R"({"weight_map":{"w":"../bad.safetensors"}})");
  CHECK_CAIRN_ERROR(cairn::safetensors_metadata(index), cairn::ErrorKind::corrupt, "not a plain file name");
  test::write_file(f, make_file(ok, 8));
  test::write_file(index, R"({"weight_map":{"w":"bad.safetensors","v":"bad.safetensors"}})");
  CHECK_CAIRN_ERROR(cairn::safetensors_metadata(index), cairn::ErrorKind::corrupt, "does not hold it");
  test::write_file(index, R"({"weight_map":{}})");
  CHECK_CAIRN_ERROR(cairn::safetensors_metadata(index), cairn::ErrorKind::corrupt, "names no tensors");
}

TEST_CASE("a tensor name deeper than a key path may be is corrupt, named with its file") {
  test::TempDir dir;
  const std::string f = dir / "deep.safetensors";
  std::string name = "w";
  for (int i = 0; i < 1000; ++i) name += ".x";  // 1,001 parts
  test::write_file(f, make_file("{\"" + name + "\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1));
  CHECK_CAIRN_ERROR(cairn::safetensors_metadata(f), cairn::ErrorKind::corrupt, "a tensor name of 1001 parts, more than the 1000");
  CHECK_CAIRN_ERROR(cairn::safetensors_metadata(f), cairn::ErrorKind::corrupt, "deep.safetensors");
  // Kept whole (no separator), it is one entry, and reads.
  CHECK(cairn::safetensors_metadata(f, {.separator = ""}).leaves().at(0).key() == name);
  name.resize(name.size() - 2);  // 1,000 parts: as deep as a tree may be
  test::write_file(f, make_file("{\"" + name + "\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1));
  CHECK(cairn::safetensors_metadata(f).leaves().at(0).path.size() == 1000);
}

TEST_CASE("valid UTF-8 in names and metadata loads: every length of sequence, up to U+10FFFF") {
  test::TempDir dir;
  const std::string f = dir / "utf8.safetensors";
  const std::string name = "w\xc3\xa9\xe2\x82\xac\xf4\x8f\xbf\xbf";  // w, e-acute, euro sign, U+10FFFF
  test::write_file(f, make_file("{\"" + name + "\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
                                "\"__metadata__\":{\"k\":\"\xe6\x97\xa5\"}}", 1));
  const auto h = cairn::safetensors_metadata(f);
  CHECK(h.user_metadata.at("k").as_string() == "\xe6\x97\xa5");
  CHECK(h.leaves().at(0).key() == name);
  CHECK(cairn::detail::valid_utf8(name));
  CHECK_FALSE(cairn::detail::valid_utf8("\xf4\x90\x80\x80"));  // U+110000
}

TEST_CASE("random byte flips in a header never crash: they load or throw cairn::Error") {
  const std::string good = test::read_file(ref + "/all.safetensors");
  REQUIRE_MESSAGE(good.size() > 608, "run through ctest: the safetensors-reference-files fixture writes " << ref);
  test::TempDir dir;
  const std::string f = dir / "x.safetensors";
  int errors = 0;
  for (int trial = 0; trial < 400; ++trial) {
    std::string s = good;
    for (int k = 0; k < 1 + trial % 3; ++k) s[8 + test::rng()() % 600] = static_cast<char>(test::rng()());
    test::write_file(f, s);
    try {
      All a = cairn::load_safetensors<All>(f);
      (void)a;
    } catch (const cairn::Error&) {
      ++errors;
    }
  }
  CHECK(errors > 0);
}

// ---- export ----

namespace {

struct Dense {
  Eigen::MatrixXf kernel;  // column-major: written in C order, as the format demands
  std::vector<float> bias;
};
CAIRN_TREE(Dense, kernel, bias)

struct Net {
  Dense dense;
  std::vector<Layer> layers;
  std::map<std::string, std::vector<std::int32_t>> counters;
  std::vector<bool> flags;
  double step = 0;
  cairn::ShardedArray<float> sharded;
};
CAIRN_TREE(Net, dense, layers, counters, flags, step, sharded)

cairn::NamedSharding grid() {
  return cairn::NamedSharding(cairn::Mesh::host({{"x", 2}, {"y", 2}}), cairn::PartitionSpec{"x", "y"});
}

Net make_net() {
  auto& rng = test::rng();
  std::uniform_real_distribution<float> u(-2, 2);
  Net n;
  n.dense.kernel = Eigen::MatrixXf(3, 5);
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 5; ++j) n.dense.kernel(i, j) = u(rng);
  for (int i = 0; i < 5; ++i) n.dense.bias.push_back(u(rng));
  n.layers.resize(3);
  for (auto& l : n.layers) {
    l.w = cairn::Array<float>({2, 3});
    for (std::size_t i = 0; i < l.w.size(); ++i) l.w.data()[i] = u(rng);
  }
  n.counters["seen"] = {1, -2, 3};
  n.counters["kept"] = {};
  n.flags = {true, false, true};
  n.step = 1234.5;
  std::vector<float> global(6 * 4);
  for (auto& x : global) x = u(rng);
  n.sharded = cairn::ShardedArray<float>::from_host(global, {6, 4}, grid());
  return n;
}

// The C-order bytes of every leaf as cairn writes it (the column-major kernel transposed by
// hand here), by safetensors name: what the independent reader must find in the files.
std::map<std::string, std::string> expected_bytes(const Net& n, bool bf16_dense) {
  auto raw = [](const void* p, std::size_t bytes) { return std::string(static_cast<const char*>(p), bytes); };
  std::map<std::string, std::string> e;
  std::vector<float> kernel;
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 5; ++j) kernel.push_back(n.dense.kernel(i, j));
  auto as_bf16 = [](const std::vector<float>& v) {
    std::vector<cairn::bfloat16> out(v.size());
    cairn::cast_host(cairn::DType::float32, v.data(), cairn::DType::bfloat16, out.data(), v.size());
    return std::string(reinterpret_cast<const char*>(out.data()), out.size() * 2);
  };
  e["dense.kernel"] = bf16_dense ? as_bf16(kernel) : raw(kernel.data(), kernel.size() * 4);
  e["dense.bias"] = bf16_dense ? as_bf16(n.dense.bias) : raw(n.dense.bias.data(), 20);
  for (std::size_t i = 0; i < n.layers.size(); ++i)
    e["layers." + std::to_string(i) + ".w"] = raw(n.layers[i].w.data(), n.layers[i].w.size() * 4);
  e["counters.seen"] = raw(n.counters.at("seen").data(), 12);
  e["counters.kept"] = "";
  e["flags"] = std::string("\1\0\1", 3);
  e["step"] = raw(&n.step, 8);
  const std::vector<float> global = n.sharded.gather();
  e["sharded"] = raw(global.data(), global.size() * 4);
  return e;
}

// expected.bin and expected.json for safetensors_ref.py check (the same layout it writes).
void write_expected(const std::string& dir, const std::map<std::string, std::string>& bytes) {
  std::string bin;
  cairn::Json index = cairn::Json::object();
  for (const auto& [name, b] : bytes) {
    index[name] = cairn::Json::object({{"offset", static_cast<std::int64_t>(bin.size())},
                                       {"nbytes", static_cast<std::int64_t>(b.size())}});
    bin += b;
  }
  test::write_file(dir + "/expected.bin", bin);
  test::write_file(dir + "/expected.json", index.dump());
}

void check_same_net(const Net& a, const Net& b) {
  CHECK(a.dense.kernel == b.dense.kernel);
  CHECK(a.dense.bias == b.dense.bias);
  REQUIRE(a.layers.size() == b.layers.size());
  for (std::size_t i = 0; i < a.layers.size(); ++i)
    CHECK(std::memcmp(a.layers[i].w.data(), b.layers[i].w.data(), a.layers[i].w.size() * 4) == 0);
  CHECK(a.counters == b.counters);
  CHECK(a.flags == b.flags);
  CHECK(a.step == b.step);
  CHECK(a.sharded.gather() == b.sharded.gather());
}

const std::string exported = CAIRN_SAFETENSORS_EXPORT;

}  // namespace

TEST_CASE("export: a tree round-trips bit-exactly, and the files are what the independent reader checks") {
  const Net net = make_net();
  std::filesystem::remove_all(exported);
  std::filesystem::create_directories(exported + "/plain");
  cairn::SafetensorsSaveOptions options;
  options.metadata = {{"format", "pt"}, {"written_by", "cairn"}};
  const cairn::SafetensorsSaveReport report = cairn::save_safetensors(exported + "/plain/model.safetensors", net, options);
  CHECK(report.files == std::vector<std::string>{"model.safetensors"});
  write_expected(exported + "/plain", expected_bytes(net, false));
  Net back;
  back.sharded = cairn::ShardedArray<float>(grid());
  cairn::load_safetensors(exported + "/plain/model.safetensors", back);
  check_same_net(net, back);
  CHECK(cairn::safetensors_metadata(exported + "/plain/model.safetensors").user_metadata.at("written_by").as_string() ==
        "cairn");
  // Not replaced without overwrite; replaced with it.
  CHECK_CAIRN_ERROR(cairn::save_safetensors(exported + "/plain/model.safetensors", net), cairn::ErrorKind::already_exists,
                    "model.safetensors");
  options.overwrite = true;
  cairn::save_safetensors(exported + "/plain/model.safetensors", net, options);
  CHECK(test::leftovers(exported + "/plain").empty());
}

TEST_CASE("export: a bfloat16 cast of the dense weights, and a sharded set published whole") {
  const Net net = make_net();
  std::filesystem::create_directories(exported + "/bf16");
  cairn::SafetensorsSaveOptions options;
  options.cast = {{"dense/*", cairn::DType::bfloat16}};
  options.max_file_bytes = 64;  // several files
  const std::string set = exported + "/bf16/model";
  const cairn::SafetensorsSaveReport report = cairn::save_safetensors(set, net, options);
  CHECK(report.cast == std::vector<std::string>{"dense/kernel", "dense/bias"});
  CHECK(report.files.size() > 3);
  CHECK(report.files.back() == "model.safetensors.index.json");
  write_expected(set, expected_bytes(net, true));
  // It loads back through its index: float32 targets take the bfloat16 values.
  Net back;
  back.sharded = cairn::ShardedArray<float>(grid());
  cairn::load_safetensors(set + "/model.safetensors.index.json", back);
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 5; ++j) CHECK(back.dense.kernel(i, j) == static_cast<float>(cairn::bfloat16(net.dense.kernel(i, j))));
  CHECK(back.sharded.gather() == net.sharded.gather());
  // A set is never written over.
  CHECK_CAIRN_ERROR(cairn::save_safetensors(set, net, options), cairn::ErrorKind::already_exists, "model");
}

TEST_CASE("export: a subtree, a selection, names, and what safetensors cannot hold") {
  const Net net = make_net();
  cairn::MemoryStore store;
  cairn::SafetensorsSaveOptions only;
  only.subtree = "layers";
  only.select = {"1/*", "2/*"};
  only.separator = "/";
  cairn::save_safetensors({store, "x.safetensors"}, net, only);
  const cairn::CheckpointMetadata m = cairn::safetensors_metadata({store, "x.safetensors"});
  REQUIRE(m.leaves().size() == 2);
  CHECK(m.leaves()[0].key() == "1%2Fw");  // read with the default separator, "1/w" is one name
  cairn::SafetensorsOptions slash;
  slash.separator = "/";
  std::map<std::string, Layer> by_index;
  cairn::load_safetensors({store, "x.safetensors"}, by_index, {}, slash);
  REQUIRE(by_index.size() == 2);
  CHECK(std::memcmp(by_index.at("2").w.data(), net.layers[2].w.data(), 24) == 0);
  std::map<std::string, std::string> strings = {{"a", "text"}};
  CHECK_CAIRN_ERROR(cairn::save_safetensors({store, "s.safetensors"}, strings), cairn::ErrorKind::invalid_argument, "string");
  CHECK(!store.exists("s.safetensors"));
  // Every string leaf is named in one error, so that one selection leaves them all out.
  const std::map<std::string, std::map<std::string, std::string>> tree_of_strings = {
      {"notes", {{"a", "x"}, {"b", "y"}}}, {"more", {{"title", "t"}}}};
  CHECK_CAIRN_ERROR(cairn::save_safetensors({store, "m.safetensors"}, tree_of_strings), cairn::ErrorKind::invalid_argument,
                    "this tree has 3: more/title, notes/a, notes/b; leave them out with SafetensorsSaveOptions::select "
                    "(cairn convert: --exclude GLOB)");
  CHECK(!store.exists("m.safetensors"));
  cairn::SafetensorsSaveOptions missing;
  missing.subtree = "nothing";
  CHECK_CAIRN_ERROR(cairn::save_safetensors({store, "n.safetensors"}, net, missing), cairn::ErrorKind::not_found, "nothing");
  std::map<std::string, std::map<std::string, std::vector<float>>> same = {{"a", {{"b.c", {1}}}}, {"a.b", {{"c", {2}}}}};
  CHECK_CAIRN_ERROR(cairn::save_safetensors({store, "d.safetensors"}, same), cairn::ErrorKind::invalid_argument,
                    "both become the name 'a.b.c'");
  // The empty name is the root's: a tree that is one array is named so and reads back, a leaf
  // under a top-level map's empty key is refused (it would read back as the root).
  const std::vector<float> alone = {1, 2, 3};
  cairn::save_safetensors({store, "alone.safetensors"}, alone);
  std::vector<float> alone_back;
  cairn::load_safetensors({store, "alone.safetensors"}, alone_back);
  CHECK(alone_back == alone);
  CHECK(cairn::load_safetensors<std::vector<float>>({store, "alone.safetensors"}) == alone);  // a new T, from a store
  std::map<std::string, std::vector<float>> empty_key = {{"", {1}}, {"b", {2}}};
  CHECK_CAIRN_ERROR(cairn::save_safetensors({store, "e.safetensors"}, empty_key), cairn::ErrorKind::invalid_argument,
                    "the empty string as a key");
  CHECK(!store.exists("e.safetensors"));
  std::map<std::string, decltype(empty_key)> nested = {{"x", empty_key}};  // "x." and "x.b": fine below the top
  cairn::save_safetensors({store, "nested.safetensors"}, nested);
  decltype(nested) nested_back;
  cairn::load_safetensors({store, "nested.safetensors"}, nested_back);
  CHECK(nested_back == nested);
}

TEST_CASE("export: a failed write leaves nothing at the path and the earlier file whole") {
  const Net net = make_net();
  for (auto op : {cairn::MemoryStore::Op::write, cairn::MemoryStore::Op::finish, cairn::MemoryStore::Op::publish}) {
    cairn::MemoryStore store;
    cairn::save_safetensors({store, "m.safetensors"}, net);
    const std::string before = cairn::detail::read_blob(store, "m.safetensors", 1 << 20);
    cairn::SafetensorsSaveOptions over;
    over.overwrite = true;
    store.fail(op, 1);
    CHECK_THROWS_AS(cairn::save_safetensors({store, "m.safetensors"}, make_net(), over), cairn::Error);
    CHECK(cairn::detail::read_blob(store, "m.safetensors", 1 << 20) == before);
    store.fail(op, 1);
    CHECK_THROWS_AS(cairn::save_safetensors({store, "fresh.safetensors"}, net), cairn::Error);
    CHECK(!store.exists("fresh.safetensors"));
  }
}

TEST_CASE("a tree that is one leaf exports as the name \"\" and loads back into the same type") {
  test::TempDir dir;
  const std::vector<float> alone = {1.5f, -2.0f, 3.25f};
  cairn::save_safetensors(dir / "one.safetensors", alone);
  CHECK(cairn::load_safetensors<std::vector<float>>(dir / "one.safetensors") == alone);
  CHECK(cairn::safetensors_metadata(dir / "one.safetensors").leaves().at(0).path.empty());
}

// A header this long starts the read-ahead while it is parsed (checkpoint/read_ahead.hpp), in
// one file or across a set. What the load returns comes from its own reads.
TEST_CASE("safetensors with many tensors, read ahead while the header is parsed: bit-exact from the disk, one file or a set") {
  test::TempDir dir;
  std::map<std::string, std::vector<float>> s;
  for (int i = 0; i < 1500; ++i) s["layer" + std::to_string(i) + "_weight"] = test::random_bits<float>(1 + test::rng()() % 1024);
  const std::string one = dir / "one.safetensors", set = dir / "set";
  cairn::save_safetensors(one, s);
  cairn::SafetensorsSaveOptions split;
  split.max_file_bytes = 1 << 20;
  const cairn::SafetensorsSaveReport report = cairn::save_safetensors(set, s, split);
  REQUIRE(report.files.size() > 3);
  std::uint64_t header = 0;
  {
    const std::string bytes = test::read_file(one);
    for (int i = 7; i >= 0; --i) header = (header << 8) | static_cast<unsigned char>(bytes[i]);
  }
  REQUIRE(header >= cairn::detail::read_ahead_min_metadata_bytes);
  for (const std::string& path : {one, set + "/model.safetensors.index.json"}) {
    CAPTURE(path);
    for (int round = 0; round < 2; ++round) {
      if (path == one) test::drop_from_page_cache(one);
      else for (const auto& f : report.files) test::drop_from_page_cache(set + "/" + f);
      auto back = s;
      for (auto& [k, v] : back) std::fill(v.begin(), v.end(), 0.0f);
      cairn::SafetensorsOptions whole;
      whole.separator = "";
      if (round == 0) {
        cairn::load_safetensors(path, back, {}, whole);
        for (const auto& [k, v] : s) CHECK(std::memcmp(back.at(k).data(), v.data(), v.size() * sizeof(float)) == 0);
      } else {  // some tensors only: the read-ahead stops before the reads
        cairn::LoadOptions o;
        o.skip = {"layer1*"};
        const cairn::LoadReport r = cairn::load_safetensors(path, back, o, whole);
        CHECK(r.loaded.size() == 1500 - 611);
        for (const auto& [k, v] : s)
          if (k.rfind("layer1", 0) != 0) CHECK(std::memcmp(back.at(k).data(), v.data(), v.size() * sizeof(float)) == 0);
          else CHECK(std::all_of(back.at(k).begin(), back.at(k).end(), [](float x) { return x == 0.0f; }));
      }
    }
    CHECK(cairn::safetensors_metadata(path).leaves().size() == 1500);
  }
}

static bool same_bits_map(const std::map<std::string, std::vector<float>>& a,
                          const std::map<std::string, std::vector<float>>& b) {
  if (a.size() != b.size()) return false;
  for (const auto& [k, v] : a) {
    auto it = b.find(k);
    if (it == b.end() || it->second.size() != v.size() ||
        std::memcmp(it->second.data(), v.data(), v.size() * sizeof(float)) != 0)
      return false;
  }
  return true;
}

TEST_CASE("files reached through symbolic links load: the Hugging Face cache layout, one file and a set") {
  // hub/models--org--name/blobs/<sha256> hold the bytes; snapshots/<rev>/<name> link to them.
  test::TempDir dir;
  namespace fs = std::filesystem;
  const std::string repo = dir / "models--org--tiny";
  fs::create_directories(repo + "/blobs");
  fs::create_directories(repo + "/snapshots/abc123");
  std::map<std::string, std::vector<float>> weights = {{"a", test::random_bits<float>(100)},
                                                       {"b", test::random_bits<float>(300)}};
  // One file.
  cairn::save_safetensors(repo + "/blobs/1111", weights);
  fs::create_symlink("../../blobs/1111", repo + "/snapshots/abc123/model.safetensors");
  decltype(weights) back;
  cairn::load_safetensors(repo + "/snapshots/abc123/model.safetensors", back);
  CHECK(same_bits_map(back, weights));
  CHECK(cairn::safetensors_metadata(repo + "/snapshots/abc123/model.safetensors").leaves().size() == 2);
  // A set: the index and every shard are links into blobs/, named by their hashes.
  cairn::SafetensorsSaveOptions split;
  split.max_file_bytes = 500;
  const auto r = cairn::save_safetensors(dir / "set", weights, split);
  REQUIRE(r.files.size() == 3);
  int n = 0;
  for (const auto& f : r.files) {
    const std::string blob = "set" + std::to_string(n++);
    fs::rename(dir / ("set/" + f), repo + "/blobs/" + blob);
    fs::create_symlink("../../blobs/" + blob, repo + "/snapshots/abc123/" + f);
  }
  back.clear();
  cairn::load_safetensors(repo + "/snapshots/abc123/model.safetensors.index.json", back);
  CHECK(same_bits_map(back, weights));
  // A link to nothing is not_found, naming the link.
  fs::create_symlink("../../blobs/missing", repo + "/snapshots/abc123/gone.safetensors");
  CHECK_CAIRN_ERROR(cairn::load_safetensors(repo + "/snapshots/abc123/gone.safetensors", back), cairn::ErrorKind::not_found,
                    "gone.safetensors");
  // A rooted store refuses a link that leads out of its root.
  cairn::PosixStore rooted(repo + "/snapshots");
  CHECK_CAIRN_ERROR(cairn::load_safetensors({rooted, "abc123/model.safetensors"}, back), cairn::ErrorKind::invalid_argument,
                    "out of the store's root");
  cairn::PosixStore whole(repo);
  cairn::load_safetensors({whole, "snapshots/abc123/model.safetensors"}, back);
  CHECK(same_bits_map(back, weights));
}

TEST_CASE("export: every tensor starts at a multiple of its element size (larger elements first)") {
  // Tree order puts a 3-byte tensor first: before, the float64 after it started at byte 3.
  const auto tree = std::make_tuple(std::vector<std::uint8_t>{1, 2, 3}, std::vector<double>{1, 2, 3, 4, 5},
                                    std::vector<std::int16_t>{7, 8, 9}, std::vector<float>{0.5f},
                                    std::vector<std::int64_t>{-1, 2}, std::vector<cairn::bfloat16>{cairn::bfloat16(1.0f)});
  test::TempDir dir;
  for (std::uint64_t max_file : {std::uint64_t{0}, std::uint64_t{30}}) {
    CAPTURE(max_file);
    const std::string path = dir / (max_file ? "set" : "one.safetensors");
    const std::string source = max_file ? path + "/model.safetensors.index.json" : path;
    cairn::SafetensorsSaveOptions o;
    o.max_file_bytes = max_file;
    cairn::save_safetensors(path, tree, o);
    const auto meta = cairn::safetensors_metadata(source);
    REQUIRE(meta.leaves().size() == 6);
    for (const auto& l : meta.leaves()) {
      CAPTURE(l.key());
      CHECK(l.chunks.at(0).offset % cairn::dtype_size(l.dtype) == 0);
    }
    std::remove_const_t<decltype(tree)> back;
    cairn::load_safetensors(source, back);
    CHECK(back == tree);
  }
}

TEST_CASE("exports larger than a write piece: column-major, sharded and cast tensors are written a piece at a time, exactly") {
  // Each tensor is over write_piece_bytes (8 MiB), so the export makes it in several pieces of
  // rows; every element must land where a whole-tensor conversion would put it.
  test::TempDir dir;
  const Eigen::Index rows = 1500, cols = 1700;  // 10.2 MB as float32, column-major in memory
  Eigen::MatrixXf f(rows, cols);
  const auto bits = test::random_bits<float>(static_cast<std::size_t>(rows * cols));
  for (Eigen::Index j = 0; j < cols; ++j)
    for (Eigen::Index i = 0; i < rows; ++i) {
      const float v = bits[static_cast<std::size_t>(j * rows + i)];
      f(i, j) = std::isfinite(v) && std::fabs(v) < 6e4f ? v : 1.5f;  // within float16's range
    }
  std::vector<float> g(static_cast<std::size_t>(3001) * 1024);  // 12.3 MB, split unevenly over 4 devices
  for (std::size_t i = 0; i < g.size(); ++i) g[i] = static_cast<float>(i % 100003) * 0.25f;
  struct Big {
    Eigen::MatrixXf f;
    cairn::ShardedArray<float> g;
  };
  Big big{f, cairn::ShardedArray<float>::from_host(
                 g, {3001, 1024}, cairn::NamedSharding(cairn::Mesh::host({{"x", 4}}), cairn::PartitionSpec{"x"}))};
  std::map<std::string, Eigen::MatrixXf> plain{{"f", f}};
  cairn::save_safetensors(dir / "plain.safetensors", plain);
  cairn::save_safetensors(dir / "half.safetensors", plain, {.cast = {{"*", cairn::DType::float16}}});
  std::map<std::string, cairn::ShardedArray<float>> sharded{{"g", big.g}};
  cairn::save_safetensors(dir / "sharded.safetensors", sharded, {.cast = {{"*", cairn::DType::bfloat16}}});

  // Read back as stored (C order, row-major) and compared element by element.
  const auto back = cairn::read_arrays(dir / "plain.safetensors", {"f"});
  const auto fv = back.at("f").values<float>();
  REQUIRE(fv.size() == static_cast<std::size_t>(rows * cols));
  bool same = true;
  for (Eigen::Index i = 0; i < rows && same; ++i)
    for (Eigen::Index j = 0; j < cols && same; ++j) same = std::memcmp(&fv[static_cast<std::size_t>(i * cols + j)], &f(i, j), 4) == 0;
  CHECK(same);
  const auto half = cairn::read_arrays(dir / "half.safetensors", {"f"});
  const auto hv = half.at("f").values<cairn::float16>();
  same = true;
  for (Eigen::Index i = 0; i < rows && same; ++i)
    for (Eigen::Index j = 0; j < cols && same; ++j)
      same = hv[static_cast<std::size_t>(i * cols + j)].bits == cairn::cast_value<cairn::float16>(f(i, j)).bits;
  CHECK(same);
  const auto sh = cairn::read_arrays(dir / "sharded.safetensors", {"g"});
  const auto bv = sh.at("g").values<cairn::bfloat16>();
  REQUIRE(bv.size() == g.size());
  same = true;
  for (std::size_t i = 0; i < g.size() && same; ++i) same = bv[i].bits == cairn::cast_value<cairn::bfloat16>(g[i]).bits;
  CHECK(same);
}

TEST_CASE("device-sharded leaves export a slab at a time: the same file as from host shards, cast or not") {
  test::TempDir dir;
  // 12.3 MB: two slabs of the export's 8 MiB pieces, cut through the shards' rows.
  std::vector<float> g(static_cast<std::size_t>(3001) * 1024);
  for (std::size_t i = 0; i < g.size(); ++i) g[i] = static_cast<float>(i % 100003) * 0.25f;
  const cairn::Shape shape{3001, 1024};
  const cairn::PartitionSpec spec{"x", "y"};
  std::map<std::string, cairn::ShardedArray<float>> host{
      {"g", cairn::ShardedArray<float>::from_host(g, shape, cairn::NamedSharding(cairn::Mesh::host({{"x", 2}, {"y", 2}}), spec))}};
  std::map<std::string, cairn::ShardedArray<float>> device{
      {"g", cairn::ShardedArray<float>::from_host(g, shape, cairn::NamedSharding(cairn::Mesh::device({{"x", 2}, {"y", 2}}), spec))}};
  REQUIRE(device.at("g").shards().front().device().memory == cairn::MemoryKind::device);
  for (const bool cast : {false, true}) {
    CAPTURE(cast);
    cairn::SafetensorsSaveOptions o;
    o.overwrite = true;
    if (cast) o.cast = {{"*", cairn::DType::bfloat16}};
    cairn::save_safetensors(dir / "host.safetensors", host, o);
    cairn::save_safetensors(dir / "device.safetensors", device, o);
    const std::string a = test::read_file(dir / "host.safetensors"), b = test::read_file(dir / "device.safetensors");
    CHECK(a.size() > g.size() * (cast ? 2 : 4));
    CHECK(a == b);
  }
  // A scalar in device memory too.
  std::map<std::string, cairn::ShardedArray<double>> scalar{
      {"s", cairn::ShardedArray<double>::from_host(std::vector<double>{2.5}, cairn::Shape{},
                                                   cairn::NamedSharding(cairn::Mesh::device({{"x", 1}}), cairn::PartitionSpec{}))}};
  cairn::save_safetensors(dir / "scalar.safetensors", scalar);
  const auto back = cairn::read_arrays(dir / "scalar.safetensors", {"s"});
  const auto values = back.at("s").values<double>();
  REQUIRE(values.size() == 1);
  CHECK(values[0] == 2.5);
}

TEST_CASE("export: overwrite replaces a sharded set whole; a failure at any I/O call leaves the old set or the new one") {
  test::TempDir dir;
  const std::string set = dir / "set";
  const std::map<std::string, std::vector<float>> old_weights = {{"a", test::random_bits<float>(100)},
                                                                 {"b", test::random_bits<float>(300)}};
  const std::map<std::string, std::vector<float>> new_weights = {{"a", test::random_bits<float>(120)},
                                                                 {"c", test::random_bits<float>(50)}};
  cairn::SafetensorsSaveOptions split;
  split.max_file_bytes = 500;
  cairn::save_safetensors(set, old_weights, split);
  const std::string index = set + "/model.safetensors.index.json";
  auto loaded = [&] { return cairn::load_safetensors<std::map<std::string, std::vector<float>>>(index); };
  // Without overwrite: refused, naming what is there.
  CHECK_CAIRN_ERROR(cairn::save_safetensors(set, new_weights, split), cairn::ErrorKind::already_exists,
                    "a sharded safetensors set already exists here (pass overwrite to replace it)");
  cairn::SafetensorsSaveOptions replace = split;
  replace.overwrite = true;
  // Both ways of publishing: an atomic exchange, and two renames where the filesystem has none.
  for (const bool exchange : {true, false}) {
    CAPTURE(exchange);
    cairn::save_safetensors(set, old_weights, replace);
    int n = 1, failed = 0;
    std::string survived;  // the calls whose failure the export survives
    for (;; ++n) {
      int calls = 0;
      bool injected = false, threw = false;
      std::string failing;
      {
        test::FaultInjection faults([&](const std::string& call, const std::string& p) {
          if (call == "renameat2" && !exchange) return EINVAL;
          if (++calls != n) return 0;
          injected = true;
          failing = call + " " + p.substr(p.rfind('/') + 1);
          return call == "pwrite" ? ENOSPC : EIO;
        });
        try {
          cairn::save_safetensors(set, new_weights, replace);
        } catch (const cairn::Error& e) {
          threw = e.kind() != cairn::ErrorKind::after_commit;
        }
      }
      if (!injected) break;
      CAPTURE(n);
      failed += threw;
      if (!threw) {
        survived += failing + "; ";
        // Only a lock attempt (no locks: go on), the directory's sync after the publish
        // (after_commit: the new set is there) and removing the replaced set (best effort).
        const bool benign = failing.starts_with("fcntl ") || failing.starts_with("remove ") ||
                            ((failing.starts_with("fsync ") || failing.starts_with("close ")) &&
                             failing.find("safetensors") == std::string::npos);
        CHECK_MESSAGE(benign, failing);
      }
      // The whole old set, or the whole new one: never a mix, never nothing.
      CHECK(same_bits_map(loaded(), threw ? old_weights : new_weights));
      cairn::detail::clean_leftovers(dir.path);
      CHECK(test::leftovers(dir.path).empty());
      cairn::save_safetensors(set, old_weights, replace);
    }
    const std::string summary = std::to_string(n - 1) + " calls, " + std::to_string(failed) + " failed exports; survived: " + survived;
    MESSAGE(summary);
    CHECK(n > 15);  // every call of the protocol was reached
    CHECK(failed >= n - 7);
  }
  cairn::save_safetensors(set, new_weights, replace);
  CHECK(same_bits_map(loaded(), new_weights));
  // A file of the old set that the new one lacks is gone: the directory is the new set only.
  std::size_t files = 0;
  for (const auto& e : std::filesystem::directory_iterator(set)) files += e.is_regular_file();
  CHECK(files == 1 + cairn::safetensors_metadata(index).data_files.size());

  // A checkpoint saved with overwrite replaces the set, as it replaces a checkpoint.
  cairn::SaveOptions save_over;
  save_over.overwrite = true;
  cairn::save(set, old_weights, save_over);
  CHECK(same_bits_map(cairn::load<std::map<std::string, std::vector<float>>>(set), old_weights));
  CHECK_FALSE(std::filesystem::exists(index));

  // A directory holding anything else is never replaced, even with overwrite.
  std::filesystem::create_directories(dir / "other");
  test::write_file(dir / "other/notes.txt", "mine");
  CHECK_CAIRN_ERROR(cairn::save_safetensors(dir / "other", new_weights, replace), cairn::ErrorKind::already_exists,
                    "holds no cairn checkpoint");
  CHECK(test::read_file(dir / "other/notes.txt") == "mine");
}

TEST_CASE("export: a set's overwrite killed between its two renames loses nothing, and reads meanwhile") {
  test::TempDir dir;
  const std::string set = dir / "set";
  const std::map<std::string, std::vector<float>> old_weights = {{"a", test::random_bits<float>(100)},
                                                                 {"b", test::random_bits<float>(300)}};
  cairn::SafetensorsSaveOptions split;
  split.max_file_bytes = 500;
  cairn::save_safetensors(set, old_weights, split);
  pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    test::FaultInjection faults([&](const std::string& call, const std::string& p) {
      if (call == "renameat2") return EINVAL;  // as on NFS, CIFS and most FUSE filesystems
      if (call == "rename" && p.find(".cairn-tmp-") != std::string::npos && p.find(".old") == std::string::npos) ::_exit(7);
      return 0;
    });
    cairn::SafetensorsSaveOptions replace = split;
    replace.overwrite = true;
    cairn::save_safetensors(set, std::map<std::string, std::vector<float>>{{"z", std::vector<float>(400, 1.0f)}}, replace);
    ::_exit(0);
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 7);
  CHECK_FALSE(std::filesystem::exists(set));  // the moment the fallback leaves the path empty
  // The set's directory reads as the set it had (set aside under .old) meanwhile.
  CHECK(cairn::verify(set).ok());
  CHECK(cairn::inspect(set).metadata.leaves().size() == 2);
  // The next export to the path puts it back first, so the overwrite rule holds.
  CHECK_CAIRN_ERROR(cairn::save_safetensors(set, old_weights, split), cairn::ErrorKind::already_exists, "already exists");
  CHECK(same_bits_map(cairn::load_safetensors<std::map<std::string, std::vector<float>>>(set + "/model.safetensors.index.json"),
                      old_weights));
  CHECK(test::leftovers(dir.path).empty());
}

// The specification adds dtypes (F8_E8M0 in 2025, F4, F6_E2M3, C64, ...). A file holding one
// that cairn does not have is not corrupt: its other tensors read, and the one cairn cannot read
// is listed, refused wherever a load or a conversion would take it, and left out where asked.
TEST_CASE("a tensor of a dtype cairn does not have is listed, refused by name, and left out where asked") {
  test::TempDir dir;
  const std::string f = dir / "mx.safetensors";
  test::write_file(f, make_file(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                                R"("w_scales":{"dtype":"F8_E8M0","shape":[4],"data_offsets":[8,12]},)"
                                R"("extra.z":{"dtype":"C64","shape":[1],"data_offsets":[12,20]}})", 20));
  // Listed with the reason; the readable tensor is a leaf as before.
  const cairn::CheckpointMetadata m = cairn::safetensors_metadata(f);
  REQUIRE(m.items.size() == 1);
  REQUIRE(m.items[0].leaves.size() == 1);
  CHECK(m.items[0].leaves[0].key() == "w");
  REQUIRE(m.items[0].unread.size() == 2);
  CHECK(m.items[0].unread[0].path.str() == "w_scales");
  CHECK(m.items[0].unread[0].reason == "dtype F8_E8M0[4], which cairn does not read");
  CHECK(m.items[0].unread[1].path.str() == "extra/z");
  CHECK(cairn::inspect(f).metadata.items[0].unread.size() == 2);
  const cairn::VerifyReport v = cairn::verify(f);
  CHECK(v.ok());
  CHECK(v.chunks == 1);
  CHECK(v.not_verified == std::vector<std::string>{"w_scales: dtype F8_E8M0[4], which cairn does not read",
                                                   "extra/z: dtype C64[1], which cairn does not read"});

  using Flat = std::map<std::string, std::vector<float>>;
  // A strict load refuses them, naming each and the way to leave them out.
  CHECK_CAIRN_ERROR(cairn::load_safetensors<Flat>(f), cairn::ErrorKind::dtype_mismatch,
                    "2 stored leaves cannot be read: w_scales (dtype F8_E8M0[4], which cairn does not read), extra/z (dtype C64[1]");
  CHECK_CAIRN_ERROR(cairn::load_safetensors<Flat>(f), cairn::ErrorKind::dtype_mismatch, "mx.safetensors");
  CHECK_CAIRN_ERROR(cairn::load_safetensors<Flat>(f), cairn::ErrorKind::dtype_mismatch, "LoadOptions::skip");
  // Skipped by glob, or outside the subtree: the rest loads strictly.
  cairn::LoadOptions skip;
  skip.skip = {"w_scales", "extra"};
  Flat flat;
  const cairn::LoadReport r = cairn::load_safetensors(f, flat, skip);
  REQUIRE(flat.count("w"));
  CHECK(flat.size() == 1);
  CHECK(r.unexpected.empty());
  const unsigned char bytes[8] = {0, 1, 2, 3, 4, 5, 6, 7};  // make_file's buffer: i % 251
  CHECK(std::memcmp(flat["w"].data(), bytes, 8) == 0);
  cairn::LoadOptions under;
  under.subtree = "extra";
  std::map<std::string, std::vector<float>> none;
  CHECK_CAIRN_ERROR(cairn::load_safetensors(f, none, under), cairn::ErrorKind::not_found, "no subtree 'extra'");
  // A partial load takes the rest and reports them unexpected.
  Flat partial;
  const cairn::LoadReport p = cairn::load_safetensors(f, partial, cairn::LoadOptions::partial());
  CHECK(partial.size() == 1);
  CHECK(p.unexpected == std::vector<std::string>{"w_scales", "extra/z"});
  // A target leaf for one is refused even by a partial load: its value is there, unreadable.
  std::map<std::string, std::vector<std::uint8_t>> asks = {{"w_scales", {}}};
  CHECK_CAIRN_ERROR(cairn::load_safetensors(f, asks, cairn::LoadOptions::partial()), cairn::ErrorKind::dtype_mismatch,
                    "the target has a leaf here, and the stored one cannot be read: dtype F8_E8M0[4]");
  // The tools' reader: every leaf refuses; named leaves read; an unreadable one named refuses.
  CHECK_CAIRN_ERROR(cairn::read_arrays(f, {}), cairn::ErrorKind::dtype_mismatch, "w_scales");
  CHECK(cairn::read_arrays(f, {"w"}).at("w").bytes.size() == 8);
  CHECK_CAIRN_ERROR(cairn::read_arrays(f, {"extra/z"}), cairn::ErrorKind::dtype_mismatch, "dtype C64[1]");
  // A conversion leaves nothing out silently: refused until excluded by name.
  const std::string out = dir / "out.safetensors";
  CHECK_CAIRN_ERROR(cairn::convert(f, out), cairn::ErrorKind::dtype_mismatch, "--exclude 'w_scales'");
  CHECK_FALSE(std::filesystem::exists(out));
  cairn::ConvertOptions exclude;
  exclude.exclude = {"w_scales", "extra/*"};
  cairn::convert(f, out, exclude);
  CHECK(cairn::read_arrays(out, {}).size() == 1);
}

// Tied weights as safetensors' save_model writes them (what its 0.8.0 wrote on the machine lent
// with a GPU: one name kept, the other recorded in __metadata__ as {"1.weight": "0.weight"}):
// with SafetensorsOptions::aliases the recorded name reads the kept tensor's bytes.
TEST_CASE("tied weights recorded in __metadata__ load into both names with SafetensorsOptions::aliases") {
  test::TempDir dir;
  const std::string f = dir / "tied.safetensors";
  test::write_file(f, make_file(R"({"__metadata__":{"1.weight":"0.weight","format":"pt","0.bias":"0.weight"},)"
                                R"("0.weight":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                                R"("0.bias":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})", 12));
  using Flat = std::map<std::string, std::map<std::string, std::vector<float>>>;
  Flat want = {{"0", {{"weight", {}}, {"bias", {}}}}, {"1", {{"weight", {}}}}};
  // Without: the recorded name is no tensor of the file, and gets no value.
  Flat plain = want;
  cairn::load_safetensors(f, plain);
  CHECK((plain.count("1") == 0 || plain["1"]["weight"].empty()));
  CHECK(plain["0"]["weight"].size() == 2);
  cairn::SafetensorsOptions tied;
  tied.aliases = true;
  Flat both = want;
  const cairn::LoadReport r = cairn::load_safetensors(f, both, {}, tied);
  CHECK(r.loaded.size() == 3);
  REQUIRE(both["1"]["weight"].size() == 2);
  CHECK(std::memcmp(both["1"]["weight"].data(), both["0"]["weight"].data(), 8) == 0);
  const unsigned char bytes[8] = {0, 1, 2, 3, 4, 5, 6, 7};
  CHECK(std::memcmp(both["0"]["weight"].data(), bytes, 8) == 0);
  // An entry whose key is a tensor ("0.bias") or whose value is none ("format") is no alias.
  REQUIRE(both["0"]["bias"].size() == 1);
  const unsigned char bias[4] = {8, 9, 10, 11};
  CHECK(std::memcmp(both["0"]["bias"].data(), bias, 4) == 0);
  const cairn::CheckpointMetadata m = cairn::safetensors_metadata(f, tied);
  CHECK(m.items[0].leaves.size() == 3);
  CHECK(m.user_metadata.at("format").as_string() == "pt");
  CHECK(cairn::safetensors_metadata(f).items[0].leaves.size() == 2);
  // An alias under a tensor's own name ("0.weight.x" beneath the leaf "0.weight") is refused.
  const std::string under = dir / "under.safetensors";
  test::write_file(under, make_file(R"({"__metadata__":{"w.x":"w"},"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}})", 1));
  CHECK_CAIRN_ERROR(cairn::safetensors_metadata(under, tied), cairn::ErrorKind::invalid_argument, "also the parent of");
}

// Files written by Hugging Face's own library (tools/safetensors_library_check.py write, run
// where safetensors and PyTorch are installed: every dtype cairn has, a 0-d and an empty
// tensor, save_model's tied weights, a sharded set, and one file per dtype that library writes
// and cairn does not have). They live outside the repository: CAIRN_SAFETENSORS_LIBRARY names
// their directory; the case says it skipped where it is unset.
TEST_CASE("files written by the safetensors library itself read bit-exactly; its other dtypes are refused by name") {
  const char* env = std::getenv("CAIRN_SAFETENSORS_LIBRARY");
  if (!env || !std::filesystem::is_regular_file(std::string(env) + "/versions.json")) {
    MESSAGE("skipped: CAIRN_SAFETENSORS_LIBRARY names no files written by tools/safetensors_library_check.py");
    return;
  }
  const std::string dir = env;
  const cairn::Json versions = cairn::Json::parse(test::read_file(dir + "/versions.json"));
  MESSAGE("written by safetensors " << versions.at("safetensors").as_string() << ", torch "
                                    << versions.at("torch").as_string());
  int checked = 0;
  for (const cairn::Json& w : versions.at("written").as_array()) {
    const std::string name = w.as_string();
    CAPTURE(name);
    const std::string sub = dir + "/" + name;
    if (name.rfind("unknown-", 0) == 0) {
      // A dtype cairn lacks: listed with its name, refused by a load of every leaf (naming the
      // file, the tensor and the dtype), and the tensor beside it reads.
      const std::string code = name.substr(8);
      const std::string file = sub + "/model.safetensors";
      const cairn::Inspection info = cairn::inspect(file);
      REQUIRE(info.metadata.items.at(0).unread.size() == 1);
      CHECK(info.metadata.items[0].unread[0].path.str() == "odd/one");
      CHECK(info.metadata.items[0].unread[0].reason.find("dtype " + code + "[") == 0);
      try {
        (void)cairn::read_arrays(file, {});
        FAIL_CHECK("read a file holding a " << code << " tensor");
      } catch (const cairn::Error& e) {
        const std::string what = e.what();
        CHECK(e.kind() == cairn::ErrorKind::dtype_mismatch);
        CHECK(what.find(file) != std::string::npos);
        CHECK(what.find("odd/one") != std::string::npos);
        CHECK(what.find(code) != std::string::npos);
      }
      CHECK(cairn::read_arrays(file, {"ok"}).at("ok").bytes.size() == 8);
      ++checked;
      continue;
    }
    const cairn::Json index = cairn::Json::parse(test::read_file(sub + "/expected.json"));
    const std::string bin = test::read_file(sub + "/expected.bin");
    const std::string path = std::filesystem::exists(sub + "/model.safetensors.index.json")
                                 ? sub + "/model.safetensors.index.json"
                                 : sub + "/" + name + ".safetensors";
    const std::map<std::string, cairn::ArrayValue> values = cairn::read_arrays(path, {});
    CHECK(values.size() == index.items().size());
    for (const auto& [tensor, e] : index.items()) {
      std::string key = tensor;
      std::replace(key.begin(), key.end(), '.', '/');
      CAPTURE(key);
      const auto it = values.find(key);
      if (it == values.end()) {
        FAIL_CHECK("no leaf " << key);
        continue;
      }
      CHECK(std::string(cairn::safetensors_dtype_name(it->second.dtype)) == e.at("dtype").as_string());
      cairn::Shape shape;
      for (const auto& d : e.at("shape").as_array()) shape.push_back(d.as_int());
      CHECK(it->second.shape == shape);
      const std::string want = bin.substr(static_cast<std::size_t>(e.at("offset").as_int()), static_cast<std::size_t>(e.at("nbytes").as_int()));
      CHECK((it->second.bytes.size() == want.size() && std::memcmp(it->second.bytes.data(), want.data(), want.size()) == 0));
      ++checked;
    }
    if (name == "tied") {  // save_model's record of the tied name, read with aliases
      cairn::SafetensorsOptions tied;
      tied.aliases = true;
      std::map<std::string, std::map<std::string, cairn::Array<float>>> net;
      cairn::load_safetensors(path, net, {}, tied);
      REQUIRE(net["1"]["weight"].size() == 256);
      CHECK(net["1"]["weight"].shape() == cairn::Shape{16, 16});
      CHECK(std::memcmp(net["1"]["weight"].data(), net["0"]["weight"].data(), 256 * 4) == 0);
      REQUIRE(net["1"]["bias"].size() == 16);
      CHECK(std::memcmp(net["1"]["bias"].data(), net["0"]["bias"].data(), 16 * 4) != 0);
    }
    if (name == "all") {  // __metadata__ as the user metadata
      const cairn::Inspection info = cairn::inspect(path);
      CHECK(info.metadata.user_metadata.at("run").as_string() == "7");
    }
  }
  MESSAGE(checked << " tensors and refusals checked");
  CHECK(checked > 0);
}
