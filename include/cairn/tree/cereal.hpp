// SPDX-License-Identifier: Apache-2.0
// cereal for CAIRN_TREE structs: each field as a name-value pair, in declaration order, so
// that any cereal archive (JSON, binary, portable binary) serializes an annotated struct.
#pragma once

#include <tuple>

#if defined(__has_include) && !__has_include(<cereal/cereal.hpp>)
#error "cairn needs cereal's headers (cereal 1.3: Debian's libcereal-dev, or cereal's include/ directory on the include path)"
#endif
#include <cereal/cereal.hpp>

#include "cairn/tree/describe.hpp"

CAIRN_BEGIN_NAMESPACE
namespace detail {

template <class Archive, class>
struct cereal_fields {
  template <class T>
  static void serialize(Archive& archive, T& value) {
    std::apply([&](const auto&... field) { archive(cereal::make_nvp(field.name, value.*(field.member))...); },
               fields_of<T>());
  }
};

}  // namespace detail
CAIRN_END_NAMESPACE
