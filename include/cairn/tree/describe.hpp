// CAIRN_TREE(Type, fields...): one macro per struct that makes it a tree node (fields in
// declaration order, keyed by name) and serializable by cereal archives. The macro emits a
// list of (name, member pointer) found by ADL, and everything else (traversal, cereal,
// printing) is written once on top of that list.
#pragma once

#include <tuple>
#include <utility>

#include <cereal/cereal.hpp>

#include "cairn/tree/for_each_macro.hpp"
#include "cairn/tree/traits.hpp"

CAIRN_BEGIN_NAMESPACE
namespace detail {

template <class Class, class Member>
struct field_descriptor {
  const char* name;
  Member Class::*member;
};

template <class Class, class Member>
constexpr field_descriptor<Class, Member> make_field(const char* name, Member Class::*member) {
  return {name, member};
}

template <class T>
auto fields_of() {
  return cairn_tree_fields(static_cast<const T*>(nullptr));
}

template <class Archive, class T>
void serialize_fields(Archive& archive, T& value) {
  std::apply([&](const auto&... field) { archive(cereal::make_nvp(field.name, value.*(field.member))...); },
             fields_of<T>());
}

}  // namespace detail

// Annotated structs are nodes whose children are their fields.
template <class T>
struct node_traits<T, std::enable_if_t<detail::described_struct<T>>> {
  static constexpr NodeKind kind = NodeKind::struct_;
  template <class Self, class F>
  static void for_each_child(Self& node, F&& f) {
    std::apply([&](const auto&... field) { (f(KeyEntry::field(field.name), node.*(field.member)), ...); },
               detail::fields_of<T>());
  }
};

CAIRN_END_NAMESPACE

#define CAIRN_DETAIL_FIELD(Type, name) ::cairn::detail::make_field(#name, &Type::name)

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
