// SPDX-License-Identifier: Apache-2.0
// CAIRN_TREE(Type, fields...): one macro per struct that makes it a tree node (fields in
// declaration order, keyed by name) and serializable by cereal archives. The macro emits a
// list of (name, member pointer) found by ADL, and everything else (traversal, cereal,
// printing) is written once on top of that list.
#pragma once

#include <cstddef>
#include <tuple>
#include <type_traits>
#include <utility>

#include "cairn/tree/for_each_macro.hpp"
#include "cairn/tree/traits.hpp"

namespace cereal {
class access;  // befriended by CAIRN_TREE_INTRUSIVE
}

CAIRN_BEGIN_NAMESPACE
namespace detail {

// A field's name as a template argument, so that a diagnostic about the field can name it.
template <std::size_t N>
struct field_name {
  char text[N];
  constexpr field_name(const char (&s)[N]) {
    for (std::size_t i = 0; i < N; ++i) text[i] = s[i];
  }
};

template <class Class, class Member, field_name Name>
struct field_descriptor {
  using struct_type = Class;
  using member_type = Member;
  static constexpr auto field = Name;
  static constexpr const char* name = Name.text;
  Member Class::*member;
};

template <field_name Name, class Class, class Member>
constexpr field_descriptor<Class, Member, Name> make_field(Member Class::*member) {
  return {member};
}

// Checked where a struct is used as a tree, not where CAIRN_TREE is written, so leaf_traits
// specializations may come after the macro. The compiler names Struct, Field and FieldType
// in the instantiation of this function.
template <class Struct, field_name Field, class FieldType>
constexpr void check_field_type() {
  static_assert(is_tree<FieldType>,
                "cairn: a field of a CAIRN_TREE struct has a type that cairn cannot store; the struct, the field "
                "and its type are the template arguments of cairn::detail::check_field_type<Struct, Field, "
                "FieldType> named in this diagnostic. For a type stored as one array (std::complex<float>, a "
                "tensor class), specialize cairn::leaf_traits<FieldType>; for a container, "
                "cairn::node_traits<FieldType>; for a struct of your own, add CAIRN_TREE(FieldType, ...) in "
                "FieldType's own namespace (written in another one, the global one included, it is not found). See "
                "docs/extending.md.");
}

// Takes the descriptor's type rather than deducing its parts from a parameter: nvcc's front
// end (CUDA 13) cannot deduce a class-type template argument such as `field_name Name`.
template <class Descriptor>
constexpr bool field_is_tree() {
  using Member = typename Descriptor::member_type;
  check_field_type<typename Descriptor::struct_type, Descriptor::field, Member>();
  return is_tree<Member>;
}

template <class T>
auto fields_of() {
  return cairn_tree_fields(static_cast<const T*>(nullptr));
}

// The cereal side of CAIRN_TREE is tree/cereal.hpp (cairn/cairn.hpp includes it), so that a
// model header needs no cereal: a struct serialized by a cereal archive without it stops at
// this class being incomplete.
template <class Archive, class = void>
struct cereal_fields;

template <class Archive, class T>
void serialize_fields(Archive& archive, T& value) {
  cereal_fields<Archive>::serialize(archive, value);
}

}  // namespace detail

// Annotated structs are nodes whose children are their fields.
template <class T>
struct node_traits<T, std::enable_if_t<detail::described_struct<T>>> {
  static constexpr NodeKind kind = NodeKind::struct_;
  template <class Self, class F>
  static void for_each_child(Self& node, F&& f) {
    std::apply(
        [&](const auto&... field) {
          // A field cairn cannot store stops here, with the struct and field named, and is not
          // visited further (which would add a second, vaguer error).
          auto visit = [&](const auto& fd) {
            if constexpr (detail::field_is_tree<std::remove_cvref_t<decltype(fd)>>())
              f(KeyEntry::field(fd.name), node.*(fd.member));
          };
          (visit(field), ...);
        },
        detail::fields_of<T>());
  }
};

CAIRN_END_NAMESPACE

#define CAIRN_DETAIL_FIELD(Type, name) ::cairn::detail::make_field<#name>(&Type::name)

// At namespace scope, in the struct's namespace: CAIRN_TREE(Dense, kernel, bias)
#define CAIRN_TREE(Type, ...)                                                                  \
  [[maybe_unused]] inline auto cairn_tree_fields(const Type*) {                                \
    return ::std::make_tuple(CAIRN_DETAIL_FOR_EACH(CAIRN_DETAIL_FIELD, Type, __VA_ARGS__));    \
  }                                                                                            \
  template <class Archive>                                                                     \
  void serialize(Archive& archive, Type& value) {                                              \
    ::cairn::detail::serialize_fields(archive, value);                                         \
  }

// Inside the class body, for private members: CAIRN_TREE_INTRUSIVE(Model, weights, step_)
#define CAIRN_TREE_INTRUSIVE(Type, ...)                                                        \
  friend auto cairn_tree_fields(const Type*) {                                                 \
    return ::std::make_tuple(CAIRN_DETAIL_FOR_EACH(CAIRN_DETAIL_FIELD, Type, __VA_ARGS__));    \
  }                                                                                            \
  friend class ::cereal::access;                                                               \
  template <class Archive>                                                                     \
  void serialize(Archive& archive) {                                                           \
    ::cairn::detail::serialize_fields(archive, *this);                                         \
  }
