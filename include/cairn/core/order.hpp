// SPDX-License-Identifier: Apache-2.0
// Small value types that the tree, the format and the loaders share: the memory order of an
// array and the kind of an inner node of a tree.
#pragma once

#include "cairn/core/config.hpp"

CAIRN_BEGIN_NAMESPACE

// Memory order of a stored or in-memory array: row-major (C) or column-major (F, Fortran).
enum class Order : char { C = 'C', F = 'F' };

enum class NodeKind : char { struct_, sequence, map, tuple, optional, custom };

inline const char* node_kind_name(NodeKind k) {
  switch (k) {
    case NodeKind::struct_: return "struct";
    case NodeKind::sequence: return "sequence";
    case NodeKind::map: return "map";
    case NodeKind::tuple: return "tuple";
    case NodeKind::optional: return "optional";
    case NodeKind::custom: return "custom";
  }
  return "?";
}

CAIRN_END_NAMESPACE
