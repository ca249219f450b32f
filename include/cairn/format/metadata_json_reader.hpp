// SPDX-License-Identifier: Apache-2.0
// Reading the records' JSON form, the text of _METADATA, with detail::JsonReader straight into
// the records. Reading checks what a record can check on its own (types, integer ranges,
// required members, names of dtypes and kinds); the cross-checks against files and shapes are
// validate_metadata in format/validation.hpp.
//
// Members may come in any order; a member this version does not know is skipped (that is how
// "sharding" and "device_processes" were added within format 1), a known one twice is an
// error. Files written by cereal's JSON archive (cairn before 0.2) read the same.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include "cairn/core/json_reader.hpp"
#include "cairn/format/records.hpp"

CAIRN_BEGIN_NAMESPACE
namespace detail {

inline constexpr int max_metadata_depth = 32;

// Reads the members of one record: which are known, which were seen (each at most once),
// and which are missing at the end.
// `names` is a static array (the reader keeps a pointer to it).
template <std::size_t N>
class RecordReader {
 public:
  RecordReader(JsonReader& r, const char* record, const std::string_view (&names)[N])
      : r_(r), record_(record), names_(names) {}

  // Reads an object; on each known member calls read(index) with the reader at its value,
  // skips unknown ones. Then every member named in `required` (a bit per index) must have
  // been present.
  template <class F>
  void read(std::uint32_t required, F&& read_member) {
    seen_ = 0;
    next_ = 0;
    r_.object([&](std::string_view key) {
      // Members usually come in the order cairn writes them: try the next one first.
      int index = next_;
      if (index >= static_cast<int>(N) || !same_text(key, names_[index])) {
        index = 0;
        while (index < static_cast<int>(N) && !same_text(key, names_[index])) ++index;
        if (index == static_cast<int>(N)) { r_.skip(); return; }
      }
      next_ = index + 1;
      if (seen_ & (1u << index)) r_.fail(std::string(record_) + " has '" + std::string(key) + "' twice");
      seen_ |= 1u << index;
      read_member(index);
    },
              [&] { return next_ < static_cast<int>(N) ? names_[next_] : std::string_view(); });
    if (const std::uint32_t missing = required & ~seen_) {
      int index = 0;
      while (!(missing & (1u << index))) ++index;
      r_.fail(std::string(record_) + " has no '" + std::string(names_[index]) + "'");
    }
  }
  bool seen(int index) const { return seen_ & (1u << index); }
  std::uint32_t seen_mask() const { return seen_; }

 private:
  JsonReader& r_;
  const char* record_;
  const std::string_view* names_;
  std::uint32_t seen_ = 0;
  int next_ = 0;
};

// Each item's leaves' printed key paths, in order: printed while the parser has each record
// in cache, for validate_metadata and a load's index (at 100,000 leaves, printing them again
// from records spread over 50 MB of heap took about 10 ms a time).
using PrintedKeys = std::vector<std::vector<std::string>>;

class MetadataReader {
 public:
  // With `printed`, the items' leaves' keys are printed into it as they are read.
  MetadataReader(std::string_view text, const std::string& path, PrintedKeys* printed = nullptr)
      : path_(path), r_(text, path_, max_metadata_depth, "malformed metadata"), printed_(printed) {}

  CheckpointMetadata metadata() {
    CheckpointMetadata m;
    static constexpr std::string_view names[] = {"format", "format_version", "library_version", "created_unix_ms", "created", "data_files", "items"};
    RecordReader rec(r_, "the metadata", names);
    rec.read(0x7f, [&](int member) {
      switch (member) {
        case 0:
          if (r_.string() != "cairn") r_.fail("not a cairn metadata file (format is not \"cairn\")");
          break;
        case 1:
          m.format_version = r_.integer<int>();
          if (m.format_version > cairn::format_version || m.format_version < 1)
            throw Error(ErrorKind::unsupported_version, "format version " + std::to_string(m.format_version) +
                        " (this cairn reads up to " + std::to_string(cairn::format_version) + ")", path_);
          break;
        case 2: m.library_version = r_.string(); break;
        case 3: m.created_unix_ms = r_.int64(); break;
        case 4: m.created = r_.string(); break;
        case 5:
          r_.array([&] { m.data_files.emplace_back(r_.string()); });
          data_files_ = &m.data_files;
          break;
        case 6:
          r_.array([&] {
            item_index_ = m.items.size();
            if (printed_) printed_->emplace_back();
            m.items.push_back(item());
          });
          break;
      }
    });
    r_.finish();
    // Chunks that named their file by number before `data_files` came.
    for (const auto& p : unresolved_) {
      LeafRecord& l = m.items[p.item].leaves[p.leaf];
      if (p.number >= m.data_files.size())
        throw Error(ErrorKind::corrupt, unknown_file(p.chunk, p.number, m.data_files.size()), path_, l.key());
      l.chunks[p.chunk].file = m.data_files[p.number];
    }
    return m;
  }

  ItemRecord lone_item() {
    ItemRecord i = item();
    r_.finish();
    if (!unresolved_.empty())
      throw Error(ErrorKind::corrupt, "a chunk names its data file by number outside a checkpoint's metadata", path_,
                  i.leaves[unresolved_.front().leaf].key());
    return i;
  }

 private:
  ItemRecord item() {
    ItemRecord i;
    static constexpr std::string_view names[] = {"name", "kind", "nodes", "leaves", "node_count", "leaf_count", "leaf_table"};
    RecordReader rec(r_, "an item record", names);
    std::uint64_t node_count = 0, leaf_count = 0;
    LeafTable table;
    // A count is a hint from an untrusted file: it sizes the array only as far as the rest of
    // the text could hold records of the smallest size (so memory stays proportional to the
    // file), and must match what follows.
    auto reserve = [&](auto& records, std::uint64_t count, std::size_t smallest_record) {
      records.reserve(static_cast<std::size_t>(std::min<std::uint64_t>(count, r_.remaining() / smallest_record)));
    };
    rec.read(0x7, [&](int member) {  // name, kind, nodes; then leaves or leaf_table
      switch (member) {
        case 0: i.name = r_.string(); break;
        case 1: i.kind = item_kind(r_.string()); break;
        case 2:
          if (rec.seen(4)) reserve(i.nodes, node_count, 38);  // {"key":"","key_kinds":"","kind":"map"}
          r_.array([&] { i.nodes.push_back(node()); });
          break;
        case 3:
          if (rec.seen(5)) reserve(i.leaves, leaf_count, 90);  // every required member, all empty
          r_.array([&] {
            LeafRecord& l = i.leaves.emplace_back();
            leaf(l, i.leaves.size() - 1);
          });
          break;
        case 4: node_count = r_.uint64(); break;
        case 5: leaf_count = r_.uint64(); break;
        case 6: leaf_table(table); break;
      }
    });
    if (rec.seen(3) == rec.seen(6))
      r_.fail(rec.seen(3) ? "an item record has both 'leaves' and 'leaf_table'" : "an item record has no 'leaves'");
    if (rec.seen(6)) table_leaves(table, i);
    if (rec.seen(4) && node_count != i.nodes.size())
      r_.fail("item '" + i.name + "' has node_count " + std::to_string(node_count) + " but lists " +
              std::to_string(i.nodes.size()) + " nodes");
    if (rec.seen(5) && leaf_count != i.leaves.size())
      r_.fail("item '" + i.name + "' has leaf_count " + std::to_string(leaf_count) + " but lists " +
              std::to_string(i.leaves.size()) + " leaves");
    return i;
  }

  NodeRecord node() {
    NodeRecord n;
    static constexpr std::string_view names[] = {"key", "key_kinds", "kind"};
    RecordReader rec(r_, "a node record", names);
    rec.read(0x7, [&](int member) {
      switch (member) {
        case 0: key_ = r_.string(); break;
        case 1: kinds_ = r_.string(); break;
        case 2: n.kind = node_kind(r_.string()); break;
      }
    });
    n.path = KeyPath::from_stored(key_, kinds_);
    return n;
  }

  // Errors inside a leaf name its key (the first member cairn writes). Read in place, into
  // the item's array (at `index`). Members left out take their defaults (format 2's short
  // form, docs/format.md), which depend on the leaf's shape and dtype: filled in at the end.
  void leaf(LeafRecord& l, std::size_t index) {
    key_.clear();
    try {
      // In the order format 2 writes them (the reader guesses the next name from it): the
      // members every leaf has, then the optional ones.
      static constexpr std::string_view names[] = {"key", "key_kinds", "dtype", "shape", "chunks", "saved_from", "order", "sharding"};
      RecordReader rec(r_, "a leaf record", names);
      chunk_members_.clear();
      rec.read(0x1f, [&](int member) {  // key, key_kinds, dtype, shape, chunks
        switch (member) {
          case 0: key_ = r_.string(); break;
          case 1: kinds_ = r_.string(); break;
          case 2: l.dtype = dtype(r_.string()); break;
          case 3: ints(l.shape); break;
          case 4: r_.array([&] { chunk(l.chunks.emplace_back()); }); break;
          case 5: l.saved_from = dtype(r_.string()); break;
          case 6: {
            const std::string_view order = r_.string();
            if (order != "C" && order != "F") r_.fail("unknown order '" + std::string(order) + "'");
            l.order = static_cast<Order>(order[0]);
            break;
          }
          case 7: sharding(l); break;
        }
      });
      l.path = KeyPath::from_stored(key_, kinds_);
      if (printed_ && !printed_->empty())
        printed_->back().push_back(prints_as_stored(key_, kinds_) ? std::string(key_) : l.path.str());  // a copy, most often
      if (!rec.seen(5)) l.saved_from = l.dtype;
      for (std::size_t i = 0; i < l.chunks.size(); ++i) {
        ChunkRecord& c = l.chunks[i];
        const ChunkMembers& seen = chunk_members_[i];
        if (!(seen.mask & chunk_start)) c.start.assign(l.shape.size(), 0);
        if (!(seen.mask & chunk_shape)) c.shape = l.shape;
        if (!(seen.mask & chunk_nbytes)) c.nbytes = byte_count(c.shape, dtype_size(l.dtype));
        if (seen.file_number < 0) continue;
        const auto number = static_cast<std::uint64_t>(seen.file_number);
        if (!data_files_)
          unresolved_.push_back({item_index_, index, i, number});
        else if (number >= data_files_->size())
          throw Error(ErrorKind::corrupt, unknown_file(i, number, data_files_->size()));
        else
          c.file = (*data_files_)[number];
      }
      if (l.sharding) {
        try {
          l.sharding->validate(l.shape.size());
        } catch (const Error& e) {
          throw Error(ErrorKind::corrupt, "bad sharding record: " + e.message());
        }
      }
    } catch (const Error& e) {
      throw Error(e.kind(), e.message(), path_, key_);
    }
  }

  // Format 3's leaf table (docs/format.md, "Leaf tables"), read column by column, then made
  // into the item's leaf records (table_leaves). Runs are [value, count] pairs whose counts
  // are checked against the number of keys as they are expanded, never trusted to size
  // anything.
  template <class T>
  using Runs = std::vector<std::pair<T, std::uint64_t>>;
  struct LeafTable {
    // The keys, printed whole, one after another in one string (not a string each: 10,000
    // keys were 320 KB of strings, and their vector's growth, in new memory).
    std::string key_text;
    std::vector<std::size_t> key_ends;  // where each key ends in key_text
    std::size_t size() const { return key_ends.size(); }
    std::string_view key(std::size_t i) const {
      const std::size_t from = i ? key_ends[i - 1] : 0;
      return std::string_view(key_text).substr(from, key_ends[i] - from);
    }
    Runs<std::string> kinds;
    Runs<DType> dtypes;
    Runs<std::size_t> ranks;
    std::vector<std::int64_t> dims;
    Runs<std::uint64_t> files;
    std::vector<std::int64_t> offsets;
    std::string crc32c;  // 8 hexadecimal digits a leaf
  };

  template <class T, class F>
  void runs(Runs<T>& out, F&& value) {
    r_.array([&] {
      int at = 0;
      T v{};
      std::uint64_t count = 0;
      r_.array([&] {
        if (at == 0) v = value();
        else if (at == 1) count = r_.uint64();
        else r_.fail("a run of a leaf table is not [value, count]");
        ++at;
      });
      if (at != 2 || count == 0) r_.fail("a run of a leaf table is not [value, count] with a count of at least 1");
      out.emplace_back(std::move(v), count);
    });
  }

  void leaf_table(LeafTable& t) {
    static constexpr std::string_view names[] = {"keys", "key_kinds", "dtype", "rank", "shape", "file", "offset", "crc32c"};
    RecordReader rec(r_, "a leaf table", names);
    rec.read(0xff, [&](int member) {
      switch (member) {
        case 0: {
          // [shared, suffix, ...]: each key is the first `shared` bytes of the key before it
          // and then its suffix. A few bytes of text can spell a long key, so the keys' total
          // is bounded by the text's size (keys growing a byte each, from 1 MB of text, would
          // otherwise be gigabytes).
          bool suffix_next = false;
          std::uint64_t shared = 0;
          const std::uint64_t text = r_.position() + r_.remaining();
          const std::uint64_t most_key_bytes = max_table_key_bytes_per_text_byte * text + (std::uint64_t{64} << 20);
          std::uint64_t key_bytes = 0;
          r_.array([&] {
            if (!suffix_next) {
              shared = r_.uint64();
              const std::size_t most = t.size() ? t.key(t.size() - 1).size() : 0;
              if (shared > most)
                r_.fail("a leaf table's key shares " + std::to_string(shared) + " bytes with a key of " + std::to_string(most));
            } else {
              const std::string_view suffix = r_.string();
              key_bytes += static_cast<std::size_t>(shared) + suffix.size();
              if (key_bytes > most_key_bytes)
                r_.fail("a leaf table's keys come to more than " + std::to_string(most_key_bytes) + " bytes (" +
                        std::to_string(max_table_key_bytes_per_text_byte) + " a byte of the text, and 64 MiB)");
              // (the key before ends where key_text ends: its first `shared` bytes, copied from there)
              const std::size_t before = t.size() > 1 ? t.key_ends[t.size() - 2] : 0;
              if (shared) t.key_text.append(t.key_text, before, static_cast<std::size_t>(shared));
              t.key_text.append(suffix);
              t.key_ends.push_back(t.key_text.size());
            }
            suffix_next = !suffix_next;
          });
          if (suffix_next) r_.fail("a leaf table's keys are not [shared, suffix, ...] pairs");
          break;
        }
        case 1: runs(t.kinds, [&] { return std::string(r_.string()); }); break;
        case 2: runs(t.dtypes, [&] { return dtype(r_.string()); }); break;
        case 3: runs(t.ranks, [&] { return r_.integer<std::size_t>(); }); break;
        case 4: ints(t.dims); break;
        case 5: runs(t.files, [&] { return static_cast<std::uint64_t>(r_.integer<std::uint32_t>()); }); break;
        case 6: ints(t.offsets); break;
        case 7: t.crc32c = r_.string(); break;
      }
    });
  }

  // A lowercase hexadecimal digit's value; 0x10 for any other character.
  static constexpr auto hex_values = [] {
    std::array<std::uint8_t, 256> v{};
    for (auto& x : v) x = 0x10;
    for (std::size_t c = 0; c < 10; ++c) v['0' + c] = static_cast<std::uint8_t>(c);
    for (std::size_t c = 0; c < 6; ++c) v['a' + c] = static_cast<std::uint8_t>(10 + c);
    return v;
  }();

  // The table's leaves as records: every column must describe exactly as many leaves as it
  // has keys. Errors name the leaf's key.
  void table_leaves(LeafTable& t, ItemRecord& item) {
    const std::size_t n = t.size();
    auto check_runs = [&](const auto& runs, const char* column) {
      std::uint64_t total = 0;
      bool more = false;  // (counts are untrusted: summed with a check, never past n)
      for (const auto& r : runs)
        if (!checked_add(total, r.second, total) || total > n) {
          more = true;
          break;
        }
      if (more || total != n)
        r_.fail(std::string("a leaf table's '") + column + "' runs cover " + (more ? "more" : "fewer") + " than its " +
                std::to_string(n) + " keys");
    };
    check_runs(t.kinds, "key_kinds");
    check_runs(t.dtypes, "dtype");
    check_runs(t.ranks, "rank");
    check_runs(t.files, "file");
    if (t.offsets.size() != n) r_.fail("a leaf table has " + std::to_string(t.offsets.size()) + " offsets for " + std::to_string(n) + " keys");
    if (t.crc32c.size() != 8 * n)
      r_.fail("a leaf table's crc32c has " + std::to_string(t.crc32c.size()) + " digits for " + std::to_string(n) + " keys");
    item.leaves.reserve(n);
    if (printed_ && !printed_->empty()) printed_->back().reserve(printed_->back().size() + n);
    // A cursor over runs: the value for the next leaf.
    auto cursor = [](const auto& runs) {
      return [&runs, at = std::size_t{0}, left = runs.empty() ? std::uint64_t{0} : runs[0].second]() mutable -> const auto& {
        if (left == 0) left = runs[++at].second;
        --left;
        return runs[at].first;
      };
    };
    auto kinds = cursor(t.kinds);
    auto dtypes = cursor(t.dtypes);
    auto ranks = cursor(t.ranks);
    auto files = cursor(t.files);
    std::size_t dim = 0;
    std::uint64_t before_file = 0, before_end = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const std::string_view key = t.key(i);
      try {
        LeafRecord& l = item.leaves.emplace_back();
        const std::string& k = kinds();
        l.path = KeyPath::from_stored(key, k);
        l.dtype = l.saved_from = dtypes();
        const std::size_t rank = ranks();
        if (rank > t.dims.size() - dim)
          throw Error(ErrorKind::corrupt, "a leaf table's shape column ends before this leaf's " + std::to_string(rank) + " dimensions");
        l.shape.assign(t.dims.data() + dim, t.dims.data() + dim + rank);
        dim += rank;
        ChunkRecord& c = l.chunks.emplace_back();
        c.start.assign(rank, 0);
        c.shape = l.shape;
        c.nbytes = byte_count(c.shape, dtype_size(l.dtype));
        const std::uint64_t file = files();
        // The offset is relative to the end of the leaf before where both are in one file.
        const std::int64_t delta = t.offsets[i];
        std::uint64_t offset = 0;
        if (i == 0 || file != before_file) {
          if (delta < 0) throw Error(ErrorKind::corrupt, "a leaf table gives a negative offset");
          offset = static_cast<std::uint64_t>(delta);
        } else if (delta >= 0) {
          if (!checked_add(before_end, static_cast<std::uint64_t>(delta), offset))
            throw Error(ErrorKind::corrupt, "a leaf table's offset overflows 64 bits");
        } else {
          const std::uint64_t back = static_cast<std::uint64_t>(-(delta + 1)) + 1;  // -delta, also for INT64_MIN
          if (back > before_end) throw Error(ErrorKind::corrupt, "a leaf table's offset lies before the start of its file");
          offset = before_end - back;
        }
        c.offset = offset;
        if (!checked_add(offset, c.nbytes, before_end)) throw Error(ErrorKind::corrupt, "a leaf table's offset and size overflow");
        before_file = file;
        // Through a table, without a branch a digit: checksums' digits are random, and the
        // branches' mispredictions were a tenth of this loop's time.
        std::uint32_t crc = 0, bad = 0;
        for (std::size_t d = 8 * i; d < 8 * i + 8; ++d) {
          const std::uint8_t v = hex_values[static_cast<unsigned char>(t.crc32c[d])];
          bad |= v;
          crc = crc << 4 | (v & 0xfu);
        }
        if (bad & 0x10u) throw Error(ErrorKind::corrupt, "a leaf table's crc32c has a character that is not a lowercase hexadecimal digit");
        c.crc32c = crc;
        if (!data_files_)
          unresolved_.push_back({item_index_, i, 0, file});
        else if (file >= data_files_->size())
          throw Error(ErrorKind::corrupt, unknown_file(0, file, data_files_->size()));
        else
          c.file = (*data_files_)[file];
        if (printed_ && !printed_->empty())  // the table's key, taken: nothing reads it after this
          printed_->back().push_back(prints_as_stored(key, k) ? std::string(key) : l.path.str());
      } catch (const Error& e) {
        throw Error(e.kind(), e.message(), path_, std::string(key));
      }
    }
    if (dim != t.dims.size()) r_.fail("a leaf table's shape column has dimensions past its leaves'");
  }

  static std::string unknown_file(std::size_t chunk, std::uint64_t number, std::size_t files) {
    return "chunk " + std::to_string(chunk) + " names data file " + std::to_string(number) + ", and data_files lists " +
           std::to_string(files);
  }

  static constexpr std::uint32_t chunk_start = 8, chunk_shape = 16, chunk_nbytes = 32;  // bits of `names` below
  // Which of a chunk's members were present, and the number of its file where it named one.
  struct ChunkMembers {
    std::uint32_t mask = 0;
    std::int64_t file_number = -1;
  };

  void chunk(ChunkRecord& c) {
    // In the order format 2 writes them: the members every chunk has, then the optional ones.
    static constexpr std::string_view names[] = {"file", "offset", "crc32c", "start", "shape", "nbytes", "block_bytes",
                                                 "block_crc32c"};
    RecordReader rec(r_, "a chunk record", names);
    ChunkMembers& seen = chunk_members_.emplace_back();
    rec.read(0x7, [&](int member) {  // file, offset, crc32c
      switch (member) {
        case 0:
          // A name, or (format 2) a number in `data_files`.
          if (r_.peek() == '"')
            c.file = r_.string();
          else
            seen.file_number = static_cast<std::int64_t>(r_.integer<std::uint32_t>());
          break;
        case 1: c.offset = r_.uint64(); break;
        case 2: c.crc32c = r_.integer<std::uint32_t>(); break;
        case 3: ints(c.start); break;
        case 4: ints(c.shape); break;
        case 5: c.nbytes = r_.uint64(); break;
        case 6: blocks(c).block_bytes = r_.uint64(); break;
        case 7: r_.array([&] { blocks(c).crc32c.push_back(r_.integer<std::uint32_t>()); }); break;
      }
    });
    seen.mask = rec.seen_mask();
    // Both block members or neither (their agreement with the chunk's size is validation's).
    if (rec.seen(6) != rec.seen(7)) r_.fail("a chunk record has one of 'block_bytes' and 'block_crc32c' without the other");
  }

  static BlockChecksums& blocks(ChunkRecord& c) {
    if (!c.blocks) c.blocks.emplace();
    return *c.blocks;
  }

  // {"mesh_axes", "mesh_shape", "memory", "device_ids", "spec"[, "device_processes"]}, every
  // part checked (the record is untrusted).
  void sharding(LeafRecord& l) {
    std::vector<std::string> axes;
    std::vector<std::int64_t> shape;
    std::string memory;
    std::vector<int> ids, processes;
    std::vector<PartitionSpec::Dim> dims;
    static constexpr std::string_view names[] = {"mesh_axes", "mesh_shape", "memory", "device_ids", "spec", "device_processes"};
    RecordReader rec(r_, "a sharding record", names);
    rec.read(0x1f, [&](int member) {
      switch (member) {
        case 0: r_.array([&] { axes.emplace_back(r_.string()); }); break;
        case 1: ints(shape); break;
        case 2: memory = r_.string(); break;
        case 3: ints(ids); break;
        case 4:
          r_.array([&] {
            std::vector<std::string> dim_axes;
            r_.array([&] { dim_axes.emplace_back(r_.string()); });
            dims.emplace_back(std::move(dim_axes));
          });
          break;
        case 5: ints(processes); break;
      }
    });
    auto bad = [&](const std::string& why) { throw Error(ErrorKind::corrupt, "bad sharding record: " + why); };
    if (axes.size() != shape.size()) bad("mesh_axes and mesh_shape differ in length");
    if (memory != "host" && memory != "device") bad("unknown memory '" + memory + "'");
    if (!processes.empty() && processes.size() != ids.size()) bad("device_processes and device_ids differ in length");
    const MemoryKind m = memory == "host" ? MemoryKind::host : MemoryKind::device;
    std::vector<MeshAxis> mesh_axes;
    for (std::size_t i = 0; i < axes.size(); ++i) mesh_axes.push_back({axes[i], shape[i]});
    std::vector<Device> devices;
    for (std::size_t i = 0; i < ids.size(); ++i) devices.push_back({m, ids[i], processes.empty() ? 0 : processes[i]});
    try {
      l.sharding.emplace(Mesh(std::move(mesh_axes), std::move(devices)), PartitionSpec(std::move(dims)));
    } catch (const Error& e) {
      bad(e.message());
    }
  }

  // Shapes and boxes: up to Shape::inline_rank dimensions read into the Shape itself, no
  // allocation.
  void ints(Shape& out) {
    out.clear();
    r_.array([&] { out.push_back(r_.int64()); });
  }
  template <class T>
  void ints(std::vector<T>& out) {
    out.clear();
    r_.array([&] { out.push_back(r_.integer<T>()); });
  }

  DType dtype(std::string_view s) {
    // Most leaves have the dtype of the one before.
    if (same_text(s, dtype_name(last_dtype_))) return last_dtype_;
    if (!parse_dtype(s, last_dtype_)) r_.fail("unknown dtype '" + std::string(s.substr(0, 40)) + "'");
    return last_dtype_;
  }
  NodeKind node_kind(std::string_view s) {
    for (NodeKind k : {NodeKind::struct_, NodeKind::sequence, NodeKind::map, NodeKind::tuple, NodeKind::optional,
                       NodeKind::custom})
      if (s == node_kind_name(k)) return k;
    r_.fail("unknown node kind '" + std::string(s.substr(0, 40)) + "'");
  }
  ItemKind item_kind(std::string_view s) {
    for (ItemKind k : {ItemKind::tree, ItemKind::json, ItemKind::cereal})
      if (s == item_kind_name(k)) return k;
    r_.fail("unknown item kind '" + std::string(s.substr(0, 40)) + "'");
  }

  const std::string path_;
  JsonReader r_;
  std::string key_, kinds_;  // of the record being read, reused
  std::vector<ChunkMembers> chunk_members_;  // of the leaf being read, reused
  const std::vector<std::string>* data_files_ = nullptr;  // once read
  std::size_t item_index_ = 0;
  DType last_dtype_ = DType::float32;
  // A chunk that named its file by number before the list of files was read.
  struct Unresolved {
    std::size_t item, leaf, chunk;
    std::uint64_t number;
  };
  std::vector<Unresolved> unresolved_;
  PrintedKeys* printed_ = nullptr;
};

// Parses _METADATA's text (`path` names it in errors); validate_metadata cross-checks it.
inline CheckpointMetadata metadata_from_json(std::string_view text, const std::string& path,
                                             PrintedKeys* printed = nullptr) {
  try {
    return MetadataReader(text, path, printed).metadata();
  } catch (const Error& e) {
    throw e.with_file(path);  // errors of the key path parser name no file
  }
}
inline ItemRecord item_from_json(std::string_view text, const std::string& path) {
  try {
    return MetadataReader(text, path).lone_item();
  } catch (const Error& e) {
    throw e.with_file(path);
  }
}

}  // namespace detail
CAIRN_END_NAMESPACE
