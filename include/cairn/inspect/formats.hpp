// SPDX-License-Identifier: Apache-2.0
// Checkpoint formats of other systems, read through opt-in headers that register here
// (cairn/orbax.hpp registers Orbax's), so that inspect, read_arrays, verify, convert and the
// `cairn` tool read them, and the core never links their libraries (libzstd for Orbax). A
// format says whether a location is one of its checkpoints, and opens one as a read-only
// Store of its chunks with cairn's records over them; the load then runs as a checkpoint's.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "cairn/checkpoint/load_plan.hpp"
#include "cairn/checkpoint/snapshot.hpp"
#include "cairn/core/function_ref.hpp"
#include "cairn/inspect/inspect.hpp"

CAIRN_BEGIN_NAMESPACE
struct ConvertOptions;  // inspect/convert.hpp, which includes this header's users

namespace detail {

struct ForeignView {
  std::shared_ptr<const Store> store;  // the chunks as blobs, under the key ""
  CheckpointMetadata metadata;         // records whose chunks name the store's blobs
};

// What an export to a foreign format wrote (convert's report).
struct ForeignExport {
  std::uint64_t leaves = 0, bytes = 0;
  std::vector<std::string> cast;  // key paths stored as another dtype
  bool shared = false;            // a link: the source's data files shared, not copied
  bool copied_by_store = false;   // a link: the data files copied by the store itself (Store::copy_blob)
};

struct ForeignFormat {
  LocationKind kind;
  // Whether `key` is one of its checkpoints; `listing` (may be null): the store's listing of
  // `key`, where the caller has it, to look in instead of asking the store (on a bucket, each
  // question is a round trip: Orbax's were six HEADs for every location inspect looked at).
  bool (*recognizes)(const Store& store, const std::string& key, const std::vector<StoreEntry>* listing);
  ForeignView (*open)(const Store& store, const std::string& key);
  LoadReport (*load)(const Store& store, const std::string& key, const LoadOptions& options,
                     FunctionRef<LoadPlan(const StoredIndex&)> plan);
  // Writes one item as a checkpoint of this format (convert's target); null where cairn only
  // reads the format. `user_metadata` is the source's; `options` convert's (its casts, and the
  // format's own choices, such as ConvertOptions::orbax).
  ForeignExport (*save)(Store& store, const std::string& key, const ItemSnapshot& item, const ConvertOptions& options,
                        const Json& user_metadata) = nullptr;
  // Shows the cairn checkpoint at `checkpoint` as a checkpoint of this format that reads the
  // checkpoint's data files where they are (convert's link); null where the format cannot.
  ForeignExport (*link)(const Location& checkpoint, const Location& dst, const ConvertOptions& options) = nullptr;
  // Whether the checkpoint `recognizes` found at `key` is finished: a manager root's step that
  // is not (a save in progress, or one that died) is listed as incomplete, never as a step.
  // Null: every one is.
  bool (*finished)(const Store& store, const std::string& key) = nullptr;
};

CAIRN_API void register_foreign_format(const ForeignFormat& format);
// The format whose checkpoint is at `key`, or null; `listing`: the listing of `key`, where the
// caller has it (ForeignFormat::recognizes).
CAIRN_API const ForeignFormat* foreign_format_at(const Store& store, const std::string& key,
                                                 const std::vector<StoreEntry>* listing = nullptr);
// The registered format of this kind, or null.
CAIRN_API const ForeignFormat* foreign_format_of(LocationKind kind);

}  // namespace detail
CAIRN_END_NAMESPACE
