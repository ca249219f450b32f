// SPDX-License-Identifier: Apache-2.0
// cairn::Location: paths, file:// URIs, registered URI schemes and {store, key} reach the same
// store through every entry point (save, save_async, load, load<T>, load_subtree, metadata,
// Items, the safetensors functions, the Checkpointer); an unknown scheme is refused naming
// the URI; a location made from a URI keeps its store alive through an async save.
#include "store_conformance.hpp"

#include <filesystem>

using cairn::ErrorKind;
using cairn::Location;

namespace {
// Bit-exact (random floats include NaNs, which == would call different).
bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}
}  // namespace

TEST_CASE("a URI is a scheme, then ://; anything else is a path") {
  using cairn::detail::uri_scheme;
  CHECK(uri_scheme("s3://bucket/key") == "s3");
  CHECK(uri_scheme("GS://bucket") == "gs");
  CHECK(uri_scheme("my+store.v2-x://a") == "my+store.v2-x");
  CHECK(uri_scheme("ckpt/100") == "");
  CHECK(uri_scheme("runs/a://b") == "");  // a '/' before "://": a path
  CHECK(uri_scheme("./x://y") == "");
  CHECK(uri_scheme("://x") == "");
  CHECK(uri_scheme("1a://x") == "");
  CHECK(uri_scheme("/abs/path") == "");
}

TEST_CASE("a path, a std::filesystem::path and a file:// URI name the same checkpoint") {
  test::TempDir dir;
  const auto state = test::random_conformance_state();
  const std::string abs = std::filesystem::absolute(dir / "ckpt").string();
  cairn::save("file://" + abs, state);
  test::check_same(state, cairn::load<test::ConformanceState>(abs));
  test::check_same(state, cairn::load<test::ConformanceState>(std::filesystem::path(abs)));
  test::check_same(state, cairn::load<test::ConformanceState>("file://localhost" + abs));
  const Location loc(abs + "/");
  CHECK(loc.key() == abs);  // trailing separators dropped, as for every key
  CHECK(loc.describe() == abs);
  CHECK((Location(dir.path) / "ckpt").key() == abs.substr(abs.size() - loc.key().size()));
  CHECK_CAIRN_ERROR(cairn::load<test::ConformanceState>("file://relative/ckpt"), ErrorKind::invalid_argument,
                    "absolute path");
}

TEST_CASE("an unregistered scheme is refused, naming the URI and the schemes there are") {
  CHECK_CAIRN_ERROR(cairn::metadata("nosuch://bucket/ckpt"), ErrorKind::invalid_argument, "nosuch://bucket/ckpt");
  CHECK_CAIRN_ERROR(cairn::metadata("nosuch://bucket/ckpt"), ErrorKind::invalid_argument, "registered: file");
  CHECK_CAIRN_ERROR(cairn::metadata("nosuch://bucket/ckpt"), ErrorKind::invalid_argument, "cairn::register_store_scheme");
  // cairn's own opt-in store is named by the header a user includes (this program does not).
  CHECK_CAIRN_ERROR(cairn::metadata("s3://bucket/ckpt"), ErrorKind::invalid_argument, "include <cairn/s3.hpp>");
  CHECK_CAIRN_ERROR(cairn::metadata("gs://bucket/ckpt"), ErrorKind::invalid_argument, "link cairn::s3");
  const auto schemes = cairn::store_schemes();
  CHECK(std::find(schemes.begin(), schemes.end(), "file") != schemes.end());
  auto opener = [](const std::string&) -> Location { throw std::logic_error("unused"); };
  CHECK_CAIRN_ERROR(cairn::register_store_scheme("S3", opener), ErrorKind::invalid_argument, "lowercase");
  CHECK_CAIRN_ERROR(cairn::register_store_scheme("", opener), ErrorKind::invalid_argument, "");
  CHECK_CAIRN_ERROR(cairn::register_store_scheme("a b", opener), ErrorKind::invalid_argument, "");
  CHECK_CAIRN_ERROR(cairn::register_store_scheme("file", opener), ErrorKind::invalid_argument, "built in");
  CHECK_CAIRN_ERROR(cairn::register_store_scheme("ok", nullptr), ErrorKind::invalid_argument, "opener");
  CHECK_CAIRN_ERROR(Location(std::shared_ptr<cairn::Store>(), "k"), ErrorKind::invalid_argument, "null");
}

TEST_CASE("a registered scheme works in every entry point") {
  auto store = std::make_shared<cairn::MemoryStore>();
  std::vector<std::string> opened;
  cairn::register_store_scheme("unit-mem", [store, &opened](const std::string& rest) {
    opened.push_back(rest);
    return Location(store, rest);
  });
  const auto state = test::random_conformance_state();

  cairn::save("unit-mem://runs/a", state);
  CHECK(store->exists("runs/a/_CHECKPOINT"));
  CHECK(opened.back() == "runs/a");
  test::check_same(state, cairn::load<test::ConformanceState>("unit-mem://runs/a"));
  test::ConformanceState into;
  CHECK(cairn::load("unit-mem://runs/a", into).loaded.size() == 5);
  test::check_same(state, into);
  CHECK(cairn::load_subtree<std::string>("unit-mem://runs/a", "name") == state.name);
  CHECK(cairn::metadata("unit-mem://runs/a").leaves().size() == 5);

  // The same checkpoint through {store, key}.
  test::check_same(state, cairn::load<test::ConformanceState>({*store, "runs/a"}));
  test::check_same(state, cairn::load<test::ConformanceState>({store, "runs/a"}));

  auto async = cairn::save_async("unit-mem://runs/b", state);
  async.wait();
  test::check_same(state, cairn::load<test::ConformanceState>({store, "runs/b"}));

  std::vector<float> w = state.w;
  cairn::Json note = cairn::Json::object();
  cairn::save("unit-mem://runs/items", cairn::Items().tree("w", w).json("note", note));
  std::vector<float> w_back;
  cairn::load("unit-mem://runs/items", cairn::Items().tree("w", w_back));
  CHECK(same_bits(w_back, w));
  cairn::save_async("unit-mem://runs/items2", cairn::Items().tree("w", w)).wait();
  CHECK(same_bits(cairn::load_subtree<std::vector<float>>(Location(store, "runs/items2"), "", {.item = "w"}), w));

  cairn::save_safetensors("unit-mem://m.safetensors", std::map<std::string, std::vector<float>>{{"w", w}});
  CHECK(cairn::safetensors_metadata("unit-mem://m.safetensors").leaves().size() == 1);
  CHECK(same_bits(cairn::load_safetensors<std::map<std::string, std::vector<float>>>("unit-mem://m.safetensors").at("w"), w));

  {
    cairn::Checkpointer steps("unit-mem://train");
    steps.save(1, state);
    steps.save_async(2, state);
    steps.wait();
  }
  cairn::Checkpointer again(Location(store, "train"));
  CHECK(again.latest() == 2);
  test::check_same(state, cairn::load<test::ConformanceState>("unit-mem://" + again.step_path(1)));
}

TEST_CASE("a location made from a URI keeps its store alive through an async save, and lets it go after") {
  std::weak_ptr<cairn::MemoryStore> last;
  cairn::register_store_scheme("unit-fresh", [&last](const std::string& rest) {
    auto store = std::make_shared<cairn::MemoryStore>();  // a new store each time: only the save holds it
    last = store;
    return Location(store, rest);
  });
  const auto state = test::random_conformance_state();
  cairn::AsyncSave pending = cairn::save_async("unit-fresh://ckpt", state);
  REQUIRE(!last.expired());  // the Location that made it is gone; the save holds the store
  {
    auto store = last.lock();
    pending.wait();
    CHECK(store->exists("ckpt/_CHECKPOINT"));
    test::check_same(state, cairn::load<test::ConformanceState>({*store, "ckpt"}));
  }
  pending = cairn::AsyncSave();
  CHECK(last.expired());
}

TEST_CASE("a later registration of a scheme replaces its opener") {
  auto first = std::make_shared<cairn::MemoryStore>();
  auto second = std::make_shared<cairn::MemoryStore>();
  cairn::register_store_scheme("unit-swap", [first](const std::string& rest) { return Location(first, rest); });
  cairn::save("unit-swap://x", std::vector<float>{1});
  cairn::register_store_scheme("unit-swap", [second](const std::string& rest) { return Location(second, rest); });
  cairn::save("unit-swap://x", std::vector<float>{2});
  CHECK(cairn::load<std::vector<float>>({first, "x"}) == std::vector<float>{1});
  CHECK(cairn::load<std::vector<float>>({second, "x"}) == std::vector<float>{2});
}
