// SPDX-License-Identifier: Apache-2.0
// The storage and coordination seams: the store conformance suite on PosixStore and
// MemoryStore; every I/O call of a save failed in turn on MemoryStore; short reads and torn
// writes; the thread-backed coordinator's collectives; saves by 4 ranks, and by 4 ranks of
// which one fails; replicas split over their holders, per-rank items and a Checkpointer
// across ranks (the multi-rank protocol without MPI, so that it runs under the sanitizers).
#include "store_conformance.hpp"

#include <cairn/checkpoint/data_files.hpp>
#include <cairn/core/bulk_bytes.hpp>
#include <cairn/core/parallel.hpp>
#include <cairn/store/gathered_writer.hpp>
#include <cairn/io/batched_reads.hpp>

#include <array>
#include <cstring>
#include <atomic>
#include <fstream>
#include <sstream>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <stdexcept>
#include <thread>

#include <fcntl.h>
#include <sys/stat.h>
#include <linux/magic.h>
#include <sys/statfs.h>
#include <sys/resource.h>
#include <unistd.h>

using cairn::ErrorKind;
using cairn::MemoryStore;

// The VmFlags line of the mapping of /proc/self/smaps that holds `p` ("" where none does).
static std::string vm_flags_of(const void* p) {
  std::ifstream smaps("/proc/self/smaps");
  const auto at = reinterpret_cast<std::uintptr_t>(p);
  std::string line;
  bool inside = false;
  while (std::getline(smaps, line)) {
    unsigned long lo = 0, hi = 0;
    char dash = 0;
    std::istringstream head(line);
    if (head >> std::hex >> lo >> dash >> hi && dash == '-' && line.find(':') > line.find(' ')) {
      inside = at >= lo && at < hi;
      continue;
    }
    if (inside && line.rfind("VmFlags:", 0) == 0) return line;
  }
  return "";
}

TEST_CASE("BulkBytes: every byte writable; megabytes in a mapping aligned to 2 MiB that asked for huge pages") {
  using cairn::detail::BulkBytes;
  for (const std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{4095}, (std::size_t{2} << 20) - 1,
                              std::size_t{2} << 20, (std::size_t{3} << 20) + 5, std::size_t{17} << 20}) {
    CAPTURE(n);
    BulkBytes b(n);
    CHECK(b.size() == n);
    CHECK(static_cast<bool>(b) == (n > 0));
    if (n == 0) continue;
    for (std::size_t i = 0; i < n; ++i) b.data()[i] = static_cast<unsigned char>(i * 7 + 3);
    bool same = true;
    for (std::size_t i = 0; i < n; ++i) same = same && b.data()[i] == static_cast<unsigned char>(i * 7 + 3);
    CHECK(same);
    const bool big = n >= cairn::detail::huge_page_buffer_min;
#if CAIRN_BULK_BYTES_MAPPED
    CHECK(b.huge_pages_asked() == big);
    if (big) {
      CHECK(reinterpret_cast<std::uintptr_t>(b.data()) % cairn::detail::huge_page_bytes == 0);
      CHECK(b.allocated() % cairn::detail::huge_page_bytes == 0);
      CHECK(b.allocated() >= n);
      CHECK(b.allocated() < n + cairn::detail::huge_page_bytes);
      // The kernel took the advice ("hg" among the mapping's flags), at its first and last byte.
      CHECK(vm_flags_of(b.data()).find(" hg") != std::string::npos);
      CHECK(vm_flags_of(b.data() + n - 1).find(" hg") != std::string::npos);
    }
#else
    (void)big;
    CHECK(b.allocated() == n);
    CHECK_FALSE(b.huge_pages_asked());  // under ASan (or off Linux): from new[], bounds checked
#endif
    // Moves hand the bytes over whole; the one moved from is empty.
    unsigned char* at = b.data();
    BulkBytes c(std::move(b));
    CHECK(c.data() == at);
    CHECK(c.size() == n);
    CHECK_FALSE(b);
    BulkBytes d(64);
    d = std::move(c);
    CHECK(d.data() == at);
    CHECK(d.data()[n - 1] == static_cast<unsigned char>((n - 1) * 7 + 3));
    CHECK_FALSE(c);
  }
#if CAIRN_BULK_BYTES_MAPPED
  // A mapping larger than those kept for reuse, let go, is gone from the process (no leak of
  // address space).
  const void* gone = nullptr;
  {
    BulkBytes b(cairn::detail::kept_mapping_bytes_max + 1);
    gone = b.data();
    CHECK_FALSE(vm_flags_of(gone).empty());
  }
  CHECK(vm_flags_of(gone).empty());
#endif
}

TEST_CASE("BulkBytes: a mapping let go serves the next buffer of its size, without new page faults; at most four of "
          "at most 8 MiB and 16 MiB in all are kept, the oldest let go first") {
#if CAIRN_BULK_BYTES_MAPPED
  using cairn::detail::BulkBytes;
  using cairn::detail::huge_page_bytes;
  auto& kept = cairn::detail::KeptMappings::instance();
  // Buffers of one and of two huge pages.
  const std::size_t one = huge_page_bytes, two = 2 * huge_page_bytes - 100;
  std::mt19937_64 g(std::random_device{}());
  const unsigned char fill = static_cast<unsigned char>(g() | 1);
  unsigned char* first = nullptr;
  {
    BulkBytes b(two);
    first = b.data();
    std::memset(b.data(), fill, two);
  }
  // The same mapping, its pages in place: its bytes are the ones written (a buffer's contents
  // are undefined, so a user never sees this), and writing them again faults in nothing.
  {
    BulkBytes b(two - 12345);
    CHECK(b.data() == first);
    CHECK(b.allocated() == 2 * huge_page_bytes);
    CHECK(b.data()[0] == fill);
    CHECK(b.data()[two - 1] == fill);
    rusage before{}, after{};
    getrusage(RUSAGE_SELF, &before);
    std::memset(b.data(), fill ^ 0xff, two - 12345);
    getrusage(RUSAGE_SELF, &after);
    CHECK(after.ru_minflt - before.ru_minflt < 8);
  }
  // Another size is not served from it.
  {
    BulkBytes b(one);
    CHECK(b.data() != first);
    CHECK(b.allocated() == huge_page_bytes);
  }
  // Six let go at once: the four last are kept, the two first unmapped.
  std::vector<BulkBytes> held;
  for (int i = 0; i < 6; ++i) held.emplace_back(two);
  std::vector<const void*> at;
  for (const auto& b : held) at.push_back(b.data());
  held.clear();  // (in order: the first is let go first)
  CHECK(kept.size() == cairn::detail::kept_mappings_max);
  CHECK(vm_flags_of(at[0]).empty());
  CHECK(vm_flags_of(at[1]).empty());
  for (int i = 2; i < 6; ++i) CHECK_FALSE(vm_flags_of(at[i]).empty());
  // Three of 8 MiB let go: the two last are kept (16 MiB in all), and every smaller one and
  // the first of them unmapped to make room.
  {
    const std::size_t most = cairn::detail::kept_mapping_bytes_max;
    std::vector<BulkBytes> large;
    for (int i = 0; i < 3; ++i) large.emplace_back(most - 7);
    std::vector<const void*> large_at;
    for (const auto& b : large) large_at.push_back(b.data());
    large.clear();
    CHECK(kept.size() == 2);
    CHECK(kept.kept_bytes() == 2 * most);
    CHECK(kept.kept_bytes() <= cairn::detail::kept_bytes_max);
    CHECK(vm_flags_of(large_at[0]).empty());
    for (int i = 2; i < 6; ++i) CHECK(vm_flags_of(at[i]).empty());
    CHECK_FALSE(vm_flags_of(large_at[1]).empty());
    CHECK_FALSE(vm_flags_of(large_at[2]).empty());
    // Taken again: the newest of them, and the count goes down with it.
    BulkBytes b(most);
    CHECK(static_cast<const void*>(b.data()) == large_at[2]);
    CHECK(kept.kept_bytes() == most);
  }
  // Four of two huge pages kept again (the 8 MiB one goes to make room for the fourth).
  held.clear();
  for (int i = 0; i < 4; ++i) held.emplace_back(two);
  at.clear();
  for (const auto& b : held) at.push_back(b.data());
  held.clear();
  CHECK(kept.size() == cairn::detail::kept_mappings_max);
  CHECK(kept.kept_bytes() == 4 * 2 * huge_page_bytes);
  // The vector of records takes them too, the newest first.
  {
    std::vector<std::uint64_t, cairn::detail::BulkAllocator<std::uint64_t>> v;
    v.reserve(two / sizeof(std::uint64_t));
    CHECK(static_cast<const void*>(v.data()) == at[3]);
    v.assign(v.capacity(), 7);
    CHECK(v[v.size() - 1] == 7);
  }
  // Threads taking and letting go side by side each get a mapping of their own.
  std::vector<std::thread> threads;
  std::atomic<int> bad{0};
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 200; ++i) {
        BulkBytes b(t % 2 ? one : two);
        const auto mark = static_cast<unsigned char>(t * 31 + i);
        b.data()[0] = mark;
        b.data()[b.size() - 1] = mark;
        std::this_thread::yield();
        if (b.data()[0] != mark || b.data()[b.size() - 1] != mark) ++bad;
      }
    });
  for (auto& t : threads) t.join();
  CHECK(bad == 0);
  CHECK(kept.size() <= cairn::detail::kept_mappings_max);
#else
  MESSAGE("buffers come from new[] in this build (AddressSanitizer, or not Linux): nothing is kept");
#endif
}

TEST_CASE("BulkAllocator: a vector of megabytes lies in huge pages, a smaller one on the heap; elements survive growth across") {
  using Rec = std::array<std::uint64_t, 34>;  // 272 bytes, as a LeafRecord
  std::vector<Rec, cairn::detail::BulkAllocator<Rec>> v;
  std::mt19937_64 g(99);
  const std::uint64_t seed = g();
  auto value = [&](std::size_t i, std::size_t j) { return seed ^ (i * 1000003 + j); };
  bool was_small = false, is_big = false;
  for (std::size_t i = 0; i < 20000; ++i) {  // 5.4 MB: grows from the heap into mappings
    Rec r;
    for (std::size_t j = 0; j < r.size(); ++j) r[j] = value(i, j);
    v.push_back(r);
    const bool big = v.capacity() * sizeof(Rec) >= cairn::detail::huge_page_buffer_min;
#if CAIRN_BULK_BYTES_MAPPED
    if (!big && !was_small) {
      was_small = true;
      CHECK(vm_flags_of(v.data()).find(" hg") == std::string::npos);
    }
    if (big && !is_big) {
      is_big = true;
      CHECK(reinterpret_cast<std::uintptr_t>(v.data()) % cairn::detail::huge_page_bytes == 0);
      CHECK(vm_flags_of(v.data()).find(" hg") != std::string::npos);
    }
#else
    was_small = was_small || !big;
    is_big = is_big || big;
#endif
  }
  CHECK(was_small);
  CHECK(is_big);
  bool same = true;
  for (std::size_t i = 0; i < v.size(); ++i)
    for (std::size_t j = 0; j < v[i].size(); ++j) same = same && v[i][j] == value(i, j);
  CHECK(same);
#if CAIRN_BULK_BYTES_MAPPED
  CHECK(vm_flags_of(v.data() + v.size() - 1).find(" hg") != std::string::npos);
  const void* gone = v.data();
  v = decltype(v)();
  CHECK(vm_flags_of(gone).empty());  // the mapping let go with the vector's memory
#endif
  // A format-3 item's records are such a vector.
  static_assert(std::is_same_v<decltype(cairn::ItemRecord::leaves)::allocator_type, cairn::detail::BulkAllocator<cairn::LeafRecord>>);
}

TEST_CASE("PosixStore keeps the Store contract") {
  test::TempDir dir;
  int n = 0;
  test::check_store_conformance([&] { return std::make_shared<cairn::PosixStore>(dir / std::to_string(n++)); });
}

TEST_CASE("PosixStore says which bytes are in the page cache: all after a read, none after they are dropped") {
  test::TempDir dir;
  const std::string path = dir / "blob";
  const auto bytes = test::random_bits<unsigned char>(4 << 20);
  test::write_file(path, std::string(bytes.begin(), bytes.end()));
  cairn::PosixStore store;
  auto r = store.open(path);
  std::vector<unsigned char> back(bytes.size());
  r->read_at(back.data(), back.size(), 0);
  CHECK(r->cached_bytes(0, bytes.size()) == bytes.size());
  CHECK(r->cached_bytes(12345, 100000) == 100000);
  // Written back and dropped from the page cache (which a tmpfs cannot do: its pages are the
  // file), the bytes are not cached any more.
  if (test::drop_from_page_cache(path)) CHECK(r->cached_bytes(0, bytes.size()) < bytes.size() / 2);
  // A MemoryStore's blobs are memory: every byte is there.
  MemoryStore memory;
  {
    auto w = memory.create("blob");
    w->write_at(bytes.data(), bytes.size(), 0);
    w->finish(bytes.size());
  }
  CHECK(memory.open("blob")->cached_bytes(10, 1000) == 1000);
}

TEST_CASE("a file read ahead: its first bytes into the page cache, up to the budget, and only regular files") {
  test::TempDir dir;
  const std::string path = dir / "blob";
  const auto bytes = test::random_bits<unsigned char>(9 << 20);
  test::write_file(path, std::string(bytes.begin(), bytes.end()));
  cairn::PosixStore store;
  auto r = store.open(path);
  std::atomic<bool> stop{false};
  const bool can_drop = test::drop_from_page_cache(path);
  CHECK(cairn::detail::file_head_cached(path, 1 << 20) == !can_drop);
  // prefetch_file covers exactly its budget from the start (fetched, or found cached), or the
  // whole file. (What lies past the budget may be cached all the same: the kernel's own
  // readahead of sequential reads goes up to read_ahead_kb further, 8 MiB on the VM where
  // this was written, so the budget is checked by what prefetch_file says it covered.)
  CHECK(cairn::detail::prefetch_file(path, 5 << 20, stop) == 5u << 20);
  CHECK(r->cached_bytes(0, 5 << 20) == 5u << 20);
  CHECK(cairn::detail::file_head_cached(path, 5 << 20));
  CHECK(cairn::detail::prefetch_file(path, 1ull << 40, stop) == bytes.size());
  CHECK(r->cached_bytes(0, bytes.size()) == bytes.size());
  // Nothing changed, and the file reads the same through the page cache.
  std::vector<unsigned char> back(bytes.size());
  r->read_at(back.data(), back.size(), 0);
  CHECK(back == bytes);
  // Told to stop, it reads nothing.
  stop = true;
  if (can_drop) test::drop_from_page_cache(path);
  CHECK(cairn::detail::prefetch_file(path, 1 << 20, stop) == 0);
  if (can_drop) CHECK(r->cached_bytes(0, 1 << 20) < (1u << 20) / 2);
  stop = false;
  // Only regular files: a symbolic link (which could lead out of a checkpoint), a directory
  // and a FIFO (which could block) are left alone, at once.
  const std::string link = dir / "link", fifo = dir / "fifo";
  REQUIRE(::symlink(path.c_str(), link.c_str()) == 0);
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  for (const std::string& p : {link, fifo, dir.path, dir / "missing"}) {
    CAPTURE(p);
    CHECK(cairn::detail::prefetch_file(p, 1 << 20, stop) == 0);
    CHECK_FALSE(cairn::detail::file_head_cached(p, 1 << 20));
  }
  // PosixStore::read_ahead: nothing to do for a file in the page cache; otherwise a thread
  // that fetches it (the handle's destruction waits for it, or stops it).
  CHECK(cairn::detail::prefetch_file(path, 1ull << 40, stop) == bytes.size());
  CHECK(store.read_ahead({path}, 1 << 20) == nullptr);
  if (test::drop_from_page_cache(path)) {
    auto ahead = store.read_ahead({path, dir / "missing"}, 2 << 20);
    REQUIRE(ahead != nullptr);
    for (int waited = 0; waited < 1000 && r->cached_bytes(0, 2 << 20) < 2u << 20; ++waited)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    CHECK(r->cached_bytes(0, 2 << 20) == 2u << 20);
    ahead.reset();
  }
}

TEST_CASE("a checkpoint's files are read with O_NONBLOCK left set; an EAGAIN clears it and the read goes on") {
  // O_NONBLOCK has no effect on a regular file (open(2)), so a load clears it with no fcntl
  // per file (a fifth of the system calls of a load of 10,000 one-chunk files). A filesystem
  // that answered EAGAIN all the same (injected here) gets the flag cleared, once per file.
  test::TempDir dir;
  auto state = test::random_conformance_state();
  state.w = test::random_bits<float>(300000);  // read with pread; the small leaves with preadv
  const std::string path = dir / "c";
  cairn::save(path, state);
  std::mutex m;
  std::map<std::string, std::map<std::string, int>> calls;  // call -> path -> count
  auto record = [&](const std::string& call, const std::string& p) {
    std::lock_guard<std::mutex> lock(m);
    return ++calls[call][p];
  };
  {
    test::FaultInjection seen([&](const std::string& call, const std::string& p) {
      record(call, p);
      return 0;
    });
    test::check_same(state, cairn::load<test::ConformanceState>(path));
  }
  CHECK(calls["open"].size() >= 3);   // the marker, the metadata and the data file at least
  CHECK(calls["pread"].size() >= 3);
  CHECK(calls["fcntl"].empty());
  const std::size_t read_files = calls["pread"].size();

  // Every file's first read answers EAGAIN: each is cleared once and read on.
  calls.clear();
  {
    test::FaultInjection eagain([&](const std::string& call, const std::string& p) {
      const int n = record(call, p);
      return call == "pread" && n == 1 ? EAGAIN : 0;
    });
    test::check_same(state, cairn::load<test::ConformanceState>(path));
  }
  CHECK(calls["pread"].size() == read_files);
  CHECK(calls["fcntl"].size() == read_files);
  for (const auto& call : calls["fcntl"]) {  // (not a structured binding: CAPTURE's lambda takes it, which clang 14 refuses)
    const std::string& p = call.first;
    CAPTURE(p);
    CHECK(call.second == 1);
  }

  // Through the store's reader too, both kinds of read, and an EAGAIN once the flag is
  // cleared is an error naming the file, as is a failed fcntl.
  cairn::PosixStore store;
  const std::string data = dir / "blob";
  const auto bytes = test::random_bits<unsigned char>(100000);
  test::write_file(data, std::string(bytes.begin(), bytes.end()));
  // The file status flags of the one descriptor open on `p`, from /proc/self/fdinfo.
  auto flags_of_open = [](const std::string& p) {
    int found = -1, count = 0;
    for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) {
      std::error_code ec;
      if (std::filesystem::read_symlink(e.path(), ec) != p) continue;
      std::ifstream info("/proc/self/fdinfo/" + e.path().filename().string());
      for (std::string line; std::getline(info, line);)
        if (line.starts_with("flags:")) found = std::stoi(line.substr(6), nullptr, 8);
      ++count;
    }
    REQUIRE(count == 1);
    return found;
  };
  auto r = store.open(data);
  CHECK((flags_of_open(data) & O_NONBLOCK) != 0);  // no fcntl at the open
  {
    int preads = 0;
    test::FaultInjection eagain([&](const std::string& call, const std::string&) { return call == "pread" && ++preads <= 2 ? EAGAIN : 0; });
    std::vector<unsigned char> back(bytes.size());
    r->read_at(back.data(), 1000, 0);  // cleared here
    CHECK((flags_of_open(data) & O_NONBLOCK) == 0);
    CHECK_CAIRN_ERROR(r->read_at(back.data(), 1000, 0), ErrorKind::io, "blob");  // a second EAGAIN is real
    cairn::ReadPiece pieces[2] = {{back.data(), 40000}, {back.data() + 40000, bytes.size() - 40000}};
    r->read_scattered(pieces, 2, 0);
    CHECK(back == bytes);
  }
  r.reset();
  auto r2 = store.open(data);
  {
    test::FaultInjection fail([&](const std::string& call, const std::string&) {
      return call == "pread" ? EAGAIN : call == "fcntl" ? EIO : 0;
    });
    std::vector<unsigned char> back(10);
    CHECK_CAIRN_ERROR(r2->read_at(back.data(), back.size(), 0), ErrorKind::io, "fcntl");
    cairn::ReadPiece piece{back.data(), back.size()};
    CHECK_CAIRN_ERROR(r2->read_scattered(&piece, 1, 0), ErrorKind::io, "blob");
  }
}

TEST_CASE("PosixStore reads many small files together: what is no regular file is refused as read_whole refuses it") {
  // 32 or more files go through io_uring where the kernel has it (io/batched_reads.hpp); what
  // that path does not read whole is read the ordinary way, so every result and every error
  // is read_whole's own. A FIFO must not block it, a link not be followed.
  test::TempDir dir;
  cairn::PosixStore store(dir.path);
  std::vector<std::pair<std::string, std::uint64_t>> reads;
  std::vector<std::string> want;
  std::size_t regular = 0;  // files read whole by the batched path
  for (int i = 0; i < 100; ++i) {
    const std::string name = "f" + std::to_string(i);
    const auto bytes = test::random_bits<unsigned char>(static_cast<std::size_t>(i * 37 % 5000));
    test::write_file(dir / name, std::string(bytes.begin(), bytes.end()));
    reads.emplace_back(name, bytes.size());
    want.emplace_back(bytes.begin(), bytes.end());
    ++regular;
  }
  REQUIRE(::mkfifo((dir / "fifo").c_str(), 0600) == 0);
  REQUIRE(::symlink((dir / "f1").c_str(), (dir / "link").c_str()) == 0);
  std::filesystem::create_directories(dir / "sub");
  for (const std::string odd : {"fifo", "link", "sub", "missing"}) {
    reads.insert(reads.begin() + 50, {odd, 1 << 20});
    want.insert(want.begin() + 50, "");
  }
  reads.emplace_back("f99", 10);  // over its limit
  want.emplace_back("");
  const auto got = store.read_whole_each(reads);
  REQUIRE(got.size() == reads.size());
  for (std::size_t i = 0; i < reads.size(); ++i) {
    CAPTURE(reads[i].first);
    auto g = got[i];
    if (!g.error) {
      CHECK(g.take() == want[i]);
      continue;
    }
    std::string batched, alone;
    cairn::ErrorKind kb{}, ka{};
    try {
      g.take();
    } catch (const cairn::Error& e) {
      batched = e.what(), kb = e.kind();
    }
    try {
      (void)store.read_whole(reads[i].first, reads[i].second);
      FAIL("read_whole read it");
    } catch (const cairn::Error& e) {
      alone = e.what(), ka = e.kind();
    }
    CHECK(batched == alone);
    CHECK(kb == ka);
  }
  int errors = 0;
  for (const auto& g : got) errors += g.error != nullptr;
  CHECK(errors == 5);

  // The batched path itself: every regular file within its limit read whole by it, the rest
  // left; nothing while a fault-injection hook is set.
  std::vector<cairn::detail::WholeFileRead> files(reads.size());
  for (std::size_t i = 0; i < reads.size(); ++i) files[i].path = store.path(reads[i].first), files[i].limit = reads[i].second;
  const std::size_t read = cairn::detail::read_files_batched(files);
  if (read == 0) {
    MESSAGE("no io_uring on this machine: only the ordinary reads were checked");
  } else {
    CHECK(read == regular);  // f0 ... f99 within their limits; not f99 again over its limit
    for (std::size_t i = 0; i < files.size(); ++i) {
      CAPTURE(reads[i].first);
      CHECK(files[i].done == (i < reads.size() - 1 && reads[i].first.starts_with("f") && reads[i].first != "fifo"));
      if (files[i].done) CHECK(files[i].bytes == want[i]);
    }
  }
  // A device node reads like an empty file of any limit (its size is 0): refused all the same.
  if (std::filesystem::exists("/dev/zero")) {
    cairn::PosixStore anywhere;
    std::vector<std::pair<std::string, std::uint64_t>> dev(40, {dir / "f3", 1 << 20});
    dev[7] = {"/dev/zero", 1 << 20};
    auto back = anywhere.read_whole_each(dev);
    CHECK(back[6].take() == want[3]);
    CHECK_CAIRN_ERROR(back[7].take(), ErrorKind::corrupt, "not a regular file");
    std::vector<cairn::detail::WholeFileRead> zero(40);
    for (auto& z : zero) z.path = "/dev/zero", z.limit = 1 << 20;
    cairn::detail::read_files_batched(zero);
    for (const auto& z : zero) CHECK_FALSE(z.done);
  }
  for (auto& f : files) f.done = false, f.bytes.clear();
  {
    test::FaultInjection none([](const std::string&, const std::string&) { return 0; });
    CHECK(cairn::detail::read_files_batched(files) == 0);
  }
}

TEST_CASE("read_files_batched opens each batch's files from the directory they share: paths read as the whole path reads them") {
  // Each batch of 64 opens the deepest directory its paths share once, and each file from it.
  // Whatever the paths (relative ones, '..', a link to a directory, a directory that is not
  // there, batches in different directories), each file is read whole exactly where its whole
  // path names a regular file within its limit, and a link as the last part is still refused.
  test::TempDir dir;
  namespace fs = std::filesystem;
  const fs::path root(dir.path);
  fs::create_directories(root / "a" / "x");
  fs::create_directories(root / "a" / "y");
  fs::create_directories(root / "b");
  REQUIRE(::symlink((dir / "a").c_str(), (dir / "ln").c_str()) == 0);
  std::map<std::string, std::string> content;  // a file's whole path -> its bytes
  std::mt19937 rng(11);
  for (const char* sub : {"a/x", "a/y", "b"})
    for (int i = 0; i < 70; ++i) {
      const std::string p = (root / sub).string() + "/f" + std::to_string(i);
      const auto bytes = test::random_bits<unsigned char>(static_cast<std::size_t>(rng() % 3000));
      content[p].assign(bytes.begin(), bytes.end());
      test::write_file(p, content[p]);
    }
  REQUIRE(::symlink((dir / "a/x/f1").c_str(), (dir / "a/x/last_link").c_str()) == 0);
  const std::string cwd_relative = fs::relative(root / "b").string();
  REQUIRE(cwd_relative.find('/') != std::string::npos);
  std::vector<std::pair<std::string, std::string>> paths;  // (path asked, the file it names or "")
  for (int i = 0; i < 64; ++i)  // one batch, all in a/x
    paths.emplace_back(dir.path + "/a/x/f" + std::to_string(i), dir.path + "/a/x/f" + std::to_string(i));
  for (int i = 0; i < 64; ++i) {  // one batch mixing a/x, a/y through '..' and through the link
    const std::string n = "f" + std::to_string(i);
    if (i % 3 == 0) paths.emplace_back(dir.path + "/a/x/../y/" + n, dir.path + "/a/y/" + n);
    else if (i % 3 == 1) paths.emplace_back(dir.path + "/ln/x/" + n, dir.path + "/a/x/" + n);
    else paths.emplace_back(dir.path + "/a/y/" + n, dir.path + "/a/y/" + n);
  }
  for (int i = 0; i < 64; ++i)  // one batch relative to the working directory
    paths.emplace_back(cwd_relative + "/f" + std::to_string(i), dir.path + "/b/f" + std::to_string(i));
  for (int i = 0; i < 64; ++i)  // one batch in a directory that is not there, but for two
    paths.emplace_back(i < 62 ? dir.path + "/nothere/f" + std::to_string(i) : dir.path + "/b/f" + std::to_string(i),
                       i < 62 ? std::string() : dir.path + "/b/f" + std::to_string(i));
  for (int i = 0; i < 40; ++i)  // a last batch, shorter, with a link as a file's last part
    paths.emplace_back(i == 5 ? dir.path + "/a/x/last_link" : dir.path + "/ln/y/f" + std::to_string(i),
                       i == 5 ? std::string() : dir.path + "/a/y/f" + std::to_string(i));
  std::vector<cairn::detail::WholeFileRead> files(paths.size());
  for (std::size_t i = 0; i < paths.size(); ++i) files[i].path = paths[i].first, files[i].limit = 1 << 20;
  const std::size_t read = cairn::detail::read_files_batched(files);
  if (read == 0) {
    MESSAGE("no io_uring on this machine: nothing to check");
    return;
  }
  std::size_t expected = 0;
  for (std::size_t i = 0; i < paths.size(); ++i) {
    CAPTURE(paths[i].first);
    const bool there = !paths[i].second.empty();
    expected += there;
    CHECK(files[i].done == there);
    if (there && files[i].done) CHECK(files[i].bytes == content.at(paths[i].second));
  }
  CHECK(read == expected);
}

#if CAIRN_HAS_IO_URING
namespace {
// The ring of read_files_batched made to refuse entries at its Nth io_uring_enter: `partial`
// takes half of what it is given first (the kernel runs those), then refuses the rest.
std::atomic<int> enter_calls{0}, refuse_at{0};
std::atomic<bool> partial{false}, refused{false};
long refusing_enter(int ring, unsigned to_submit, unsigned min_complete, unsigned flags,
                    long (*enter)(int, unsigned, unsigned, unsigned)) {
  const int call = ++enter_calls;
  if (to_submit > 0 && call == refuse_at) {
    if (partial && to_submit > 1) return enter(ring, to_submit / 2, 0, flags);  // takes half, waits for none
    refused = true;
    errno = EBUSY;
    return -1;
  }
  if (to_submit > 0 && partial && call == refuse_at + 1) {
    refused = true;
    errno = EBUSY;
    return -1;
  }
  return enter(ring, to_submit, min_complete, flags);
}
std::size_t open_descriptors() {
  std::size_t n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) ++n;
  return n;
}
// What each descriptor below `upto` is (device and inode; absent where none is open): a count
// alone would not see a stray close of the process's own descriptor beside a leaked one.
std::map<int, std::pair<dev_t, ino_t>> descriptor_identities(int upto) {
  std::map<int, std::pair<dev_t, ino_t>> out;
  for (int fd = 0; fd < upto; ++fd) {
    struct stat st {};
    if (::fstat(fd, &st) == 0) out[fd] = {st.st_dev, st.st_ino};
  }
  return out;
}
}  // namespace

TEST_CASE("a ring that refuses entries midway: what it took is waited for, what it opened is closed, every file is still read") {
  // io_uring_enter may take fewer entries than it is given, or refuse them (EBUSY, EAGAIN,
  // ENOMEM). The entries it took write into the caller's buffers: the batch waits for them
  // before it returns, closes what was opened with close(2), and leaves the files it did not
  // read to the ordinary reads. Each call of a read of 150 files refused in turn, whole and
  // after taking half: every result is the file's bytes, and no descriptor is left open.
  test::TempDir dir;
  cairn::PosixStore store(dir.path);
  std::vector<std::pair<std::string, std::uint64_t>> reads;
  std::vector<std::string> want;
  for (int i = 0; i < 150; ++i) {
    const std::string name = "f" + std::to_string(i);
    const auto bytes = test::random_bits<unsigned char>(static_cast<std::size_t>(1 + i * 53 % 4000));
    test::write_file(dir / name, std::string(bytes.begin(), bytes.end()));
    reads.emplace_back(name, 1 << 20);
    want.emplace_back(bytes.begin(), bytes.end());
  }
  {
    std::vector<cairn::detail::WholeFileRead> probe(40);
    for (auto& p : probe) p.path = dir / "f1", p.limit = 1 << 20;
    if (cairn::detail::read_files_batched(probe) == 0) {
      MESSAGE("no io_uring on this machine: nothing to check");
      return;
    }
  }
  // Every low descriptor number holds a file of the process's own (sentinels where free): a
  // batch that closed a descriptor it never opened (one of its slots taken for open, say)
  // would close one of these.
  std::vector<int> sentinels;
  while (true) {
    const int fd = ::open(dir.path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    REQUIRE(fd >= 0);
    if (fd >= 16) { ::close(fd); break; }
    sentinels.push_back(fd);
  }
  const auto identities_before = descriptor_identities(16);
  REQUIRE(identities_before.size() == 16);
  const std::size_t open_before = open_descriptors();
  int refusals = 0;
  for (const bool half : {false, true})
    for (int at = 1; at <= 12; ++at) {
      CAPTURE(half);
      CAPTURE(at);
      enter_calls = 0, refuse_at = at, partial = half, refused = false;
      cairn::detail::uring_enter_hook() = refusing_enter;
      const auto got = store.read_whole_each(reads);
      std::vector<cairn::detail::WholeFileRead> files(reads.size());
      for (std::size_t i = 0; i < reads.size(); ++i) files[i].path = store.path(reads[i].first), files[i].limit = 1 << 20;
      enter_calls = 0, refused = false;
      const std::size_t read = cairn::detail::read_files_batched(files);
      cairn::detail::uring_enter_hook() = nullptr;
      refusals += refused;
      REQUIRE(got.size() == reads.size());
      for (std::size_t i = 0; i < reads.size(); ++i) {
        CAPTURE(i);
        REQUIRE_FALSE(got[i].error);
        CHECK(got[i].bytes == want[i]);
        if (files[i].done) CHECK(files[i].bytes == want[i]);
        else CHECK(files[i].bytes.empty());
      }
      // Each batch of 64 makes three calls (opens, reads, closes): a refusal before a batch's
      // closes leaves files unread by the ring; a refused close, none.
      if (refused && (at - 1) % 3 != 2) CHECK(read < files.size());
      if (!refused) CHECK(read == files.size());
      CHECK(open_descriptors() == open_before);
      CHECK(descriptor_identities(16) == identities_before);
    }
  CHECK(refusals >= 12);  // the sweep reached the ring's calls of both batches' stages
  for (const int fd : sentinels) ::close(fd);
}

TEST_CASE("read_files_batched reads a file that fits its first read with no call of its own, and the rest of a larger one after its check") {
  // Each file's first read asks for its limit and a byte more, at most probe_bytes: what comes
  // back shorter is the whole file (no statx); what fills it, or comes back empty, is checked
  // with a statx and, a regular file within its limit, read on from there. Sizes and limits on
  // both sides of the probe and of each other: each file is read whole exactly where it is
  // within its limit, bit-exact, and only the files the rule names are checked. Then the same
  // files with the ring refusing each of its calls in turn.
  constexpr std::uint64_t probe = cairn::detail::UringBatch::probe_bytes;
  test::TempDir dir;
  cairn::PosixStore store(dir.path);
  std::mt19937_64 rng(23);
  const std::vector<std::uint64_t> sizes_at_edges{0, 1, 2, probe - 2, probe - 1, probe, probe + 1, 2 * probe - 1,
                                                  2 * probe, 2 * probe + 1, 65536, 300001};
  std::vector<std::uint64_t> sizes = sizes_at_edges;
  while (sizes.size() < 200) {
    const auto kind = rng() % 4;  // small files (most of a checkpoint of small arrays), the probe's edge, larger
    sizes.push_back(kind < 2 ? rng() % probe : kind == 2 ? probe - 8 + rng() % 16 : rng() % (5 * probe));
  }
  std::vector<cairn::detail::WholeFileRead> files;
  std::vector<std::string> want;
  std::uint64_t checked = 0;  // the files the rule sends to a statx
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    const std::uint64_t size = sizes[i];
    const auto bytes = test::random_bits<unsigned char>(static_cast<std::size_t>(size));
    const std::string name = "f" + std::to_string(i);
    test::write_file(dir / name, std::string(bytes.begin(), bytes.end()));
    // Limits: the size, a byte less, a byte more, the probe's edges, plenty.
    const std::uint64_t choices[] = {size, size == 0 ? 0 : size - 1, size + 1, probe - 1, probe, probe + 1, 1 << 20};
    for (const std::uint64_t limit : {choices[i % 7], choices[(i / 7) % 7]}) {
      cairn::detail::WholeFileRead f;
      f.path = store.path(name), f.limit = limit;
      files.push_back(f);
      want.push_back(size <= limit ? std::string(bytes.begin(), bytes.end()) : std::string());
      const std::uint64_t first = std::min(limit, probe - 1) + 1;  // what the first read asks for
      const std::uint64_t have = std::min(size, first);
      checked += have == 0 || (have == first && limit >= probe);
    }
  }
  {
    std::vector<cairn::detail::WholeFileRead> probe_ring(40);
    for (auto& p : probe_ring) p.path = store.path("f1"), p.limit = 1 << 20;
    if (cairn::detail::read_files_batched(probe_ring) == 0) {
      MESSAGE("no io_uring on this machine: nothing to check");
      return;
    }
  }
  REQUIRE(checked > 20);  // both kinds, in numbers
  REQUIRE(checked + 20 < files.size());
  const std::uint64_t checks_before = cairn::detail::batched_read_checks().load();
  const std::size_t read = cairn::detail::read_files_batched(files);
  CHECK(cairn::detail::batched_read_checks().load() - checks_before == checked);
  std::size_t within = 0;
  for (std::size_t i = 0; i < files.size(); ++i) {
    CAPTURE(files[i].path);
    CAPTURE(files[i].limit);
    const bool fits = sizes[i / 2] <= files[i].limit;
    within += fits;
    CHECK(files[i].done == fits);
    CHECK(files[i].bytes == want[i]);
  }
  CHECK(read == within);

  // A FIFO never makes it wait: with a writer and nothing written it is left to the ordinary
  // read (which refuses it); with a few bytes written it is left too or, on a kernel whose
  // FIFOs take a read that does not wait, read as those bytes (the one difference from the
  // ordinary read, batched_reads.hpp).
  const std::string fifo = dir / "fifo";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  const int writer = ::open(fifo.c_str(), O_RDWR | O_NONBLOCK | O_CLOEXEC);  // a writer that needs no reader
  REQUIRE(writer >= 0);
  std::vector<cairn::detail::WholeFileRead> with_fifo(40);
  for (auto& f : with_fifo) f.path = store.path("f1"), f.limit = 1 << 20;
  with_fifo[3].path = fifo;
  CHECK(cairn::detail::read_files_batched(with_fifo) == 39);
  CHECK_FALSE(with_fifo[3].done);
  REQUIRE(::write(writer, "0123456789", 10) == 10);
  for (auto& f : with_fifo) f.done = false, f.bytes.clear();
  const std::size_t with_bytes = cairn::detail::read_files_batched(with_fifo);
  CHECK(with_bytes == 39 + with_fifo[3].done);
  CHECK(with_fifo[3].bytes == (with_fifo[3].done ? "0123456789" : ""));
  ::close(writer);

  // The ring refusing each of its calls in turn (whole, then after taking half): every file
  // it reads is bit-exact, every other is left empty, the store's reads are all right, and no
  // descriptor is left open.
  std::vector<std::pair<std::string, std::uint64_t>> reads;
  for (const auto& f : files) reads.emplace_back(f.path.substr(dir.path.size() + 1), f.limit);
  const std::size_t open_before = open_descriptors();
  int refusals = 0;
  for (const bool half : {false, true})
    for (int at = 1; at <= 30; ++at) {
      CAPTURE(half);
      CAPTURE(at);
      for (auto& f : files) f.done = false, f.bytes.clear();
      enter_calls = 0, refuse_at = at, partial = half, refused = false;
      cairn::detail::uring_enter_hook() = refusing_enter;
      const std::size_t got = cairn::detail::read_files_batched(files);
      enter_calls = 0;
      const auto whole = store.read_whole_each(reads);
      cairn::detail::uring_enter_hook() = nullptr;
      refusals += refused;
      if (!refused) CHECK(got == within);
      for (std::size_t i = 0; i < files.size(); ++i) {
        CAPTURE(i);
        if (files[i].done) CHECK(files[i].bytes == want[i]);
        else CHECK(files[i].bytes.empty());
        if (sizes[i / 2] <= files[i].limit) CHECK(whole[i].bytes == want[i]);
        CHECK(static_cast<bool>(whole[i].error) == (sizes[i / 2] > files[i].limit));
      }
      CHECK(open_descriptors() == open_before);
    }
  CHECK(refusals >= 30);
}
#endif

TEST_CASE("MemoryStore keeps the Store contract") {
  test::check_store_conformance([] { return std::make_shared<MemoryStore>(); });
}

namespace {
// A StoreWriter that keeps the blob's bytes and counts its calls.
struct RecordingWriter final : cairn::StoreWriter {
  std::vector<unsigned char> bytes;
  int writes = 0, gathered = 0;
  std::size_t most_pieces = 0;
  bool fail = false;
  void put(const void* src, std::uint64_t n, std::uint64_t offset) {
    if (bytes.size() < offset + n) bytes.resize(static_cast<std::size_t>(offset + n));
    if (n) std::memcpy(bytes.data() + offset, src, static_cast<std::size_t>(n));
  }
  void write_at(const void* src, std::uint64_t n, std::uint64_t offset) override {
    ++writes;
    put(src, n, offset);
  }
  void write_gathered(const cairn::WritePiece* pieces, std::size_t count, std::uint64_t offset) override {
    if (fail) throw cairn::Error(ErrorKind::io, "disk full (injected)", "blob");
    ++gathered;
    most_pieces = std::max(most_pieces, count);
    for (std::size_t i = 0; i < count; ++i) put(pieces[i].src, pieces[i].n, offset), offset += pieces[i].n;
  }
  void finish(std::uint64_t size) override { bytes.resize(static_cast<std::size_t>(size)); }
};
}  // namespace

TEST_CASE("GatheredWriter: copies and kept bytes in order, gathered into few writes, large values alone") {
  using cairn::detail::GatheredWriter;
  SUBCASE("random appends of every size, copies scrambled after the call, bit-exact") {
    for (int round = 0; round < 4; ++round) {
      RecordingWriter w;
      GatheredWriter g(w);
      std::vector<unsigned char> expected;
      // About 160 MB a round: room for it up front, where growing both copies of it by
      // doubling was most of the case's time (moves into fresh pages).
      expected.reserve(std::size_t{256} << 20);
      w.bytes.reserve(std::size_t{256} << 20);
      std::vector<std::vector<unsigned char>> kept;  // unchanged until finish
      kept.reserve(4000);
      int appends = 0;
      for (int i = 0; i < 3000; ++i) {
        const unsigned pick = static_cast<unsigned>(test::rng()() % 100);
        // Mostly small; some about the copies' buffer, some between it and the size written
        // alone, some larger.
        const std::size_t n = pick < 90   ? static_cast<std::size_t>(test::rng()() % 400)
                              : pick < 94 ? GatheredWriter::copies_bytes - 100 + static_cast<std::size_t>(test::rng()() % 200)
                              : pick < 97 ? static_cast<std::size_t>(300000 + test::rng()() % 600000)
                                          : static_cast<std::size_t>((1u << 20) + test::rng()() % 300000);
        auto bytes = test::random_bits<unsigned char>(n);
        expected.insert(expected.end(), bytes.begin(), bytes.end());
        if (test::rng()() % 2) {
          g.append(bytes.data(), bytes.size());
          std::fill(bytes.begin(), bytes.end(), static_cast<unsigned char>(0xA5));  // the writer took a copy
        } else {
          kept.push_back(std::move(bytes));
          g.append_kept(kept.back().data(), kept.back().size());
        }
        ++appends;
        CHECK(g.size() == expected.size());
      }
      g.finish();
      REQUIRE(w.bytes.size() == expected.size());
      CHECK(w.bytes == expected);
      CHECK(w.gathered + w.writes < appends / 4);
      CHECK(w.most_pieces <= GatheredWriter::max_pieces);
    }
  }
  SUBCASE("5,000 small kept values: about five gathered writes of at most 1,024 pieces; pieces that continue each other join") {
    RecordingWriter w;
    GatheredWriter g(w);
    std::vector<std::vector<unsigned char>> kept;
    std::vector<unsigned char> expected;
    for (int i = 0; i < 5000; ++i) {
      kept.push_back(test::random_bits<unsigned char>(100));
      expected.insert(expected.end(), kept.back().begin(), kept.back().end());
      g.append_kept(kept.back().data(), 50);  // one value in two parts: one piece
      g.append_kept(kept.back().data() + 50, 50);
    }
    g.finish();
    CHECK(w.bytes == expected);
    CHECK(w.writes == 0);
    CHECK(w.gathered == 5);  // 5,000 pieces, 1,024 a write
    CHECK(w.most_pieces == GatheredWriter::max_pieces);
  }
  SUBCASE("a failed write is the caller's error") {
    RecordingWriter w;
    GatheredWriter g(w);
    const auto bytes = test::random_bits<unsigned char>(1000);
    g.append(bytes.data(), bytes.size());
    w.fail = true;
    CHECK_CAIRN_ERROR(g.finish(), ErrorKind::io, "disk full");
  }
}

namespace {
using test::TempDir;

// Everything a store holds that is not staging, with the bytes.
std::map<std::string, std::string> visible_content(const MemoryStore& store) {
  std::map<std::string, std::string> out;
  for (const auto& k : store.keys())
    if (!store.is_internal_name(k)) out[k] = store.bytes(k);
  return out;
}
}  // namespace

TEST_CASE("every read, write, fsync and publish of a save failed in turn: nothing published, the old checkpoint intact") {
  MemoryStore store;
  const auto old_state = test::random_conformance_state();
  cairn::save({store, "ckpt"}, old_state);
  const auto before = visible_content(store);
  auto new_state = test::random_conformance_state();
  new_state.w = test::random_bits<float>(600000);  // large enough for a write of its own
  cairn::SaveOptions overwrite;
  overwrite.overwrite = true;

  // Count the calls of one successful overwrite, on a copy of the store's content.
  std::map<MemoryStore::Op, std::uint64_t> calls;
  {
    MemoryStore probe;
    cairn::save({probe, "ckpt"}, old_state);
    std::map<MemoryStore::Op, std::uint64_t> start;
    for (auto op : {MemoryStore::Op::read, MemoryStore::Op::write, MemoryStore::Op::finish, MemoryStore::Op::publish})
      start[op] = probe.count(op);
    cairn::save({probe, "ckpt"}, new_state, overwrite);
    for (auto& [op, n] : start) calls[op] = probe.count(op) - n;
  }
  CHECK(calls[MemoryStore::Op::write] >= 4);   // data, _METADATA, _USER_METADATA, _CHECKPOINT
  CHECK(calls[MemoryStore::Op::finish] == 4);
  CHECK(calls[MemoryStore::Op::publish] == 1);
  int failures = 0;
  for (const auto& call : calls) {
    // Not a structured binding: CAPTURE takes it into a lambda, which clang 14 refuses for one.
    const MemoryStore::Op op = call.first;
    for (std::uint64_t i = 1; i <= call.second; ++i) {
      for (auto how : {MemoryStore::Failure::error, MemoryStore::Failure::torn_write}) {
        if (how == MemoryStore::Failure::torn_write && op != MemoryStore::Op::write) continue;
        CAPTURE(static_cast<int>(op));
        CAPTURE(i);
        store.fail(op, i, how);
        bool threw = false;
        try {
          cairn::save({store, "ckpt"}, new_state, overwrite);
        } catch (const cairn::Error& e) {
          threw = true;
          CHECK(std::string(e.what()).find("memory://ckpt") != std::string::npos);
        }
        store.clear_failures();
        CHECK(threw);
        failures += threw;
        CHECK(visible_content(store) == before);       // nothing new, nothing lost
        CHECK(store.keys().size() == before.size());   // no staging left behind
        test::check_same(old_state, cairn::load<test::ConformanceState>({store, "ckpt"}));
      }
    }
  }
  CHECK(failures > 6);
  // And without a fault the overwrite goes through.
  cairn::save({store, "ckpt"}, new_state, overwrite);
  test::check_same(new_state, cairn::load<test::ConformanceState>({store, "ckpt"}));
}

TEST_CASE("short reads of every file of a checkpoint are a clear error naming the blob") {
  MemoryStore store;
  auto state = test::random_conformance_state();
  state.w = test::random_bits<float>(300000);
  cairn::save({store, "c"}, state);
  const std::uint64_t start = store.count(MemoryStore::Op::read);
  cairn::load<test::ConformanceState>({store, "c"});
  const std::uint64_t reads = store.count(MemoryStore::Op::read) - start;
  CHECK(reads >= 4);
  for (std::uint64_t i = 1; i <= reads; ++i) {
    CAPTURE(i);
    store.fail(MemoryStore::Op::read, i, MemoryStore::Failure::short_read);
    CHECK_CAIRN_ERROR(cairn::load<test::ConformanceState>({store, "c"}), ErrorKind::corrupt, "memory://c/");
    store.clear_failures();
  }
  test::check_same(state, cairn::load<test::ConformanceState>({store, "c"}));
}

TEST_CASE("the thread coordinator: gather in rank order, broadcast, agreement, many rounds") {
  cairn::ThreadGroup group(4);
  std::vector<std::thread> threads;
  std::vector<int> errors(4, 0);
  for (int r = 0; r < 4; ++r)
    threads.emplace_back([&, r] {
      auto& c = group.rank(r);
      for (int round = 0; round < 50; ++round) {
        auto all = c.gather(std::to_string(r * 100 + round));
        if (r == 0) {
          for (int k = 0; k < 4; ++k) errors[r] += all.at(k) != std::to_string(k * 100 + round);
        } else {
          errors[r] += !all.empty();
        }
        errors[r] += c.broadcast(r == 0 ? "b" + std::to_string(round) : "ignored") != "b" + std::to_string(round);
        errors[r] += c.all_agree(true) != true;
        errors[r] += c.all_agree(r != round % 4) != false;
        c.barrier();
      }
    });
  for (auto& t : threads) t.join();
  CHECK(errors == std::vector<int>(4, 0));
}

namespace {

struct RankState {
  cairn::ShardedArray<float> w;  // 4x2 over a 2x2 mesh, one device per rank
  cairn::ShardedArray<std::int16_t> replicated_rows;  // split over x, replicated over y
  std::vector<double> plain;   // the same on every rank; rank 0 writes it
  std::int64_t step = 0;
};
CAIRN_TREE(RankState, w, replicated_rows, plain, step)

cairn::Mesh rank_mesh(int rank) {
  cairn::Mesh mesh = cairn::Mesh::host({{"x", 2}, {"y", 2}});
  mesh.assign_processes({0, 1, 2, 3}, rank);
  return mesh;
}

RankState rank_state(int rank, const std::vector<float>& w, const std::vector<std::int16_t>& rows,
                     const std::vector<double>& plain) {
  const cairn::Mesh mesh = rank_mesh(rank);
  RankState s;
  s.w = cairn::ShardedArray<float>::from_host(w, {40, 6}, cairn::NamedSharding(mesh, cairn::PartitionSpec{"x", "y"}));
  s.replicated_rows = cairn::ShardedArray<std::int16_t>::from_host(
      rows, {10, 3}, cairn::NamedSharding(mesh, cairn::PartitionSpec{"x", cairn::replicated}));
  s.plain = plain;
  s.step = 77;
  return s;
}

// Runs f(rank, coordinator) on `n` ranks on threads; returns each rank's error ("" for none).
template <class F>
std::vector<std::string> on_ranks(int n, F&& f) {
  cairn::ThreadGroup group(n);
  std::vector<std::string> outcome(static_cast<std::size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      try {
        f(r, group.rank(r));
      } catch (const std::exception& e) {
        outcome[static_cast<std::size_t>(r)] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  return outcome;
}

// Runs save on 4 ranks; returns each rank's error message ("" for success).
template <class MakeState>
std::vector<std::string> save_on_ranks(cairn::Store& store, const std::string& key, MakeState&& make, bool overwrite = false) {
  return on_ranks(4, [&](int r, cairn::Coordinator& c) {
    cairn::SaveOptions options;
    options.coordinator = &c;
    options.overwrite = overwrite;
    options.user_metadata = cairn::Json::object({{"ranks", 4}});
    cairn::save({store, key}, make(r), options);
  });
}

}  // namespace

TEST_CASE("4 ranks save one checkpoint: each writes its shards, rank 0 commits, one process loads it") {
  const auto w = test::random_bits<float>(40 * 6);
  const auto rows = test::random_bits<std::int16_t>(10 * 3);
  const auto plain = test::random_bits<double>(33);
  for (int backend = 0; backend < 2; ++backend) {
    CAPTURE(backend);
    TempDir dir;
    std::shared_ptr<cairn::Store> store;
    if (backend == 0) store = std::make_shared<MemoryStore>();
    else store = std::make_shared<cairn::PosixStore>(dir.path);
    const auto outcome = save_on_ranks(*store, "ckpt", [&](int r) { return rank_state(r, w, rows, plain); });
    CHECK(outcome == std::vector<std::string>(4));
    const auto meta = cairn::metadata({*store, "ckpt"});
    CHECK(meta.data_files == std::vector<std::string>{"data-0-0.bin", "data-1-0.bin", "data-2-0.bin", "data-3-0.bin"});
    CHECK(meta.user_metadata.at("ranks").as_int() == 4);
    // Each box once: 4 chunks of w (one per rank), 2 of the replicated rows (ranks 0 and 2).
    CHECK(meta.leaves().at(0).chunks.size() == 4);
    CHECK(meta.leaves().at(1).chunks.size() == 2);
    for (const auto& c : meta.leaves().at(1).chunks) CHECK((c.file == "data-0-0.bin" || c.file == "data-2-0.bin"));
    // One process restores all of it, bit-exact.
    auto whole = cairn::load<cairn::Array<float>>({*store, "ckpt"}, [] {
      cairn::LoadOptions o;
      o.subtree = "w";
      return o;
    }());
    CHECK(std::memcmp(whole.data(), w.data(), w.size() * sizeof(float)) == 0);
    RankState back;
    back.w = cairn::ShardedArray<float>(cairn::NamedSharding(cairn::Mesh::host({{"x", 3}}), cairn::PartitionSpec{"x"}));
    back.replicated_rows = cairn::ShardedArray<std::int16_t>(
        cairn::NamedSharding(cairn::Mesh::host({{"x", 2}}), cairn::PartitionSpec{cairn::replicated, "x"}));
    cairn::load({*store, "ckpt"}, back);
    CHECK(back.step == 77);
    CHECK(std::memcmp(back.plain.data(), plain.data(), plain.size() * sizeof(double)) == 0);
    const auto got_w = back.w.gather();
    const auto got_rows = back.replicated_rows.gather();
    CHECK(std::memcmp(got_w.data(), w.data(), w.size() * sizeof(float)) == 0);
    CHECK(std::memcmp(got_rows.data(), rows.data(), rows.size() * sizeof(std::int16_t)) == 0);
  }
}

TEST_CASE("4 ranks save, one fails: nobody publishes, every rank throws, the earlier checkpoint stays") {
  const auto w = test::random_bits<float>(40 * 6);
  const auto rows = test::random_bits<std::int16_t>(10 * 3);
  const auto plain = test::random_bits<double>(5);
  MemoryStore store;
  REQUIRE(save_on_ranks(store, "ckpt", [&](int r) { return rank_state(r, w, rows, plain); }) ==
          std::vector<std::string>(4));
  const auto before = visible_content(store);
  const auto w2 = test::random_bits<float>(40 * 6);
  // Rank 2 holds an array without a sharding: its leaf cannot be saved.
  auto outcome = save_on_ranks(store, "ckpt", [&](int r) {
    RankState s = rank_state(r, w2, rows, plain);
    if (r == 2) s.w = cairn::ShardedArray<float>();
    return s;
  }, true);
  for (int r = 0; r < 4; ++r) {
    CAPTURE(r);
    CHECK(!outcome[static_cast<std::size_t>(r)].empty());
  }
  CHECK(outcome[2].find("cannot be saved") != std::string::npos);
  CHECK(outcome[0].find("rank 2 failed") != std::string::npos);
  CHECK(outcome[1] == outcome[0]);  // the same outcome everywhere else
  CHECK(visible_content(store) == before);
  // The primary's own failure (staging onto an existing checkpoint without overwrite) reaches
  // the others named as rank 0's.
  {
    const auto refused = save_on_ranks(store, "ckpt", [&](int r) { return rank_state(r, w2, rows, plain); }, false);
    CHECK(refused[0].find("already exists") != std::string::npos);
    for (int r = 1; r < 4; ++r) CHECK(refused[static_cast<std::size_t>(r)].find("rank 0 failed: ") != std::string::npos);
  }
  CHECK(store.keys().size() == before.size());  // every rank's staged file removed
  // A rank whose tree differs from rank 0's is refused the same way.
  outcome = save_on_ranks(store, "ckpt", [&](int r) {
    std::map<std::string, std::vector<float>> tree{{"a", {1.f}}, {"b", {2.f}}};
    if (r == 3) tree["c"] = {3.f};
    return tree;
  }, true);
  for (const auto& o : outcome) CHECK(o.find("every rank must save the same tree") != std::string::npos);
  CHECK(visible_content(store) == before);
  // A rank whose sharding differs from the others' (its boxes would overlap theirs): named,
  // with both specs, before any record is merged.
  outcome = save_on_ranks(store, "ckpt", [&](int r) {
    RankState s = rank_state(r, w2, rows, plain);
    if (r == 1)
      s.w = cairn::ShardedArray<float>::from_host(w2, {40, 6}, cairn::NamedSharding(rank_mesh(r), cairn::PartitionSpec{"y", "x"}));
    return s;
  }, true);
  for (const auto& o : outcome) {
    CHECK_MESSAGE(o.find("PartitionSpec('x', 'y')") != std::string::npos, o);
    CHECK_MESSAGE(o.find("PartitionSpec('y', 'x')") != std::string::npos, o);
    CHECK(o.find("on rank 1: every rank must save the same tree") != std::string::npos);
  }
  CHECK(visible_content(store) == before);
  // An injected failure of one rank's write.
  store.fail(MemoryStore::Op::finish, 2);
  outcome = save_on_ranks(store, "ckpt", [&](int r) { return rank_state(r, w2, rows, plain); }, true);
  store.clear_failures();
  for (const auto& o : outcome) CHECK(o.find("fsync failed (injected)") != std::string::npos);
  CHECK(visible_content(store) == before);
}


TEST_CASE("4 ranks with ReplicaWrites::split: each holder writes a slab of a replicated box, loads bit-exact") {
  const auto w = test::random_bits<float>(40 * 6);
  const auto rows = test::random_bits<std::int16_t>(10 * 3);
  const auto plain = test::random_bits<double>(7);
  MemoryStore store;
  const auto outcome = on_ranks(4, [&](int r, cairn::Coordinator& c) {
    cairn::save({store, "ckpt"}, rank_state(r, w, rows, plain), {.coordinator = &c, .replicas = cairn::ReplicaWrites::split});
  });
  CHECK(outcome == std::vector<std::string>(4));
  const auto meta = cairn::metadata({store, "ckpt"});
  CHECK(meta.leaves().at(0).chunks.size() == 4);  // w has no replicas: as before
  // rows: 2 boxes of 5x3, each held by 2 processes: 4 slabs, each written by its own rank.
  const auto& chunks = meta.leaves().at(1).chunks;
  REQUIRE(chunks.size() == 4);
  std::set<std::string> files;
  for (const auto& c : chunks) files.insert(c.file);
  CHECK(files.size() == 4);
  RankState back;
  back.w = cairn::ShardedArray<float>(cairn::NamedSharding(cairn::Mesh::host({{"x", 1}}), cairn::PartitionSpec{}));
  back.replicated_rows = cairn::ShardedArray<std::int16_t>(
      cairn::NamedSharding(cairn::Mesh::host({{"x", 3}}), cairn::PartitionSpec{"x"}));
  cairn::load({store, "ckpt"}, back);
  const auto got = back.replicated_rows.gather();
  CHECK(std::memcmp(got.data(), rows.data(), rows.size() * sizeof(std::int16_t)) == 0);
}

TEST_CASE("ReplicaWrites::split reaches the Checkpointer: its steps are written in slabs too") {
  const auto w = test::random_bits<float>(40 * 6);
  const auto rows = test::random_bits<std::int16_t>(10 * 3);
  const auto plain = test::random_bits<double>(7);
  auto store = std::make_shared<MemoryStore>();
  const auto outcome = on_ranks(4, [&](int r, cairn::Coordinator& c) {
    cairn::CheckpointerOptions options;
    options.coordinator = &c;
    cairn::Checkpointer ckptr({store, "run"}, options);
    cairn::StepSaveOptions args;
    args.save.replicas = cairn::ReplicaWrites::split;
    ckptr.save(5, rank_state(r, w, rows, plain), args);
  });
  CHECK(outcome == std::vector<std::string>(4));
  const auto meta = cairn::metadata({*store, "run/5"});
  REQUIRE(meta.leaves().at(1).chunks.size() == 4);  // rows: 2 boxes, each in 2 slabs (one chunk each before)
  RankState back;
  back.w = cairn::ShardedArray<float>(cairn::NamedSharding(cairn::Mesh::host({{"x", 1}}), cairn::PartitionSpec{}));
  back.replicated_rows = cairn::ShardedArray<std::int16_t>(
      cairn::NamedSharding(cairn::Mesh::host({{"x", 3}}), cairn::PartitionSpec{"x"}));
  cairn::load({*store, "run/5"}, back);
  const auto got = back.replicated_rows.gather();
  CHECK(std::memcmp(got.data(), rows.data(), rows.size() * sizeof(std::int16_t)) == 0);
}

TEST_CASE("ranks whose meshes disagree: nothing is committed, and the message names each chunk's file and box") {
  MemoryStore store;
  const cairn::Shape shape{8, 2};
  const std::vector<float> all(16, 1.0f);
  const auto outcome = on_ranks(2, [&](int r, cairn::Coordinator& c) {
    cairn::Mesh mesh = cairn::Mesh::host({{"x", 2}});
    mesh.assign_processes(r == 0 ? std::vector<int>{0, 1} : std::vector<int>{1, 0}, r);  // each thinks it holds rows 0:4
    const auto a = cairn::ShardedArray<float>::from_host(all, shape, cairn::NamedSharding(mesh, cairn::PartitionSpec{"x"}));
    cairn::SaveOptions options;
    options.coordinator = &c;
    cairn::save({store, "ckpt"}, a, options);
  });
  for (const auto& o : outcome) {
    CAPTURE(o);
    CHECK(o.find("the ranks' parts do not fit together") != std::string::npos);
    CHECK(o.find("(in data-0-0.bin, start [0, 0], shape [4, 2])") != std::string::npos);
    CHECK(o.find("(in data-1-0.bin, start [0, 0], shape [4, 2])") != std::string::npos);
  }
  CHECK(!store.exists("ckpt"));
}

TEST_CASE("ranks whose trees differ only in shapes: nothing is committed, every rank names the leaf and both shapes") {
  // The sharded leaf's mesh gives rank 1 the first rows: its own box is [0:501) whether the
  // array has 1001 rows or 1002, so the boxes alone fit together.
  auto make = [](int r, std::int64_t m_cols, std::int64_t w_rows) {
    cairn::Mesh mesh = cairn::Mesh::host({{"x", 2}});
    mesh.assign_processes({1, 0}, r);
    const cairn::Shape shape{w_rows, 37};
    std::vector<float> all(static_cast<std::size_t>(cairn::element_count(shape)), static_cast<float>(r));
    return std::make_tuple(Eigen::MatrixXf(Eigen::MatrixXf::Constant(13, m_cols, 1.0f)),
                           cairn::ShardedArray<float>::from_host(all, shape, cairn::NamedSharding(mesh, cairn::PartitionSpec{"x"})));
  };
  MemoryStore store;
  struct Case { std::int64_t cols1, rows1; std::string key, needle; };
  for (const Case& k : {Case{8, 1002, "0", "'0' is float32[13, 7] (column-major) on rank 0 but float32[13, 8] (column-major) on rank 1"},
                        Case{7, 1001, "1", "'1' is float32[1002, 37] (sharded as PartitionSpec('x') over {x: 2} on host) on rank 0 but float32[1001, 37]"}}) {
    CAPTURE(k.needle);
    const auto outcome = on_ranks(2, [&](int r, cairn::Coordinator& c) {
      cairn::save({store, "ckpt"}, r == 1 ? make(r, k.cols1, k.rows1) : make(r, 7, 1002), {.coordinator = &c});
    });
    for (const auto& o : outcome) {
      CHECK_MESSAGE(o.find(k.needle) != std::string::npos, o);
      CHECK(o.find("every rank must save the same tree") != std::string::npos);
      CHECK(o.find("on rank 1") != std::string::npos);
    }
    CHECK(outcome[0] == outcome[1]);
    CHECK(!store.exists("ckpt"));
  }
  // The same trees save.
  const auto outcome = on_ranks(2, [&](int r, cairn::Coordinator& c) { cairn::save({store, "ckpt"}, make(r, 7, 1002), {.coordinator = &c}); });
  CHECK(outcome == std::vector<std::string>(2));
}

TEST_CASE("per-rank items on 3 ranks: each rank's value comes back to it; 2 ranks are refused") {
  MemoryStore store;
  auto outcome = on_ranks(3, [&](int r, cairn::Coordinator& c) {
    std::vector<std::int64_t> position = {r * 10, r * 10 + 1};
    cairn::Json note = cairn::Json::object({{"rank", r}});
    const std::vector<float> shared = {1, 2, 3};
    cairn::save({store, "ckpt"}, cairn::Items().tree("shared", shared).tree("position", position, cairn::per_rank)
                                   .json("note", note, cairn::per_rank), {.coordinator = &c});
  });
  REQUIRE(outcome == std::vector<std::string>(3));
  const auto meta = cairn::metadata({store, "ckpt"});
  for (const char* name : {"shared", "position@0", "position@1", "position@2", "note@0", "note@2"})
    CHECK(meta.find_item(name) != nullptr);
  outcome = on_ranks(3, [&](int r, cairn::Coordinator& c) {
    std::vector<std::int64_t> position;
    cairn::Json note;
    cairn::LoadOptions o;
    o.coordinator = &c;
    cairn::load({store, "ckpt"}, cairn::Items().tree("position", position, cairn::per_rank).json("note", note, cairn::per_rank), o);
    if (position != std::vector<std::int64_t>{r * 10, r * 10 + 1} || note.at("rank").as_int() != r)
      throw std::runtime_error("rank " + std::to_string(r) + " got another rank's value");
  });
  CHECK(outcome == std::vector<std::string>(3));
  outcome = on_ranks(2, [&](int, cairn::Coordinator& c) {
    std::vector<std::int64_t> position;
    cairn::LoadOptions o;
    o.coordinator = &c;
    cairn::load({store, "ckpt"}, cairn::Items().tree("position", position, cairn::per_rank), o);
  });
  for (const auto& o : outcome) CHECK(o.find("saved per rank by 3 ranks and is loaded by 2") != std::string::npos);
  // One process reads one rank's value by its stored name.
  std::vector<std::int64_t> one;
  cairn::load({store, "ckpt"}, cairn::Items().tree("position@1", one));
  CHECK(one == std::vector<std::int64_t>{10, 11});
  CHECK_THROWS_WITH_AS(cairn::Items().tree("a@b", one, cairn::per_rank), doctest::Contains("may not hold '@'"), cairn::Error);
}

TEST_CASE("a Checkpointer across 3 ranks on threads: same decisions and steps, async commits from wait(), retention") {
  auto store = std::make_shared<MemoryStore>();
  const auto plain = test::random_bits<double>(9);
  std::vector<std::vector<std::int64_t>> steps_seen(3);
  auto outcome = on_ranks(3, [&](int r, cairn::Coordinator& c) {
    cairn::CheckpointerOptions options;
    options.coordinator = &c;
    options.save_policy = cairn::SavePolicy::every_n_steps(3);
    options.retention = cairn::RetentionPolicy::keep_latest(2);
    options.async_memory_budget = 64;  // leaves larger than this stream from the caller's memory
    cairn::Checkpointer ckptr({store, "run"}, options);
    for (std::int64_t step = 0; step < 12; ++step) {
      std::vector<double> state = plain;
      state[0] = static_cast<double>(step);
      std::int64_t mine = step * 100 + r;
      cairn::Items items;
      items.tree("state", state).tree("mine", mine, cairn::per_rank);
      const bool saved = step % 2 ? ckptr.save_async(step, items) : ckptr.save(step, items).has_value();
      if (saved != (step % 3 == 0)) throw std::runtime_error("the save policy answered differently");
    }
    ckptr.wait();
    steps_seen[static_cast<std::size_t>(r)] = ckptr.steps();
    std::vector<double> back;
    std::int64_t mine = -1;
    ckptr.load(cairn::Items().tree("state", back).tree("mine", mine, cairn::per_rank));
    if (back.at(0) != 9 || mine != 900 + r) throw std::runtime_error("resumed the wrong values");
  });
  CHECK(outcome == std::vector<std::string>(3));
  for (const auto& s : steps_seen) CHECK(s == std::vector<std::int64_t>{6, 9});
  CHECK(!cairn::detail::is_committed_checkpoint(*store, "run/3"));
  // A rank whose async write fails: the commit in wait() fails on every rank, nothing published.
  store->fail(MemoryStore::Op::finish, 1);  // rank 0's data file, in the background
  outcome = on_ranks(3, [&](int, cairn::Coordinator& c) {
    cairn::CheckpointerOptions options;
    options.coordinator = &c;
    cairn::Checkpointer ckptr({store, "run"}, options);
    std::vector<double> state = plain;
    ckptr.save_async(12, state);
    ckptr.wait();
  });
  store->clear_failures();
  for (const auto& o : outcome) CHECK(o.find("fsync failed (injected)") != std::string::npos);
  CHECK(!cairn::detail::is_committed_checkpoint(*store, "run/12"));
  CHECK(cairn::detail::is_committed_checkpoint(*store, "run/9"));
}

TEST_CASE("for_each_index: every index once, on up to N threads; the lowest index's exception after all ended") {
  for (const int threads : {1, 3, 16}) {
    CAPTURE(threads);
    std::vector<std::atomic<int>> hits(50);
    cairn::detail::for_each_index(hits.size(), threads, [&](std::size_t i) { ++hits[i]; });
    for (auto& h : hits) CHECK(h.load() == 1);
    std::atomic<int> ran{0};
    try {
      cairn::detail::for_each_index(20, threads, [&](std::size_t i) {
        ++ran;
        if (i == 7 || i == 12) throw std::runtime_error("failed at " + std::to_string(i));
      });
      FAIL("no exception");
    } catch (const std::runtime_error& e) {
      CHECK(std::string(e.what()) == "failed at 7");
    }
    // In order on one thread, a plain loop: stopped at the first; else every index ran.
    CHECK(ran.load() == (threads == 1 ? 8 : 20));
  }
  cairn::detail::for_each_index(0, 8, [](std::size_t) { FAIL("called for nothing"); });
}

namespace {

struct ManyRanks {
  cairn::ShardedArray<float> w;
};
CAIRN_TREE(ManyRanks, w)
struct ManyRanksOnHost {
  std::vector<float> w;
};
CAIRN_TREE(ManyRanksOnHost, w)

}  // namespace

// A checkpoint holds a data file per rank: one saved by more ranks than a process may open
// files (1,024 is the usual limit, and jobs run on thousands of ranks) failed to load in one
// process with "Too many open files", as it kept every file open. A load keeps at most a
// quarter of the limit open, and opens a file again when it reads it again.
TEST_CASE("a checkpoint of more data files than the open-file limit loads, verifies and converts in one process") {
  TempDir dir;
  constexpr int n = 120;
  const auto w = test::random_bits<float>(static_cast<std::size_t>(n) * 5);
  std::vector<int> processes(n);
  for (int r = 0; r < n; ++r) processes[static_cast<std::size_t>(r)] = r;
  const auto outcome = on_ranks(n, [&](int r, cairn::Coordinator& c) {
    cairn::Mesh mesh = cairn::Mesh::host({{"x", n}});
    mesh.assign_processes(processes, r);
    ManyRanks s;
    s.w = cairn::ShardedArray<float>::from_host(w, {n * 5}, cairn::NamedSharding(mesh, cairn::PartitionSpec{"x"}));
    cairn::SaveOptions o;
    o.coordinator = &c;
    cairn::save(dir / "ckpt", s, o);
  });
  REQUIRE(outcome == std::vector<std::string>(n));
  REQUIRE(cairn::metadata(dir / "ckpt").data_files.size() == static_cast<std::size_t>(n));
  std::string failed;
  ManyRanksOnHost back;
  cairn::VerifyReport v;
  {
    test::LowFileLimit low(40);  // files kept open: 16 at most (a quarter of the limit, at least 16)
    try {
      back = cairn::load<ManyRanksOnHost>(dir / "ckpt");
      v = cairn::verify(cairn::Location(dir / "ckpt"));
      cairn::convert(dir / "ckpt", dir / "copy");
    } catch (const std::exception& e) {
      failed = e.what();
    }
  }
  CHECK(failed == "");
  CHECK(test::same_bits(back.w, w));
  CHECK(v.ok());
  CHECK(v.chunks == static_cast<std::uint64_t>(n));
  CHECK(test::same_bits(cairn::load<ManyRanksOnHost>(dir / "copy").w, w));
}

// A data file closed to make room and opened again is checked to be the file it was: one of
// another size (replaced meanwhile) is refused, naming it.
TEST_CASE("a data file opened again after it was closed to make room must still be the size it was") {
  TempDir dir;
  cairn::PosixStore store(dir.path);
  for (int i = 0; i < 40; ++i) cairn::detail::write_blob(store, "f" + std::to_string(i), std::string(100 + i, 'a'));
  test::LowFileLimit low(20);
  cairn::detail::DataFiles files(store, "");
  const cairn::StoreReader& first = files.get("f0");
  CHECK(first.size() == 100);
  std::string buf(100, '\0');
  first.read_at(buf.data(), 100, 0);
  for (int i = 1; i < 40; ++i) CHECK(files.get("f" + std::to_string(i)).size() == 100u + static_cast<unsigned>(i));
  first.read_at(buf.data(), 100, 0);  // opened again (closed to make room): the same file
  CHECK(buf == std::string(100, 'a'));
  for (int i = 1; i < 40; ++i) files.get("f" + std::to_string(i)).read_at(buf.data(), 1, 0);
  std::filesystem::remove(dir / "f0");
  cairn::detail::write_blob(store, "f0", std::string(99, 'b'));
  CHECK_CAIRN_ERROR(first.read_at(buf.data(), 10, 0), ErrorKind::corrupt, "the file changed while it was read");
}
