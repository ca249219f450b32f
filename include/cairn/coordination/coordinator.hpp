// SPDX-License-Identifier: Apache-2.0
// The coordination seam: what a save needs from the processes that take part in it. One
// process is LocalCoordinator (the default); N ranks in one process are ThreadCoordinator
// (coordination/thread_coordinator.hpp, for tests); N processes are an MPI communicator
// (cairn/mpi.hpp, opt-in).
//
// Rules every implementation keeps, so that the commit protocol (checkpoint/commit.hpp)
// needs no change for a new one:
// - Collectives are called by every rank in the same order, on the thread that called save.
// - Byte counts are 64-bit: a gather of chunk records may pass 2 GiB (an implementation over
//   an API with int counts splits it).
// - A save makes a fixed number of collectives, whatever the number of chunks: no per-chunk
//   round trips.
// - Collectives are only called on the caller's thread, never on a background thread, so MPI
//   needs no more than MPI_THREAD_FUNNELED (MPI_THREAD_SERIALIZED where that thread is not
//   the main one).
// - The caller names the phase (set_phase) before its collectives, so that an implementation
//   with a deadline can say where a rank went missing.
#pragma once

#include <string>
#include <vector>

#include "cairn/core/config.hpp"

CAIRN_BEGIN_NAMESPACE

class Coordinator {
 public:
  virtual ~Coordinator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Rank 0 stages, writes the metadata and publishes.
  bool is_primary() const { return rank() == 0; }

  virtual void barrier() = 0;
  // Every rank's bytes, in rank order, on the primary; empty on the other ranks.
  virtual std::vector<std::string> gather(std::string bytes) = 0;
  // The primary's bytes, on every rank (the other ranks' argument is ignored).
  virtual std::string broadcast(std::string bytes) = 0;
  // True on every rank exactly when `ok` is true on every rank.
  virtual bool all_agree(bool ok) = 0;

  // What the collectives that follow are for ("staging", "gathering chunk records", ...).
  void set_phase(std::string phase) { phase_ = std::move(phase); }
  const std::string& phase() const { return phase_; }

 private:
  std::string phase_ = "save";
};

// One process, alone: every collective returns at once.
class LocalCoordinator final : public Coordinator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  void barrier() override {}
  std::vector<std::string> gather(std::string bytes) override {
    std::vector<std::string> out;
    out.push_back(std::move(bytes));
    return out;
  }
  std::string broadcast(std::string bytes) override { return bytes; }
  bool all_agree(bool ok) override { return ok; }
};

CAIRN_END_NAMESPACE
