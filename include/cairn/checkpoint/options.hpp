// SPDX-License-Identifier: Apache-2.0
// Options of save and load, and the LoadReport that says what a load did.
#pragma once

#include <string>
#include <vector>

#include "cairn/coordination/coordinator.hpp"
#include "cairn/core/box.hpp"
#include "cairn/core/json.hpp"
#include "cairn/core/key_path.hpp"
#include "cairn/core/memory_kind.hpp"
#include "cairn/core/progress.hpp"
#include "cairn/dtype/dtype.hpp"

CAIRN_BEGIN_NAMESPACE

// Store the leaves matching `pattern` (a key-path glob, see docs/usage.md) as `dtype`. By
// default only floating-point leaves are cast, so "params/*" -> bfloat16 leaves integer
// counters alone.
struct CastRule {
  std::string pattern;
  DType dtype;
  bool floats_only = true;
};

namespace detail {
// The dtype the first rule matching `key` gives a leaf of `dtype` (its own when none applies).
inline DType cast_rule_target(const std::vector<CastRule>& rules, const std::string& key, DType dtype) {
  for (const auto& rule : rules) {
    if (!glob_matches(rule.pattern, key)) continue;
    const bool castable = dtype != DType::string && (!rule.floats_only || is_float_dtype(dtype));
    return castable ? rule.dtype : dtype;
  }
  return dtype;
}
}  // namespace detail

// Who writes a box of a sharded array that several processes hold (a replica).
enum class ReplicaWrites {
  // Its primary holder (the first device in mesh order): one chunk per box, so a load reads
  // each box from one place.
  primary_holder,
  // Every process that holds it writes a slab of it (as Orbax's replica-parallel save does):
  // a replicated array's bytes are written by all its holders at once, and a load reads each
  // box from several smaller chunks.
  split,
};

struct SaveOptions {
  bool overwrite = false;             // replace an existing checkpoint (atomically) instead of failing
  std::vector<CastRule> cast = {};    // first matching rule wins
  Json user_metadata = Json::object();// any JSON object: epoch, loss, learning rate ...
  OnOverflow on_overflow = OnOverflow::error;  // for integer casts that do not fit
  // The ranks taking part: every rank calls save with the same tree, each writes its part,
  // and the checkpoint commits once (checkpoint/commit.hpp). None: this process alone.
  Coordinator* coordinator = nullptr;
  ReplicaWrites replicas = ReplicaWrites::primary_holder;
  // save_async only: host memory its snapshot may hold. Up to this much the state is copied and
  // save_async returns; beyond it the snapshot streams (the call waits for earlier leaves to be
  // written before copying more, and leaves larger than the budget are written from the
  // caller's memory before it returns). The Checkpointer uses CheckpointerOptions' budget.
  std::uint64_t async_memory_budget = std::uint64_t{1} << 30;
};

struct LoadOptions {
  bool allow_missing = false;          // target leaves absent from the checkpoint are left as they are
  bool allow_unexpected = false;       // checkpoint leaves the target has no place for are ignored
  std::vector<std::string> skip = {};  // target leaves (key-path globs) left as they are, not read
  std::string subtree = {};            // load the checkpoint's subtree at this key path into the target
  // Convert when the target's dtype differs, where no value can change (int8 -> int32,
  // bfloat16 -> float32, ...); each cast is reported.
  bool allow_cast = true;
  // Keys (key-path globs; "**" for all) that may also take casts that can lose information:
  // float -> int (rounds toward zero), float64 -> float32 or bfloat16 (rounds), int32 -> int8
  // (range-checked, see on_overflow). Without a match such a cast is an error naming each key.
  std::vector<std::string> allow_lossy_cast = {};
  OnOverflow on_overflow = OnOverflow::error;
  std::string item = "state";          // which item of the checkpoint holds the tree
  // Check every chunk's CRC32C (the metadata's are always checked). Turning it off saves the
  // checksum's CPU time (about 65 ms per GiB here); sizes, offsets and shapes are still checked.
  bool verify_checksums = true;
  // Fail rather than return a byte that no checksum verified (LoadReport::unverified_bytes):
  // a safetensors file or an Orbax checkpoint (cairn checks no checksum of theirs) or
  // verify_checksums off is then an invalid_argument error before anything is read. A cairn
  // checkpoint can always be verified: a chunk written before block checksums (cairn before
  // 2026-11-26; docs/format.md) that the load needs only part of is then read whole.
  bool require_verified = false;
  // The ranks taking part: every rank calls load; the primary reads the metadata and shares
  // it, each rank reads its own target's data, and every rank returns the same outcome.
  Coordinator* coordinator = nullptr;
  // Called as the load reads, on the thread that called load, with the bytes read so far and
  // the stored bytes of the leaves it reads (a part of a chunk may need less: the last call
  // then has done == total). Unset: nothing is counted.
  Progress progress = {};

  // Both allowances: load what matches, report the rest.
  static LoadOptions partial() {
    LoadOptions o;
    o.allow_missing = o.allow_unexpected = true;
    return o;
  }
};

struct CastRecord {
  std::string key;
  DType from;  // as stored
  DType to;    // as loaded
};

// What one target shard of a sharded (or chunked) leaf got: its box, where it lives, and the
// stored chunks' boxes it was filled from.
struct ShardRead {
  std::string key;
  Box box;
  MemoryKind memory = MemoryKind::host;
  int device = 0;
  std::vector<Box> from_chunks;
};

struct LoadReport {
  std::vector<std::string> loaded;      // key paths (of the target) whose values were read
  std::vector<std::string> skipped;     // matched a skip glob: left untouched
  std::vector<std::string> missing;     // in the target, not in the checkpoint: left untouched
  std::vector<std::string> unexpected;  // in the checkpoint, not in the target: ignored
  std::vector<CastRecord> cast;         // leaves converted between dtypes
  std::uint64_t bytes_read = 0;         // array bytes read from data files (whole checksum blocks)
  std::uint64_t bytes_needed = 0;       // stored bytes of the elements the target asked for
  // Bytes read that no checksum verified: every byte of a safetensors or Orbax load and of a
  // load with verify_checksums off, and parts read of large chunks written before block
  // checksums (docs/format.md). 0 for every load of a checkpoint cairn writes now.
  std::uint64_t unverified_bytes = 0;
  std::vector<ShardRead> shard_reads;   // per target shard of sharded or chunked leaves

  std::string summary() const {
    std::string s = std::to_string(loaded.size()) + " loaded, " + std::to_string(skipped.size()) + " skipped, " +
                    std::to_string(missing.size()) + " missing, " + std::to_string(unexpected.size()) +
                    " unexpected, " + std::to_string(cast.size()) + " cast; " + std::to_string(bytes_read) +
                    " bytes read" + (unverified_bytes ? ", " + std::to_string(unverified_bytes) + " of them not checksum-verified" : "") +
                    "\n";
    auto list = [&](const char* what, const std::vector<std::string>& keys) {
      for (const auto& k : keys) s += std::string("  ") + what + " " + k + "\n";
    };
    list("skipped", skipped);
    list("missing", missing);
    list("unexpected", unexpected);
    for (const auto& c : cast) s += "  cast " + c.key + ": " + dtype_name(c.from) + " -> " + dtype_name(c.to) + "\n";
    return s;
  }
};

struct SaveReport {
  std::string path;
  std::size_t leaves = 0;
  std::uint64_t bytes_written = 0;  // array bytes, without padding and metadata
  std::vector<CastRecord> cast;     // leaves stored in another dtype than in memory
};

CAIRN_END_NAMESPACE
