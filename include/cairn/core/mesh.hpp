// SPDX-License-Identifier: Apache-2.0
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

CAIRN_API std::string to_string(const Device& d);

struct MeshAxis {
  std::string name;
  std::int64_t size = 1;
  friend bool operator==(const MeshAxis&, const MeshAxis&) = default;
};

class Mesh {
 public:
  Mesh() = default;
  // Devices in row-major order over the axes (the last axis varies fastest).
  CAIRN_API Mesh(std::vector<MeshAxis> axes, std::vector<Device> devices, int this_process = 0);

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
  CAIRN_API Mesh& assign_processes(const std::vector<int>& process_of, int this_process);
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
  CAIRN_API std::vector<std::int64_t> coordinates(std::size_t i) const;
  bool is_local(std::size_t i) const { return devices_[i].process == this_process_; }

  // "{data: 2, model: 4} on host" for messages.
  CAIRN_API std::string describe() const;

  friend bool operator==(const Mesh& a, const Mesh& b) { return a.axes_ == b.axes_ && a.devices_ == b.devices_; }

 private:
  // Checks the axes (names, sizes, at most 2^20 devices) and returns the number of positions.
  CAIRN_API static std::int64_t positions(const std::vector<MeshAxis>& axes);

  // A device id may repeat across processes (each has its GPU 0), not within one.
  CAIRN_API void check_unique() const;

  CAIRN_API static Mesh per_process_mesh(std::vector<MeshAxis> axes, MemoryKind memory, int per_process, int this_process);

  CAIRN_API static Mesh make(std::vector<MeshAxis> axes, MemoryKind memory, std::vector<int> ids);

  std::vector<MeshAxis> axes_;
  std::vector<Device> devices_;
  int this_process_ = 0;
};

CAIRN_END_NAMESPACE

// Header-only: the definitions of the members declared here (with CAIRN_SEPARATE_COMPILATION,
// only in the translation unit of cairn/src.hpp).
#if CAIRN_DEFINES_RUNTIME
#include "cairn/core/mesh_impl.hpp"
#endif
