// SPDX-License-Identifier: Apache-2.0
// A pytree's `_METADATA` (Orbax's tree of key paths and value types) read straight into its
// entries with the pull reader every cairn JSON document goes through, without a tree of Json
// values in between: for 10,000 parameters that tree was a sixth of opening the checkpoint
// (docs/benchmarks.md, "Orbax import"). Untrusted text: nesting is bounded, and every
// mistake is a cairn::Error naming the file and the entry.
//
//   {"tree_metadata": {"('params', 'w')": {"key_metadata": [{"key": "params", "key_type": 2},
//                                                            {"key": "w", "key_type": 2}],
//                                           "value_metadata": {"value_type": "jax.Array",
//                                                              "skip_deserialize": false}}, ...},
//    "use_ocdbt": true, "use_zarr3": true, ...}
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cairn/core/json.hpp"
#include "cairn/core/json_reader.hpp"
#include "cairn/core/key_path.hpp"

CAIRN_BEGIN_NAMESPACE
namespace detail::orbax {

struct TreeMetadataEntry {
  std::string tuple;        // the entry's name, as Orbax spells its key tuple: "('params', 'w')"
  KeyPath path;             // sequence indices (key_type 1) as indices, every other key by name
  std::string param;        // the keys joined by '.': the array's name in the database
  std::string value_type;   // "jax.Array", "np.ndarray", "scalar", "string", "None", ... ("" unsaid)
  bool skip_deserialize = false;
};

struct TreeMetadata {
  std::vector<TreeMetadataEntry> entries;  // in the file's order
  std::optional<bool> use_ocdbt, use_zarr3;
};

// Orbax writes each object's members in one order (json.dumps of its dicts): the reader
// guesses the next name, and a name spelled so is taken without decoding it
// (JsonReader::object). Members in any other order read the same.
template <std::size_t N>
struct MembersInOrder {
  const std::string_view (&names)[N];
  std::size_t next = 0;
  std::string_view operator()() { return next < N ? names[next++] : std::string_view(); }
};
inline constexpr std::string_view tree_entry_members[] = {"key_metadata", "value_metadata"};
inline constexpr std::string_view key_entry_members[] = {"key", "key_type"};
inline constexpr std::string_view value_members[] = {"value_type", "skip_deserialize"};

inline TreeMetadata read_tree_metadata(std::string_view text, const std::string& file) {
  JsonReader r(text, file, 16, "invalid Orbax _METADATA");  // its entries nest 4 deep; a key spelled as a value a little more
  TreeMetadata out;
  bool has_tree = false;
  std::string key;  // each key_metadata entry's key, read into the same buffer
  auto optional_bool = [&](std::optional<bool>& to) {
    const char c = r.peek();
    if (c == 't' || c == 'f') to = r.boolean();
    else r.skip();
  };
  if (r.peek() != '{') throw Error(ErrorKind::corrupt, "Orbax _METADATA has no tree_metadata object", file);
  r.object([&](std::string_view name) {
    if (name == "use_ocdbt") return optional_bool(out.use_ocdbt);
    if (name == "use_zarr3") return optional_bool(out.use_zarr3);
    if (name != "tree_metadata") return r.skip();
    if (r.peek() != '{') throw Error(ErrorKind::corrupt, "Orbax _METADATA has no tree_metadata object", file);
    has_tree = true;
    r.object([&](std::string_view tuple_text) {
      TreeMetadataEntry e;
      e.tuple = tuple_text;
      const std::string& tuple = e.tuple;
      if (r.peek() != '{') throw Error(ErrorKind::corrupt, "tree_metadata entry is not an object", file, tuple);
      bool has_keys = false, has_value = false;
      r.object([&](std::string_view member) {
        if (member == "key_metadata") {
          if (r.peek() != '[') throw Error(ErrorKind::corrupt, "tree_metadata entry has no key_metadata list or value_metadata", file, tuple);
          has_keys = true;
          std::vector<KeyEntry> path;
          path.reserve(4);  // one allocation for the usual few keys
          e.param.clear();
          r.array([&] {
            if (r.peek() != '{') throw Error(ErrorKind::corrupt, "key_metadata entry without key or key_type", file, tuple);
            // The key is copied once, into `key` (reused: no allocation for the usual short
            // keys), then into its path entry: made, moved into an optional and moved twice
            // more, its copies were a sixth of reading 10,000 entries.
            bool has_key = false;
            std::optional<std::int64_t> type;
            r.object([&](std::string_view k) {
              if (k == "key") {
                has_key = true;
                if (r.peek() == '"') {
                  key.assign(r.string());
                } else {
                  // A key that is not a string (rare): its JSON text, as Json::dump spells it.
                  const std::size_t at = r.position();
                  r.skip();
                  key = Json::parse(text.substr(at, r.position() - at), file).dump();
                }
              } else if (k == "key_type") {
                const char c = r.peek();
                bool is_float = false;
                if (c == '-' || (c >= '0' && c <= '9')) {
                  const std::string_view number = r.number_token(&is_float);
                  std::int64_t v = 0;
                  const auto [end, ec] = std::from_chars(number.data(), number.data() + number.size(), v);
                  if (!is_float && ec == std::errc() && end == number.data() + number.size()) type = v;
                  else type.reset();
                } else {
                  r.skip();
                  type.reset();
                }
              } else {
                r.skip();
              }
            }, MembersInOrder<2>{key_entry_members});
            if (!has_key || !type) throw Error(ErrorKind::corrupt, "key_metadata entry without key or key_type", file, tuple);
            if (!e.param.empty() || !path.empty()) e.param += '.';
            e.param += key;
            std::int64_t index;
            if (path.size() >= max_tree_depth)
              throw Error(ErrorKind::corrupt, "a key path of more than " + std::to_string(max_tree_depth) +
                          " entries (cairn::max_tree_depth)", file, tuple);
            KeyEntry& entry = path.emplace_back();
            if (*type == 1 && parse_int64(key, index) && index >= 0) {
              entry.kind = KeyEntry::Kind::index;
              entry.number = index;
            } else {
              entry.kind = KeyEntry::Kind::key;
              entry.name = key;
            }
          });
          e.path = KeyPath(std::move(path));
        } else if (member == "value_metadata") {
          if (r.peek() != '{') throw Error(ErrorKind::corrupt, "tree_metadata entry has no key_metadata list or value_metadata", file, tuple);
          has_value = true;
          e.value_type.clear();
          e.skip_deserialize = false;
          r.object([&](std::string_view v) {
            if (v == "value_type" && r.peek() == '"') e.value_type = r.string();
            else if (v == "skip_deserialize" && (r.peek() == 't' || r.peek() == 'f')) e.skip_deserialize = r.boolean();
            else r.skip();
          }, MembersInOrder<2>{value_members});
        } else {
          r.skip();
        }
      }, MembersInOrder<2>{tree_entry_members});
      if (!has_keys || !has_value)
        throw Error(ErrorKind::corrupt, "tree_metadata entry has no key_metadata list or value_metadata", file, tuple);
      out.entries.push_back(std::move(e));
    });
  });
  r.finish();
  if (!has_tree) throw Error(ErrorKind::corrupt, "Orbax _METADATA has no tree_metadata object", file);
  return out;
}

}  // namespace detail::orbax
CAIRN_END_NAMESPACE
