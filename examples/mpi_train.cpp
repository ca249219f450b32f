// SPDX-License-Identifier: Apache-2.0
// A data- and model-parallel training loop over MPI that checkpoints asynchronously and
// resumes on any number of ranks. The weights and their momentum are sharded over a mesh
// {"data": ranks/2, "model": 2} (rows of the weights split over "model", replicated over
// "data"); each data-parallel rank computes the gradient of its half of the batch, and the
// halves are summed over the data axis. Each rank's data-iterator position is a per-rank item.
//
//   mpiexec -n 4 ./mpi_train --dir /tmp/run --steps 40     # kill it at any moment, then
//   mpiexec -n 2 ./mpi_train --dir /tmp/run --steps 40     # resume on 2 ranks
//   ./mpi_train --dir /tmp/run --digest                    # one process: the final weights' digest
//
// The update is elementwise and the two half-batch gradients are summed in a fixed order, so
// the final weights are bit-identical however many ranks ran which steps (tests/mpi_train_kill.sh
// checks this under repeated SIGKILLs).
#include <cairn/mpi.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

struct Weights {
  cairn::ShardedArray<float> w, momentum;
  std::int64_t step = 0;
};
CAIRN_TREE(Weights, w, momentum, step)

// Where this rank's data iterator stands (a cereal object, saved per rank).
struct DataIterator {
  std::int64_t next_sample = 0;
  template <class A> void serialize(A& ar) { ar(next_sample); }
};

namespace {
constexpr std::int64_t kRows = 256, kCols = 64;

// The pseudo-gradient of sample `s` at weight (i, j): a hash, so that it needs no data files.
float gradient(std::int64_t s, std::int64_t i, std::int64_t j, float w) {
  std::uint64_t h = static_cast<std::uint64_t>(s) * 0x9E3779B97F4A7C15ull ^ static_cast<std::uint64_t>(i * kCols + j);
  h ^= h >> 29;
  h *= 0xBF58476D1CE4E5B9ull;
  h ^= h >> 32;
  return 0.01f * w + static_cast<float>(h % 2001) / 1000.0f - 1.0f;
}

std::uint64_t fnv1a(const void* p, std::size_t n) {
  std::uint64_t h = 1469598103934665603ull;
  for (std::size_t i = 0; i < n; ++i) h = (h ^ static_cast<const unsigned char*>(p)[i]) * 1099511628211ull;
  return h;
}
}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  std::string dir = "/tmp/cairn-mpi-train";
  std::int64_t steps = 40, step_ms = 0;
  bool digest = false, quiet = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--dir" && i + 1 < argc) dir = argv[++i];
    else if (a == "--steps" && i + 1 < argc) steps = std::stoll(argv[++i]);
    else if (a == "--step-ms" && i + 1 < argc) step_ms = std::stoll(argv[++i]);
    else if (a == "--digest") digest = true;
    else if (a == "--quiet") quiet = true;
  }
  if (digest) {  // one process, no MPI: the latest checkpoint's weights, whole
    cairn::Checkpointer ckptr(dir);
    Weights final_state;
    ckptr.load(final_state);
    const auto w = final_state.w.gather();
    std::printf("step %lld digest %016llx\n", static_cast<long long>(final_state.step),
                static_cast<unsigned long long>(fnv1a(w.data(), w.size() * sizeof(float))));
    return 0;
  }

  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);  // cairn calls MPI on this thread only
  int rc = 0;
  try {
    cairn::MpiCoordinator coord(MPI_COMM_WORLD);
    const int rank = coord.rank(), ranks = coord.size();
    const int model = ranks >= 2 ? 2 : 1, data = ranks / model;
    if (data * model != ranks) throw cairn::Error(cairn::ErrorKind::invalid_argument, "run on 1 or an even number of ranks");
    // Rank r sits at mesh position r: data coordinate r / model, model coordinate r % model.
    const cairn::Mesh mesh = cairn::Mesh::host_per_process({{"data", data}, {"model", model}}, 1, rank);
    const cairn::NamedSharding rows_over_model(mesh, cairn::PartitionSpec{"model", cairn::replicated});
    const int data_index = rank / model;
    // The ranks holding the same rows (one per data index) sum their gradients.
    MPI_Comm same_rows;
    MPI_Comm_split(MPI_COMM_WORLD, rank % model, data_index, &same_rows);

    cairn::CheckpointerOptions options;
    options.coordinator = &coord;
    options.save_policy = cairn::SavePolicy::every_n_steps(5);
    options.retention = cairn::RetentionPolicy::keep_latest(3);
    cairn::Checkpointer ckptr(dir, options);

    Weights state;
    state.w = cairn::ShardedArray<float>({kRows, kCols}, rows_over_model);
    state.momentum = cairn::ShardedArray<float>({kRows, kCols}, rows_over_model);
    for (auto& s : state.w.shards()) {
      std::vector<float> init(s.size());
      for (std::size_t k = 0; k < init.size(); ++k) init[k] = std::sin(static_cast<float>(k + s.box().start[0] * kCols));
      s.from_host(init.data());
    }
    DataIterator it;
    if (auto latest = ckptr.latest()) {
      // Onto this run's mesh, whatever the mesh of the run that saved it. The iterator comes
      // back to its rank when the rank count is the same; otherwise it is re-derived.
      cairn::LoadOptions lo;
      lo.allow_missing = true;
      const auto reports = ckptr.load(cairn::Items().tree("state", state).object("iterator", it, cairn::per_rank), lo);
      if (!reports.at(1).second.missing.empty()) it.next_sample = state.step * 2 + data_index;
      if (rank == 0 && !quiet)
        std::printf("resuming from step %lld on %d ranks%s\n", static_cast<long long>(*latest), ranks,
                    reports.at(1).second.missing.empty() ? "" : " (data iterators re-derived: saved by another rank count)");
    } else {
      it.next_sample = data_index;
    }

    for (std::int64_t step = state.step; step < steps; ++step) {
      // Each data-parallel rank takes the samples of its half of the batch (2 samples a step).
      auto& w = state.w.shards().at(0);
      auto& m = state.momentum.shards().at(0);
      std::vector<float> wv = w.to_host(), mv = m.to_host(), g(wv.size(), 0.0f), halves[2];
      for (int half = 0; half < 2; ++half) halves[half].assign(wv.size(), 0.0f);
      for (int half = 0; half < 2; ++half) {
        if (data == 2 && half != data_index) continue;
        const std::int64_t sample = step * 2 + half;
        for (std::size_t k = 0; k < wv.size(); ++k) {
          const std::int64_t i = w.box().start[0] + static_cast<std::int64_t>(k) / kCols, j = static_cast<std::int64_t>(k) % kCols;
          halves[half][k] = gradient(sample, i, j, wv[k]);
        }
      }
      if (data == 2) {  // the other half from the other data-parallel rank: a + b == b + a exactly
        MPI_Allreduce(MPI_IN_PLACE, halves[data_index].data(), static_cast<int>(wv.size()), MPI_FLOAT, MPI_SUM, same_rows);
        g = halves[data_index];
      } else {
        for (std::size_t k = 0; k < g.size(); ++k) g[k] = halves[0][k] + halves[1][k];
      }
      for (std::size_t k = 0; k < wv.size(); ++k) {
        mv[k] = 0.9f * mv[k] + g[k];
        wv[k] -= 0.001f * mv[k];
      }
      w.from_host(wv.data());
      m.from_host(mv.data());
      it.next_sample += 2;
      state.step = step + 1;
      if (step_ms) std::this_thread::sleep_for(std::chrono::milliseconds(step_ms));
      // Copies the state and returns; the previous save commits here first (a collective).
      if (ckptr.save_async(state.step, cairn::Items().tree("state", state).object("iterator", it, cairn::per_rank),
                           {.force = state.step == steps}) &&
          rank == 0 && !quiet)
        std::printf("step %lld: saving\n", static_cast<long long>(state.step));
    }
    ckptr.wait();
    MPI_Comm_free(&same_rows);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mpi_train: %s\n", e.what());
    rc = 1;
  }
  MPI_Finalize();
  return rc;
}
