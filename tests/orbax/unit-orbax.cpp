// SPDX-License-Identifier: Apache-2.0
// The Orbax import (cairn/orbax.hpp): real files that Orbax and TensorStore wrote
// (../shared/testdata/orbax, skipped with a message where absent), arrays that zarr-python
// wrote (tests/orbax/zarr_ref.py, run by CTest before this program), zarr v3 shards written
// here byte by byte, every LoadOptions, and damaged checkpoints: every byte flipped and every
// length cut must load the original bits or throw cairn::Error, never anything else.
#include <cairn/orbax.hpp>
#include <cairn/orbax/ocdbt_writer.hpp>

#include "../test_util.hpp"
#include "cairn_cli.hpp"
#include "device_round_trip.hpp"

#include <doctest/doctest.h>
#include <zstd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <thread>
#include <tuple>

namespace fs = std::filesystem;

namespace {

struct B {
  std::vector<std::int32_t> c;
};
CAIRN_TREE(B, c)
struct State {
  std::vector<std::int32_t> a;
  B b;
};
CAIRN_TREE(State, a, b)
struct Other {
  std::vector<std::int32_t> a;
  std::vector<float> z;
};
CAIRN_TREE(Other, a, z)
struct Wide {
  std::vector<std::int64_t> a;
  B b;
};
CAIRN_TREE(Wide, a, b)
struct Narrow {
  std::vector<std::int8_t> a;
  B b;
};
CAIRN_TREE(Narrow, a, b)
struct Sharded {
  cairn::ShardedArray<std::int32_t> a;
  B b;
};
CAIRN_TREE(Sharded, a, b)
struct StepOnly {
  std::int64_t step = 0;
};
CAIRN_TREE(StepOnly, step)
// Leaves at several depths: sequence indices, integer map keys, a string.
struct Ragged {
  std::vector<std::vector<float>> layers;
  std::string note;
  std::map<int, double> by_int;
};
CAIRN_TREE(Ragged, layers, note, by_int)
bool operator==(const Ragged& x, const Ragged& y) { return x.layers == y.layers && x.note == y.note && x.by_int == y.by_int; }

const std::vector<std::int32_t> expected_a = {0, 1, 2, 3, 4, 5, 6, 7};
const std::vector<std::int32_t> expected_c = {1, 2, 3};

std::string testdata() { return CAIRN_ORBAX_TESTDATA; }
bool have_testdata() {
  if (fs::is_directory(testdata())) return true;
  MESSAGE("skipped: " << testdata() << " is absent (the shared test data of real Orbax checkpoints)");
  return false;
}

std::vector<std::string> subdirs(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_directory()) out.push_back(e.path().string());
  std::sort(out.begin(), out.end());
  return out;
}

// A leaf of an Orbax checkpoint as stored (no cast), by key path.
cairn::ArrayValue leaf(const std::string& ckpt, const std::string& key) {
  cairn::ArrayValue v;
  cairn::LoadOptions o;
  o.subtree = key;
  cairn::load_orbax(ckpt, v, o);
  return v;
}

std::string bytes_of(const cairn::ArrayValue& v) { return std::string(v.bytes.begin(), v.bytes.end()); }

}  // namespace

TEST_CASE("OCDBT databases TensorStore wrote read key by key as the files they hold") {
  if (!have_testdata()) return;
  const std::string files = testdata() + "/ocdbt/files";
  std::map<std::string, std::string> expected;
  for (const auto& e : fs::recursive_directory_iterator(files))
    if (e.is_regular_file()) expected[fs::relative(e.path(), files).generic_string()] = test::read_file(e.path().string());
  REQUIRE(expected.size() == 8);
  for (const char* db : {"files_high_arity.ocdbt", "files_min_arity.ocdbt"}) {
    CAPTURE(db);
    cairn::PosixStore store;
    cairn::detail::orbax::OcdbtDatabase d(store, testdata() + "/ocdbt/" + db);
    std::map<std::string, std::string> got;
    std::size_t indirect = 0;
    for (const auto& [k, v] : d.entries()) {
      got[std::string(k)] = d.read(v, std::string(k));
      indirect += !v.is_inline;
    }
    CHECK(got == expected);
    // min_arity's tree is three levels high and keeps its values in a data file.
    if (std::string(db) == "files_min_arity.ocdbt") CHECK(indirect == 3);
  }
}

TEST_CASE("the 44 checkpoints of Orbax's compatibility test behave as Orbax's own test expects") {
  if (!have_testdata()) return;
  int loaded = 0, refused = 0, total = 0;
  for (const std::string& version : subdirs(testdata() + "/compat"))
    for (const std::string& kind : subdirs(version))
      for (const std::string& group : subdirs(kind))
        for (const std::string& ckpt : subdirs(group)) {
          CAPTURE(ckpt);
          ++total;
          const std::string g = fs::path(group).filename().string();
          const std::string name = fs::path(ckpt).filename().string();
          if (g == "critical_metadata_alterations") {
            // A missing root manifest or data directory: refused, naming what is missing.
            try {
              cairn::load_orbax<State>(ckpt);
              FAIL("loaded a checkpoint without its " << name);
            } catch (const cairn::Error& e) {
              CHECK(e.kind() == cairn::ErrorKind::not_found);
              const std::string missing = name == "missing_pytree_data_dir_d" ? "/d/" : "manifest.ocdbt";
              CHECK(std::string(e.what()).find(missing) != std::string::npos);
              ++refused;
            }
            continue;
          }
          const cairn::OrbaxCheckpoint info = cairn::orbax_metadata(ckpt);
          if (name == "deleted_checkpointable") {
            // The pytree is gone: its load names it; the JSON checkpointable still reads.
            CHECK(info.missing == std::vector<std::string>{"state"});
            CHECK_THROWS_WITH_AS(cairn::load_orbax<State>(ckpt), doctest::Contains("'state'"), cairn::Error);
            CHECK(info.json.at("metadata") == cairn::Json::object({{"metadata", "json_data"}}));
            ++refused;
            continue;
          }
          if (name == "dummy_checkpointable_added") CHECK(info.unknown == std::vector<std::string>{"dummy"});
          else CHECK(info.unknown.empty());
          const State s = cairn::load_orbax<State>(ckpt);
          CHECK(s.a == expected_a);
          CHECK(s.b.c == expected_c);
          ++loaded;
          const cairn::ItemRecord* item = info.metadata.find_item("state");
          REQUIRE(item);
          REQUIRE(item->leaves.size() == 2);
          CHECK(item->leaves[0].dtype == cairn::DType::int32);
          // The JSON checkpointable, where the checkpoint has one.
          if (fs::exists(ckpt + "/metadata")) {
            CHECK(info.json.at("metadata") == cairn::Json::object({{"metadata", "json_data"}}));
            const cairn::ItemRecord* j = info.metadata.find_item("metadata");
            REQUIRE(j);
            CHECK(j->kind == cairn::ItemKind::json);
          }
          // _CHECKPOINT_METADATA's custom metadata as user metadata, where it is there.
          const bool has_custom = fs::exists(ckpt + "/_CHECKPOINT_METADATA") && name != "missing_custom_metadata_metadata";
          CHECK(bool(info.metadata.user_metadata.find("custom")) == has_custom);
          if (has_custom) CHECK(info.metadata.user_metadata.at("custom") == cairn::Json::object({{"custom", "meta"}}));
        }
  CHECK(total == 44);
  CHECK(loaded == 37);
  CHECK(refused == 7);
}

TEST_CASE("every LoadOptions works on an Orbax checkpoint") {
  if (!have_testdata()) return;
  const std::string ckpt =
      testdata() + "/compat/v1_checkpoints/composite_checkpoint/checkpoint_metadata_present/pytree_checkpointable_has_metadata";
  SUBCASE("strict: every mismatching key listed") {
    try {
      Other o;
      cairn::load_orbax(ckpt, o);
      FAIL("loaded into the wrong structure");
    } catch (const cairn::Error& e) {
      CHECK(e.kind() == cairn::ErrorKind::structure_mismatch);
      CHECK(std::string(e.what()).find("z") != std::string::npos);
      CHECK(std::string(e.what()).find("b/c") != std::string::npos);
    }
  }
  SUBCASE("partial restore, skip, subtree") {
    std::map<std::string, std::vector<std::int32_t>> only_a;
    only_a["a"] = {};
    auto r = cairn::load_orbax(ckpt, only_a, cairn::LoadOptions::partial());
    CHECK(only_a["a"] == expected_a);
    CHECK(r.unexpected == std::vector<std::string>{"b/c"});
    State s;
    s.b.c = {9};
    cairn::LoadOptions skip;
    skip.skip = {"b/*"};
    skip.allow_unexpected = true;
    cairn::load_orbax(ckpt, s, skip);
    CHECK(s.a == expected_a);
    CHECK(s.b.c == std::vector<std::int32_t>{9});
    cairn::LoadOptions sub;
    sub.subtree = "b";
    CHECK(cairn::load_orbax<B>(ckpt, sub).c == expected_c);
  }
  SUBCASE("casts, exact and lossy") {
    CHECK(cairn::load_orbax<Wide>(ckpt).a == std::vector<std::int64_t>(expected_a.begin(), expected_a.end()));
    CHECK_THROWS_AS(cairn::load_orbax<Narrow>(ckpt), cairn::Error);  // lossy without allow_lossy_cast
    cairn::LoadOptions lossy;
    lossy.allow_lossy_cast = {"a"};
    CHECK(cairn::load_orbax<Narrow>(ckpt, lossy).a == std::vector<std::int8_t>(expected_a.begin(), expected_a.end()));
  }
  SUBCASE("a sharded target reads its boxes") {
    using cairn::ShardedArray;
    const cairn::NamedSharding sh(cairn::Mesh::host({{"x", 2}}), cairn::PartitionSpec{"x"});
    Sharded s{ShardedArray<std::int32_t>(sh), {}};
    cairn::load_orbax(ckpt, s);
    CHECK(s.a.gather() == expected_a);
    for (const auto& shard : s.a.shards()) CHECK(shard.box() == sh.shard_box({8}, shard.mesh_position()));
  }
  SUBCASE("another item: the JSON checkpointable") {
    cairn::LoadOptions o;
    o.item = "nothing-here";
    CHECK_THROWS_WITH_AS(cairn::load_orbax<State>(ckpt, o), doctest::Contains("nothing-here"), cairn::Error);
  }
}

TEST_CASE("arrays zarr-python wrote in Orbax's older layout load bit-exactly") {
  const std::string ref = CAIRN_ZARR_REF;
  const cairn::Json index = cairn::Json::parse(test::read_file(ref + "/expected/index.json"));
  const std::string ckpt = ref + "/legacy";
  const cairn::OrbaxCheckpoint info = cairn::orbax_metadata(ckpt);
  CHECK(info.layout == "orbax (zarr v2 directories)");
  CHECK(info.metadata.summary().rfind("Orbax checkpoint", 0) == 0);  // what it is, not "cairn checkpoint (format 0"
  REQUIRE(info.metadata.find_item("state"));
  CHECK(info.metadata.find_item("state")->leaves.size() == index.size());
  for (const auto& entry : index.items()) {
    const std::string& param = entry.first;  // not a structured binding: clang 14 cannot capture one
    const cairn::Json& want = entry.second;
    CAPTURE(param);
    std::string key = param;
    std::replace(key.begin(), key.end(), '.', '/');
    const cairn::ArrayValue v = leaf(ckpt, key);
    CHECK(cairn::dtype_name(v.dtype) == (want.at("dtype").as_string() == "bool" ? std::string("bool") : want.at("dtype").as_string()));
    cairn::Shape shape;
    for (const auto& d : want.at("shape").as_array()) shape.push_back(d.as_int());
    CHECK(v.shape == shape);
    CHECK(bytes_of(v) == test::read_file(ref + "/expected/" + param + ".bin"));
  }
  // Parts of a large zstd chunk, read out of the order a whole load reads it in.
  const std::string big = test::read_file(ref + "/expected/big.bin");
  const auto part = cairn::read_arrays(ckpt, {"big"}, {.boxes = {cairn::Box{{150000}, {10}}, cairn::Box{{7}, {3}}}});
  CHECK(bytes_of(part.at("big")) == big.substr(150000 * 4, 40) + big.substr(7 * 4, 12));
  // The F-order array keeps its order in the records; the edge chunks are cut to the array.
  for (const auto& l : info.metadata.find_item("state")->leaves) {
    if (l.key() == "f64_F") CHECK(l.order == cairn::Order::F);
    if (l.key() == "f32") CHECK(l.chunks.size() == 6);
    if (l.key() == "layers/0/w") CHECK(l.path[1].kind == cairn::KeyEntry::Kind::index);
  }
}

TEST_CASE("Orbax's 2024 layout: per-parameter zarr directories and the msgpack aggregate load") {
  if (!have_testdata()) return;
  const std::string ref = CAIRN_ZARR_REF;
  const std::string ckpt = testdata() + "/legacy/aggregate_some.checkpoint";
  const std::string all = testdata() + "/legacy/aggregate_all.checkpoint";
  CHECK(cairn::orbax_metadata(ckpt).not_read.empty());
  CHECK(cairn::orbax_metadata(all).not_read.empty());
  for (const char* p : {"a", "b"}) {
    CAPTURE(p);
    const std::string truth = test::read_file(ref + "/expected/aggregate_some." + p + ".bin");
    // From the zarr directory, against the zstd tool's decoding of the same file (zarr_ref.py).
    CHECK(bytes_of(leaf(ckpt, p)) == truth);
    // The same value, saved by aggregate_all into its msgpack file as a flax ndarray.
    const cairn::ArrayValue v = leaf(all, p);
    CHECK(v.dtype == cairn::DType::int64);
    CHECK(bytes_of(v) == truth);
  }
  // c/a and c/e are in the msgpack file of both: the same there, and Orbax's test tree
  // (c/a = 3 * arange(8) in 2 x 4, c/e = 4 * arange(16) in 4 x 4).
  for (const char* p : {"c/a", "c/e"}) {
    CAPTURE(p);
    const cairn::ArrayValue some = leaf(ckpt, p), every = leaf(all, p);
    CHECK(bytes_of(some) == bytes_of(every));
    const auto values = some.values<std::int64_t>();
    const std::int64_t step = std::string(p) == "c/a" ? 3 : 4;
    CHECK(some.shape == (std::string(p) == "c/a" ? cairn::Shape{2, 4} : cairn::Shape{4, 4}));
    for (std::size_t i = 0; i < values.size(); ++i) CHECK(values[i] == step * static_cast<std::int64_t>(i));
  }
}

namespace {

// The data file of the OCDBT database cairn's export writes under `ckpt` (its one file in a
// directory `d`), or "" where there is none.
std::string ocdbt_data_file(const std::string& ckpt) {
  std::string found;
  for (const auto& e : fs::recursive_directory_iterator(ckpt))
    if (e.is_regular_file() && e.path().parent_path().filename() == "d") found = e.path().string();
  return found;
}

// zarr v3 with sharding_indexed, written here: a shard is its inner chunks (bytes + zstd),
// then the index (offset, size per inner chunk; 2^64-1 twice for a missing one) and its CRC32C.
void put_le(std::string& s, std::uint64_t v, int n) {
  for (int i = 0; i < n; ++i) s += static_cast<char>((v >> (8 * i)) & 0xff);
}
struct V3Writer {
  std::string dir;
  void write_array(const std::string& param, const std::string& dtype, std::size_t item, const cairn::Shape& shape,
                   const cairn::Shape& shard, const cairn::Shape& inner, const std::vector<unsigned char>& c_order,
                   std::set<std::pair<std::size_t, std::size_t>> missing = {}) {
    REQUIRE(shape.size() == 2);
    const std::string pdir = dir + "/" + param;
    fs::create_directories(pdir);
    auto dims = [](const cairn::Shape& s) { return "[" + std::to_string(s[0]) + "," + std::to_string(s[1]) + "]"; };
    test::write_file(pdir + "/zarr.json",
        R"({"zarr_format":3,"node_type":"array","shape":)" + dims(shape) + R"(,"data_type":")" + dtype +
        R"(","chunk_grid":{"name":"regular","configuration":{"chunk_shape":)" + dims(shard) +
        R"(}},"chunk_key_encoding":{"name":"default"},"fill_value":0,"codecs":[{"name":"sharding_indexed","configuration":{"chunk_shape":)" +
        dims(inner) + R"(,"codecs":[{"name":"bytes","configuration":{"endian":"little"}},{"name":"zstd","configuration":{"level":1}}],)" +
        R"("index_codecs":[{"name":"bytes","configuration":{"endian":"little"}},{"name":"crc32c"}]}}]})");
    const std::int64_t gi = shard[0] / inner[0], gj = shard[1] / inner[1];
    for (std::int64_t si = 0; si * shard[0] < shape[0]; ++si)
      for (std::int64_t sj = 0; sj * shard[1] < shape[1]; ++sj) {
        std::string data, idx;
        for (std::int64_t ii = 0; ii < gi; ++ii)
          for (std::int64_t jj = 0; jj < gj; ++jj) {
            if (missing.count({static_cast<std::size_t>(si * gi + ii), static_cast<std::size_t>(sj * gj + jj)})) {
              put_le(idx, ~0ull, 8);
              put_le(idx, ~0ull, 8);
              continue;
            }
            // The inner chunk, full size, zero outside the array (as zarr pads).
            std::string raw(static_cast<std::size_t>(inner[0] * inner[1]) * item, '\0');
            for (std::int64_t r = 0; r < inner[0]; ++r)
              for (std::int64_t c = 0; c < inner[1]; ++c) {
                const std::int64_t gr = si * shard[0] + ii * inner[0] + r, gc = sj * shard[1] + jj * inner[1] + c;
                if (gr < shape[0] && gc < shape[1])
                  std::memcpy(raw.data() + (r * inner[1] + c) * item, c_order.data() + (gr * shape[1] + gc) * item, item);
              }
            std::string z(ZSTD_compressBound(raw.size()), '\0');
            z.resize(ZSTD_compress(z.data(), z.size(), raw.data(), raw.size(), 1));
            put_le(idx, data.size(), 8);
            put_le(idx, z.size(), 8);
            data += z;
          }
        put_le(idx, cairn::crc32c(idx.data(), idx.size()), 4);
        fs::create_directories(pdir + "/c/" + std::to_string(si));
        test::write_file(pdir + "/c/" + std::to_string(si) + "/" + std::to_string(sj), data + idx);
      }
  }
};

}  // namespace

TEST_CASE("two Orbax parameters of one key path, or a leaf that is another's parent, are refused, naming the key") {
  test::TempDir tmp;
  const std::string ckpt = tmp.path + "/v3";
  fs::create_directories(ckpt);
  V3Writer w{ckpt};
  const auto f32 = test::random_bits<float>(4);
  std::vector<unsigned char> bytes(16);
  std::memcpy(bytes.data(), f32.data(), bytes.size());
  w.write_array("w", "float32", 4, {2, 2}, {2, 2}, {2, 2}, bytes);
  w.write_array("w.b", "float32", 4, {2, 2}, {2, 2}, {2, 2}, bytes);
  const std::string entry = R"J({"value_metadata":{"value_type":"jax.Array","skip_deserialize":false},"key_metadata":)J";
  auto refused = [&](const std::string& tree, const std::string& why, const std::string& key) {
    test::write_file(ckpt + "/_METADATA", R"J({"tree_metadata":{)J" + tree + R"J(},"use_ocdbt":false,"use_zarr3":true})J");
    bool threw = false;
    try {
      (void)cairn::orbax_metadata(ckpt);
    } catch (const cairn::Error& e) {
      threw = true;
      CHECK(std::string(e.what()).find(why) != std::string::npos);
      CHECK(e.key_path() == key);
      CHECK(fs::path(e.file()).filename() == "_METADATA");
    }
    CHECK(threw);
  };
  // Two spellings of one tuple: both entries are the parameter w.
  refused(R"J("('w',)":)J" + entry + R"J([{"key":"w","key_type":2}]},"('w', )":)J" + entry + R"J([{"key":"w","key_type":2}]})J",
          "two parameters map to one key path", "w");
  refused(R"J("('w',)":)J" + entry + R"J([{"key":"w","key_type":2}]},"('w', 'b')":)J" + entry +
              R"J([{"key":"w","key_type":2},{"key":"b","key_type":2}]})J",
          "'w' is both a leaf and the parent of 'w/b'", "w");
  // Either alone loads.
  test::write_file(ckpt + "/_METADATA", R"J({"tree_metadata":{"('w', 'b')":)J" + entry +
                                            R"J([{"key":"w","key_type":2},{"key":"b","key_type":2}]}},"use_ocdbt":false,"use_zarr3":true})J");
  CHECK(bytes_of(leaf(ckpt, "w/b")) == std::string(bytes.begin(), bytes.end()));
}

TEST_CASE("zarr v3 shards with several inner chunks, edges, holes and a checked index") {
  test::TempDir tmp;
  const std::string ckpt = tmp.path + "/v3";
  fs::create_directories(ckpt);
  V3Writer w{ckpt};
  const cairn::Shape shape{10, 7};
  const auto f32 = test::random_bits<float>(70);
  std::vector<unsigned char> f32b(70 * 4);
  std::memcpy(f32b.data(), f32.data(), f32b.size());
  w.write_array("w", "float32", 4, shape, {8, 6}, {4, 3}, f32b);
  const auto bf = test::random_bits<std::uint16_t>(70);
  std::vector<unsigned char> bfb(70 * 2);
  std::memcpy(bfb.data(), bf.data(), bfb.size());
  w.write_array("emb", "bfloat16", 2, shape, {8, 6}, {4, 3}, bfb, {{1, 1}});
  test::write_file(ckpt + "/_METADATA",
      R"J({"tree_metadata":{"('w',)":{"key_metadata":[{"key":"w","key_type":2}],"value_metadata":{"value_type":"jax.Array","skip_deserialize":false}},)J"
      R"J("('emb',)":{"key_metadata":[{"key":"emb","key_type":2}],"value_metadata":{"value_type":"jax.Array","skip_deserialize":false}}},"use_ocdbt":false,"use_zarr3":true})J");
  // A NamedSharding as Orbax records it (keys are base64url of the parameter name: "w" -> "dw==").
  test::write_file(ckpt + "/_sharding",
      R"({"dw==":"{\"sharding_type\": \"NamedSharding\", \"shape\": [2, 1], \"axis_names\": [\"data\", \"model\"], \"partition_spec\": [\"data\", null], \"memory_kind\": \"device\"}"})");

  const cairn::OrbaxCheckpoint info = cairn::orbax_metadata(ckpt);
  const cairn::LeafRecord* w_rec = info.metadata.find_item("state")->find_leaf("w");
  REQUIRE(w_rec);
  // 2 x 2 shards of 2 x 2 inner chunks, less the ones wholly past the edge.
  CHECK(w_rec->chunks.size() == 9);
  REQUIRE(w_rec->sharding);
  CHECK(w_rec->sharding->describe().find("data") != std::string::npos);
  CHECK(bytes_of(leaf(ckpt, "w")) == std::string(f32b.begin(), f32b.end()));
  // The missing inner chunk (row 4-7, columns 3-5) reads as the fill value, 0.
  std::vector<unsigned char> holes = bfb;
  for (int r = 4; r < 8; ++r)
    for (int c = 3; c < 6; ++c) holes[(r * 7 + c) * 2] = holes[(r * 7 + c) * 2 + 1] = 0;
  const cairn::ArrayValue emb = leaf(ckpt, "emb");
  CHECK(emb.dtype == cairn::DType::bfloat16);
  CHECK(bytes_of(emb) == std::string(holes.begin(), holes.end()));

  SUBCASE("a damaged index is refused by its checksum, one pointing outside its shard by its bounds") {
    const std::string shard = ckpt + "/w/c/0/0";
    std::string s = test::read_file(shard);
    std::string bad = s;
    bad[bad.size() - 10] ^= 1;
    test::write_file(shard, bad);
    CHECK_THROWS_WITH_AS(leaf(ckpt, "w"), doctest::Contains("checksum"), cairn::Error);
    // The error names the shard's file as a user can open it (not as a key of the store it
    // was read through), the key, and what of it.
    cairn::PosixStore parent(fs::path(ckpt).parent_path().string());
    cairn::ArrayValue v;
    cairn::LoadOptions o;
    o.subtree = "w";
    bool threw = false;
    try {
      cairn::load_orbax(cairn::Location(parent, fs::path(ckpt).filename().string()), v, o);
    } catch (const cairn::Error& e) {
      threw = true;
      CHECK(fs::path(e.file()).lexically_normal() == fs::path(shard).lexically_normal());
      CHECK(e.key_path() == "w (shard index)");
    }
    CHECK(threw);
    // An entry past the shard's data, with a matching CRC32C: the bounds check names it.
    bad = s;
    const std::size_t idx = s.size() - 4 - 4 * 16;
    put_le(bad, 0, 0);
    std::string index = bad.substr(idx, 64);
    index.replace(0, 8, std::string("\xff\xff\x00\x00\x00\x00\x00\x00", 8));
    std::string crc;
    put_le(crc, cairn::crc32c(index.data(), index.size()), 4);
    test::write_file(shard, s.substr(0, idx) + index + crc);
    CHECK_THROWS_WITH_AS(leaf(ckpt, "w"), doctest::Contains("outside the shard"), cairn::Error);
  }
}

TEST_CASE("small OCDBT chunks load as ranges of their data file, zstd ones decoded in runs; a damaged index reads as before") {
  // Orbax keeps each small array's zarr.json and its shard back to back in one data file. A
  // load reads such a chunk as a range of that file (zstd: of the file's chunks decoded one
  // after another), runs of them in one request; what damage does must not change with it.
  // zarr v3 shards (Orbax v1), and zarr v2 chunks that are values themselves (Orbax v0).
  for (const auto& [zstd, zarr3] : std::vector<std::pair<int, bool>>{{0, true}, {3, true}, {0, false}, {1, false}}) {
    CAPTURE(zstd);
    CAPTURE(zarr3);
    // (Subcases in a loop need a name per pass: doctest runs a name once.)
    const std::string way = "zstd " + std::to_string(zstd) + (zarr3 ? ", zarr v3: " : ", zarr v2: ");
    test::TempDir tmp;
    const std::string ckpt = tmp.path + "/small";
    using Flat = std::map<std::string, std::vector<float>>;
    Flat state;
    std::mt19937_64& rng = test::rng();
    for (int i = 0; i < 40; ++i) state["p" + std::to_string(i)] = test::random_bits<float>(30 + rng() % 150);
    // Compressible for zstd: runs of repeated values.
    for (auto& [k, v] : state)
      for (std::size_t i = 1; i < v.size(); i += 2) v[i] = v[i - 1];
    cairn::OrbaxSaveOptions so;
    so.zstd_level = zstd;
    so.zarr3 = zarr3;
    if (!zarr3) so.layout = cairn::OrbaxLayout::v0_standard;
    cairn::save_orbax(ckpt, state, so);
    auto same_bits = [](const std::vector<float>& a, const std::vector<float>& b) {
      return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
    };
    {
      const Flat back = cairn::load_orbax<Flat>(ckpt);
      REQUIRE(back.size() == state.size());
      for (const auto& [k, v] : state) CHECK_MESSAGE(same_bits(back.at(k), v), k);
      // Through the box reader (a cast, and a part of each chunk): whole chunks decoded, then cut.
      const auto wide = cairn::load_orbax<std::map<std::string, std::vector<double>>>(ckpt);
      for (const auto& [k, v] : state) {
        REQUIRE(wide.at(k).size() == v.size());
        bool equal = true;
        for (std::size_t i = 0; i < v.size(); ++i)
          equal = equal && (std::isnan(v[i]) ? std::isnan(wide.at(k)[i]) : double(v[i]) == wide.at(k)[i]);
        CHECK_MESSAGE(equal, k);
      }
      std::map<std::string, cairn::ShardedArray<float>> thirds;
      for (const auto& [k, v] : state)
        thirds[k] = cairn::ShardedArray<float>(cairn::NamedSharding(cairn::Mesh::host({{"x", 3}}), cairn::PartitionSpec{"x"}));
      cairn::load_orbax(ckpt, thirds);
      for (const auto& [k, v] : state) CHECK_MESSAGE(test::same_bits(thirds.at(k).gather(), v), k);
    }
    // What a load opens: every chunk a range of one blob (the data file, or its decoded
    // chunks); what metadata and verify open: a blob per chunk, its index read when it is.
    namespace ob = cairn::detail::orbax;
    const cairn::Location at(ckpt);
    std::uint64_t p7_at = 0, p7_stored = 0;
    for (const bool for_load : {true, false}) {
      CAPTURE(for_load);
      ob::OrbaxView view(at.store(), at.key());
      const cairn::OrbaxCheckpoint c = ob::open_orbax(view, nullptr, for_load);
      const cairn::ItemRecord* item = c.metadata.find_item(cairn::default_item_name);
      REQUIRE(item);
      REQUIRE(item->leaves.size() == state.size());
      std::set<std::string> files;
      std::set<std::uint64_t> offsets;
      for (const auto& l : item->leaves) {
        REQUIRE(l.chunks.size() == 1);
        const cairn::ChunkRecord& ch = l.chunks.front();
        files.insert(ch.file);
        offsets.insert(ch.offset);
        CHECK(ch.nbytes == state.at(l.key()).size() * sizeof(float));
        const ob::Blob& b = view.blobs()[std::stoull(ch.file)];
        const auto lazy = zarr3 || zstd ? ob::Blob::Kind::chunk : ob::Blob::Kind::range;
        CHECK(b.kind == (!for_load ? lazy : zstd ? ob::Blob::Kind::decoded : ob::Blob::Kind::range));
        // A part of a chunk (as a box of it is read), and a read of it with a skipped piece
        // before one that starts inside it.
        const auto& v = state.at(l.key());
        const auto reader = view.open(ch.file);
        float part[5];
        reader->read_at(part, sizeof(part), ch.offset + 4 * sizeof(float));
        CHECK_MESSAGE(std::memcmp(part, v.data() + 4, sizeof(part)) == 0, l.key());
        float tail[3];
        const cairn::ReadPiece pieces[] = {{nullptr, 7 * sizeof(float)}, {tail, sizeof(tail)}};
        reader->read_scattered(pieces, 2, ch.offset + 2 * sizeof(float));
        CHECK_MESSAGE(std::memcmp(tail, v.data() + 9, sizeof(tail)) == 0, l.key());
        if (!for_load && l.key() == "p7") p7_at = b.value.offset, p7_stored = b.value.length;
      }
      CHECK(files.size() == (for_load ? 1u : state.size()));
      CHECK(offsets.size() == (for_load ? state.size() : 1u));
    }
    // p7's shard in the data file: its chunk, then its index (offset 0, the chunk's stored
    // size) and the index's CRC32C.
    const std::string data_file = ocdbt_data_file(ckpt);
    REQUIRE(!data_file.empty());
    const std::string orig = test::read_file(data_file);
    REQUIRE(p7_stored > 20);
    REQUIRE(p7_at + p7_stored <= orig.size());
    // p7's zstd frame damaged (its magic number): refused, naming the key and the data file.
    auto damaged_frame_refused = [&] {
      std::string bad = orig;
      for (std::size_t i = 0; i < 4; ++i) bad[static_cast<std::size_t>(p7_at) + i] ^= 0x55;
      test::write_file(data_file, bad);
      try {
        (void)cairn::load_orbax<Flat>(ckpt);
        FAIL("a damaged zstd frame loaded");
      } catch (const cairn::Error& e) {
        CHECK(e.key_path() == "p7");
        CHECK(e.message().find("zstd") != std::string::npos);
        CHECK(fs::path(e.file()).lexically_normal() == fs::path(data_file).lexically_normal());
      }
    };
    if (!zarr3) {
      if (zstd) damaged_frame_refused();
      test::write_file(data_file, orig);
      continue;  // no shard index
    }
    const std::size_t idx = static_cast<std::size_t>(p7_at + p7_stored - 20);
    const std::uint64_t chunk_stored = p7_stored - 20;
    if (!zstd) CHECK(chunk_stored == state.at("p7").size() * sizeof(float));
    std::string index;
    put_le(index, 0, 8);
    put_le(index, chunk_stored, 8);
    REQUIRE(orig.substr(idx, 16) == index);
    auto with_index = [&](std::uint64_t offset, std::uint64_t nbytes) {
      std::string i, crc;
      put_le(i, offset, 8);
      put_le(i, nbytes, 8);
      put_le(crc, cairn::crc32c(i.data(), i.size()), 4);
      std::string bad = orig;
      bad.replace(idx, 20, i + crc);
      test::write_file(data_file, bad);
    };
    auto load_error = [&]() -> std::string {
      try {
        (void)cairn::load_orbax<Flat>(ckpt);
      } catch (const cairn::Error& e) {
        CHECK(e.key_path().find("p7") != std::string::npos);
        // The file: the chunk's key in the database (read as a blob of its own), or the data
        // file (a zstd chunk decoded in its file's run).
        CHECK_MESSAGE((e.file().find("/p7/c/0") != std::string::npos ||
                       fs::path(e.file()).lexically_normal() == fs::path(data_file).lexically_normal()), e.file());
        return e.message();
      }
      return "(loaded)";
    };
    SUBCASE((way + "a flipped byte of the index is refused by its checksum, naming the key; a load that skips it loads the rest").c_str()) {
      std::string bad = orig;
      bad[idx + 3] ^= 4;
      test::write_file(data_file, bad);
      CHECK(load_error().find("checksum") != std::string::npos);
      cairn::LoadOptions o;
      o.skip = {"p7"};
      Flat back;
      back["p7"] = {42};
      cairn::load_orbax(ckpt, back, o);
      CHECK(back.at("p7") == std::vector<float>{42});
      CHECK(same_bits(back.at("p8"), state.at("p8")));
    }
    SUBCASE((way + "an index that says the chunk is missing loads the fill value").c_str()) {
      with_index(~0ull, ~0ull);
      const Flat back = cairn::load_orbax<Flat>(ckpt);
      CHECK(back.at("p7") == std::vector<float>(state.at("p7").size(), 0.0f));
      CHECK(same_bits(back.at("p6"), state.at("p6")));
    }
    SUBCASE((way + "an entry of another size, or outside the shard, is refused by name").c_str()) {
      with_index(0, chunk_stored - 4);
      CHECK(load_error().find(zstd ? "zstd" : "bytes, expected") != std::string::npos);
      with_index(8, chunk_stored);
      CHECK(load_error().find("outside the shard") != std::string::npos);
    }
    if (zstd) {
      SUBCASE((way + "a damaged zstd chunk decoded in a run is refused, naming its key and the data file").c_str()) {
        damaged_frame_refused();
      }
    }
    test::write_file(data_file, orig);
  }
}

TEST_CASE("small OCDBT chunks of more than one run load bit-exactly, the runs on two threads (ThreadSanitizer runs this)") {
  // Over 1 MiB of small arrays: several of the loader's runs, which it reads on two threads
  // where the file is in memory (read_scheduler.hpp), each decoding into its own targets.
  using Flat = std::map<std::string, std::vector<float>>;
  Flat state;
  for (int i = 0; i < 700; ++i) {
    auto v = test::random_bits<float>(500 + static_cast<std::size_t>(i % 7) * 50);
    for (std::size_t k = 1; k < v.size(); k += 3) v[k] = v[k - 1];
    state["w" + std::to_string(i)] = std::move(v);
  }
  for (const int zstd : {0, 3}) {
    CAPTURE(zstd);
    test::TempDir tmp;
    cairn::OrbaxSaveOptions o;
    o.zstd_level = zstd;
    cairn::save_orbax(tmp.path + "/c", state, o);
    for (int round = 0; round < 3; ++round) {
      const Flat back = cairn::load_orbax<Flat>(tmp.path + "/c");
      REQUIRE(back.size() == state.size());
      for (const auto& [k, v] : state) CHECK_MESSAGE(test::same_bits(back.at(k), v), k);
    }
  }
}

TEST_CASE("a large _METADATA is read while its OCDBT database opens: the database's error counts only where it is used, and after _METADATA's") {
  // Over read_ahead_min_metadata_bytes of _METADATA: the database is opened beside its parse
  // (PytreeReader::read), before _METADATA says whether there is one to use.
  using Flat = std::map<std::string, std::vector<std::int32_t>>;
  Flat state;
  for (int i = 0; i < 600; ++i) state["layer" + std::to_string(i)] = test::random_bits<std::int32_t>(1 + static_cast<std::size_t>(i % 5));
  auto damage = [](const std::string& file, std::size_t at, char c) {
    std::string bytes = test::read_file(file);
    REQUIRE(at < bytes.size());
    bytes[at] = c;
    test::write_file(file, bytes);
  };
  test::TempDir tmp;
  for (const bool ocdbt : {true, false}) {
    CAPTURE(ocdbt);
    const std::string ckpt = tmp.path + (ocdbt ? "/db" : "/dirs");
    cairn::OrbaxSaveOptions o;
    o.ocdbt = ocdbt;
    cairn::save_orbax(ckpt, state, o);
    const std::string pytree = ckpt + "/state";
    REQUIRE(fs::file_size(pytree + "/_METADATA") >= cairn::detail::read_ahead_min_metadata_bytes);
    if (!ocdbt) {
      // _METADATA says use_ocdbt=false: a damaged manifest.ocdbt beside it is never used, though
      // the loader opened it (and failed) while parsing _METADATA.
      test::write_file(pytree + "/manifest.ocdbt", "not a manifest");
      for (int round = 0; round < 2; ++round) {
        const Flat back = cairn::load_orbax<Flat>(ckpt);
        REQUIRE(back.size() == state.size());
        for (const auto& [k, v] : state) CHECK_MESSAGE(test::same_bits(back.at(k), v), k);
      }
      continue;
    }
    const Flat back = cairn::load_orbax<Flat>(ckpt);
    for (const auto& [k, v] : state) CHECK_MESSAGE(test::same_bits(back.at(k), v), k);
    // The database's own error, from the thread that opened it, where it is used.
    const std::string manifest = test::read_file(pytree + "/manifest.ocdbt");
    damage(pytree + "/manifest.ocdbt", manifest.size() / 2, static_cast<char>(manifest[manifest.size() / 2] ^ 0x5a));
    CHECK_THROWS_WITH_AS(cairn::load_orbax<Flat>(ckpt), doctest::Contains("manifest.ocdbt"), cairn::Error);
    // Both damaged: _METADATA's error, as when it was read before the database was opened.
    damage(pytree + "/_METADATA", 0, '[');
    try {
      (void)cairn::load_orbax<Flat>(ckpt);
      FAIL("a damaged _METADATA loaded");
    } catch (const cairn::Error& e) {
      const std::string what = e.what();
      CHECK_MESSAGE(what.find("_METADATA") != std::string::npos, what);
      CHECK_MESSAGE(what.find("manifest.ocdbt") == std::string::npos, what);
    }
  }
}

TEST_CASE("the records of many arrays in an OCDBT database are made on two threads and joined as one reader makes them (ThreadSanitizer runs this)") {
  // At least parallel_records_min arrays: a load makes the first half's records here and the
  // second half's on another thread, then joins them (PytreeReader::add_on_two_threads).
  using Flat = std::map<std::string, std::vector<float>>;
  namespace ob = cairn::detail::orbax;
  const std::size_t n = cairn::detail::parallel_records_min + 301;
  Flat state;
  auto name = [](std::size_t i) {
    std::string s = std::to_string(i);
    return "w" + std::string(5 - s.size(), '0') + s;  // _METADATA's order is the names' order
  };
  const std::size_t damaged[2] = {100, n - 200};  // each of a shape of its own: its zarr.json (equal ones are stored once)
  for (std::size_t i = 0; i < n; ++i) {
    auto v = test::random_bits<float>(i == damaged[0] ? 20 : i == damaged[1] ? 21 : 1 + i % 13);  // and 13 shapes
    for (std::size_t k = 1; k < v.size(); k += 2) v[k] = v[k - 1];
    state[name(i)] = std::move(v);
  }
  if (cairn::detail::usable_cores() < 2) MESSAGE("one core: the records are made on one thread, as before");
  for (const int zstd : {0, 3}) {
    CAPTURE(zstd);
    test::TempDir tmp;
    const std::string ckpt = tmp.path + "/c";
    cairn::OrbaxSaveOptions o;
    o.zstd_level = zstd;
    cairn::save_orbax(ckpt, state, o);
    for (int round = 0; round < 2; ++round) {
      const Flat back = cairn::load_orbax<Flat>(ckpt);
      REQUIRE(back.size() == state.size());
      for (const auto& [k, v] : state) CHECK_MESSAGE(test::same_bits(back.at(k), v), k);
    }
    // The joined records: every chunk a range of one blob of the view, the data file's (or its
    // decoded small chunks'), each leaf's range the piece of that blob its own chunk makes.
    const cairn::Location at(ckpt);
    {
      ob::OrbaxView view(at.store(), at.key());
      const cairn::OrbaxCheckpoint c = ob::open_orbax(view, nullptr, true);
      const cairn::ItemRecord* item = c.metadata.find_item(cairn::default_item_name);
      REQUIRE(item);
      REQUIRE(item->leaves.size() == n);
      std::set<std::string> files;
      std::set<std::uint64_t> offsets;
      std::map<std::uint64_t, const ob::DecodedChunks::Piece*> pieces;  // by offset in the decoded blob
      const ob::Blob* decoded = nullptr;
      for (std::size_t i = 0; i < n; ++i) {
        const cairn::LeafRecord& l = item->leaves[i];
        CHECK(l.key() == name(i));
        REQUIRE(l.chunks.size() == 1);
        const cairn::ChunkRecord& ch = l.chunks.front();
        CHECK(ch.nbytes == state.at(l.key()).size() * sizeof(float));
        files.insert(ch.file);
        offsets.insert(ch.offset);
        const ob::Blob& b = view.blobs()[std::stoull(ch.file)];
        REQUIRE(b.kind == (zstd ? ob::Blob::Kind::decoded : ob::Blob::Kind::range));
        if (zstd && !decoded) {
          decoded = &b;
          REQUIRE(b.decoded->pieces.size() == n);
          REQUIRE(b.decoded->keys.size() == n);
          std::uint64_t end = 0;
          for (std::size_t p = 0; p < n; ++p) {
            const auto& piece = b.decoded->pieces[p];
            CHECK(piece.at == end);  // one after another, the second half's after the first's
            end += piece.size;
            pieces[piece.at] = &piece;
          }
          CHECK(b.size == end);
        }
        if (zstd) {
          REQUIRE(pieces.count(ch.offset) == 1);
          const auto* piece = pieces.at(ch.offset);
          CHECK(piece->size == ch.nbytes);
          CHECK(b.decoded->keys[static_cast<std::size_t>(piece - b.decoded->pieces.data())] == l.key());
        }
        // Read through the view: the bytes of this leaf.
        std::vector<float> got(state.at(l.key()).size());
        view.open(ch.file)->read_at(got.data(), got.size() * sizeof(float), ch.offset);
        CHECK_MESSAGE(test::same_bits(got, state.at(l.key())), l.key());
      }
      CHECK(files.size() == 1u);
      CHECK(offsets.size() == n);
    }
    // An error is the one the entries in order meet first: a damaged zarr.json in each half
    // names the first half's; in the second half alone, its own. Leaves of a dtype cairn does
    // not read, one in each half, are listed in order and refused by name.
    const std::string data_file = ocdbt_data_file(ckpt);
    REQUIRE(!data_file.empty());
    const std::string orig = test::read_file(data_file);
    std::uint64_t json_at[2];
    {
      ob::OcdbtDatabase db(at.store(), at.key() + "/state");
      for (int h = 0; h < 2; ++h) {
        const ob::OcdbtValue* v = db.find(name(damaged[h]) + "/zarr.json");
        REQUIRE(v);
        REQUIRE(!v->is_inline);
        json_at[h] = v->offset;
        REQUIRE(orig.substr(static_cast<std::size_t>(v->offset), 1) == "{");
      }
    }
    auto load_error = [&](const std::string& bytes) -> cairn::Error {
      test::write_file(data_file, bytes);
      try {
        (void)cairn::load_orbax<Flat>(ckpt);
      } catch (const cairn::Error& e) {
        return e;
      }
      FAIL("a damaged checkpoint loaded");
      return cairn::Error(cairn::ErrorKind::io, "");
    };
    std::string both = orig, second = orig;
    both[static_cast<std::size_t>(json_at[0])] = both[static_cast<std::size_t>(json_at[1])] = '[';
    second[static_cast<std::size_t>(json_at[1])] = '[';
    const cairn::Error first_error = load_error(both);
    CHECK(first_error.key_path() == name(damaged[0]));
    CHECK(first_error.message().find("zarr metadata") != std::string::npos);
    const cairn::Error second_error = load_error(second);
    CHECK(second_error.key_path() == name(damaged[1]));
    CHECK(second_error.message().find("zarr metadata") != std::string::npos);
    std::string unread = orig;
    for (const std::uint64_t j : json_at) {
      const std::size_t dtype = unread.find("\"float32\"", static_cast<std::size_t>(j));
      REQUIRE(dtype < static_cast<std::size_t>(j) + 400);
      unread.replace(dtype, 9, "\"int4\"   ");  // (as long: the value's size stays)
    }
    test::write_file(data_file, unread);
    {
      ob::OrbaxView view(at.store(), at.key());
      const cairn::OrbaxCheckpoint c = ob::open_orbax(view, nullptr, true);
      REQUIRE(c.not_read.size() == 2u);
      CHECK(c.not_read[0].rfind(name(damaged[0]) + ": ", 0) == 0);
      CHECK(c.not_read[1].rfind(name(damaged[1]) + ": ", 0) == 0);
      const cairn::ItemRecord* item = c.metadata.find_item(cairn::default_item_name);
      REQUIRE(item);
      REQUIRE(item->unread.size() == 2u);
      CHECK(item->unread[0].path.str() == name(damaged[0]));
      CHECK(item->unread[1].path.str() == name(damaged[1]));
      CHECK(item->leaves.size() == n - 2);
    }
    try {
      (void)cairn::load_orbax<Flat>(ckpt);
      FAIL("leaves cairn does not read were loaded");
    } catch (const cairn::Error& e) {
      const std::string what = e.what();
      CHECK_MESSAGE(what.find(name(damaged[0])) != std::string::npos, what);
    }
    cairn::LoadOptions skip;
    skip.skip = {name(damaged[0]), name(damaged[1])};
    Flat back;
    for (const auto& [k, v] : state) back[k];
    back.erase(name(damaged[0]));
    back.erase(name(damaged[1]));
    cairn::load_orbax(ckpt, back, skip);
    for (const auto& [k, v] : back) CHECK_MESSAGE(test::same_bits(v, state.at(k)), k);
    test::write_file(data_file, orig);
  }
}

TEST_CASE("an Orbax key path deeper than a tree may be is corrupt, named with its file and entry") {
  test::TempDir tmp;
  const std::string ckpt = tmp.path + "/deep";
  fs::create_directories(ckpt);
  V3Writer w{ckpt};
  std::vector<unsigned char> bytes(16, 7);
  w.write_array("w", "float32", 4, cairn::Shape{2, 2}, {2, 2}, {2, 2}, bytes);
  std::string keys;
  for (int i = 0; i < 1001; ++i) keys += std::string(i ? "," : "") + R"({"key":"k","key_type":2})";
  test::write_file(ckpt + "/_METADATA", R"J({"tree_metadata":{"('w',)":{"key_metadata":[)J" + keys +
                                            R"J(],"value_metadata":{"value_type":"jax.Array","skip_deserialize":false}}},"use_ocdbt":false,"use_zarr3":true})J");
  CHECK_CAIRN_ERROR(cairn::orbax_metadata(ckpt), cairn::ErrorKind::corrupt, "a key path of more than 1000 entries");
  CHECK_CAIRN_ERROR(cairn::orbax_metadata(ckpt), cairn::ErrorKind::corrupt, "_METADATA");
}

TEST_CASE("a damaged Orbax checkpoint loads its original bits or throws cairn::Error: every byte, every cut") {
  if (!have_testdata()) return;
  for (const char* src : {"compat/v1_checkpoints/composite_checkpoint/checkpoint_metadata_present/pytree_checkpointable_has_metadata",
                          "compat/v0_checkpoints/direct_checkpoint/checkpoint_metadata_present/pytree_checkpointable_has_metadata"}) {
    CAPTURE(src);
    test::TempDir tmp;
    const std::string ckpt = tmp.path + "/c";
    fs::copy(testdata() + "/" + src, ckpt, fs::copy_options::recursive);
    for (const auto& e : fs::recursive_directory_iterator(ckpt))
      if (e.is_regular_file()) fs::permissions(e.path(), fs::perms::owner_read | fs::perms::owner_write);
    std::vector<std::string> files;
    for (const auto& e : fs::recursive_directory_iterator(ckpt))
      if (e.is_regular_file() && e.path().filename() != "_CHECKPOINT_METADATA" && e.path().filename() != "_sharding" &&
          e.path().parent_path().filename() != "array_metadatas" && e.path().parent_path().filename() != "metadata")
        files.push_back(e.path().string());
    int loads = 0, errors = 0, same = 0;
    // The root manifest is read and checksummed whole: every flip or cut of it is refused. (A
    // data file may also hold nodes of earlier versions, and the per-process manifests are not
    // read at all: the root reaches the processes' files through base paths.)
    bool must_fail = false;
    auto attempt = [&] {
      ++loads;
      try {
        const State s = cairn::load_orbax<State>(ckpt);
        // What loads must be the original (a flipped byte of a zstd frame's own padding, say,
        // or of a key the load never reads).
        CHECK(s.a == expected_a);
        CHECK(s.b.c == expected_c);
        ++same;
        CHECK_FALSE(must_fail);
      } catch (const cairn::Error&) {
        ++errors;
      }
    };
    for (const std::string& f : files) {
      CAPTURE(f);
      const std::string orig = test::read_file(f);
      must_fail = fs::path(f).filename() == "manifest.ocdbt" &&
                  fs::path(f).parent_path().filename().string().rfind("ocdbt.process_", 0) != 0;
      for (std::size_t i = 0; i < orig.size(); ++i) {
        std::string bad = orig;
        bad[i] ^= static_cast<char>(1u << (i % 8));
        test::write_file(f, bad);
        attempt();
      }
      for (std::size_t n = 0; n < orig.size(); n += 1 + orig.size() / 16) {
        test::write_file(f, orig.substr(0, n));
        attempt();
      }
      test::write_file(f, orig);
    }
    MESSAGE(std::string(src) << ": " << loads << " damaged loads, " << errors << " refused, " << same << " loaded the original");
    CHECK(errors > 0);
  }
}

namespace {
struct Run {
  int status;
  std::string out, err;
};
Run cli(std::vector<std::string> args) {
  std::ostringstream out, err;
  const int status = cairn::cli::run(args, out, err);
  return {status, out.str(), err.str()};
}
}  // namespace

TEST_CASE("inspect, read_arrays, verify, convert and the cairn tool read Orbax checkpoints and manager roots") {
  if (!have_testdata()) return;
  const std::string v1 =
      testdata() + "/compat/v1_checkpoints/composite_checkpoint/checkpoint_metadata_present/pytree_checkpointable_has_metadata";
  const std::string v0 = testdata() + "/compat/v0_checkpoints/direct_checkpoint/checkpoint_metadata_present/pytree_checkpointable_has_metadata";
  const cairn::Inspection found = cairn::inspect(v1);
  CHECK(found.kind == cairn::LocationKind::orbax);
  CHECK(std::string(cairn::location_kind_name(found.kind)) == "orbax");
  CHECK(found.metadata.library_version == "orbax (OCDBT, zarr v3)");
  CHECK(cairn::inspect(v0).metadata.library_version == "orbax (OCDBT, zarr v2)");

  const auto arrays = cairn::read_arrays(v1, {"a"}, {.as = cairn::DType::float64});
  REQUIRE(arrays.count("a"));
  const auto a = arrays.at("a").values<double>();
  CHECK(std::vector<double>(a.begin(), a.end()) == std::vector<double>{0, 1, 2, 3, 4, 5, 6, 7});

  const cairn::VerifyReport ok = cairn::verify(v1);
  CHECK(ok.ok());
  CHECK(ok.chunks == 3);
  CHECK(ok.bytes == 68);
  // cairn::load is the wrong function: it names the right one, and not the header this
  // program includes already.
  CHECK_CAIRN_ERROR(cairn::metadata(v1), cairn::ErrorKind::not_found, "read it with cairn::load_orbax or cairn::orbax_metadata");
  try {
    (void)cairn::metadata(v1);
  } catch (const cairn::Error& e) {
    CHECK(std::string(e.what()).find("include <cairn/orbax.hpp>") == std::string::npos);
  }

  test::TempDir tmp;
  SUBCASE("convert to a cairn checkpoint and to safetensors, and back") {
    const std::string ck = tmp.path + "/ck", st = tmp.path + "/s.safetensors";
    cairn::convert(v1, ck);
    State s = cairn::load<State>(ck);
    CHECK(s.a == expected_a);
    CHECK(s.b.c == expected_c);
    CHECK(cairn::metadata(ck).find_item("metadata")->kind == cairn::ItemKind::json);
    cairn::ConvertOptions one;
    one.item = "state";
    cairn::convert(v0, st, one);
    s = cairn::load_safetensors<State>(st);
    CHECK(s.a == expected_a);
    CHECK(s.b.c == expected_c);
  }
  SUBCASE("a CheckpointManager root: its steps listed, the latest read") {
    const std::string root = tmp.path + "/root";
    fs::create_directories(root);
    fs::copy(v0, root + "/100", fs::copy_options::recursive);
    fs::copy(v1, root + "/200", fs::copy_options::recursive);
    const cairn::Inspection r = cairn::inspect(root);
    CHECK(r.kind == cairn::LocationKind::checkpointer_root);
    REQUIRE(r.steps.size() == 2);
    CHECK(r.steps[1].name == "200");
    CHECK(r.steps[1].bytes == 68);
    Run show = cli({"show", root, "b/c"});
    CHECK(show.status == 0);
    CHECK(show.out.find("[1, 2, 3]") != std::string::npos);
    CHECK(show.err.find("200") != std::string::npos);
    CHECK(r.latest_problem.empty());  // Orbax keeps no `latest` marker: nothing is missing
    Run ls = cli({"ls", root});
    CHECK(ls.out.find("100") != std::string::npos);
    CHECK(ls.out.find("warning") == std::string::npos);
    Run verify = cli({"verify", root});
    CHECK(verify.status == 0);
    CHECK(verify.out.find("OK " + root + "/200") != std::string::npos);
  }
  SUBCASE("the tool on one checkpoint, and a damaged one") {
    Run ls = cli({"ls", v1, "--json"});
    CHECK(ls.status == 0);
    const cairn::Json j = cairn::Json::parse(ls.out);
    CHECK(j.at("kind").as_string() == "orbax");
    Run diff = cli({"diff", v0, v1});
    CHECK(diff.status == 1);  // v1 has the JSON checkpointable too
    CHECK(diff.out.find("metadata") != std::string::npos);
    // A flipped byte in the array data of the v0 checkpoint's process database.
    const std::string bad = tmp.path + "/bad";
    fs::copy(v0, bad, fs::copy_options::recursive);
    for (const auto& e : fs::recursive_directory_iterator(bad))
      if (e.is_regular_file()) fs::permissions(e.path(), fs::perms::owner_read | fs::perms::owner_write);
    int refused = 0;
    for (const auto& e : fs::directory_iterator(bad + "/d")) {
      std::string b = test::read_file(e.path().string());
      b[b.size() / 2] ^= 0x10;
      test::write_file(e.path().string(), b);
      Run v = cli({"verify", bad});
      CHECK(v.status != 0);
      refused += v.status != 0;
    }
    CHECK(refused > 0);
  }
}

TEST_CASE("ranks of a coordinator load an Orbax checkpoint together, each its own box, and agree on failure") {
  if (!have_testdata()) return;
  const std::string ckpt =
      testdata() + "/compat/v1_checkpoints/composite_checkpoint/checkpoint_metadata_present/pytree_checkpointable_has_metadata";
  constexpr int ranks = 2;
  cairn::ThreadGroup group(ranks);
  std::vector<Sharded> got(ranks);
  std::vector<std::string> errors(ranks);
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r)
    threads.emplace_back([&, r] {
      const cairn::NamedSharding sh(cairn::Mesh::host_per_process({{"x", ranks}}, 1, r), cairn::PartitionSpec{"x"});
      got[r].a = cairn::ShardedArray<std::int32_t>(sh);
      cairn::LoadOptions o;
      o.coordinator = &group.rank(r);
      try {
        cairn::load_orbax(ckpt, got[r], o);
      } catch (const cairn::Error& e) {
        errors[r] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < ranks; ++r) {
    CAPTURE(r);
    CHECK(errors[r].empty());
    REQUIRE(got[r].a.shards().size() == 1);
    const auto& shard = got[r].a.shards()[0];
    CHECK(shard.box() == cairn::Box{{4 * r}, {4}});
    std::vector<std::int32_t> mine(4);
    std::memcpy(mine.data(), shard.data(), sizeof(std::int32_t) * 4);
    CHECK(mine == std::vector<std::int32_t>(expected_a.begin() + 4 * r, expected_a.begin() + 4 * r + 4));
    CHECK(got[r].b.c == expected_c);
  }
  // One rank asks for a leaf that is not there: every rank fails, with the same error.
  threads.clear();
  for (int r = 0; r < ranks; ++r)
    threads.emplace_back([&, r] {
      cairn::LoadOptions o;
      o.coordinator = &group.rank(r);
      try {
        if (r == 1) {
          Other other;
          cairn::load_orbax(ckpt, other, o);
        } else {
          State s;
          cairn::load_orbax(ckpt, s, o);
        }
        errors[r].clear();
      } catch (const cairn::Error& e) {
        errors[r] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  CHECK(errors[0].find("z") != std::string::npos);
  CHECK(errors[1].find("z") != std::string::npos);
}

TEST_CASE("OCDBT databases cairn writes read back key by key: inline and indirect values, one and two levels") {
  for (std::size_t n : {0, 1, 7, 1024, 1025, 5000}) {
    CAPTURE(n);
    cairn::MemoryStore store;
    std::map<std::string, std::string> truth;
    std::mt19937_64& rng = test::rng();
    {
      cairn::detail::orbax::OcdbtWriter w(store, "db");
      for (std::size_t i = 0; i < n; ++i) {
        // Keys sharing prefixes (as a checkpoint's do), values both sides of the inline limit.
        const std::string key = "params.layer" + std::to_string(i % 97) + "/c/" + std::to_string(i);
        std::string value(rng() % 3 == 0 ? 100 + rng() % 5000 : rng() % 101, '\0');
        for (auto& ch : value) ch = static_cast<char>(rng());
        w.put(key, value);
        truth[key] = value;
      }
      w.finish();
    }
    cairn::detail::orbax::OcdbtDatabase db(store, "db");
    std::map<std::string, std::string> got;
    for (const auto& [k, v] : db.entries()) got[std::string(k)] = db.read(v, std::string(k));
    CHECK(got == truth);
  }
}

// The writer keeps its entries in the order they come and sorts them at finish(): a key put
// twice is refused by the put where it follows itself, else by finish(), before any node is
// written, whichever way it was put.
TEST_CASE("an OCDBT key put twice is refused, next to itself or far from it, and no database is written") {
  namespace o = cairn::detail::orbax;
  for (int way = 0; way < 3; ++way) {
    CAPTURE(way);
    for (bool adjacent : {true, false}) {
      CAPTURE(adjacent);
      cairn::MemoryStore store;
      std::string failed;
      try {
        o::OcdbtWriter w(store, "db");
        const std::vector<std::string> keys = {"b/c/0", "a/zarr.json", "b/zarr.json", "a/c/0"};
        for (const auto& k : keys) w.put(k, std::string(k.size() * 20, 'v'));
        const std::string again = adjacent ? keys.back() : keys.front();
        if (way == 0) w.put(again, "short");
        else if (way == 1) w.put_stream(again, [](auto&& sink, auto&&) { sink("0123456789", 10); });
        else w.put_reference(again, {"ocdbt.process_1/", "d/x"}, 0, 5);
        w.finish();
      } catch (const cairn::Error& e) {
        failed = e.what();
      }
      CHECK(failed.find("an OCDBT key was put twice") != std::string::npos);
      CHECK(failed.find(adjacent ? "a/c/0" : "b/c/0") != std::string::npos);
      CHECK(!store.exists("db/manifest.ocdbt"));
    }
  }
}

TEST_CASE("a value put_kept under many keys is written once, and every key reads it; a copy of it is not shared") {
  // An export's arrays of one dtype and shape share one zarr.json text: the data file holds it
  // once. Three kept texts (one inline-sized) put in turn under 300 keys, between streamed
  // chunks and a plain put of equal bytes, which is written again (only the same string is).
  namespace o = cairn::detail::orbax;
  cairn::MemoryStore store;
  std::mt19937_64& rng = test::rng();
  std::vector<std::string> texts = {std::string(450, 'a'), std::string(700, 'b'), std::string(60, 'c')};
  for (auto& t : texts)
    for (auto& ch : t) ch = static_cast<char>(rng());
  const std::string equal_copy = texts[0];
  std::map<std::string, std::string> truth;
  std::uint64_t chunk_bytes = 0;
  {
    o::OcdbtWriter w(store, "db");
    for (int i = 0; i < 300; ++i) {
      const std::string name = "p" + std::to_string(i);
      const std::string& text = texts[static_cast<std::size_t>(i) % 3];
      w.put_kept(name + "/zarr.json", text);
      truth[name + "/zarr.json"] = text;
      std::string chunk(200 + rng() % 100, '\0');
      for (auto& ch : chunk) ch = static_cast<char>(rng());
      w.put_stream(name + "/c/0", [&](auto&& sink, auto&&) { sink(chunk.data(), chunk.size()); });
      truth[name + "/c/0"] = chunk;
      chunk_bytes += chunk.size();
    }
    w.put("copy/zarr.json", equal_copy);
    truth["copy/zarr.json"] = equal_copy;
    w.finish();
    // The data file: the chunks, the two indirect texts once, the copy, and the tree's nodes.
    const std::string data = "db/" + w.data_name();
    const std::uint64_t values = chunk_bytes + texts[0].size() + texts[1].size() + equal_copy.size();
    const std::uint64_t size = store.open(data)->size();
    CHECK(size >= values);
    // Each text written again for each of its 99 later keys would add this; the tree's nodes
    // of 601 keys are far less.
    const std::uint64_t repeats = 99 * (texts[0].size() + texts[1].size());
    CHECK(size < values + repeats / 2);
  }
  o::OcdbtDatabase db(store, "db");
  std::map<std::string, std::string> got;
  for (const auto& [k, v] : db.entries()) got[std::string(k)] = db.read(v, std::string(k));
  CHECK(got == truth);
}

TEST_CASE("a root OCDBT database points into other databases' data files, as Orbax's merge does") {
  // Twelve process databases (base paths ocdbt.process_1/ and ocdbt.process_10/ share a
  // prefix), values of each read through the root, in one leaf node and in several.
  for (std::size_t per : {3, 200}) {
    CAPTURE(per);
    cairn::MemoryStore store;
    std::map<std::string, std::string> truth;
    std::mt19937_64& rng = test::rng();
    namespace o = cairn::detail::orbax;
    o::OcdbtWriter root(store, "ckpt");
    for (int p = 0; p < 12; ++p) {
      const std::string base = "ocdbt.process_" + std::to_string(p) + "/";
      o::OcdbtWriter w(store, "ckpt/" + base);
      for (std::size_t i = 0; i < per; ++i) {
        std::string value(rng() % 2 ? 101 + rng() % 3000 : rng() % 100, '\0');
        for (auto& ch : value) ch = static_cast<char>(rng());
        const std::string key = "w/c/" + std::to_string(p) + "/" + std::to_string(i);
        w.put(key, value);
        truth[key] = value;
      }
      w.finish();
      w.for_each_value([&](const std::string& key, const o::OcdbtWriter::StoredValue& v) {
        if (v.indirect) root.put_reference(key, {base, w.data_name()}, v.offset, v.length);
        else root.put(key, v.inline_value);
      });
    }
    root.put("w/zarr.json", std::string(300, 'j'));
    truth["w/zarr.json"] = std::string(300, 'j');
    root.finish();
    o::OcdbtDatabase db(store, "ckpt");
    std::map<std::string, std::string> got;
    for (const auto& [k, v] : db.entries()) got[std::string(k)] = db.read(v, std::string(k));
    CHECK(got == truth);
  }
}

// Orbax writes a database per process and grafts them into the root: a checkpoint of more
// processes than a process may open files held every data file open and failed ("Too many
// open files"). Read through DataFiles, at most a quarter of the limit are open at once.
TEST_CASE("a root OCDBT database over more process databases than the open-file limit reads every value") {
  test::TempDir dir;
  cairn::PosixStore store(dir.path);
  namespace o = cairn::detail::orbax;
  std::map<std::string, std::string> truth;
  std::mt19937_64& rng = test::rng();
  o::OcdbtWriter root(store, "ckpt");
  for (int p = 0; p < 80; ++p) {
    const std::string base = "ocdbt.process_" + std::to_string(p) + "/";
    o::OcdbtWriter w(store, "ckpt/" + base);
    for (int i = 0; i < 2; ++i) {
      std::string value(200 + rng() % 3000, '\0');
      for (auto& ch : value) ch = static_cast<char>(rng());
      const std::string key = "w/c/" + std::to_string(p) + "/" + std::to_string(i);
      w.put(key, value);
      truth[key] = value;
    }
    w.finish();
    w.for_each_value([&](const std::string& key, const o::OcdbtWriter::StoredValue& v) {
      REQUIRE(v.indirect);
      root.put_reference(key, {base, w.data_name()}, v.offset, v.length);
    });
  }
  root.finish();
  std::map<std::string, std::string> got;
  std::string failed;
  {
    test::LowFileLimit low(40);  // 80 data files; 16 kept open at once
    try {
      o::OcdbtDatabase db(store, "ckpt");
      for (const auto& [k, v] : db.entries()) got[std::string(k)] = db.read(v, std::string(k));
      for (const auto& [k, v] : db.entries()) got[std::string(k)] = db.read(v, std::string(k));  // each file a second time
    } catch (const std::exception& e) {
      failed = e.what();
    }
  }
  CHECK(failed == "");
  CHECK(got == truth);
}

TEST_CASE("zarr metadata from a hostile file: every mistake a cairn::Error naming the file, never another exception") {
  namespace o = cairn::detail::orbax;
  const std::string head = R"({"zarr_format":3,"node_type":"array","shape":[4],"data_type":"float32",)"
                           R"("chunk_grid":{"name":"regular","configuration":{"chunk_shape":[4]}},"codecs":[{"name":"bytes"}],)";
  // Fill values: bit patterns in hex (big-endian), the special names, and numbers.
  CHECK(o::parse_zarr_metadata(head + R"("fill_value":"0x3f800000"})", 3, "f", "k").fill == std::string("\x00\x00\x80\x3f", 4));
  CHECK(o::parse_zarr_metadata(head + R"("fill_value":"NaN"})", 3, "f", "k").fill.size() == 4);
  CHECK(o::parse_zarr_metadata(head + R"("fill_value":1.5})", 3, "f", "k").fill == std::string("\x00\x00\xc0\x3f", 4));
  for (const char* bad : {R"("fill_value":"0xZZ800000"})", R"("fill_value":"0x3f80"})", R"("fill_value":[1]})",
                          R"("fill_value":"one"})"}) {
    CAPTURE(bad);
    try {
      o::parse_zarr_metadata(head + bad, 3, "the-file", "the-key");
      FAIL("accepted");
    } catch (const cairn::Error& e) {
      CHECK(e.file() == "the-file");
    }
  }
  for (const char* bad : {"", "{", "[]", R"({"zarr_format":3})", R"({"zarr_format":2,"dtype":">f4","shape":[2],"chunks":[2]})",
                          R"({"zarr_format":2,"dtype":"<f4","shape":[2],"chunks":[0]})",
                          R"({"zarr_format":2,"dtype":"|O","shape":[2],"chunks":[2]})",
                          R"({"zarr_format":2,"dtype":"<U8","shape":[2],"chunks":[2]})",
                          R"({"zarr_format":3,"node_type":"array","data_type":"Float 32","shape":[2]})",
                          R"({"zarr_format":2,"dtype":"int4","shape":[-2],"chunks":[2]})",
                          R"({"zarr_format":2,"dtype":"<f4","shape":[-2],"chunks":[2]})",
                          R"({"zarr_format":2,"dtype":"<f4","shape":[2],"chunks":[2],"compressor":{"id":"blosc"}})",
                          // A chunk key separator other than the spec's two would be spliced into file names.
                          R"({"zarr_format":3,"node_type":"array","shape":[4],"data_type":"float32","chunk_grid":{"name":"regular",)"
                          R"("configuration":{"chunk_shape":[4]}},"codecs":[{"name":"bytes"}],"chunk_key_encoding":{"name":"default",)"
                          R"("configuration":{"separator":"\\"}}})"}) {
    CAPTURE(bad);
    CHECK_THROWS_AS(o::parse_zarr_metadata(bad, std::string(bad).find("\"zarr_format\":2") != std::string::npos ? 2 : 3, "f", "k"),
                    cairn::Error);
  }
  // A dtype cairn does not have, as TensorStore spells it: the shape, for the listing.
  CHECK(o::parse_zarr_metadata(R"({"zarr_format":2,"dtype":"<c8","shape":[2,3],"chunks":[2,3]})", 2, "f", "k").unread_dtype == "<c8");
  CHECK(o::parse_zarr_metadata(R"({"zarr_format":2,"dtype":"int4","shape":[2],"chunks":[2]})", 2, "f", "k").shape == cairn::Shape{2});
  CHECK(o::parse_zarr_metadata(R"({"zarr_format":3,"node_type":"array","data_type":"float8_e4m3fnuz","shape":[7]})", 3, "f", "k")
            .unread_dtype == "float8_e4m3fnuz");
}

// Orbax writes dtypes cairn does not have (int4, float8_e4m3fnuz, complex64, ...). A checkpoint
// holding one is not refused whole: its other arrays read, and the one cairn cannot read is
// listed, refused wherever a load or a conversion would take it, and left out where asked, as a
// safetensors tensor of such a dtype is (the export's .zarray and zarr.json edited to say so).
TEST_CASE("an Orbax array of a dtype cairn does not have is listed, refused by name, and left out where asked") {
  test::TempDir dir;
  const std::map<std::string, std::vector<float>> src = {{"w", {1, 2, 3}}, {"q", {4, 5}}};
  for (const bool zarr3 : {false, true}) {
    CAPTURE(zarr3);
    const std::string ckpt = dir / (zarr3 ? "v3" : "v2");
    cairn::OrbaxSaveOptions o;
    o.layout = cairn::OrbaxLayout::v0_standard;
    o.ocdbt = false;
    o.zarr3 = zarr3;
    cairn::save_orbax(ckpt, src, o);
    const std::string meta = ckpt + (zarr3 ? "/q/zarr.json" : "/q/.zarray");
    std::string text = test::read_file(meta);
    const std::string from = zarr3 ? "\"float32\"" : "\"<f4\"";
    const std::string to = zarr3 ? "\"complex64\"" : "\"int4\"";
    REQUIRE(text.find(from) != std::string::npos);
    text.replace(text.find(from), from.size(), to);
    test::write_file(meta, text);
    const std::string dtype = zarr3 ? "complex64" : "int4";

    const cairn::OrbaxCheckpoint info = cairn::orbax_metadata(ckpt);
    const cairn::ItemRecord* item = info.metadata.find_item("state");
    REQUIRE(item);
    CHECK(item->leaves.size() == 1);
    REQUIRE(item->unread.size() == 1);
    CHECK(item->unread[0].path.str() == "q");
    CHECK(item->unread[0].reason == "dtype " + dtype + "[2], which cairn does not read");
    CHECK(info.not_read == std::vector<std::string>{"q: dtype " + dtype + "[2], which cairn does not read"});
    using Flat = std::map<std::string, std::vector<float>>;
    CHECK_CAIRN_ERROR(cairn::load_orbax<Flat>(ckpt), cairn::ErrorKind::dtype_mismatch, "1 stored leaf cannot be read: q (dtype " + dtype);
    cairn::LoadOptions skip;
    skip.skip = {"q"};
    const Flat back = cairn::load_orbax<Flat>(ckpt, skip);
    CHECK(back == Flat{{"w", {1, 2, 3}}});
    Flat partial;
    CHECK(cairn::load_orbax(ckpt, partial, cairn::LoadOptions::partial()).unexpected == std::vector<std::string>{"q"});
    CHECK(partial == Flat{{"w", {1, 2, 3}}});
    CHECK_CAIRN_ERROR(cairn::read_arrays(ckpt, {}), cairn::ErrorKind::dtype_mismatch, "q (dtype " + dtype);
    CHECK(cairn::read_arrays(ckpt, {"w"}).at("w").bytes.size() == 12);
    CHECK_CAIRN_ERROR(cairn::convert(ckpt, dir / "c"), cairn::ErrorKind::dtype_mismatch, "--exclude 'q'");
    cairn::ConvertOptions exclude;
    exclude.exclude = {"q"};
    cairn::convert(ckpt, dir / (zarr3 ? "c3" : "c2"), exclude);
    CHECK(cairn::load<Flat>(dir / (zarr3 ? "c3" : "c2")) == Flat{{"w", {1, 2, 3}}});
  }
}

// None and empty containers are in _METADATA marked skip_deserialize, with nothing stored for
// them (Orbax 0.12.4's PyTreeCheckpointer wrote the three below): nothing to read, and nothing
// listed as not read (they were listed as "in the msgpack file `checkpoint`, which is not
// there").
TEST_CASE("None and empty containers in _METADATA are nothing to read, not leaves missing from a msgpack file") {
  test::TempDir dir;
  const std::string ckpt = dir / "c";
  cairn::save_orbax(ckpt, std::map<std::string, std::vector<float>>{{"w", {1, 2}}});
  const std::string meta = ckpt + "/state/_METADATA";
  std::string text = test::read_file(meta);
  const std::string anchor = "\"tree_metadata\":{";
  REQUIRE(text.find(anchor) != std::string::npos);
  std::string extra;
  for (const char* type : {"Dict", "List", "Tuple", "None"})
    extra += std::string("\"('e") + type + "',)\":{\"key_metadata\":[{\"key\":\"e" + type +
             "\",\"key_type\":2}],\"value_metadata\":{\"value_type\":\"" + type + "\",\"skip_deserialize\":true}},";
  text.insert(text.find(anchor) + anchor.size(), extra);
  test::write_file(meta, text);
  const cairn::OrbaxCheckpoint info = cairn::orbax_metadata(ckpt);
  CHECK(info.not_read.empty());
  CHECK(info.metadata.leaves().size() == 1);
  using Flat = std::map<std::string, std::vector<float>>;
  CHECK(cairn::load_orbax<Flat>(ckpt) == Flat{{"w", {1, 2}}});
  // A value type cairn has no leaf for is listed and refused by name, as an array of a dtype
  // cairn does not have is (it was listed, and a strict load went on without it).
  text.insert(text.find(anchor) + anchor.size(), R"x("('custom',)":{"key_metadata":[{"key":"custom","key_type":2}],)x"
                                                 R"x("value_metadata":{"value_type":"my.Custom","skip_deserialize":false}},)x");
  test::write_file(meta, text);
  const cairn::OrbaxCheckpoint custom = cairn::orbax_metadata(ckpt);
  CHECK(custom.not_read == std::vector<std::string>{"custom: value type 'my.Custom', which cairn does not read"});
  REQUIRE(custom.metadata.items.at(0).unread.size() == 1);
  CHECK_CAIRN_ERROR(cairn::load_orbax<Flat>(ckpt), cairn::ErrorKind::dtype_mismatch, "custom (value type 'my.Custom'");
  cairn::LoadOptions skip;
  skip.skip = {"custom"};
  CHECK(cairn::load_orbax<Flat>(ckpt, skip) == Flat{{"w", {1, 2}}});
  // A value _METADATA says Orbax aggregated into the msgpack file `checkpoint`, which is not
  // there: listed, and refused by a strict load by name (a strict load went on without it).
  text.insert(text.find(anchor) + anchor.size(), R"x("('agg',)":{"key_metadata":[{"key":"agg","key_type":2}],)x"
                                                 R"x("value_metadata":{"value_type":"scalar","skip_deserialize":true}},)x");
  test::write_file(meta, text);
  const cairn::OrbaxCheckpoint agg = cairn::orbax_metadata(ckpt);
  CHECK(std::count(agg.not_read.begin(), agg.not_read.end(),
                   "agg: _METADATA says it is in the msgpack file `checkpoint`, which is not there") == 1);
  CHECK(agg.metadata.items.at(0).unread.size() == 2);
  CHECK_CAIRN_ERROR(cairn::load_orbax<Flat>(ckpt, skip), cairn::ErrorKind::dtype_mismatch, "agg (_METADATA says");
  skip.skip = {"custom", "agg"};
  CHECK(cairn::load_orbax<Flat>(ckpt, skip) == Flat{{"w", {1, 2}}});
  // verify lists them as not verified; of a manager root, each under its step's name (a
  // root's report left its steps' out).
  CHECK(cairn::verify(cairn::Location(ckpt)).not_verified.size() == 2);
  const std::string root = dir / "root";
  fs::create_directories(root);
  fs::rename(ckpt, root + "/7");
  const cairn::VerifyReport v = cairn::verify(cairn::Location(root));
  CHECK(v.kind == cairn::LocationKind::checkpointer_root);
  CHECK(v.ok());
  CHECK(std::count(v.not_verified.begin(), v.not_verified.end(), "7/custom: value type 'my.Custom', which cairn does not read") == 1);
  CHECK(v.not_verified.size() == 2);
}

// A save Orbax has not finished is not loaded, as a cairn checkpoint without its marker is not:
// its temporary directory (Orbax 0.12.4 left "NAME.orbax-checkpoint-tmp" where a save failed),
// or a checkpoint written in place whose _CHECKPOINT_METADATA has no commit time beside no
// commit_success.txt. In a manager root such a step is incomplete, and the latest finished
// step is the one loaded.
namespace {
// `count` arrays of 1 to `longest` float32 values (random, none a NaN), named w<first + i>.
std::map<std::string, std::vector<float>> many_arrays(int count, int longest, int first) {
  std::map<std::string, std::vector<float>> state;
  std::mt19937_64& g = test::rng();
  for (int i = 0; i < count; ++i) {
    std::vector<float> v(1 + g() % static_cast<std::uint64_t>(longest));
    for (float& x : v) x = static_cast<float>(g() % 10000) / 7.0f;
    state["w" + std::to_string(first + i)] = std::move(v);
  }
  return state;
}
}  // namespace

// A directory per parameter keeps each chunk in a file of its own: a load held every one of
// them open to its end, so a checkpoint of more arrays than the descriptor limit (1,024 on
// most systems) failed with "Too many open files". Each is let go once it is read.
TEST_CASE("an Orbax checkpoint of a file per chunk saves, loads, verifies and converts under a low limit of open files") {
  test::TempDir dir;
  using Flat = std::map<std::string, std::vector<float>>;
  const Flat state = many_arrays(400, 300, 0);
  for (const bool zarr3 : {true, false})
    for (const int zstd : {0, 3}) {
      CAPTURE(zarr3);
      CAPTURE(zstd);
      const std::string ckpt = dir / ("c" + std::to_string(zarr3) + std::to_string(zstd));
      cairn::OrbaxSaveOptions o;
      o.ocdbt = false;
      o.zarr3 = zarr3;
      o.zstd_level = zstd;
      std::optional<Flat> back;
      std::optional<cairn::VerifyReport> v;
      std::string failed;
      {
        test::LowFileLimit low(100);  // far fewer than the checkpoint's 400 chunk files
        try {
          cairn::save_orbax(ckpt, state, o);
          back = cairn::load_orbax<Flat>(ckpt);
          v = cairn::verify(cairn::Location(ckpt));
          cairn::convert(ckpt, dir / ("x" + std::to_string(zarr3) + std::to_string(zstd)), {.to = cairn::ConvertTo::checkpoint});
        } catch (const std::exception& e) {
          failed = e.what();
        }
      }
      CHECK(failed == "");
      REQUIRE(back);
      CHECK(*back == state);
      REQUIRE(v);
      CHECK(v->ok());
      CHECK(v->chunks == state.size());
      CHECK(cairn::load<Flat>(dir / ("x" + std::to_string(zarr3) + std::to_string(zstd))) == state);
    }
}

// In the layout of a directory per parameter, a parameter's name is a path below the
// checkpoint, and _METADATA is untrusted: a name that climbs out of it ("../other/w") must not
// read the arrays it finds there, one at a time or side by side.
// Two leaves that join to one parameter name (an index and a map key of one text, which a
// custom tree node may give; they print alike) are refused with both paths named, wherever
// they are in the tree: the names are checked after the last leaf, not one by one.
TEST_CASE("two key paths of one Orbax parameter name are refused, both named") {
  using cairn::KeyEntry;
  for (std::size_t between : {0, 1, 500}) {
    CAPTURE(between);
    cairn::detail::orbax::OrbaxMetadataText text("ckpt");
    std::vector<cairn::KeyPath> paths;
    paths.emplace_back(std::vector<KeyEntry>{KeyEntry::field("params"), KeyEntry::index(3)});
    for (std::size_t i = 0; i < between; ++i)
      paths.emplace_back(std::vector<KeyEntry>{KeyEntry::field("params"), KeyEntry::key("w" + std::to_string(i))});
    paths.emplace_back(std::vector<KeyEntry>{KeyEntry::field("params"), KeyEntry::key("3")});
    for (const auto& p : paths) {
      const std::string name = text.begin_leaf(p);
      text.add_array(nullptr, {2}, {2});
    }
    std::string failed;
    try {
      text.check_names();
    } catch (const cairn::Error& e) {
      failed = e.what();
    }
    CHECK(failed.find("key paths 'params/3' and 'params/3' both become the Orbax parameter name 'params.3'") !=
          std::string::npos);
    CHECK(failed.find("ckpt") != std::string::npos);
    // Without the repeated one, the same names pass.
    cairn::detail::orbax::OrbaxMetadataText fine("ckpt");
    for (std::size_t i = 0; i + 1 < paths.size(); ++i) fine.begin_leaf(paths[i]);
    CHECK_NOTHROW(fine.check_names());
  }
}

TEST_CASE("an Orbax parameter name that leads out of its checkpoint is refused, not read from there") {
  test::TempDir dir;
  using Flat = std::map<std::string, std::vector<float>>;
  cairn::OrbaxSaveOptions o;
  o.ocdbt = false;
  o.layout = cairn::OrbaxLayout::v0_standard;  // the arrays at <dir>/<name>/
  cairn::save_orbax(dir / "other", Flat{{"w", {1, 2, 3}}}, o);
  const auto replace_all = [](std::string s, const std::string& from, const std::string& to) {
    for (std::size_t at = 0; (at = s.find(from, at)) != std::string::npos; at += to.size()) s.replace(at, from.size(), to);
    return s;
  };
  for (const int arrays : {1, 40}) {  // 40: the metadata files read side by side
    for (const std::string& name : std::vector<std::string>{"../other/w", "./w", "a//w", std::string("w\0x", 3)}) {
      CAPTURE(arrays);
      CAPTURE(name);
      const std::string ckpt = dir / ("ck" + std::to_string(arrays) + "-" + std::to_string(name.size()));
      fs::remove_all(ckpt);
      Flat state = many_arrays(arrays, 4, 0);
      state["w"] = {9, 9};
      cairn::save_orbax(ckpt, state, o);
      std::string meta = test::read_file(ckpt + "/_METADATA");
      REQUIRE(meta.find("\"key\":\"w\"") != std::string::npos);
      const std::string escaped = name.find('\0') != std::string::npos ? "w\\u0000x" : name;
      meta = replace_all(replace_all(meta, "\"key\":\"w\"", "\"key\":\"" + escaped + "\""), "('w',)", "('" + escaped + "',)");
      test::write_file(ckpt + "/_METADATA", meta);
      if (name == "./w") fs::create_directories(ckpt + "/a");  // as it would be there
      try {
        const Flat back = cairn::load_orbax<Flat>(ckpt, cairn::LoadOptions::partial());
        FAIL("loaded, w = " << (back.count(name) ? back.at(name).size() : 0) << " values");
      } catch (const cairn::Error& e) {
        CHECK(e.kind() == cairn::ErrorKind::corrupt);
        CHECK(e.file() == ckpt + "/_METADATA");
        CHECK(std::string(e.what()).find("no path inside the checkpoint") != std::string::npos);
      }
      CHECK_THROWS_AS(cairn::inspect(cairn::Location(ckpt)), cairn::Error);
    }
  }
}

// A load of many arrays of a file per chunk reads their zarr metadata files and their chunks
// side by side (one thread per core): what is damaged is still named, the first in order where
// the metadata is, and nothing else changes.
TEST_CASE("an Orbax checkpoint of a file per chunk read side by side names the array whose files are damaged") {
  test::TempDir dir;
  using Flat = std::map<std::string, std::vector<float>>;
  const Flat state = many_arrays(300, 200, 1000);  // (names of one length: _METADATA's order is the map's)
  for (const bool zarr3 : {true, false}) {
    CAPTURE(zarr3);
    const std::string ckpt = dir / (zarr3 ? "v3" : "v2");
    cairn::OrbaxSaveOptions o;
    o.ocdbt = false;
    o.zarr3 = zarr3;
    cairn::save_orbax(ckpt, state, o);
    REQUIRE(cairn::load_orbax<Flat>(ckpt) == state);
    const std::string meta = zarr3 ? "zarr.json" : ".zarray";
    const std::string chunk = zarr3 ? "c/0" : "0";
    // Two arrays' metadata gone: the load names the first in _METADATA's order, every time.
    const fs::path a = fs::path(ckpt) / "state" / "w1040" / meta, b = fs::path(ckpt) / "state" / "w1200" / meta;
    fs::rename(a, a.string() + ".away");
    fs::rename(b, b.string() + ".away");
    for (int round = 0; round < 3; ++round) {
      std::string what;
      try {
        (void)cairn::load_orbax<Flat>(ckpt);
      } catch (const cairn::Error& e) {
        what = e.what();
      }
      CHECK(what.find("'w1040' has no zarr metadata") != std::string::npos);
      CHECK(what.find("w1200") == std::string::npos);
    }
    fs::rename(a.string() + ".away", a);
    fs::rename(b.string() + ".away", b);
    // Each metadata file is opened once, also where _METADATA does not say which zarr version
    // it is (zarr.json is looked for first: once per array, not again after being missed).
    if (!zarr3) {
      const std::string meta_path = ckpt + "/state/_METADATA";
      std::string m = test::read_file(meta_path);
      const std::size_t at = m.find(",\"use_zarr3\":false");
      REQUIRE(at != std::string::npos);
      m.erase(at, std::strlen(",\"use_zarr3\":false"));
      fs::remove(meta_path);
      test::write_file(meta_path, m);
      std::mutex mu;
      std::map<std::string, int> opens;
      {
        test::FaultInjection count([&](const std::string& call, const std::string& path) {
          if (call == "open") {
            std::lock_guard<std::mutex> lock(mu);
            ++opens[path];
          }
          return 0;
        });
        REQUIRE(cairn::load_orbax<Flat>(ckpt) == state);
      }
      int json = 0, zarray = 0;
      for (const auto& [path, n] : opens) {
        const std::string p = path;  // (clang 14 cannot capture a structured binding)
        CAPTURE(p);
        if (path.ends_with("/zarr.json") || path.ends_with("/.zarray")) {
          CHECK(n == 1);
          ++(path.ends_with("/zarr.json") ? json : zarray);
        }
      }
      CHECK(json == 300);
      CHECK(zarray == 300);
      // A zarr.json that is a symbolic link beside a good .zarray is refused, not passed over
      // for the .zarray: only a name that is not there is (as a load reading them one by one).
      const fs::path link = fs::path(ckpt) / "state" / "w1077" / "zarr.json";
      fs::create_symlink("../w1078/.zarray", link);
      CHECK_CAIRN_ERROR(cairn::load_orbax<Flat>(ckpt), cairn::ErrorKind::corrupt, "symbolic link");
      fs::remove(link);
      CHECK(cairn::load_orbax<Flat>(ckpt) == state);
    }
    // A chunk cut short: the load names its array and its file.
    const fs::path c = fs::path(ckpt) / "state" / "w1123" / chunk;
    const std::string bytes = test::read_file(c);
    fs::resize_file(c, bytes.size() - 3);
    CHECK_THROWS_WITH_AS(cairn::load_orbax<Flat>(ckpt), doctest::Contains("w1123"), cairn::Error);
    fs::remove(c);
    test::write_file(c, bytes);
    CHECK(cairn::load_orbax<Flat>(ckpt) == state);
  }
}

TEST_CASE("the records of many arrays of a file per chunk are made on two threads, each half reading its own metadata files (ThreadSanitizer runs this)") {
  // At least parallel_records_min arrays: each half of _METADATA's entries has its zarr
  // metadata files read and parsed on a thread of its own (PytreeReader::add_on_two_threads),
  // and the halves' records are joined in order.
  using Flat = std::map<std::string, std::vector<float>>;
  const int n = static_cast<int>(cairn::detail::parallel_records_min) + 301;
  const Flat state = many_arrays(n, 9, 10000);  // (names of one length: _METADATA's order is the map's)
  std::vector<std::string> names;
  for (const auto& [k, v] : state) names.push_back(k);
  const std::size_t half = names.size() / 2;
  if (cairn::detail::usable_cores() < 2) MESSAGE("one core: the records are made on one thread, as before");
  for (const bool zarr3 : {true, false}) {
    CAPTURE(zarr3);
    test::TempDir dir;
    const std::string ckpt = dir / "c";
    cairn::OrbaxSaveOptions o;
    o.ocdbt = false;
    o.zarr3 = zarr3;
    cairn::save_orbax(ckpt, state, o);
    const Flat back = cairn::load_orbax<Flat>(ckpt);
    REQUIRE(back.size() == state.size());
    for (const auto& [k, v] : state) CHECK_MESSAGE(test::same_bits(back.at(k), v), k);
    const std::string meta = zarr3 ? "zarr.json" : ".zarray";
    // Which thread opened each array's metadata file (with a hook set, each is opened the
    // ordinary way, on the thread that reads it): every file of a half on its half's thread.
    if (cairn::detail::usable_cores() >= 2) {
      std::mutex mu;
      std::map<std::string, std::thread::id> opened_on;
      {
        test::FaultInjection watch([&](const std::string& call, const std::string& path) {
          if (call == "open" && path.ends_with("/" + meta)) {
            std::lock_guard<std::mutex> lock(mu);
            opened_on[fs::path(path).parent_path().filename().string()] = std::this_thread::get_id();
          }
          return 0;
        });
        REQUIRE(cairn::load_orbax<Flat>(ckpt) == state);
      }
      REQUIRE(opened_on.size() == names.size());
      const std::thread::id first = opened_on.at(names.front()), second = opened_on.at(names.back());
      CHECK(first != second);
      std::size_t off_thread = 0;
      for (std::size_t i = 0; i < names.size(); ++i) off_thread += opened_on.at(names[i]) != (i < half ? first : second);
      CHECK(off_thread == 0);
    }
    // An error is the one the entries in order meet first: a metadata file gone in each half
    // names the first half's; in the second half alone, its own.
    const fs::path a = fs::path(ckpt) / "state" / names[100] / meta, b = fs::path(ckpt) / "state" / names[half + 50] / meta;
    auto load_error = [&] {
      try {
        (void)cairn::load_orbax<Flat>(ckpt);
      } catch (const cairn::Error& e) {
        return std::string(e.what());
      }
      return std::string("(loaded)");
    };
    fs::rename(b, b.string() + ".away");
    const std::string second_only = load_error();
    CHECK_MESSAGE(second_only.find("'" + names[half + 50] + "' has no zarr metadata") != std::string::npos, second_only);
    fs::rename(a, a.string() + ".away");
    for (int round = 0; round < 2; ++round) {
      const std::string both = load_error();
      CHECK_MESSAGE(both.find("'" + names[100] + "' has no zarr metadata") != std::string::npos, both);
      CHECK(both.find(names[half + 50]) == std::string::npos);
    }
  }
}

// A load of many small chunks each in a file of its own offers a window of their files to the
// view first (OrbaxView::read_ahead): it reads them whole together (through io_uring on a
// POSIX store) and serves the chunks' reads from memory until the handle goes.
TEST_CASE("small chunks' files read ahead together are served from memory while their handle lives") {
  namespace ob = cairn::detail::orbax;
  test::TempDir dir;
  using Flat = std::map<std::string, std::vector<float>>;
  const Flat state = many_arrays(100, 60, 0);
  for (const bool zstd : {false, true}) {
    CAPTURE(zstd);
    const std::string ckpt = dir / (zstd ? "z" : "raw"), away = ckpt + ".away";
    cairn::OrbaxSaveOptions o;
    o.ocdbt = false;
    o.zstd_level = zstd ? 3 : 0;
    cairn::save_orbax(ckpt, state, o);
    cairn::PosixStore store;
    ob::OrbaxView view(store, ckpt);
    const cairn::OrbaxCheckpoint c = ob::open_orbax(view, nullptr, true);
    const cairn::ItemRecord* item = c.metadata.find_item(cairn::default_item_name);
    REQUIRE(item);
    REQUIRE(item->leaves.size() == state.size());
    std::vector<std::string> keys;
    for (const auto& l : item->leaves) keys.push_back(l.chunks.at(0).file);
    auto read_all = [&](const std::string& k) {
      const auto r = view.open(k);
      std::string bytes(static_cast<std::size_t>(r->size()), '\0');
      r->read_at(bytes.data(), bytes.size(), 0);
      return bytes;
    };
    std::map<std::string, std::string> want;
    for (const auto& k : keys) want[k] = read_all(k);
    // Fewer files than the loader offers at once: nothing held.
    CHECK(view.read_ahead({keys.begin(), keys.begin() + 10}, 1 << 20) == nullptr);
    auto held = view.read_ahead(keys, 1 << 20);
    REQUIRE(held != nullptr);
    fs::rename(ckpt, away);  // every file gone: what reads now comes from memory
    for (const auto& k : keys) {
      CAPTURE(k);
      CHECK(read_all(k) == want[k]);
    }
    held.reset();
    // Let go: the files are read again, and are not there (a missing chunk reads as zarr's
    // fill value, so the bytes differ, or the read fails).
    int differ = 0;
    for (const auto& k : keys) {
      try {
        differ += read_all(k) != want[k];
      } catch (const cairn::Error&) {
        ++differ;
      }
    }
    CHECK(differ > 0);
    fs::rename(away, ckpt);
    CHECK(cairn::load_orbax<Flat>(ckpt) == state);
  }
}

// A zstd chunk stored in more bytes than the decoder's input window (zstd_input_window_bytes)
// is read as it decodes, a window at a time; before, it was read whole beside its target.
TEST_CASE("a zstd chunk larger than the decoder's input window loads bit-exactly, whole and in shards, and damage is refused") {
  test::TempDir dir;
  using Flat = std::map<std::string, std::vector<float>>;
  using Sharded = std::map<std::string, cairn::ShardedArray<float>>;
  // Random bits do not compress: the chunk is stored in about its 20 MiB.
  const Flat state{{"big", test::random_bits<float>(5 << 20)}, {"small", test::random_bits<float>(7)}};
  const auto same = [&](const Flat& f) {  // (random bits hold NaNs: compared bit by bit)
    return f.size() == 2 && test::same_bits(f.at("big"), state.at("big")) && test::same_bits(f.at("small"), state.at("small"));
  };
  struct Way {
    const char* name;
    bool ocdbt, zarr3;
    const char* chunk;  // the big array's chunk file, in the layouts of a file per chunk
  };
  for (const Way way : {Way{"ocdbt", true, true, ""}, Way{"dirs3", false, true, "c/0"}, Way{"dirs2", false, false, "0"}}) {
    const std::string way_name = way.name;
    CAPTURE(way_name);
    const std::string ckpt = dir / way.name;
    cairn::OrbaxSaveOptions o;
    o.ocdbt = way.ocdbt;
    o.zarr3 = way.zarr3;
    o.zstd_level = 1;
    const cairn::OrbaxSaveReport r = cairn::save_orbax(ckpt, state, o);
    REQUIRE(r.stored_bytes > (std::uint64_t{16} << 20));
    CHECK(same(cairn::load_orbax<Flat>(ckpt)));
    // In three shards: each reads its third of the chunk.
    Sharded sh;
    sh["big"] = cairn::ShardedArray<float>(cairn::NamedSharding(cairn::Mesh::host({{"x", 3}}), cairn::PartitionSpec{"x"}));
    sh["small"] = cairn::ShardedArray<float>(cairn::NamedSharding(cairn::Mesh::host({{"x", 1}}), cairn::PartitionSpec{"x"}));
    cairn::load_orbax(ckpt, sh);
    CHECK(test::same_bits(sh["big"].gather(), state.at("big")));
    CHECK(cairn::verify(cairn::Location(ckpt)).ok());
    if (!*way.chunk) continue;
    const fs::path c = fs::path(ckpt) / "state" / "big" / way.chunk;
    const std::string bytes = test::read_file(c);
    // Cut short, in its last window: refused, naming the array.
    fs::resize_file(c, bytes.size() - 100);
    CHECK_THROWS_WITH_AS(cairn::load_orbax<Flat>(ckpt), doctest::Contains("big"), cairn::Error);
    // Bytes after its frame: refused too.
    fs::remove(c);
    test::write_file(c, bytes + std::string(64, '\x07'));
    CHECK_THROWS_WITH_AS(cairn::load_orbax<Flat>(ckpt), doctest::Contains("big"), cairn::Error);
    fs::remove(c);
    test::write_file(c, bytes);
    CHECK(same(cairn::load_orbax<Flat>(ckpt)));
  }
}

TEST_CASE("an Orbax save that has not finished is incomplete, and a manager root's latest is its last finished step") {
  test::TempDir dir;
  auto state = [](std::int64_t step) { return std::map<std::string, std::int64_t>{{"step", step}}; };
  const std::string root = dir / "root";
  for (int step : {1, 2}) cairn::save_orbax(root + "/" + std::to_string(step), state(step));
  // Step 2 as it is while Orbax writes it in place: no commit time yet, no commit_success.txt.
  const std::string cm = root + "/2/_CHECKPOINT_METADATA";
  std::string text = test::read_file(cm);
  const std::size_t at = text.find("\"commit_timestamp_nsecs\":");
  REQUIRE(at != std::string::npos);
  const std::size_t end = text.find_first_of(",}", at);
  text.replace(at, end - at, "\"commit_timestamp_nsecs\":null");
  test::write_file(cm, text);
  fs::remove(root + "/2/commit_success.txt");
  CHECK_CAIRN_ERROR(cairn::orbax_metadata(root + "/2"), cairn::ErrorKind::incomplete, "no commit time");
  CHECK_CAIRN_ERROR(cairn::load_orbax<StepOnly>(root + "/2"), cairn::ErrorKind::incomplete, "/2");
  const cairn::Inspection r = cairn::inspect(root);
  CHECK(r.kind == cairn::LocationKind::checkpointer_root);
  REQUIRE(r.steps.size() == 1);
  CHECK(r.steps[0].name == "1");
  CHECK(r.incomplete == std::vector<std::string>{"2"});
  CHECK(cairn::load_orbax<StepOnly>(root).step == 1);
  // Finished (commit_success.txt written): a step again, and the latest.
  test::write_file(root + "/2/commit_success.txt", "Checkpoint commit was successful");
  CHECK(cairn::load_orbax<StepOnly>(root).step == 2);
  // Orbax's temporary directory, whatever it holds.
  fs::copy(root + "/1", dir / "3.orbax-checkpoint-tmp-1795845694", fs::copy_options::recursive);
  CHECK_CAIRN_ERROR(cairn::load_orbax<StepOnly>(dir / "3.orbax-checkpoint-tmp-1795845694"), cairn::ErrorKind::incomplete,
                    "temporary directory");
  fs::copy(root + "/1", root + "/3.orbax-checkpoint-tmp", fs::copy_options::recursive);
  CHECK(cairn::inspect(root).steps.size() == 2);
  CHECK(cairn::load_orbax<StepOnly>(root).step == 2);
}

// A directory holding Orbax checkpoints under any names, alone or beside cairn's: each is
// listed and verified, none left out unsaid. (cairn ls of exports named "jax_a" and "jax_b"
// failed, calling the directory a CheckpointManager's and pointing at load_orbax; beside a
// cairn checkpoint they were not listed, and cairn verify said OK having checked only it.)
TEST_CASE("a directory of Orbax checkpoints under any names, alone or beside cairn's, is listed and verified whole") {
  test::TempDir dir;
  const std::string only = dir / "only", mixed = dir / "mixed";
  const std::map<std::string, std::vector<float>> params{{"w", {1.5f, -2.0f}}};
  for (const std::string& d : {only, mixed}) {
    cairn::save_orbax(d + "/jax_a", params);
    cairn::OrbaxSaveOptions v0;
    v0.layout = cairn::OrbaxLayout::v0_standard;
    v0.ocdbt = false;
    cairn::save_orbax(d + "/jax_b", params, v0);
    fs::create_directories(d + "/notes");  // neither
  }
  cairn::save(mixed + "/cpp", params);
  // An Orbax save in progress, under a name that is no step: Orbax's temporary directory.
  const std::string tmp = "jax_c.orbax-checkpoint-tmp-1764400000";
  fs::copy(only + "/jax_a", only + "/" + tmp, fs::copy_options::recursive);

  const cairn::Inspection o = cairn::inspect(only);
  CHECK(o.kind == cairn::LocationKind::checkpointer_root);
  CHECK(o.plain_directory);
  CHECK(o.incomplete == std::vector<std::string>{tmp});
  REQUIRE(o.steps.size() == 2);
  CHECK(o.steps[0].name == "jax_a");
  CHECK(o.steps[0].kind == cairn::LocationKind::orbax);
  CHECK(o.steps[0].bytes == 8);
  CHECK(o.steps[1].name == "jax_b");
  const cairn::Inspection m = cairn::inspect(mixed);
  REQUIRE(m.steps.size() == 3);
  CHECK(m.steps[0].name == "cpp");
  CHECK(m.steps[0].kind == cairn::LocationKind::checkpoint);
  CHECK(m.steps[1].kind == cairn::LocationKind::orbax);
  CHECK(m.steps[2].kind == cairn::LocationKind::orbax);
  CHECK(m.steps[2].error.empty());

  Run ls = cli({"ls", mixed});
  CHECK(ls.status == 0);
  CHECK(ls.out.find(mixed + ": directory of 3 checkpoints") != std::string::npos);
  CHECK(ls.out.find("  jax_b  orbax  ") != std::string::npos);
  CHECK(ls.out.find("  cpp  orbax") == std::string::npos);
  CHECK_MESSAGE(ls.out.find("\n  cpp    cairn  20") != std::string::npos, ls.out);  // padded to jax_b, and said to be cairn's
  const Run ls_only = cli({"ls", only});
  CHECK(ls_only.status == 0);
  CHECK_MESSAGE(ls_only.out.find("  " + tmp + "  incomplete: ") != std::string::npos, ls_only.out);
  const cairn::Json j = cairn::Json::parse(cli({"ls", only, "--json"}).out);
  CHECK(j.at("steps").as_array().at(0).at("kind").as_string() == "orbax");
  Run show = cli({"show", only, "--step", "jax_b", "w"});
  CHECK(show.status == 0);
  CHECK(show.out.find("-2") != std::string::npos);

  const cairn::VerifyReport v = cairn::verify(mixed);
  CHECK(v.ok());
  CHECK(v.checkpoints.size() == 3);
  CHECK(v.chunks == 3);
  // A damaged Orbax checkpoint among them fails the directory's verify, by name.
  for (const auto& e : fs::recursive_directory_iterator(mixed + "/jax_b"))
    if (e.is_regular_file() && e.path().filename() == "zarr.json") fs::remove(e.path());
  Run bad = cli({"verify", mixed});
  CHECK(bad.status == 1);
  CHECK(bad.out.find(mixed + "/jax_b") != std::string::npos);
  CHECK(bad.out.find("OK " + mixed + "/jax_a") != std::string::npos);
}

// Orbax's CheckpointManager names steps "<step_prefix>_<n>" with a step_prefix, zero-padded
// with step_format_fixed_length (orbax.checkpoint.path.step's standard name format). Such a root
// loads its latest step and lists as a root (load_orbax of it failed: "not an Orbax
// checkpoint"; cairn ls and show took it for a plain directory of checkpoints).
TEST_CASE("a CheckpointManager root with a step_prefix or padded step names loads and lists its latest step") {
  test::TempDir dir;
  using Params = std::map<std::string, std::int64_t>;
  for (const std::string prefix : {"checkpoint_", ""}) {
    const std::string root = dir / (prefix.empty() ? "padded" : "prefixed");
    for (int step : {9, 10, 200})
      cairn::save_orbax(root + "/" + (prefix.empty() ? std::string(8 - std::to_string(step).size(), '0') : prefix) +
                            std::to_string(step),
                        Params{{"step", step}});
    CHECK(cairn::load_orbax<Params>(root).at("step") == 200);
    CHECK(cairn::orbax_metadata(root).metadata.leaves().size() == 1);
    const cairn::Inspection r = cairn::inspect(root);
    CHECK(r.kind == cairn::LocationKind::checkpointer_root);
    CHECK_FALSE(r.plain_directory);
    CHECK(r.latest_problem.empty());
    REQUIRE(r.steps.size() == 3);
    CHECK(r.steps.back().name == (prefix.empty() ? "00000200" : "checkpoint_200"));
    Run show = cli({"show", root, "step"});
    CHECK_MESSAGE(show.status == 0, show.err);
    CHECK(show.out.find("200") != std::string::npos);
  }
  // Another prefix's Orbax checkpoints beside them: which manager is meant is not guessed.
  const std::string two = dir / "prefixed";
  cairn::save_orbax(two + "/best_5", Params{{"step", 5}});
  CHECK_CAIRN_ERROR(cairn::load_orbax<Params>(two), cairn::ErrorKind::not_found, "not an Orbax checkpoint");
  CHECK(cairn::inspect(two).plain_directory);
  CHECK(cairn::load_orbax<Params>(two + "/checkpoint_200").at("step") == 200);
  // A directory that is not an Orbax checkpoint beside them changes nothing.
  fs::create_directories(dir / "padded/logs_1");
  CHECK(cairn::load_orbax<Params>(dir / "padded").at("step") == 200);
}

// Checkpoints of what tools/orbax_write.py leaves out, written by Orbax itself
// (tools/orbax_write_edges.py: dtypes cairn does not have, Python values, typed PRNG keys, many
// leaves, many data files, casts on save, a manager step of two items, custom metadata). The
// arrays cairn has must read bit-exactly; one of a dtype it lacks must be listed and refused by
// name. CAIRN_ORBAX_EDGES names their directory; the case says it skipped where it is unset.
TEST_CASE("checkpoints Orbax wrote of dtypes cairn lacks, Python values, many leaves and files read as they should") {
  const char* env = std::getenv("CAIRN_ORBAX_EDGES");
  if (!env || !fs::is_regular_file(std::string(env) + "/versions.json")) {
    MESSAGE("skipped: CAIRN_ORBAX_EDGES names no checkpoints written by tools/orbax_write_edges.py");
    return;
  }
  const std::string dir = env;
  const cairn::Json versions = cairn::Json::parse(test::read_file(dir + "/versions.json"));
  int leaves = 0, refused = 0;
  for (const cairn::Json& w : versions.at("written").as_array()) {
    const std::string name = w.as_string();
    CAPTURE(name);
    const std::string ckpt = dir + "/" + name + (name == "composite" ? "/1" : "");
    const cairn::Json manifest = cairn::Json::parse(test::read_file(dir + "/expected/" + name + "/manifest.json"));
    std::vector<std::string> keys;
    for (const cairn::Json& leaf : manifest.as_array()) {
      std::string key;
      for (const cairn::Json& k : leaf.at("path").as_array())
        key += (key.empty() ? "" : "/") + (k.is_string() ? k.as_string() : std::to_string(k.as_int()));
      keys.push_back(key);
    }
    cairn::ReadArraysOptions ro;
    ro.item = "state";
    const std::map<std::string, cairn::ArrayValue> values = cairn::read_arrays(ckpt, keys, ro);
    for (std::size_t i = 0; i < keys.size(); ++i) {
      const cairn::Json& leaf = manifest.as_array()[i];
      CAPTURE(keys[i]);
      const cairn::ArrayValue& v = values.at(keys[i]);
      CHECK(std::string(cairn::dtype_name(v.dtype)) == leaf.at("dtype").as_string());
      const std::string want = test::read_file(dir + "/expected/" + name + "/" + leaf.at("file").as_string());
      CHECK((v.bytes.size() == want.size() && std::memcmp(v.bytes.data(), want.data(), want.size()) == 0));
      ++leaves;
    }
    if (name.rfind("dtype_", 0) == 0) {
      const cairn::OrbaxCheckpoint info = cairn::orbax_metadata(ckpt);
      const cairn::ItemRecord* item = info.metadata.find_item("state");
      REQUIRE(item);
      REQUIRE(item->unread.size() == 1);
      CHECK(item->unread[0].path.str() == "odd");
      CHECK_CAIRN_ERROR(cairn::read_arrays(ckpt, {}), cairn::ErrorKind::dtype_mismatch, "odd (dtype ");
      ++refused;
    }
    if (name != "composite") CHECK(cairn::verify(ckpt).ok());
  }
  MESSAGE(leaves << " leaves read bit-exactly, " << refused << " arrays of other dtypes listed and refused, Orbax "
                 << versions.at("orbax").as_string());
  CHECK(leaves > 0);
}

TEST_CASE("a pytree's _METADATA read into its entries; every mistake a cairn::Error naming the file and the entry") {
  namespace o = cairn::detail::orbax;
  // Dict keys, sequence indices (key_type 1), a key that is a number, unknown members skipped.
  const o::TreeMetadata m = o::read_tree_metadata(
      R"J({"version":1,"tree_metadata":{"('params', 'w')":{"key_metadata":[{"key":"params","key_type":2},{"key":"w","key_type":2}],)J"
      R"J("value_metadata":{"value_type":"jax.Array","skip_deserialize":false,"write_shape":[2]}},)J"
      R"J("('layers', '1', 'b')":{"key_metadata":[{"key":"layers","key_type":2},{"key":"1","key_type":1},{"key":"b","key_type":2}],)J"
      R"J("value_metadata":{"value_type":"np.ndarray"}},)J"
      R"J("(3,)":{"key_metadata":[{"key":3,"key_type":1}],"value_metadata":{"value_type":null,"skip_deserialize":true}},)J"
      R"J("('x1',)":{"value_metadata":{"value_type":"scalar"},"key_metadata":[{"key_type":1,"key":"x1"}]}},)J"
      R"J("use_zarr3":false,"use_ocdbt":"maybe"} )J",
      "the-file");
  REQUIRE(m.entries.size() == 4);
  CHECK(m.entries[0].tuple == "('params', 'w')");
  CHECK(m.entries[0].path.str() == "params/w");
  CHECK(m.entries[0].param == "params.w");
  CHECK(m.entries[0].value_type == "jax.Array");
  CHECK_FALSE(m.entries[0].skip_deserialize);
  CHECK(m.entries[1].path.entries()[1].kind == cairn::KeyEntry::Kind::index);
  CHECK(m.entries[1].param == "layers.1.b");
  CHECK(m.entries[1].value_type == "np.ndarray");
  CHECK(m.entries[2].path.entries()[0].kind == cairn::KeyEntry::Kind::index);
  CHECK(m.entries[2].param == "3");
  CHECK(m.entries[2].value_type.empty());
  CHECK(m.entries[2].skip_deserialize);
  CHECK(m.entries[3].path.entries()[0].kind == cairn::KeyEntry::Kind::key);  // "x1" is no index
  CHECK(m.use_zarr3 == std::optional<bool>(false));
  CHECK_FALSE(m.use_ocdbt.has_value());  // not a boolean: unsaid
  // Member names spelled with escapes, or beginning as the reader's guess of the next one
  // does ("keys"), read as what they spell.
  const o::TreeMetadata esc = o::read_tree_metadata(
      R"J({"tree_metadata":{"('a', 'b')":{"key_metadata":[{"keys":"x","key":"a","key_type":2},{"key":"b","key_type":1}],)J"
      R"J("value_metadata":{"value_types":"np.ndarray","value_type":"jax.Array"}}}})J",
      "the-file");
  REQUIRE(esc.entries.size() == 1);
  CHECK(esc.entries[0].param == "a.b");
  CHECK(esc.entries[0].path.str() == "a/b");  // (key_type 1 of "b", no number: a key)
  CHECK(esc.entries[0].value_type == "jax.Array");
  const std::string entry = R"J({"tree_metadata":{"('w',)":)J";
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"", "invalid Orbax _METADATA at byte 0"},
      {"[]", "no tree_metadata object"},
      {"{}", "no tree_metadata object"},
      {R"J({"tree_metadata":[]})J", "no tree_metadata object"},
      {entry + "1}}", "entry is not an object"},
      {entry + R"J({"key_metadata":[{"key":"w"}],"value_metadata":{}}}})J", "without key or key_type"},
      {entry + R"J({"key_metadata":[{"key":"w","key_type":1.5}],"value_metadata":{}}}})J", "without key or key_type"},
      {entry + R"J({"key_metadata":[{"key":"w","key_type":"2"}],"value_metadata":{}}}})J", "without key or key_type"},
      {entry + R"J({"key_metadata":["w"],"value_metadata":{}}}})J", "without key or key_type"},
      {entry + R"J({"key_metadata":[{"key":"w","key_type":2}]}}})J", "no key_metadata list or value_metadata"},
      {entry + R"J({"key_metadata":{},"value_metadata":{}}}})J", "no key_metadata list or value_metadata"},
      {entry + R"J({"key_metadata":[],"value_metadata":[]}}})J", "no key_metadata list or value_metadata"},
      {entry + R"J({"key_metadata":[{"key":"w","key_type":2}],"value_metadata":{}})J", "invalid Orbax _METADATA at byte"},
      {entry + R"J({"key_metadata":[{"key":"w","key_type":2}],"value_metadata":{}}}} x)J", "unexpected text"},
      {entry + R"J({"key_metadata":[{"key":"w","key_type":99999999999999999999}],"value_metadata":{}}}})J", "without key or key_type"},
      {R"J({"other":)J" + std::string(100000, '['), "invalid Orbax _METADATA"},  // nesting bounded where skipped too
      {entry + R"J({"key_metadata":[{"key":)J" + std::string(100000, '[') + R"J(,"key_type":2}],"value_metadata":{}}}})J",
       "invalid Orbax _METADATA"}};
  for (const auto& [text, says] : bad) {
    const std::string why = says;  // (clang 14 cannot capture a structured binding)
    CAPTURE(why);
    CHECK_CAIRN_ERROR(o::read_tree_metadata(text, "the-file"), cairn::ErrorKind::corrupt, why);
    try {
      o::read_tree_metadata(text, "the-file");
    } catch (const cairn::Error& e) {
      CHECK(e.file() == "the-file");
      if (text.rfind(entry, 0) == 0 && why.find("invalid") == std::string::npos && why.find("unexpected") == std::string::npos)
        CHECK(e.key_path() == "('w',)");
    }
  }
}

namespace {

// An OCDBT manifest (framed) whose one version's root is the node of `height` at bytes
// [offset, offset + length) of the data file d/a.
std::string ocdbt_test_manifest(int height, std::uint64_t offset, std::uint64_t length) {
  namespace o = cairn::detail::orbax;
  std::string m(16, 'u');
  m += '\0';
  o::ocdbt_put_varint(m, 100);
  o::ocdbt_put_varint(m, 1 << 20);
  m += '\x04';
  o::ocdbt_put_varint(m, 0);
  o::ocdbt_put_one_file(m, "d/a");
  for (std::uint64_t v : {1, 1}) o::ocdbt_put_varint(m, v);  // one version, generation 1
  m += static_cast<char>(height);
  for (std::uint64_t v : {std::uint64_t{0}, offset, length, std::uint64_t{0}, std::uint64_t{0}, std::uint64_t{0}})
    o::ocdbt_put_varint(m, v);  // file 0, the range, statistics
  m += std::string(8, '\0');
  o::ocdbt_put_varint(m, 0);
  return o::ocdbt_frame(o::ocdbt_manifest_magic, m);
}

}  // namespace

TEST_CASE("a small hostile OCDBT node that spells out gigabytes of keys or paths is refused") {
  namespace o = cairn::detail::orbax;
  // A manifest whose one version's root is the node at offset 0 of d/a.
  auto database = [](const std::string& node) {
    auto store = std::make_shared<cairn::MemoryStore>();
    cairn::detail::write_blob(*store, "db/manifest.ocdbt", ocdbt_test_manifest(0, 0, node.size()));
    cairn::detail::write_blob(*store, "db/d/a", node);
    return store;
  };
  constexpr std::size_t n = 5000, first = 60000;
  // Keys: the first 60,000 bytes long, each next one sharing all of it and adding a byte.
  std::string body(1, '\0');
  o::ocdbt_put_one_file(body, "d/a");
  o::ocdbt_put_varint(body, n);
  for (std::size_t i = 1; i < n; ++i) o::ocdbt_put_varint(body, first + i - 1);
  o::ocdbt_put_varint(body, first);
  for (std::size_t i = 1; i < n; ++i) o::ocdbt_put_varint(body, 1);
  body += std::string(first, 'k');
  for (std::size_t i = 1; i < n; ++i) body += static_cast<char>('a' + i % 2);  // increasing: each is longer
  for (std::size_t i = 0; i < n; ++i) o::ocdbt_put_varint(body, 0);        // empty values
  body += std::string(n, '\0');                                             // inline
  const std::string node = o::ocdbt_frame(o::ocdbt_btree_node_magic, body);
  CHECK(node.size() < 100000);
  auto store = database(node);
  CHECK_THROWS_WITH_AS(o::OcdbtDatabase(*store, "db"), doctest::Contains("spell out more than 64 MiB"), cairn::Error);
}

TEST_CASE("an OCDBT tree whose two children are one node holds its keys twice, and is refused") {
  namespace o = cairn::detail::orbax;
  // A leaf node with the key "x", and a root of height 1 whose children "a" and "b" both point
  // at it (a DAG: each visit spells the key "x" again).
  std::string leaf(1, '\0');
  o::ocdbt_put_one_file(leaf, "d/a");
  for (std::uint64_t v : {1, 1}) o::ocdbt_put_varint(leaf, v);  // one entry, a key of one byte
  leaf += 'x';
  o::ocdbt_put_varint(leaf, 0);  // an empty value
  leaf += '\0';                  // inline
  leaf = o::ocdbt_frame(o::ocdbt_btree_node_magic, leaf);
  std::string root(1, '\1');
  o::ocdbt_put_one_file(root, "d/a");
  for (std::uint64_t v : {2, 0, 1, 1, 0, 0}) o::ocdbt_put_varint(root, v);  // 2 entries; prefix, suffix and subtree lengths
  root += "ab";
  for (std::uint64_t v : {std::uint64_t{0}, std::uint64_t{0}, std::uint64_t{0}, std::uint64_t{0},
                          std::uint64_t{leaf.size()}, std::uint64_t{leaf.size()}})
    o::ocdbt_put_varint(root, v);  // both children: file 0, offset 0, the leaf's length
  for (int i = 0; i < 6; ++i) o::ocdbt_put_varint(root, 0);  // statistics
  root = o::ocdbt_frame(o::ocdbt_btree_node_magic, root);
  cairn::MemoryStore store;
  cairn::detail::write_blob(store, "db/manifest.ocdbt", ocdbt_test_manifest(1, leaf.size(), root.size()));
  cairn::detail::write_blob(store, "db/d/a", leaf + root);
  CHECK_THROWS_WITH_AS(o::OcdbtDatabase(store, "db"), doctest::Contains("holds the key 'x' twice"), cairn::Error);
  // The same leaf as the root itself reads its one key.
  cairn::MemoryStore one;
  cairn::detail::write_blob(one, "db/d/a", leaf);
  cairn::detail::write_blob(one, "db/manifest.ocdbt", ocdbt_test_manifest(0, 0, leaf.size()));
  const o::OcdbtDatabase db(one, "db");
  REQUIRE(db.entries().size() == 1);
  CHECK(db.entries()[0].first == "x");
  CHECK(db.find("x") != nullptr);
  CHECK(db.find("a") == nullptr);
}

TEST_CASE("a small hostile Orbax checkpoint that claims a huge array is refused before a target is allocated") {
  namespace o = cairn::detail::orbax;
  test::TempDir tmp;
  const std::string ckpt = tmp.path + "/huge";
  cairn::PosixStore store;
  for (const bool zstd : {false, true}) {
    CAPTURE(zstd);
    std::filesystem::remove_all(ckpt);
    {
      o::OcdbtWriter w(store, ckpt);
      // 2^34 float32 (64 GiB) in one chunk, from 4 KiB stored.
      w.put("w/zarr.json", std::string(R"({"zarr_format":3,"node_type":"array","shape":[17179869184],"data_type":"float32",)") +
                               R"("chunk_grid":{"name":"regular","configuration":{"chunk_shape":[17179869184]}},"fill_value":0,)" +
                               (zstd ? R"("codecs":[{"name":"bytes"},{"name":"zstd"}]})" : R"("codecs":[{"name":"bytes"}]})"));
      w.put("w/c/0", std::string(4096, 'x'));
      w.finish();
    }
    test::write_file(ckpt + "/_METADATA",
        R"J({"tree_metadata":{"('w',)":{"key_metadata":[{"key":"w","key_type":2}],"value_metadata":{"value_type":"jax.Array"}}}})J");
    using Flat = std::map<std::string, cairn::Array<float>>;
    CHECK_THROWS_WITH_AS(cairn::load_orbax<Flat>(ckpt), doctest::Contains("4096 bytes"),
                         cairn::Error);
  }
}

// Checkpoints that Orbax itself wrote (tools/orbax_write.py, run where orbax-checkpoint and JAX
// are installed: every way of saving that Orbax version has, every dtype, dict and list nesting,
// arrays sharded over 2x4 devices). Each array leaf must read bit-exactly as the bytes the
// writer dumped beside it. The files live outside the repository: CAIRN_ORBAX_REAL names their
// directory, else ../shared/testdata/orbax-real; the case says it skipped where neither is.
TEST_CASE("checkpoints written by Orbax itself read bit-exactly, every way of saving and every dtype") {
  const char* env = std::getenv("CAIRN_ORBAX_REAL");
  const std::string dir = env ? std::string(env) : testdata() + "-real";
  if (!fs::is_regular_file(dir + "/versions.json")) {
    MESSAGE("skipped: " << dir << " holds no checkpoints written by Orbax (tools/orbax_write.py writes them)");
    return;
  }
  const cairn::Json versions = cairn::Json::parse(test::read_file(dir + "/versions.json"));
  MESSAGE("written by orbax-checkpoint " << versions.at("orbax").as_string() << ", jax "
                                         << versions.at("jax").as_string());
  int checked = 0;
  for (const cairn::Json& name_json : versions.at("written").as_array()) {
    const std::string name = name_json.as_string();
    std::string ckpt = dir + "/" + name;
    if (name == "manager") {
      // A CheckpointManager root: listed as a root of steps; load_orbax and orbax_metadata
      // read its latest step (30; max_to_keep=2 removed step 10).
      const cairn::Inspection root = cairn::inspect(ckpt);
      CHECK(root.kind == cairn::LocationKind::checkpointer_root);
      REQUIRE(root.steps.size() == 2);
      CHECK(root.steps.back().name == "30");
      StepOnly s;
      cairn::load_orbax(ckpt, s, cairn::LoadOptions::partial());
      CHECK(s.step == 30);
      CHECK(cairn::orbax_metadata(ckpt).metadata.leaves().size() ==
            cairn::orbax_metadata(ckpt + "/30").metadata.leaves().size());
      ckpt += "/30";
    }
    const cairn::Json manifest = cairn::Json::parse(test::read_file(dir + "/expected/" + name + "/manifest.json"));
    CAPTURE(name);
    std::map<std::string, cairn::ArrayValue> values;
    try {
      values = cairn::read_arrays(ckpt, {});
    } catch (const cairn::Error& e) {
      FAIL_CHECK(std::string(name + ": " + e.what()));
      continue;
    }
    for (const cairn::Json& leaf : manifest.as_array()) {
      std::string key;
      for (const cairn::Json& k : leaf.at("path").as_array())
        key += (key.empty() ? "" : "/") + (k.is_string() ? k.as_string() : std::to_string(k.as_int()));
      CAPTURE(key);
      auto it = values.find(key);
      if (it == values.end()) {
        FAIL_CHECK(std::string(name + ": no leaf " + key));
        continue;
      }
      const cairn::ArrayValue& v = it->second;
      CHECK(std::string(cairn::dtype_name(v.dtype)) == leaf.at("dtype").as_string());
      std::vector<std::int64_t> shape;
      for (const cairn::Json& d : leaf.at("shape").as_array()) shape.push_back(d.as_int());
      CHECK(std::vector<std::int64_t>(v.shape.begin(), v.shape.end()) == shape);
      const std::string want = test::read_file(dir + "/expected/" + name + "/" + leaf.at("file").as_string());
      CHECK(v.bytes.size() == want.size());
      CHECK((v.bytes.size() == want.size() && std::memcmp(v.bytes.data(), want.data(), want.size()) == 0));
      ++checked;
    }
    CHECK(cairn::verify(ckpt).ok());
  }
  MESSAGE(checked << " leaves of " << versions.at("written").size() << " Orbax checkpoints read bit-exactly");
  CHECK(checked > 0);
}

// ---- The export (save_orbax, convert --to orbax) ----

namespace {

struct ExportLayer {
  std::vector<float> w;
  std::vector<cairn::float16> b;
};
CAIRN_TREE(ExportLayer, w, b)
struct ExportState {
  std::map<std::string, cairn::ArrayValue> dtypes;  // one random array of every dtype
  std::vector<ExportLayer> layers;
  cairn::ShardedArray<float> kernel;                 // sharded 2x4 over host devices
  Eigen::MatrixXd eigen;                             // column-major: written in C order
  std::vector<double> cast_me;                       // stored as bfloat16 by a cast rule
  std::int64_t step = 0;
  std::string name;
};
CAIRN_TREE(ExportState, dtypes, layers, kernel, eigen, cast_me, step, name)

ExportState export_state() {
  ExportState s;
  for (cairn::DType d : cairn::all_numeric_dtypes) {
    cairn::ArrayValue v;
    v.dtype = d;
    v.shape = {3, 5};
    v.bytes = test::random_bits<unsigned char>(15 * cairn::dtype_size(d));
    if (d == cairn::DType::bool_)
      for (auto& b : v.bytes) b &= 1;
    s.dtypes[cairn::dtype_name(d)] = std::move(v);
  }
  for (int i = 0; i < 3; ++i) s.layers.push_back({test::random_bits<float>(16), test::random_bits<cairn::float16>(4)});
  s.kernel = cairn::ShardedArray<float>::from_host(
      test::random_bits<float>(64 * 96), {64, 96},
      cairn::NamedSharding(cairn::Mesh::host({{"data", 2}, {"model", 4}}), cairn::PartitionSpec{"data", "model"}));
  s.eigen = Eigen::MatrixXd::Random(7, 5);
  s.cast_me = {1.0, -2.5, 3.25, 1e-3};
  s.step = 1234;
  s.name = "run 7: \u00e9t\u00e9";
  return s;
}

// The manifest tools/orbax_restore_check.py compares Orbax's restore with (the format of
// tools/orbax_write.py's): every leaf's key path (indices as numbers), dtype, shape and a file
// of its C-order bytes as stored; string leaves carry their value.
void write_expected(const std::string& dir, const std::string& ckpt) {
  fs::create_directories(dir);
  const cairn::OrbaxCheckpoint info = cairn::orbax_metadata(ckpt);
  const auto values = cairn::read_arrays(ckpt, {});
  cairn::Json manifest = cairn::Json::array();
  int i = 0;
  for (const auto& l : info.metadata.leaves()) {
    cairn::Json path = cairn::Json::array();
    for (std::size_t k = 0; k < l.path.size(); ++k) {
      const auto& e = l.path[k];
      if (e.kind == cairn::KeyEntry::Kind::index) path.push_back(cairn::Json(e.number));
      else path.push_back(cairn::Json(e.text()));
    }
    const cairn::ArrayValue& v = values.at(l.key());
    cairn::Json entry = cairn::Json::object({{"path", path}, {"dtype", cairn::dtype_name(v.dtype)}});
    cairn::Json shape = cairn::Json::array();
    for (std::int64_t d : v.shape) shape.push_back(cairn::Json(d));
    entry["shape"] = shape;
    if (v.dtype == cairn::DType::string) {
      entry["string"] = std::string(v.bytes.begin(), v.bytes.end());
    } else {
      const std::string file = std::to_string(i++) + ".bin";
      test::write_file(dir + "/" + file, std::string(v.bytes.begin(), v.bytes.end()));
      entry["file"] = file;
    }
    manifest.push_back(entry);
  }
  test::write_file(dir + "/manifest.json", manifest.dump());
}


// Adds `name` to `out`/exports.json's "written" (tools/orbax_restore_check.py restores those),
// once.
void list_export(const std::string& out, const std::string& name) {
  const std::string list = out + "/exports.json";
  cairn::Json exports = fs::exists(list) ? cairn::Json::parse(test::read_file(list)) : cairn::Json::object({{"written", cairn::Json::array()}});
  bool listed = false;
  for (const auto& n : exports["written"].as_array()) listed = listed || n.as_string() == name;
  if (!listed) exports["written"].push_back(cairn::Json(name));
  test::write_file(list, exports.dump());
}

}  // namespace

TEST_CASE("a tree saved as an Orbax checkpoint reads back bit-exactly: both layouts, zstd, casts, sharding") {
  // With CAIRN_ORBAX_EXPORT_DIR set, the exports and their manifests stay there, for Orbax
  // itself to restore (tools/orbax_restore_check.py, docs/orbax.md).
  const char* keep = std::getenv("CAIRN_ORBAX_EXPORT_DIR");
  test::TempDir tmp;
  const std::string out = keep ? std::string(keep) : tmp.path;
  const ExportState s = export_state();
  struct Way {
    const char* name;
    cairn::OrbaxLayout layout;
    int zstd;
    bool ocdbt = true;
    bool zarr3 = true;
  };
  const std::vector<Way> ways = {{"v1", cairn::OrbaxLayout::v1, 0},
                                 {"v1_zstd", cairn::OrbaxLayout::v1, 3},
                                 {"v0", cairn::OrbaxLayout::v0_standard, 0},
                                 {"v0_zstd", cairn::OrbaxLayout::v0_standard, 1},
                                 {"v1_dirs", cairn::OrbaxLayout::v1, 0, false},
                                 {"v0_dirs_zstd", cairn::OrbaxLayout::v0_standard, 3, false},
                                 // zarr v2, as Orbax v0 writes by default (and zarr-python 2 reads)
                                 {"v0_zarr2_zstd", cairn::OrbaxLayout::v0_standard, 1, true, false},
                                 {"v1_dirs_zarr2", cairn::OrbaxLayout::v1, 0, false, false},
                                 {"v0_dirs_zarr2_zstd", cairn::OrbaxLayout::v0_standard, 3, false, false}};
  for (const Way& way : ways) {
    const std::string way_name = way.name;
    CAPTURE(way_name);
    const std::string ckpt = out + "/" + way.name;
    fs::remove_all(ckpt);
    cairn::OrbaxSaveOptions o;
    o.layout = way.layout;
    o.zstd_level = way.zstd;
    o.ocdbt = way.ocdbt;
    o.zarr3 = way.zarr3;
    o.cast = {{"cast_me", cairn::DType::bfloat16}};
    o.custom_metadata = cairn::Json::object({{"run", "7"}});
    const cairn::OrbaxSaveReport r = cairn::save_orbax(ckpt, s, o);
    CHECK(r.cast == std::vector<std::string>{"cast_me"});
    CHECK(r.leaves == 15 + 6 + 5);
    // (The string leaf, `name`, is counted in bytes and written to _strings.json, no chunk.)
    if (!way.zstd) CHECK(r.stored_bytes + s.name.size() == r.bytes);  // (random bits do not compress: no claim for zstd)
    CHECK(fs::is_regular_file(ckpt + (way.layout == cairn::OrbaxLayout::v1 ? "/state/_METADATA" : "/_METADATA")));
    CHECK(fs::is_regular_file(ckpt + "/commit_success.txt"));
    CHECK(test::leftovers(out).empty());

    // Every leaf, through the Orbax reader that reads Orbax's own files bit-exactly.
    ExportState back;
    back.kernel = cairn::ShardedArray<float>(
        cairn::NamedSharding(cairn::Mesh::host({{"x", 3}}), cairn::PartitionSpec{cairn::replicated, "x"}));
    cairn::LoadOptions lo;
    lo.allow_lossy_cast = {"cast_me"};  // stored bfloat16, loaded into double: exact, but asked anyway
    cairn::load_orbax(ckpt, back, lo);
    for (const auto& [name, v] : s.dtypes) {
      const std::string& dtype_key = name;  // (clang 14 cannot capture a structured binding)
      CAPTURE(dtype_key);
      CHECK(back.dtypes.at(name).dtype == v.dtype);
      CHECK(back.dtypes.at(name).bytes == v.bytes);
    }
    for (std::size_t i = 0; i < s.layers.size(); ++i) {
      CHECK(test::same_bits(back.layers[i].w, s.layers[i].w));
      CHECK(test::same_bits(back.layers[i].b, s.layers[i].b));
    }
    CHECK(test::same_bits(back.kernel.gather(), s.kernel.gather()));
    CHECK(back.eigen == s.eigen);
    std::vector<cairn::bfloat16> want16(s.cast_me.size());
    cairn::cast_host(cairn::DType::float64, s.cast_me.data(), cairn::DType::bfloat16, want16.data(), want16.size());
    for (std::size_t i = 0; i < want16.size(); ++i) CHECK(back.cast_me[i] == static_cast<double>(static_cast<float>(want16[i])));
    CHECK(back.step == s.step);
    CHECK(back.name == s.name);

    // What Orbax reads beside the arrays: the sharding, the metadata, the checksums.
    const cairn::OrbaxCheckpoint info = cairn::orbax_metadata(ckpt);
    const std::string v = way.zarr3 ? "3" : "2";
    CHECK(info.layout == (way.ocdbt ? "orbax (OCDBT, zarr v" + v + ")" : "orbax (zarr v" + v + " directories)"));
    const std::string pytree = ckpt + (way.layout == cairn::OrbaxLayout::v1 ? "/state" : "");
    CHECK(fs::exists(pytree + "/manifest.ocdbt") == way.ocdbt);
    // A file per chunk, as zarr readers expect.
    CHECK(fs::is_regular_file(pytree + (way.zarr3 ? "/layers.1.w/c/0" : "/layers.1.w/0")) == !way.ocdbt);
    CHECK(fs::is_regular_file(pytree + (way.zarr3 ? "/kernel/c/1/3" : "/kernel/1.3")) == !way.ocdbt);  // a 2x4 grid of blocks
    const auto* kernel = info.metadata.find_item("state")->find_leaf("kernel");
    REQUIRE(kernel);
    REQUIRE(kernel->sharding);
    CHECK(kernel->sharding->spec == cairn::PartitionSpec{"data", "model"});
    CHECK(kernel->sharding->mesh.axes() == std::vector<cairn::MeshAxis>{{"data", 2}, {"model", 4}});
    CHECK(info.metadata.find_item("state")->find_leaf("cast_me")->dtype == cairn::DType::bfloat16);
    CHECK(info.metadata.user_metadata.at("custom").at("run").as_string() == "7");
    CHECK(info.not_read.empty());
    CHECK(cairn::verify(ckpt).ok());
    if (keep) write_expected(out + "/expected/" + way.name, ckpt);
  }
  if (keep) {
    cairn::Json written = cairn::Json::array();
    for (const Way& way : ways) written.push_back(cairn::Json(way.name));
    test::write_file(out + "/exports.json", cairn::Json::object({{"written", written}}).dump());
  }
}

namespace {
// What every rank of a multi-process export saves: a 2-D array split both ways (uneven: edge
// blocks padded), a 1-D one replicated over one mesh axis (each block written once, by its
// primary holder), and a plain vector (written by rank 0).
struct RankState {
  cairn::ShardedArray<float> w;
  cairn::ShardedArray<std::int16_t> e;
  std::vector<double> bias;
  cairn::ShardedArray<std::uint8_t> two;  // on processes 0 and 1 only: the others hold none of it
};
CAIRN_TREE(RankState, w, e, bias, two)

template <class T>
std::vector<unsigned char> bytes_of_values(const std::vector<T>& v) {
  std::vector<unsigned char> b(v.size() * sizeof(T));
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}
}  // namespace

TEST_CASE("ranks export one Orbax checkpoint together, each its own blocks into its own database") {
  // With CAIRN_ORBAX_EXPORT_DIR set, the exports stay there beside the single-process ones (for
  // zarrita, and for Orbax itself: tools/orbax_restore_check.py).
  const char* keep = std::getenv("CAIRN_ORBAX_EXPORT_DIR");
  test::TempDir dir;
  const std::string out = keep ? std::string(keep) : dir.path;
  const std::vector<float> w_truth = test::random_bits<float>(10 * 7);
  const std::vector<std::int16_t> e_truth = test::random_bits<std::int16_t>(6);
  const std::vector<double> bias = {0.5, -1.25, 3.0};
  const std::vector<std::uint8_t> two_truth = test::random_bits<std::uint8_t>(9);
  // Rank r's part: 2 devices per process, the mesh over `ranks` processes (the last `missing`
  // of them taking no part in the export).
  auto state_of = [&](int r, int processes) {
    const cairn::Mesh mesh = cairn::Mesh::host_per_process({{"x", processes}, {"y", 2}}, 2, r);
    RankState s;
    s.w = cairn::ShardedArray<float>::from_host(w_truth, {10, 7}, cairn::NamedSharding(mesh, cairn::PartitionSpec{"x", "y"}));
    s.e = cairn::ShardedArray<std::int16_t>::from_host(e_truth, {6}, cairn::NamedSharding(mesh, cairn::PartitionSpec{"y"}));
    s.bias = bias;
    s.two = cairn::ShardedArray<std::uint8_t>::from_host(two_truth, {9},
                                                         cairn::NamedSharding(cairn::Mesh::host_per_process({{"z", 2}}, 1, r), cairn::PartitionSpec{"z"}));
    return s;
  };
  struct Way {
    int ranks;
    bool ocdbt;
    int zstd;
    bool zarr3 = true;
  };
  for (const Way way : {Way{2, true, 0}, Way{3, true, 3}, Way{2, false, 0}, Way{3, false, 1}, Way{3, true, 1, false},
                        Way{3, false, 0, false}}) {
    CAPTURE(way.ranks);
    CAPTURE(way.ocdbt);
    CAPTURE(way.zstd);
    CAPTURE(way.zarr3);
    const std::string name = "ranks" + std::to_string(way.ranks) + (way.ocdbt ? "_db" : "_dirs") + (way.zstd ? "_zstd" : "") +
                             (way.zarr3 ? "" : "_zarr2");
    const std::string ckpt = out + "/" + name;
    fs::remove_all(ckpt);
    std::vector<cairn::OrbaxSaveReport> reports(static_cast<std::size_t>(way.ranks));
    const auto errors = test::on_thread_ranks(way.ranks, [&](int r, cairn::Coordinator& c) {
      cairn::OrbaxSaveOptions o;
      o.coordinator = &c;
      o.ocdbt = way.ocdbt;
      o.zstd_level = way.zstd;
      o.zarr3 = way.zarr3;
      reports[static_cast<std::size_t>(r)] = cairn::save_orbax(ckpt, state_of(r, way.ranks), o);
    });
    for (const auto& e : errors) CHECK_MESSAGE(!e, (e ? e->what() : ""));
    // The layout Orbax writes on several hosts: each process's database, and the root one.
    const std::string pytree = ckpt + "/state";
    const std::int64_t rows = (10 + way.ranks - 1) / way.ranks;  // the chunk: one device's block
    for (int r = 0; r < way.ranks; ++r) {
      CAPTURE(r);
      CHECK(fs::is_regular_file(pytree + "/array_metadatas/process_" + std::to_string(r)));
      CHECK(fs::is_regular_file(pytree + "/ocdbt.process_" + std::to_string(r) + "/manifest.ocdbt") == way.ocdbt);
      CHECK(reports[static_cast<std::size_t>(r)].leaves == 4);
    }
    CHECK(fs::is_regular_file(pytree + "/manifest.ocdbt") == way.ocdbt);
    if (!way.ocdbt) {
      // One file per block, the edge ones padded to the block's shape.
      const std::string c = way.zarr3 ? "/c/" : "/", sep = way.zarr3 ? "/" : ".";
      for (std::int64_t i = 0; i * rows < 10; ++i)
        for (int j = 0; j < 2; ++j) CHECK(fs::is_regular_file(pytree + "/w" + c + std::to_string(i) + sep + std::to_string(j)));
      CHECK(fs::is_regular_file(pytree + "/e" + c + "0"));
      CHECK(fs::is_regular_file(pytree + "/e" + c + "1"));
      CHECK_FALSE(fs::exists(pytree + "/e" + c + "2"));
    }
    // Each block was written once: the ranks' bytes add up to the blocks' (padding included).
    std::uint64_t written = 0;
    for (const auto& rep : reports) written += rep.bytes;
    const std::uint64_t blocks = static_cast<std::uint64_t>((10 + rows - 1) / rows) * 2;
    CHECK(written == blocks * static_cast<std::uint64_t>(rows * 4) * 4 + 2 * 3 * 2 + 3 * 8 + 2 * 5);
    CHECK(test::leftovers(out).empty());

    // Read back whole, and resharded onto another layout.
    const auto values = cairn::read_arrays(ckpt, {});
    CHECK(values.at("w").bytes == bytes_of_values(w_truth));
    CHECK(values.at("e").bytes == bytes_of_values(e_truth));
    CHECK(values.at("two").bytes == two_truth);
    RankState back;
    back.w = cairn::ShardedArray<float>(cairn::NamedSharding(cairn::Mesh::host({{"q", 3}}), cairn::PartitionSpec{cairn::replicated, "q"}));
    back.e = cairn::ShardedArray<std::int16_t>(cairn::NamedSharding(cairn::Mesh::host({{"q", 4}}), cairn::PartitionSpec{"q"}));
    cairn::load_orbax(ckpt, back);
    CHECK(test::same_bits(back.w.gather(), w_truth));
    CHECK(test::same_bits(back.e.gather(), e_truth));
    CHECK(back.bias == bias);
    const cairn::OrbaxCheckpoint info = cairn::orbax_metadata(ckpt);
    const auto* w = info.metadata.find_item("state")->find_leaf("w");
    REQUIRE(w);
    REQUIRE(w->sharding);
    // 7 columns over y:2 (and 10 rows over x:3) are uneven splits, which JAX refuses: _sharding
    // spells those dimensions unsplit, for Orbax to restore (the chunks stay one per block).
    CHECK(w->sharding->spec == (way.ranks == 2 ? cairn::PartitionSpec{"x", cairn::replicated}
                                               : cairn::PartitionSpec{cairn::replicated, cairn::replicated}));
    CHECK(w->sharding->mesh.axes() == std::vector<cairn::MeshAxis>{{"x", way.ranks}, {"y", 2}});
    const auto* e = info.metadata.find_item("state")->find_leaf("e");
    REQUIRE(e);
    REQUIRE(e->sharding);
    CHECK(e->sharding->spec == cairn::PartitionSpec{"y"});  // 6 over y:2: as it was
    CHECK(cairn::verify(ckpt).ok());
    if (keep) {
      write_expected(out + "/expected/" + name, ckpt);
      list_export(out, name);
    }
  }

  SUBCASE("one rank's failure, another tree, or a block nobody holds: every rank throws, nothing is written") {
    const std::string ckpt = dir / "refused";
    auto export_all = [&](int ranks, int processes, auto&& change) {
      return test::on_thread_ranks(ranks, [&](int r, cairn::Coordinator& c) {
        RankState s = state_of(r, processes);
        cairn::OrbaxSaveOptions o;
        o.coordinator = &c;
        change(r, s, o);
        cairn::save_orbax(ckpt, s, o);
      });
    };
    auto all_failed = [&](const std::vector<std::optional<cairn::Error>>& errors, const std::string& needle) {
      for (std::size_t r = 0; r < errors.size(); ++r) {
        CAPTURE(r);
        REQUIRE(errors[r]);
        const std::string what = errors[r]->what();
        CHECK_MESSAGE(what.find(needle) != std::string::npos, what);
      }
      CHECK_FALSE(fs::exists(ckpt));
      CHECK(test::leftovers(dir.path).empty());
      return errors;
    };
    // Rank 1's block does not fit the cast (the others' do).
    const auto cast_errors = all_failed(export_all(3, 3, [&](int r, RankState& s, cairn::OrbaxSaveOptions& o) {
                 o.cast = {{"w", cairn::DType::int8}};
                 std::vector<float> small(w_truth.size(), 1.0f);
                 if (r == 1) small[4 * 7] = 1000.0f;  // row 4: rank 1's block
                 s.w = cairn::ShardedArray<float>::from_host(small, {10, 7}, s.w.sharding());
               }),
               "does not fit in int8");
    // Ranks 0 and 2 name the rank that failed (not rank 0); rank 1 has its own error; all the
    // path and the key.
    for (const int r : {0, 2}) {
      CAPTURE(r);
      const std::string what = cast_errors[static_cast<std::size_t>(r)]->what();
      CHECK(what.find("rank 1 failed") != std::string::npos);
      CHECK(what.find("rank 0 failed") == std::string::npos);
    }
    for (const auto& e : cast_errors) {
      CHECK(e->key_path() == "w");
      CHECK(e->file().find("refused") != std::string::npos);
    }
    all_failed(export_all(2, 2, [&](int r, RankState& s, cairn::OrbaxSaveOptions&) {
                 if (r == 1) s.bias.push_back(1.0);
               }),
               "another tree");
    // The mesh spans three processes; two take part.
    all_failed(export_all(2, 3, [](int, RankState&, cairn::OrbaxSaveOptions&) {}), "blocks");
  }
}

namespace {
// A checkpoint to show Orbax: leaves whose chunks zarr takes as they are (plain, column-major,
// evenly sharded, a scalar, bool, bfloat16, empty) and one it does not (an uneven split).
struct LinkState {
  std::vector<float> plain;
  Eigen::MatrixXd eigen;                   // column-major: one chunk, a transpose codec
  cairn::ShardedArray<float> even;         // 2x4 blocks of 8x6
  cairn::ShardedArray<std::int32_t> uneven;  // 10 rows over 4: edge blocks of 3 and 1
  std::vector<bool> flags;
  std::vector<cairn::bfloat16> half;
  std::vector<double> empty;
  std::int64_t step = 0;
  std::string name;
};
CAIRN_TREE(LinkState, plain, eigen, even, uneven, flags, half, empty, step, name)

LinkState link_state() {
  LinkState s;
  s.plain = test::random_bits<float>(1000);
  s.eigen = Eigen::MatrixXd::Random(9, 4);
  s.even = cairn::ShardedArray<float>::from_host(
      test::random_bits<float>(16 * 24), {16, 24},
      cairn::NamedSharding(cairn::Mesh::host({{"data", 2}, {"model", 4}}), cairn::PartitionSpec{"data", "model"}));
  s.uneven = cairn::ShardedArray<std::int32_t>::from_host(
      test::random_bits<std::int32_t>(10 * 3), {10, 3}, cairn::NamedSharding(cairn::Mesh::host({{"x", 4}}), cairn::PartitionSpec{"x"}));
  s.flags = {true, false, true, true};
  for (int i = 0; i < 7; ++i) s.half.push_back(cairn::bfloat16(0.5f * static_cast<float>(i) - 1.0f));
  s.step = 77;
  s.name = "linked";
  return s;
}

void check_link_state(const LinkState& got, const LinkState& want) {
  CHECK(test::same_bits(got.plain, want.plain));
  CHECK(got.eigen == want.eigen);
  CHECK(test::same_bits(got.even.gather(), want.even.gather()));
  CHECK(got.uneven.gather() == want.uneven.gather());
  CHECK(got.flags == want.flags);
  REQUIRE(got.half.size() == want.half.size());
  for (std::size_t i = 0; i < got.half.size(); ++i) CHECK(static_cast<float>(got.half[i]) == static_cast<float>(want.half[i]));
  CHECK(got.empty.empty());
  CHECK(got.step == want.step);
  CHECK(got.name == want.name);
}
}  // namespace

TEST_CASE("a cairn checkpoint shown to Orbax without copying its data: its data files linked, its chunks as values") {
  test::TempDir dir;
  const LinkState s = link_state();
  const std::string ckpt = dir / "ckpt";
  cairn::save(ckpt, s, {.user_metadata = cairn::Json::object({{"run", "9"}})});
  struct Way {
    const char* name;
    cairn::OrbaxLayout layout;
    bool zarr3;
  };
  for (const Way way : {Way{"orbax-v1", cairn::OrbaxLayout::v1, true}, Way{"orbax-v0", cairn::OrbaxLayout::v0_standard, true},
                        Way{"orbax-v0-zarr2", cairn::OrbaxLayout::v0_standard, false}}) {
    const bool v1 = way.layout == cairn::OrbaxLayout::v1;
    const std::string way_name = way.name;
    CAPTURE(way_name);
    const std::string orbax = dir / way.name;
    cairn::OrbaxSaveOptions o;
    o.layout = way.layout;
    o.zarr3 = way.zarr3;
    const cairn::OrbaxLinkReport r = cairn::link_as_orbax(ckpt, orbax, o);
    CHECK(r.leaves == 9);
    CHECK(r.files_shared);
    CHECK(r.rewritten == std::vector<std::string>{"uneven"});
    CHECK(r.rewritten_bytes == 10 * 3 * 4);
    CHECK(r.linked_bytes == 1000 * 4 + 9 * 4 * 8 + 16 * 24 * 4 + 4 + 7 * 2 + 8);
    CHECK(r.items_left.empty());
    CHECK(test::leftovers(dir.path).empty());
    // The data file is the checkpoint's own, under a second name.
    const cairn::CheckpointMetadata meta = cairn::metadata(ckpt);
    REQUIRE(meta.data_files.size() == 1);
    const std::string linked = orbax + (v1 ? "/state" : "") + "/d/" + meta.data_files[0];
    REQUIRE(fs::is_regular_file(linked));
    CHECK(fs::equivalent(linked, ckpt + "/" + meta.data_files[0]));
    LinkState back;
    back.even = cairn::ShardedArray<float>(cairn::NamedSharding(cairn::Mesh::host({{"q", 3}}), cairn::PartitionSpec{"q"}));
    back.uneven = cairn::ShardedArray<std::int32_t>(cairn::NamedSharding(cairn::Mesh::host({{"q", 2}}), cairn::PartitionSpec{"q"}));
    cairn::load_orbax(orbax, back);
    check_link_state(back, s);
    const cairn::OrbaxCheckpoint info = cairn::orbax_metadata(orbax);
    const auto* even = info.metadata.find_item("state")->find_leaf("even");
    REQUIRE(even);
    REQUIRE(even->sharding);
    CHECK(even->sharding->spec == cairn::PartitionSpec{"data", "model"});
    const auto* uneven = info.metadata.find_item("state")->find_leaf("uneven");
    REQUIRE(uneven);
    REQUIRE(uneven->sharding);
    CHECK(uneven->sharding->spec == cairn::PartitionSpec{cairn::replicated});  // JAX refuses 10 rows over 4
    CHECK(info.metadata.user_metadata.at("custom").at("run").as_string() == "9");
    CHECK(cairn::verify(orbax).ok());
  }
  // With CAIRN_ORBAX_EXPORT_DIR set, every key of the linked database is also written out as a
  // file (linked_dirs/state/<key>): the zarr metadata and chunks Orbax reads, for zarrita to
  // read as a directory of zarr arrays (the transpose codec of the column-major leaf included).
  // zarr-python reads the zarr v2 one's (order F for the column-major leaf).
  if (const char* keep = std::getenv("CAIRN_ORBAX_EXPORT_DIR")) {
    for (const auto& [from, pytree, mirror_name] : {std::tuple<std::string, std::string, std::string>{"orbax-v1", "state", "linked_dirs"},
                                                    {"orbax-v0-zarr2", "", "linked_dirs_zarr2"}}) {
      const std::string mirror = std::string(keep) + "/" + mirror_name;
      fs::remove_all(mirror);
      cairn::PosixStore posix(dir / from);
      cairn::detail::orbax::OcdbtDatabase db(posix, pytree);
      for (const auto& [k, v] : db.entries()) {
        const std::string file = mirror + (pytree.empty() ? "" : "/" + pytree) + "/" + std::string(k);
        fs::create_directories(fs::path(file).parent_path());
        test::write_file(file, db.read(v, std::string(k)));
      }
      write_expected(std::string(keep) + "/expected/" + mirror_name, dir / from);
    }
    // The linked checkpoints themselves, for Orbax to restore (copied: the hard links' bytes).
    for (const auto& [from, name] : {std::pair<std::string, std::string>{"orbax-v1", "v1_linked"}, {"orbax-v0", "v0_linked"},
                                     {"orbax-v0-zarr2", "v0_linked_zarr2"}}) {
      const std::string to = std::string(keep) + "/" + name;
      fs::remove_all(to);
      fs::copy(dir / from, to, fs::copy_options::recursive);
      write_expected(std::string(keep) + "/expected/" + name, to);
      list_export(keep, name);
    }
  }
  // The cairn checkpoint removed: the Orbax one keeps its bytes (hard links).
  fs::remove_all(ckpt);
  LinkState back;
  cairn::load_orbax(dir / "orbax-v1", back);
  check_link_state(back, s);

  SUBCASE("where the data files cannot be shared, they are copied: another store, or another filesystem") {
    cairn::MemoryStore store;
    cairn::save(cairn::Location(store, "ck"), s);
    const cairn::OrbaxLinkReport r = cairn::link_as_orbax(cairn::Location(store, "ck"), cairn::Location(store, "ox"));
    CHECK_FALSE(r.files_shared);
    LinkState in_memory;
    cairn::load_orbax(cairn::Location(store, "ox"), in_memory);
    check_link_state(in_memory, s);
    const std::string again = dir / "ck2";
    cairn::save(again, s);
    test::FaultInjection exdev([](const std::string& call, const std::string&) { return call == "link" ? EXDEV : 0; });
    const cairn::OrbaxLinkReport copied = cairn::link_as_orbax(again, dir / "ox2");
    CHECK_FALSE(copied.files_shared);
    LinkState from_copy;
    cairn::load_orbax(dir / "ox2", from_copy);
    check_link_state(from_copy, s);
  }
  SUBCASE("refused whole: options it cannot keep, a path taken, a failing link") {
    const std::string again = dir / "ck3";
    cairn::save(again, s);
    cairn::OrbaxSaveOptions zstd;
    zstd.zstd_level = 3;
    CHECK_CAIRN_ERROR(cairn::link_as_orbax(again, dir / "ox3", zstd), cairn::ErrorKind::invalid_argument, "as stored");
    fs::create_directories(dir / "taken");
    CHECK_CAIRN_ERROR(cairn::link_as_orbax(again, dir / "taken"), cairn::ErrorKind::already_exists, "never replaces");
    CHECK_THROWS_AS(cairn::link_as_orbax(dir / "nothing", dir / "ox3"), cairn::Error);
    {
      test::FaultInjection eio([](const std::string& call, const std::string&) { return call == "link" ? EIO : 0; });
      CHECK_CAIRN_ERROR(cairn::link_as_orbax(again, dir / "ox3"), cairn::ErrorKind::io, "link");
    }
    CHECK_FALSE(fs::exists(dir / "ox3"));
    CHECK(test::leftovers(dir.path).empty());
    // A data file cut short: its chunks would point past its end.
    const std::string cut = dir / "ck4";
    cairn::save(cut, s);
    const std::string data = cut + "/" + cairn::metadata(cut).data_files.at(0);
    fs::resize_file(data, fs::file_size(data) / 2);
    CHECK_CAIRN_ERROR(cairn::link_as_orbax(cut, dir / "ox4"), cairn::ErrorKind::corrupt, "past the end");
    CHECK_FALSE(fs::exists(dir / "ox4"));
    cairn::link_as_orbax(again, dir / "ox3");  // and then it works
    LinkState ok;
    cairn::load_orbax(dir / "ox3", ok);
    check_link_state(ok, s);
  }
}

TEST_CASE("device leaves export to Orbax and load back onto the device: every layout, zstd, casts, shards, linked") {
  // On Thrust's host system here; tests/cuda/unit-cuda.cu runs the same on a GPU.
  test::TempDir dir;
  test::orbax_device_round_trip(dir.path, 3 * 4099);
}

// The report's bytes counted only arrays: `cairn convert --to orbax` said 67 B of a tree
// that `cairn ls` (and the convert to cairn) called 73 B, the difference its strings.
struct Labelled {
  std::vector<float> w{1, 2, 3};
  std::string name = "h\xc3\xa9llo";
  std::map<std::string, std::string> tags{{"a", "xyz"}, {"b", ""}};
};
CAIRN_TREE(Labelled, w, name, tags)

TEST_CASE("an Orbax export's report counts the bytes of every leaf, strings too, as ls does") {
  test::TempDir dir;
  for (const bool ocdbt : {true, false}) {
    const std::string p = dir / (ocdbt ? "db" : "dirs");
    cairn::OrbaxSaveOptions o;
    o.ocdbt = ocdbt;
    const cairn::OrbaxSaveReport r = cairn::save_orbax(p, Labelled{}, o);
    CHECK(r.leaves == 4);
    CHECK(r.bytes == 12 + 6 + 3);
    CHECK(r.stored_bytes == 12);  // the chunks: strings are in _strings.json
    CHECK(r.bytes == cairn::orbax_metadata(p).metadata.total_bytes());
  }
}

TEST_CASE("an Orbax export that cannot be written is refused whole, naming the path and the key, and leaves nothing") {
  test::TempDir dir;
  const std::string path = dir / "o";
  // Something already there.
  fs::create_directories(path);
  CHECK_CAIRN_ERROR(cairn::save_orbax(path, export_state()), cairn::ErrorKind::already_exists, "never replaces");
  fs::remove_all(path);
  // Keys Orbax's names cannot hold, and a tree that is one array.
  std::map<std::string, std::vector<float>> dotted{{"a.b", {1.f}}};
  CHECK_CAIRN_ERROR(cairn::save_orbax(path, dotted), cairn::ErrorKind::invalid_argument, "'a.b'");
  CHECK_CAIRN_ERROR(cairn::save_orbax(path, std::vector<float>{1.f}), cairn::ErrorKind::invalid_argument, "one array");
  // A sharded array this process holds half of.
  cairn::Mesh mesh = cairn::Mesh::host({{"x", 2}});
  mesh.assign_processes({0, 1}, 0);
  std::map<std::string, cairn::ShardedArray<float>> half;
  half["w"] = cairn::ShardedArray<float>({8}, cairn::NamedSharding(mesh, cairn::PartitionSpec{"x"}));
  CHECK_CAIRN_ERROR(cairn::save_orbax(path, half), cairn::ErrorKind::invalid_argument, "gather");
  cairn::OrbaxSaveOptions too_high;
  too_high.zstd_level = 99;
  CHECK_CAIRN_ERROR(cairn::save_orbax(path, dotted, too_high), cairn::ErrorKind::invalid_argument,
                    "zstd_level");
  CHECK_FALSE(fs::exists(path));
  // Custom metadata _CHECKPOINT_METADATA would nest deeper than a load reads (it was written,
  // and the export could not be read back).
  cairn::Json deep = cairn::Json::object({{"x", 1}});
  for (int i = 0; i < 127; ++i) deep = cairn::Json::object({{"n", deep}});
  cairn::OrbaxSaveOptions deep_custom;
  deep_custom.custom_metadata = deep;
  CHECK_CAIRN_ERROR(cairn::save_orbax(path, export_state(), deep_custom), cairn::ErrorKind::invalid_argument,
                    "custom_metadata nests");
  CHECK_FALSE(fs::exists(path));
  deep_custom.custom_metadata = deep.at("n");  // 127 deep: read back as written
  cairn::save_orbax(path, export_state(), deep_custom);
  CHECK(cairn::orbax_metadata(path).metadata.user_metadata.at("custom") == deep_custom.custom_metadata);
  fs::remove_all(path);
  // A write that fails half way (the data file, then the manifest): nothing at the path.
  for (const char* file : {"/d/", "manifest.ocdbt", "_METADATA", "commit_success.txt"}) {
    CAPTURE(file);
    {
      test::FaultInjection faults([&](const std::string& call, const std::string& p) {
        return call == "pwrite" && p.find(file) != std::string::npos ? ENOSPC : 0;
      });
      CHECK_THROWS_AS(cairn::save_orbax(path, export_state()), cairn::Error);
    }
    CHECK_FALSE(fs::exists(path));
    CHECK(test::leftovers(dir.path).empty());
  }
  cairn::save_orbax(path, export_state());  // and then it works
  CHECK(cairn::verify(path).ok());
}

TEST_CASE("convert and the cairn tool go between cairn, Orbax and safetensors in every direction") {
  test::TempDir dir;
  const ExportState s = export_state();
  cairn::save(dir / "ck", s);
  // cairn -> Orbax -> cairn -> safetensors -> Orbax, every value kept.
  cairn::ConvertOptions to_orbax;
  to_orbax.to = cairn::ConvertTo::orbax;
  const cairn::ConvertReport r = cairn::convert(dir / "ck", dir / "orbax", to_orbax);
  CHECK(r.to == cairn::ConvertTo::orbax);
  CHECK(r.leaves == 15 + 6 + 5);
  cairn::convert(dir / "orbax", dir / "back");
  ExportState back = cairn::load<ExportState>(dir / "back");
  CHECK(back.dtypes.at("bfloat16").bytes == s.dtypes.at("bfloat16").bytes);
  CHECK(back.eigen == s.eigen);
  CHECK(back.name == s.name);
  cairn::ConvertOptions st;
  st.exclude = {"name"};  // safetensors has no strings
  cairn::convert(dir / "orbax", dir / "m.safetensors", st);
  cairn::convert(dir / "m.safetensors", dir / "orbax2", to_orbax);
  CHECK(leaf(dir / "orbax2", "layers/2/w").bytes == cairn::read_arrays(dir / "ck", {"layers/2/w"}).at("layers/2/w").bytes);
  CHECK_CAIRN_ERROR(cairn::convert(dir / "ck", dir / "orbax", to_orbax), cairn::ErrorKind::already_exists, "never replaces");
  // The tool: --to orbax, then ls and verify on what it wrote.
  std::ostringstream out, err;
  CHECK(cairn::cli::run({"convert", dir / "ck", dir / "orbax3", "--to", "orbax", "--cast", "cast_me=bfloat16"}, out, err) == 0);
  CHECK(out.str().find("Orbax checkpoint (OCDBT, zarr v3)") != std::string::npos);
  CHECK(cairn::cli::run({"verify", dir / "orbax3"}, out, err) == 0);
  CHECK(cairn::cli::run({"convert", dir / "ck", dir / "x", "--to", "zarr"}, out, err) != 0);
  CHECK(err.str().find("--to takes cairn, safetensors or orbax") != std::string::npos);
  // --link: an Orbax checkpoint reading the cairn checkpoint's data files, every value kept.
  std::ostringstream lout, lerr;
  CHECK(cairn::cli::run({"convert", dir / "ck", dir / "linked", "--to", "orbax", "--link"}, lout, lerr) == 0);
  CHECK_MESSAGE(lout.str().find("data files (hard links)") != std::string::npos, lout.str());
  CHECK(cairn::cli::run({"verify", dir / "linked"}, lout, lerr) == 0);
  ExportState linked = cairn::load_orbax<ExportState>(dir / "linked");
  CHECK(linked.dtypes.at("float8_e5m2").bytes == s.dtypes.at("float8_e5m2").bytes);
  CHECK(test::same_bits(linked.kernel.gather(), s.kernel.gather()));
  CHECK(linked.eigen == s.eigen);
  CHECK(linked.name == s.name);
  // Only to Orbax, only from a cairn checkpoint, only as stored.
  CHECK(cairn::cli::run({"convert", dir / "ck", dir / "l2", "--link"}, lout, lerr) != 0);
  CHECK(lerr.str().find("--to orbax --link") != std::string::npos);
  CHECK(cairn::cli::run({"convert", dir / "orbax", dir / "l2", "--to", "orbax", "--link"}, lout, lerr) != 0);
  CHECK(lerr.str().find("not a cairn checkpoint") != std::string::npos);
  CHECK(cairn::cli::run({"convert", dir / "ck", dir / "l2", "--to", "orbax", "--link", "--cast", "cast_me=bfloat16"}, lout, lerr) != 0);
  CHECK(lerr.str().find("as stored") != std::string::npos);
  CHECK_FALSE(fs::exists(dir / "l2"));
}

TEST_CASE("convert to Orbax puts metrics and custom metadata where Orbax keeps them, and Orbax -> Orbax nests nothing") {
  test::TempDir dir;
  const ExportState s = export_state();
  cairn::ConvertOptions to_orbax;
  to_orbax.to = cairn::ConvertTo::orbax;
  auto user_of = [](const std::string& orbax) { return cairn::orbax_metadata(orbax).metadata.user_metadata; };
  const cairn::Json metrics = cairn::Json::object({{"loss", 0.25}});
  const cairn::Json custom = cairn::Json::object({{"run", "7"}, {"seed", 3}});
  // Orbax -> Orbax -> Orbax: the metrics and the custom metadata stay themselves.
  cairn::OrbaxSaveOptions o;
  o.metrics = metrics;
  o.custom_metadata = custom;
  cairn::save_orbax(dir / "o1", s, o);
  REQUIRE(user_of(dir / "o1").at("custom") == custom);
  cairn::convert(dir / "o1", dir / "o2", to_orbax);
  cairn::convert(dir / "o2", dir / "o3", to_orbax);
  for (const std::string& d : {dir / "o2", dir / "o3"}) {
    const cairn::Json u = user_of(d);
    CHECK_MESSAGE(u.at("custom") == custom, u.dump());
    CHECK_MESSAGE(u.at("metrics") == metrics, u.dump());
  }
  // A Checkpointer's step: its metrics are Orbax's metrics, its user metadata the custom
  // metadata; both by convert and by a link.
  {
    cairn::Checkpointer ck(dir / "root");
    cairn::StepSaveOptions a;
    a.metrics = metrics;
    a.save.user_metadata = custom;
    ck.save(5, s, a);
  }
  cairn::convert(dir / "root/5", dir / "from_step", to_orbax);
  cairn::link_as_orbax(dir / "root/5", dir / "linked_step");
  for (const std::string& d : {dir / "from_step", dir / "linked_step"}) {
    const cairn::Json u = user_of(d);
    CHECK_MESSAGE(u.at("custom") == custom, u.dump());
    CHECK_MESSAGE(u.at("metrics") == metrics, u.dump());
  }
  // Any other user metadata is the custom metadata whole, metrics and all where it is not of
  // that shape (here a "metrics" that is no object).
  for (const cairn::Json& user : {cairn::Json::object({{"epoch", 3}}),
                                  cairn::Json::object({{"metrics", 1}, {"custom", cairn::Json::object()}})}) {
    cairn::save(dir / "plain", s, {.overwrite = true, .user_metadata = user});
    fs::remove_all(dir / "plain_orbax");
    cairn::convert(dir / "plain", dir / "plain_orbax", to_orbax);
    const cairn::Json u = user_of(dir / "plain_orbax");
    CHECK_MESSAGE(u.at("custom") == user, u.dump());
    CHECK(u.at("metrics") == cairn::Json::object());
  }
}

TEST_CASE("convert to and from Orbax reads its source a batch at a time as it writes, strings first") {
  test::TempDir dir;
  constexpr std::uint64_t leaf_bytes = 1 << 20;
  std::map<std::string, cairn::ArrayValue> tree;
  for (int i = 0; i < 8; ++i) {
    cairn::ArrayValue v;
    v.dtype = i % 2 ? cairn::DType::int16 : cairn::DType::float32;
    v.shape = {16, static_cast<std::int64_t>(leaf_bytes / 16 / cairn::dtype_size(v.dtype))};
    v.bytes = test::random_bits<unsigned char>(leaf_bytes);
    tree["w" + std::to_string(i)] = std::move(v);
  }
  cairn::ArrayValue name;
  name.dtype = cairn::DType::string;
  name.bytes = {'r', 'u', 'n', ' ', '7'};
  name.shape = {5};
  tree["z_name"] = name;
  cairn::save(dir / "c", tree);
  const std::uint64_t batch = 2 * leaf_bytes;
  cairn::ConvertOptions o;
  o.to = cairn::ConvertTo::orbax;
  o.batch_bytes = batch;
  CHECK(test::convert_read_ahead(dir / "c", dir / "ocdbt", o, leaf_bytes) <= batch + leaf_bytes);
  o.orbax.ocdbt = false;
  CHECK(test::convert_read_ahead(dir / "c", dir / "dirs", o, leaf_bytes) <= batch + leaf_bytes);
  CHECK(test::convert_read_ahead(dir / "ocdbt", dir / "back", {.batch_bytes = batch}, leaf_bytes) <= batch + leaf_bytes);
  for (const char* out : {"ocdbt", "dirs", "back"}) {
    CAPTURE(out);
    const auto back = cairn::read_arrays(dir / out, {});
    REQUIRE(back.size() == tree.size());
    for (const auto& kv : tree) {  // (not a structured binding: clang 14 cannot capture one in CAPTURE)
      const std::string& k = kv.first;
      const auto& v = kv.second;
      CAPTURE(k);
      CHECK(back.at(k).dtype == v.dtype);
      CHECK(back.at(k).bytes == v.bytes);
    }
  }
}

TEST_CASE("cairn convert --to orbax writes each layout Orbax restores: v0, zarr v2, a directory per parameter, zstd") {
  test::TempDir dir;
  const ExportState s = export_state();
  cairn::save(dir / "ck", s);
  struct Way {
    std::vector<std::string> flags;
    bool v0, zarr3, ocdbt;
    int zstd;
    const char* says;  // in the tool's line
  };
  const std::vector<Way> ways = {
      {{"--orbax-layout", "v0", "--zarr", "2", "--zstd", "1"}, true, false, true, 1,
       "(StandardCheckpointer's layout, OCDBT, zarr v2, zstd level 1)"},
      {{"--no-ocdbt", "--zstd=3"}, false, true, false, 3, "(a directory per parameter, zarr v3, zstd level 3)"},
      {{"--orbax-layout=v0", "--no-ocdbt", "--zarr", "2"}, true, false, false, 0,
       "(StandardCheckpointer's layout, a directory per parameter, zarr v2)"},
      {{"--zarr", "3", "--orbax-layout", "v1"}, false, true, true, 0, "(OCDBT, zarr v3)"}};
  int n = 0;
  for (const Way& way : ways) {
    const std::string to = dir / ("o" + std::to_string(n++));
    std::vector<std::string> args = {"convert", dir / "ck", to, "--to", "orbax"};
    args.insert(args.end(), way.flags.begin(), way.flags.end());
    std::ostringstream out, err;
    CAPTURE(to);
    REQUIRE_MESSAGE(cairn::cli::run(args, out, err) == 0, err.str());
    CHECK_MESSAGE(out.str().find(way.says) != std::string::npos, out.str());
    // What is on disk is the layout asked for.
    const std::string pytree = to + (way.v0 ? "" : "/state");
    CHECK(fs::is_regular_file(pytree + "/_METADATA"));
    CHECK(fs::exists(to + "/state") == !way.v0);
    CHECK(fs::exists(pytree + "/manifest.ocdbt") == way.ocdbt);
    const cairn::OrbaxCheckpoint info = cairn::orbax_metadata(to);
    const std::string v = way.zarr3 ? "3" : "2";
    CHECK(info.layout == (way.ocdbt ? "orbax (OCDBT, zarr v" + v + ")" : "orbax (zarr v" + v + " directories)"));
    if (!way.ocdbt) {
      const std::string meta = test::read_file(pytree + (way.zarr3 ? "/layers.1.w/zarr.json" : "/layers.1.w/.zarray"));
      CHECK((meta.find("zstd") != std::string::npos) == (way.zstd > 0));
      if (way.zstd) CHECK_MESSAGE(meta.find("\"level\":" + std::to_string(way.zstd)) != std::string::npos, meta);
    }
    // Every value kept.
    ExportState back = cairn::load_orbax<ExportState>(to);
    CHECK(back.dtypes.at("bfloat16").bytes == s.dtypes.at("bfloat16").bytes);
    CHECK(back.dtypes.at("float8_e4m3fn").bytes == s.dtypes.at("float8_e4m3fn").bytes);
    CHECK(test::same_bits(back.kernel.gather(), s.kernel.gather()));
    CHECK(back.eigen == s.eigen);
    CHECK(back.name == s.name);
    CHECK(cairn::cli::run({"verify", to}, out, err) == 0);
  }
  // A link in StandardCheckpointer's layout with zarr v2 arrays: the data files still shared.
  std::ostringstream out, err;
  REQUIRE(cairn::cli::run({"convert", dir / "ck", dir / "linked", "--to", "orbax", "--link", "--orbax-layout", "v0", "--zarr", "2"},
                          out, err) == 0);
  CHECK(out.str().find("data files (hard links)") != std::string::npos);
  CHECK(fs::is_regular_file(dir / "linked/_METADATA"));
  CHECK(cairn::orbax_metadata(dir / "linked").layout == "orbax (OCDBT, zarr v2)");
  CHECK(test::same_bits(cairn::load_orbax<ExportState>(dir / "linked").kernel.gather(), s.kernel.gather()));
  // Refused, naming why, and nothing written: a link cannot compress or split its data file;
  // the layout flags go with --to orbax; levels and spellings out of range.
  const std::vector<std::pair<std::vector<std::string>, std::string>> refused = {
      {{"--to", "orbax", "--link", "--zstd", "3"}, "as stored"},
      {{"--to", "orbax", "--link", "--no-ocdbt"}, "as stored"},
      {{"--zstd", "3"}, "--to orbax"},
      {{"--to", "safetensors", "--orbax-layout", "v0"}, "--to orbax"},
      {{"--to", "orbax", "--zstd", "23"}, "--zstd takes a compression level from 1 to 22"},
      {{"--to", "orbax", "--zstd", "0"}, "--zstd takes a compression level from 1 to 22"},
      {{"--to", "orbax", "--zarr", "4"}, "--zarr takes 3 or 2"},
      {{"--to", "orbax", "--orbax-layout", "v2"}, "--orbax-layout takes v1"},
      {{"--to", "orbax", "--no-ocdbt=1"}, "takes no value"}};
  for (const auto& [flags, says] : refused) {
    std::vector<std::string> args = {"convert", dir / "ck", dir / "refused"};
    args.insert(args.end(), flags.begin(), flags.end());
    const std::string why = says;  // (clang 14 cannot capture a structured binding)
    CAPTURE(why);
    std::ostringstream o, e;
    CHECK(cairn::cli::run(args, o, e) != 0);
    CHECK_MESSAGE(e.str().find(why) != std::string::npos, e.str());
    CHECK_FALSE(fs::exists(dir / "refused"));
  }
  // Other commands do not take them.
  CHECK(cairn::cli::run({"ls", dir / "ck", "--zstd", "3"}, out, err) != 0);
  CHECK(err.str().find("cairn ls does not take --zstd") != std::string::npos);
  // The library's spelling: ConvertOptions::orbax, refused without ConvertTo::orbax.
  cairn::ConvertOptions o;
  o.orbax.zstd_level = 3;
  CHECK_CAIRN_ERROR(cairn::convert(dir / "ck", dir / "refused", o), cairn::ErrorKind::invalid_argument, "ConvertTo::orbax");
  o.to = cairn::ConvertTo::orbax;
  o.orbax.zarr3 = false;
  cairn::convert(dir / "ck", dir / "lib", o);
  CHECK(cairn::orbax_metadata(dir / "lib").layout == "orbax (OCDBT, zarr v2)");
  CHECK(cairn::load_orbax<ExportState>(dir / "lib").eigen == s.eigen);
}

// _METADATA's entries are spelled after the last leaf, each leaf's keys shared with the leaf
// before spelled once (OrbaxMetadataText::render): every entry must still spell its own whole
// key path, whatever depth the leaf before it had. Names that sort apart from the tree's order
// ("a.x" after "a-b" in the database) go through the database writer's sort.
TEST_CASE("an export's _METADATA spells every leaf's whole key path, at any depth after any leaf") {
  test::TempDir dir;
  using Tree = std::map<std::string, std::map<std::string, Ragged>>;
  Tree tree;
  for (int i = 0; i < 40; ++i) {
    Ragged r;
    for (int k = 0; k < i % 4; ++k) {
      std::vector<float> layer(1 + test::rng()() % 5);
      for (auto& x : layer) x = static_cast<float>(test::rng()() % 100000) / 7.0f;
      r.layers.push_back(layer);
    }
    r.note = "it's \"n\" \\ " + std::to_string(i);
    r.by_int[i] = i * 0.5;
    if (i % 5 == 0) r.by_int[-i - 1] = 2;
    tree[i % 3 == 0 ? "a" : i % 3 == 1 ? "a-b" : "z"][(i % 2 ? "x'" : "y") + std::to_string(i)] = r;
  }
  cairn::save_orbax(dir / "o", tree);
  // Python's repr of a str, as Orbax keys its entries: '...' unless the key holds ' and no ".
  auto repr = [](const std::string& k) {
    const char q = k.find('\'') != std::string::npos && k.find('"') == std::string::npos ? '"' : '\'';
    std::string out(1, q);
    for (char c : k) {
      if (c == '\\' || c == q) out += '\\';
      out += c;
    }
    return out + q;
  };
  const auto leaves = cairn::detail::view_tree("state", tree).leaves;
  const auto m = cairn::detail::orbax::read_tree_metadata(test::read_file(dir / "o/state/_METADATA"), "_METADATA");
  REQUIRE(m.entries.size() == leaves.size());
  const cairn::Json::List arrays =
      cairn::Json::parse(test::read_file(dir / "o/state/array_metadatas/process_0")).at("array_metadatas").as_array();
  std::size_t array = 0;
  for (std::size_t i = 0; i < leaves.size(); ++i) {
    const cairn::KeyPath& path = leaves[i].path;
    CAPTURE(path.str());
    std::string tuple = "(", name;
    for (std::size_t k = 0; k < path.size(); ++k) {
      tuple += (k ? ", " : "") + repr(path[k].text());
      name += (k ? "." : "") + path[k].text();
    }
    tuple += path.size() == 1 ? ",)" : ")";
    CHECK(m.entries[i].tuple == tuple);
    CHECK(m.entries[i].path.str() == path.str());
    CHECK(m.entries[i].param == name);
    REQUIRE(m.entries[i].path.size() == path.size());
    for (std::size_t k = 0; k < path.size(); ++k)
      CHECK((m.entries[i].path[k].kind == cairn::KeyEntry::Kind::index) == (path[k].kind == cairn::KeyEntry::Kind::index));
    if (leaves[i].view.dtype == cairn::DType::string) {
      CHECK(m.entries[i].value_type == "string");
    } else {
      CHECK(m.entries[i].value_type == "np.ndarray");
      REQUIRE(array < arrays.size());
      CHECK(arrays[array++].at("array_metadata").at("param_name").as_string() == name);
    }
  }
  CHECK(array == arrays.size());
  CHECK(cairn::load_orbax<Tree>(dir / "o") == tree);
}

TEST_CASE("an export of many small arrays: fetched leaves written before their bytes go, and the text files in blocks") {
  test::TempDir dir;
  SUBCASE("convert of 3,000 small leaves in batches of 4 KiB to OCDBT: each leaf's bytes as it was when fetched") {
    // The export writes an array's own memory without a copy where it stays until the end
    // (OcdbtWriter::put_kept); a converted leaf's bytes are a batch's, which the next batch
    // replaces, so they are copied: written from where they were, this reads back wrong.
    std::map<std::string, cairn::ArrayValue> tree;
    for (int i = 0; i < 3000; ++i) {
      cairn::ArrayValue v;
      v.dtype = cairn::DType::float32;
      v.shape = {1 + static_cast<std::int64_t>(test::rng()() % 60)};
      v.bytes = test::random_bits<unsigned char>(static_cast<std::size_t>(v.shape[0]) * 4);
      tree["p" + std::to_string(i)] = std::move(v);
    }
    cairn::save(dir / "c", tree);
    cairn::ConvertOptions o;
    o.to = cairn::ConvertTo::orbax;
    o.batch_bytes = 4096;
    cairn::convert(dir / "c", dir / "o", o);
    const auto back = cairn::read_arrays(dir / "o", {});
    REQUIRE(back.size() == tree.size());
    for (const auto& kv : tree) {
      CAPTURE(kv.first);
      CHECK(back.at(kv.first).bytes == kv.second.bytes);
    }
  }
  SUBCASE("TextBlocks: appends across blocks are the text, as parts and as a digest") {
    cairn::detail::orbax::TextBlocks t;
    std::string whole;
    for (int i = 0; i < 500; ++i) {
      const std::size_t n = i % 50 == 0 ? cairn::detail::orbax::TextBlocks::block_bytes + 17 : static_cast<std::size_t>(test::rng()() % 900);
      std::string s(n, '\0');
      for (auto& c : s) c = static_cast<char>('a' + test::rng()() % 26);
      t += s;
      whole += s;
      if (i % 7 == 0) t += ',', whole += ',';
    }
    CHECK(t.size() == whole.size());
    std::vector<std::string_view> parts;
    t.add_parts(parts);
    CHECK(parts.size() > 1);
    std::string joined;
    for (auto p : parts) {
      CHECK(p.size() <= cairn::detail::orbax::TextBlocks::block_bytes);
      joined += p;
    }
    CHECK(joined == whole);
    cairn::detail::WireDigest a, b;
    t.digest(a);
    b.str(whole);
    CHECK(a.value == b.value);
  }
}
