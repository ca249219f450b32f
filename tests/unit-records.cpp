// The format's records on their own: a checkpoint's metadata written as JSON and read back
// through a store, item kinds by name, and the checks every record gets (boxes inside their
// array, whatever the numbers). Includes only the format headers, so it compiles fast.
#include "cairn/format/files.hpp"
#include "cairn/store/memory_store.hpp"

#include <doctest/doctest.h>

#include <limits>

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
