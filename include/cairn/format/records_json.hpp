// The records' cereal serialization as JSON, the form of _METADATA. Loading validates what a
// record can check on its own; the cross-checks against files and shapes are
// validate_metadata in format/files.hpp.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include <cereal/archives/json.hpp>
#include <cereal/cereal.hpp>
#include <cereal/types/string.hpp>
#include <cereal/types/vector.hpp>

#include "cairn/format/records.hpp"

CAIRN_BEGIN_NAMESPACE

template <class Archive>
void serialize(Archive& ar, ChunkRecord& c) {
  ar(cereal::make_nvp("start", c.start), cereal::make_nvp("shape", c.shape), cereal::make_nvp("file", c.file),
     cereal::make_nvp("offset", c.offset), cereal::make_nvp("nbytes", c.nbytes), cereal::make_nvp("crc32c", c.crc32c));
}

namespace detail {
[[noreturn]] inline void bad_record(const std::string& what) { throw Error(ErrorKind::corrupt, what); }

inline NodeKind node_kind_from_name(const std::string& s) {
  for (NodeKind k : {NodeKind::struct_, NodeKind::sequence, NodeKind::map, NodeKind::tuple, NodeKind::optional,
                     NodeKind::custom})
    if (s == node_kind_name(k)) return k;
  bad_record("unknown node kind '" + s + "'");
}

inline ItemKind item_kind_from_name(const std::string& s) {
  for (ItemKind k : {ItemKind::tree, ItemKind::json, ItemKind::cereal})
    if (s == item_kind_name(k)) return k;
  bad_record("unknown item kind '" + s + "'");
}

inline DType stored_dtype(const std::string& s) {
  DType d;
  if (!parse_dtype(s, d)) bad_record("unknown dtype '" + s + "'");
  return d;
}
}  // namespace detail

// A sharding as stored: {"mesh": {"axes", "shape", "memory", "device_ids"}, "spec": [[axes] per dim]}.
struct StoredSharding {
  std::vector<std::string> axes;
  std::vector<std::int64_t> shape;
  std::string memory = "host";
  std::vector<int> device_ids;
  std::vector<std::vector<std::string>> spec;
  // The process of each device; written only when the mesh spans several processes, so
  // single-process checkpoints are as before (and older readers ignore the field).
  std::vector<int> device_processes;

  template <class Archive>
  void save(Archive& ar) const {
    ar(cereal::make_nvp("mesh_axes", axes), cereal::make_nvp("mesh_shape", shape), cereal::make_nvp("memory", memory),
       cereal::make_nvp("device_ids", device_ids), cereal::make_nvp("spec", spec));
    if (!device_processes.empty()) ar(cereal::make_nvp("device_processes", device_processes));
  }
  template <class Archive>
  void load(Archive& ar) {
    ar(cereal::make_nvp("mesh_axes", axes), cereal::make_nvp("mesh_shape", shape), cereal::make_nvp("memory", memory),
       cereal::make_nvp("device_ids", device_ids), cereal::make_nvp("spec", spec));
    if constexpr (std::is_same_v<Archive, cereal::JSONInputArchive>) {
      const char* next = ar.getNodeName();
      if (next && std::string_view(next) == "device_processes") ar(cereal::make_nvp("device_processes", device_processes));
    }
  }

  static StoredSharding from(const NamedSharding& s) {
    StoredSharding r;
    for (const auto& a : s.mesh.axes()) { r.axes.push_back(a.name); r.shape.push_back(a.size); }
    r.memory = s.mesh.devices().empty() ? "host" : memory_kind_name(s.mesh.devices().front().memory);
    for (const auto& d : s.mesh.devices()) r.device_ids.push_back(d.id);
    if (s.mesh.process_count() > 1)
      for (const auto& d : s.mesh.devices()) r.device_processes.push_back(d.process);
    for (const auto& d : s.spec.dims()) r.spec.push_back(d.axes);
    return r;
  }
  // Checks everything (the record is untrusted); throws corrupt.
  NamedSharding to_sharding(std::size_t rank) const {
    try {
      if (axes.size() != shape.size()) throw Error(ErrorKind::corrupt, "mesh_axes and mesh_shape differ in length");
      if (memory != "host" && memory != "device") throw Error(ErrorKind::corrupt, "unknown memory '" + memory + "'");
      const MemoryKind m = memory == "host" ? MemoryKind::host : MemoryKind::device;
      std::vector<MeshAxis> mesh_axes;
      for (std::size_t i = 0; i < axes.size(); ++i) mesh_axes.push_back({axes[i], shape[i]});
      if (!device_processes.empty() && device_processes.size() != device_ids.size())
        throw Error(ErrorKind::corrupt, "device_processes and device_ids differ in length");
      std::vector<Device> devices;
      for (std::size_t i = 0; i < device_ids.size(); ++i)
        devices.push_back({m, device_ids[i], device_processes.empty() ? 0 : device_processes[i]});
      std::vector<PartitionSpec::Dim> dims;
      for (const auto& d : spec) dims.emplace_back(d);
      NamedSharding s(Mesh(std::move(mesh_axes), std::move(devices)), PartitionSpec(std::move(dims)));
      s.validate(rank);
      return s;
    } catch (const Error& e) {
      throw Error(ErrorKind::corrupt, "bad sharding record: " + e.message());
    }
  }
};

template <class Archive>
void save(Archive& ar, const LeafRecord& l) {
  ar(cereal::make_nvp("key", l.path.str()), cereal::make_nvp("key_kinds", l.path.kinds()),
     cereal::make_nvp("dtype", std::string(dtype_name(l.dtype))),
     cereal::make_nvp("saved_from", std::string(dtype_name(l.saved_from))), cereal::make_nvp("shape", l.shape),
     cereal::make_nvp("order", std::string(1, static_cast<char>(l.order))), cereal::make_nvp("chunks", l.chunks));
  if (l.sharding) ar(cereal::make_nvp("sharding", StoredSharding::from(*l.sharding)));
}
template <class Archive>
void load(Archive& ar, LeafRecord& l) {
  std::string key, kinds, dtype, saved_from, order;
  ar(cereal::make_nvp("key", key), cereal::make_nvp("key_kinds", kinds), cereal::make_nvp("dtype", dtype),
     cereal::make_nvp("saved_from", saved_from), cereal::make_nvp("shape", l.shape), cereal::make_nvp("order", order),
     cereal::make_nvp("chunks", l.chunks));
  l.path = KeyPath::from_stored(key, kinds);
  l.dtype = detail::stored_dtype(dtype);
  l.saved_from = detail::stored_dtype(saved_from);
  if (order != "C" && order != "F") detail::bad_record("key '" + key + "': unknown order '" + order + "'");
  l.order = static_cast<Order>(order[0]);
  // "sharding" is optional and follows "chunks" (readers of format 1 before it ignore it).
  if constexpr (std::is_same_v<Archive, cereal::JSONInputArchive>) {
    const char* next = ar.getNodeName();
    if (next && std::string_view(next) == "sharding") {
      StoredSharding s;
      ar(cereal::make_nvp("sharding", s));
      try {
        l.sharding = s.to_sharding(l.shape.size());
      } catch (const Error& e) {
        throw Error(e.kind(), e.message(), {}, key);
      }
    }
  }
}

template <class Archive>
void save(Archive& ar, const NodeRecord& n) {
  ar(cereal::make_nvp("key", n.path.str()), cereal::make_nvp("key_kinds", n.path.kinds()),
     cereal::make_nvp("kind", std::string(node_kind_name(n.kind))));
}
template <class Archive>
void load(Archive& ar, NodeRecord& n) {
  std::string key, kinds, kind;
  ar(cereal::make_nvp("key", key), cereal::make_nvp("key_kinds", kinds), cereal::make_nvp("kind", kind));
  n.path = KeyPath::from_stored(key, kinds);
  n.kind = detail::node_kind_from_name(kind);
}

template <class Archive>
void save(Archive& ar, const ItemRecord& i) {
  ar(cereal::make_nvp("name", i.name), cereal::make_nvp("kind", std::string(item_kind_name(i.kind))),
     cereal::make_nvp("nodes", i.nodes), cereal::make_nvp("leaves", i.leaves));
}
template <class Archive>
void load(Archive& ar, ItemRecord& i) {
  std::string kind;
  ar(cereal::make_nvp("name", i.name), cereal::make_nvp("kind", kind), cereal::make_nvp("nodes", i.nodes),
     cereal::make_nvp("leaves", i.leaves));
  i.kind = detail::item_kind_from_name(kind);
}

// The metadata file holds everything but the user metadata, which has a file of its own.
template <class Archive>
void save(Archive& ar, const CheckpointMetadata& m) {
  ar(cereal::make_nvp("format", std::string("cairn")), cereal::make_nvp("format_version", m.format_version),
     cereal::make_nvp("library_version", m.library_version), cereal::make_nvp("created_unix_ms", m.created_unix_ms),
     cereal::make_nvp("created", m.created), cereal::make_nvp("data_files", m.data_files),
     cereal::make_nvp("items", m.items));
}
template <class Archive>
void load(Archive& ar, CheckpointMetadata& m) {
  std::string format;
  ar(cereal::make_nvp("format", format), cereal::make_nvp("format_version", m.format_version));
  if (format != "cairn") detail::bad_record("not a cairn metadata file (format '" + format + "')");
  if (m.format_version > cairn::format_version || m.format_version < 1)
    throw Error(ErrorKind::unsupported_version, "format version " + std::to_string(m.format_version) +
                " (this cairn reads up to " + std::to_string(cairn::format_version) + ")");
  ar(cereal::make_nvp("library_version", m.library_version), cereal::make_nvp("created_unix_ms", m.created_unix_ms),
     cereal::make_nvp("created", m.created), cereal::make_nvp("data_files", m.data_files),
     cereal::make_nvp("items", m.items));
}

CAIRN_END_NAMESPACE
