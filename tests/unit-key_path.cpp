#include "test_util.hpp"

#include <limits>

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

TEST_CASE("stored key paths from untrusted metadata are checked") {
  CHECK_CAIRN_ERROR(KeyPath::from_stored("a/b", "f"), cairn::ErrorKind::corrupt, "entries");
  CHECK_CAIRN_ERROR(KeyPath::from_stored("a/x", "fi"), cairn::ErrorKind::corrupt, "bad index");
  CHECK_CAIRN_ERROR(KeyPath::from_stored("a/-1", "fi"), cairn::ErrorKind::corrupt, "bad index");
  CHECK_CAIRN_ERROR(KeyPath::from_stored("a", "z"), cairn::ErrorKind::corrupt, "unknown key kind");
  CHECK_CAIRN_ERROR(KeyPath::from_stored("a/99999999999999999999", "fn"), cairn::ErrorKind::corrupt, "bad index");
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
