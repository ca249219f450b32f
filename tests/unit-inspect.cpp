// SPDX-License-Identifier: Apache-2.0
// Reading any location without its types: inspect (a checkpoint, a Checkpointer root, a
// safetensors file; a damaged `latest` marker), read_arrays (as stored, cast, boxes, missing
// keys), ArrayValue as a tree leaf, verify (intact, a flipped byte, safetensors, a root) and
// convert (checkpoint -> safetensors -> checkpoint, bit-exact, with select and cast).
#include "test_util.hpp"

#include <doctest/doctest.h>

#include <filesystem>
#include <map>
#include <random>
#include <algorithm>
#include <cctype>

using cairn::ArrayValue;
using cairn::DType;
using cairn::ErrorKind;

namespace {

struct Mixed {
  std::vector<float> f;
  cairn::Array<std::int16_t> grid;  // 2-D
  std::vector<double> d;
  std::vector<std::uint8_t> bytes;
  std::string name;
};
CAIRN_TREE(Mixed, f, grid, d, bytes, name)

Mixed make_mixed() {
  Mixed m;
  m.f = test::random_bits<float>(1 + test::rng()() % 3000);
  m.grid = cairn::Array<std::int16_t>({7, 5});
  const auto g = test::random_bits<std::int16_t>(35);
  std::copy(g.begin(), g.end(), m.grid.data());
  m.d = test::random_bits<double>(test::rng()() % 50);
  m.bytes = test::random_bits<std::uint8_t>(1 + test::rng()() % 100);
  m.name = "mixed " + std::to_string(test::rng()() % 1000);
  return m;
}

template <class T>
bool same_bytes(const ArrayValue& v, const T* data, std::size_t n) {
  return v.bytes.size() == n * sizeof(T) && (n == 0 || std::memcmp(v.bytes.data(), data, n * sizeof(T)) == 0);
}

}  // namespace

TEST_CASE("read_arrays reads any leaf as stored, bit-exact, without its type") {
  test::TempDir dir;
  for (int round = 0; round < 5; ++round) {
    const Mixed m = make_mixed();
    const std::string c = dir / ("c" + std::to_string(round));
    cairn::save(c, m);
    const auto all = cairn::read_arrays(c, {});
    REQUIRE(all.size() == 5);
    CHECK(all.at("f").dtype == DType::float32);
    CHECK(all.at("f").shape == cairn::Shape{static_cast<std::int64_t>(m.f.size())});
    CHECK(same_bytes(all.at("f"), m.f.data(), m.f.size()));
    CHECK(all.at("grid").dtype == DType::int16);
    CHECK(all.at("grid").shape == cairn::Shape{7, 5});
    CHECK(same_bytes(all.at("grid"), m.grid.data(), 35));
    CHECK(same_bytes(all.at("d"), m.d.data(), m.d.size()));
    CHECK(same_bytes(all.at("bytes"), m.bytes.data(), m.bytes.size()));
    CHECK(all.at("name").dtype == DType::string);
    CHECK(std::string(all.at("name").bytes.begin(), all.at("name").bytes.end()) == m.name);
    CHECK(all.at("grid").values<std::int16_t>().size() == 35);
    CHECK_CAIRN_ERROR(all.at("grid").values<float>(), ErrorKind::dtype_mismatch, "int16");
  }
}

TEST_CASE("read_arrays casts to one dtype, reads only boxes, and names a missing key") {
  test::TempDir dir;
  const std::string c = dir / "c";
  Mixed m = make_mixed();
  cairn::save(c, m);
  const auto as64 = cairn::read_arrays(c, {"grid"}, {.as = DType::float64});
  REQUIRE(as64.size() == 1);
  const auto values = as64.at("grid").values<double>();
  REQUIRE(values.size() == 35);
  for (std::size_t i = 0; i < 35; ++i) CHECK(values[i] == static_cast<double>(m.grid.data()[i]));
  // Two boxes of the 7x5 grid: rows 1..2 whole, and the element (6, 4).
  cairn::LoadReport report;
  const auto boxed = cairn::read_arrays(c, {"grid/"}, {.boxes = {cairn::Box{{1, 0}, {2, 5}}, cairn::Box{{6, 4}, {1, 1}}}}, &report);
  const ArrayValue& v = boxed.at("grid");
  CHECK(v.shape == cairn::Shape{7, 5});
  REQUIRE(v.boxes.size() == 2);
  REQUIRE(v.bytes.size() == 11 * 2);
  CHECK(std::memcmp(v.bytes.data(), m.grid.data() + 5, 10 * 2) == 0);
  CHECK(std::memcmp(v.bytes.data() + 20, m.grid.data() + 34, 2) == 0);
  // The grid's one chunk (one checksum block) is read whole, and verified; not the rest of the
  // checkpoint.
  CHECK(report.bytes_read == 70);
  CHECK(report.unverified_bytes == 0);
  CHECK_CAIRN_ERROR(cairn::read_arrays(c, {"nothing"}), ErrorKind::not_found, "nothing");
  std::map<std::string, std::map<std::string, std::vector<float>>> layered;
  layered["layers"]["a"] = {1};
  layered["layers"]["b"] = {2};
  cairn::save(dir / "layered", layered);
  CHECK_CAIRN_ERROR(cairn::read_arrays(dir / "layered", {"layers"}), ErrorKind::not_found,
                    "key 'layers': 'layers' is a subtree, not a leaf: its leaves are layers/a, layers/b");
  CHECK_CAIRN_ERROR(cairn::read_arrays(c, {"grid"}, {.boxes = {cairn::Box{{6, 0}, {2, 5}}}}), ErrorKind::invalid_argument,
                    "outside");
  CHECK_CAIRN_ERROR(cairn::read_arrays(c, {"grid"}, {.boxes = {cairn::Box{{0}, {1}}}}), ErrorKind::invalid_argument, "rank");
  // A saved ArrayValue that holds only boxes is refused: it is not the array.
  CHECK_CAIRN_ERROR(cairn::save(dir / "boxes", v), ErrorKind::invalid_argument, "boxes");
}

TEST_CASE("an ArrayValue is a leaf: it loads as stored and saves as it is") {
  test::TempDir dir;
  const Mixed m = make_mixed();
  cairn::save(dir / "c", m);
  const ArrayValue grid = cairn::load_subtree<ArrayValue>(dir / "c", "grid");
  CHECK(grid.dtype == DType::int16);
  CHECK(grid.shape == cairn::Shape{7, 5});
  CHECK(same_bytes(grid, m.grid.data(), 35));
  // A map of them round-trips any dtype; the typed load of what it saved is the original.
  std::map<std::string, ArrayValue> any;
  any["grid"] = grid;
  any["f"] = cairn::load_subtree<ArrayValue>(dir / "c", "f");
  cairn::save(dir / "any", any);
  const auto back = cairn::load<std::map<std::string, ArrayValue>>(dir / "any");
  CHECK(back.at("grid").bytes == grid.bytes);
  CHECK(back.at("f").bytes == any["f"].bytes);
  const auto typed = cairn::load_subtree<cairn::Array<std::int16_t>>(dir / "any", "grid");
  CHECK(std::memcmp(typed.data(), m.grid.data(), 70) == 0);
  ArrayValue wrong{DType::float32, {4}, std::vector<unsigned char>(12), {}};
  CHECK_CAIRN_ERROR(cairn::save(dir / "wrong", wrong), ErrorKind::invalid_argument, "12 bytes, not 16");
}

TEST_CASE("inspect says what is there: a checkpoint, a safetensors file, a Checkpointer root") {
  test::TempDir dir;
  const Mixed m = make_mixed();
  cairn::save(dir / "c", m, {.user_metadata = cairn::Json::object({{"epoch", 4}})});
  cairn::Inspection i = cairn::inspect(dir / "c");
  CHECK(i.kind == cairn::LocationKind::checkpoint);
  CHECK(i.path == dir / "c");
  CHECK(i.metadata.leaves().size() == 5);
  CHECK(i.metadata.user_metadata.at("epoch").as_int() == 4);

  cairn::save_safetensors(dir / "m.safetensors", std::map<std::string, std::vector<float>>{{"w", m.f}});
  i = cairn::inspect(dir / "m.safetensors");
  CHECK(i.kind == cairn::LocationKind::safetensors);
  CHECK(std::string(cairn::location_kind_name(i.kind)) == "safetensors");
  REQUIRE(i.metadata.leaves().size() == 1);
  CHECK(i.metadata.leaves()[0].key() == "w");

  const std::string root = dir / "root";
  {
    cairn::Checkpointer ck(root);
    for (std::int64_t step : {5, 10, 100}) ck.save(step, m, {.metrics = cairn::Json::object({{"loss", 1.0 / double(step)}})});
  }
  i = cairn::inspect(root);
  CHECK(i.kind == cairn::LocationKind::checkpointer_root);
  REQUIRE(i.steps.size() == 3);
  CHECK(i.steps[0].name == "5");
  CHECK(i.steps[2].name == "100");  // step order, not text order
  CHECK(i.steps[2].latest);
  CHECK(i.latest == "100");
  CHECK(i.latest_problem.empty());
  CHECK(i.steps[1].metrics.at("loss").as_double() == 0.1);
  CHECK(i.steps[1].bytes > 0);
  test::write_file(root + "/latest", "7\n");
  i = cairn::inspect(root);
  CHECK(!i.steps[2].latest);
  CHECK(i.latest_marker);
  CHECK(i.latest_problem.find("damaged") != std::string::npos);
  test::write_file(root + "/latest", std::string("\xff\xfe\n", 3));
  CHECK(cairn::inspect(root).latest_problem.find("\\xff") != std::string::npos);  // printed, not raw
  // A step directory without its commit marker (a save that died, a copy that lost it) is
  // incomplete: listed as such, never a step.
  CHECK(i.incomplete.empty());
  std::filesystem::create_directories(root + "/200");
  test::write_file(root + "/200/data-0-0.bin", "x");
  std::filesystem::create_directories(root + "/notes");  // not named like a step: not listed
  i = cairn::inspect(root);
  CHECK(i.steps.size() == 3);
  CHECK(i.incomplete == std::vector<std::string>{"200"});
  // A committed step whose metadata does not read is listed with its error, never dropped or
  // taken for an incomplete one; the others read as before.
  test::write_file(root + "/10/_METADATA", "{\"damaged\": true}");
  i = cairn::inspect(root);
  REQUIRE(i.steps.size() == 3);
  CHECK(i.steps[0].error.empty());
  CHECK(i.steps[1].name == "10");
  CHECK(i.steps[1].error.find("_METADATA") != std::string::npos);
  CHECK(i.steps[2].error.empty());
  CHECK(i.steps[2].metrics.at("loss").as_double() == 0.01);
  CHECK(i.incomplete == std::vector<std::string>{"200"});
  std::filesystem::remove(root + "/latest");
  i = cairn::inspect(root);
  CHECK(!i.latest_marker);
  CHECK(i.latest_problem.find("there is no latest marker") != std::string::npos);
  CHECK(i.steps.size() == 3);
  CHECK(!i.plain_directory);  // its names are steps: a Checkpointer's root that lost its marker

  // A plain directory of checkpoints has no marker, and that is no problem for verify.
  cairn::save(dir / "plain/a", m);
  cairn::save(dir / "plain/b", m);
  i = cairn::inspect(dir / "plain");
  CHECK(i.kind == cairn::LocationKind::checkpointer_root);
  CHECK(!i.latest_marker);
  CHECK(i.plain_directory);
  CHECK(i.latest_problem.empty());  // no marker was ever missing there
  CHECK(cairn::verify(dir / "plain").ok());
  CHECK_CAIRN_ERROR(cairn::inspect(dir / "nothing"), ErrorKind::not_found, "nothing is there");
}

TEST_CASE("directory names sort in step order: digit runs as numbers, then by text") {
  // Random names of letters and digit runs: sorted, each neighbour in order by the rule
  // spelled out here (a strict weak order: std::sort needs one), and plain step numbers in
  // numeric order.
  std::mt19937 rng(11);
  std::vector<std::string> names;
  for (int i = 0; i < 400; ++i) {
    std::string n;
    const int parts = 1 + static_cast<int>(rng() % 3);
    for (int p = 0; p < parts; ++p) {
      if (rng() % 2) n += std::string(rng() % 3, '0') + std::to_string(rng() % 120);
      else n += static_cast<char>('a' + rng() % 3) + std::string(rng() % 2, '_');
    }
    names.push_back(n);
  }
  for (std::uint64_t step : {0ull, 7ull, 9ull, 10ull, 99ull, 100ull, 12345678901234ull}) names.push_back(std::to_string(step));
  std::shuffle(names.begin(), names.end(), rng);
  cairn::detail::sort_in_step_order(names);
  // The rule, written another way: the name as a list of tokens (a number's value as a
  // zero-padded string of 40 digits, or a character), compared as lists; ties by length, text.
  const auto tokens = [](const std::string& s) {
    std::vector<std::string> t;
    for (std::size_t i = 0; i < s.size();) {
      if (std::isdigit(static_cast<unsigned char>(s[i]))) {
        std::size_t e = i;
        while (e < s.size() && std::isdigit(static_cast<unsigned char>(s[e]))) ++e;
        std::string v = s.substr(i, e - i);
        v.erase(0, std::min(v.find_first_not_of('0'), v.size() - 1));
        t.push_back(std::string(40 - v.size(), '0') + v);  // digits sort below letters, as '0'-'9' do
        i = e;
      } else {
        t.push_back(std::string(1, s[i++]));
      }
    }
    return t;
  };
  for (std::size_t i = 1; i < names.size(); ++i) {
    const auto a = tokens(names[i - 1]), b = tokens(names[i]);
    CAPTURE(names[i - 1]);
    CAPTURE(names[i]);
    CHECK((a < b || (a == b && (names[i - 1].size() < names[i].size() ||
                                (names[i - 1].size() == names[i].size() && names[i - 1] <= names[i])))));
  }
  std::vector<std::string> steps{"100", "9", "10", "007", "7"};
  cairn::detail::sort_in_step_order(steps);
  CHECK(steps == std::vector<std::string>{"7", "007", "9", "10", "100"});
  std::vector<std::string> prefixed{"checkpoint_10", "checkpoint_9", "best_2"};
  cairn::detail::sort_in_step_order(prefixed);
  CHECK(prefixed == std::vector<std::string>{"best_2", "checkpoint_9", "checkpoint_10"});
}

TEST_CASE("verify reads every byte and names the chunk a flipped byte is in") {
  test::TempDir dir;
  const Mixed m = make_mixed();
  const std::string c = dir / "c";
  cairn::save(c, m);
  cairn::VerifyReport r = cairn::verify(c);
  CHECK(r.ok());
  CHECK(r.checksummed);
  CHECK(r.chunks == 5);
  const auto info = cairn::inspect(c).metadata;
  CHECK(r.bytes == info.total_bytes());
  // Flip one byte inside the chunk of "grid".
  const cairn::LeafRecord* grid = info.find_item("state")->find_leaf("grid");
  REQUIRE(grid);
  const std::string file = c + "/" + grid->chunks[0].file;
  std::string data = test::read_file(file);
  data[grid->chunks[0].offset + 3] ^= 0x10;
  test::write_file(file, data);
  r = cairn::verify(c);
  REQUIRE(r.problems.size() == 1);
  CHECK(r.problems[0].key == "grid");
  CHECK(r.problems[0].file == file);
  CHECK(r.problems[0].why.find("checksum mismatch") != std::string::npos);
  CHECK(r.problems[0].offset == grid->chunks[0].offset);

  cairn::save_safetensors(dir / "m.safetensors", m, {.select = {"f", "grid", "d", "bytes"}});
  r = cairn::verify(dir / "m.safetensors");
  CHECK(r.ok());
  CHECK(!r.checksummed);
  CHECK(r.chunks == 4);

  const std::string root = dir / "root";
  {
    cairn::Checkpointer ck(root);
    ck.save(1, m);
    ck.save(2, m);
  }
  r = cairn::verify(root);
  CHECK(r.ok());
  CHECK(r.checkpoints.size() == 2);
  // Each step's own report, and the root's fields their sums.
  REQUIRE(r.steps.size() == 2);
  CHECK(r.steps[0].path == root + "/1");
  CHECK(r.steps[1].path == root + "/2");
  CHECK(r.steps[0].chunks > 0);
  CHECK(r.steps[0].chunks + r.steps[1].chunks == r.chunks);
  CHECK(r.steps[0].bytes + r.steps[1].bytes == r.bytes);
  CHECK(r.steps[0].ok());
  // A flipped byte in step 2's data: its report alone names it; a step whose metadata does
  // not read has that one problem and no chunks.
  const cairn::CheckpointMetadata meta2 = cairn::metadata(root + "/2");
  const cairn::LeafRecord* g2 = meta2.find_item("state")->find_leaf("grid");
  REQUIRE(g2);
  const std::string data2 = root + "/2/" + g2->chunks[0].file;
  std::string bytes2 = test::read_file(data2);
  bytes2[g2->chunks[0].offset] ^= 1;
  test::write_file(data2, bytes2);
  test::write_file(root + "/1/_METADATA", "{}");
  r = cairn::verify(root);
  REQUIRE(r.steps.size() == 2);
  REQUIRE(r.steps[0].problems.size() == 1);
  CHECK(r.steps[0].chunks == 0);
  CHECK(r.steps[0].problems[0].why.find("_METADATA") != std::string::npos);
  REQUIRE(r.steps[1].problems.size() == 1);
  CHECK(r.steps[1].problems[0].key == "grid");
  CHECK(r.problems.size() == 2);
  test::write_file(root + "/latest", "9\n");
  r = cairn::verify(root);
  REQUIRE(r.problems.size() == 3);
  CHECK(r.problems[0].why.find("latest marker") != std::string::npos);  // the root's own, first
}

TEST_CASE("convert: checkpoint to safetensors and back keeps every selected leaf bit-exact") {
  test::TempDir dir;
  const Mixed m = make_mixed();
  cairn::save(dir / "c", m, {.user_metadata = cairn::Json::object({{"epoch", 4}, {"note", "x"}})});
  cairn::ConvertReport r = cairn::convert(dir / "c", dir / "c.safetensors", {.select = {"f", "grid", "d"}});
  CHECK(r.to == cairn::ConvertTo::safetensors);
  CHECK(r.leaves == 3);
  CHECK(r.files == std::vector<std::string>{"c.safetensors"});
  const auto st = cairn::inspect(dir / "c.safetensors").metadata;
  CHECK(st.user_metadata.at("epoch").as_string() == "4");  // safetensors metadata holds strings
  r = cairn::convert(dir / "c.safetensors", dir / "back", {.cast = {{"d", DType::float32}}});
  CHECK(r.to == cairn::ConvertTo::checkpoint);
  CHECK(r.leaves == 3);
  CHECK(r.cast == std::vector<std::string>{"d"});
  const auto back = cairn::read_arrays(dir / "back", {});
  CHECK(same_bytes(back.at("f"), m.f.data(), m.f.size()));
  CHECK(same_bytes(back.at("grid"), m.grid.data(), 35));
  CHECK(back.at("grid").shape == cairn::Shape{7, 5});
  CHECK(back.at("d").dtype == DType::float32);
  CHECK(!back.count("bytes"));
  CHECK_CAIRN_ERROR(cairn::convert(dir / "c", dir / "back"), ErrorKind::already_exists, "");
  std::string leaves;
  const cairn::CheckpointMetadata meta = cairn::metadata(dir / "c");
  for (const auto& l : meta.leaves()) leaves += (leaves.empty() ? "" : ", ") + l.key();
  // A glob that matches no leaf is a typo or the wrong source: refused, by the glob, with the
  // leaves there are, rather than a conversion that selects, leaves out or casts other than
  // what was asked. (Before 2026-11-29 only a selection left empty was.)
  CHECK_CAIRN_ERROR(cairn::convert(dir / "c", dir / "none", {.select = {"zzz"}}), ErrorKind::invalid_argument,
                    "select 'zzz' matches no leaf; its leaves: " + leaves);
  CHECK_CAIRN_ERROR(cairn::convert(dir / "c", dir / "none", {.select = {"zzz", "f", "y*"}, .exclude = {"g*"}}),
                    ErrorKind::invalid_argument, "select 'zzz' matches no leaf; select 'y*' matches no leaf; its leaves: ");
  CHECK_CAIRN_ERROR(cairn::convert(dir / "c", dir / "none", {.exclude = {"grid", "optimizer"}}), ErrorKind::invalid_argument,
                    "exclude 'optimizer' matches no leaf;");
  CHECK_CAIRN_ERROR(cairn::convert(dir / "c", dir / "none", {.cast = {{"d", DType::float32}, {"params/**", DType::bfloat16}}}),
                    ErrorKind::invalid_argument, "cast 'params/**=bfloat16' matches no leaf converted");
  // A cast of leaves left out casts nothing.
  CHECK_CAIRN_ERROR(cairn::convert(dir / "c", dir / "none", {.cast = {{"d", DType::float32}}, .exclude = {"d"}}),
                    ErrorKind::invalid_argument, "cast 'd=float32' matches no leaf converted");
  // Each glob matches, and together they leave nothing: what was asked, and the leaves there are.
  CHECK_CAIRN_ERROR(cairn::convert(dir / "c", dir / "none", {.select = {"f", "d"}, .exclude = {"f", "d"}}),
                    ErrorKind::invalid_argument, "no leaf matches the selection (select 'f', 'd'; exclude 'f', 'd'); its leaves: " + leaves);
  CHECK_CAIRN_ERROR(cairn::convert(dir / "c", dir / "none", {.exclude = {"*"}}), ErrorKind::invalid_argument,
                    "(exclude '*'); its leaves: ");
  CHECK(!std::filesystem::exists(dir / "none"));
  // A subtree's name matches its leaves (glob_matches), as a leaf's does.
  r = cairn::convert(dir / "c", dir / "some", {.cast = {{"grid", DType::int32, false}}, .exclude = {"bytes"}});
  CHECK(r.cast == std::vector<std::string>{"grid"});
  CHECK(r.leaves == 4);
}

TEST_CASE("convert reads its source a batch at a time as it writes, in the writer's order, and keeps every leaf") {
  test::TempDir dir;
  // Leaves of 1 MiB (each written with writes of its own), float64 and int16 in turn: a
  // safetensors file writes the float64 ones first, a checkpoint in the tree's order.
  constexpr std::uint64_t leaf = 1 << 20;
  std::map<std::string, ArrayValue> tree;
  for (int i = 0; i < 8; ++i) {
    ArrayValue v;
    v.dtype = i % 2 ? DType::int16 : DType::float64;
    v.shape = {static_cast<std::int64_t>(leaf / cairn::dtype_size(v.dtype))};
    v.bytes = test::random_bits<unsigned char>(leaf);
    tree["w" + std::to_string(i)] = std::move(v);
  }
  cairn::save(dir / "c", tree);
  const std::uint64_t batch = 2 * leaf, total = 8 * leaf;
  // The old convert read all 8 MiB before its first write; now at most a batch is ahead (plus
  // the leaf being written).
  CHECK(test::convert_read_ahead(dir / "c", dir / "back", {.batch_bytes = batch}, leaf) <= batch + leaf);
  CHECK(test::convert_read_ahead(dir / "c", dir / "c.safetensors", {.batch_bytes = batch}, leaf) <= batch + leaf);
  CHECK(test::convert_read_ahead(dir / "c.safetensors", dir / "again", {.batch_bytes = batch}, leaf) <= batch + leaf);
  // One batch of everything (the default of 256 MiB): read whole before the first write.
  CHECK(test::convert_read_ahead(dir / "c", dir / "whole", {}, leaf) == total);
  for (const char* out : {"back", "c.safetensors", "again", "whole"}) {
    CAPTURE(out);
    const auto back = cairn::read_arrays(dir / out, {});
    REQUIRE(back.size() == tree.size());
    for (const auto& [k, v] : tree) {
      CHECK(back.at(k).dtype == v.dtype);
      CHECK(back.at(k).shape == v.shape);
      CHECK(back.at(k).bytes == v.bytes);
    }
  }
  // A leaf that cannot be read fails the conversion once the writer reaches it: nothing is
  // published at the destination.
  const auto meta = cairn::metadata(dir / "c");
  const cairn::ChunkRecord chunk = meta.leaves().back().chunks[0];
  std::string data = test::read_file(dir / "c" + "/" + chunk.file);
  data[chunk.offset + 5] ^= 1;
  test::write_file(dir / "c" + "/" + chunk.file, data);
  CHECK_CAIRN_ERROR(cairn::convert(dir / "c", dir / "bad", {.batch_bytes = batch}), ErrorKind::corrupt, "");
  CHECK(!std::filesystem::exists(dir / "bad"));
  CHECK_CAIRN_ERROR(cairn::convert(dir / "c", dir / "bad.safetensors", {.batch_bytes = batch}), ErrorKind::corrupt, "");
  CHECK(!std::filesystem::exists(dir / "bad.safetensors"));
}

TEST_CASE("metadata().summary() names a root leaf (a JSON or per-rank item's) as (root), as cairn ls does") {
  test::TempDir dir;
  std::vector<float> w{1, 2};
  cairn::Json note = cairn::Json::object({{"a", 1}});
  cairn::save(dir / "c", cairn::Items().tree("state", w).json("note", note));
  const std::string summary = cairn::metadata(dir / "c").summary();
  CHECK(summary.find("  (root): string[") != std::string::npos);
  CHECK(summary.find("\n  : ") == std::string::npos);
  CHECK(summary.find("item 'state' (tree, 1 leaf)\n") != std::string::npos);  // not "1 leaves"
}

TEST_CASE("verify names each bad block of a chunk with block checksums, and a wrong block list") {
  test::TempDir dir;
  const std::string c = dir / "c";
  const auto values = test::random_bits<float>(300000);  // 1,200,000 bytes: 5 blocks, the last short
  cairn::save(c, values);
  auto meta = cairn::metadata(c);
  const cairn::ChunkRecord chunk = meta.leaves()[0].chunks[0];
  REQUIRE(chunk.blocks);
  const std::uint64_t block = chunk.blocks->block_bytes;
  REQUIRE(chunk.blocks->crc32c.size() == 5);
  CHECK(cairn::verify(c).ok());
  const std::string file = c + "/" + chunk.file, original = test::read_file(file);
  std::string data = original;
  data[chunk.offset + block + 7] ^= 1;          // block 1
  data[chunk.offset + 4 * block + 100] ^= 0x80;  // block 4, the short one
  test::write_file(file, data);
  cairn::VerifyReport r = cairn::verify(c);
  REQUIRE(r.problems.size() == 2);
  CHECK(r.problems[0].offset == chunk.offset + block);
  CHECK(r.problems[0].end == chunk.offset + 2 * block);
  CHECK(r.problems[0].why.find("block 1 of 5") != std::string::npos);
  CHECK(r.problems[1].offset == chunk.offset + 4 * block);
  CHECK(r.problems[1].end == chunk.offset + chunk.nbytes);
  CHECK(r.problems[1].why.find("the chunk's CRC32C differs too") != std::string::npos);
  // Data intact, a block checksum wrong in the (re-signed) metadata.
  test::write_file(file, original);
  meta.items[0].leaves[0].chunks[0].blocks->crc32c[2] ^= 1;
  test::write_file(c + "/_METADATA", cairn::detail::metadata_to_json(meta));
  test::resign(c);
  r = cairn::verify(c);
  REQUIRE(r.problems.size() == 1);
  CHECK(r.problems[0].offset == chunk.offset + 2 * block);
  CHECK(r.problems[0].why.find("the metadata's block checksum is wrong") != std::string::npos);
  // A load that reads that block refuses it; one that reads the chunk whole checks its CRC32C.
  const auto back = cairn::load<std::vector<float>>(c);
  CHECK((back.size() == values.size() && std::memcmp(back.data(), values.data(), values.size() * 4) == 0));
  CHECK_CAIRN_ERROR(cairn::read_arrays(c, {}, {.boxes = {cairn::Box{{static_cast<std::int64_t>(2 * block / 4)}, {2}}}}),
                    ErrorKind::corrupt, "block 2 of the chunk");
}

TEST_CASE("verify names a truncated data file's real size for every chunk past its end") {
  test::TempDir dir;
  std::map<std::string, std::vector<float>> m;
  for (int i = 0; i < 4; ++i) m["l" + std::to_string(i)] = std::vector<float>(5000, static_cast<float>(i));
  cairn::save(dir / "c", m);
  const auto meta = cairn::metadata(dir / "c");
  const std::string file = dir / ("c/" + meta.leaves()[0].chunks[0].file);
  std::filesystem::resize_file(file, 1000);
  const cairn::VerifyReport r = cairn::verify(dir / "c");
  REQUIRE(r.problems.size() == 4);
  for (const auto& p : r.problems) {
    CHECK(p.why.find("it is 1000 bytes") != std::string::npos);
    CHECK(p.file == file);
  }
}
