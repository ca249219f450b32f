// SPDX-License-Identifier: Apache-2.0
// verify(location): reads every byte a checkpoint's records name and checks every checksum,
// without loading anything into memory beyond a 4 MiB buffer per read in flight (one on a
// disk; on a bucket, as many as the store keeps in flight) (Orbax and DCP have no such
// check; `h5check` and `zarr` consolidated-metadata checks are the nearest). Also a
// safetensors file (no checksums: the header is validated and every tensor byte read) and a
// Checkpointer root (every committed step, and the `latest` marker where there is one: a
// marker that names no committed step is a problem; a directory of checkpoints without one
// is not).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cairn/inspect/inspect.hpp"

CAIRN_BEGIN_NAMESPACE

struct VerifyProblem {
  std::string file;               // the data file (or the checkpoint, when its metadata is bad)
  std::string key;                // the leaf whose bytes are bad ("" for a whole checkpoint)
  std::string why;
  std::uint64_t offset = 0, end = 0;  // the byte range in `file`: the chunk's, or a bad block's
};

struct VerifyReport {
  LocationKind kind = LocationKind::checkpoint;
  std::string path;
  std::vector<std::string> checkpoints;  // what was verified (a root's steps; else the location)
  std::uint64_t chunks = 0;              // chunks (tensors, for safetensors) read
  std::uint64_t bytes = 0;               // their bytes
  bool checksummed = true;               // false for safetensors, which has no checksums
  std::vector<VerifyProblem> problems;
  // Leaves of another system's file that cairn cannot read (ItemRecord::unread: a dtype it
  // does not have), "key: reason": not verified, and not a problem of the file. A root's are
  // its steps', each "step/key: reason".
  std::vector<std::string> not_verified;
  // A Checkpointer root's steps, each one's own report (its `path`, its chunks, its problems; a
  // step whose metadata does not read has that one problem and no chunks), in step order. The
  // root's own fields add them up, and its problems also hold the `latest` marker's. Empty
  // for anything else.
  std::vector<VerifyReport> steps;
  bool ok() const { return problems.empty(); }
};

// Verifies the checkpoint, safetensors file or Checkpointer root at `location`. Damage is
// reported in the report, not thrown; what cannot be read at all (nothing there, not a
// checkpoint) throws as metadata() does. Reads every byte once; memory: one 4 MiB buffer.
struct VerifyOptions {
  // Called as chunks are read, with the bytes read so far and the bytes of every chunk to read
  // (of one checkpoint: a root's steps each count from zero).
  Progress progress = {};
};

CAIRN_API VerifyReport verify(const Location& location, const VerifyOptions& options = {});

CAIRN_END_NAMESPACE

#if CAIRN_DEFINES_RUNTIME
#include "cairn/inspect/verify_impl.hpp"
#endif
