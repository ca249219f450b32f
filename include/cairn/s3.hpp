// SPDX-License-Identifier: Apache-2.0
// cairn in S3-compatible object stores, opt-in: include this after (or instead of)
// cairn/cairn.hpp and link libcurl and OpenSSL's libcrypto (CMake: cairn::s3; pkg-config:
// cairn-s3). Then s3:// and gs:// URIs work wherever a path does:
//
//   cairn::save("s3://my-bucket/run7/100", state);
//   auto s = cairn::load<State>("s3://my-bucket/run7/100");
//   cairn::Checkpointer ckptr("s3://my-bucket/run7", options);
//   cairn::save(cairn::s3_location("s3://b/k", {.endpoint = "http://127.0.0.1:9000"}), state);
//
// See docs/object-store.md.
#pragma once

#include <map>
#include <memory>
#include <mutex>

#include "cairn/cairn.hpp"
#include "cairn/s3/s3_store.hpp"

CAIRN_BEGIN_NAMESPACE
namespace detail {

// One store per scheme and bucket for the URIs of every entry point, so that connections are
// reused; made on first use, configured from the environment, freed when nothing uses it.
inline Location open_s3_uri(const std::string& scheme, const std::string& rest) {
  static std::mutex mutex;
  static std::map<std::string, std::weak_ptr<S3Store>> stores;
  const s3::BucketUri u = s3::parse_bucket_uri(scheme, rest);
  std::lock_guard<std::mutex> lock(mutex);
  std::shared_ptr<S3Store> store = stores[scheme + "://" + u.bucket].lock();
  if (!store) {
    store = std::make_shared<S3Store>(scheme, u.bucket);
    stores[scheme + "://" + u.bucket] = store;
  }
  return Location(store, u.key);
}

inline const bool s3_schemes_registered = [] {
  register_store_scheme("s3", [](const std::string& rest) { return open_s3_uri("s3", rest); });
  register_store_scheme("gs", [](const std::string& rest) { return open_s3_uri("gs", rest); });
  return true;
}();

}  // namespace detail
CAIRN_END_NAMESPACE
