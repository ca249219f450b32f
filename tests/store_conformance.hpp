// SPDX-License-Identifier: Apache-2.0
// The conformance suite of the storage seam: what every cairn::Store must do, checked the same
// way for each (in the manner of TensorStore's kvstore/test_util.h). A new store inherits all
// of it by calling check_store_conformance with a function that makes an empty one.
#pragma once

#include "test_util.hpp"

#include <functional>
#include <thread>
#include <memory>

namespace test {

struct ConformanceState {
  std::vector<float> w;
  std::vector<std::int32_t> ids;
  std::string name;
  std::map<std::string, std::vector<double>> table;
};
CAIRN_TREE(ConformanceState, w, ids, name, table)

inline ConformanceState random_conformance_state() {
  ConformanceState s;
  s.w = random_bits<float>(1 + rng()() % 5000);
  s.ids = random_bits<std::int32_t>(rng()() % 300);
  s.name = "state " + std::to_string(rng()() % 1000);
  s.table["a"] = random_bits<double>(17);
  s.table["b/c"] = random_bits<double>(rng()() % 3);
  return s;
}

inline void check_same(const ConformanceState& a, const ConformanceState& b) {
  auto same = [](const auto& x, const auto& y) {
    return x.size() == y.size() && (x.empty() || std::memcmp(x.data(), y.data(), x.size() * sizeof(x[0])) == 0);
  };
  CHECK(same(a.w, b.w));
  CHECK(same(a.ids, b.ids));
  CHECK(a.name == b.name);
  REQUIRE(a.table.size() == b.table.size());
  for (const auto& [k, v] : a.table) CHECK(same(v, b.table.at(k)));
}

// Names under `prefix` that are not the store's own staging.
inline std::vector<std::string> visible_names(const cairn::Store& store, const std::string& prefix) {
  std::vector<std::string> out;
  for (const auto& e : store.list(prefix))
    if (!store.is_internal_name(e.name)) out.push_back(e.name);
  std::sort(out.begin(), out.end());
  return out;
}

// A blob of the checkpoint at `key`, read where the store says the checkpoint is (a store
// without rename keeps a checkpoint under a generation its marker names: S3Store).
inline std::string read_checkpoint_blob(const cairn::Store& store, const std::string& key, const std::string& name) {
  return cairn::detail::read_blob(store, cairn::detail::join_key(store.readable_checkpoint(key), name), 1 << 30);
}

// How a test flips the byte at `at` of the data file `file` of the checkpoint at `key`: where
// null, the file is read, removed and written again with the byte changed; a store that keeps
// a checkpoint's files elsewhere (S3Store, small checkpoints inline in their markers) gives
// its own.
using FlipByte = std::function<void(cairn::Store&, const std::string& key, const std::string& file, std::uint64_t at)>;

// Store::stage and its looks' answer (CheckpointStaging::checked): a store may refuse in
// either, since one may answer stage() before its looks at the key are answered (S3Store). A
// staging whose looks refused cannot be published either.
inline std::unique_ptr<cairn::CheckpointStaging> stage_checked(cairn::Store& store, const std::string& key, bool overwrite) {
  auto staging = store.stage(key, overwrite);
  try {
    staging->checked();
  } catch (const cairn::Error&) {
    CHECK_THROWS_AS(staging->publish({}), cairn::Error);
    throw;
  }
  return staging;
}

inline void check_store_conformance(const std::function<std::shared_ptr<cairn::Store>()>& make, const FlipByte& flip = nullptr) {
  using cairn::ErrorKind;
  SUBCASE("blobs: exact ranges in and out, sizes, and errors that name the key") {
    auto store = make();
    const auto bytes = random_bits<unsigned char>(10000);
    {
      auto w = store->create("a/blob");
      w->write_at(bytes.data() + 5000, 5000, 5000);  // any order of ranges
      w->write_at(bytes.data(), 5000, 0);
      w->finish(bytes.size());
    }
    auto r = store->open("a/blob");
    CHECK(r->size() == bytes.size());
    std::vector<unsigned char> back(300);
    r->read_at(back.data(), 300, 4900);
    CHECK(std::memcmp(back.data(), bytes.data() + 4900, 300) == 0);
    CHECK_CAIRN_ERROR(r->read_at(back.data(), 300, 9800), ErrorKind::corrupt, "ends at byte");
    // An estimate, but never more than the range; and reads from two threads at once.
    CHECK(r->cached_bytes(100, 9000) <= 9000);
    CHECK(r->cached_bytes(0, 0) == 0);
    {
      std::vector<unsigned char> a(5000), b(5000);
      std::thread other([&] { r->read_at(b.data(), 5000, 5000); });
      r->read_at(a.data(), 5000, 0);
      other.join();
      CHECK(std::memcmp(a.data(), bytes.data(), 5000) == 0);
      CHECK(std::memcmp(b.data(), bytes.data() + 5000, 5000) == 0);
    }
    // read_ahead is a hint: it never fails (missing keys and prefixes included), its handle
    // stops it when destroyed, and it changes nothing a reader sees.
    for (const std::vector<std::string>& keys : std::vector<std::vector<std::string>>{
             {"a/blob"}, {"a/missing", "a/blob"}, {"a"}, {"a/blob", "a/blob"}, {}}) {
      for (const std::uint64_t budget : {std::uint64_t{0}, std::uint64_t{4096}, std::uint64_t{1} << 30}) {
        auto ahead = store->read_ahead(keys, budget);
        std::vector<unsigned char> all(bytes.size());
        store->open("a/blob")->read_at(all.data(), all.size(), 0);
        CHECK(all == bytes);
      }  // each handle destroyed here, stopping its work
    }
    CHECK_CAIRN_ERROR(store->open("a/missing"), ErrorKind::not_found, "");
    try {
      store->open("a/missing");
    } catch (const cairn::Error& e) {
      CHECK(e.file() == store->describe("a/missing"));
    }
    CHECK_THROWS_AS(store->create("a/blob"), cairn::Error);  // blobs are written once
    // finish() sets the final size (a file written with padding is cut to its end).
    {
      auto w = store->create("a/short");
      w->write_at(bytes.data(), 100, 0);
      w->finish(60);
    }
    CHECK(store->open("a/short")->size() == 60);
    // A scattered read: consecutive ranges into separate buffers, skipped ranges between
    // (how a load reads a run of small leaves), bit-exact; past the end it is an error.
    {
      struct Part {
        std::uint64_t gap, start;
        std::vector<unsigned char> bytes;
      };
      std::vector<Part> parts;
      std::uint64_t at = 123;
      while (true) {
        const std::uint64_t gap = rng()() % 3 == 0 ? rng()() % 64 : 0, n = rng()() % 700;
        if (at + gap + n > 9000) break;
        parts.push_back({gap, at + gap, std::vector<unsigned char>(static_cast<std::size_t>(n))});
        at += gap + n;
      }
      std::vector<cairn::ReadPiece> pieces;
      for (auto& p : parts) {
        if (p.gap) pieces.push_back({nullptr, p.gap});
        pieces.push_back({p.bytes.data(), p.bytes.size()});
      }
      r->read_scattered(pieces.data(), pieces.size(), 123);
      for (const auto& p : parts)
        CHECK((p.bytes.empty() || std::memcmp(p.bytes.data(), bytes.data() + p.start, p.bytes.size()) == 0));
      std::vector<unsigned char> a(100), b(200);
      cairn::ReadPiece over[] = {{a.data(), 100}, {nullptr, 50}, {b.data(), 200}};
      CHECK_CAIRN_ERROR(r->read_scattered(over, 3, 9700), ErrorKind::corrupt, "ends at byte");
      cairn::ReadPiece fits[] = {{a.data(), 100}, {nullptr, 50}, {b.data(), 200}};
      r->read_scattered(fits, 3, 9000);
      CHECK(std::memcmp(a.data(), bytes.data() + 9000, 100) == 0);
      CHECK(std::memcmp(b.data(), bytes.data() + 9150, 200) == 0);
      // Two scattered reads at once (a load's runs of small leaves, from the page cache).
      std::vector<unsigned char> c(3000), d(3000), e(1000), f(1000);
      cairn::ReadPiece first[] = {{c.data(), 3000}, {nullptr, 10}, {e.data(), 1000}};
      cairn::ReadPiece second[] = {{d.data(), 3000}, {nullptr, 10}, {f.data(), 1000}};
      std::thread other([&] { r->read_scattered(second, 3, 5000); });
      r->read_scattered(first, 3, 0);
      other.join();
      CHECK(std::memcmp(c.data(), bytes.data(), 3000) == 0);
      CHECK(std::memcmp(e.data(), bytes.data() + 3010, 1000) == 0);
      CHECK(std::memcmp(d.data(), bytes.data() + 5000, 3000) == 0);
      CHECK(std::memcmp(f.data(), bytes.data() + 8010, 1000) == 0);
    }
  }
  SUBCASE("write_gathered: consecutive pieces from their own buffers, more of them than one pwritev takes, bit-exact") {
    auto store = make();
    // 3,000 pieces of 0 to 700 bytes (IOV_MAX is 1,024), from separate buffers, after a
    // range written by write_at and before another: the blob is their bytes in order.
    std::vector<std::vector<unsigned char>> bufs;
    std::vector<cairn::WritePiece> pieces;
    std::vector<unsigned char> expected = random_bits<unsigned char>(333);
    for (int i = 0; i < 3000; ++i) {
      bufs.push_back(random_bits<unsigned char>(static_cast<std::size_t>(rng()() % 701)));
      pieces.push_back({bufs.back().data(), bufs.back().size()});
    }
    const std::vector<unsigned char> head = expected, tail = random_bits<unsigned char>(1000);
    for (const auto& b : bufs) expected.insert(expected.end(), b.begin(), b.end());
    expected.insert(expected.end(), tail.begin(), tail.end());
    {
      auto w = store->create("g/blob");
      w->write_at(head.data(), head.size(), 0);
      w->write_gathered(pieces.data(), pieces.size(), head.size());
      w->write_at(tail.data(), tail.size(), expected.size() - tail.size());
      w->write_gathered(nullptr, 0, expected.size());  // none: nothing written
      w->finish(expected.size());
    }
    auto r = store->open("g/blob");
    REQUIRE(r->size() == expected.size());
    std::vector<unsigned char> back(expected.size());
    r->read_at(back.data(), back.size(), 0);
    CHECK(back == expected);
    // The same through an atomic blob's writer (a single safetensors file's).
    {
      auto w = store->create_atomically("g/atomic", false);
      w->write_at(head.data(), head.size(), 0);
      w->write_gathered(pieces.data(), pieces.size(), head.size());
      w->write_at(tail.data(), tail.size(), expected.size() - tail.size());
      w->finish(expected.size());
    }
    std::vector<unsigned char> atomic(expected.size());
    auto a = store->open("g/atomic");
    REQUIRE(a->size() == expected.size());
    a->read_at(atomic.data(), atomic.size(), 0);
    CHECK(atomic == expected);
  }
  SUBCASE("exists, is_blob, one-level listing and removal of a prefix") {
    auto store = make();
    for (const char* k : {"r/x/1", "r/x/2", "r/y", "r/z/deep/3", "other/4"}) cairn::detail::write_blob(*store, k, "v");
    CHECK(store->exists("r"));
    CHECK(store->exists("r/x"));
    CHECK(store->exists("r/y"));
    CHECK(!store->exists("r/q"));
    CHECK(store->is_blob("r/y"));
    CHECK(!store->is_blob("r/x"));
    auto listing = store->list("r");
    std::sort(listing.begin(), listing.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
    CHECK(listing == std::vector<cairn::StoreEntry>{{"x", true}, {"y", false}, {"z", true}});
    CHECK(store->list("r/nothing").empty());
    store->remove("r/x");
    CHECK(!store->exists("r/x/1"));
    CHECK(store->exists("r/y"));
    store->remove("r/z");
    CHECK(visible_names(*store, "r") == std::vector<std::string>{"y"});
    CHECK(store->exists("other/4"));
  }
  SUBCASE("share_blob: a second name for a blob's bytes, or nothing done and false") {
    auto store = make();
    const auto bytes = random_bits<unsigned char>(5000);
    cairn::detail::write_blob(*store, "src/data", std::string(bytes.begin(), bytes.end()));
    const bool shared = store->share_blob(*store, "src/data", "dst/d/data");
    CHECK(store->exists("dst/d/data") == shared);
    if (shared) {
      // The same bytes under the new name, kept when the first name goes.
      store->remove("src");
      auto r = store->open("dst/d/data");
      std::vector<unsigned char> back(bytes.size());
      r->read_at(back.data(), back.size(), 0);
      CHECK(back == bytes);
    }
    // Nothing to share: false, or a not_found error; never a blob from nothing.
    try {
      CHECK_FALSE(store->share_blob(*store, "no/such/blob", "dst/other"));
    } catch (const cairn::Error& e) {
      CHECK(e.kind() == ErrorKind::not_found);
    }
    CHECK_FALSE(store->exists("dst/other"));
  }
  SUBCASE("bytes of a blob never written read as zeros, as a file's holes, whatever the store wrote before") {
    auto store = make();
    // A blob of 0xFF first, so that a store reusing its buffers (S3Store's pool) has dirty
    // ones to hand out next. One blob small (a single PUT on S3), one large (multipart).
    for (const std::size_t size : {std::size_t{5000}, std::size_t{200000}}) {
      CAPTURE(size);
      const std::string key = "holes/" + std::to_string(size);
      {
        const std::vector<unsigned char> ones(size, 0xFF);
        auto w = store->create(key + "-ones");
        w->write_at(ones.data(), ones.size(), 0);
        w->finish(size);
      }
      const auto a = random_bits<unsigned char>(1000), b = random_bits<unsigned char>(100);
      const std::size_t b_at = size * 3 / 4;
      {
        auto w = store->create(key);
        w->write_at(b.data(), b.size(), b_at);  // out of order: the gap before it is a hole
        w->write_at(a.data(), a.size(), 1000);
        w->finish(size);  // the tail after the last write too
      }
      auto r = store->open(key);
      REQUIRE(r->size() == size);
      std::vector<unsigned char> back(size, 0x55);
      r->read_at(back.data(), size, 0);
      std::vector<unsigned char> want(size, 0);
      std::copy(a.begin(), a.end(), want.begin() + 1000);
      std::copy(b.begin(), b.end(), want.begin() + static_cast<std::ptrdiff_t>(b_at));
      CHECK(back == want);
    }
  }
  SUBCASE("read_whole: a small blob's bytes; over the limit corrupt; missing not_found") {
    auto store = make();
    const auto bytes = random_bits<unsigned char>(3000);
    const std::string text(bytes.begin(), bytes.end());
    cairn::detail::write_blob(*store, "w/meta", text);
    CHECK(store->read_whole("w/meta", 3000) == text);
    CHECK(store->read_whole("w/meta", 1 << 20) == text);
    CHECK_CAIRN_ERROR(store->read_whole("w/meta", 2999), ErrorKind::corrupt, "over the limit");
    CHECK_CAIRN_ERROR(store->read_whole("w/none", 100), ErrorKind::not_found, "");
    cairn::detail::write_blob(*store, "w/empty", "");
    CHECK(store->read_whole("w/empty", 0).empty());
  }
  SUBCASE("read_whole_each: each blob as read_whole reads it, errors kept per blob, in the order asked") {
    auto store = make();
    const auto a = random_bits<unsigned char>(3000), b = random_bits<unsigned char>(10);
    cairn::detail::write_blob(*store, "e/a", std::string(a.begin(), a.end()));
    cairn::detail::write_blob(*store, "e/b", std::string(b.begin(), b.end()));
    auto got = store->read_whole_each({{"e/b", 100}, {"e/none", 100}, {"e/a", 2999}, {"e/a", 3000}, {"e/empty", 0}});
    REQUIRE(got.size() == 5);
    CHECK(got[0].take() == std::string(b.begin(), b.end()));
    CHECK_CAIRN_ERROR(got[1].take(), ErrorKind::not_found, "");
    CHECK_CAIRN_ERROR(got[2].take(), ErrorKind::corrupt, "over the limit");
    CHECK(got[3].take() == std::string(a.begin(), a.end()));
    CHECK_CAIRN_ERROR(got[4].take(), ErrorKind::not_found, "");
    CHECK(store->read_whole_each({}).empty());
  }
  SUBCASE("read_whole_each of many blobs (a store may read them together): each as read_whole reads it") {
    // Enough blobs for PosixStore's batched reads (io_uring, 64 files a batch: more than one).
    auto store = make();
    std::mt19937 rng(11);
    std::vector<std::pair<std::string, std::uint64_t>> reads;
    std::vector<std::string> want;
    std::vector<std::optional<ErrorKind>> error;  // what read_whole throws, where it throws
    for (int i = 0; i < 150; ++i) {
      const std::string key = "m/" + std::to_string(i);
      const std::size_t size = i % 10 == 0 ? 0 : rng() % (i % 7 == 0 ? 70000 : 600);
      const auto bytes = random_bits<unsigned char>(size);
      const std::string text(bytes.begin(), bytes.end());
      if (i % 13 != 5) cairn::detail::write_blob(*store, key, text);  // every 13th missing
      const bool over = i % 11 == 3 && size > 0;                          // every 11th over its limit
      reads.emplace_back(key, over ? size - 1 : size + rng() % 3);
      want.push_back(i % 13 == 5 || over ? "" : text);
      error.push_back(i % 13 == 5 ? std::optional(ErrorKind::not_found) : over ? std::optional(ErrorKind::corrupt) : std::nullopt);
    }
    reads.emplace_back("m/7", reads[7].second);  // a blob asked for twice
    want.push_back(want[7]);
    error.push_back(error[7]);
    auto got = store->read_whole_each(reads);
    REQUIRE(got.size() == reads.size());
    for (std::size_t i = 0; i < reads.size(); ++i) {
      CAPTURE(i);
      if (!error[i]) {
        CHECK(got[i].take() == want[i]);
      } else {
        CHECK_CAIRN_ERROR(got[i].take(), *error[i], *error[i] == ErrorKind::corrupt ? "over the limit" : "");
      }
    }
  }
  SUBCASE("write_whole_each: each new blob written whole; one already there is refused") {
    auto store = make();
    const auto a = random_bits<unsigned char>(3000);
    const std::string sa(a.begin(), a.end()), sb = "{}";
    store->write_whole_each({{"w/a", sa}, {"w/b", sb}, {"w/empty", ""}});
    CHECK(store->read_whole("w/a", 1 << 20) == sa);
    CHECK(store->read_whole("w/b", 1 << 20) == sb);
    CHECK(store->read_whole("w/empty", 1 << 20).empty());
    CHECK_THROWS_AS(store->write_whole_each({{"w/a", sb}}), cairn::Error);
    CHECK(store->read_whole("w/a", 1 << 20) == sa);  // not replaced
    store->write_whole_each({});
  }
  SUBCASE("copy_blob: a copy the store makes itself, or nothing done and false") {
    auto store = make();
    const auto bytes = random_bits<unsigned char>(70000);
    cairn::detail::write_blob(*store, "src/data", std::string(bytes.begin(), bytes.end()));
    auto read_all = [&](const std::string& key) {
      auto r = store->open(key);
      std::vector<unsigned char> back(static_cast<std::size_t>(r->size()));
      r->read_at(back.data(), back.size(), 0);
      return back;
    };
    const bool copied = store->copy_blob(*store, "src/data", "dst/d/data");
    CHECK(store->exists("dst/d/data") == copied);
    if (copied) {
      CHECK(read_all("dst/d/data") == bytes);
      CHECK(read_all("src/data") == bytes);  // the source as it was
      store->remove("src");
      CHECK(read_all("dst/d/data") == bytes);  // a copy, not a second name of the same bytes
      // Never over a blob that is there: an error or false, and its bytes unchanged.
      cairn::detail::write_blob(*store, "src/data", "other");
      bool over = false;
      try {
        over = store->copy_blob(*store, "src/data", "dst/d/data");
      } catch (const cairn::Error& e) {
        CHECK(e.kind() == ErrorKind::already_exists);
      }
      CHECK_FALSE(over);
      CHECK(read_all("dst/d/data") == bytes);
    }
    // Nothing to copy: false, or a not_found error; never a blob from nothing.
    bool from_nothing = false;
    try {
      from_nothing = store->copy_blob(*store, "no/such/blob", "dst/other");
    } catch (const cairn::Error& e) {
      CHECK(e.kind() == ErrorKind::not_found);
    }
    CHECK_FALSE(from_nothing);
    CHECK_FALSE(store->exists("dst/other"));
  }
  SUBCASE("stage_foreign: published, every blob at key/<name> as written; abandoned or refused, nothing") {
    auto store = make();
    {
      auto staging = store->stage_foreign("f/1");
      cairn::detail::write_blob(*store, cairn::detail::join_key(staging->key(), "a/x"), "xx");
      cairn::detail::write_blob(*store, cairn::detail::join_key(staging->key(), "commit_success.txt"), "done");
      staging->publish({{"a/x", 2}, {"commit_success.txt", 4}});
    }
    CHECK(cairn::detail::read_blob(*store, "f/1/a/x", 100) == "xx");
    CHECK(cairn::detail::read_blob(*store, "f/1/commit_success.txt", 100) == "done");
    CHECK(visible_names(*store, "f/1") == std::vector<std::string>{"a", "commit_success.txt"});  // nothing added
    CHECK_THROWS_AS(store->stage_foreign("f/1"), cairn::Error);  // never over what is there
    {
      auto staging = store->stage_foreign("f/2");
      cairn::detail::write_blob(*store, cairn::detail::join_key(staging->key(), "c"), "c");
    }
    CHECK_FALSE(store->exists("f/2"));
    {
      auto staging = store->stage_foreign("f/3");
      cairn::detail::write_blob(*store, cairn::detail::join_key(staging->key(), "c"), "c");
      CHECK_THROWS_AS(staging->publish({{"c", 1}, {"missing", 1}}), cairn::Error);
    }
    CHECK_FALSE(store->exists("f/3"));
  }
  SUBCASE("staging: nothing at the final key until publish, then all of it at once") {
    auto store = make();
    {
      auto staging = store->stage("c/1", false);
      cairn::detail::write_blob(*store, cairn::detail::join_key(staging->key(), "f"), "hello");
      cairn::detail::write_blob(*store, cairn::detail::join_key(staging->key(), "_CHECKPOINT"), "{}");
      // Not a checkpoint yet, for any reader. (A store that renames shows nothing at all at
      // the final key; one without rename may show a prefix without a commit marker.)
      CHECK(!cairn::detail::is_committed_checkpoint(*store, "c/1"));
      CHECK_THROWS_AS(cairn::metadata({*store, "c/1"}), cairn::Error);
      // A publish that misses a file publishes nothing.
      CHECK_THROWS_AS(staging->publish({{"f", 5}, {"_CHECKPOINT", 2}, {"absent", 1}}), cairn::Error);
      CHECK(!cairn::detail::is_committed_checkpoint(*store, "c/1"));
      staging->publish({{"f", 5}, {"_CHECKPOINT", 2}});
    }
    CHECK(read_checkpoint_blob(*store, "c/1", "f") == "hello");
    CHECK(visible_names(*store, "c") == std::vector<std::string>{"1"});
    CHECK(store->list("c").size() == 1);  // no staging left behind
    // The overwrite rule.
    CHECK_CAIRN_ERROR(stage_checked(*store, "c/1", false), ErrorKind::already_exists, "already exists");
    cairn::detail::write_blob(*store, "c/plain/file", "x");
    CHECK_CAIRN_ERROR(stage_checked(*store, "c/plain", true), ErrorKind::already_exists, "");
    CHECK_CAIRN_ERROR(stage_checked(*store, "c/plain/file", true), ErrorKind::already_exists, "");
    {
      auto staging = store->stage("c/1", true);
      cairn::detail::write_blob(*store, cairn::detail::join_key(staging->key(), "g"), "new");
      cairn::detail::write_blob(*store, cairn::detail::join_key(staging->key(), "_CHECKPOINT"), "{}");
      staging->publish({{"g", 3}, {"_CHECKPOINT", 2}});
    }
    // Replaced whole: the old blob is gone, wherever the store kept it.
    CHECK(!store->exists(cairn::detail::join_key(store->readable_checkpoint("c/1"), "f")));
    CHECK(read_checkpoint_blob(*store, "c/1", "g") == "new");
    CHECK(visible_names(*store, "c") == std::vector<std::string>{"1", "plain"});
    // Abandoned: removed, the final key untouched.
    {
      auto staging = store->stage("c/2", false);
      cairn::detail::write_blob(*store, cairn::detail::join_key(staging->key(), "f"), "x");
    }
    CHECK(!store->exists("c/2"));
    CHECK(store->list("c").size() == 2);  // "1" and "plain"
    // Two saves of one new key, staged before either publishes: the first publish wins, the
    // second is already_exists (never a replacement without overwrite), the winner whole.
    {
      auto first = store->stage("c/race", false);
      auto second = store->stage("c/race", false);
      cairn::detail::write_blob(*store, cairn::detail::join_key(first->key(), "f"), "first");
      cairn::detail::write_blob(*store, cairn::detail::join_key(first->key(), "_CHECKPOINT"), "{}");
      cairn::detail::write_blob(*store, cairn::detail::join_key(second->key(), "f"), "second");
      cairn::detail::write_blob(*store, cairn::detail::join_key(second->key(), "_CHECKPOINT"), "{}");
      first->publish({{"f", 5}, {"_CHECKPOINT", 2}});
      CHECK_CAIRN_ERROR(second->publish({{"f", 6}, {"_CHECKPOINT", 2}}), ErrorKind::already_exists, "race");
    }
    CHECK(read_checkpoint_blob(*store, "c/race", "f") == "first");
    CHECK(store->list("c").size() == 3);  // "1", "plain" and "race": no staging left behind
  }
  SUBCASE("a safetensors set published through staging is replaced whole with overwrite, refused without") {
    auto store = make();
    const std::string shard = "model-00001-of-00001.safetensors", index = cairn::detail::set_index_name;
    {
      auto staging = store->stage("sets/m", false);
      cairn::detail::write_blob(*store, cairn::detail::join_key(staging->key(), shard), "old!");
      cairn::detail::write_blob(*store, cairn::detail::join_key(staging->key(), index), "{}");
      staging->publish({{shard, 4}, {index, 2}});
    }
    CHECK(read_checkpoint_blob(*store, "sets/m", shard) == "old!");
    CHECK_CAIRN_ERROR(stage_checked(*store, "sets/m", false), ErrorKind::already_exists, "already exists");
    {
      auto staging = store->stage("sets/m", true);
      const std::string other = "model-00001-of-00002.safetensors";
      cairn::detail::write_blob(*store, cairn::detail::join_key(staging->key(), other), "new");
      cairn::detail::write_blob(*store, cairn::detail::join_key(staging->key(), index), "{ }");
      staging->publish({{other, 3}, {index, 3}});
    }
    CHECK(!store->exists(cairn::detail::join_key(store->readable_checkpoint("sets/m"), shard)));
    CHECK(read_checkpoint_blob(*store, "sets/m", index) == "{ }");
    CHECK(visible_names(*store, "sets") == std::vector<std::string>{"m"});
  }
  SUBCASE("atomic small blobs and deleting checkpoints") {
    auto store = make();
    store->write_atomically("root/latest", "1\n");
    store->write_atomically("root/latest", "22\n");
    CHECK(cairn::detail::read_blob(*store, "root/latest", 100) == "22\n");
    for (const char* k : {"root/1/_CHECKPOINT", "root/1/data", "root/2/_CHECKPOINT", "root/3/_CHECKPOINT"})
      cairn::detail::write_blob(*store, k, "x");
    store->remove_checkpoints({"root/1", "root/3"});
    CHECK(visible_names(*store, "root") == std::vector<std::string>{"2", "latest"});
  }
  SUBCASE("atomic blobs: nothing at the key until finish, abandoned leaves nothing, overwrite only when asked") {
    auto store = make();
    {
      auto w = store->create_atomically("out/model.bin", false);
      w->write_at("world", 5, 6);
      w->write_at("hello ", 6, 0);
      CHECK(!store->exists("out/model.bin"));
      w->finish(11);
    }
    CHECK(cairn::detail::read_blob(*store, "out/model.bin", 100) == "hello world");
    CHECK(visible_names(*store, "out") == std::vector<std::string>{"model.bin"});
    CHECK_CAIRN_ERROR(store->create_atomically("out/model.bin", false), cairn::ErrorKind::already_exists, "model.bin");
    {
      auto w = store->create_atomically("out/model.bin", true);
      w->write_at("half", 4, 0);
    }  // abandoned: the old blob stays whole, no staging is left visible
    CHECK(cairn::detail::read_blob(*store, "out/model.bin", 100) == "hello world");
    CHECK(visible_names(*store, "out") == std::vector<std::string>{"model.bin"});
    {
      auto w = store->create_atomically("out/model.bin", true);
      w->write_at("new", 3, 0);
      // Another writer takes the key meanwhile: a non-overwriting finish must not replace it.
      auto other = store->create_atomically("out/other.bin", false);
      cairn::detail::write_blob(*store, "out/other.bin", "taken");
      other->write_at("mine", 4, 0);
      CHECK_CAIRN_ERROR(other->finish(4), cairn::ErrorKind::already_exists, "other.bin");
      w->finish(3);
    }
    CHECK(cairn::detail::read_blob(*store, "out/model.bin", 100) == "new");
    CHECK(cairn::detail::read_blob(*store, "out/other.bin", 100) == "taken");
    cairn::detail::write_blob(*store, "dir/inner/x", "x");
    CHECK_CAIRN_ERROR(store->create_atomically("dir/inner", true), cairn::ErrorKind::already_exists, "inner");
  }
  SUBCASE("save, load and metadata through the store, bit-exact") {
    auto store = make();
    for (int i = 0; i < 3; ++i) {
      const ConformanceState s = random_conformance_state();
      const std::string key = "runs/" + std::to_string(i);
      cairn::SaveOptions options;
      options.user_metadata = cairn::Json::object({{"i", i}});
      cairn::save({*store, key}, s, options);
      ConformanceState back;
      cairn::load({*store, key}, back);
      check_same(s, back);
      CHECK(cairn::metadata({*store, key}).user_metadata.at("i").as_int() == i);
      CHECK(cairn::load<ConformanceState>({*store, key}).name == s.name);
      // Replaced atomically with overwrite; refused without.
      CHECK_CAIRN_ERROR(cairn::save({*store, key}, s), ErrorKind::already_exists, "");
      options.overwrite = true;
      const ConformanceState t = random_conformance_state();
      cairn::save({*store, key}, t, options);
      check_same(t, cairn::load<ConformanceState>({*store, key}));
    }
    CHECK(visible_names(*store, "runs") == std::vector<std::string>{"0", "1", "2"});
    CHECK_CAIRN_ERROR(cairn::load<ConformanceState>({*store, "runs/9"}), ErrorKind::not_found, "nothing is there");
    CHECK_CAIRN_ERROR(cairn::load<ConformanceState>({*store, "runs"}), ErrorKind::not_found, "directory of checkpoints");
    // A flipped byte in a data file is found, and the error names the blob as the store does.
    // The byte is one of leaf w's (never empty): the middle of the file may be the padding
    // between two leaves, which no checksum covers (that made this check fail now and then).
    const cairn::CheckpointMetadata meta = cairn::metadata({*store, "runs/0"});
    const cairn::LeafRecord* w = nullptr;
    for (const auto& l : meta.leaves())
      if (l.key() == "w") w = &l;
    REQUIRE(w != nullptr);
    REQUIRE(w->chunks.size() == 1);
    const cairn::ChunkRecord& chunk = w->chunks.front();
    REQUIRE(chunk.nbytes > 0);
    if (flip) {
      flip(*store, "runs/0", chunk.file, chunk.offset + chunk.nbytes / 2);
    } else {
      const std::string data_key = cairn::detail::join_key(store->readable_checkpoint("runs/0"), chunk.file);
      std::string bytes = cairn::detail::read_blob(*store, data_key, 1 << 30);
      REQUIRE(chunk.offset + chunk.nbytes <= bytes.size());
      bytes[static_cast<std::size_t>(chunk.offset + chunk.nbytes / 2)] ^= 0x10;
      store->remove(data_key);
      cairn::detail::write_blob(*store, data_key, bytes);
    }
    CHECK_CAIRN_ERROR(cairn::load<ConformanceState>({*store, "runs/0"}), ErrorKind::corrupt, "checksum mismatch");
  }
  SUBCASE("a Checkpointer over the store: steps, retention, latest, resume") {
    auto store = make();
    cairn::CheckpointerOptions options;
    options.retention = cairn::RetentionPolicy::keep_latest(2);
    std::vector<ConformanceState> states;
    {
      cairn::Checkpointer ckpt({store, "train"}, options);
      for (int step = 0; step < 4; ++step) {
        states.push_back(random_conformance_state());
        if (step % 2) ckpt.save_async(step * 10, states.back());
        else ckpt.save(step * 10, states.back());
      }
      ckpt.wait();
      CHECK(ckpt.steps() == std::vector<std::int64_t>{20, 30});
    }
    cairn::Checkpointer again({store, "train"}, options);
    CHECK(again.latest() == 30);
    ConformanceState back;
    again.load(back);
    check_same(states[3], back);
    again.load(20, back);
    check_same(states[2], back);
    CHECK(cairn::detail::read_blob(*store, "train/latest", 100) == "30\n");
    CHECK(visible_names(*store, "train") == std::vector<std::string>{"20", "30", "latest"});
    // A restarted Checkpointer reads the earlier run's steps (their user metadata too) and
    // its retention prunes them: none is taken for damaged.
    states.push_back(random_conformance_state());
    again.save(40, states.back());
    CHECK(again.steps() == std::vector<std::int64_t>{30, 40});
    CHECK(visible_names(*store, "train") == std::vector<std::string>{"30", "40", "latest"});
  }
}

}  // namespace test
