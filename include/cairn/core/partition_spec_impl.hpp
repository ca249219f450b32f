// SPDX-License-Identifier: Apache-2.0
// The runtime of core/partition_spec.hpp: its printed form. Out of line with separate
// compilation, like the other members the sharding types run (docs/compile-time.md).
#pragma once

#include <string>

#include "cairn/core/partition_spec.hpp"

CAIRN_BEGIN_NAMESPACE

// PartitionSpec('data', None, ('x', 'y')) in JAX's notation, for messages and summaries.
CAIRN_API std::string PartitionSpec::str() const {
  std::string s = "PartitionSpec(";
  for (std::size_t d = 0; d < dims_.size(); ++d) {
    if (d) s += ", ";
    const auto& a = dims_[d].axes;
    if (a.empty()) s += "None";
    else if (a.size() == 1) s += "'" + a[0] + "'";
    else {
      s += "(";
      for (std::size_t i = 0; i < a.size(); ++i) s += (i ? ", '" : "'") + a[i] + "'";
      s += ")";
    }
  }
  return s + ")";
}

CAIRN_END_NAMESPACE
