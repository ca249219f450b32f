// SPDX-License-Identifier: Apache-2.0
#include "test_util.hpp"
#include <cairn/checkpoint/missing_key.hpp>

#include <algorithm>
#include <random>
#include <set>
#include <unordered_map>

namespace pr {
struct Dense { Eigen::MatrixXf kernel; Eigen::VectorXf bias; };
CAIRN_TREE(Dense, kernel, bias)
struct Adam { std::vector<float> m, v; std::int64_t count = 0; };
CAIRN_TREE(Adam, m, v, count)
struct TrainState { std::map<std::string, Dense> params; Adam opt; std::int64_t step = 0; std::string note; };
CAIRN_TREE(TrainState, params, opt, step, note)
// The same state after a refactor: optimizer renamed, a field added.
struct Refactored { std::map<std::string, Dense> params; Adam optimizer; std::int64_t step = 0; float lr = 0.1f; };
CAIRN_TREE(Refactored, params, optimizer, step, lr)

TrainState make_state() {
  TrainState s;
  for (const char* name : {"dense1", "dense2"}) s.params[name] = {Eigen::MatrixXf::Random(16, 32), Eigen::VectorXf::Random(32)};
  s.opt = {std::vector<float>(100, 0.5f), std::vector<float>(100, 0.25f), 9};
  s.step = 42;
  s.note = "hello";
  return s;
}
}  // namespace pr

TEST_CASE("strict load lists every missing and unexpected key") {
  test::TempDir dir;
  cairn::save(dir / "c", pr::make_state());
  pr::Refactored r;
  try {
    cairn::load(dir / "c", r);
    FAIL("expected a structure mismatch");
  } catch (const cairn::Error& e) {
    CHECK(e.kind() == cairn::ErrorKind::structure_mismatch);
    const std::string w = e.what();
    for (const char* k : {"optimizer/m", "optimizer/v", "optimizer/count", "lr", "opt/m", "opt/v", "opt/count", "note"})
      CHECK_MESSAGE(w.find(k) != std::string::npos, k << " not in: " << w);
  }
}

TEST_CASE("a strict load into a tree that is one leaf names it as the root") {
  test::TempDir dir;
  cairn::save(dir / "c", pr::make_state());
  std::vector<float> one_leaf;
  CHECK_CAIRN_ERROR(cairn::load(dir / "c", one_leaf), cairn::ErrorKind::structure_mismatch,
                    "In the target but not in the checkpoint (1): (the root).");
}

// A map's key may hold any bytes, a NUL too; what() is read as a C string, where the NUL would
// end the message before the keys after it and the reason.
TEST_CASE("an error about a key holding a NUL prints the whole message, the NUL as \\x00") {
  test::TempDir dir;
  cairn::save(dir / "c", std::map<std::string, std::vector<float>>{{std::string("a\0b", 3), {1}}, {"z", {2}}});
  std::vector<float> one_leaf;
  try {
    cairn::load(dir / "c", one_leaf);
    FAIL("loaded");
  } catch (const cairn::Error& e) {
    const std::string w = e.what();
    CHECK_MESSAGE(w.find("a\\x00b") != std::string::npos, w);
    CHECK_MESSAGE(w.find("z") != std::string::npos, w);
    CHECK(e.message().find(std::string("a\0b", 3)) != std::string::npos);  // the accessors keep the bytes
  }
}

TEST_CASE("partial options: ignore unexpected keys, leave missing ones, report both") {
  test::TempDir dir;
  auto s = pr::make_state();
  cairn::save(dir / "c", s);
  pr::Refactored r;
  r.lr = 0.5f;
  cairn::LoadReport rep = cairn::load(dir / "c", r, cairn::LoadOptions::partial());
  CHECK(r.params.at("dense2").kernel == s.params.at("dense2").kernel);
  CHECK(r.step == 42);
  CHECK(r.lr == 0.5f);  // untouched
  CHECK(rep.missing == std::vector<std::string>{"optimizer/m", "optimizer/v", "optimizer/count", "lr"});
  CHECK(rep.unexpected == std::vector<std::string>{"opt/m", "opt/v", "opt/count", "note"});
  CHECK(rep.loaded.size() == 5);
  cairn::LoadOptions only_unexpected;
  only_unexpected.allow_unexpected = true;
  CHECK_CAIRN_ERROR(cairn::load(dir / "c", r, only_unexpected), cairn::ErrorKind::structure_mismatch, "optimizer/m");
}

TEST_CASE("skip globs leave target leaves untouched and read nothing for them") {
  test::TempDir dir;
  auto s = pr::make_state();
  cairn::save(dir / "c", s);
  pr::TrainState t;
  t.opt.m = {1, 2, 3};
  t.opt.count = -1;
  cairn::LoadOptions o;
  o.skip = {"opt/*"};
  cairn::LoadReport rep = cairn::load(dir / "c", t, o);
  CHECK(t.opt.m == std::vector<float>{1, 2, 3});
  CHECK(t.opt.count == -1);
  CHECK(t.params.at("dense1").bias == s.params.at("dense1").bias);
  CHECK(rep.skipped == std::vector<std::string>{"opt/m", "opt/v", "opt/count"});
  CHECK(rep.unexpected.empty());
}

TEST_CASE("a subtree loads into a smaller type, and a single leaf by key path") {
  test::TempDir dir;
  auto s = pr::make_state();
  cairn::save(dir / "c", s);
  auto params = cairn::load_subtree<std::map<std::string, pr::Dense>>(dir / "c", "params");
  CHECK(params.size() == 2);
  CHECK(params.at("dense1").kernel == s.params.at("dense1").kernel);
  auto kernel = cairn::load_subtree<Eigen::MatrixXf>(dir / "c", "params/dense2/kernel");
  CHECK(kernel == s.params.at("dense2").kernel);
  CHECK(cairn::load_subtree<std::int64_t>(dir / "c", "step") == 42);
  // The same from a store: every entry point with a path has a store form.
  cairn::MemoryStore store;
  cairn::save({store, "ckpt"}, s);
  CHECK(cairn::load_subtree<Eigen::MatrixXf>({store, "ckpt"}, "params/dense2/kernel") == s.params.at("dense2").kernel);
  CHECK_CAIRN_ERROR(cairn::load_subtree<std::int64_t>({store, "ckpt"}, "params/dense9"), cairn::ErrorKind::not_found,
                    "memory://ckpt");
  CHECK_CAIRN_ERROR(cairn::load_subtree<std::int64_t>(dir / "c", "params/dense9"), cairn::ErrorKind::not_found, "dense9");
  try {  // the error names the checkpoint, not only the key
    cairn::load_subtree<std::int64_t>(dir / "c", "params/dense9");
  } catch (const cairn::Error& e) {
    CHECK(e.file() == std::string(dir / "c"));
    CHECK(e.key_path() == "params/dense9");
  }
}

// A key that is not there: the error says what the deepest part of it that is there holds,
// and names a stored leaf a typo away.
TEST_CASE("a subtree or leaf that is not there: what its deepest stored part holds, and a leaf a typo away") {
  test::TempDir dir;
  std::map<std::string, std::vector<std::vector<float>>> m{{"layers", {{1}, {2}, {3}}}, {"emb", {{4}}}};
  cairn::save(dir / "c", m);
  CHECK_CAIRN_ERROR(cairn::load_subtree<std::vector<float>>(dir / "c", "layer/1"), cairn::ErrorKind::not_found,
                    "no subtree 'layer/1'; the top of the tree holds emb, layers; did you mean 'layers/1'?");
  CHECK_CAIRN_ERROR(cairn::load_subtree<std::vector<float>>(dir / "c", "layers/7"), cairn::ErrorKind::not_found,
                    "no subtree 'layers/7'; 'layers' holds 0, 1, 2");
  try {
    cairn::load_subtree<std::vector<float>>(dir / "c", "layers/7");
  } catch (const cairn::Error& e) {
    CHECK(std::string(e.what()).find("did you mean") == std::string::npos);  // another index is no better a guess
  }
  CHECK_CAIRN_ERROR(cairn::read_arrays(dir / "c", {"emb/O"}), cairn::ErrorKind::not_found,
                    "no leaf 'emb/O'; 'emb' holds 0; did you mean 'emb/0'?");
  CHECK_CAIRN_ERROR(cairn::read_arrays(dir / "c", {"zzzzzz"}), cairn::ErrorKind::not_found,
                    "no leaf 'zzzzzz'; the top of the tree holds emb, layers (cairn ls lists them)");
  // Indices listed in their order, escaped keys as they print.
  std::map<std::string, std::vector<float>> many;
  for (int i = 0; i < 12; ++i) many["k" + std::to_string(i)] = {1};
  many["a/b"] = {2};
  cairn::save(dir / "d", std::vector<std::map<std::string, std::vector<float>>>(11, many));
  CHECK_CAIRN_ERROR(cairn::read_arrays(dir / "d", {"12/k1"}), cairn::ErrorKind::not_found,
                    "the top of the tree holds 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10 (cairn");
  CHECK_CAIRN_ERROR(cairn::read_arrays(dir / "d", {"3/a%2Fc"}), cairn::ErrorKind::not_found,
                    "'3' holds a%2Fb, k0, k1, k2, k3, k4, k5, k6, k7, k8, k9, k10, ... (13 in all); did you mean '3/a%2Fb'?");
}

// The bounded edit distance against the whole table, on random strings of a small alphabet.
TEST_CASE("the bounded edit distance agrees with the full one wherever it is within its bound") {
  std::mt19937_64& g = test::rng();
  const auto full = [](const std::string& a, const std::string& b) {
    std::vector<std::vector<std::size_t>> t(a.size() + 1, std::vector<std::size_t>(b.size() + 1));
    for (std::size_t i = 0; i <= a.size(); ++i) t[i][0] = i;
    for (std::size_t j = 0; j <= b.size(); ++j) t[0][j] = j;
    for (std::size_t i = 1; i <= a.size(); ++i)
      for (std::size_t j = 1; j <= b.size(); ++j)
        t[i][j] = std::min({t[i - 1][j] + 1, t[i][j - 1] + 1, t[i - 1][j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
    return t[a.size()][b.size()];
  };
  for (int round = 0; round < 3000; ++round) {
    std::string a, b;
    for (std::size_t n = g() % 9; n > 0; --n) a += static_cast<char>('a' + g() % 3);
    b = a;
    for (std::size_t edits = g() % 4; edits > 0; --edits) {  // a few edits of a, or another string
      const std::size_t at = b.empty() ? 0 : g() % (b.size() + 1);
      switch (g() % 3) {
        case 0: b.insert(at, 1, static_cast<char>('a' + g() % 3)); break;
        case 1: if (at < b.size()) b.erase(at, 1); break;
        default: if (at < b.size()) b[at] = static_cast<char>('a' + g() % 3);
      }
    }
    const std::size_t most = g() % 4;
    const std::size_t d = full(a, b);
    CAPTURE(a);
    CAPTURE(b);
    CAPTURE(most);
    CHECK(cairn::detail::edit_distance_at_most(a, b, most) == std::min(d, most + 1));
  }
}

TEST_CASE("containers take the stored entries; allow_missing keeps the target's own") {
  test::TempDir dir;
  auto s = pr::make_state();
  cairn::save(dir / "c", s);
  cairn::LoadOptions sub;
  sub.subtree = "params";
  // Strict: the map becomes exactly the stored one.
  std::map<std::string, pr::Dense> params;
  params["head"] = {Eigen::MatrixXf::Ones(2, 2), Eigen::VectorXf::Ones(2)};
  cairn::load(dir / "c", params, sub);
  CHECK(params.size() == 2);
  CHECK(params.count("head") == 0);
  // allow_missing: a new layer of the target is kept and reported missing (fine-tuning a new head).
  params["head"] = {Eigen::MatrixXf::Ones(2, 2), Eigen::VectorXf::Ones(2)};
  sub.allow_missing = true;
  cairn::LoadReport rep = cairn::load(dir / "c", params, sub);
  CHECK(params.size() == 3);
  CHECK(params.at("head").kernel == Eigen::MatrixXf::Ones(2, 2));
  CHECK(params.at("dense2").bias == s.params.at("dense2").bias);
  CHECK(rep.missing == std::vector<std::string>{"head/kernel", "head/bias"});
  // Loaded into again with the same keys: the entries are kept, not remade.
  params.erase("head");
  sub.allow_missing = false;
  const pr::Dense* kept = &params.at("dense1");
  cairn::load(dir / "c", params, sub);
  CHECK(&params.at("dense1") == kept);
  // As many entries as are stored, one of them another key: it is replaced by the stored one.
  params.erase("dense2");
  params["dense3"] = {Eigen::MatrixXf::Ones(2, 2), Eigen::VectorXf::Ones(2)};
  REQUIRE(params.size() == 2);
  cairn::load(dir / "c", params, sub);
  CHECK(params.count("dense3") == 0);
  CHECK(params.at("dense2").kernel == s.params.at("dense2").kernel);
  CHECK(&params.at("dense1") == kept);
  std::vector<std::vector<float>> seq(6), stored = {{1}, {2}, {3}, {4}};
  cairn::save(dir / "s", stored);
  cairn::load(dir / "s", seq, cairn::LoadOptions::partial());
  CHECK(seq.size() == 6);
  CHECK(seq[3] == std::vector<float>{4});
  cairn::load(dir / "s", seq);
  CHECK(seq == stored);
}

TEST_CASE("a partial restore reads only the bytes of the leaves it loads") {
  test::TempDir dir;
  std::vector<std::vector<float>> layers(100);
  for (auto& l : layers) l = test::random_bits<float>(4096);
  cairn::save(dir / "c", layers);
  const std::uint64_t total = cairn::metadata(dir / "c").total_bytes();
  std::vector<float> one;
  cairn::LoadOptions o;
  o.subtree = "37";
  cairn::LoadReport rep = cairn::load(dir / "c", one, o);
  CHECK(std::memcmp(one.data(), layers[37].data(), 4096 * 4) == 0);
  CHECK(rep.bytes_read == 4096 * 4);
  CHECK(rep.bytes_read * 50 < total);
}

// A load looks for each target leaf first at the stored position after the last one it found
// (the order the checkpoint was saved in), and otherwise by key: a target walked in another
// order, with leaves the checkpoint lacks and without some it has, finds every leaf it shares.
TEST_CASE("leaves are matched by key whatever order the target walks them in") {
  test::TempDir dir;
  std::mt19937_64& g = test::rng();
  std::map<std::string, std::vector<std::uint32_t>> saved;
  for (int i = 0; i < 300; ++i) saved["k" + std::to_string(g() % 100000)] = test::random_bits<std::uint32_t>(1 + g() % 40, g);
  cairn::save(dir / "c", saved);

  // Every key, walked in the unordered_map's order.
  std::unordered_map<std::string, std::vector<std::uint32_t>> hashed;
  cairn::load(dir / "c", hashed);
  REQUIRE(hashed.size() == saved.size());
  for (const auto& [k, v] : saved) CHECK(hashed.at(k) == v);

  // The reverse order, with leaves of its own between them: a map keeps its own entries
  // under allow_missing and takes every stored one (a third of them it lacks beforehand).
  std::map<std::string, std::vector<std::uint32_t>, std::greater<>> reversed;
  std::set<std::string> added;
  for (const auto& [k, v] : saved) {
    if (g() % 3 == 0) continue;
    reversed[k] = std::vector<std::uint32_t>(v.size(), 0);
    if (g() % 4 == 0) {
      reversed[k + "x"] = {7, 7};
      added.insert(k + "x");
    }
  }
  cairn::LoadOptions partial;
  partial.allow_missing = true;
  const cairn::LoadReport r = cairn::load(dir / "c", reversed, partial);
  CHECK(r.loaded.size() == saved.size());
  std::set<std::string> loaded(r.loaded.begin(), r.loaded.end()), stored;
  for (const auto& kv : saved) stored.insert(kv.first);
  CHECK(loaded == stored);  // the report names every leaf by its key
  CHECK(r.missing.size() == added.size());
  CHECK(r.unexpected.empty());
  CHECK(reversed.size() == saved.size() + added.size());
  for (const auto& [k, v] : reversed) {
    if (added.count(k)) CHECK(v == std::vector<std::uint32_t>{7, 7});
    else CHECK(v == saved.at(k));
  }
}

// An unordered map that holds exactly the stored keys is left as it is (one lookup per key);
// any other takes the stored keys, dropping its own unless allow_missing.
TEST_CASE("an existing unordered_map takes the stored keys") {
  test::TempDir dir;
  std::mt19937_64& g = test::rng();
  std::map<std::string, std::vector<std::uint32_t>> saved;
  for (int i = 0; i < 50; ++i) saved["w" + std::to_string(i)] = test::random_bits<std::uint32_t>(1 + g() % 20, g);
  cairn::save(dir / "c", saved);

  std::unordered_map<std::string, std::vector<std::uint32_t>> same;
  for (const auto& [k, v] : saved) same[k] = std::vector<std::uint32_t>(v.size(), 0);
  const auto* before = &same.at("w7");
  cairn::load(dir / "c", same);
  CHECK(&same.at("w7") == before);  // entries kept, not remade
  for (const auto& [k, v] : saved) CHECK(same.at(k) == v);

  std::unordered_map<std::string, std::vector<std::uint32_t>> other = same;
  other.erase("w3");
  other["extra"] = {1};
  REQUIRE(other.size() == saved.size());  // same size, other keys
  cairn::load(dir / "c", other);
  CHECK(other.size() == saved.size());
  CHECK(other.count("extra") == 0);
  CHECK(other.at("w3") == saved.at("w3"));

  // Two stored string keys that name one integer ("01" and "1"): the target's other integer
  // keys are still dropped, though it has as many entries as there are stored keys.
  std::map<std::string, std::vector<float>> two{{"01", {1.0f}}, {"1", {2.0f}}};
  cairn::save(dir / "d", two);
  std::unordered_map<int, std::vector<float>> ints{{1, {0.0f}}, {2, {0.0f}}};
  cairn::LoadOptions o;
  o.allow_unexpected = true;
  const cairn::LoadReport r = cairn::load(dir / "d", ints, o);
  CHECK(ints.size() == 1);
  CHECK(ints.count(2) == 0);
  CHECK(r.missing.empty());
  CHECK(r.unexpected.size() == 1);
}
