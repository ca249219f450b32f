// SPDX-License-Identifier: Apache-2.0
// PartitionSpec: for each array dimension, the mesh axes it is split over (none: the
// dimension is replicated across the mesh). As in JAX, PartitionSpec{"data", replicated}
// splits rows over "data"; {{"data", "model"}} splits dimension 0 over both axes (data major);
// dimensions past the spec's length are replicated.
#pragma once

#include <initializer_list>
#include <string>
#include <vector>

#include "cairn/core/config.hpp"

CAIRN_BEGIN_NAMESPACE

struct Replicated {
  friend bool operator==(Replicated, Replicated) = default;
};
// The spec entry of a dimension split over no mesh axis (JAX's None).
inline constexpr Replicated replicated{};

class PartitionSpec {
 public:
  // One dimension's mesh axes: none, one, or several.
  struct Dim {
    std::vector<std::string> axes;
    Dim(Replicated) {}
    Dim(const char* axis) : axes{axis} {}
    Dim(std::string axis) : axes{std::move(axis)} {}
    Dim(std::initializer_list<std::string> list) : axes(list) {}
    explicit Dim(std::vector<std::string> list) : axes(std::move(list)) {}
    friend bool operator==(const Dim&, const Dim&) = default;
  };

  PartitionSpec() = default;
  PartitionSpec(std::initializer_list<Dim> dims) : dims_(dims) {}
  explicit PartitionSpec(std::vector<Dim> dims) : dims_(std::move(dims)) {}

  const std::vector<Dim>& dims() const { return dims_; }
  std::size_t size() const { return dims_.size(); }
  // The axes of dimension d (none past the end).
  const std::vector<std::string>& axes(std::size_t d) const {
    static const std::vector<std::string> none;
    return d < dims_.size() ? dims_[d].axes : none;
  }

  // PartitionSpec('data', None, ('x', 'y')) in JAX's notation, for messages and summaries.
  CAIRN_API std::string str() const;

  friend bool operator==(const PartitionSpec&, const PartitionSpec&) = default;

 private:
  std::vector<Dim> dims_;
};

CAIRN_END_NAMESPACE

// Header-only: the definitions of the members declared here (with CAIRN_SEPARATE_COMPILATION,
// only in the translation unit of cairn/src.hpp).
#if CAIRN_DEFINES_RUNTIME
#include "cairn/core/partition_spec_impl.hpp"
#endif
