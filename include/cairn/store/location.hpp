// SPDX-License-Identifier: Apache-2.0
// Location: where a checkpoint, a Checkpointer root or a safetensors file is: a store and a key
// in it. Every entry point (save, save_async, load, load_subtree, metadata, the safetensors
// functions, Items, the Checkpointer, inspect) takes one, so that no entry point has a path
// form without a store form, and a new store works everywhere at once.
//
// A Location is made implicitly from a path ("ckpt/100", a std::filesystem::path) or a URI
// ("file:///data/ckpt/100", and "s3://bucket/key" once a store registers that scheme), or
// explicitly from a store and a key ({store, "ckpt/100"}).
//
// URIs: text that starts with a scheme and "://" (RFC 3986: a letter, then letters, digits,
// '+', '-', '.') is a URI; anything else is a path. A store registers its scheme once
// (register_store_scheme), and the scheme's opener turns the rest of the URI into a store and
// a key. "file" is built in. A relative path that looks like a URI ("x://y") is written
// "./x://y".
#pragma once

#include <concepts>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "cairn/store/store.hpp"

CAIRN_BEGIN_NAMESPACE

class Location {
 public:
  // A path on the local filesystem (the stateless PosixStore of every path), or a URI of a
  // registered scheme. An unregistered scheme is an invalid_argument error naming it.
  CAIRN_API Location(const std::string& path_or_uri);
  Location(const char* path_or_uri) : Location(std::string(path_or_uri)) {}
  // A std::filesystem::path (matched by its native(), so this header needs no <filesystem>).
  template <class Path>
    requires requires(const Path& p) {
      { p.native() } -> std::convertible_to<const std::string&>;
    }
  Location(const Path& path) : Location(std::string(path.native())) {}

  // `key` in a store the caller keeps alive for as long as the Location and anything that
  // took it (an AsyncSave, a Checkpointer) is in use.
  Location(Store& store, std::string key)
      : store_(std::shared_ptr<Store>(), &store), key_(detail::normalize_key(std::move(key))) {}
  // `key` in a store the Location shares ownership of (as every Location made from a URI does).
  Location(std::shared_ptr<Store> store, std::string key) : store_(std::move(store)), key_(detail::normalize_key(std::move(key))) {
    if (!store_) throw Error(ErrorKind::invalid_argument, "a Location needs a store (the pointer is null)", key_);
  }

  Store& store() const { return *store_; }
  const std::string& key() const { return key_; }
  // The store, shared: what keeps a URI's store alive in a save that outlives the call.
  const std::shared_ptr<Store>& shared_store() const { return store_; }
  // The path or URL a user can look at (the store's describe of the key).
  std::string describe() const { return store_->describe(key_); }

  // The location of `name` under this one ("ckpt" / "100" is "ckpt/100", in the same store).
  Location operator/(const std::string& name) const { return Location(store_, detail::join_key(key_, name)); }

 private:
  std::shared_ptr<Store> store_;
  std::string key_;
};

// Makes the Location of a URI of one scheme from what follows "scheme://" ("bucket/ckpt/100"
// for "s3://bucket/ckpt/100"). It may share one store between the URIs it sees.
using StoreOpener = std::function<Location(const std::string& rest)>;

// Makes `scheme` ("s3", lowercase) a URI scheme every entry point accepts; a later call
// replaces the opener. Thread-safe. Stores that need a library (libcurl for S3) register
// from their own opt-in header.
CAIRN_API void register_store_scheme(const std::string& scheme, StoreOpener opener);

// The schemes registered now, sorted ("file" always among them).
CAIRN_API std::vector<std::string> store_schemes();

namespace detail {
// The scheme of a URI ("s3" of "s3://b/k"), or "" where `text` is a path.
CAIRN_API std::string uri_scheme(const std::string& text);
// The store of every path: a PosixStore whose keys are paths. Stateless, so one serves every
// call and thread.
CAIRN_API Store& path_store();
}  // namespace detail

CAIRN_END_NAMESPACE

#if CAIRN_DEFINES_RUNTIME
#include "cairn/store/location_impl.hpp"
#endif
