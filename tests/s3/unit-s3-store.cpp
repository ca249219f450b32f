// SPDX-License-Identifier: Apache-2.0
// The S3 store against a real S3 server that checks signatures (@20minutes/s3rver, started on
// 127.0.0.1 by tools/s3rver.sh as a ctest fixture): the store conformance suite, every entry
// point on s3:// URIs, multipart uploads and parallel ranged reads bit-exact, the commit
// design (a generation and its marker, an overwrite that leaves the old checkpoint whole until
// the switch, leftovers of dead saves), wrong credentials, a missing bucket, malformed URIs.
// Without a server (no endpoint file) every case says so and checks nothing.
#include "../store_conformance.hpp"

#include <cairn/s3.hpp>
#ifdef CAIRN_TEST_ORBAX
#include <cairn/orbax.hpp>
#endif

#include "cairn_cli.hpp"

#include <cairn/leaves/thrust_leaves.hpp>

#include <Eigen/Core>
#include <thrust/device_vector.h>
#include <thrust/host_vector.h>

#include <cstring>
#include <deque>
#include <fstream>
#include <functional>
#include <optional>

using cairn::ErrorKind;

namespace {

std::string endpoint() {
  if (const char* e = std::getenv("CAIRN_S3_TEST_ENDPOINT")) return e;
#ifdef CAIRN_S3_ENDPOINT_FILE
  std::ifstream in(CAIRN_S3_ENDPOINT_FILE);
  std::string e;
  if (in >> e) return e;
#endif
  return {};
}

bool have_server() {
  if (!endpoint().empty()) return true;
  MESSAGE("no S3 test server (tools/s3rver.sh start; ctest starts it): skipped");
  return false;
}

const char* const bucket = "cairn-test";

cairn::S3Options server_options() {
  cairn::S3Options o;
  o.endpoint = endpoint();
  o.access_key_id = "S3RVER";  // the key pair s3rver checks signatures with
  o.secret_access_key = "S3RVER";
  o.part_size = 64 << 10;      // small parts, so that small tests upload in many
  o.multipart_threshold = 64 << 10;
  o.read_part_size = 48 << 10;
  o.max_attempts = 3;
  o.delimiter_listing = false;  // s3rver's delimiter listings miss prefixes holding only prefixes
  o.backoff_base = std::chrono::milliseconds(10);
  return o;
}

// A store of its own under a fresh prefix: empty, whatever earlier runs left.
std::string fresh_root() {
  static int n = 0;
  return "t" + std::to_string(std::random_device{}()) + "-" + std::to_string(++n);
}

std::shared_ptr<cairn::S3Store> fresh_store(cairn::S3Options o = server_options()) {
  return std::make_shared<cairn::S3Store>("s3", bucket, o, fresh_root());
}

// Flips the byte at `at` of the file `file` of the checkpoint at `key`, which is inline in its
// commit marker: the marker is read raw, changed and put back.
void flip_inline_byte(cairn::Store& store, const std::string& key, const std::string& file, std::uint64_t at) {
  const std::string marker_key = key + "/_CHECKPOINT";
  std::string marker = cairn::detail::read_blob(store, marker_key, 64 << 20);
  const auto newline = marker.find('\n');
  REQUIRE(newline != std::string::npos);
  const cairn::Json line = cairn::Json::parse(marker.substr(0, newline));
  REQUIRE(line.find("inline") != nullptr);
  const std::uint64_t offset = static_cast<std::uint64_t>(line.at("inline").at(file).as_int());
  marker[static_cast<std::size_t>(newline + 1 + offset + at)] ^= 0x10;
  store.remove(marker_key);
  cairn::detail::write_blob(store, marker_key, marker);
}

}  // namespace

TEST_CASE("S3 store: the conformance suite of the storage seam") {
  if (!have_server()) return;
  // Checkpoints as generations of objects, then small ones inline in their commit markers
  // (where a byte of a data file is flipped inside the marker).
  cairn::S3Options objects = server_options();
  objects.inline_limit = 0;
  test::check_store_conformance([&] { return fresh_store(objects); });
  test::check_store_conformance([] { return fresh_store(); }, flip_inline_byte);
}

TEST_CASE("S3 store: large blobs go up in parallel parts and come back in parallel ranges, bit-exact") {
  if (!have_server()) return;
  auto store = fresh_store();
  for (const std::size_t size : {std::size_t{0}, std::size_t{1}, std::size_t{65536}, std::size_t{65537},
                                 std::size_t{1000003}}) {
    const auto bytes = test::random_bits<unsigned char>(size);
    const std::string key = "big/" + std::to_string(size);
    {
      auto w = store->create(key);
      // Out of order, in pieces that straddle parts.
      std::size_t at = size;
      while (at > 0) {
        const std::size_t n = std::min<std::size_t>(at, 1 + test::rng()() % 100000);
        at -= n;
        w->write_at(bytes.data() + at, n, at);
      }
      w->finish(size);
    }
    auto r = store->open(key);
    REQUIRE(r->size() == size);
    std::vector<unsigned char> back(size);
    r->read_at(back.data(), size, 0);
    CHECK(back == bytes);
  }
}

TEST_CASE("S3 store: a part written in small pieces grows its buffer and comes back bit-exact") {
  if (!have_server()) return;
  // Parts of 1 MiB: a first part under half of that is a buffer of its own, grown as it is
  // written (64 KiB, 128 KiB, ...), then a block of the pool; holes stay zeros.
  cairn::S3Options o = server_options();
  o.part_size = o.multipart_threshold = 1 << 20;
  auto store = fresh_store(o);
  for (const std::size_t size : {std::size_t{1}, std::size_t{70000}, std::size_t{300000}, std::size_t{900000},
                                 std::size_t{1} << 20, std::size_t{1500000}}) {
    CAPTURE(size);
    auto bytes = test::random_bits<unsigned char>(size);
    const std::size_t hole = size / 3, hole_n = std::min<std::size_t>(size / 10, 5000);
    std::fill(bytes.begin() + static_cast<std::ptrdiff_t>(hole), bytes.begin() + static_cast<std::ptrdiff_t>(hole + hole_n), 0);
    const std::string key = "grow/" + std::to_string(size);
    {
      auto w = store->create(key);
      for (std::size_t at = 0; at < size;) {  // in order, in pieces of up to 10 KB, the hole skipped
        if (at == hole && hole_n) at += hole_n;
        if (at >= size) break;
        const std::size_t n = std::min({size - at, std::size_t{1} + test::rng()() % 10000, at < hole ? hole - at : size});
        w->write_at(bytes.data() + at, n, at);
        at += n;
      }
      w->finish(size);
    }
    auto r = store->open(key);
    REQUIRE(r->size() == size);
    std::vector<unsigned char> back(size);
    r->read_at(back.data(), size, 0);
    CHECK(back == bytes);
  }
}

TEST_CASE("S3 store: save, load, metadata, the Checkpointer, safetensors and inspect on s3:// URIs") {
  if (!have_server()) return;
  ::setenv("AWS_ENDPOINT_URL", endpoint().c_str(), 1);
  ::setenv("AWS_ACCESS_KEY_ID", "S3RVER", 1);
  ::setenv("AWS_SECRET_ACCESS_KEY", "S3RVER", 1);
  const std::string base = std::string("s3://") + bucket + "/" + fresh_root();
  const test::ConformanceState s = test::random_conformance_state();
  cairn::save(base + "/one", s);
  test::check_same(s, cairn::load<test::ConformanceState>(base + "/one"));
  CHECK(cairn::metadata(base + "/one").leaves().size() == 5);
  CHECK(cairn::verify(base + "/one").ok());
  CHECK(cairn::inspect(base + "/one").kind == cairn::LocationKind::checkpoint);
  CHECK(test::same_bits(cairn::load_subtree<std::vector<float>>(base + "/one", "w"), s.w));
  // A Checkpointer on a bucket, with async saves and retention.
  {
    cairn::CheckpointerOptions options;
    options.retention = cairn::RetentionPolicy::keep_latest(2);
    cairn::Checkpointer ckpt(base + "/run", options);
    for (int step = 1; step <= 3; ++step) ckpt.save_async(step, s);
    ckpt.wait();
    CHECK(ckpt.steps() == std::vector<std::int64_t>{2, 3});
  }
  cairn::Checkpointer again(base + "/run");
  CHECK(again.latest() == 3);
  test::ConformanceState back;
  again.load(back);
  test::check_same(s, back);
  // safetensors out and in.
  std::map<std::string, std::vector<float>> tensors{{"a", test::random_bits<float>(100)}, {"b", test::random_bits<float>(7)}};
  cairn::save_safetensors(base + "/model.safetensors", tensors);
  auto t = cairn::load_safetensors<std::map<std::string, std::vector<float>>>(base + "/model.safetensors");
  REQUIRE(t.size() == 2);
  CHECK(test::same_bits(t["a"], tensors["a"]));
  CHECK(test::same_bits(t["b"], tensors["b"]));
  // The cairn tool on the same URIs: ls, verify, show, diff, convert.
  auto cli = [](std::vector<std::string> args, std::string* printed = nullptr) {
    std::ostringstream out, err;
    const int status = cairn::cli::run(args, out, err);
    if (printed) *printed = out.str() + err.str();
    return status;
  };
  std::string text;
  CHECK(cli({"ls", base + "/run"}, &text) == 0);
  CHECK(text.find("3") != std::string::npos);
  CHECK(cli({"verify", base + "/one"}, &text) == 0);
  {
    // show looks at the checkpoint once, then reads the leaf. The checkpoint is small, so it
    // is inline in its marker: 4 requests (with inline_limit 0: 11, the marker's HEAD and
    // GET, the generation's three metadata files, then the same five and the data object;
    // before 2026-11-27 it looked twice, to find out it is no Checkpointer root: 16).
    auto shared = std::dynamic_pointer_cast<cairn::S3Store>(cairn::Location(base + "/one").shared_store());
    REQUIRE(shared);
    const std::uint64_t before = shared->requests();
    CHECK(cli({"show", base + "/one", "name"}, &text) == 0);
    CHECK(shared->requests() - before == 4);
  }
  CHECK(text.find(s.name) != std::string::npos);
  CHECK(cli({"diff", base + "/one", base + "/run/3"}, &text) == 0);
  CHECK(cli({"convert", base + "/one", base + "/one.safetensors", "--exclude", "name"}, &text) == 0);
  CHECK(cairn::inspect(base + "/one.safetensors").kind == cairn::LocationKind::safetensors);
  // The export holds every array bit-exact; only the string leaf it left out differs.
  CHECK(cli({"diff", base + "/one", base + "/one.safetensors"}, &text) == 1);
  CHECK(text.find("only in A: name\n1 difference") != std::string::npos);
  ::unsetenv("AWS_ENDPOINT_URL");
  ::unsetenv("AWS_ACCESS_KEY_ID");
  ::unsetenv("AWS_SECRET_ACCESS_KEY");
}

// Every kind of leaf, in one tree. The device ones live on Thrust's host-side device system
// here (unit-cuda runs the same kinds on a GPU against a bucket).
struct Kinds {
  bool flag = false;
  cairn::bfloat16 bf{};
  std::string text;
  std::array<std::int32_t, 5> arr{};
  std::vector<bool> vb;
  std::deque<float> dq;
  std::optional<std::vector<double>> maybe;
  std::map<int, std::vector<std::int16_t>> by_int;
  Eigen::MatrixXf col_major;
  Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> row_major;
  Eigen::Matrix3f fixed;
  cairn::Array<std::uint8_t> nd;
  thrust::device_vector<float> dv;
  cairn::DeviceArrayView<std::int64_t> view;
  cairn::ShardedArray<double> host_sharded;
  cairn::ShardedArray<float> device_sharded;
};
CAIRN_TREE(Kinds, flag, bf, text, arr, vb, dq, maybe, by_int, col_major, row_major, fixed, nd, dv, view, host_sharded,
           device_sharded)

bool same_bytes(const void* a, const void* b, std::size_t n) { return n == 0 || std::memcmp(a, b, n) == 0; }

template <class T>
std::vector<T> from_device(const thrust::device_vector<T>& v) {
  thrust::host_vector<T> h = v;  // whole-vector copies only (see unit-sharding)
  return std::vector<T>(h.begin(), h.end());
}

TEST_CASE("S3 store: every kind of leaf round-trips bit-exactly, sharded ones resharded and device ones cast on the way") {
  if (!have_server()) return;
  auto store = fresh_store();
  auto& g = test::rng();
  Kinds s;
  s.flag = g() & 1;
  s.bf = cairn::bfloat16::from_bits(static_cast<std::uint16_t>(g()));
  s.text = "kinds " + std::to_string(g() % 1000);
  for (auto& x : s.arr) x = static_cast<std::int32_t>(g());
  for (std::size_t i = 1 + g() % 100; i > 0; --i) s.vb.push_back(g() & 1);
  for (std::size_t i = 1 + g() % 5; i > 0; --i) s.dq.push_back(static_cast<float>(g() % 100));
  s.maybe = test::random_bits<double>(1 + g() % 7);
  s.by_int[-3] = {1, 2, 3};
  s.by_int[40] = {static_cast<std::int16_t>(g())};
  const auto cm = test::random_bits<float>(37 * 23);
  s.col_major = Eigen::Map<const Eigen::MatrixXf>(cm.data(), 37, 23);
  const auto rm = test::random_bits<double>(11 * 5);
  s.row_major = Eigen::Map<const Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>(rm.data(), 11, 5);
  const auto fx = test::random_bits<float>(9);
  s.fixed = Eigen::Map<const Eigen::Matrix3f>(fx.data());
  s.nd = cairn::Array<std::uint8_t>({2, 3, 4});
  for (auto& x : s.nd) x = static_cast<std::uint8_t>(g());
  const auto dvv = test::random_bits<float>(70000);  // 280 KB: parts of 64 KiB
  s.dv = thrust::device_vector<float>(dvv.begin(), dvv.end());
  const auto vv = test::random_bits<std::int64_t>(6 * 7);
  thrust::device_vector<std::int64_t> view_mem(vv.begin(), vv.end());
  s.view = {thrust::raw_pointer_cast(view_mem.data()), {6, 7}, 0};
  const auto hs = test::random_bits<double>(40 * 30);
  s.host_sharded = cairn::ShardedArray<double>::from_host(
      hs, {40, 30}, cairn::NamedSharding(cairn::Mesh::host({{"x", 2}, {"y", 4}}), cairn::PartitionSpec{"x", "y"}));
  const auto ds = test::random_bits<float>(90 * 20);
  s.device_sharded = cairn::ShardedArray<float>::from_host(
      ds, {90, 20}, cairn::NamedSharding(cairn::Mesh::device({{"x", 2}}), cairn::PartitionSpec{"x"}));
  cairn::SaveOptions cast;
  cast.cast = {{"dv", cairn::DType::bfloat16}};
  cairn::save({store, "kinds"}, s);
  cairn::save({store, "cast"}, s, cast);
  {
    const cairn::CheckpointMetadata meta = cairn::metadata({store, "kinds"});
    const auto leaf = [&](const char* key) {
      const auto* item = meta.find_item(cairn::default_item_name);
      const cairn::LeafRecord* l = item ? item->find_leaf(key) : nullptr;
      REQUIRE_MESSAGE(l, key);
      return *l;
    };
    CHECK(leaf("host_sharded").chunks.size() == 8);
    CHECK(leaf("device_sharded").chunks.size() == 2);
    CHECK(leaf("col_major").order == cairn::Order::F);
    CHECK(leaf("view").shape == cairn::Shape{6, 7});
    CHECK(cairn::metadata({store, "cast"}).find_item(cairn::default_item_name)->find_leaf("dv")->dtype == cairn::DType::bfloat16);
  }
  CHECK(cairn::verify({store, "kinds"}).ok());

  Kinds t;
  thrust::device_vector<std::int64_t> view_back(vv.size(), 0);
  t.view = {thrust::raw_pointer_cast(view_back.data()), {6, 7}, 0};
  // Other shardings than saved: each target shard reads its sub-boxes of the stored chunks.
  t.host_sharded = cairn::ShardedArray<double>(cairn::NamedSharding(cairn::Mesh::host({{"x", 3}}), cairn::PartitionSpec{"x"}));
  t.device_sharded = cairn::ShardedArray<float>(cairn::NamedSharding(cairn::Mesh::device({{"x", 3}}), cairn::PartitionSpec{"x"}));
  cairn::load({store, "kinds"}, t);
  CHECK(t.flag == s.flag);
  CHECK(t.bf.bits == s.bf.bits);
  CHECK(t.text == s.text);
  CHECK(t.arr == s.arr);
  CHECK(t.vb == s.vb);
  CHECK(t.dq == s.dq);
  REQUIRE(t.maybe.has_value());
  CHECK(test::same_bits(*t.maybe, *s.maybe));
  CHECK(t.by_int == s.by_int);
  REQUIRE(t.col_major.rows() == 37);
  REQUIRE(t.col_major.cols() == 23);
  CHECK(same_bytes(t.col_major.data(), s.col_major.data(), cm.size() * sizeof(float)));
  REQUIRE(t.row_major.size() == s.row_major.size());
  CHECK(same_bytes(t.row_major.data(), s.row_major.data(), rm.size() * sizeof(double)));
  CHECK(same_bytes(t.fixed.data(), s.fixed.data(), 9 * sizeof(float)));
  CHECK(t.nd.shape() == s.nd.shape());
  CHECK(std::equal(t.nd.begin(), t.nd.end(), s.nd.begin(), s.nd.end()));
  CHECK(test::same_bits(from_device(t.dv), dvv));
  CHECK(test::same_bits(from_device(view_back), vv));
  CHECK(t.host_sharded.shards().size() == 3);
  CHECK(test::same_bits(t.host_sharded.gather(), hs));
  CHECK(t.device_sharded.shards().at(0).on_device());
  CHECK(test::same_bits(t.device_sharded.gather(), ds));

  // The device vector saved as bfloat16 (cast on save) comes back into float64 on the device.
  std::vector<cairn::bfloat16> want16(dvv.size());
  cairn::cast_host(cairn::DType::float32, dvv.data(), cairn::DType::bfloat16, want16.data(), dvv.size(), cairn::OnOverflow::error);
  CHECK(test::same_bits(cairn::load_subtree<std::vector<cairn::bfloat16>>({store, "cast"}, "dv"), want16));
  std::vector<double> want64(dvv.size());
  cairn::cast_host(cairn::DType::bfloat16, want16.data(), cairn::DType::float64, want64.data(), dvv.size(), cairn::OnOverflow::error);
  CHECK(test::same_bits(from_device(cairn::load_subtree<thrust::device_vector<double>>({store, "cast"}, "dv")), want64));
}

// An S3 key is any string: "a/../b" and "x/./y" are keys of their own. The signature covers
// the path as cairn sends it, so a client that removed the dot segments before sending (as curl
// does unless told not to) was refused with 403 SignatureDoesNotMatch, which blames the
// credentials. (A first save only: s3rver keeps objects as files, where "a/../b" is "b".)
TEST_CASE("S3 store: keys with '.' and '..' segments are sent as they are, and a save there loads") {
  if (!have_server()) return;
  auto store = fresh_store();
  const std::map<std::string, std::vector<float>> s{{"w", test::random_bits<float>(33)}};
  for (const std::string key : {"a/../b", "x/./y", "./z"}) {
    CAPTURE(key);
    const cairn::Location at(store, key);
    try {
      cairn::save(at, s);
      const auto back = cairn::load<std::map<std::string, std::vector<float>>>(at);
      REQUIRE(back.size() == 1);
      CHECK(test::same_bits(back.at("w"), s.at("w")));
      CHECK(cairn::verify(at).ok());
    } catch (const cairn::Error& e) {
      FAIL(std::string(e.what()));
    }
  }
}

TEST_CASE("S3 store: a checkpoint is a marker naming one generation; an overwrite switches it at once") {
  if (!have_server()) return;
  const std::string prefix = fresh_root();
  cairn::S3Options objects = server_options();
  objects.inline_limit = 0;  // this test is of generations of objects (small checkpoints go inline)
  auto store = std::make_shared<cairn::S3Store>("s3", bucket, objects, prefix);
  const test::ConformanceState a = test::random_conformance_state(), b = test::random_conformance_state();
  cairn::save({store, "ck"}, a);
  auto names = test::visible_names(*store, "ck");
  CHECK(names == std::vector<std::string>{"_CHECKPOINT"});
  const std::string first = store->readable_checkpoint("ck");
  CHECK(first.rfind("ck/.cairn-gen-", 0) == 0);
  // An overwrite whose publish fails (a file the save did not write) leaves the old one whole.
  {
    auto staging = store->stage("ck", true);
    cairn::detail::write_blob(*store, cairn::detail::join_key(staging->key(), "f"), "x");
    CHECK_THROWS_AS(staging->publish({{"f", 1}, {"missing", 3}}), cairn::Error);
  }
  CHECK(store->readable_checkpoint("ck") == first);
  test::check_same(a, cairn::load<test::ConformanceState>({store, "ck"}));
  // The overwrite: a new generation, the old one gone.
  cairn::SaveOptions over;
  over.overwrite = true;
  cairn::save({store, "ck"}, b, over);
  const std::string second = store->readable_checkpoint("ck");
  CHECK(second != first);
  CHECK(!store->exists(first));
  test::check_same(b, cairn::load<test::ConformanceState>({store, "ck"}));
  // A save that died before its marker: a generation nobody names. Begun long ago (its name)
  // but written a moment ago, it may be a save in progress elsewhere and is kept; with
  // leftover_age 0 the next cleanup removes it.
  cairn::detail::write_blob(*store, "ck/.cairn-gen-0000000000001-dead/data-0-0.bin", "x");
  cairn::detail::write_blob(*store, "new/.cairn-gen-9999999999999-live/data-0-0.bin", "x");
  store->clean_leftovers("");
  CHECK(store->exists("ck/.cairn-gen-0000000000001-dead"));  // idle less than 6 hours
  cairn::S3Options zero = server_options();
  zero.leftover_age = std::chrono::seconds(0);
  cairn::S3Store("s3", bucket, zero, prefix).clean_leftovers("");
  CHECK(!store->exists("ck/.cairn-gen-0000000000001-dead"));  // dead at once with leftover_age 0
  CHECK(store->exists("new/.cairn-gen-9999999999999-live"));  // "in the future": a live save
  CHECK_CAIRN_ERROR(cairn::load<test::ConformanceState>({store, "new"}), ErrorKind::incomplete, "");
  // In a Checkpointer root, such a prefix is an incomplete step: listed as one, never a step.
  cairn::Checkpointer({store, "root"}).save(1, a);
  cairn::detail::write_blob(*store, "root/2/.cairn-gen-9999999999999-live/data-0-0.bin", "x");
  const cairn::Inspection root = cairn::inspect({store, "root"});
  REQUIRE(root.steps.size() == 1);
  CHECK(root.steps[0].name == "1");
  CHECK(root.incomplete == std::vector<std::string>{"2"});
  // A generation is never read directly, and a key with '.cairn-' segments is refused.
  CHECK_CAIRN_ERROR(cairn::load<test::ConformanceState>({store, second}), ErrorKind::incomplete, "generation");
  CHECK_CAIRN_ERROR(cairn::save({store, "x/.cairn-gen-1/y"}, a), ErrorKind::invalid_argument, ".cairn-");
  // A marker that is not cairn's is corrupt, never guessed at.
  cairn::detail::write_blob(*store, "odd/_CHECKPOINT", "{\"format\": \"cairn\"}");
  CHECK_CAIRN_ERROR(cairn::load<test::ConformanceState>({store, "odd"}), ErrorKind::corrupt, "object-store commit marker");
}

TEST_CASE("S3 store: wrong credentials, a missing bucket and bad URIs are clear errors") {
  if (!have_server()) return;
  cairn::S3Options wrong = server_options();
  wrong.secret_access_key = "not-the-secret";
  auto store = fresh_store(wrong);
  try {
    cairn::detail::write_blob(*store, "x", "y");
    FAIL("a write with a wrong secret succeeded");
  } catch (const cairn::Error& e) {
    const std::string m = e.what();
    MESSAGE(m);
    CHECK(m.find("403") != std::string::npos);
    CHECK(m.find("SignatureDoesNotMatch") != std::string::npos);
    CHECK(m.find("not-the-secret") == std::string::npos);  // never a credential in a message
    CHECK(e.file().rfind(std::string("s3://") + bucket + "/", 0) == 0);
  }
  auto missing = std::make_shared<cairn::S3Store>("s3", "no-such-bucket", server_options());
  CHECK_CAIRN_ERROR(cairn::load<test::ConformanceState>({missing, "x"}), ErrorKind::not_found, "");
  CHECK_CAIRN_ERROR(cairn::s3_location("s3://ab/k"), ErrorKind::invalid_argument, "3 to 222");
  CHECK_CAIRN_ERROR(cairn::s3_location("s3://Bad_Bucket/k"), ErrorKind::invalid_argument, "lowercase");
  CHECK_CAIRN_ERROR(cairn::s3_location("http://x/k"), ErrorKind::invalid_argument, "s3://");
  cairn::S3Options bad = server_options();
  bad.endpoint = "ftp://127.0.0.1";
  CHECK_CAIRN_ERROR(cairn::s3_location("s3://bucket/k", bad), ErrorKind::invalid_argument, "http");
  bad.endpoint = "http://user:secret@127.0.0.1";
  CHECK_CAIRN_ERROR(cairn::s3_location("s3://bucket/k", bad), ErrorKind::invalid_argument, "without a path or user");
  // Nothing listens on port 9 of loopback: a transport error, retried, then named.
  cairn::S3Options closed = server_options();
  closed.endpoint = "http://127.0.0.1:9";
  auto nowhere = std::make_shared<cairn::S3Store>("s3", bucket, closed);
  CHECK_CAIRN_ERROR(nowhere->open("k"), ErrorKind::io, "after 3 attempts");
}

TEST_CASE("S3 store: copy_blob copies inside the server, whole or in parts, and link_as_orbax uses it") {
  if (!have_server()) return;
  auto a = fresh_store();
  const auto bytes = test::random_bits<unsigned char>(1000003);
  cairn::detail::write_blob(*a, "src/blob", std::string(bytes.begin(), bytes.end()));
  auto read_all = [](const cairn::Store& s, const std::string& key) {
    auto r = s.open(key);
    std::vector<unsigned char> back(static_cast<std::size_t>(r->size()));
    r->read_at(back.data(), back.size(), 0);
    return back;
  };
  // One CopyObject (after a HEAD of the source for its size and ETag, and one of the target).
  std::uint64_t before = a->requests();
  REQUIRE(a->copy_blob(*a, "src/blob", "whole/blob"));
  CHECK(a->requests() - before == 3);
  CHECK(read_all(*a, "whole/blob") == bytes);
  CHECK_CAIRN_ERROR(a->copy_blob(*a, "src/blob", "whole/blob"), ErrorKind::already_exists, "already exists");
  CHECK_CAIRN_ERROR(a->copy_blob(*a, "src/none", "whole/none"), ErrorKind::not_found, "src/none");
  // In parts (UploadPartCopy of 64 KiB ranges), into a store with another root of the bucket.
  cairn::S3Options o = server_options();
  o.copy_part_size = 64 << 10;
  auto b = fresh_store(o);
  before = b->requests();
  REQUIRE(b->copy_blob(*a, "src/blob", "parts/blob"));
  const std::uint64_t parts = (bytes.size() + (64 << 10) - 1) / (64 << 10);
  CHECK(b->requests() - before == 1 + 1 + 1 + parts + 1);  // HEADs of source and target, create, parts, complete
  CHECK(read_all(*b, "parts/blob") == bytes);
  CHECK(read_all(*a, "src/blob") == bytes);
  // Another bucket or another kind of store: false, nothing done (the caller copies).
  auto other_bucket = std::make_shared<cairn::S3Store>("s3", "cairn-test-other", server_options(), fresh_root());
  CHECK_FALSE(other_bucket->copy_blob(*a, "src/blob", "x/blob"));
  cairn::MemoryStore memory;
  CHECK_FALSE(b->copy_blob(memory, "src/blob", "x/blob"));
  CHECK_FALSE(b->exists("x/blob"));

#ifdef CAIRN_TEST_ORBAX
  // An Orbax checkpoint that reads a cairn checkpoint's data on the same bucket: its data
  // files copied by the server, every value read back.
  std::map<std::string, std::vector<float>> state = {{"w", test::random_bits<float>(100000)}, {"b", test::random_bits<float>(7)}};
  cairn::save(cairn::Location(a, "ck"), state);
  const cairn::OrbaxLinkReport r = cairn::link_as_orbax(cairn::Location(a, "ck"), cairn::Location(a, "ck-orbax"));
  CHECK_FALSE(r.files_shared);
  CHECK(r.files_copied_by_store);
  const auto back = cairn::load_orbax<std::map<std::string, std::vector<float>>>(cairn::Location(a, "ck-orbax"));
  CHECK(test::same_bits(back.at("w"), state.at("w")));
  CHECK(test::same_bits(back.at("b"), state.at("b")));
  // An Orbax export on a bucket is laid out as Orbax lays one out there: every object at its
  // own key (no generation, no cairn marker), commit_success.txt among them, written last.
  for (const bool ocdbt : {true, false}) {
    const std::string key = ocdbt ? "orbax-ocdbt" : "orbax-dirs";
    cairn::OrbaxSaveOptions so;
    so.ocdbt = ocdbt;
    so.zstd_level = ocdbt ? 0 : 3;
    cairn::save_orbax(cairn::Location(a, key), state, so);
    {
      // One PUT per object (each under the multipart threshold here), and a few requests
      // whatever their number: the store's first (the bucket's region), the export's and the
      // staging's checks that nothing is there (a HEAD and a listing each, and one of the
      // parent's marker), and the listing that finds them all at the end. No HEAD per object.
      cairn::S3Options whole = server_options();
      whole.part_size = whole.multipart_threshold = 16 << 20;
      auto c = fresh_store(whole);
      cairn::save_orbax(cairn::Location(c, "x"), state, so);
      const std::uint64_t used = c->requests();
      std::uint64_t objects = 0;
      std::function<void(const std::string&)> count = [&](const std::string& k) {
        for (const auto& e : c->list(k)) e.is_prefix ? count(k + "/" + e.name) : void(++objects);
      };
      count("x");
      CHECK(objects > 6);
      CHECK(used <= objects + 7);
    }
    std::vector<std::string> names;
    for (const auto& e : a->list(key)) names.push_back(e.name);
    std::sort(names.begin(), names.end());
    CHECK(names == std::vector<std::string>{"_CHECKPOINT_METADATA", "commit_success.txt", "orbax.checkpoint", "state"});
    CHECK(a->is_blob(key + "/state/_METADATA"));
    CHECK(a->is_blob(key + (ocdbt ? "/state/manifest.ocdbt" : "/state/w/zarr.json")));
    const auto got = cairn::load_orbax<std::map<std::string, std::vector<float>>>(cairn::Location(a, key));
    CHECK(test::same_bits(got.at("w"), state.at("w")));
    CHECK(cairn::verify(cairn::Location(a, key)).ok());
    CHECK_CAIRN_ERROR(cairn::save_orbax(cairn::Location(a, key), state), ErrorKind::already_exists, "never replaces");
  }
#endif
}
