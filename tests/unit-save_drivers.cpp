// SPDX-License-Identifier: Apache-2.0
// Every save-side refusal through every save driver: save, save_async, Items (both), the
// Checkpointer's save and save_async, and the safetensors export where the refusal applies. A
// driver that skips a check fails here. Each refused save leaves nothing committed at its path,
// and an earlier checkpoint there still loads bit-exactly.
#include <cairn/cairn.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "test_util.hpp"

namespace {

enum class Driver { save, save_async, items, items_async, checkpointer, checkpointer_async, safetensors };
const Driver every_driver[] = {Driver::save,         Driver::save_async,         Driver::items,      Driver::items_async,
                               Driver::checkpointer, Driver::checkpointer_async, Driver::safetensors};

const char* name_of(Driver d) {
  switch (d) {
    case Driver::save: return "save";
    case Driver::save_async: return "save_async";
    case Driver::items: return "save(Items)";
    case Driver::items_async: return "save_async(Items)";
    case Driver::checkpointer: return "Checkpointer::save";
    case Driver::checkpointer_async: return "Checkpointer::save_async";
    case Driver::safetensors: return "save_safetensors";
  }
  return "?";
}

// Where each driver saves under `dir`: a checkpoint, a Checkpointer root's step 1, a file.
std::string target_of(Driver d, const std::string& dir) {
  if (d == Driver::checkpointer || d == Driver::checkpointer_async) return dir + "/root";
  if (d == Driver::safetensors) return dir + "/model.safetensors";
  return dir + "/ckpt";
}

// Saves `tree` at `path` through `d` with `options` (each driver's form of them), to the end:
// an async save is waited for, so that its error surfaces here.
template <class T>
void save_with(Driver d, const std::string& path, const T& tree, const cairn::SaveOptions& options) {
  switch (d) {
    case Driver::save: cairn::save(path, tree, options); return;
    case Driver::save_async: cairn::save_async(path, tree, options).wait(); return;
    case Driver::items: cairn::save(path, cairn::Items().tree("state", tree), options); return;
    case Driver::items_async: cairn::save_async(path, cairn::Items().tree("state", tree), options).wait(); return;
    case Driver::checkpointer:
    case Driver::checkpointer_async: {
      cairn::Checkpointer ck(path);
      cairn::StepSaveOptions a;
      a.force = true;
      a.save = options;
      if (d == Driver::checkpointer) {
        ck.save(1, tree, a);
      } else {
        ck.save_async(1, tree, a);
        ck.wait();
      }
      return;
    }
    case Driver::safetensors: {
      cairn::SafetensorsSaveOptions o;
      o.overwrite = options.overwrite;
      o.cast = options.cast;
      o.on_overflow = options.on_overflow;
      cairn::save_safetensors(path, tree, o);
      return;
    }
  }
}

// Nothing was committed under `dir` by a refused save of `d` (a file or checkpoint at its path,
// a step of a root), and nothing of it was left behind.
void check_nothing_committed(Driver d, const std::string& dir) {
  const std::string path = target_of(d, dir);
  if (d == Driver::checkpointer || d == Driver::checkpointer_async) {
    if (!std::filesystem::exists(path)) return;
    cairn::Checkpointer ck(path);
    CHECK_MESSAGE(ck.steps().empty(), name_of(d));
    return;
  }
  CHECK_MESSAGE(!std::filesystem::exists(path), name_of(d) << ": " << path);
  for (const auto& e : std::filesystem::directory_iterator(dir))
    CHECK_MESSAGE(e.path().filename().string().find("model.safetensors") != 0, name_of(d) << ": left " << e.path());
}

// A refusal of `tree` through every driver in `drivers`: the error's kind and a part of its
// message, and nothing committed. For the drivers that write checkpoints, the same save with
// overwrite onto an earlier checkpoint is refused too, and that checkpoint still loads.
template <class T>
void check_refused(const std::vector<Driver>& drivers, const T& tree, const cairn::SaveOptions& options,
                   cairn::ErrorKind kind, const std::string& needle) {
  for (Driver d : drivers) {
    CAPTURE(name_of(d));
    test::TempDir dir;
    CHECK_CAIRN_ERROR(save_with(d, target_of(d, dir.path), tree, options), kind, needle);
    check_nothing_committed(d, dir.path);

    if (d == Driver::safetensors) continue;
    // Over an earlier checkpoint with overwrite: refused the same way, and the earlier one stays.
    const std::vector<float> earlier = test::random_bits<float>(37);
    cairn::SaveOptions first;
    save_with(d, target_of(d, dir.path), earlier, first);
    cairn::SaveOptions over = options;
    over.overwrite = true;
    CHECK_CAIRN_ERROR(save_with(d, target_of(d, dir.path), tree, over), kind, needle);
    std::vector<float> back;
    if (d == Driver::checkpointer || d == Driver::checkpointer_async) {
      cairn::Checkpointer ck(target_of(d, dir.path));
      CHECK(ck.steps() == std::vector<std::int64_t>{1});
      ck.load(back);
    } else if (d == Driver::items || d == Driver::items_async) {
      cairn::load(target_of(d, dir.path), cairn::Items().tree("state", back));
    } else {
      cairn::load(target_of(d, dir.path), back);
    }
    CHECK(std::memcmp(back.data(), earlier.data(), earlier.size() * sizeof(float)) == 0);
  }
}

std::vector<Driver> all_but(std::initializer_list<Driver> out) {
  std::vector<Driver> v;
  for (Driver d : every_driver)
    if (std::find(out.begin(), out.end(), d) == out.end()) v.push_back(d);
  return v;
}

// A leaf whose view says it was taken (and may fail), for a store that looks at when.
struct Watched {
  std::vector<float> values;
  bool fail = false;
};
struct ViewsBegan {
  std::mutex mutex;
  std::condition_variable cv;
  bool began = false;
  void reset() {
    std::lock_guard<std::mutex> lock(mutex);
    began = false;
  }
  void signal() {
    {
      std::lock_guard<std::mutex> lock(mutex);
      began = true;
    }
    cv.notify_all();
  }
  // Whether the views began within `wait`.
  bool within(std::chrono::milliseconds wait) {
    std::unique_lock<std::mutex> lock(mutex);
    return cv.wait_for(lock, wait, [&] { return began; });
  }
};
ViewsBegan views_began;

}  // namespace

template <>
struct cairn::leaf_traits<Watched> {
  static LeafView view(const Watched& w) {
    views_began.signal();
    if (w.fail) throw cairn::Error(cairn::ErrorKind::invalid_argument, "this leaf cannot be viewed");
    return {DType::float32, {static_cast<std::int64_t>(w.values.size())}, Order::C, w.values.data(),
            w.values.size() * sizeof(float)};
  }
  static LeafBuffer prepare(Watched& w, const StoredLeafInfo& s) {
    w.values.resize(static_cast<std::size_t>(element_count(s.shape)));
    return {DType::float32, Order::C, w.values.data(), w.values.size() * sizeof(float)};
  }
};

namespace {

// A MemoryStore that says its small requests wait on a network (parallel_reads) or not.
// Where they do, it stages as S3Store does: stage() returns at once with the staging's key,
// its looks at the key (MemoryStore's staging, and check_also's) are answered when the save
// asks (checked, publish), and a write into a refused staging throws the refusal, as
// S3Store's writes do. It notes whether the save had taken its views and created its data
// before it asked. Where they do not, stage() is MemoryStore's, and it notes whether the
// views began within 50 ms of it (they come after it).
class StagingWatcher final : public test::ForwardingStore {
 public:
  explicit StagingWatcher(int parallel) : ForwardingStore("watched"), parallel_(parallel) {}
  int parallel_reads() const override { return parallel_; }
  std::unique_ptr<cairn::StoreWriter> create(const std::string& key) override {
    if (refusal_ && key.rfind(refused_key_ + "/", 0) == 0) std::rethrow_exception(refusal_);
    ++creates_;
    return inner.create(key);
  }
  std::unique_ptr<cairn::CheckpointStaging> stage(const std::string& key, bool overwrite) override {
    views_while_staging = writes_before_looks = false;
    if (parallel_ <= 1) {
      views_while_staging = views_began.within(std::chrono::milliseconds(50));
      return inner.stage(key, overwrite);
    }
    creates_ = 0;
    auto staging = std::make_unique<Deferred>(*this);
    try {
      staging->inner = inner.stage(key, overwrite);
    } catch (...) {
      refusal_ = std::current_exception();
      refused_key_ = key + "/.refused";
    }
    return staging;
  }
  bool views_while_staging = false;  // the views began before the looks were asked for (or within 50 ms of stage)
  bool writes_before_looks = false;  // the save created its data before it asked

 private:
  struct Deferred final : cairn::CheckpointStaging {
    explicit Deferred(StagingWatcher& w) : watcher(w) {}
    ~Deferred() override { watcher.refusal_ = nullptr; }
    const std::string& key() const override { return inner ? inner->key() : watcher.refused_key_; }
    void check_also(std::function<void()> look) override { also.push_back(std::move(look)); }
    void checked() override {
      if (!asked) {
        asked = true;
        watcher.views_while_staging = views_began.within(std::chrono::milliseconds(0));
        watcher.writes_before_looks = watcher.creates_ > 0;
      }
      for (auto& look : also) look();  // the caller's looks first
      if (watcher.refusal_) std::rethrow_exception(watcher.refusal_);
    }
    void publish(const std::map<std::string, std::uint64_t>& expected) override {
      checked();
      inner->publish(expected);
    }
    StagingWatcher& watcher;
    std::unique_ptr<cairn::CheckpointStaging> inner;
    std::vector<std::function<void()>> also;
    bool asked = false;
  };
  int parallel_;
  std::atomic<int> creates_{0};
  std::exception_ptr refusal_;
  std::string refused_key_;
};

struct Holder {
  std::vector<float> a{1, 2, 3};
  cairn::ShardedArray<float> w;  // no shards: cannot be saved
};
CAIRN_TREE(Holder, a, w)

}  // namespace

TEST_CASE("a tree whose key paths repeat is refused by every driver") {
  // An empty map key at the top prints as "", the root's own key path. Items nest the tree one
  // level down (under its item), where the same map is fine: those drivers are left out.
  std::map<std::string, std::vector<float>> top{{"", {1, 2}}, {"b", {3}}};
  check_refused(all_but({Driver::items, Driver::items_async, Driver::safetensors}), top, {},
                cairn::ErrorKind::invalid_argument, "empty string");
  check_refused({Driver::safetensors}, top, {}, cairn::ErrorKind::invalid_argument, "empty name");
}

TEST_CASE("a leaf that cannot be viewed is refused by every driver, after nothing was written") {
  check_refused(std::vector<Driver>(std::begin(every_driver), std::end(every_driver)), Holder{}, {},
                cairn::ErrorKind::invalid_argument, "has no shards");
}

TEST_CASE("a cast on save that overflows is refused by every driver") {
  std::vector<std::int64_t> ids = {1, 2, 1000};
  cairn::SaveOptions o;
  o.cast = {{"*", cairn::DType::int8, false}};
  check_refused(std::vector<Driver>(std::begin(every_driver), std::end(every_driver)), ids, o,
                cairn::ErrorKind::value_out_of_range, "int8");
}

TEST_CASE("user metadata that is not an object is refused by every driver that keeps it") {
  cairn::SaveOptions o;
  o.user_metadata = cairn::Json(3);
  check_refused(all_but({Driver::safetensors}), std::vector<float>{1, 2}, o, cairn::ErrorKind::invalid_argument,
                "JSON object");
  // A NaN is no refusal anywhere: it is stored as null.
  for (Driver d : all_but({Driver::safetensors})) {
    CAPTURE(name_of(d));
    test::TempDir dir;
    cairn::SaveOptions nan;
    nan.user_metadata = cairn::Json::object({{"loss", std::nan("")}});
    save_with(d, target_of(d, dir.path), std::vector<float>{1, 2}, nan);
  }
}

TEST_CASE("a save inside a checkpoint is refused by every driver") {
  test::TempDir outer;
  cairn::save(outer / "ckpt", std::vector<float>{1, 2});
  for (Driver d : every_driver) {
    CAPTURE(name_of(d));
    const std::string inside = target_of(d, outer / "ckpt");
    CHECK_CAIRN_ERROR(save_with(d, inside, std::vector<float>{3}, {}), cairn::ErrorKind::invalid_argument,
                      d == Driver::checkpointer || d == Driver::checkpointer_async ? "" : "inside");
    CHECK(!std::filesystem::exists(inside));
  }
  std::vector<float> back;
  cairn::load(outer / "ckpt", back);
  CHECK(back == std::vector<float>{1, 2});
}

// A mesh of two processes, each with one host device, seen from process `me`.
static cairn::NamedSharding two_process_sharding(int me, cairn::PartitionSpec spec) {
  return cairn::NamedSharding(cairn::Mesh::host_per_process({{"x", 2}}, 1, me), std::move(spec));
}

TEST_CASE("an array whose mesh spans processes, saved by one process alone, is refused by every driver") {
  // Process 0 of 2 holds rows 0..3 of 8: a checkpoint or a file of it would hold holes.
  std::vector<float> w = test::random_bits<float>(8 * 3);
  const auto half = cairn::ShardedArray<float>::from_host(w, {8, 3}, two_process_sharding(0, cairn::PartitionSpec{"x"}));
  check_refused(std::vector<Driver>(std::begin(every_driver), std::end(every_driver)), half, {},
                cairn::ErrorKind::invalid_argument, "holds 12 of the array's 24 elements");
  // A replicated array seen from process 1: its copy is a replica whose primary holder is
  // process 0, which writes it in a checkpoint; saved alone, nobody would.
  const auto replica =
      cairn::ShardedArray<float>::from_host(w, {8, 3}, two_process_sharding(1, cairn::PartitionSpec{}));
  check_refused(all_but({Driver::safetensors}), replica, {}, cairn::ErrorKind::invalid_argument,
                "holds 0 of the array's 24 elements");
  // The safetensors export has the values at hand, in the replica: it writes them, exactly.
  test::TempDir dir;
  cairn::save_safetensors(dir / "r.safetensors", replica);
  cairn::Array<float> stored;
  cairn::load_safetensors(dir / "r.safetensors", stored);
  CHECK(stored.shape() == cairn::Shape{8, 3});
  const std::vector<float> back(stored.data(), stored.data() + stored.size());
  REQUIRE(back.size() == w.size());
  CHECK(std::memcmp(back.data(), w.data(), w.size() * sizeof(float)) == 0);
}

TEST_CASE("a coordinator other than the Checkpointer's is refused before anything is staged") {
  test::TempDir dir;
  cairn::Checkpointer ck(dir / "root");
  cairn::LocalCoordinator other;
  cairn::StepSaveOptions args;
  args.save.coordinator = &other;
  CHECK_CAIRN_ERROR(ck.save(2, std::vector<float>{1}, args), cairn::ErrorKind::invalid_argument, "coordinator");
  CHECK(ck.steps().empty());
  CHECK(!std::filesystem::exists(dir / "root"));
}

TEST_CASE("save_async returns a handle whose wait gives the report; the destructor waits") {
  test::TempDir dir;
  std::vector<double> v = test::random_bits<double>(1000);
  std::vector<double> original = v;
  cairn::AsyncSave s = cairn::save_async(dir / "a", v);
  CHECK(s.pending());
  std::fill(v.begin(), v.end(), 0.0);  // the snapshot was taken: the save has the old values
  const cairn::SaveReport r = s.wait();
  CHECK_FALSE(s.pending());
  CHECK(r.leaves == 1);
  CHECK(r.bytes_written == 8000);
  std::vector<double> back;
  cairn::load(dir / "a", back);
  CHECK(std::memcmp(back.data(), original.data(), 8000) == 0);
  CHECK_CAIRN_ERROR(s.wait(), cairn::ErrorKind::invalid_argument, "holds no save");
  { auto dropped = cairn::save_async(dir / "b", original); }  // waited for by the destructor
  cairn::load(dir / "b", back);
  CHECK(back.size() == 1000);
  // A budget smaller than a leaf: the leaf is written from the caller's memory before return.
  cairn::SaveOptions small;
  small.async_memory_budget = 100;
  cairn::save_async(dir / "c", original, small).wait();
  cairn::load(dir / "c", back);
  CHECK(std::memcmp(back.data(), original.data(), 8000) == 0);
  // Errors come from wait(): an existing checkpoint without overwrite.
  auto again = cairn::save_async(dir / "a", v);
  CHECK_CAIRN_ERROR(again.wait(), cairn::ErrorKind::already_exists, "");
}

TEST_CASE("the Checkpointer's save returns the report, or nothing when the policy says no") {
  test::TempDir dir;
  cairn::CheckpointerOptions o;
  o.save_policy = cairn::SavePolicy::every_n_steps(2);
  cairn::Checkpointer ck(dir / "root", o);
  CHECK_FALSE(ck.save(1, std::vector<float>{1, 2}).has_value());
  const auto r = ck.save(2, std::vector<float>{1, 2});
  REQUIRE(r.has_value());
  CHECK(r->leaves == 1);
  CHECK(r->bytes_written == 8);
  CHECK(r->path.find("root/2") != std::string::npos);
}

// Also under ThreadSanitizer in CI. One process saving to a store whose looks at the key wait
// on a network (a bucket) takes the tree's views and writes its data while the store looks
// (SaveJob::run, CheckpointStaging::checked); the looks' refusal still comes first, and a
// view's failure still commits nothing.
TEST_CASE("a save to a bucket takes its views and writes while the store looks at the key; a refusal comes first, and nothing is committed") {
  using State = std::pair<std::vector<double>, Watched>;
  auto make = [](bool fail) {
    State s{test::random_bits<double>(1 + test::rng()() % 5000), {test::random_bits<float>(1 + test::rng()() % 5000), fail}};
    return s;
  };
  StagingWatcher store(8);
  const State first = make(false);
  views_began.reset();
  cairn::save({store, "c"}, first);
  CHECK(store.views_while_staging);
  CHECK(store.writes_before_looks);
  auto check_first = [&] {
    const State back = cairn::load<State>({store, "c"});
    CHECK(test::same_bits(back.first, first.first));
    CHECK(test::same_bits(back.second.values, first.second.values));
  };
  check_first();
  const auto keys_after_first = store.inner.list("");
  // A view that fails while staging succeeds: its error, and nothing of the save is left.
  views_began.reset();
  CHECK_CAIRN_ERROR(cairn::save({store, "d"}, make(true)), cairn::ErrorKind::invalid_argument, "cannot be viewed");
  CHECK(store.views_while_staging);
  CHECK_FALSE(store.exists("d"));
  CHECK(store.inner.list("").size() == keys_after_first.size());
  // Staging refuses (a checkpoint is there) and a view fails too: staging's refusal.
  views_began.reset();
  CHECK_CAIRN_ERROR(cairn::save({store, "c"}, make(true)), cairn::ErrorKind::already_exists, "");
  check_first();
  // Refused, with views that succeed: the refusal, and nothing written.
  views_began.reset();
  CHECK_CAIRN_ERROR(cairn::save({store, "c"}, make(false)), cairn::ErrorKind::already_exists, "");
  check_first();
  CHECK(store.inner.list("").size() == keys_after_first.size());
  // Inside a checkpoint: the save's own look (check_also), asked with the store's, refuses,
  // also where a view fails; nothing is written.
  for (bool fail : {false, true}) {
    views_began.reset();
    CHECK_CAIRN_ERROR(cairn::save({store, "c/inner"}, make(fail)), cairn::ErrorKind::invalid_argument, "inside the checkpoint");
    CHECK(store.inner.list("").size() == keys_after_first.size());
  }
  check_first();

  // An overwrite whose view fails: the earlier checkpoint stays, whole.
  cairn::SaveOptions over;
  over.overwrite = true;
  views_began.reset();
  CHECK_CAIRN_ERROR(cairn::save({store, "c"}, make(true), over), cairn::ErrorKind::invalid_argument, "cannot be viewed");
  check_first();
  // An overwrite that succeeds.
  const State second = make(false);
  views_began.reset();
  cairn::save({store, "c"}, second, over);
  const State back = cairn::load<State>({store, "c"});
  CHECK(test::same_bits(back.first, second.first));
  CHECK(test::same_bits(back.second.values, second.second.values));

  // Where staging is a local call (a filesystem, memory), it comes before the views, as with
  // several processes: nothing is gained by a thread.
  StagingWatcher local(1);
  views_began.reset();
  cairn::save({local, "c"}, make(false));
  CHECK_FALSE(local.views_while_staging);
}
