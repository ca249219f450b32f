// SPDX-License-Identifier: Apache-2.0
// cairn in S3-compatible object stores, opt-in: include this after (or instead of)
// cairn/cairn.hpp and link its code compiled once with libcurl and OpenSSL's libcrypto (CMake:
// cairn::s3; pkg-config and meson: cairn-s3), or, header-only, those two alone
// (cairn::s3_header_only; docs/compile-time.md). Then s3:// and gs:// URIs work wherever a path does:
//
//   cairn::save("s3://my-bucket/run7/100", state);
//   auto s = cairn::load<State>("s3://my-bucket/run7/100");
//   cairn::Checkpointer ckptr("s3://my-bucket/run7", options);
//   cairn::save(cairn::s3_location("s3://b/k", {.endpoint = "http://127.0.0.1:9000"}), state);
//
// See docs/object-store.md.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "cairn/cairn.hpp"
#include "cairn/s3/s3_store.hpp"

CAIRN_BEGIN_NAMESPACE
namespace detail {

// s3:// and gs:// in register_store_scheme's table, so that URI strings open an S3Store.
CAIRN_API bool register_s3_schemes();

#if CAIRN_DEFINES_S3
// The store a URI string opens. Stores are kept between calls, one per bucket and per the
// environment's configuration (s3::detail::configuration_environment: a changed variable
// opens another), so that saves and loads by URI reuse a store's connections, its transfer
// buffers, the bucket's region and credentials that cost requests to find (the instance
// metadata service, STS). The 8 used last are kept (a store's buffers are freed when it is
// idle anyway, S3Options::keep_buffers_for); the map is never destroyed, so no store is torn
// down during the program's static destruction.
inline Location open_s3_uri(const std::string& scheme, const std::string& rest) {
  struct Kept {
    std::shared_ptr<S3Store> store;
    std::uint64_t used = 0;
  };
  static auto& mutex = *new std::mutex;
  static auto& stores = *new std::map<std::string, Kept>;
  static std::uint64_t clock = 0;
  const s3::BucketUri u = s3::parse_bucket_uri(scheme, rest);
  const std::string key = scheme + "://" + u.bucket + "\n" + s3::detail::configuration_environment();
  std::lock_guard<std::mutex> lock(mutex);
  auto it = stores.find(key);
  if (it == stores.end()) it = stores.emplace(key, Kept{std::make_shared<S3Store>(scheme, u.bucket)}).first;
  it->second.used = ++clock;
  std::shared_ptr<S3Store> store = it->second.store;
  while (stores.size() > 8) {
    auto oldest = stores.begin();
    for (auto k = stores.begin(); k != stores.end(); ++k)
      if (k->second.used < oldest->second.used) oldest = k;
    stores.erase(oldest);  // a Location that still holds it keeps it alive
  }
  return Location(store, u.key);
}

CAIRN_API bool register_s3_schemes() {
  register_store_scheme("s3", [](const std::string& rest) { return open_s3_uri("s3", rest); });
  register_store_scheme("gs", [](const std::string& rest) { return open_s3_uri("gs", rest); });
  return true;
}
#endif  // CAIRN_DEFINES_S3

// Registered once per program, by whichever file includes this header first (a file of
// cairn::s3's library itself where it is compiled once).
inline const bool s3_schemes_registered = register_s3_schemes();

}  // namespace detail
CAIRN_END_NAMESPACE
