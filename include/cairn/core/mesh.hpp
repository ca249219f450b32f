// A Mesh is an N-d grid of devices with named axes, as in JAX: {"data": 2, "model": 4} is 8
// devices in a 2x4 grid. Devices are host "devices" (plain memory, so sharded code runs and
// is tested without a GPU) or Thrust device-system devices (CUDA GPUs when compiled with
// nvcc). Each device belongs to a process; an array holds the shards of this process's
// devices, so a mesh spanning several processes (MPI) fits the same design.
#pragma once

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "cairn/core/error.hpp"
#include "cairn/core/memory_kind.hpp"

CAIRN_BEGIN_NAMESPACE

struct Device {
  MemoryKind memory = MemoryKind::host;
  int id = 0;       // CUDA device ordinal for device memory; a plain index for host devices
  int process = 0;  // the process that holds this device
  friend bool operator==(const Device&, const Device&) = default;
};

inline std::string to_string(const Device& d) {
  return std::string(d.memory == MemoryKind::host ? "host:" : "device:") + std::to_string(d.id);
}

struct MeshAxis {
  std::string name;
  std::int64_t size = 1;
  friend bool operator==(const MeshAxis&, const MeshAxis&) = default;
};

class Mesh {
 public:
  Mesh() = default;
  // Devices in row-major order over the axes (the last axis varies fastest).
  Mesh(std::vector<MeshAxis> axes, std::vector<Device> devices, int this_process = 0)
      : axes_(std::move(axes)), devices_(std::move(devices)), this_process_(this_process) {
    const std::int64_t n = positions(axes_);
    if (static_cast<std::int64_t>(devices_.size()) != n)
      throw Error(ErrorKind::invalid_argument, "mesh of " + std::to_string(n) + " positions given " +
                  std::to_string(devices_.size()) + " devices");
    for (const auto& d : devices_) {
      if (d.memory != devices_.front().memory)
        throw Error(ErrorKind::invalid_argument, "a mesh holds host devices or device-system devices, not both");
      if (d.id < 0) throw Error(ErrorKind::invalid_argument, "negative device id " + std::to_string(d.id));
      if (d.process < 0) throw Error(ErrorKind::invalid_argument, "negative process " + std::to_string(d.process));
    }
    check_unique();
  }

  // Host devices 0..n-1: Mesh::host({{"data", 2}, {"model", 4}}).
  static Mesh host(std::vector<MeshAxis> axes) { return make(std::move(axes), MemoryKind::host, {}); }
  // Thrust device-system devices (CUDA GPUs under nvcc), ordinals 0..n-1 unless given.
  static Mesh device(std::vector<MeshAxis> axes, std::vector<int> ids = {}) {
    return make(std::move(axes), MemoryKind::device, std::move(ids));
  }

  const std::vector<MeshAxis>& axes() const { return axes_; }
  const std::vector<Device>& devices() const { return devices_; }
  std::size_t size() const { return devices_.size(); }
  int this_process() const { return this_process_; }
  // Assigns devices to processes (MPI ranks): process_of[i] is the process of devices()[i].
  Mesh& assign_processes(const std::vector<int>& process_of, int this_process) {
    if (process_of.size() != devices_.size())
      throw Error(ErrorKind::invalid_argument, "assign_processes: one process per device");
    for (std::size_t i = 0; i < devices_.size(); ++i) {
      if (process_of[i] < 0) throw Error(ErrorKind::invalid_argument, "negative process " + std::to_string(process_of[i]));
      devices_[i].process = process_of[i];
    }
    this_process_ = this_process;
    check_unique();
    return *this;
  }
  // A mesh over processes that hold `per_process` devices each, as MPI jobs are usually laid
  // out: mesh position i is device i % per_process of process i / per_process. For device
  // meshes the ids are each process's own ordinals (0..per_process-1); host ids are the
  // positions.
  static Mesh host_per_process(std::vector<MeshAxis> axes, int per_process, int this_process) {
    return per_process_mesh(std::move(axes), MemoryKind::host, per_process, this_process);
  }
  static Mesh device_per_process(std::vector<MeshAxis> axes, int per_process, int this_process) {
    return per_process_mesh(std::move(axes), MemoryKind::device, per_process, this_process);
  }
  // The processes the mesh spans (the largest process number + 1).
  int process_count() const {
    int n = 0;
    for (const auto& d : devices_) n = std::max(n, d.process + 1);
    return n;
  }

  int axis_index(const std::string& name) const {
    for (std::size_t i = 0; i < axes_.size(); ++i)
      if (axes_[i].name == name) return static_cast<int>(i);
    return -1;
  }
  // The grid coordinate of device position i along each axis.
  std::vector<std::int64_t> coordinates(std::size_t i) const {
    std::vector<std::int64_t> c(axes_.size());
    std::uint64_t r = i;
    for (std::size_t a = axes_.size(); a-- > 0;) {
      c[a] = static_cast<std::int64_t>(r % static_cast<std::uint64_t>(axes_[a].size));
      r /= static_cast<std::uint64_t>(axes_[a].size);
    }
    return c;
  }
  bool is_local(std::size_t i) const { return devices_[i].process == this_process_; }

  // "{data: 2, model: 4} on host" for messages.
  std::string describe() const {
    std::string s = "{";
    for (std::size_t i = 0; i < axes_.size(); ++i) s += (i ? ", " : "") + axes_[i].name + ": " + std::to_string(axes_[i].size);
    s += "} on ";
    s += devices_.empty() ? "no devices" : memory_kind_name(devices_.front().memory);
    return s;
  }

  friend bool operator==(const Mesh& a, const Mesh& b) { return a.axes_ == b.axes_ && a.devices_ == b.devices_; }

 private:
  // Checks the axes (names, sizes, at most 2^20 devices) and returns the number of positions.
  static std::int64_t positions(const std::vector<MeshAxis>& axes) {
    std::int64_t n = 1;
    for (std::size_t i = 0; i < axes.size(); ++i) {
      const auto& a = axes[i];
      if (a.name.empty()) throw Error(ErrorKind::invalid_argument, "mesh axis " + std::to_string(i) + " has no name");
      if (a.size < 1 || a.size > (1 << 20))
        throw Error(ErrorKind::invalid_argument, "mesh axis '" + a.name + "' has size " + std::to_string(a.size));
      for (std::size_t j = 0; j < i; ++j)
        if (axes[j].name == a.name) throw Error(ErrorKind::invalid_argument, "mesh axis '" + a.name + "' named twice");
      n *= a.size;
      if (n > (1 << 20)) throw Error(ErrorKind::invalid_argument, "mesh has more than 2^20 devices");
    }
    return n;
  }

  // A device id may repeat across processes (each has its GPU 0), not within one.
  void check_unique() const {
    std::vector<std::pair<int, int>> ids;
    for (const auto& d : devices_) ids.emplace_back(d.process, d.id);
    std::sort(ids.begin(), ids.end());
    for (std::size_t i = 1; i < ids.size(); ++i)
      if (ids[i] == ids[i - 1])
        throw Error(ErrorKind::invalid_argument, "device " + std::to_string(ids[i].second) + " appears twice in the mesh" +
                    (ids[i].first ? " (process " + std::to_string(ids[i].first) + ")" : std::string()));
  }

  static Mesh per_process_mesh(std::vector<MeshAxis> axes, MemoryKind memory, int per_process, int this_process) {
    const std::int64_t n = positions(axes);
    if (per_process < 1 || n % per_process != 0)
      throw Error(ErrorKind::invalid_argument, "a mesh of " + std::to_string(n) + " positions cannot be split into "
                  "processes of " + std::to_string(per_process) + " devices");
    std::vector<Device> devices;
    for (std::int64_t i = 0; i < n; ++i)
      devices.push_back({memory, static_cast<int>(memory == MemoryKind::host ? i : i % per_process),
                         static_cast<int>(i / per_process)});
    return Mesh(std::move(axes), std::move(devices), this_process);
  }

  static Mesh make(std::vector<MeshAxis> axes, MemoryKind memory, std::vector<int> ids) {
    const std::int64_t n = positions(axes);
    if (!ids.empty() && static_cast<std::int64_t>(ids.size()) != n)
      throw Error(ErrorKind::invalid_argument, "mesh of " + std::to_string(n) + " positions given " +
                  std::to_string(ids.size()) + " device ids");
    std::vector<Device> devices;
    for (std::int64_t i = 0; i < n; ++i)
      devices.push_back({memory, ids.empty() ? static_cast<int>(i) : ids[static_cast<std::size_t>(i)], 0});
    return Mesh(std::move(axes), std::move(devices));
  }

  std::vector<MeshAxis> axes_;
  std::vector<Device> devices_;
  int this_process_ = 0;
};

CAIRN_END_NAMESPACE
