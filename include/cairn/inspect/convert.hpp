// SPDX-License-Identifier: Apache-2.0
// convert(src, dst): copies a checkpoint or a safetensors file (or set) to a new checkpoint or
// safetensors file, keeping the tree's structure and user metadata, with casts and a
// selection of leaves, without the C++ types it was saved from (the `cairn convert` command).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cairn/checkpoint/options.hpp"
#include "cairn/inspect/inspect.hpp"

CAIRN_BEGIN_NAMESPACE

enum class ConvertTo {
  automatic,    // safetensors when dst ends in ".safetensors" or max_file_bytes is set; else a checkpoint
  checkpoint,
  safetensors,
  orbax,        // an Orbax checkpoint (OCDBT + zarr v3, Orbax v1's layout): needs cairn/orbax.hpp
};

// ConvertTo::orbax: the layout of the Orbax checkpoint written, as cairn::OrbaxSaveOptions
// spells it (docs/orbax.md). The defaults are what Orbax v1's ocp.save writes; Orbax restores
// every combination.
struct ConvertToOrbax {
  bool v0_standard = false;  // StandardCheckpointer's layout: the pytree at DST/ (v1: under DST/state/)
  bool zarr3 = true;         // false: zarr v2 arrays (.zarray), as StandardCheckpointer writes by default
  bool ocdbt = true;         // false: one directory per parameter (Orbax's use_ocdbt=False)
  int zstd_level = 0;        // 1-22: chunks compressed by zstd at this level (Orbax writes 3; v0: 1)
  bool operator==(const ConvertToOrbax&) const = default;
};

struct ConvertOptions {
  ConvertTo to = ConvertTo::automatic;
  ConvertToOrbax orbax = {};  // with ConvertTo::orbax only
  // The item to convert; empty: every item of the source (a checkpoint's RNG and data-loader
  // items with its tree). A safetensors file holds one item: with several in the source, name
  // it here, or the conversion fails (it never drops an item silently).
  std::string item = {};
  // Each glob must match a leaf (a cast's: a leaf converted), else convert throws
  // invalid_argument naming it: a typo never converts what was not meant without a word.
  std::vector<CastRule> cast = {};          // key-path globs -> the dtype to store them as
  std::vector<std::string> select = {};     // key-path globs of the leaves to copy; empty: every leaf
  std::vector<std::string> exclude = {};    // key-path globs of leaves to leave out (applied after select)
  std::uint64_t max_file_bytes = 0;         // safetensors: above this many bytes, a sharded set
  bool overwrite = false;
  // With ConvertTo::orbax and a cairn checkpoint as the source: the Orbax checkpoint reads the
  // source's data files where they are (hard links under its d/; copies where they cannot be
  // linked) instead of a copy of every byte (cairn::link_as_orbax). The tree item, as stored:
  // no cast, select or exclude.
  bool link = false;
  Progress progress = {};                   // the source's reading: bytes read so far, and in all
  // The source is read about this many bytes at a time (a larger leaf alone), each batch as the
  // writer reaches it, and each leaf let go once written: a conversion holds about this much of
  // the source (or its largest leaf), not all of it. 0: 256 MiB.
  std::uint64_t batch_bytes = 0;
  // A safetensors source's names: its separator, and whether save_model's tied names are
  // leaves too (SafetensorsOptions::aliases: each then written with the kept tensor's values).
  SafetensorsOptions safetensors = {};
};

struct ConvertReport {
  ConvertTo to = ConvertTo::checkpoint;     // what was written
  std::vector<std::string> items;           // the items written
  std::uint64_t leaves = 0;
  std::uint64_t bytes = 0;                  // tensor bytes written
  std::vector<std::string> files;           // the files written (safetensors)
  std::vector<std::string> cast;            // key paths stored as another dtype
  // Leaves a cast rule matched but left as they were, each "key (dtype)": integers under a rule
  // that changes floating-point leaves only (CastRule::floats_only), strings under any.
  std::vector<std::string> not_cast;
  bool linked = false;                      // ConvertOptions::link: the source's data files shared, not copied
  bool copied_by_store = false;             // ConvertOptions::link where they could not be shared: copied by
                                            // the store itself (an object store's server-side copy)
};

// Reads the selected leaves of src's items (as stored) and writes them with src's structure,
// item kinds and user metadata to dst, committed as any save or export is. Memory: about
// ConvertOptions::batch_bytes of the source's leaves (or its largest leaf), read a batch at a
// time as the writer reaches them; a leaf that cannot be read fails the conversion, and nothing
// is written at dst. A safetensors target keeps user metadata as strings (its
// "__metadata__" holds only strings): a non-string value is written as its JSON text.
CAIRN_API ConvertReport convert(const Location& src, const Location& dst, const ConvertOptions& options = {});

CAIRN_END_NAMESPACE

#if CAIRN_DEFINES_RUNTIME
#include "cairn/inspect/convert_impl.hpp"
#endif
