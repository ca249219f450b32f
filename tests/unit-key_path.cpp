// SPDX-License-Identifier: Apache-2.0
#include "test_util.hpp"

#include <algorithm>
#include <limits>
#include <set>

using cairn::KeyEntry;
using cairn::KeyPath;

TEST_CASE("key paths print with '/' and escape separators so every path round-trips") {
  KeyPath p({KeyEntry::field("params"), KeyEntry::key("a/b%c"), KeyEntry::index(3), KeyEntry::int_key(-7)});
  CHECK(p.str() == "params/a%2Fb%25c/3/-7");
  CHECK(p.kinds() == "fkin");
  KeyPath back = KeyPath::from_stored(p.str(), p.kinds());
  CHECK(back == p);
  CHECK(cairn::split_key_path("x%2Fy/z") == std::vector<std::string>{"x/y", "z"});
  CHECK(KeyPath().str().empty());
}

TEST_CASE("a key path of up to three entries keeps them in itself; a deeper one, copies and moves keep every entry") {
  auto inside = [](const KeyPath& p) {
    const auto* at = reinterpret_cast<const char*>(p.entries().data());
    return at >= reinterpret_cast<const char*>(&p) && at < reinterpret_cast<const char*>(&p + 1);
  };
  KeyPath p;
  std::vector<KeyEntry> all;
  for (int i = 0; i < 6; ++i) {
    const KeyEntry e = i % 2 ? KeyEntry::index(i) : KeyEntry::field("name-long-enough-to-allocate-" + std::to_string(i));
    p.push_back(e);
    all.push_back(e);
    CAPTURE(i);
    CHECK(inside(p) == (p.size() <= cairn::inline_key_entries));
    const KeyPath copy = p;  // (copies: the same entries, each in its own storage)
    CHECK(copy == p);
    CHECK(inside(copy) == inside(p));
    CHECK(KeyPath::from_stored(p.str(), p.kinds()) == p);
    KeyPath moved = KeyPath(copy);
    KeyPath target = std::move(moved);
    CHECK(target == KeyPath(all));
    CHECK(std::equal(target.entries().begin(), target.entries().end(), all.begin(), all.end()));
  }
  while (!p.empty()) {
    p.pop_back();
    all.pop_back();
    CHECK(p == KeyPath(all));
  }
}

TEST_CASE("random keys with separators and escapes round-trip") {
  const std::string alphabet = "ab/%2F5_";
  for (int trial = 0; trial < 500; ++trial) {
    std::vector<KeyEntry> entries;
    const int n = 1 + static_cast<int>(test::rng()() % 4);
    for (int i = 0; i < n; ++i) {
      std::string k;
      const int len = static_cast<int>(test::rng()() % 6);
      for (int j = 0; j < len; ++j) k += alphabet[test::rng()() % alphabet.size()];
      entries.push_back(KeyEntry::key(k));
    }
    KeyPath p(entries);
    CHECK(KeyPath::from_stored(p.str(), p.kinds()) == p);
  }
}

TEST_CASE("every kind of entry prints as its text escaped, joined by '/', short or long") {
  // The reference: each entry's text, escaped on its own, then joined.
  auto reference = [](const KeyPath& p) {
    std::string s;
    for (std::size_t i = 0; i < p.size(); ++i) s += (i ? "/" : "") + cairn::escape_key_segment(p[i].text());
    return s;
  };
  const std::string alphabet = "ab/%2F5_.";
  const std::int64_t edges[] = {0, -1, 9, 10, -10, 99999, std::numeric_limits<std::int64_t>::max(),
                                std::numeric_limits<std::int64_t>::min()};
  for (int trial = 0; trial < 2000; ++trial) {
    std::vector<KeyEntry> entries;
    const int n = static_cast<int>(test::rng()() % 5);
    for (int i = 0; i < n; ++i) {
      const auto kind = test::rng()() % 4;
      const std::int64_t number = test::rng()() % 2 ? edges[test::rng()() % 8] : static_cast<std::int64_t>(test::rng()());
      if (kind == 0) entries.push_back(KeyEntry::index(number < 0 ? -(number + 1) : number));
      else if (kind == 1) entries.push_back(KeyEntry::int_key(number));
      else {
        std::string k;
        const int len = static_cast<int>(test::rng()() % 40);  // past the 15 of a short string
        for (int j = 0; j < len; ++j) k += alphabet[test::rng()() % alphabet.size()];
        entries.push_back(kind == 2 ? KeyEntry::key(k) : KeyEntry::field(k));
      }
    }
    KeyPath p(entries);
    CAPTURE(reference(p));
    CHECK(p.str() == reference(p));
  }
}

// The metadata reader copies a stored key instead of printing it when prints_as_stored says
// they are the same text: random stored texts, canonical or not, against printing.
TEST_CASE("a stored key path said to print as stored prints as stored, and a printed one is said to") {
  const std::string alphabet = "a0-1/%2Ff5";
  int copied = 0;
  for (int trial = 0; trial < 20000; ++trial) {
    std::string text, kinds;
    const int len = static_cast<int>(test::rng()() % 12);
    for (int j = 0; j < len; ++j) text += alphabet[test::rng()() % alphabet.size()];
    const std::size_t n = text.empty() ? test::rng()() % 2 : 1 + static_cast<std::size_t>(std::count(text.begin(), text.end(), '/'));
    for (std::size_t i = 0; i < n; ++i) kinds += "fkin"[test::rng()() % 4];
    KeyPath p;
    try {
      p = KeyPath::from_stored(text, kinds);
    } catch (const cairn::Error&) {
      continue;  // refused: the reader never asks
    }
    CAPTURE(text);
    CAPTURE(kinds);
    if (cairn::detail::prints_as_stored(text, kinds)) {
      ++copied;
      CHECK(p.str() == text);
    }
    // What a writer stores (the printed form) is copied whenever it escapes nothing.
    if (p.str().find('%') == std::string::npos) CHECK(cairn::detail::prints_as_stored(p.str(), p.kinds()));
  }
  CHECK(copied > 1000);
  CHECK(!cairn::detail::prints_as_stored("a/-0", "fn"));
  CHECK(!cairn::detail::prints_as_stored("a/007", "fi"));
  CHECK(cairn::detail::prints_as_stored("a/0/-12", "fin"));
}

TEST_CASE("stored key paths from untrusted metadata are checked") {
  CHECK_CAIRN_ERROR(KeyPath::from_stored("a/b", "f"), cairn::ErrorKind::corrupt, "entries");
  CHECK_CAIRN_ERROR(KeyPath::from_stored("a/x", "fi"), cairn::ErrorKind::corrupt, "bad index");
  CHECK_CAIRN_ERROR(KeyPath::from_stored("a/-1", "fi"), cairn::ErrorKind::corrupt, "bad index");
  CHECK_CAIRN_ERROR(KeyPath::from_stored("a", "z"), cairn::ErrorKind::corrupt, "unknown key kind");
  CHECK_CAIRN_ERROR(KeyPath::from_stored("a/99999999999999999999", "fn"), cairn::ErrorKind::corrupt, "bad index");
}

TEST_CASE("decimal integers: int64 with a sign, uint64 without, nothing that does not fit") {
  std::int64_t i = 0;
  std::uint64_t u = 0;
  CHECK((cairn::detail::parse_int64("-9223372036854775808", i) && i == std::numeric_limits<std::int64_t>::min()));
  CHECK((cairn::detail::parse_int64("9223372036854775807", i) && i == std::numeric_limits<std::int64_t>::max()));
  CHECK(!cairn::detail::parse_int64("9223372036854775808", i));
  CHECK(!cairn::detail::parse_int64("-9223372036854775809", i));
  CHECK((cairn::detail::parse_uint64("18446744073709551615", u) && u == std::numeric_limits<std::uint64_t>::max()));
  CHECK((cairn::detail::parse_uint64("9223372036854775808", u) && u == std::uint64_t{1} << 63));
  CHECK(!cairn::detail::parse_uint64("18446744073709551616", u));
  CHECK(!cairn::detail::parse_uint64("-1", u));
  for (const char* bad : {"", "-", "--1", "+1", "1 ", "0x10", "1e3", "123456789012345678901"}) {
    CHECK(!cairn::detail::parse_int64(bad, i));
    CHECK(!cairn::detail::parse_uint64(bad, u));
  }
  // Random values print and parse back.
  auto& g = test::rng();
  for (int n = 0; n < 1000; ++n) {
    const std::uint64_t v = g() >> (g() % 64);
    CHECK((cairn::detail::parse_uint64(std::to_string(v), u) && u == v));
    const auto s = static_cast<std::int64_t>(g());
    CHECK((cairn::detail::parse_int64(std::to_string(s), i) && i == s));
  }
}

TEST_CASE("globs: '*' stays in a segment, '**' crosses, a match on an ancestor selects the subtree") {
  using cairn::glob_matches;
  CHECK(glob_matches("opt/*", "opt/m"));
  CHECK(glob_matches("opt/*", "opt/m/deep"));  // "opt/m" is an ancestor
  CHECK(glob_matches("opt", "opt/m"));
  CHECK_FALSE(glob_matches("opt", "optimizer/m"));
  CHECK(glob_matches("params/*/kernel", "params/dense/kernel"));
  CHECK_FALSE(glob_matches("params/*/kernel", "params/a/b/kernel"));
  CHECK(glob_matches("params/**/kernel", "params/a/b/kernel"));
  CHECK(glob_matches("layer?", "layer1/w"));
  CHECK_FALSE(glob_matches("layer?", "layer12/w"));
  CHECK(glob_matches("*", "anything/at/all"));
  CHECK_FALSE(glob_matches("a*c", "ab/c"));
}

TEST_CASE("key path prefixes are segment-wise") {
  CHECK(cairn::key_path_has_prefix("params/dense/kernel", "params"));
  CHECK(cairn::key_path_has_prefix("params/dense/kernel", "params/dense/kernel"));
  CHECK_FALSE(cairn::key_path_has_prefix("params2/x", "params"));
  CHECK(cairn::key_path_has_prefix("x", ""));
}

TEST_CASE("a typed key path resolves to what it spells, or without empty segments where that names nothing") {
  using cairn::detail::resolve_key;
  CHECK(cairn::detail::canonical_key("a%2fb/c/") == "a%2Fb/c/");
  CHECK(cairn::detail::canonical_key("a//b") == "a//b");
  CHECK(cairn::detail::canonical_key("") == "");
  CHECK(cairn::detail::key_without_empty_segments("/a//b/") == "a/b");
  std::vector<std::string> asked;
  const std::set<std::string> stored{"m/a/", "m/a", "p", "m"};
  auto names = [&](const std::string& k) { asked.push_back(k); return stored.count(k) != 0; };
  CHECK(resolve_key("m/a/", names) == "m/a/");  // the empty key under m/a
  CHECK(resolve_key("p/", names) == "p");        // nothing is "p/": the trailing '/' is dropped
  CHECK(resolve_key("/p", names) == "p");
  CHECK(resolve_key("q/", names) == "q/");       // neither names anything: as spelled, for the error
  CHECK(resolve_key("/", names) == "");          // the root
  asked.clear();
  CHECK(resolve_key("m/a", names) == "m/a");     // no empty segment: not looked up at all
  CHECK(resolve_key("x%2fy", names) == "x%2Fy");
  CHECK(asked.empty());
}
