// SPDX-License-Identifier: Apache-2.0
// cairn-bench-mpi: multi-process save and load under mpiexec, beside the same ranks doing a
// plain write+fsync and read of the same bytes in the same run; the coordination phase of a
// save (everything but the ranks' own writes) as ranks and chunks grow; and the metadata
// read on every rank against the primary's read and broadcast. See docs/benchmarks.md.
//
//   mpiexec -n 4 cairn-bench-mpi --bytes 1G --dir /tmp/cairn-bench-mpi
//   mpiexec -n 16 cairn-bench-mpi --chunks 100000
#include <cairn/mpi.hpp>

#include "bench_util.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include <fcntl.h>
#include <unistd.h>

namespace {
using bench::evict;
using bench::evict_tree;
using bench::median;
using bench::now_s;
using bench::parse_bytes;

// The slowest rank's time of f: every rank starts together, the job is done when the last is.
template <class F>
double timed(MPI_Comm comm, F&& f) {
  MPI_Barrier(comm);
  const double t0 = now_s();
  f();
  double t = now_s() - t0, slowest = 0;
  MPI_Allreduce(&t, &slowest, 1, MPI_DOUBLE, MPI_MAX, comm);
  return slowest;
}

// A save through the commit protocol's own steps, timed: the whole save (slowest rank) and
// its coordination alone (staging, then after every rank's data is durable: the gather, the
// merge, the metadata and the commit; slowest rank).
template <class T>
std::pair<double, double> timed_save(cairn::Store& store, const std::string& key, const T& tree, cairn::MpiCoordinator& coord) {
  MPI_Comm comm = coord.communicator();
  double stage = 0, commit = 0;
  const double whole = timed(comm, [&] {
    double t0 = now_s();
    cairn::detail::SaveSession session(store, key, true, coord);
    stage = now_s() - t0;
    session.add_item(cairn::detail::view_tree("state", tree), {});
    session.finish_writes();
    MPI_Barrier(comm);
    t0 = now_s();
    session.commit(cairn::Json::object(), cairn::detail::now_unix_ms());
    commit = now_s() - t0;
  });
  double mine = stage + commit, slowest = 0;
  MPI_Allreduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, comm);
  return {whole, slowest};
}

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  std::uint64_t bytes = std::uint64_t{1} << 30;
  std::uint64_t chunks = 0;
  std::string dir = "/tmp/cairn-bench-mpi";
  int repeat = 3;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--bytes" && i + 1 < argc) bytes = parse_bytes(argv[++i]);
    else if (a == "--chunks" && i + 1 < argc) chunks = std::stoull(argv[++i]);
    else if (a == "--dir" && i + 1 < argc) dir = argv[++i];
    else if (a == "--repeat" && i + 1 < argc) repeat = std::stoi(argv[++i]);
  }
  int rc = 0;
  try {
    cairn::MpiCoordinator coord(MPI_COMM_WORLD);
    const int rank = coord.rank(), ranks = coord.size();
    MPI_Comm comm = coord.communicator();
    if (rank == 0) std::filesystem::create_directories(dir);
    MPI_Barrier(comm);
    cairn::PosixStore store;

    if (chunks == 0) {
      // One float32 array of `bytes`, rows split over the ranks: each writes and reads 1/N.
      const std::int64_t cols = 1024;
      const std::int64_t rows = static_cast<std::int64_t>(bytes / 4 / cols) / ranks * ranks;
      const cairn::NamedSharding sh(cairn::Mesh::host_per_process({{"x", ranks}}, 1, rank), cairn::PartitionSpec{"x"});
      cairn::ShardedArray<float> a({rows, cols}, sh);
      auto& shard = a.shards().at(0);
      std::vector<float> values(shard.size());
      for (std::size_t k = 0; k < values.size(); ++k) values[k] = static_cast<float>(k % 1000) * 0.5f + static_cast<float>(rank);
      shard.from_host(values.data());
      const std::uint64_t mine = shard.size() * sizeof(float), total = static_cast<std::uint64_t>(rows * cols) * 4;
      std::vector<double> raw_w, raw_r, save, load, coordination;
      for (int rep = 0; rep < repeat; ++rep) {
        const std::string raw = dir + "/raw-" + std::to_string(rank), ckpt = dir + "/ckpt";
        ::sync();
        raw_w.push_back(timed(comm, [&] {
          const int fd = ::open(raw.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
          const char* p = reinterpret_cast<const char*>(shard.data());
          for (std::uint64_t off = 0; off < mine;) {
            const ssize_t n = ::pwrite(fd, p + off, std::min<std::uint64_t>(mine - off, 64 << 20), static_cast<off_t>(off));
            if (n <= 0) throw cairn::Error(cairn::ErrorKind::io, "pwrite failed", raw);
            off += static_cast<std::uint64_t>(n);
          }
          ::fsync(fd);
          ::close(fd);
        }));
        // As in cairn-bench: the previous output is deleted (and synced) outside the timing.
        if (rank == 0) std::filesystem::remove_all(ckpt);
        ::sync();
        const auto [whole, coordinating] = timed_save(store, ckpt, a, coord);
        save.push_back(whole);
        coordination.push_back(coordinating);
        evict(raw);
        if (rank == 0) evict_tree(ckpt);
        MPI_Barrier(comm);
        std::vector<char> back(mine);
        raw_r.push_back(timed(comm, [&] {
          const int fd = ::open(raw.c_str(), O_RDONLY);
          for (std::uint64_t off = 0; off < mine;) {
            const ssize_t n = ::pread(fd, back.data() + off, std::min<std::uint64_t>(mine - off, 64 << 20), static_cast<off_t>(off));
            if (n <= 0) throw cairn::Error(cairn::ErrorKind::io, "pread failed", raw);
            off += static_cast<std::uint64_t>(n);
          }
          ::close(fd);
        }));
        cairn::ShardedArray<float> target({rows, cols}, sh);  // allocated, as the raw read's buffer is
        load.push_back(timed(comm, [&] { cairn::load(ckpt, target, {.coordinator = &coord}); }));
        if (std::memcmp(target.shards().at(0).data(), values.data(), mine) != 0)
          throw cairn::Error(cairn::ErrorKind::corrupt, "the loaded shard differs", ckpt);
        ::unlink(raw.c_str());
      }
      if (rank == 0) {
        const double gib = static_cast<double>(total) / (1 << 30);
        std::printf("cairn-bench-mpi: %d ranks, float32[%lld, %lld] (%.2f GiB, %.2f GiB a rank) in %s, median of %d, cold reads\n",
                    ranks, static_cast<long long>(rows), static_cast<long long>(cols), gib, gib / ranks, dir.c_str(), repeat);
        std::printf("  write+fsync  %7.3f s  %6.2f GiB/s\n", median(raw_w), gib / median(raw_w));
        std::printf("  cairn save   %7.3f s  %6.2f GiB/s  (%.2fx the raw write)\n", median(save), gib / median(save),
                    median(raw_w) / median(save));
        std::printf("  coordination %7.3f s  (%.1f%% of the save)\n", median(coordination), 100 * median(coordination) / median(save));
        std::printf("  read         %7.3f s  %6.2f GiB/s\n", median(raw_r), gib / median(raw_r));
        std::printf("  cairn load   %7.3f s  %6.2f GiB/s  (%.2fx the raw read)\n", median(load), gib / median(load),
                    median(raw_r) / median(load));
      }
    } else {
      // The coordination phase: many small leaves, each split over every rank's devices, so
      // the chunk records are many and the bytes few. Timed on its own: staging, then (after
      // every rank's data is durable) the gather, the merge, the metadata and the commit.
      const int per = std::max(1, static_cast<int>(std::min<std::uint64_t>(64, chunks / static_cast<std::uint64_t>(ranks) / 16)));
      const std::int64_t devices = static_cast<std::int64_t>(ranks) * per;
      const std::size_t leaves = static_cast<std::size_t>((chunks + static_cast<std::uint64_t>(devices) - 1) / static_cast<std::uint64_t>(devices));
      const cairn::NamedSharding sh(cairn::Mesh::host_per_process({{"x", devices}}, per, rank), cairn::PartitionSpec{"x"});
      std::map<std::string, cairn::ShardedArray<float>> state;
      for (std::size_t l = 0; l < leaves; ++l) state.emplace("leaf" + std::to_string(l), cairn::ShardedArray<float>({devices * 16}, sh));
      std::vector<double> whole, coordination, meta_every, meta_primary;
      for (int rep = 0; rep < repeat; ++rep) {
        const std::string ckpt = dir + "/chunks";
        if (rank == 0) std::filesystem::remove_all(ckpt);
        ::sync();
        const auto [all, coordinating] = timed_save(store, ckpt, state, coord);
        whole.push_back(all);
        coordination.push_back(coordinating);
        // The metadata: read by every rank at once, or by the primary and broadcast.
        meta_every.push_back(timed(comm, [&] { (void)cairn::metadata({store, ckpt}); }));
        meta_primary.push_back(timed(comm, [&] { (void)cairn::detail::open_checkpoint(store, ckpt, &coord); }));
      }
      if (rank == 0) {
        const auto m = cairn::metadata({store, dir + "/chunks"});
        std::size_t n = 0;
        for (const auto& l : m.leaves()) n += l.chunks.size();
        const auto meta_bytes = std::filesystem::file_size(dir + "/chunks/_METADATA");
        std::printf("cairn-bench-mpi --chunks: %d ranks, %zu leaves, %zu chunks, _METADATA %.1f MiB, median of %d\n", ranks,
                    leaves, n, static_cast<double>(meta_bytes) / (1 << 20), repeat);
        std::printf("  save             %7.3f s\n", median(whole));
        std::printf("  coordination     %7.3f s  (%.1f%% of the save)\n", median(coordination),
                    100 * median(coordination) / median(whole));
        std::printf("  metadata, every rank reads        %7.3f s\n", median(meta_every));
        std::printf("  metadata, primary reads, bcast    %7.3f s\n", median(meta_primary));
      }
    }
    MPI_Barrier(comm);
    if (rank == 0) std::filesystem::remove_all(dir);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cairn-bench-mpi: %s\n", e.what());
    rc = 1;
  }
  MPI_Finalize();
  return rc;
}
