// SPDX-License-Identifier: Apache-2.0
// The runtime of store/location.hpp: the URI scheme registry and the store of paths.
#pragma once

#include <algorithm>
#include <map>
#include <mutex>

#include "cairn/store/location.hpp"
#include "cairn/store/posix_store.hpp"

CAIRN_BEGIN_NAMESPACE
namespace detail {

CAIRN_API Store& path_store() {
  static PosixStore store;
  return store;
}

struct SchemeRegistry {
  std::mutex mutex;
  std::map<std::string, StoreOpener> openers;
};

// One registry per program: a function's static (inline, so one across translation units
// when header-only; compiled once otherwise).
CAIRN_API SchemeRegistry& scheme_registry() {
  static SchemeRegistry registry;
  return registry;
}

inline bool scheme_char(char c, bool first) {
  const bool letter = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
  if (first) return letter;
  return letter || (c >= '0' && c <= '9') || c == '+' || c == '-' || c == '.';
}

CAIRN_API std::string uri_scheme(const std::string& text) {
  const auto sep = text.find("://");
  if (sep == std::string::npos || sep == 0) return {};
  for (std::size_t i = 0; i < sep; ++i)
    if (!scheme_char(text[i], i == 0)) return {};
  std::string scheme = text.substr(0, sep);
  std::transform(scheme.begin(), scheme.end(), scheme.begin(), [](char c) { return static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c); });
  return scheme;
}

// file:///abs/path and file://localhost/abs/path (RFC 8089); a file URI names an absolute path.
inline Location open_file_uri(const std::string& uri, const std::string& rest) {
  std::string path = rest;
  if (path.rfind("localhost/", 0) == 0) path = path.substr(9);
  if (path.empty() || path[0] != '/')
    throw Error(ErrorKind::invalid_argument,
                "a file URI names an absolute path (file:///data/ckpt); for a relative path, give the path itself", uri);
  return Location(path_store(), path);
}

}  // namespace detail

CAIRN_API Location::Location(const std::string& path_or_uri) {
  const std::string scheme = detail::uri_scheme(path_or_uri);
  if (scheme.empty()) {
    store_ = std::shared_ptr<Store>(std::shared_ptr<Store>(), &detail::path_store());
    key_ = detail::normalize_key(path_or_uri);
    return;
  }
  const std::string rest = path_or_uri.substr(scheme.size() + 3);
  if (scheme == "file") {
    *this = detail::open_file_uri(path_or_uri, rest);
    return;
  }
  StoreOpener opener;
  {
    auto& registry = detail::scheme_registry();
    std::lock_guard<std::mutex> lock(registry.mutex);
    const auto it = registry.openers.find(scheme);
    if (it != registry.openers.end()) opener = it->second;
  }
  if (!opener) {
    std::string known;
    for (const auto& s : store_schemes()) known += (known.empty() ? "" : ", ") + s;
    // The schemes of cairn's own opt-in stores say which header serves them (and its CMake
    // target); any other, how to serve it.
    const std::string serve = scheme == "s3" || scheme == "gs"
                                  ? "include <cairn/s3.hpp> in a file of the program (CMake: link cairn::s3)"
                                  : "include the header of the store that serves it, or call cairn::register_store_scheme";
    throw Error(ErrorKind::invalid_argument,
                "no store is registered for the URI scheme '" + scheme + "' (registered: " + known + "). To read and write " +
                    scheme + ":// URIs, " + serve + "; a relative path that looks like a URI is written ./" + path_or_uri,
                path_or_uri);
  }
  *this = opener(rest);
}

CAIRN_API void register_store_scheme(const std::string& scheme, StoreOpener opener) {
  if (scheme.empty() || detail::uri_scheme(scheme + "://") != scheme)
    throw Error(ErrorKind::invalid_argument,
                "'" + scheme + "' is not a URI scheme cairn can register (lowercase: a letter, then letters, digits, '+', '-', '.')");
  if (scheme == "file") throw Error(ErrorKind::invalid_argument, "the 'file' scheme is built in (the local filesystem)");
  if (!opener) throw Error(ErrorKind::invalid_argument, "register_store_scheme('" + scheme + "') needs an opener");
  auto& registry = detail::scheme_registry();
  std::lock_guard<std::mutex> lock(registry.mutex);
  registry.openers[scheme] = std::move(opener);
}

CAIRN_API std::vector<std::string> store_schemes() {
  std::vector<std::string> out{"file"};
  auto& registry = detail::scheme_registry();
  std::lock_guard<std::mutex> lock(registry.mutex);
  for (const auto& [s, o] : registry.openers) out.push_back(s);
  std::sort(out.begin(), out.end());
  return out;
}

CAIRN_END_NAMESPACE
