// SPDX-License-Identifier: Apache-2.0
// The runtime of core/mesh.hpp: building and checking a mesh, and describing it. Out of line
// with separate compilation, so that a file that includes cairn/cairn.hpp does not compile
// these bodies (the device check's sort among them) again.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "cairn/core/mesh.hpp"

CAIRN_BEGIN_NAMESPACE

CAIRN_API std::string to_string(const Device& d) {
  return std::string(d.memory == MemoryKind::host ? "host:" : "device:") + std::to_string(d.id);
}

CAIRN_API Mesh::Mesh(std::vector<MeshAxis> axes, std::vector<Device> devices, int this_process)
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

CAIRN_API Mesh& Mesh::assign_processes(const std::vector<int>& process_of, int this_process) {
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

CAIRN_API std::vector<std::int64_t> Mesh::coordinates(std::size_t i) const {
  std::vector<std::int64_t> c(axes_.size());
  std::uint64_t r = i;
  for (std::size_t a = axes_.size(); a-- > 0;) {
    c[a] = static_cast<std::int64_t>(r % static_cast<std::uint64_t>(axes_[a].size));
    r /= static_cast<std::uint64_t>(axes_[a].size);
  }
  return c;
}

CAIRN_API std::string Mesh::describe() const {
  std::string s = "{";
  for (std::size_t i = 0; i < axes_.size(); ++i) s += (i ? ", " : "") + axes_[i].name + ": " + std::to_string(axes_[i].size);
  s += "} on ";
  s += devices_.empty() ? "no devices" : memory_kind_name(devices_.front().memory);
  return s;
}

// Checks the axes (names, sizes, at most 2^20 devices) and returns the number of positions.
CAIRN_API std::int64_t Mesh::positions(const std::vector<MeshAxis>& axes) {
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

CAIRN_API void Mesh::check_unique() const {
  std::vector<std::pair<int, int>> ids;
  for (const auto& d : devices_) ids.emplace_back(d.process, d.id);
  std::sort(ids.begin(), ids.end());
  for (std::size_t i = 1; i < ids.size(); ++i)
    if (ids[i] == ids[i - 1])
      throw Error(ErrorKind::invalid_argument, "device " + std::to_string(ids[i].second) + " appears twice in the mesh" +
                  (ids[i].first ? " (process " + std::to_string(ids[i].first) + ")" : std::string()));
}

CAIRN_API Mesh Mesh::per_process_mesh(std::vector<MeshAxis> axes, MemoryKind memory, int per_process, int this_process) {
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

CAIRN_API Mesh Mesh::make(std::vector<MeshAxis> axes, MemoryKind memory, std::vector<int> ids) {
  const std::int64_t n = positions(axes);
  if (!ids.empty() && static_cast<std::int64_t>(ids.size()) != n)
    throw Error(ErrorKind::invalid_argument, "mesh of " + std::to_string(n) + " positions given " +
                std::to_string(ids.size()) + " device ids");
  std::vector<Device> devices;
  for (std::int64_t i = 0; i < n; ++i)
    devices.push_back({memory, ids.empty() ? static_cast<int>(i) : ids[static_cast<std::size_t>(i)], 0});
  return Mesh(std::move(axes), std::move(devices));
}

CAIRN_END_NAMESPACE
