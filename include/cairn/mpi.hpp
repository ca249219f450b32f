// SPDX-License-Identifier: Apache-2.0
// cairn over MPI, opt-in: include this after (or instead of) cairn/cairn.hpp, link MPI, and
// pass a coordinator to save, load and the Checkpointer on every rank:
//
//   MPI_Init(&argc, &argv);
//   cairn::MpiCoordinator coord(MPI_COMM_WORLD);        // duplicates the communicator
//   cairn::save("ckpt/100", state, {.coordinator = &coord});
//   cairn::load("ckpt/100", state, {.coordinator = &coord});
//
// See docs/multiprocess.md.
#pragma once

#include "cairn/cairn.hpp"
#include "cairn/coordination/mpi_coordinator.hpp"
