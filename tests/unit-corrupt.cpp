// SPDX-License-Identifier: Apache-2.0
#include "test_util.hpp"

#include <array>
#include <chrono>

#include <sys/stat.h>

namespace {
struct State { std::vector<float> w; Eigen::MatrixXd m; std::int64_t step = 0; };
CAIRN_TREE(State, w, m, step)

State make_state() { return {test::random_bits<float>(1000), Eigen::MatrixXd::Random(20, 30), 7}; }

struct Layers { std::vector<std::vector<float>> layers; };
CAIRN_TREE(Layers, layers)

std::string data_file(const std::string& ckpt) { return ckpt + "/data-0-0.bin"; }

// Rewrites _METADATA and signs it in the commit marker, as a buggy or malicious writer would:
// the checks below must then come from parsing and validation, not from the checksum.
void replace_metadata(const std::string& ckpt, const std::string& text) {
  test::write_file(ckpt + "/_METADATA", text);
  test::resign(ckpt);
}

std::string edit(std::string s, const std::string& from, const std::string& to) {
  auto pos = s.find(from);
  REQUIRE_MESSAGE(pos != std::string::npos, from);
  return s.replace(pos, from.size(), to);
}
}  // namespace

TEST_CASE("a flipped byte in array data is a checksum error naming file and key") {
  test::TempDir dir;
  const std::string c = dir / "c";
  cairn::save(c, make_state());
  std::string bytes = test::read_file(data_file(c));
  bytes[100] ^= 0x20;
  test::write_file(data_file(c), bytes);
  try {
    cairn::load<State>(c);
    FAIL("expected corrupt");
  } catch (const cairn::Error& e) {
    CHECK(e.kind() == cairn::ErrorKind::corrupt);
    CHECK(e.key_path() == "w");
    CHECK(e.file() == data_file(c));
    CHECK(std::string(e.what()).find("checksum mismatch") != std::string::npos);
  }
  // Leaves elsewhere in the file still load on their own.
  CHECK(cairn::load_subtree<Eigen::MatrixXd>(c, "m").rows() == 20);
  // Verification can be turned off: then the flipped value loads as it is.
  cairn::LoadOptions trust;
  trust.verify_checksums = false;
  State s = cairn::load<State>(c, trust);
  CHECK(s.w.size() == 1000);
}

TEST_CASE("a truncated data file is reported, not read past") {
  test::TempDir dir;
  const std::string c = dir / "c";
  cairn::save(c, make_state());
  std::filesystem::resize_file(data_file(c), 5000);
  CHECK_CAIRN_ERROR(cairn::load<State>(c), cairn::ErrorKind::corrupt, "beyond the end of the file");
}

TEST_CASE("metadata changed after commit fails its checksum") {
  test::TempDir dir;
  const std::string c = dir / "c";
  cairn::save(c, make_state());
  std::string meta = test::read_file(c + "/_METADATA");
  meta[meta.size() / 2] ^= 1;
  test::write_file(c + "/_METADATA", meta);
  CHECK_CAIRN_ERROR(cairn::metadata(c), cairn::ErrorKind::corrupt, "_METADATA");
}

TEST_CASE("impossible metadata is a clear error") {
  test::TempDir dir;
  const std::string c = dir / "c";
  cairn::save(c, make_state());
  const std::string meta = test::compact_json(test::read_file(c + "/_METADATA"));
  const std::string version = "\"format_version\":2";  // few leaves: no leaf table
  struct Case { std::string from, to, error; };
  const std::vector<Case> cases = {
      {"\"shape\":[1000]", "\"shape\":[4294967296,4294967296,4294967296]", "overflows"},
      {"\"shape\":[1000]", "\"shape\":[-3]", "negative dimension"},
      {"\"data-0-0.bin\"]", "\"../../etc/passwd\"]", "not a plain file name"},
      {"\"dtype\":\"float32\"", "\"dtype\":\"float128\"", "unknown dtype"},
      {version, "\"format_version\":\"one\"", "malformed metadata"},
      {"\"key\":\"w\"", "\"key\":\"m\"", "listed twice"},
      {"\"key_kinds\":\"f\"", "\"key_kinds\":\"q\"", "unknown key kind"},
      // The chunk of "w" in the short form: its box is the whole array, its size what that holds.
      {"\"file\":0,\"offset\":0,", "\"file\":0,\"offset\":0,\"start\":[500],", "outside the array"},
      {"\"file\":0,\"offset\":0,", "\"file\":0,\"offset\":0,\"start\":[0,0],", "has rank 2, the array 1"},
      {"\"file\":0,\"offset\":0,", "\"file\":0,\"offset\":0,\"shape\":[999],", "cover 999 of the array's 1000"},
      {"\"file\":0,\"offset\":0,", "\"file\":0,\"offset\":0,\"nbytes\":4001,", "says 4001 bytes, its box holds 4000"},
      {"\"file\":0,\"offset\":0,", "\"file\":1,\"offset\":0,", "names data file 1, and data_files lists 1"},
      {"\"file\":0,\"offset\":0,", "\"file\":-1,\"offset\":0,", "fits in 32 bits"},
      {"\"file\":0,\"offset\":0,", "\"file\":\"data-9-0.bin\",\"offset\":0,", "unknown data file 'data-9-0.bin'"},
      {"\"file\":0,\"offset\":0,", "\"file\":true,\"offset\":0,", "expected an integer"},
      {"\"leaf_count\":", "\"leaf_count\":9", "leaf_count 9"},
      {"\"node_count\":", "\"node_count\":9", "node_count 9"},
      // A count far beyond what the file could hold sizes nothing by it (no huge allocation).
      {"\"leaf_count\":", "\"leaf_count\":184467440737095516", "leaf_count 184467440737095516"},
      {"\"leaf_count\":", "\"leaf_count\":-", "malformed metadata"},
      {"\"items\":", "\"x\":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]],\"items\":", "nested deeper"},
      {"\"items\":", "\"items\":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]],\"x\":", "expected an object"},
      {"\"file\":0,\"offset\":0,", "\"offset\":0,", "has no 'file'"},
      {"\"file\":0,\"offset\":0,", "\"file\":0,\"offset\":0,\"offset\":0,", "has 'offset' twice"},
      {"\"dtype\":\"float32\",", "", "has no 'dtype'"},
      {"\"crc32c\":", "\"crc32c\":4294967296,\"x\":", "fits in 32 bits"},
      {"\"dtype\":\"float32\",", "\"dtype\":\"float32\",\"order\":\"Z\",", "unknown order"},
      {"\"dtype\":\"float32\",", "\"dtype\":\"float32\",\"saved_from\":\"int4\",", "unknown dtype 'int4'"},
  };
  for (const auto& k : cases) {
    CAPTURE(k.to);
    replace_metadata(c, edit(meta, k.from, k.to));
    CHECK_CAIRN_ERROR(cairn::load<State>(c), cairn::ErrorKind::corrupt, k.error);
  }
  // An offset beyond the file passes validation (the file size is only known on load).
  std::string far = meta;
  far = edit(far, "\"offset\":0", "\"offset\":18446744073709551000");
  replace_metadata(c, far);
  CHECK_CAIRN_ERROR(cairn::load<State>(c), cairn::ErrorKind::corrupt, "overflows");
  replace_metadata(c, edit(meta, "\"offset\":0", "\"offset\":900000000"));
  CHECK_CAIRN_ERROR(cairn::load<State>(c), cairn::ErrorKind::corrupt, "beyond the end");
  replace_metadata(c, "{not json");
  CHECK_CAIRN_ERROR(cairn::load<State>(c), cairn::ErrorKind::corrupt, "_METADATA");
  replace_metadata(c, edit(meta, version, "\"format_version\":99"));
  CHECK_CAIRN_ERROR(cairn::load<State>(c), cairn::ErrorKind::unsupported_version, "99");
}

TEST_CASE("random byte flips in signed metadata never crash: they load or throw cairn::Error") {
  test::TempDir dir;
  const std::string c = dir / "c";
  State s = make_state();
  cairn::save(c, s);
  const std::string meta = test::read_file(c + "/_METADATA");
  int errors = 0;
  for (int trial = 0; trial < 300; ++trial) {
    std::string m = meta;
    for (int k = 0; k < 1 + trial % 3; ++k) m[test::rng()() % m.size()] = static_cast<char>(test::rng()());
    replace_metadata(c, m);
    try {
      State back = cairn::load<State>(c);
      CHECK(back.w.size() <= 1000);
    } catch (const cairn::Error&) {
      ++errors;
    }
  }
  CHECK(errors > 0);
}

TEST_CASE("commit markers, temporary directories and missing paths") {
  test::TempDir dir;
  CHECK_CAIRN_ERROR(cairn::load<State>(dir / "nothing"), cairn::ErrorKind::not_found, "nothing");
  const std::string c = dir / "c";
  cairn::save(c, make_state());
  std::filesystem::copy(c, dir / "c.cairn-tmp-1-0", std::filesystem::copy_options::recursive);
  CHECK_CAIRN_ERROR(cairn::load<State>(dir / "c.cairn-tmp-1-0"), cairn::ErrorKind::incomplete, "temporary");
  std::filesystem::remove(c + "/_CHECKPOINT");
  CHECK_CAIRN_ERROR(cairn::load<State>(c), cairn::ErrorKind::incomplete, "_CHECKPOINT");
  const std::string newer = std::to_string(cairn::format_version + 1);
  test::write_file(c + "/_CHECKPOINT", "{\"format\":\"cairn\",\"format_version\":" + newer + ",\"files\":{}}");
  CHECK_CAIRN_ERROR(cairn::metadata(c), cairn::ErrorKind::unsupported_version, newer);
  test::write_file(c + "/_CHECKPOINT", "[1,2");
  CHECK_CAIRN_ERROR(cairn::metadata(c), cairn::ErrorKind::corrupt, "_CHECKPOINT");
}

namespace deep {
// A recursive type: its trees are as deep as the data makes them.
struct Node { float v = 0; std::vector<Node> children; };
CAIRN_TREE(Node, v, children)
}  // namespace deep

TEST_CASE("a tree deeper than max_tree_depth is refused on save and on load, never a stack overflow") {
  test::TempDir dir;
  // 400 levels: key paths of up to 801 entries (children/0 per level, then v), saved and back.
  auto build = [](int levels) {
    deep::Node root;
    deep::Node* at = &root;
    for (int i = 0; i < levels; ++i) {
      at->children.resize(1);
      at = &at->children[0];
      at->v = static_cast<float>(i);
    }
    return root;
  };
  auto depth = [](const deep::Node& n) {
    int d = 0;
    for (const deep::Node* p = &n; !p->children.empty(); p = &p->children[0]) ++d;
    return d;
  };
  cairn::save(dir / "ok", build(400));
  const deep::Node back = cairn::load<deep::Node>(dir / "ok");
  CHECK(depth(back) == 400);
  CHECK(back.children[0].children[0].v == 1.0f);
  // 600 levels (1,201 entries): refused before anything is written, naming where.
  CHECK_CAIRN_ERROR(cairn::save(dir / "deep", build(600)), cairn::ErrorKind::invalid_argument,
                    "key 'children/0/children/0/children/0/children/0/...': the tree is deeper here than key paths of 1000");
  CHECK_FALSE(std::filesystem::exists(dir / "deep"));
  // A checkpoint whose metadata asks for a deeper tree (a crafted file): corrupt, before any
  // recursion, whatever the target.
  std::string meta = test::read_file(dir / "ok/_METADATA");
  std::string path, kinds;
  for (int i = 0; i < 1001; ++i) {
    path += (i ? "/" : "") + std::string("x");
    kinds += "k";
  }
  const std::string leaf = "\"key\":\"v\",\"key_kinds\":\"f\"";
  REQUIRE(meta.find(leaf) != std::string::npos);
  replace_metadata(dir / "ok", edit(meta, leaf, "\"key\":\"" + path + "\",\"key_kinds\":\"" + kinds + "\""));
  CHECK_CAIRN_ERROR(cairn::metadata(dir / "ok"), cairn::ErrorKind::corrupt, "a key path of 1001 entries, more than the 1000");
  CHECK_CAIRN_ERROR(cairn::load<deep::Node>(dir / "ok"), cairn::ErrorKind::corrupt, "1001 entries");
}

TEST_CASE("a directory without a commit marker: the error says what is there instead") {
  test::TempDir dir;
  // Nothing in it.
  std::filesystem::create_directories(dir / "empty");
  CHECK_CAIRN_ERROR(cairn::load<State>(dir / "empty"), cairn::ErrorKind::not_found, "an empty directory");
  // Something else: its entries, sorted, folders marked.
  std::filesystem::create_directories(dir / "other/sub");
  test::write_file(dir / "other/notes.txt", "x");
  CHECK_CAIRN_ERROR(cairn::metadata(dir / "other"), cairn::ErrorKind::not_found, "it holds notes.txt, sub/)");
  // An Orbax checkpoint, read by another function (this test does not include cairn/orbax.hpp).
  for (const char* sign : {"_CHECKPOINT_METADATA", "manifest.ocdbt", "_METADATA"}) {
    const std::string o = dir / (std::string("orbax-") + sign);
    std::filesystem::create_directories(o);
    test::write_file(o + "/" + sign, "{}");
    CHECK_CAIRN_ERROR(cairn::load<State>(o), cairn::ErrorKind::not_found, std::string("an Orbax checkpoint (it has ") + sign);
    CHECK_CAIRN_ERROR(cairn::load<State>(o), cairn::ErrorKind::not_found, "cairn::load_orbax");
    CHECK_CAIRN_ERROR(cairn::load<State>(o), cairn::ErrorKind::not_found, "include <cairn/orbax.hpp>");
  }
  // An Orbax CheckpointManager's root: step directories, the newest of them an Orbax
  // checkpoint (named by Orbax's step_prefix or not; the step order is numeric).
  for (const char* prefix : {"", "checkpoint_"}) {
    const std::string root = dir / (std::string("manager-") + prefix);
    for (const char* step : {"9", "10", "100"}) {
      std::filesystem::create_directories(root + "/" + prefix + step);
      test::write_file(root + "/" + prefix + step + "/_CHECKPOINT_METADATA", "{}");
    }
    CHECK_CAIRN_ERROR(cairn::load<State>(root), cairn::ErrorKind::not_found,
                      std::string("an Orbax CheckpointManager's directory of steps (the newest, ") + prefix + "100, is an Orbax "
                      "checkpoint), not a cairn checkpoint: read it with cairn::load_orbax");
  }
  // Folders of digits that are no Orbax checkpoints: listed as anything else is.
  std::filesystem::create_directories(dir / "numbers/1");
  std::filesystem::create_directories(dir / "numbers/2");
  CHECK_CAIRN_ERROR(cairn::load<State>(dir / "numbers"), cairn::ErrorKind::not_found, "it holds 1/, 2/)");
  // A safetensors file.
  cairn::save_safetensors(dir / "m.safetensors", make_state());
  CHECK_CAIRN_ERROR(cairn::load<State>(dir / "m.safetensors"), cairn::ErrorKind::not_found, "cairn::load_safetensors");
  // cairn's own files without their marker, from a save or a copy: incomplete, as before,
  // whichever of them is left (a _METADATA beside a data file is cairn's, not Orbax's).
  const std::string c = dir / "c";
  cairn::save(c, make_state());
  std::filesystem::remove(c + "/_CHECKPOINT");
  for (const char* gone : {"_USER_METADATA", "_METADATA"}) {
    CHECK_CAIRN_ERROR(cairn::load<State>(c), cairn::ErrorKind::incomplete, "a save that did not commit, or a copy");
    std::filesystem::remove(c + "/" + gone);
  }
  CHECK_CAIRN_ERROR(cairn::load<State>(c), cairn::ErrorKind::incomplete, "_CHECKPOINT");
  // An empty tree's checkpoint has no data file: its _METADATA is still cairn's.
  const std::string none = dir / "none";
  cairn::save(none, std::map<std::string, int>{});
  std::filesystem::remove(none + "/_CHECKPOINT");
  CHECK_CAIRN_ERROR((cairn::load<std::map<std::string, int>>(none)), cairn::ErrorKind::incomplete, "did not commit");
  for (const auto& e : std::filesystem::directory_iterator(c)) std::filesystem::remove(e.path());
  CHECK_CAIRN_ERROR(cairn::load<State>(c), cairn::ErrorKind::not_found, "an empty directory");
}

TEST_CASE("keys that look like paths never touch the filesystem: they are data, not file names") {
  test::TempDir dir;
  std::map<std::string, std::vector<int>> hostile = {{"../../escape", {1}}, {"/etc/passwd", {2}}, {"..", {3}}};
  cairn::save(dir / "inner/c", hostile);
  auto back = cairn::load<decltype(hostile)>(dir / "inner/c");
  CHECK(back == hostile);
  CHECK_FALSE(std::filesystem::exists(dir / "escape"));
  std::size_t entries = 0;
  for (auto& e : std::filesystem::recursive_directory_iterator(dir.path)) { (void)e; ++entries; }
  CHECK(entries == 6);  // inner, inner/c, and the four files of the checkpoint
  CHECK(cairn::key_paths(hostile) == std::vector<std::string>{"..", "..%2F..%2Fescape", "%2Fetc%2Fpasswd"});
}

TEST_CASE("bool bytes other than 0 and 1 in a data file read as true, never as an invalid bool") {
  test::TempDir dir;
  std::vector<bool> flags = {false, true, false, false};
  cairn::save(dir / "b", flags);
  std::string bytes = test::read_file(dir / "b/data-0-0.bin");
  bytes[2] = 77;
  test::write_file(dir / "b/data-0-0.bin", bytes);
  // Re-sign the data so the checksum passes, as a buggy writer would have produced it.
  std::string meta = test::read_file(dir / "b/_METADATA");
  const std::string old_crc = std::to_string(cairn::crc32c("\0\1\0\0", 4));
  const std::string new_crc = std::to_string(cairn::crc32c("\0\1\x4d\0", 4));
  auto pos = meta.find(old_crc);
  REQUIRE(pos != std::string::npos);
  meta.replace(pos, old_crc.size(), new_crc);
  replace_metadata(dir / "b", meta);
  CHECK(cairn::load<std::vector<bool>>(dir / "b") == std::vector<bool>{false, true, true, false});
  auto as_float = cairn::load<std::vector<float>>(dir / "b");
  CHECK(as_float == std::vector<float>{0, 1, 1, 0});

  // The same in a run of small leaves, which one read fetches and each leaf then checks; these
  // are read straight into the arrays, whose bytes are then looked at, not only their values.
  using Flags = std::map<std::string, std::array<bool, 3>>;
  const Flags many = {{"a", {true, false, false}}, {"b", {false, false, true}}, {"c", {false, true, false}}};
  cairn::save(dir / "m", many);
  const cairn::CheckpointMetadata stored = cairn::metadata(dir / "m");
  const cairn::LeafRecord* b = stored.items.at(0).find_leaf("b");
  REQUIRE(b);
  bytes = test::read_file(dir / "m/data-0-0.bin");
  bytes.at(b->chunks.front().offset + 1) = 2;  // "b"[1]
  test::write_file(dir / "m/data-0-0.bin", bytes);
  meta = test::read_file(dir / "m/_METADATA");
  pos = meta.find(std::to_string(cairn::crc32c("\0\0\1", 3)));
  REQUIRE(pos != std::string::npos);
  meta.replace(pos, std::to_string(cairn::crc32c("\0\0\1", 3)).size(), std::to_string(cairn::crc32c("\0\2\1", 3)));
  replace_metadata(dir / "m", meta);
  auto bytes_of = [](const Flags& f) {
    std::string s;
    for (const auto& [k, v] : f) s.append(reinterpret_cast<const char*>(v.data()), v.size());
    return s;
  };
  Flags expected = many;
  expected["b"][1] = true;
  CHECK(bytes_of(cairn::load<Flags>(dir / "m")) == bytes_of(expected));
  Flags into = {{"a", {}}, {"b", {}}, {"c", {}}};
  cairn::load(dir / "m", into);
  CHECK(bytes_of(into) == bytes_of(expected));
  CHECK(bytes_of(into) == std::string("\1\0\0\0\1\1\0\1\0", 9));
}

TEST_CASE("numbers in metadata that do not fit 64-bit integers are refused before the JSON parser sees them") {
  test::TempDir dir;
  const std::string c = dir / "c";
  cairn::save(c, make_state());
  const std::string meta = test::read_file(c + "/_METADATA");
  const auto at = meta.find("\"offset\":");
  REQUIRE(at != std::string::npos);
  const auto digits = meta.find_first_of("0123456789", at);
  for (const char* big : {"184467440737095516150", "18446744073709551616", "1e400", "0.5", "-9223372036854775809"}) {
    std::string m = meta;
    m.replace(digits, 1, big);
    replace_metadata(c, m);
    CHECK_CAIRN_ERROR(cairn::metadata(c), cairn::ErrorKind::corrupt, "is not an integer that fits in 64 bits");
  }
  // The limits themselves parse (and then fail validation as offsets, not as numbers).
  std::string m = meta;
  m.replace(digits, 1, "18446744073709551615");
  replace_metadata(c, m);
  try {
    (void)cairn::metadata(c);
  } catch (const cairn::Error& e) {
    CHECK(std::string(e.what()).find("fits in 64 bits") == std::string::npos);
  }
}

TEST_CASE("small hostile files are errors in bounded memory and time: indices, FIFOs, symlinks") {
  test::TempDir dir;
  const std::string c = dir / "c";
  cairn::save(c, Layers{{{1, 2}, {3}}});
  const std::string meta = test::read_file(c + "/_METADATA");
  // A sequence index in the metadata must not size a vector before it is checked.
  for (const std::string index : {"100000000", "9223372036854775807"}) {
    replace_metadata(c, edit(meta, "\"layers/1\"", "\"layers/" + index + "\""));
    CHECK_CAIRN_ERROR(cairn::load<Layers>(c), cairn::ErrorKind::corrupt, "has index " + index);
    CHECK_CAIRN_ERROR(cairn::load<Layers>(c), cairn::ErrorKind::corrupt, "key 'layers'");
  }
  replace_metadata(c, meta);
  CHECK(cairn::load<Layers>(c).layers.size() == 2);
  // Indices stored out of order (another writer's): the sequence still takes each by its index.
  replace_metadata(c, edit(edit(edit(meta, "\"layers/0\"", "\"layers/x\""), "\"layers/1\"", "\"layers/0\""), "\"layers/x\"",
                           "\"layers/1\""));
  CHECK(cairn::load<Layers>(c).layers == std::vector<std::vector<float>>{{3}, {1, 2}});
  replace_metadata(c, meta);
  const std::string o = dir / "o";  // in order up to a point: 0, 2, 1
  cairn::save(o, Layers{{{1}, {2, 3}, {4}}});
  const std::string o_meta = test::read_file(o + "/_METADATA");
  replace_metadata(o, edit(edit(edit(o_meta, "\"layers/1\"", "\"layers/x\""), "\"layers/2\"", "\"layers/1\""), "\"layers/x\"",
                           "\"layers/2\""));
  CHECK(cairn::load<Layers>(o).layers == std::vector<std::vector<float>>{{1}, {4}, {2, 3}});
  // A FIFO where a file should be would block a plain open() forever.
  for (const std::string name : {"data-0-0.bin", "_CHECKPOINT", "_METADATA"}) {
    const std::string f = dir / ("f" + name);
    std::filesystem::copy(c, f);
    std::filesystem::remove(f + "/" + name);
    REQUIRE(::mkfifo((f + "/" + name).c_str(), 0644) == 0);
    CHECK_CAIRN_ERROR(cairn::load<Layers>(f), cairn::ErrorKind::corrupt, "not a regular file");
  }
  // A symbolic link inside the checkpoint is not followed, even to an intact copy.
  const std::string s = dir / "s";
  std::filesystem::copy(c, s);
  std::filesystem::copy_file(c + "/data-0-0.bin", dir / "outside.bin");
  std::filesystem::remove(s + "/data-0-0.bin");
  std::filesystem::create_symlink(dir / "outside.bin", s + "/data-0-0.bin");
  CHECK_CAIRN_ERROR(cairn::load<Layers>(s), cairn::ErrorKind::corrupt, "symbolic link");
}

TEST_CASE("chunk overlap is found in grids and in other layouts; 40,000 chunks check fast") {
  using namespace cairn;
  test::TempDir dir;
  const std::string c = dir / "c";
  const std::int64_t n = 40'000;
  {
    ShardedArray<float> a(Shape{2, n}, NamedSharding(Mesh::host({{"x", n}}), PartitionSpec{replicated, "x"}));
    for (auto& shard : a.shards()) {
      const float v[2] = {static_cast<float>(shard.box().start[1]), 1.0f};
      shard.from_host(v);
    }
    save(c, a);
  }
  const auto t0 = std::chrono::steady_clock::now();
  CheckpointMetadata m = metadata(c);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const std::string took = "metadata() of one leaf in 40,000 chunks: " + std::to_string(seconds) + " s";
  MESSAGE(took);
  REQUIRE(m.leaves().front().chunks.size() == static_cast<std::size_t>(n));
  // Two chunks of the grid made the same cell.
  m.items.front().leaves.front().chunks[7].start = m.items.front().leaves.front().chunks[3].start;
  replace_metadata(c, detail::metadata_to_json(m));
  CHECK_CAIRN_ERROR(metadata(c), ErrorKind::corrupt, "chunks 3 (in data-0-0.bin, start ");
  CHECK_CAIRN_ERROR(metadata(c), ErrorKind::corrupt, ") and 7 (in data-0-0.bin, start ");
  // Not a grid: one chunk spans two cells of the others' cuts.
  const std::string d = dir / "d";
  save(d, std::vector<float>{1, 2, 3, 4});
  CheckpointMetadata md = metadata(d);
  auto& chunks = md.items.front().leaves.front().chunks;
  ChunkRecord half = chunks.front();
  half.start = {2};
  half.shape = {2};
  half.offset = 64;
  half.nbytes = 8;
  chunks.push_back(half);
  md.data_files = {"data-0-0.bin"};
  replace_metadata(d, detail::metadata_to_json(md));
  // Each chunk named with its file and box.
  CHECK_CAIRN_ERROR(metadata(d), ErrorKind::corrupt,
                    "chunks 0 (in data-0-0.bin, start [0], shape [4]) and 1 (in data-0-0.bin, start [2], shape [2]) overlap");
}

// Validation without the parser's printed keys (the records a multi-rank commit gathers, or
// read_metadata without them) prints each item's keys itself: each item's own, also where
// two items have as many leaves.
TEST_CASE("validate_metadata checks each item's own keys, also in items of equal leaf counts") {
  using namespace cairn;
  test::TempDir dir;
  const std::string c = dir / "c";
  save(c, make_state());
  CheckpointMetadata m = metadata(c);
  REQUIRE(m.items.size() == 1);
  detail::validate_metadata(m, c);  // as saved: valid
  ItemRecord other = m.items.front();
  other.name = "other";
  REQUIRE(other.leaves.size() == 3);
  other.leaves[1].path = other.leaves[0].path;  // "w" twice in the second item
  m.items.push_back(other);
  CHECK_CAIRN_ERROR(detail::validate_metadata(m, c), ErrorKind::corrupt, "key path listed twice");
  // An error in the second item names its own key.
  m.items.back() = m.items.front();
  m.items.back().name = "other";
  m.items.back().leaves[2].path = KeyPath{KeyEntry::field("elsewhere")};
  m.items.back().leaves[2].chunks.front().nbytes += 1;
  try {
    detail::validate_metadata(m, c);
    FAIL("a chunk of a wrong size passed");
  } catch (const Error& e) {
    CHECK(e.key_path() == "elsewhere");
  }
}

TEST_CASE("a stored sharding with many replicas is not adopted into memory without bound") {
  using namespace cairn;
  test::TempDir dir;
  ShardedArray<double> a(Shape{8192}, NamedSharding(Mesh::host({{"r", 128}}), PartitionSpec{}));
  for (auto& shard : a.shards()) shard.from_host(test::random_bits<double>(8192).data());
  save(dir / "c", a);
  ShardedArray<double> adopt;
  CHECK_CAIRN_ERROR(load(dir / "c", adopt), ErrorKind::invalid_argument, "128 copies of the array");
  ShardedArray<double> own(NamedSharding(Mesh::host({{"r", 2}}), PartitionSpec{}));
  load(dir / "c", own);  // with a sharding of its own, it loads
  CHECK(own.shards().size() == 2);
}

TEST_CASE("stored key paths that are not in canonical form load under their canonical keys") {
  test::TempDir dir;
  const std::string c = dir / "c";
  cairn::save(c, Layers{{{1, 2}, {3}}});
  const std::string meta = test::read_file(c + "/_METADATA");
  // An index written with a leading zero: the same index, printed without it.
  replace_metadata(c, edit(meta, "\"layers/1\"", "\"layers/01\""));
  cairn::LoadReport report;
  Layers back;
  back.layers.resize(2);
  report = cairn::load(c, back);
  CHECK(back.layers == std::vector<std::vector<float>>{{1, 2}, {3}});
  CHECK(report.loaded == std::vector<std::string>{"layers/0", "layers/1"});
  CHECK(cairn::metadata(c).leaves()[1].key() == "layers/1");
  // A '/' escaped in lower case, a '%' not escaped: the keys print canonically ("%2F", "%25").
  const std::string m = dir / "m";
  cairn::save(m, std::map<std::string, std::vector<float>>{{"a/b", {4}}, {"c%", {5}}});
  const std::string map_meta = test::read_file(m + "/_METADATA");
  replace_metadata(m, edit(edit(map_meta, "\"a%2Fb\"", "\"a%2fb\""), "\"c%25\"", "\"c%\""));
  const auto loaded = cairn::load<std::map<std::string, std::vector<float>>>(m);
  CHECK(loaded == std::map<std::string, std::vector<float>>{{"a/b", {4}}, {"c%", {5}}});
  std::map<std::string, std::vector<float>> into{{"a/b", {0}}, {"c%", {0}}};
  CHECK(cairn::load(m, into).loaded == std::vector<std::string>{"a%2Fb", "c%25"});
  CHECK(into == loaded);
  CHECK(cairn::metadata(m).leaves()[0].key() == "a%2Fb");
}
