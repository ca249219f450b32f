// SPDX-License-Identifier: Apache-2.0
// MpiCoordinator: the ranks of an MPI communicator as a cairn Coordinator. Opt-in: nothing of
// MPI is compiled unless cairn/mpi.hpp (which includes this) is included.
//
// - The communicator is duplicated, so cairn's messages never match the application's.
// - Every collective is non-blocking underneath and polled against a deadline (Orbax's
//   default, 300 s): a rank that never arrives becomes a cairn::Error of kind timeout naming
//   the phase and, where the primary can tell, the missing ranks; or MPI_Abort with that
//   message (MpiOptions::on_timeout). After a timeout the communicator is out of step, and
//   every later call of this coordinator throws at once.
// - cairn calls MPI only on the thread that called save, load or a Checkpointer method, so
//   MPI_THREAD_FUNNELED is enough (MPI_THREAD_SERIALIZED if that is not the main thread).
// - Byte counts are 64-bit: messages over 1 GiB travel in 1 GiB pieces (MPI counts are int).
#pragma once

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "cairn/coordination/coordinator.hpp"
#include "cairn/core/error.hpp"

CAIRN_BEGIN_NAMESPACE

struct MpiOptions {
  // How long a rank waits in one collective for the others.
  std::chrono::milliseconds deadline = std::chrono::seconds(300);
  // What a timeout does: throw cairn::Error (kind timeout) on the ranks that see it, or print
  // the message and MPI_Abort(MPI_COMM_WORLD) (the whole job stops, which a job scheduler sees).
  enum class OnTimeout { error, abort };
  OnTimeout on_timeout = OnTimeout::error;
};

class MpiCoordinator final : public Coordinator {
 public:
  // Collective over `comm`: every rank constructs it. MPI must be initialized.
  explicit MpiCoordinator(MPI_Comm comm, MpiOptions options = {}) : options_(options) {
    int initialized = 0, finalized = 0;
    MPI_Initialized(&initialized);
    MPI_Finalized(&finalized);
    if (!initialized || finalized)
      throw Error(ErrorKind::invalid_argument, "cairn::MpiCoordinator needs MPI to be initialized (MPI_Init) and not finalized");
    check(MPI_Comm_dup(comm, &comm_), "MPI_Comm_dup");
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
  }
  MpiCoordinator(const MpiCoordinator&) = delete;
  MpiCoordinator& operator=(const MpiCoordinator&) = delete;
  ~MpiCoordinator() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    // After a timeout, requests may still refer to the communicator: it is left to MPI_Finalize.
    if (!finalized && comm_ != MPI_COMM_NULL && !broken_) MPI_Comm_free(&comm_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  MPI_Comm communicator() const { return comm_; }
  const MpiOptions& options() const { return options_; }

  void barrier() override {
    usable();
    MPI_Request r;
    check(MPI_Ibarrier(comm_, &r), "MPI_Ibarrier");
    wait({r}, [] { return std::string("not every rank arrived"); });
  }

  std::vector<std::string> gather(std::string bytes) override {
    usable();
    if (rank_ != 0) {
      auto size = std::make_shared<std::uint64_t>(bytes.size());
      auto data = std::make_shared<std::string>(std::move(bytes));
      std::vector<MPI_Request> reqs(1);
      check(MPI_Isend(size.get(), 8, MPI_BYTE, 0, size_tag, comm_, &reqs[0]), "MPI_Isend");
      for (std::uint64_t off = 0; off < data->size(); off += max_message) {
        reqs.emplace_back();
        check(MPI_Isend(data->data() + off, piece(data->size() - off), MPI_BYTE, 0, data_tag, comm_, &reqs.back()),
              "MPI_Isend");
      }
      wait(reqs, [] { return std::string("rank 0 (the primary) did not take this rank's part"); },
           [&] { keep_until_done(size, data); });
      return {};
    }
    // The primary: every rank's size, then its bytes; at the deadline it knows who is missing.
    std::vector<std::string> out(static_cast<std::size_t>(size_));
    out[0] = std::move(bytes);
    auto sizes = std::make_shared<std::vector<std::uint64_t>>(static_cast<std::size_t>(size_), 0);
    std::vector<MPI_Request> size_reqs(static_cast<std::size_t>(size_), MPI_REQUEST_NULL);
    std::vector<std::vector<MPI_Request>> data_reqs(static_cast<std::size_t>(size_));
    std::vector<bool> sized(static_cast<std::size_t>(size_), false);
    for (int r = 1; r < size_; ++r)
      check(MPI_Irecv(&(*sizes)[static_cast<std::size_t>(r)], 8, MPI_BYTE, r, size_tag, comm_, &size_reqs[static_cast<std::size_t>(r)]),
            "MPI_Irecv");
    poll([&] {
      bool all = true;
      for (int r = 1; r < size_; ++r) {
        const auto i = static_cast<std::size_t>(r);
        if (!sized[i]) {
          int done = 0;
          check(MPI_Test(&size_reqs[i], &done, MPI_STATUS_IGNORE), "MPI_Test");
          if (!done) { all = false; continue; }
          sized[i] = true;
          if ((*sizes)[i] > (std::uint64_t{1} << 40))
            throw Error(ErrorKind::io, "rank " + std::to_string(r) + " announced a message of " +
                        std::to_string((*sizes)[i]) + " bytes");
          out[i].resize(static_cast<std::size_t>((*sizes)[i]));
          for (std::uint64_t off = 0; off < out[i].size(); off += max_message) {
            data_reqs[i].emplace_back();
            check(MPI_Irecv(out[i].data() + off, piece(out[i].size() - off), MPI_BYTE, r, data_tag, comm_,
                            &data_reqs[i].back()), "MPI_Irecv");
          }
        }
        if (!data_reqs[i].empty()) {
          int done = 0;
          check(MPI_Testall(static_cast<int>(data_reqs[i].size()), data_reqs[i].data(), &done, MPI_STATUSES_IGNORE),
                "MPI_Testall");
          if (!done) all = false;
        }
      }
      return all;
    }, [&] {
      std::string missing;
      for (int r = 1; r < size_; ++r) {
        const auto i = static_cast<std::size_t>(r);
        bool done = sized[i];
        for (auto& q : data_reqs[i]) done = done && q == MPI_REQUEST_NULL;
        if (!done) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
      }
      return "rank" + std::string(missing.find(',') != std::string::npos ? "s " : " ") + missing + " did not arrive";
    }, [&] {
      // The receives still posted are cancelled; their buffers are kept in case one lands first.
      auto cancel = [](MPI_Request& q) {
        if (q == MPI_REQUEST_NULL) return;
        MPI_Cancel(&q);
        MPI_Request_free(&q);
      };
      for (auto& q : size_reqs) cancel(q);
      for (auto& rs : data_reqs)
        for (auto& q : rs) cancel(q);
      auto kept = std::make_shared<std::vector<std::string>>(std::move(out));
      keep_until_done(sizes, kept);
    });
    return out;
  }

  std::string broadcast(std::string bytes) override {
    usable();
    auto size = std::make_shared<std::uint64_t>(bytes.size());
    MPI_Request r;
    check(MPI_Ibcast(size.get(), 8, MPI_BYTE, 0, comm_, &r), "MPI_Ibcast");
    auto who = [this] {
      return rank_ == 0 ? std::string("not every rank arrived")
                        : std::string("rank 0 (the primary), or a rank relaying its message, did not arrive");
    };
    wait({r}, who, [&] { keep_until_done(size); });
    if (*size > (std::uint64_t{1} << 40))
      throw Error(ErrorKind::io, "the primary announced a message of " + std::to_string(*size) + " bytes");
    auto data = std::make_shared<std::string>(std::move(bytes));
    if (rank_ != 0) data->assign(static_cast<std::size_t>(*size), '\0');
    std::vector<MPI_Request> reqs;
    for (std::uint64_t off = 0; off < *size; off += max_message) {
      reqs.emplace_back();
      check(MPI_Ibcast(data->data() + off, piece(*size - off), MPI_BYTE, 0, comm_, &reqs.back()), "MPI_Ibcast");
    }
    wait(reqs, who, [&] { keep_until_done(data); });
    return std::move(*data);
  }

  bool all_agree(bool ok) override {
    usable();
    auto in = std::make_shared<int>(ok ? 1 : 0), out = std::make_shared<int>(0);
    MPI_Request r;
    check(MPI_Iallreduce(in.get(), out.get(), 1, MPI_INT, MPI_LAND, comm_, &r), "MPI_Iallreduce");
    wait({r}, [] { return std::string("not every rank arrived"); }, [&] { keep_until_done(in, out); });
    return *out != 0;
  }

 private:
  static constexpr int size_tag = 7101, data_tag = 7102;
  static constexpr std::uint64_t max_message = std::uint64_t{1} << 30;
  static int piece(std::uint64_t left) { return static_cast<int>(std::min(left, max_message)); }

  static void check(int rc, const char* call) {
    if (rc == MPI_SUCCESS) return;
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, text, &len);
    throw Error(ErrorKind::io, std::string(call) + " failed: " + std::string(text, static_cast<std::size_t>(len)));
  }

  void usable() const {
    if (broken_)
      throw Error(ErrorKind::timeout, "this MpiCoordinator timed out earlier (" + broken_reason_ +
                  "); its ranks are out of step, so it cannot be used again");
  }

  // Buffers that a request abandoned at a timeout may still read or write.
  template <class... P>
  void keep_until_done(const P&... p) {
    (kept_.push_back(std::shared_ptr<const void>(p)), ...);
  }

  // Polls until done() or the deadline. Polling with a short sleep, rather than spinning in
  // MPI_Wait, leaves the cores to the application's threads and to oversubscribed ranks.
  template <class Done, class Who, class Abandon>
  void poll(Done&& done, Who&& who, Abandon&& abandon) {
    const auto until = std::chrono::steady_clock::now() + options_.deadline;
    for (int spins = 0; !done(); ++spins) {
      if (std::chrono::steady_clock::now() > until) {
        abandon();
        timed_out(who());
      }
      if (spins > 64) std::this_thread::sleep_for(std::chrono::microseconds(spins > 1024 ? 1000 : 50));
    }
  }
  template <class Who, class Abandon>
  void wait(std::vector<MPI_Request> reqs, Who&& who, Abandon&& abandon) {
    poll([&] {
      int done = 0;
      check(MPI_Testall(static_cast<int>(reqs.size()), reqs.data(), &done, MPI_STATUSES_IGNORE), "MPI_Testall");
      return done != 0;
    }, who, abandon);
  }
  template <class Who>
  void wait(std::vector<MPI_Request> reqs, Who&& who) {
    wait(std::move(reqs), who, [] {});
  }

  [[noreturn]] void timed_out(const std::string& who) {
    const std::string what = "rank " + std::to_string(rank_) + " of " + std::to_string(size_) + " waited " +
                             std::to_string(options_.deadline.count()) + " ms in phase '" + phase() + "': " + who;
    if (options_.on_timeout == MpiOptions::OnTimeout::abort) {
      std::fprintf(stderr, "cairn: %s; aborting the job (MpiOptions::on_timeout)\n", what.c_str());
      std::fflush(stderr);
      // MPI_COMM_WORLD: aborting only the coordinator's communicator leaves the other ranks
      // running under MPICH until they exit on their own.
      MPI_Abort(MPI_COMM_WORLD, 70);
    }
    broken_ = true;
    broken_reason_ = what;
    throw Error(ErrorKind::timeout, what);
  }

  MpiOptions options_;
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1;
  bool broken_ = false;
  std::string broken_reason_;
  std::vector<std::shared_ptr<const void>> kept_;
};

CAIRN_END_NAMESPACE
