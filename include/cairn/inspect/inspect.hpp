// SPDX-License-Identifier: Apache-2.0
// Reading any location without the types it was saved from: what is there (inspect), and the
// values of any of its leaves (read_arrays, into ArrayValue). For tools, viewers and
// converters: the `cairn` command is written on these and the other public names only.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "cairn/checkpoint/options.hpp"
#include "cairn/core/json.hpp"
#include "cairn/format/records.hpp"
#include "cairn/leaves/array_value.hpp"
#include "cairn/safetensors/options.hpp"
#include "cairn/store/location.hpp"

CAIRN_BEGIN_NAMESPACE

// What a location holds.
enum class LocationKind {
  checkpoint,         // a cairn checkpoint (a directory with _CHECKPOINT)
  checkpointer_root,  // a directory of committed checkpoints (a Checkpointer's root)
  safetensors,        // a .safetensors file, or the *.index.json of a sharded set
  orbax,              // an Orbax checkpoint (read where cairn/orbax.hpp is included: docs/orbax.md)
};
// "checkpoint", "checkpointer_root", "safetensors", "orbax"
CAIRN_API const char* location_kind_name(LocationKind kind);

// One step of a Checkpointer root, as inspect finds it.
struct InspectedStep {
  std::string name;       // the step's directory name ("100")
  // checkpoint (cairn's), or another system's checkpoint in the directory (orbax: a
  // CheckpointManager's step, or one among cairn's)
  LocationKind kind = LocationKind::checkpoint;
  bool latest = false;    // named by the root's `latest` marker
  std::string created;    // ISO 8601, from its metadata
  std::uint64_t bytes = 0;
  Json metrics;           // the metrics the Checkpointer recorded, or null
  std::string error;      // set when the step's metadata does not read (then the rest is empty)
};

struct Inspection {
  LocationKind kind = LocationKind::checkpoint;
  std::string path;             // the location as its store describes it
  // A checkpoint or safetensors: its structure, dtypes, shapes, files and user metadata (a
  // safetensors file reads as one item "state"; see safetensors_metadata).
  CheckpointMetadata metadata;
  // A Checkpointer root: its committed steps in step order, and the `latest` marker's content.
  std::vector<InspectedStep> steps;
  std::string latest;
  // Set when the `latest` marker is missing, unreadable, or names no committed step ("" when
  // it names one). The latest committed step is then steps.back(), which is what a
  // Checkpointer opening the root repairs the marker to.
  std::string latest_problem;
  bool latest_marker = false;  // whether the root has a `latest` marker (a plain directory of checkpoints has none)
  // A directory of checkpoints that is no Checkpointer's: no `latest` marker, and names that
  // are not all steps ("best", "final"). Its checkpoints are in `steps`; nothing is the latest
  // (latest_problem stays empty), and the cairn tool's show, diff and convert ask for one by
  // name rather than take the last in step order.
  bool plain_directory = false;
  // A Checkpointer root: directories named like steps that hold no commit marker: a save in
  // progress, or one that died (on an object store, a prefix holding only a generation); and,
  // under any name, another system's saves that have not finished (an Orbax save's temporary
  // directory). Never steps, never loaded; in step order.
  std::vector<std::string> incomplete;
};

// Says what is at `location` and reads its metadata (no array data). A name ending in
// ".safetensors" or ".index.json" (a sharded set's index) is safetensors; an Orbax checkpoint
// is one where cairn/orbax.hpp is included; a directory that is not a checkpoint but holds
// committed checkpoints (cairn's, or Orbax's under any names: a CheckpointManager's root, or
// exports beside cairn's, each InspectedStep::kind saying which) is a Checkpointer root.
// Anything else is read as a checkpoint, and its errors are the load's (not_found,
// incomplete, corrupt, ...).
// `safetensors`: how a safetensors file's tensor names become key paths (its separator, and
// whether save_model's tied names are leaves too); anything else ignores it.
CAIRN_API Inspection inspect(const Location& location, const SafetensorsOptions& safetensors = {});

struct ReadArraysOptions {
  std::optional<DType> as = {};  // cast every leaf to this dtype (saturating, lossy allowed); unset: as stored
  std::vector<Box> boxes = {};   // read only these boxes of each leaf (one after another in `bytes`); empty: whole
  std::string item = default_item_name;  // the checkpoint's item (safetensors has one, "state")
  Progress progress = {};                // as LoadOptions::progress: bytes read so far, and in all
  SafetensorsOptions safetensors = {};   // a safetensors file's names (inspect's, which `keys` then use)
};

// Reads the leaves at `keys` (every leaf of the item when empty) of a checkpoint or a
// safetensors file at `location`, each into an ArrayValue, in one pass over the files that
// reads only what is asked (and checks every checksum that covers it). A key that is not
// there is not_found. `report`, when given, receives the load's report (bytes read, casts).
CAIRN_API std::map<std::string, ArrayValue> read_arrays(const Location& location, const std::vector<std::string>& keys,
                                                       const ReadArraysOptions& options = {}, LoadReport* report = nullptr);

CAIRN_END_NAMESPACE

#if CAIRN_DEFINES_RUNTIME
#include "cairn/inspect/inspect_impl.hpp"
#endif
