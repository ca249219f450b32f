// SPDX-License-Identifier: Apache-2.0
// Save and load through S3Store against an S3 server, beside the limit measured the same way
// in the same run: the same bytes PUT (as multipart parts, or in one PUT where they fit in
// one part, as the store does below its multipart threshold) and ranged-GET by plain parallel
// requests of the same part size and concurrency, to the same server, with no cairn in
// between. Prints GB/s, the ratio to the limit, requests per save and per load, and the growth
// of peak memory during each, and the CPU time and minor page faults of this process (the
// server's aside) beside the limit's, which on a machine the server shares show where the
// difference goes (docs/benchmarks.md, "Object stores"). For the small leaves it also times
// the floor of a save (FloorSave below) in the same turns as the limit's PUT.
//
//   cairn-bench-s3 --endpoint http://127.0.0.1:PORT [--bucket B] [--bytes 1G] [--leaves 64]
//                  [--small 10000] [--part 16M] [--concurrency 8] [--repeat 3] [--steps 0]
//                  [--enforced 1]
// --enforced 1: tell the store the server enforces conditional writes (as AWS does; the fake
// server does, s3rver does not): a save sends no HEAD of the marker before its PUT.
// --steps N: also a Checkpointer root of N small steps, timed as a restarted job opens it
// (the constructor and latest()) and as `cairn ls` reads it (inspect), with its requests.
// Credentials: AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (s3rver: S3RVER / S3RVER).
#include <cairn/checkpoint/leaf_writer.hpp>  // leaf_alignment, for the floor
#include <cairn/io/crc32c.hpp>
#include <cairn/s3.hpp>

#include "bench_util.hpp"

#include <malloc.h>
#include <sys/resource.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <future>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace {

// CPU seconds (user + system, every thread) and minor page faults of this process so far.
struct Usage {
  double cpu = 0;
  long faults = 0;
};
Usage usage() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  auto sec = [](const timeval& t) { return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) * 1e-6; };
  return {sec(u.ru_utime) + sec(u.ru_stime), u.ru_minflt};
}
Usage operator-(const Usage& a, const Usage& b) { return {a.cpu - b.cpu, a.faults - b.faults}; }

struct Big {
  std::vector<std::vector<float>> leaves;
};
CAIRN_TREE(Big, leaves)

struct Small {
  std::vector<std::vector<std::uint8_t>> leaves;
};
CAIRN_TREE(Small, leaves)

struct Figures {
  double seconds;
  std::uint64_t requests, peak_growth;
  Usage used;
  std::uint64_t kept;  // transfer buffers the store kept from earlier operations, in use again
};

// A pause before each timed operation, so that none starts while the one before still runs
// on: a GET timed right after a load took 8.6-11 ms, and 7.7-8.5 ms after a pause of 20 ms or
// 100 ms (as the load did either way), on a machine whose two cores the server shares
// (docs/benchmarks.md, 2026-12-04).
void settle() { std::this_thread::sleep_for(std::chrono::milliseconds(20)); }

// trim = false: memory freed by the last call stays with the allocator (the peak figure then
// means nothing), as in a loop that loads again.
template <class F>
Figures measure(cairn::S3Store& store, F&& f, bool trim = true) {
  const std::uint64_t r0 = store.requests();
  // Buffers the store kept from its last operation (S3Options::keep_buffers_for) are resident
  // before the clock starts: the operation's peak is its growth plus them.
  const std::uint64_t kept = store.kept_buffers() * store.options().part_size;
  settle();
  if (trim) malloc_trim(0);  // memory freed by the last run goes back, so that it counts again if used
  bench::reset_peak_rss();
  const std::uint64_t base = bench::rss_bytes();
  const Usage u0 = usage();
  const double t0 = bench::now_s();
  f();
  const double t = bench::now_s() - t0;
  const Usage used = usage() - u0;
  const std::uint64_t peak = bench::peak_rss_bytes();
  return {t, store.requests() - r0, peak > base ? peak - base : 0, used, kept};
}

struct Limit {
  double put, get;
  Usage put_used, get_used;
};
// job(i) for each of `parts` parts, `concurrency` at once, each on a thread of its own.
template <class Job>
void on_parts(std::size_t parts, int concurrency, Job&& job) {
  std::vector<std::future<void>> running;
  for (std::size_t i = 0; i < parts; ++i) {
    if (running.size() >= static_cast<std::size_t>(concurrency)) {
      running.front().get();
      running.erase(running.begin());
    }
    running.push_back(std::async(std::launch::async, job, i));
  }
  for (auto& f : running) f.get();
}
std::size_t part_count(std::uint64_t n, std::uint64_t part) { return static_cast<std::size_t>((n + part - 1) / part); }

// `src` PUT at `key` as multipart parts of `part` bytes, `concurrency` at once; in one PUT
// where it fits in one part, as a plain client uploads a small object (and the store its own
// small objects). Until 2026-12-04 always multipart: a small object's PUT then also waited
// for the upload's creation and completion, two round trips more than the save's own PUT,
// and the small leaves' save came out above its limit (1.15-1.23x in turns).
void raw_put(cairn::s3::Client& client, const std::string& key, const std::vector<unsigned char>& src, std::uint64_t part,
             int concurrency) {
  const std::uint64_t n = src.size();
  if (n <= part) {
    client.put(key, src.data(), n);
    return;
  }
  const std::string id = client.create_multipart(key);
  std::vector<std::string> etags(part_count(n, part));
  on_parts(etags.size(), concurrency, [&](std::size_t i) {
    const std::uint64_t at = i * part, len = std::min(part, n - at);
    etags[i] = client.upload_part(key, id, static_cast<int>(i + 1), src.data() + at, len);
  });
  client.complete_multipart(key, id, etags);
}

// The object at `key` (of dst.size() bytes, version `etag`) GET into `dst` as ranges of `part`
// bytes, `concurrency` at once.
void raw_get(cairn::s3::Client& client, const std::string& key, std::vector<unsigned char>& dst, std::uint64_t part,
             int concurrency, const std::string& etag) {
  const std::uint64_t n = dst.size();
  on_parts(part_count(n, part), concurrency, [&](std::size_t i) {
    const std::uint64_t at = i * part, len = std::min(part, n - at);
    client.get_range(key, dst.data() + at, len, at, etag);
  });
}

// The limit: `src` PUT as raw_put does and GET as ranges, `concurrency` at once.
Limit raw_limit(cairn::s3::Client& client, const std::string& key, const std::vector<unsigned char>& src,
                                    std::uint64_t part, int concurrency) {
  settle();
  Usage u0 = usage();
  double t0 = bench::now_s();
  raw_put(client, key, src, part, concurrency);
  const double put = bench::now_s() - t0;
  const Usage put_used = usage() - u0;
  std::vector<unsigned char> back(src.size());
  const auto info = client.head(key);
  settle();
  u0 = usage();
  t0 = bench::now_s();
  raw_get(client, key, back, part, concurrency, info->etag);
  const double get = bench::now_s() - t0;
  const Usage get_used = usage() - u0;
  if (back != src) {
    std::fprintf(stderr, "raw limit: the bytes read back differ\n");
    std::exit(1);
  }
  client.remove({key});
  return {put, get, put_used, get_used};
}

// The floor of a save of many small leaves over plain http, where a body's SHA-256 is signed
// before a byte of it is sent: the least work any save must do before its PUT, done directly.
// Each leaf is copied to its place in one body (aligned as cairn places it) with its CRC32C, a JSON record of it (size, offset, checksum: its key path is its place in
// the table) is appended to a leaf table after the data, and the body is PUT as the limit's
// bytes are (raw_put), hashed and signed by the same client. The body comes out a little smaller than the save's.
// The body's memory is kept from one save to the next, as a loop of saves would keep it. No
// marker, no HEAD, no looks, no dtype or shape in its records: a save with issue 35's commit
// rules does more, so where this falls short of 0.9x of the limit, so must such a save
// (docs/benchmarks.md, "The floor of a small save").
class FloorSave {
 public:
  explicit FloorSave(const std::vector<std::vector<std::uint8_t>>& leaves) : leaves_(leaves) {
    for (const auto& l : leaves_) data_bytes_ = aligned(data_bytes_, l.size()) + l.size();
  }
  void save(cairn::s3::Client& client, const std::string& key, std::uint64_t part, int concurrency) {
    const double t0 = bench::now_s();
    body_.resize(static_cast<std::size_t>(data_bytes_));
    table_.clear();
    std::uint64_t end = 0;
    char line[128];
    for (std::size_t i = 0; i < leaves_.size(); ++i) {
      const auto& l = leaves_[i];
      const std::uint64_t at = aligned(end, l.size());
      std::memset(body_.data() + end, 0, static_cast<std::size_t>(at - end));
      std::memcpy(body_.data() + at, l.data(), l.size());
      const int n = std::snprintf(line, sizeof line, "%s[%zu,%llu,%u]", i == 0 ? "[" : ",", l.size(),
                                  static_cast<unsigned long long>(at),
                                  static_cast<unsigned>(cairn::crc32c(l.data(), l.size())));
      table_.append(line, static_cast<std::size_t>(n));
      end = at + l.size();
    }
    table_ += "]";
    body_.insert(body_.end(), table_.begin(), table_.end());
    work_.push_back(bench::now_s() - t0);
    raw_put(client, key, body_, part, concurrency);
  }
  std::uint64_t body_bytes() const { return body_.size(); }
  double work_seconds() const { return bench::median(work_); }

 private:
  // Where a leaf of n bytes starts after `end`, as the save's data file places it.
  static std::uint64_t aligned(std::uint64_t end, std::uint64_t n) {
    const std::uint64_t a = cairn::detail::leaf_alignment(n);
    return (end + a - 1) / a * a;
  }

  const std::vector<std::vector<std::uint8_t>>& leaves_;
  std::uint64_t data_bytes_ = 0;
  std::vector<unsigned char> body_;
  std::string table_;
  std::vector<double> work_;
};

}  // namespace

int main(int argc, char** argv) {
  std::string endpoint, bucket = "cairn-test";
  std::uint64_t bytes = std::uint64_t{1} << 30, part = std::uint64_t{16} << 20;
  int leaves = 64, small = 10000, concurrency = 8, repeat = 3, steps = 0;
  bool enforced = false;  // --enforced 1: the server enforces conditional writes (as AWS does)
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i], v = argv[i + 1];
    if (a == "--endpoint") endpoint = v;
    else if (a == "--bucket") bucket = v;
    else if (a == "--bytes") bytes = bench::parse_bytes(v);
    else if (a == "--leaves") leaves = std::stoi(v);
    else if (a == "--small") small = std::stoi(v);
    else if (a == "--part") part = bench::parse_bytes(v);
    else if (a == "--concurrency") concurrency = std::stoi(v);
    else if (a == "--repeat") repeat = std::stoi(v);
    else if (a == "--steps") steps = std::stoi(v);
    else if (a == "--enforced") enforced = v == "1";
  }
  if (endpoint.empty()) {
    std::fprintf(stderr, "usage: cairn-bench-s3 --endpoint URL [--bucket B] [--bytes 1G] ...\n");
    return 2;
  }
  cairn::S3Options o;
  o.endpoint = endpoint;
  o.part_size = part;
  o.multipart_threshold = part;
  o.read_part_size = part;
  o.concurrency = concurrency;
  o.delimiter_listing = false;
  if (enforced) o.conditional_writes_enforced = true;
  const std::string root = "bench-" + std::to_string(std::random_device{}());
  auto store = std::make_shared<cairn::S3Store>("s3", bucket, o, root);
  cairn::s3::Client raw(bucket, root, o, cairn::s3::resolve_config("s3", bucket, o));

  std::mt19937_64 g(7);
  Big big;
  const std::uint64_t per_leaf = bytes / static_cast<std::uint64_t>(leaves) / sizeof(float);
  for (int i = 0; i < leaves; ++i) {
    big.leaves.emplace_back(per_leaf);
    for (auto& x : big.leaves.back()) x = static_cast<float>(g() % 1000);
  }
  const std::uint64_t big_bytes = per_leaf * sizeof(float) * static_cast<std::uint64_t>(leaves);
  std::vector<unsigned char> flat(big_bytes);
  for (int i = 0; i < leaves; ++i)
    std::memcpy(flat.data() + i * per_leaf * sizeof(float), big.leaves[i].data(), per_leaf * sizeof(float));
  Small sm;
  std::uint64_t small_bytes = 0;
  for (int i = 0; i < small; ++i) {
    sm.leaves.emplace_back(64 + g() % 449, static_cast<std::uint8_t>(i));
    small_bytes += sm.leaves.back().size();
  }
  std::vector<unsigned char> small_flat(small_bytes, 1);

  std::printf("S3 benchmark: %s, part %llu MiB, concurrency %d, median of %d\n", endpoint.c_str(),
              static_cast<unsigned long long>(part >> 20), concurrency, repeat);
  auto report = [&](const char* what, std::uint64_t n, std::vector<Figures>& save, std::vector<Figures>& load,
                    std::vector<Limit>& limits) {
    std::vector<double> put, get;
    for (const auto& l : limits) put.push_back(l.put), get.push_back(l.get);
    std::vector<double> ts, tl;
    for (auto& f : save) ts.push_back(f.seconds);
    for (auto& f : load) tl.push_back(f.seconds);
    const double s = bench::median(ts), l = bench::median(tl), p = bench::median(put), gt = bench::median(get);
    const double gb = static_cast<double>(n) / 1e9;
    std::printf("%-26s save %6.3f GB/s (limit PUT %6.3f: %.2fx)  load %6.3f GB/s (limit GET %6.3f: %.2fx)\n", what,
                gb / s, gb / p, p / s, gb / l, gb / gt, gt / l);
    std::printf("%-26s requests: save %llu, load %llu; peak memory (growth + buffers kept from before): "
                "save %llu + %llu MiB, load %llu + %llu MiB\n", "",
                static_cast<unsigned long long>(save.back().requests), static_cast<unsigned long long>(load.back().requests),
                static_cast<unsigned long long>(save.back().peak_growth >> 20),
                static_cast<unsigned long long>(save.back().kept >> 20),
                static_cast<unsigned long long>(load.back().peak_growth >> 20),
                static_cast<unsigned long long>(load.back().kept >> 20));
    // CPU and faults: the run whose time was the median's nearest (the last, for simplicity).
    std::printf("%-26s this process: save %.2f cpu-s, %ld faults (limit PUT %.2f, %ld); load %.2f cpu-s, %ld faults "
                "(limit GET %.2f, %ld)\n", "", save.back().used.cpu, save.back().used.faults, limits.back().put_used.cpu,
                limits.back().put_used.faults, load.back().used.cpu, load.back().used.faults, limits.back().get_used.cpu,
                limits.back().get_used.faults);
  };
  {
    std::vector<Figures> save, load;
    std::vector<Limit> limits;
    for (int r = 0; r < repeat; ++r) {
      limits.push_back(raw_limit(raw, "raw/big", flat, part, concurrency));
      const std::string key = "big/" + std::to_string(r);
      save.push_back(measure(*store, [&] { cairn::save({store, key}, big); }));
      Big back;
      back.leaves.assign(big.leaves.size(), std::vector<float>(per_leaf));
      load.push_back(measure(*store, [&] { cairn::load({store, key}, back); }));
      if (back.leaves != big.leaves) {
        std::fprintf(stderr, "big: the state loaded differs from the state saved\n");
        return 1;
      }
      store->remove_checkpoints({key});
    }
    char what[64];
    std::snprintf(what, sizeof what, "%.2f GiB in %d leaves", static_cast<double>(big_bytes) / (1 << 30), leaves);
    report(what, big_bytes, save, load, limits);
  }
  if (small > 0) {  // (--small 0: the large leaves alone)
    std::vector<Figures> save, save_again, load, load_again, load_new;
    std::vector<Limit> limits;
    std::uint64_t checkpoint_bytes = 0;
    // At least 11 rounds: each takes a tenth of a second, and a median of 3 moved by a third
    // between runs (the limit's GET alone took 5.2 to 8.3 ms from one run to the next, on a
    // machine whose two cores the server shares).
    const int small_repeat = std::max(repeat, 11);
    std::printf("%d small leaves: median of %d\n", small, small_repeat);
    for (int r = 0; r < small_repeat; ++r) {
      limits.push_back(raw_limit(raw, "raw/small", small_flat, part, concurrency));
      const std::string key = "small/" + std::to_string(r);
      save.push_back(measure(*store, [&] { cairn::save({store, key}, sm); }));
      // Saved again at once, the memory the first save freed still with the allocator (as a
      // training loop's next save finds it): the first, after malloc_trim, faults it all in.
      const std::string again = "small-again/" + std::to_string(r);
      save_again.push_back(measure(*store, [&] { cairn::save({store, again}, sm); }, false));
      store->remove_checkpoints({again});
      // Into a state whose memory was touched before the clock, as the limit's GETs read into
      // a buffer it filled first (until 2026-11-28 into a new state: 10,000 allocations and
      // their page faults, which the limit does not make, counted against the load).
      Small back;
      for (const auto& l : sm.leaves) back.leaves.emplace_back(l.size(), std::uint8_t{0});
      load.push_back(measure(*store, [&] { cairn::load({store, key}, back); }));
      load_again.push_back(measure(*store, [&] { cairn::load({store, key}, back); }, false));
      Small fresh;
      load_new.push_back(measure(*store, [&] { fresh = cairn::load<Small>({store, key}); }));
      if (back.leaves != sm.leaves || fresh.leaves != sm.leaves) {
        std::fprintf(stderr, "small: the state loaded differs from the state saved\n");
        return 1;
      }
      // The bytes of the checkpoint's objects (its data and its metadata), once.
      if (r == 0)
        for (const auto& obj : raw.list(key + "/", false).objects) checkpoint_bytes += obj.size;
      store->remove_checkpoints({key});
    }
    // The limit's GET of as many bytes as the checkpoint's objects hold: a load must fetch its
    // metadata (the names, dtypes, shapes and places of the leaves) besides the leaves' bytes,
    // which the limit above does not. Beside the load, it splits what the load waits for from
    // what it computes.
    std::vector<double> whole_get;
    {
      std::vector<unsigned char> whole(static_cast<std::size_t>(checkpoint_bytes));
      for (auto& b : whole) b = static_cast<unsigned char>(g());
      for (int r = 0; r < small_repeat; ++r) whole_get.push_back(raw_limit(raw, "raw/small-whole", whole, part, concurrency).get);
    }
    char what[64];
    std::snprintf(what, sizeof what, "%d small leaves (%.1f MB)", small, static_cast<double>(small_bytes) / 1e6);
    report(what, small_bytes, save, load, limits);
    std::vector<double> tn, ta, gt, sa, pt;
    for (auto& f : save_again) sa.push_back(f.seconds);
    for (auto& l : limits) pt.push_back(l.put);
    std::printf("%-26s save again (memory the allocator kept) %6.3f GB/s, %.1f ms (%.2fx of the limit), %ld faults\n", "",
                static_cast<double>(small_bytes) / 1e9 / bench::median(sa), bench::median(sa) * 1e3,
                bench::median(pt) / bench::median(sa), save_again.back().used.faults);
    for (auto& f : load_new) tn.push_back(f.seconds);
    for (auto& f : load_again) ta.push_back(f.seconds);
    for (auto& l : limits) gt.push_back(l.get);
    // The first load's memory came back from the system (malloc_trim before it, for its peak
    // figure): its page faults, which the limit's GETs into a buffer filled before do not make.
    // Loaded again, the memory the allocator kept is used as a loop's next load uses it.
    std::printf("%-26s load again (memory the allocator kept) %6.3f GB/s, %.1f ms (%.2fx of the limit), %ld faults\n", "",
                static_cast<double>(small_bytes) / 1e9 / bench::median(ta), bench::median(ta) * 1e3,
                bench::median(gt) / bench::median(ta), load_again.back().used.faults);
    std::printf("%-26s load<T> (a new state: its allocations and page faults too) %6.3f GB/s, %.1f ms, %ld faults\n", "",
                static_cast<double>(small_bytes) / 1e9 / bench::median(tn), bench::median(tn) * 1e3, load_new.back().used.faults);
    std::printf("%-26s the checkpoint's objects (data and metadata, %.1f MB) read the limit's way: %.1f ms (the data alone: "
                "%.1f ms)\n", "", static_cast<double>(checkpoint_bytes) / 1e6, bench::median(whole_get) * 1e3,
                bench::median(gt) * 1e3);
    // In a loop, taking turns: the limit's PUT of the small leaves' bytes (as raw_limit does),
    // the floor's save (below), then a save of them to a new key, 21 times; the median of each
    // turn's ratio.
    double turns_put = 0, turns_get = 0;  // the limit's medians there
    {
      std::vector<double> tp, tf, ts, ratio, floor_ratio;
      FloorSave floor_save(sm.leaves);
      for (int r = 0; r < 21; ++r) {
        const std::string rkey = "raw/small-put-turns", fkey = "raw/small-floor-turns",
                          key = "small-save-turns/" + std::to_string(r);
        settle();
        double t0 = bench::now_s();
        raw_put(raw, rkey, small_flat, part, concurrency);
        tp.push_back(bench::now_s() - t0);
        settle();
        t0 = bench::now_s();
        floor_save.save(raw, fkey, part, concurrency);
        tf.push_back(bench::now_s() - t0);
        settle();
        t0 = bench::now_s();
        cairn::save({store, key}, sm);
        ts.push_back(bench::now_s() - t0);
        ratio.push_back(tp.back() / ts.back());
        floor_ratio.push_back(tp.back() / tf.back());
        raw.remove({rkey, fkey});
        store->remove_checkpoints({key});
      }
      std::printf("%-26s saves in turns with the limit's PUT (21 each): save %.1f ms, PUT %.1f ms, %.2fx of the limit "
                  "(median of each turn's ratio; %.2fx to %.2fx between the quartiles)\n", "", bench::median(ts) * 1e3,
                  bench::median(tp) * 1e3, bench::median(ratio), bench::quantile(ratio, 0.25), bench::quantile(ratio, 0.75));
      std::printf("%-26s the floor in the same turns (the least any save does: each leaf copied with its CRC32C and a "
                  "record, %.1f MB, one PUT): %.1f ms, %.2fx of the limit (%.2fx to %.2fx); its work alone %.1f ms\n",
                  "", static_cast<double>(floor_save.body_bytes()) / 1e6, bench::median(tf) * 1e3, bench::median(floor_ratio),
                  bench::quantile(floor_ratio, 0.25), bench::quantile(floor_ratio, 0.75), floor_save.work_seconds() * 1e3);
      turns_put = bench::median(tp);
    }
    // In a loop, taking turns: the limit's GET of the small leaves' bytes (uploaded once, as
    // raw_limit does), then a load of the checkpoint into a state loaded before, 41 times. Measured
    // once a round as above, the two drifted apart between runs (the limit's GET alone took
    // 5.2 to 8.3 ms); in turns they meet the server in the same state, and the median of each
    // turn's ratio is the steady figure.
    {
      const std::string key = "small/turns", rkey = "raw/small-turns";
      cairn::save({store, key}, sm);
      raw_put(raw, rkey, small_flat, part, concurrency);
      const auto info = raw.head(rkey);
      std::vector<unsigned char> got(small_flat.size());
      Small back;
      for (const auto& l : sm.leaves) back.leaves.emplace_back(l.size(), std::uint8_t{0});
      cairn::load({store, key}, back);
      std::vector<double> tg, tl, ratio;
      for (int r = 0; r < 41; ++r) {
        settle();
        double t0 = bench::now_s();
        raw_get(raw, rkey, got, part, concurrency, info->etag);
        tg.push_back(bench::now_s() - t0);
        settle();
        t0 = bench::now_s();
        cairn::load({store, key}, back);
        tl.push_back(bench::now_s() - t0);
        ratio.push_back(tg.back() / tl.back());
      }
      if (back.leaves != sm.leaves || got != small_flat) {
        std::fprintf(stderr, "small: the state loaded, or the limit's bytes, differ from those saved\n");
        return 1;
      }
      std::printf("%-26s in turns with the limit's GET (41 each): load %.1f ms, GET %.1f ms, %.2fx of the limit "
                  "(median of each turn's ratio; %.2fx to %.2fx between the quartiles)\n", "", bench::median(tl) * 1e3,
                  bench::median(tg) * 1e3, bench::median(ratio), bench::quantile(ratio, 0.25), bench::quantile(ratio, 0.75));
      turns_get = bench::median(tg);
      store->remove_checkpoints({key});
      raw.remove({rkey});
    }
    // The save's and the load's own work, with no network: the same tree to and from a store in
    // memory, in a loop as above, and its share of the limit's PUT and GET in turns. A save
    // signs its body's hash before it sends it (plain http), so what it builds comes before its
    // PUT; a load from the server may overlap some of its work with the transfer (and on a
    // machine the server shares, competes with it for the cores). Where the ratios above fall
    // short, this says how much of the gap is the work itself.
    {
      auto mem = std::make_shared<cairn::MemoryStore>();
      std::vector<double> ms, ml;
      for (int r = 0; r < 21; ++r) {
        const std::string key = "small/" + std::to_string(r);
        double t0 = bench::now_s();
        cairn::save({mem, key}, sm);
        ms.push_back(bench::now_s() - t0);
        if (r > 0) mem->remove_checkpoints({"small/" + std::to_string(r - 1)});
      }
      Small back;
      for (const auto& l : sm.leaves) back.leaves.emplace_back(l.size(), std::uint8_t{0});
      for (int r = 0; r < 41; ++r) {
        const double t0 = bench::now_s();
        cairn::load({mem, "small/20"}, back);
        ml.push_back(bench::now_s() - t0);
      }
      if (back.leaves != sm.leaves) {
        std::fprintf(stderr, "small: the state loaded from memory differs from the state saved\n");
        return 1;
      }
      const double s = bench::median(ms), l = bench::median(ml);
      std::printf("%-26s the work alone (a store in memory, 21 saves and 41 loads): save %.1f ms (%.2f of the PUT's "
                  "time in turns), load %.1f ms (%.2f of the GET's)\n", "", s * 1e3, s / turns_put, l * 1e3, l / turns_get);
    }
  }
  if (steps > 0) {
    std::map<std::string, std::vector<float>> st{{"w", std::vector<float>(1000, 1.0f)}};
    {
      cairn::Checkpointer c(cairn::Location(store, "root"));
      for (int step = 1; step <= steps; ++step) c.save(step, st);
      c.wait();
    }
    std::vector<double> open_s, ls_s;
    std::uint64_t open_r = 0, ls_r = 0;
    for (int r = 0; r < repeat; ++r) {
      std::uint64_t r0 = store->requests();
      double t0 = bench::now_s();
      {
        cairn::Checkpointer c(cairn::Location(store, "root"));
        if (c.latest() != steps) {
          std::fprintf(stderr, "root: the latest step is not the last saved\n");
          return 1;
        }
      }
      open_s.push_back(bench::now_s() - t0);
      open_r = store->requests() - r0;
      r0 = store->requests();
      t0 = bench::now_s();
      if (cairn::inspect(cairn::Location(store, "root")).steps.size() != static_cast<std::size_t>(steps)) {
        std::fprintf(stderr, "root: inspect lists another number of steps\n");
        return 1;
      }
      ls_s.push_back(bench::now_s() - t0);
      ls_r = store->requests() - r0;
    }
    std::printf("%-26s opened (Checkpointer, latest) %7.1f ms, %llu requests; inspected (cairn ls) %7.1f ms, %llu requests\n",
                ("root of " + std::to_string(steps) + " steps").c_str(), bench::median(open_s) * 1e3,
                static_cast<unsigned long long>(open_r), bench::median(ls_s) * 1e3, static_cast<unsigned long long>(ls_r));
    store->remove_checkpoints({"root"});
  }
  return 0;
}
