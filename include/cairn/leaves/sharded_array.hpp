// SPDX-License-Identifier: Apache-2.0
// cairn::ShardedArray<T>: a global N-d array split over a mesh of host or device memories by
// a NamedSharding, holding the shards of this process's devices (as a jax.Array does). It is
// a tree leaf like any other: saving writes each distinct shard once, and loading into it
// reshards the checkpoint onto its sharding, whatever the sharding it was saved with.
#pragma once

#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "cairn/core/named_sharding.hpp"
#include "cairn/device/memory.hpp"
#include "cairn/kernels/box_plan.hpp"
#include "cairn/tree/traits.hpp"

CAIRN_BEGIN_NAMESPACE

namespace detail {
// A stored sharding can be recreated here only if this process has its devices: host
// devices always, device ids below the device count of Thrust's device system.
inline void require_devices(const NamedSharding& stored, int device_count) {
  const Mesh& m = stored.mesh;
  if (m.devices().empty() || m.devices().front().memory != MemoryKind::device) return;
  int max_id = 0;
  for (const auto& d : m.devices()) max_id = std::max(max_id, d.id);
  if (max_id >= device_count)
    throw Error(ErrorKind::invalid_argument, "saved sharded over " + stored.describe() + " (device ids up to " +
                std::to_string(max_id) + "), but this process sees " + std::to_string(device_count) +
                " devices. Give the target a sharding for the devices here: "
                "ShardedArray<T>(NamedSharding(Mesh::device({{\"x\", n}}), PartitionSpec{...}))");
}
}  // namespace detail

template <class T>
class ShardedArray {
  static_assert(has_dtype<T>, "cairn::ShardedArray<T> needs an element type with a dtype (bool, integers, "
                              "float, double, cairn::float16, cairn::bfloat16, cairn::float8_*)");

 public:
  // One device's part of the array: a box of the global array, C order, in the device's memory.
  class Shard {
   public:
    const Device& device() const { return device_; }
    const Box& box() const { return box_; }
    std::size_t mesh_position() const { return position_; }
    // False for a replica whose box a device earlier in mesh order also holds.
    bool primary() const { return primary_; }
    std::size_t size() const { return size_; }
    bool on_device() const { return device_.memory == MemoryKind::device; }
    // Host or device pointer, by where the shard lives.
    T* data() { return on_device() ? static_cast<T*>(device_bytes_.data()) : host_.get(); }
    const T* data() const { return on_device() ? static_cast<const T*>(device_bytes_.data()) : host_.get(); }

    // Copies of the elements to and from host memory, wherever the shard lives.
    std::vector<T> to_host() const {
      if constexpr (std::is_same_v<T, bool>) {  // std::vector<bool> packs bits: through a buffer
        auto tmp = std::make_unique<bool[]>(size_);
        copy_to(tmp.get());
        return std::vector<bool>(tmp.get(), tmp.get() + size_);
      } else {
        std::vector<T> v(size_);
        copy_to(v.data());
        return v;
      }
    }
    void copy_to(T* host) const {
      detail::copy_bytes(host, MemoryKind::host, data(), device_.memory, size_ * sizeof(T));
    }
    void from_host(const T* values) {
      detail::copy_bytes(data(), device_.memory, values, MemoryKind::host, size_ * sizeof(T));
    }

   private:
    friend class ShardedArray;
    // `zero`: filled with T{}; otherwise left as allocated, for a load that writes every
    // element next (no memset and no host buffer of zeros crossing to the GPU).
    Shard(Device d, Box b, std::size_t position, bool primary, bool zero = true)
        : device_(d), box_(std::move(b)), position_(position), primary_(primary),
          size_(static_cast<std::size_t>(box_.elements())) {
      if (on_device()) {
        const int have = detail::device_count();
        if (device_.id >= have)
          throw Error(ErrorKind::invalid_argument, "device " + std::to_string(device_.id) + " does not exist (this "
                      "process sees " + std::to_string(have) + " devices)");
        device_bytes_ = detail::DeviceBytes(size_ * sizeof(T), device_.id);
        if (zero) {
          auto zeros = std::make_unique<T[]>(size_);
          from_host(zeros.get());
        }
      } else {
        host_ = zero ? std::make_unique<T[]>(size_) : std::make_unique_for_overwrite<T[]>(size_);
      }
    }
    Shard copy() const {
      Shard s(device_, box_, position_, primary_);
      detail::copy_bytes(s.data(), device_.memory, data(), device_.memory, size_ * sizeof(T));
      return s;
    }

    Device device_;
    Box box_;
    std::size_t position_ = 0;
    bool primary_ = true;
    std::size_t size_ = 0;
    std::unique_ptr<T[]> host_;
    detail::DeviceBytes device_bytes_;
  };

  // No sharding yet: loading gives it the checkpoint's own sharding (or one host shard).
  ShardedArray() = default;
  // A load target with this sharding; its shape comes from the checkpoint.
  explicit ShardedArray(NamedSharding sharding) : sharding_(std::move(sharding)) {}
  // Zero-filled local shards of an array of `shape`.
  ShardedArray(Shape shape, NamedSharding sharding) : sharding_(std::move(sharding)) { allocate(std::move(shape)); }

  // Splits a dense row-major host array over the sharding (each local shard gets its box).
  static ShardedArray from_host(const T* values, Shape shape, NamedSharding sharding) {
    ShardedArray a(std::move(shape), std::move(sharding));
    const Box whole = whole_box(a.shape_);
    for (auto& s : a.shards_) {
      if (s.size() == 0) continue;
      auto part = std::make_unique<T[]>(s.size());
      detail::box_copy_host(sizeof(T), values, part.get(),
                            detail::plan_box_copy(s.box(), whole, false, s.box(), false));
      s.from_host(part.get());
    }
    return a;
  }
  static ShardedArray from_host(const std::vector<T>& values, Shape shape, NamedSharding sharding) {
    if (values.size() != element_count(shape))
      throw Error(ErrorKind::invalid_argument, "ShardedArray::from_host: " + std::to_string(values.size()) +
                  " values for shape " + to_string(shape));
    if constexpr (std::is_same_v<T, bool>) {
      auto bytes = std::make_unique<bool[]>(values.size());
      std::copy(values.begin(), values.end(), bytes.get());
      return from_host(bytes.get(), std::move(shape), std::move(sharding));
    } else {
      return from_host(values.data(), std::move(shape), std::move(sharding));
    }
  }

  ShardedArray(const ShardedArray& o) : shape_(o.shape_), sharding_(o.sharding_), allocated_(o.allocated_) {
    for (const auto& s : o.shards_) shards_.push_back(s.copy());
  }
  ShardedArray(ShardedArray&&) noexcept = default;
  ShardedArray& operator=(const ShardedArray& o) {
    if (this != &o) { ShardedArray c(o); *this = std::move(c); }
    return *this;
  }
  ShardedArray& operator=(ShardedArray&&) noexcept = default;

  const Shape& shape() const { return shape_; }
  bool has_sharding() const { return sharding_.has_value(); }
  const NamedSharding& sharding() const {
    if (!sharding_) throw Error(ErrorKind::invalid_argument, "this ShardedArray has no sharding yet");
    return *sharding_;
  }
  // This process's shards, in mesh order (replicas included).
  std::vector<Shard>& shards() { return shards_; }
  const std::vector<Shard>& shards() const { return shards_; }
  bool allocated() const { return allocated_; }

  // (Re)creates zero-filled local shards for `shape` under the current sharding.
  void allocate(Shape shape) { allocate(std::move(shape), true); }
  // The same, leaving the elements unset where `zero` is false: for code that writes every
  // element next, as a load does (whose validation makes the stored chunks cover the array).
  void allocate(Shape shape, bool zero) {
    if (!sharding_) throw Error(ErrorKind::invalid_argument, "ShardedArray::allocate needs a sharding");
    const auto boxes = sharding_->shard_boxes(shape);
    std::vector<Shard> shards;
    std::map<std::pair<Shape, Shape>, std::size_t> first_holder;
    for (std::size_t i = 0; i < boxes.size(); ++i) {
      const bool primary = first_holder.emplace(std::make_pair(boxes[i].start, boxes[i].shape), i).second;
      if (sharding_->mesh.is_local(i)) shards.push_back(Shard(sharding_->mesh.devices()[i], boxes[i], i, primary, zero));
    }
    shape_ = std::move(shape);
    shards_ = std::move(shards);
    allocated_ = true;
  }
  // Replaces the sharding (for loading onto another layout); the shards are re-created by
  // the next load or allocate().
  void set_sharding(NamedSharding sharding) {
    sharding_ = std::move(sharding);
    shards_.clear();
    allocated_ = false;
  }

  // The whole array, row-major, on the host (every box must be held by this process).
  std::vector<T> gather() const {
    const auto n = static_cast<std::size_t>(element_count(shape_));
    if constexpr (std::is_same_v<T, bool>) {
      auto tmp = std::make_unique<bool[]>(n);
      gather_into(tmp.get(), n);
      return std::vector<bool>(tmp.get(), tmp.get() + n);
    } else {
      std::vector<T> out(n);
      gather_into(out.data(), n);
      return out;
    }
  }

 private:
  void gather_into(T* out, std::size_t n) const {
    const Box whole = whole_box(shape_);
    std::uint64_t covered = 0;
    std::map<std::pair<Shape, Shape>, bool> seen;  // each box once (a replica held here twice, or a
    for (const auto& s : shards_) {                 // replica whose primary is in another process)
      if (s.size() == 0 || !seen.emplace(std::make_pair(s.box().start, s.box().shape), true).second) continue;
      auto part = std::make_unique<T[]>(s.size());
      s.copy_to(part.get());
      detail::box_copy_host(sizeof(T), part.get(), out, detail::plan_box_copy(s.box(), s.box(), false, whole, false));
      covered += s.size();
    }
    if (covered != n)
      throw Error(ErrorKind::invalid_argument, "ShardedArray::gather: this process holds " + std::to_string(covered) +
                  " of the array's " + std::to_string(n) + " elements");
  }

  Shape shape_;
  std::optional<NamedSharding> sharding_;
  std::vector<Shard> shards_;
  bool allocated_ = false;
};

template <class T>
struct leaf_traits<ShardedArray<T>> {
  static std::vector<int> process_list(const Mesh& m) {
    std::vector<int> p;
    for (const auto& d : m.devices()) p.push_back(d.process);
    return p;
  }
  static constexpr std::size_t max_adopted_devices = 4096;
  static constexpr std::uint64_t max_adopted_copies = 64;
  static LeafView view(const ShardedArray<T>& a) {
    if (!a.allocated())
      throw Error(ErrorKind::invalid_argument, "this ShardedArray has no shards (construct it with a shape and a "
                  "sharding, or load into it) and cannot be saved");
    LeafView v{dtype_of<T>, a.shape(), Order::C, nullptr, byte_count(a.shape(), sizeof(T))};
    for (const auto& s : a.shards())
      v.shards.push_back({s.box(), s.data(), s.device().memory, s.device().id, s.primary()});
    v.sharding = a.sharding();
    return v;
  }

  static LeafBuffer prepare(ShardedArray<T>& a, const StoredLeafInfo& stored) {
    if (!a.has_sharding()) {
      if (stored.sharding) {
        // The stored sharding, where this process has its devices.
        const Mesh& m = stored.sharding->mesh;
        // Each device of the stored mesh gets a copy of its box: from untrusted metadata, a
        // huge replicated mesh could ask for any amount of memory.
        if (m.size() > max_adopted_devices)
          throw Error(ErrorKind::invalid_argument, "saved sharded over " + stored.sharding->describe() + " (" +
                      std::to_string(m.size()) + " devices); give the target a sharding of its own");
        detail::require_devices(*stored.sharding, detail::device_count());
        // Replicas multiply memory: a small leaf replicated over a large stored mesh could
        // ask for any amount. Adopting is refused beyond 64 copies of the stored bytes (the
        // stored bytes themselves are bounded by the files, checked before this runs).
        std::uint64_t local_bytes = 0;
        const auto boxes = stored.sharding->shard_boxes(stored.shape);
        for (std::size_t i = 0; i < boxes.size(); ++i)
          if (m.process_count() != stored.processes || m.devices()[i].process == stored.process) local_bytes += boxes[i].elements() * sizeof(T);
        const std::uint64_t stored_bytes = std::max<std::uint64_t>(element_count(stored.shape) * sizeof(T), 1);
        if (local_bytes / stored_bytes > max_adopted_copies)
          throw Error(ErrorKind::invalid_argument, "saved sharded over " + stored.sharding->describe() + ": adopting that "
                      "sharding would allocate " + std::to_string(local_bytes) + " bytes in this process, " +
                      std::to_string(local_bytes / stored_bytes) + " copies of the array; give the target a sharding "
                      "of its own");
        NamedSharding adopted = *stored.sharding;
        const int saved_by = m.process_count();
        if (saved_by == stored.processes) {
          adopted.mesh.assign_processes(process_list(m), stored.process);
        } else if (m.devices().front().memory == MemoryKind::host) {
          // A host mesh saved by another number of processes: each loading process takes it
          // whole (every device local here), as one process takes a multi-process save.
          adopted.mesh.assign_processes(std::vector<int>(m.size(), 0), 0);
        } else {
          throw Error(ErrorKind::invalid_argument, "saved sharded over " + stored.sharding->describe() + " across " +
                      std::to_string(saved_by) + " processes, loaded by " + std::to_string(stored.processes) +
                      ": give the target a sharding for the processes here");
        }
        a.set_sharding(std::move(adopted));
      } else {
        a.set_sharding(NamedSharding(Mesh::host({}), PartitionSpec{}));  // one host shard
      }
    }
    if (!a.allocated() || a.shape() != stored.shape) a.allocate(stored.shape, false);  // the load writes it all
    LeafBuffer b{dtype_of<T>, Order::C, nullptr, byte_count(a.shape(), sizeof(T))};
    for (auto& s : a.shards()) b.shards.push_back({s.box(), s.data(), s.device().memory, s.device().id});
    return b;
  }
};

CAIRN_END_NAMESPACE

// The box copy behind gather and from_host (its definition, as above).
#if CAIRN_DEFINES_RUNTIME
#include "cairn/kernels/box_copy.hpp"
#endif
