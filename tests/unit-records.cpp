// SPDX-License-Identifier: Apache-2.0
// The format's records on their own: a checkpoint's metadata written as JSON and read back
// through a store, item kinds by name, and the checks every record gets (boxes inside their
// array, whatever the numbers). Includes only the format headers, so it compiles fast.
#include "cairn/checkpoint/read_ahead.hpp"
#include "cairn/format/files.hpp"
#include "cairn/store/memory_store.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <charconv>
#include <functional>
#include <optional>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <stdexcept>

using namespace cairn;

namespace {

CheckpointMetadata sample() {
  CheckpointMetadata m;
  m.library_version = "9.8.7";
  m.created_unix_ms = 1234567890123;
  m.created = "2009-02-13T23:31:30Z";
  m.data_files = {"data-0-0.bin", "data-1-0.bin"};
  std::uint64_t offset = 0;
  for (ItemKind kind : {ItemKind::tree, ItemKind::json, ItemKind::cereal}) {
    ItemRecord item;
    item.name = std::string("item-") + item_kind_name(kind);
    item.kind = kind;
    LeafRecord leaf;
    leaf.path = KeyPath();
    leaf.dtype = leaf.saved_from = DType::int16;
    leaf.shape = {4, 2};
    for (int half = 0; half < 2; ++half) {
      ChunkRecord c;
      c.file = half ? "data-1-0.bin" : "data-0-0.bin";
      c.offset = offset;
      offset += 64;
      c.nbytes = 8;
      c.crc32c = 77u + static_cast<unsigned>(half);
      c.start = {2 * half, 0};
      c.shape = {2, 2};
      leaf.chunks.push_back(c);
    }
    item.leaves.push_back(leaf);
    m.items.push_back(item);
  }
  return m;
}

// Writes a committed checkpoint's three metadata files into a store.
void put_checkpoint(MemoryStore& store, const std::string& meta) {
  const std::string user = "{\"k\":1}";
  store.put("c/_METADATA", meta);
  store.put("c/_USER_METADATA", user);
  store.put("c/_CHECKPOINT", detail::marker_json({meta.size(), crc32c(meta.data(), meta.size())},
                                                 {user.size(), crc32c(user.data(), user.size())}).dump());
}

}  // namespace

TEST_CASE("metadata written as JSON reads back the same, item kinds by their names") {
  MemoryStore store;
  const CheckpointMetadata m = sample();
  const std::string json = detail::metadata_to_json(m);
  CHECK(json.find("\"cereal\"") != std::string::npos);
  put_checkpoint(store, json);
  const CheckpointMetadata back = detail::read_metadata(store, "c");
  CHECK(back.library_version == m.library_version);
  CHECK(back.created_unix_ms == m.created_unix_ms);
  CHECK(back.data_files == m.data_files);
  REQUIRE(back.items.size() == 3);
  for (std::size_t i = 0; i < 3; ++i) {
    CHECK(back.items[i].kind == m.items[i].kind);
    CHECK(back.items[i].leaves.at(0).chunks.size() == 2);
    CHECK(back.items[i].leaves[0].chunks[1].crc32c == 78u);
    CHECK(back.items[i].leaves[0].chunks[1].start == Shape{2, 0});
  }
  CHECK(back.user_metadata.at("k").as_int() == 1);
  CHECK(detail::metadata_to_json(back) == json);  // and writes the same bytes again
}

TEST_CASE("an unknown item kind, or a chunk outside its array, is a corrupt record naming the file and key") {
  MemoryStore store;
  std::string json = detail::metadata_to_json(sample());
  const auto at = json.find("\"json\"");
  REQUIRE(at != std::string::npos);
  put_checkpoint(store, json.replace(at, 6, "\"blob\""));
  try {
    detail::read_metadata(store, "c");
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::corrupt);
    CHECK(std::string(e.what()).find("unknown item kind 'blob'") != std::string::npos);
    CHECK(e.file() == "memory://c/_METADATA");
  }
  CheckpointMetadata m = sample();
  m.items[0].leaves[0].chunks[1].start = {3, 0};  // rows 3..5 of 4
  put_checkpoint(store, detail::metadata_to_json(m));
  try {
    detail::read_metadata(store, "c");
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("lies outside the array shape [4, 2]") != std::string::npos);
  }
}

TEST_CASE("box_inside: rank, negative numbers and sums that would overflow") {
  const std::int64_t big = std::numeric_limits<std::int64_t>::max();
  CHECK(box_inside(Box{{0, 0}, {4, 2}}, {4, 2}));
  CHECK(box_inside(Box{{4, 2}, {0, 0}}, {4, 2}));  // empty at the end
  CHECK(!box_inside(Box{{0}, {4}}, {4, 2}));
  CHECK(!box_inside(Box{{-1, 0}, {1, 2}}, {4, 2}));
  CHECK(!box_inside(Box{{0, 0}, {5, 2}}, {4, 2}));
  CHECK(!box_inside(Box{{2, 0}, {big, 2}}, {4, 2}));  // 2 + big overflows; must not wrap to "inside"
  CHECK(!box_inside(Box{{big, 0}, {1, 1}}, {big, 2}));
  CHECK(box_inside(Box{{big - 1}, {1}}, {big}));
}

namespace {

// `text` with the first `from` in it replaced by `to` (which must be there).
std::string replaced_once(std::string text, const std::string& from, const std::string& to) {
  const auto at = text.find(from);
  REQUIRE_MESSAGE(at != std::string::npos, from);
  return text.replace(at, from.size(), to);
}

// A string of random bytes, with a bias towards what JSON must escape.
std::string random_text(std::mt19937_64& rng, std::size_t max_len) {
  static const std::string special = "\"\\/\b\f\n\r\t%\x01\x1f\x7f";
  std::string s(rng() % (max_len + 1), ' ');
  for (auto& c : s) {
    switch (rng() % 4) {
      case 0: c = special[rng() % special.size()]; break;
      case 1: c = static_cast<char>(0x80 + rng() % 0x80); break;  // bytes of UTF-8 (or not)
      default: c = static_cast<char>('a' + rng() % 26);
    }
  }
  return s;
}

KeyPath random_path(std::mt19937_64& rng) {
  KeyPath p;
  for (std::size_t i = 0, n = rng() % 4; i < n; ++i) {
    switch (rng() % 4) {
      case 0: p.push_back(KeyEntry::field("f" + random_text(rng, 6))); break;
      case 1: p.push_back(KeyEntry::key(random_text(rng, 8))); break;
      case 2: p.push_back(KeyEntry::index(static_cast<std::int64_t>(rng() >> 1))); break;
      default: p.push_back(KeyEntry::int_key(static_cast<std::int64_t>(rng())));
    }
  }
  return p;
}

// Metadata with random keys, dtypes, shapes, chunk numbers at their limits and shardings
// (some over several processes); the records need not be consistent, only readable.
CheckpointMetadata random_metadata(std::mt19937_64& rng) {
  CheckpointMetadata m;
  m.library_version = random_text(rng, 10);
  m.created_unix_ms = static_cast<std::int64_t>(rng());
  m.created = random_text(rng, 20);
  for (std::size_t i = 0, n = rng() % 3; i < n; ++i) m.data_files.push_back(random_text(rng, 12));
  for (std::size_t i = 0, n = 1 + rng() % 3; i < n; ++i) {
    ItemRecord item;
    item.name = random_text(rng, 8);
    item.kind = rng() % 3 == 0 ? ItemKind::json : ItemKind::tree;
    for (std::size_t k = 0, nodes = rng() % 4; k < nodes; ++k)
      item.nodes.push_back({random_path(rng), static_cast<NodeKind>(rng() % 6)});
    for (std::size_t k = 0, leaves = rng() % 5; k < leaves; ++k) {
      LeafRecord l;
      l.path = random_path(rng);
      l.dtype = static_cast<DType>(rng() % 15);
      l.saved_from = static_cast<DType>(rng() % 15);
      l.order = rng() % 2 ? Order::C : Order::F;
      const std::size_t rank = rng() % 4;
      for (std::size_t d = 0; d < rank; ++d) l.shape.push_back(static_cast<std::int64_t>(rng() % 5 == 0 ? rng() >> 1 : rng() % 9));
      for (std::size_t c = 0, chunks = rng() % 3; c < chunks; ++c) {
        ChunkRecord ch;
        // Half the chunks as a save writes them (the whole array, in a listed file, the size
        // its box holds: format 2's short form leaves those out), half anything at all.
        const bool plain = rng() % 2;
        for (std::size_t d = 0; d < rank; ++d) {
          ch.start.push_back(plain ? 0 : -static_cast<std::int64_t>(rng() % 3));
          ch.shape.push_back(plain ? l.shape[d] : static_cast<std::int64_t>(rng() % 7));
        }
        ch.file = plain && !m.data_files.empty() ? m.data_files[rng() % m.data_files.size()] : random_text(rng, 12);
        ch.offset = rng() % 2 ? std::numeric_limits<std::uint64_t>::max() - rng() % 3 : rng() % 1000;
        ch.nbytes = rng();
        if (plain) (void)try_byte_count(ch.shape, dtype_size(l.dtype), ch.nbytes);
        ch.crc32c = rng() % 2 ? 0xffffffffu : static_cast<std::uint32_t>(rng());
        l.chunks.push_back(ch);
      }
      if (rank == 2 && rng() % 2) {
        const int processes = 1 + static_cast<int>(rng() % 2);
        l.sharding = NamedSharding(Mesh::host_per_process({{random_text(rng, 3) + "x", 2}, {"y", 2}}, 4 / processes, 0),
                                   PartitionSpec({PartitionSpec::Dim("y"), PartitionSpec::Dim(std::vector<std::string>{})}));
      }
      item.leaves.push_back(l);
    }
    m.items.push_back(item);
  }
  return m;
}

void check_same(const CheckpointMetadata& a, const CheckpointMetadata& b) {
  CHECK(a.library_version == b.library_version);
  CHECK(a.created_unix_ms == b.created_unix_ms);
  CHECK(a.created == b.created);
  CHECK(a.data_files == b.data_files);
  REQUIRE(a.items.size() == b.items.size());
  for (std::size_t i = 0; i < a.items.size(); ++i) {
    const ItemRecord &x = a.items[i], &y = b.items[i];
    CHECK(x.name == y.name);
    CHECK(x.kind == y.kind);
    REQUIRE(x.nodes.size() == y.nodes.size());
    for (std::size_t k = 0; k < x.nodes.size(); ++k) {
      CHECK(x.nodes[k].path == y.nodes[k].path);
      CHECK(x.nodes[k].kind == y.nodes[k].kind);
    }
    REQUIRE(x.leaves.size() == y.leaves.size());
    for (std::size_t k = 0; k < x.leaves.size(); ++k) {
      const LeafRecord &p = x.leaves[k], &q = y.leaves[k];
      CHECK(p.path == q.path);
      CHECK(p.dtype == q.dtype);
      CHECK(p.saved_from == q.saved_from);
      CHECK(p.order == q.order);
      CHECK(p.shape == q.shape);
      CHECK(p.sharding == q.sharding);
      REQUIRE(p.chunks.size() == q.chunks.size());
      for (std::size_t c = 0; c < p.chunks.size(); ++c) {
        CHECK(p.chunks[c].start == q.chunks[c].start);
        CHECK(p.chunks[c].shape == q.chunks[c].shape);
        CHECK(p.chunks[c].file == q.chunks[c].file);
        CHECK(p.chunks[c].offset == q.chunks[c].offset);
        CHECK(p.chunks[c].nbytes == q.chunks[c].nbytes);
        CHECK(p.chunks[c].crc32c == q.chunks[c].crc32c);
      }
    }
  }
}

}  // namespace

TEST_CASE("random metadata records, keys of any bytes and numbers at their limits, round-trip through their JSON") {
  // Leaves of 0, 1 or 2 chunks: none, one kept in the record itself, and a list on the heap.
  static_assert(std::is_same_v<decltype(LeafRecord::chunks), cairn::InlineVector<ChunkRecord, 1>>);
  std::mt19937_64 rng(20261122);
  for (int trial = 0; trial < 300; ++trial) {
    CAPTURE(trial);
    const CheckpointMetadata m = random_metadata(rng);
    const std::string json = detail::metadata_to_json(m);
    const CheckpointMetadata back = detail::metadata_from_json(json, "meta");
    check_same(m, back);
    CHECK(detail::metadata_to_json(back) == json);
    // The generic parser agrees that it is JSON, and so does the one item alone.
    CHECK(Json::parse(json).at("items").size() == m.items.size());
    const ItemRecord item = detail::item_from_json(detail::item_to_json(m.items[0]), "item");
    CHECK(detail::item_to_json(item) == detail::item_to_json(m.items[0]));
  }
}

TEST_CASE("metadata members in any order, with white space, escapes and members this version does not know") {
  const CheckpointMetadata m = sample();
  const std::string json = detail::metadata_to_json(m);
  // Members of every record reversed, a value of each JSON kind added under an unknown name,
  // and "data-0-0.bin" spelled with escapes.
  std::string edited = json;
  auto replace = [&](const std::string& from, const std::string& to) {
    std::size_t at = 0;
    while ((at = edited.find(from, at)) != std::string::npos) { edited.replace(at, from.size(), to); at += to.size(); }
  };
  replace("{\"file\":", "{\"future\":{\"a\":[1,2.5e3,null,true,false,\"x\"],\"b\":{}}, \"file\" :\n");
  replace(",\"start\":", " ,\"start\"\t: ");
  replace("\"data-0-0.bin\"", "\"\\u0064ata-0-0\\u002ebin\"");
  replace("\"format\":\"cairn\",", "");
  replace("\"items\":", "\"format\":\"cairn\",\t\"items\":");
  const CheckpointMetadata back = detail::metadata_from_json(edited, "meta");
  check_same(m, back);
  // Non-ASCII escapes decode to UTF-8, surrogate pairs included.
  CheckpointMetadata u = m;
  u.items[0].name = "caf\xc3\xa9 \xf0\x9f\x98\x80";
  std::string uj = detail::metadata_to_json(u);
  uj.replace(uj.find("caf"), u.items[0].name.size(), "caf\\u00e9 \\ud83d\\ude00");
  CHECK(detail::metadata_from_json(uj, "meta").items[0].name == u.items[0].name);
}

TEST_CASE("malformed metadata JSON is a corrupt error naming the file, the byte and, inside a leaf, its key") {
  CheckpointMetadata m = sample();
  m.items[0].leaves[0].path = KeyPath({KeyEntry::field("w")});
  const std::string json = detail::metadata_to_json(m);
  struct Case { std::string from, to, error; };
  const std::vector<Case> cases = {
      {"\"crc32c\":77", "\"crc32c\":77.0", "not an integer that fits in 32 bits"},
      {"\"crc32c\":77", "\"crc32c\":-1", "not an integer that fits in 32 bits"},
      {"\"offset\":0", "\"offset\":007", "leading zero"},
      {"\"shape\":[4,2]", "\"shape\":[4,\"2\"]", "expected an integer"},
      {"\"dtype\":\"int16\"", "\"dtype\":\"int17\"", "unknown dtype 'int17'"},
      {"\"file\":0", "\"file\":\"data-0-0.bin\\q\"", "bad escape"},
      {"\"file\":0", "\"file\":\"\\ud800\"", "lone surrogate"},
      {"\"file\":0", "\"file\":\"a\tb\"", "control character"},
      {"\"file\":0", "\"file\":2", "names data file 2, and data_files lists 2"},
      {"\"file\":0", "\"file\":4294967296", "fits in 32 bits"},
      {"\"key_kinds\":\"f\"", "\"key_kinds\":\"ff\"", "has 1 entries but its kinds"},
      {"\"format_version\":2", "\"format_version\":" + std::to_string(cairn::format_version + 1),
       "format version " + std::to_string(cairn::format_version + 1)},
      {"\"format_version\":2", "\"format_version\":0", "format version 0"},
      {"\"format\":\"cairn\"", "\"format\":\"zarr\"", "not a cairn metadata file"},
      {"\"items\":[", "\"items\":[{\"name\":\"x\",\"kind\":\"tree\",\"nodes\":[],\"leaves\":[]},", ""},  // fine
  };
  for (const auto& k : cases) {
    CAPTURE(k.to);
    const std::string bad = replaced_once(json, k.from, k.to);
    if (k.error.empty()) {
      CHECK(detail::metadata_from_json(bad, "dir/_METADATA").items.size() == 4);
      continue;
    }
    try {
      (void)detail::metadata_from_json(bad, "dir/_METADATA");
      FAIL("no error");
    } catch (const Error& e) {
      CHECK(std::string(e.what()).find(k.error) != std::string::npos);
      CHECK(e.file() == "dir/_METADATA");
      if (k.from.find("format") == std::string::npos) CHECK(e.key_path() == "w");
    }
  }
  // Truncated anywhere: an error, never a crash or a read past the end.
  for (std::size_t n = 0; n < json.size(); n += 7) CHECK_THROWS_AS(detail::metadata_from_json(json.substr(0, n), "m"), Error);
}

TEST_CASE("format 2's short form: what it leaves out is restored from the leaf, and files named by number") {
  const CheckpointMetadata m = sample();
  const std::string json = detail::metadata_to_json(m);
  // A save's leaves leave out saved_from equal to dtype, order C, a chunk's start at the origin,
  // its shape equal to the leaf's and its size; the second chunk of each leaf starts at row 2.
  CHECK(json.find("\"saved_from\"") == std::string::npos);
  CHECK(json.find("\"order\"") == std::string::npos);
  CHECK(json.find("\"nbytes\"") == std::string::npos);
  CHECK(json.find("\"file\":0,\"offset\":0,\"crc32c\":77,\"shape\":[2,2]}") != std::string::npos);
  CHECK(json.find("\"file\":1,\"offset\":64,\"crc32c\":78,\"start\":[2,0],\"shape\":[2,2]}") != std::string::npos);
  // What differs from the defaults is written, and reads back.
  CheckpointMetadata d = m;
  LeafRecord& l = d.items[0].leaves[0];
  l.saved_from = DType::float32;
  l.order = Order::F;
  l.chunks[0].nbytes = 9;           // not what its box holds (validation refuses it; the text keeps it)
  l.chunks[1].file = "elsewhere";   // not listed: by name
  const std::string dj = detail::metadata_to_json(d);
  for (const char* member : {"\"saved_from\":\"float32\"", "\"order\":\"F\"", "\"nbytes\":9", "\"file\":\"elsewhere\""})
    CHECK_MESSAGE(dj.find(member) != std::string::npos, member);
  check_same(d, detail::metadata_from_json(dj, "meta"));

  // data_files after the items: chunks named by number are resolved at the end, and checked.
  std::string late = json;
  const std::string files = ",\"data_files\":[\"data-0-0.bin\",\"data-1-0.bin\"]";
  const auto files_at = late.find(files);
  REQUIRE(files_at != std::string::npos);
  late.erase(files_at, files.size());
  late.insert(late.size() - 1, files);
  check_same(m, detail::metadata_from_json(late, "meta"));
  std::string late_bad = late;
  late_bad.replace(late_bad.find("\"file\":1"), 8, "\"file\":7");
  CHECK_THROWS_WITH_AS(detail::metadata_from_json(late_bad, "meta"), doctest::Contains("names data file 7, and data_files lists 2"), Error);
  // data_files is required (a number would name nothing).
  std::string none = json;
  none.erase(none.find(files), files.size());
  CHECK_THROWS_WITH_AS(detail::metadata_from_json(none, "meta"), doctest::Contains("has no 'data_files'"), Error);

  // An item sent on its own (a rank's per-rank items) names its files, and a number there is refused.
  const std::string item = detail::item_to_json(m.items[0]);
  CHECK(item.find("\"file\":\"data-1-0.bin\"") != std::string::npos);
  std::string numbered = item;
  numbered.replace(numbered.find("\"file\":\"data-0-0.bin\""), 21, "\"file\":0");
  CHECK_THROWS_WITH_AS(detail::item_from_json(numbered, "item"), doctest::Contains("by number outside a checkpoint's metadata"), Error);
}

TEST_CASE("format 1's full records read the same as format 2's short ones") {
  // The sample as format 1 wrote it: every member, files by name.
  const CheckpointMetadata m = sample();
  std::string v1 = "{\"format\":\"cairn\",\"format_version\":1,\"library_version\":\"9.8.7\",\"created_unix_ms\":1234567890123,"
                   "\"created\":\"2009-02-13T23:31:30Z\",\"data_files\":[\"data-0-0.bin\",\"data-1-0.bin\"],\"items\":[";
  std::uint64_t offset = 0;
  for (const char* kind : {"tree", "json", "cereal"}) {
    if (offset) v1 += ',';
    v1 += std::string("{\"name\":\"item-") + kind + "\",\"kind\":\"" + kind + "\",\"nodes\":[],\"leaves\":[{\"key\":\"\",\"key_kinds\":\"\","
          "\"dtype\":\"int16\",\"saved_from\":\"int16\",\"shape\":[4,2],\"order\":\"C\",\"chunks\":[";
    for (int half = 0; half < 2; ++half) {
      v1 += std::string(half ? "," : "") + "{\"start\":[" + (half ? "2" : "0") + ",0],\"shape\":[2,2],\"file\":\"data-" +
            (half ? "1" : "0") + "-0.bin\",\"offset\":" + std::to_string(offset) + ",\"nbytes\":8,\"crc32c\":" +
            std::to_string(77 + half) + "}";
      offset += 64;
    }
    v1 += "]}]}";
  }
  v1 += "]}";
  const CheckpointMetadata back = detail::metadata_from_json(v1, "meta");
  CHECK(back.format_version == 1);
  check_same(m, back);
  // Written again, it is format 2 (the version says what the text's form is).
  CHECK(detail::metadata_to_json(back) == detail::metadata_to_json(m));
  CHECK(detail::metadata_to_json(back).find("\"format_version\":2") != std::string::npos);
}

namespace {

// An item of `n` plain leaves (one chunk, the whole array, in a listed file, stored as saved,
// C order, unsharded), as a save writes many small leaves, with keys of any bytes that share
// prefixes as a tree's do, any dtype and rank, offsets in and out of order and in several files.
ItemRecord plain_item(std::mt19937_64& rng, std::size_t n, const std::vector<std::string>& files) {
  ItemRecord item;
  item.name = "state";
  std::uint64_t offset = rng() % 100;
  std::set<std::string> keys;
  for (std::size_t k = 0; k < n; ++k) {
    LeafRecord l;
    switch (rng() % 4) {
      case 0: l.path = random_path(rng); break;
      case 1: l.path = KeyPath({KeyEntry::field("layers"), KeyEntry::index(static_cast<std::int64_t>(k)), KeyEntry::field("w")}); break;
      case 2: {  // 局, 屁 or 层: keys that share the first two bytes of a character
        const char* han[] = {"\xe5\xb1\x80", "\xe5\xb1\x81", "\xe5\xb1\x82"};
        l.path = KeyPath({KeyEntry::field("\xc3\xa9t\xc3\xa9"), KeyEntry::key(han[rng() % 3] + std::to_string(rng() % 100000))});
        break;
      }
      default: l.path = KeyPath({KeyEntry::field("p"), KeyEntry::int_key(static_cast<std::int64_t>(rng()))});
    }
    if (!keys.insert(l.path.str()).second) { --k; continue; }
    l.dtype = l.saved_from = static_cast<DType>(rng() % 15);
    for (std::size_t d = 0, rank = rng() % 5; d < rank; ++d) l.shape.push_back(static_cast<std::int64_t>(rng() % 7));
    ChunkRecord c;
    c.start.assign(l.shape.size(), 0);
    c.shape = l.shape;
    c.file = files[rng() % 8 == 0 ? rng() % files.size() : 0];
    c.nbytes = byte_count(l.shape, dtype_size(l.dtype));
    // Mostly one after another; sometimes a gap, a step back, or far out.
    switch (rng() % 8) {
      case 0: offset += rng() % 1000; break;
      case 1: offset = offset > 500 ? offset - rng() % 500 : offset; break;
      case 2: offset = (std::uint64_t{1} << 62) + rng() % 1000; break;
      default: break;
    }
    c.offset = offset;
    offset += c.nbytes;
    c.crc32c = rng() % 4 ? static_cast<std::uint32_t>(rng()) : (rng() % 2 ? 0u : 0xffffffffu);
    l.chunks.push_back(c);
    item.leaves.push_back(std::move(l));
  }
  return item;
}

bool valid_utf8(std::string_view s) {
  for (std::size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    const std::size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (len == 0 || i + len > s.size()) return false;
    for (std::size_t k = 1; k < len; ++k)
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
    i += len;
  }
  return true;
}

}  // namespace

TEST_CASE("format 3's leaf table: an item of many plain leaves in columns reads back as the records it was written from") {
  std::mt19937_64 rng(20261203);
  const std::vector<std::string> files = {"data-0-0.bin", "data-0-1.bin", "data-1-0.bin"};
  for (int trial = 0; trial < 12; ++trial) {
    CAPTURE(trial);
    CheckpointMetadata m;
    m.library_version = "x";
    m.data_files = files;
    m.items.push_back(plain_item(rng, detail::leaf_table_min_leaves + rng() % 2000, files));
    m.items[0].nodes.push_back({KeyPath(), NodeKind::struct_});
    // A second item of few leaves keeps its records beside it.
    m.items.push_back(plain_item(rng, 3, files));
    m.items[1].name = "other";
    int version = 0;
    const std::string json = detail::metadata_to_json(m, &version);
    CHECK(version == 3);
    CHECK(json.find("\"format_version\":3") != std::string::npos);
    CHECK(json.find("\"leaf_table\"") != std::string::npos);
    CHECK(json.find("\"leaves\":[{") != std::string::npos);  // the small item's records
    detail::PrintedKeys printed;
    const CheckpointMetadata back = detail::metadata_from_json(json, "meta", &printed);
    CHECK(back.format_version == 3);
    check_same(m, back);
    REQUIRE(printed.size() == 2);
    REQUIRE(printed[0].size() == m.items[0].leaves.size());
    for (std::size_t k = 0; k < printed[0].size(); ++k) REQUIRE(printed[0][k] == m.items[0].leaves[k].key());
    CHECK(detail::metadata_to_json(back) == json);
    CHECK(Json::parse(json).at("items").size() == 2);
    // Smaller than the same leaves' records: what the table is for (a usual tree's, a sixth:
    // the next test).
    {
      const detail::DataFileNumbers numbers(m.data_files);
      std::string table, records;
      detail::append_item_json(table, m.items[0], &numbers, true);
      detail::append_item_json(records, m.items[0], &numbers, false);
      CHECK(table.size() < records.size());
    }
    // Keys cut between UTF-8 characters: valid keys give a valid text.
    CheckpointMetadata utf8 = m;
    utf8.items.resize(1);
    auto& leaves = utf8.items[0].leaves;
    leaves.erase(std::remove_if(leaves.begin(), leaves.end(), [](const LeafRecord& l) { return !valid_utf8(l.key()); }), leaves.end());
    if (leaves.size() >= detail::leaf_table_min_leaves) {
      const std::string text = detail::metadata_to_json(utf8);
      CHECK(text.find("\"leaf_table\"") != std::string::npos);
      CHECK(valid_utf8(text));
    }
  }
  // Where one leaf cannot go in a table (two chunks, a cast, F order, block checksums, a file
  // not listed, an offset past 2^63), the item keeps its records: format 2.
  const std::vector<std::function<void(LeafRecord&)>> odd = {
      [](LeafRecord& l) { l.chunks.push_back(l.chunks[0]); },
      [](LeafRecord& l) { l.saved_from = l.dtype == DType::float32 ? DType::float64 : DType::float32; },
      [](LeafRecord& l) { l.order = Order::F; },
      [](LeafRecord& l) { l.chunks[0].blocks.emplace(BlockChecksums{4, {1, 2}}); },
      [](LeafRecord& l) { l.chunks[0].file = "elsewhere"; },
      [](LeafRecord& l) { l.chunks[0].offset = std::uint64_t{1} << 63; },
      [](LeafRecord& l) { l.chunks[0].nbytes += 1; },
  };
  for (std::size_t k = 0; k < odd.size(); ++k) {
    CAPTURE(k);
    CheckpointMetadata m;
    m.data_files = files;
    m.items.push_back(plain_item(rng, detail::leaf_table_min_leaves, files));
    odd[k](m.items[0].leaves[rng() % m.items[0].leaves.size()]);
    int version = 0;
    const std::string json = detail::metadata_to_json(m, &version);
    CHECK(version == 2);
    CHECK(json.find("\"leaf_table\"") == std::string::npos);
    check_same(m, detail::metadata_from_json(json, "meta"));
  }
  // Keys longer than a reader takes from a table that size (64 MiB and 64 bytes a byte of
  // table): records.
  {
    CheckpointMetadata longer;
    longer.data_files = files;
    longer.items.push_back(plain_item(rng, detail::leaf_table_min_leaves, files));
    const detail::DataFileNumbers numbers(files);
    CHECK(detail::writes_leaf_table(longer.items[0], &numbers));
    const std::string name(80 << 10, 'n');
    for (auto& l : longer.items[0].leaves) l.path = KeyPath({KeyEntry::field(name), KeyEntry::index(static_cast<std::int64_t>(&l - longer.items[0].leaves.data()))});
    CHECK_FALSE(detail::writes_leaf_table(longer.items[0], &numbers));
    // 30 KiB names: 30 MiB of keys, within (printed to tell: a bound of 3 bytes a character is
    // past it); 25 KiB of '/', each printed as "%2F": 75 MiB, past it.
    struct Names {
      std::size_t fill;
      char ch;
      bool table;
    };
    for (const Names& c : {Names{std::size_t{30} << 10, 'n', true}, Names{std::size_t{25} << 10, '/', false}}) {
      CAPTURE(c.ch);  // (a member, not a structured binding: clang 14 captures none in CAPTURE's lambda)
      const std::string named(c.fill, c.ch);
      for (auto& l : longer.items[0].leaves) l.path = KeyPath({KeyEntry::key(named), KeyEntry::index(static_cast<std::int64_t>(&l - longer.items[0].leaves.data()))});
      CHECK(detail::writes_leaf_table(longer.items[0], &numbers) == c.table);
      if (c.table) check_same(longer, detail::metadata_from_json(detail::metadata_to_json(longer), "meta"));
    }
  }
  // Fewer leaves than leaf_table_min_leaves: records.
  CheckpointMetadata few;
  few.data_files = files;
  few.items.push_back(plain_item(rng, detail::leaf_table_min_leaves - 1, files));
  CHECK(detail::metadata_to_json(few).find("\"leaf_table\"") == std::string::npos);
}

TEST_CASE("a damaged leaf table is a corrupt error naming the file and, where it is one leaf's, its key") {
  // 1,024 leaves "a/0" .. "a/1023" of int8[2], one after another in data-0-0.bin.
  CheckpointMetadata m;
  m.data_files = {"data-0-0.bin"};
  ItemRecord item;
  item.name = "state";
  for (std::size_t k = 0; k < detail::leaf_table_min_leaves; ++k) {
    LeafRecord l;
    l.path = KeyPath({KeyEntry::field("a"), KeyEntry::index(static_cast<std::int64_t>(k))});
    l.dtype = l.saved_from = DType::int8;
    l.shape = {2};
    ChunkRecord c;
    c.start = {0};
    c.shape = {2};
    c.file = "data-0-0.bin";
    c.offset = 2 * k;
    c.nbytes = 2;
    c.crc32c = 0xabcdef01u + static_cast<std::uint32_t>(k);
    l.chunks.push_back(c);
    item.leaves.push_back(std::move(l));
  }
  m.items.push_back(std::move(item));
  const std::string json = detail::metadata_to_json(m);
  REQUIRE(json.find("\"keys\":[0,\"a/0\",2,\"1\",2,\"2\",") != std::string::npos);
  REQUIRE(json.find("\"key_kinds\":[[\"fi\",1024]],\"dtype\":[[\"int8\",1024]],\"rank\":[[1,1024]],\"shape\":[2,2,") != std::string::npos);
  REQUIRE(json.find("\"file\":[[0,1024]],\"offset\":[0,0,0,") != std::string::npos);
  REQUIRE(json.find("\"crc32c\":\"abcdef01abcdef02") != std::string::npos);
  check_same(m, detail::metadata_from_json(json, "meta"));
  {  // less than a sixth of their records here
    const detail::DataFileNumbers numbers(m.data_files);
    std::string records;
    detail::append_item_json(records, m.items[0], &numbers, false);
    CHECK(6 * json.size() < records.size());
  }
  struct Case { std::string from, to, error, key; };
  const std::vector<Case> cases = {
      {"\"keys\":[0,\"a/0\",2,\"1\"", "\"keys\":[0,\"a/0\",4,\"1\"", "shares 4 bytes with a key of 3", ""},
      {"\"keys\":[0,\"a/0\"", "\"keys\":[1,\"a/0\"", "shares 1 bytes with a key of 0", ""},
      {"\"keys\":[0,\"a/0\",", "\"keys\":[0,\"a/0\",2,", "expected a string", ""},  // every pair off by one
      {"\"],\"key_kinds\":", "\",1],\"key_kinds\":", "not [shared, suffix, ...] pairs", ""},
      {"[[\"fi\",1024]]", "[[\"fi\",1023]]", "'key_kinds' runs cover fewer than its 1024 keys", ""},
      {"[[\"fi\",1024]]", "[[\"fi\",1024],[\"fi\",1]]", "'key_kinds' runs cover more than its 1024 keys", ""},
      {"[[\"fi\",1024]]", "[[\"fi\",18446744073709551615],[\"fi\",2]]", "'key_kinds' runs cover more", ""},
      {"[[\"fi\",1024]]", "[[\"fi\",0],[\"fi\",1024]]", "with a count of at least 1", ""},
      {"[[\"fi\",1024]]", "[[\"fi\",1024,1]]", "not [value, count]", ""},
      {"[[\"fi\",1024]]", "[[\"fi\"]]", "not [value, count]", ""},
      {"[[\"int8\",1024]]", "[[\"int9\",1024]]", "unknown dtype 'int9'", ""},
      {"[[1,1024]]", "[[1,1023],[2,1]]", "shape column ends before this leaf's 2 dimensions", "a/1023"},
      {"[[1,1024]]", "[[1,1023],[0,1]]", "dimensions past its leaves'", ""},
      {"\"file\":[[0,1024]]", "\"file\":[[0,1000],[1,24]]", "names data file 1, and data_files lists 1", "a/1000"},
      {"\"offset\":[0,", "\"offset\":[-1,", "negative offset", "a/0"},
      {"\"offset\":[0,0,", "\"offset\":[0,-3,", "before the start of its file", "a/1"},
      {"\"offset\":[0,0,", "\"offset\":[0,-9223372036854775808,", "before the start of its file", "a/1"},
      {"\"offset\":[0,0,", "\"offset\":[9223372036854775807,9223372036854775807,", "overflows 64 bits", "a/1"},
      {"\"offset\":[0,0,", "\"offset\":[0,", "1023 offsets for 1024 keys", ""},
      {"\"crc32c\":\"abcdef01", "\"crc32c\":\"abcdef0", "8191 digits for 1024 keys", ""},
      {"\"crc32c\":\"abcdef01abcdef02", "\"crc32c\":\"abcdef01abcdeF02", "not a lowercase hexadecimal digit", "a/1"},
      {"\"leaf_table\":{", "\"leaves\":[],\"leaf_table\":{", "both 'leaves' and 'leaf_table'", ""},
      {"\"leaf_table\":{", "\"leaf_tables\":{", "has no 'leaves'", ""},
      {"\"keys\":[", "\"shape\":[],\"keys\":[", "a leaf table has 'shape' twice", ""},
      {"\"leaf_count\":1024", "\"leaf_count\":1025", "leaf_count 1025 but lists 1024", ""},
  };
  for (const auto& k : cases) {
    CAPTURE(k.to);
    const std::string bad = replaced_once(json, k.from, k.to);
    try {
      (void)detail::metadata_from_json(bad, "dir/_METADATA");
      FAIL("no error");
    } catch (const Error& e) {
      CHECK(e.kind() == ErrorKind::corrupt);
      CHECK(std::string(e.what()).find(k.error) != std::string::npos);
      CHECK(e.file() == "dir/_METADATA");
      CHECK(e.key_path() == k.key);
    }
  }
  // Truncated anywhere: an error, never a crash or a read past the end.
  for (std::size_t n = 0; n < json.size(); n += 5) CHECK_THROWS_AS(detail::metadata_from_json(json.substr(0, n), "m"), Error);
  // Keys that each share all of the key before and add a byte: 20,000 of them are 8 bytes of
  // text each and would spell 200 MB; refused once past the bound, before the memory is taken.
  std::string growing = "[0,\"a\"";
  for (int k = 1; k < 20000; ++k) growing += "," + std::to_string(k) + ",\"a\"";
  growing += ']';
  const std::string keys = json.substr(json.find("\"keys\":[") + 7, json.find("],\"key_kinds\"") - json.find("\"keys\":[") - 6);
  CHECK_THROWS_WITH_AS(detail::metadata_from_json(replaced_once(json, keys, growing), "m"),
                       doctest::Contains("a leaf table's keys come to more than"), Error);
}

TEST_CASE("strings of every length with a quote, backslash, control or high byte at every position read back exactly") {
  // The reader looks for the end of a string sixteen bytes at a time: each byte that stops it
  // (or must not: 0x20, 0x7f and bytes from 0x80 on) at each position of strings of 0-70 bytes.
  const std::string stops = std::string("\"\\\x01\x1f\x00", 5), passes = "\x20\x7f\x80\xff/";
  int checked = 0;
  for (std::size_t len = 1; len <= 70; ++len)
    for (std::size_t at = 0; at < len; ++at)
      for (const char c : stops + passes) {
        std::string text(len, 'a');
        for (std::size_t i = 0; i < len; ++i) text[i] = static_cast<char>('a' + (i * 7 + len) % 26);
        text[at] = c;
        std::string json;
        detail::append_json_string(json, text);
        CAPTURE(len);
        CAPTURE(at);
        CAPTURE(static_cast<int>(static_cast<unsigned char>(c)));
        REQUIRE(Json::parse(json).as_string() == text);
        // The same byte unescaped: a control character is refused at its byte, a quote ends
        // the string there.
        const std::string raw = "\"" + text + "\"";
        if (static_cast<unsigned char>(c) < 0x20) {
          const std::string where = "at byte " + std::to_string(at + 1) + ": control character";
          CHECK_THROWS_WITH_AS(Json::parse(raw), doctest::Contains(where.c_str()), Error);
        } else if (c == '"') {
          CHECK_THROWS_AS(Json::parse(raw), Error);  // text after the string's end
          CHECK(Json::parse("\"" + text.substr(0, at) + "\"").as_string() == text.substr(0, at));
        } else if (c != '\\') {
          CHECK(Json::parse(raw).as_string() == text);
        }
        ++checked;
      }
  CHECK(checked == 70 * 71 / 2 * 10);
}

TEST_CASE("Json keeps unsigned 64-bit integers of 2^63 and more: written as their digits, read back exactly") {
  constexpr std::uint64_t max = std::numeric_limits<std::uint64_t>::max();
  constexpr std::uint64_t top = std::uint64_t{1} << 63;
  CHECK(Json(max).dump() == "18446744073709551615");  // was -1
  CHECK(Json(top).dump() == "9223372036854775808");
  CHECK(Json(top - 1).is_int());  // int64 where it fits: one form per number
  CHECK(Json(top - 1) == Json(std::int64_t{9223372036854775807}));
  CHECK(Json(std::uint64_t{5}) == Json(5));
  CHECK_FALSE(Json(max).is_int());
  CHECK(Json(max).is_uint());
  CHECK(Json(max).is_number());
  CHECK(Json(max).as_double() == 18446744073709551615.0);
  CHECK_THROWS_WITH_AS(Json(max).as_int(), doctest::Contains("as_uint()"), Error);
  CHECK_THROWS_WITH_AS(Json(-1).as_uint(), doctest::Contains("negative"), Error);
  CHECK_FALSE(Json(-1).is_uint());
  CHECK(Json(7).as_uint() == 7);
  CHECK(Json(std::uint32_t{4000000000u}).as_int() == 4000000000);
  std::mt19937_64 rng(11);
  for (int i = 0; i < 2000; ++i) {
    const std::uint64_t u = rng() >> (rng() % 64);
    const Json back = Json::parse(Json::object({{"seed", u}}).dump());
    REQUIRE(back.at("seed").as_uint() == u);
    CHECK(back.at("seed").is_int() == (u < top));
    CHECK(back == Json::object({{"seed", u}}));
  }
}

TEST_CASE("Json::parse is strict: one value, no leading zeros, bounded depth, valid escapes") {
  CHECK(Json::parse(" {\"a\": [1, -2, 3.5, \"\\u00e9\", null, true]} ").at("a").size() == 6);
  CHECK(Json::parse("18446744073709551615").as_uint() == std::numeric_limits<std::uint64_t>::max());  // beyond int64
  CHECK(Json::parse("18446744073709551615").as_double() == 18446744073709551615.0);
  CHECK(Json::parse("18446744073709551616").as_double() == 18446744073709551616.0);  // beyond uint64: a double
  CHECK_FALSE(Json::parse("18446744073709551616").is_uint());
  CHECK(Json::parse("-9223372036854775808").as_int() == std::numeric_limits<std::int64_t>::min());
  for (const char* bad : {"01", "1.", "-", "{\"a\":1,}", "[1 2]", "{\"a\":1}x", "\"\\ud800\"", "{\"a\":1,\"a\":2}", "tru", ""})
    CHECK_THROWS_AS(Json::parse(bad), Error);
  // A duplicate key anywhere in a large object (checked at its end there), not only a small one's.
  for (std::size_t n : {3, 16, 17, 100, 5000}) {
    std::string obj = "{";
    for (std::size_t i = 0; i < n; ++i) obj += (i ? ",\"k" : "\"k") + std::to_string(i) + "\":" + std::to_string(i);
    CHECK(Json::parse(obj + "}").size() == n);
    for (std::size_t dup : {std::size_t{0}, n / 2, n - 1}) {
      CAPTURE(n);
      CAPTURE(dup);
      const std::string want = "duplicate key 'k" + std::to_string(dup) + "'";
      CHECK_THROWS_WITH_AS(Json::parse(obj + ",\"k" + std::to_string(dup) + "\":0}"), doctest::Contains(want.c_str()), Error);
    }
  }
  const std::string deep = std::string(128, '[') + std::string(128, ']');
  CHECK(Json::parse(deep).is_array());
  CHECK_THROWS_WITH_AS(Json::parse("[" + deep + "]"), doctest::Contains("nested deeper than 128"), Error);
}

TEST_CASE("the data files named at the head of a metadata text: found without parsing it, and nothing on any surprise") {
  using detail::data_files_in_head;
  // As cairn writes them: the names come back in order.
  CheckpointMetadata m = sample();
  m.data_files = {"data-0-0.bin", "data-0-1.bin", "data-12-345.bin"};
  const std::string written = detail::metadata_to_json(m);
  CHECK(data_files_in_head(written) == m.data_files);
  CHECK(data_files_in_head(R"({"format":"cairn","data_files":[],"items":[]})").empty());
  // Any other layout, name or shape of the list gives none: the read-ahead is only a hint,
  // and it opens what it finds, so it takes nothing but data-<process>-<n>.bin.
  for (const char* text : {R"({"data_files": ["data-0-0.bin"]})", R"({"data_files":["../data-0-0.bin"]})",
                           R"({"data_files":["data-0-0.bin/.."]})", R"({"data_files":["data-0-0.binx"]})",
                           R"({"data_files":["data--0.bin"]})", R"({"data_files":["data-0-.bin"]})",
                           R"({"data_files":["data-0-0.bin",]})", R"({"data_files":["data-0-0.bin")",
                           R"({"data_files":["data-0-\u0030.bin"]})", R"({"data_files":["data-0-0.bin" ,"data-0-1.bin"]})",
                           R"({"data_files":["data-0-1234567890.bin"]})", R"({"data_files":"data-0-0.bin"})", ""}) {
    const std::string shown = text;
    CAPTURE(shown);
    CHECK(data_files_in_head(text).empty());
  }
  // At most 64 names, and only in the first 4 KiB.
  std::string list;
  for (int i = 0; i < 65; ++i) list += (i ? ",\"" : "\"") + detail::data_file_name(0, i) + "\"";
  CHECK(data_files_in_head("{\"data_files\":[" + list + "]}").empty());
  CHECK(data_files_in_head("{\"data_files\":[" + list.substr(list.find(",\"data-0-64")) .substr(1) + "]}").size() == 1);
  CHECK(data_files_in_head("{\"x\":\"" + std::string(4096, 'a') + "\",\"data_files\":[\"data-0-0.bin\"]}").empty());
  // Whatever the bytes, a name it returns has that form (random damage to a written head).
  std::mt19937_64 g(7);
  const std::string head = written.substr(0, 300);
  for (int round = 0; round < 3000; ++round) {
    std::string t = head;
    for (int k = 0; k < 1 + static_cast<int>(g() % 4); ++k) t[g() % t.size()] = static_cast<char>(g());
    for (const auto& name : data_files_in_head(t)) {
      CAPTURE(name);
      int process = -1, index = -1, used = 0;
      CHECK(std::sscanf(name.c_str(), "data-%d-%d.bin%n", &process, &index, &used) == 2);
      CHECK(used == static_cast<int>(name.size()));
      CHECK(name.find('/') == std::string::npos);
    }
  }
}

TEST_CASE("inner_nodes: every proper prefix of every leaf once, its kind from its children, conflicts found in any order") {
  {
    // A parent's key child, then its index child, side by side: the parent is a sequence.
    LeafRecords leaves(2);
    leaves[0].path = KeyPath().child(KeyEntry::key("p")).child(KeyEntry::key("a"));
    leaves[1].path = KeyPath().child(KeyEntry::key("p")).child(KeyEntry::index(0));
    const auto nodes = detail::inner_nodes(
        leaves, NodeKind::map, true, [](const std::string&) { return false; },
        [](const std::string&, const LeafRecord&) { throw std::runtime_error("conflict"); });
    REQUIRE(nodes.size() == 2);
    CHECK(nodes[1].path.str() == "p");
    CHECK(nodes[1].kind == NodeKind::sequence);
  }
  std::mt19937 rng(1234);  // fixed: 200 rounds of random trees, the same each run
  for (int round = 0; round < 200; ++round) {
    CAPTURE(round);
    // Random leaves of depth 1 to 4 over a small alphabet, so that parents are shared often.
    LeafRecords leaves;
    std::set<std::string> printed_leaves;
    const int n = 1 + static_cast<int>(rng() % 40);
    for (int i = 0; i < n; ++i) {
      LeafRecord l;
      const int depth = 1 + static_cast<int>(rng() % 4);
      for (int d = 0; d < depth; ++d)
        l.path.push_back(rng() % 3 == 0 ? KeyEntry::index(static_cast<std::int64_t>(rng() % 3))
                                        : KeyEntry::key(std::string(1, static_cast<char>('a' + rng() % 3))));
      if (printed_leaves.insert(l.path.str()).second) leaves.push_back(std::move(l));
    }
    // In key order (siblings side by side, as imports list them), in reverse (a parent's keys
    // before its indices), or as generated.
    if (round % 3 == 0)
      std::sort(leaves.begin(), leaves.end(), [](const LeafRecord& a, const LeafRecord& b) { return a.key() < b.key(); });
    if (round % 3 == 1)
      std::sort(leaves.begin(), leaves.end(), [](const LeafRecord& a, const LeafRecord& b) { return a.key() > b.key(); });
    // What the nodes must be, worked out the plain way: every proper prefix, a sequence where
    // some leaf below it continues with an index; a conflict where a prefix is a leaf.
    std::map<std::string, NodeKind> want{{"", NodeKind::map}};
    bool want_conflict = false;
    for (const auto& l : leaves) {
      KeyPath p;
      for (std::size_t d = 0; d < l.path.size(); ++d) {
        auto [it, fresh] = want.try_emplace(p.str(), NodeKind::map);
        (void)fresh;
        if (l.path.entries()[d].kind == KeyEntry::Kind::index) it->second = NodeKind::sequence;
        if (printed_leaves.count(p.str())) want_conflict = true;
        p.push_back(l.path.entries()[d]);
      }
    }
    bool conflict = false;
    std::vector<NodeRecord> got;
    try {
      got = detail::inner_nodes(
          leaves, NodeKind::map, true, [&](const std::string& s) { return printed_leaves.count(s) != 0; },
          [&](const std::string&, const LeafRecord&) { throw std::runtime_error("conflict"); });
    } catch (const std::runtime_error&) {
      conflict = true;
    }
    CHECK(conflict == want_conflict);
    if (conflict) continue;
    REQUIRE(got.size() == want.size());
    for (const auto& node : got) {
      CAPTURE(node.path.str());
      REQUIRE(want.count(node.path.str()) == 1);
      CHECK(node.kind == want.at(node.path.str()));
    }
  }
}

namespace {
// What JSON's grammar and the type make of an integer's text: its value where it is an
// integer that fits I, nothing otherwise (the reference for JsonReader::integer below).
template <class I>
std::optional<I> json_integer(const std::string& tok) {
  std::size_t i = tok[0] == '-' ? 1 : 0;
  const std::size_t digits = i;
  while (i < tok.size() && tok[i] >= '0' && tok[i] <= '9') ++i;
  if (i == digits || i != tok.size() || (tok[digits] == '0' && i - digits > 1)) return std::nullopt;
  I v{};
  const auto [end, ec] = std::from_chars(tok.data(), tok.data() + tok.size(), v);
  if (ec != std::errc() || end != tok.data() + tok.size()) return std::nullopt;
  return v;
}

template <class I>
void check_integers(std::mt19937_64& rng) {
  const std::string tails[] = {"", ",", "}", "]", " ", ".5", ".", "e3", "E-2", "0", "x"};
  for (int n = 0; n < 20000; ++n) {
    std::string tok = rng() % 5 == 0 ? "-" : "";
    const std::size_t len = 1 + rng() % 22;
    for (std::size_t d = 0; d < len; ++d) tok += static_cast<char>('0' + (d == 0 && rng() % 3 ? 1 + rng() % 9 : rng() % 10));
    if (rng() % 4 == 0) {  // numbers near the type's limits, and one past them
      const auto edge = static_cast<std::int64_t>(rng() % 3) - 1;
      tok = std::to_string(static_cast<unsigned long long>(std::numeric_limits<I>::max()));
      if (edge != 0) {
        auto v = static_cast<unsigned long long>(std::numeric_limits<I>::max());
        tok = edge < 0 ? std::to_string(v - 1) : (v == ~0ull ? "18446744073709551616" : std::to_string(v + 1));
      }
    }
    std::string tail = tails[rng() % std::size(tails)];
    if (tail == "0") tok += tail, tail.clear();  // a digit more is the same number, longer
    const std::string whole = tok + tail;
    const std::string file = "f";
    detail::JsonReader r(whole, file, 4);
    // A fraction or an exponent after the digits makes it no integer.
    const bool fraction = !tail.empty() && (tail[0] == '.' || tail[0] == 'e' || tail[0] == 'E');
    const std::optional<I> expected = fraction ? std::nullopt : json_integer<I>(tok);
    CAPTURE(whole);
    if (expected) {
      const I got = r.integer<I>();
      CHECK(got == *expected);
      CHECK(r.position() == tok.size());
    } else {
      CHECK_THROWS_AS((void)r.integer<I>(), Error);
    }
  }
}
}  // namespace

TEST_CASE("JsonReader::integer takes exactly the integers JSON spells that fit the type, and stops where they end") {
  std::mt19937_64 rng(23);
  check_integers<int>(rng);
  check_integers<std::uint32_t>(rng);
  check_integers<std::int64_t>(rng);
  check_integers<std::uint64_t>(rng);
}
