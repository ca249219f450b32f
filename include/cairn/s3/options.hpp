// SPDX-License-Identifier: Apache-2.0
// What an S3 store is configured with, and where each setting comes from when the caller leaves
// it out, in the order the AWS tools use: the option, then the environment, then the profile
// in ~/.aws/credentials and ~/.aws/config, then a default (docs/object-store.md lists them).
// Also the URIs: s3://bucket/key and gs://bucket/key.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>

#include "cairn/core/config.hpp"
#include "cairn/core/error.hpp"
#include "cairn/s3/sigv4.hpp"

CAIRN_BEGIN_NAMESPACE

struct S3Options {
  // "https://s3.example.com", "http://127.0.0.1:9000". Empty: AWS_ENDPOINT_URL_S3,
  // AWS_ENDPOINT_URL, S3_ENDPOINT_URL, the profile's endpoint_url, then AWS (or Google Cloud
  // Storage for gs://).
  std::string endpoint = {};
  // Empty: AWS_REGION, AWS_DEFAULT_REGION, the profile's region, the bucket's own region (asked
  // once with a HEAD of the bucket, before the first request), then us-east-1. gs:// uses "auto".
  std::string region = {};
  // Credentials: these, else AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / AWS_SESSION_TOKEN,
  // else the profile (`profile`, else AWS_PROFILE, else "default") in AWS_SHARED_CREDENTIALS_FILE
  // (~/.aws/credentials) and AWS_CONFIG_FILE (~/.aws/config): its keys, else its
  // credential_process; else a web identity token exchanged with STS (AWS_WEB_IDENTITY_TOKEN_FILE
  // and AWS_ROLE_ARN, or the profile's); else the container endpoint (ECS, EKS Pod Identity);
  // else EC2's instance metadata service (s3/credentials.hpp). None anywhere: unsigned
  // requests. gs:// stops after the profile (GCS takes HMAC keys).
  std::string access_key_id = {};
  std::string secret_access_key = {};
  std::string session_token = {};
  std::string profile = {};
  // Temporary credentials end (an STS session token lives 1 to 12 hours; a training run saves
  // for days). Where S3 answers ExpiredToken, the store asks for credentials again and sends
  // the request once more: from this function where it is set (called at the start too, and
  // first of all the sources), else from where they came from (the environment, then the
  // profile's files, which `aws sso login` or a credential helper rewrite). Credentials given
  // in the three fields above are not asked again: a request they no longer sign fails,
  // saying why.
  std::function<s3::Credentials()> credentials_provider = {};
  // A profile's credential_process that has not exited within this time is stopped (with
  // everything it started) and the store says so, rather than waiting for it for ever (a
  // helper waiting for a login in a browser nobody opens). AWS's Python SDK waits 30 s.
  std::chrono::milliseconds credential_process_timeout{30000};
  // Path-style URLs (endpoint/bucket/key) instead of virtual-host ones (bucket.endpoint/key).
  // Unset: path style for a custom endpoint and for a bucket name with dots (virtual hosts
  // with dots fail TLS verification), virtual-host style on AWS.
  std::optional<bool> path_style = {};
  // TLS: certificates are verified; `ca_bundle` names a PEM file of other authorities.
  std::string ca_bundle = {};
  bool verify_tls = true;

  // Writes: one PUT up to `multipart_threshold` bytes, multipart above, in parts of
  // `part_size` (raised where a blob would need more than 10,000 parts), `concurrency` parts
  // in flight per blob. Host memory per blob being written is about part_size * (concurrency + 1).
  std::uint64_t part_size = std::uint64_t{16} << 20;
  std::uint64_t multipart_threshold = std::uint64_t{16} << 20;
  int concurrency = 8;
  // Listings one level at a time with S3's delimiter (one request per 1,000 entries of that
  // level). false: list everything under the prefix and fold it (more requests under deep
  // trees), for servers whose delimiter listings miss prefixes that hold only other prefixes
  // (s3rver, the test server).
  bool delimiter_listing = true;
  // Reads larger than this are split into ranged GETs of this size, `concurrency` at once.
  std::uint64_t read_part_size = std::uint64_t{16} << 20;
  // Copies inside the store (S3Store::copy_blob): an object up to this size is one
  // CopyObject; a larger one is copied in parts of this size (UploadPartCopy). S3 allows up
  // to 5 GiB for both.
  std::uint64_t copy_part_size = std::uint64_t{5} << 30;
  // Transfer buffers of part_size (upload parts, read-ahead blocks) are kept by the store
  // between operations, up to concurrency + 2 of them (160 MiB at the defaults), and freed
  // once none has been used for this long: a load after a save, or the next step's save,
  // reuses memory already touched instead of faulting in fresh pages. Zero frees each buffer
  // as soon as it is done with.
  std::chrono::milliseconds keep_buffers_for{10000};
  // A checkpoint that one process writes and whose objects come to at most this many bytes
  // is written inline in its commit marker: one PUT where it took four, and a load reads it
  // with the marker's one GET where it waited for three round trips (docs/object-store.md,
  // "Small checkpoints in one object"). 8 MiB: half the size below which an object is one
  // PUT (multipart_threshold), a few round trips' worth of bytes on one connection, and room
  // for the metadata of some 10,000 small leaves beside their data. At most 16 MiB; 0: never.
  std::uint64_t inline_limit = std::uint64_t{8} << 20;

  // Retries of throttling, server errors and broken connections, with full-jitter exponential
  // backoff: attempt n sleeps a random time up to min(backoff_cap, backoff_base * 2^n).
  int max_attempts = 8;
  std::chrono::milliseconds backoff_base{100};
  std::chrono::milliseconds backoff_cap{20000};
  // A request that moves fewer than low_speed_bytes per second for low_speed_time fails (and
  // is retried): a stalled transfer never hangs a save.
  std::chrono::seconds connect_timeout{10};
  std::chrono::seconds low_speed_time{30};
  std::uint64_t low_speed_bytes = 1024;

  // Conditional writes: the commit marker is created with If-None-Match: * (create-only), so
  // two saves of one new key cannot both commit. AWS, MinIO, Ceph, R2 and CoreWeave honour it;
  // set false for a store that rejects the header. Unless the store is known to enforce them
  // (below), cairn also checks with a HEAD just before, which alone leaves a window of one
  // request where a store ignores them (docs/object-store.md).
  bool conditional_writes = true;
  // Whether the store is known to enforce those conditions (a failed one answers 412), so that
  // the marker's conditional PUT alone guards the commit: a save then sends no HEAD of the
  // marker just before that PUT, one round trip less per save. Unset: true for AWS S3's own
  // endpoints (If-None-Match and If-Match on PUT since 2024), false for any other endpoint,
  // whose server may ignore the headers and accept the write (s3rver does), or take its own
  // (GCS). Set true for a MinIO, R2, Ceph RGW or other store you know enforces both.
  std::optional<bool> conditional_writes_enforced = {};
  // Leftovers of saves that died (data under a generation no marker names, unfinished
  // multipart uploads) idle this long (the generation's start and its newest object both
  // older) are removed by the next save of the key and by a Checkpointer's cleanup; younger
  // ones may be a save in progress in another process. 0 is for one writer whose every
  // request is known to have ended (tests): a dead process's marker PUT can land after it died.
  std::chrono::seconds leftover_age{std::chrono::hours(6)};
};

namespace s3 {

// A parsed s3:// or gs:// URI.
struct BucketUri {
  std::string scheme;  // "s3" or "gs"
  std::string bucket;
  std::string key;     // without leading or trailing '/'
};

// Bucket names as S3 (3 to 63 characters) and GCS (up to 222, with dots; '_' allowed) have
// them: lowercase letters, digits, '.', '-', '_'.
inline BucketUri parse_bucket_uri(const std::string& scheme, const std::string& rest) {
  const std::string uri = scheme + "://" + rest;
  const auto slash = rest.find('/');
  BucketUri u;
  u.scheme = scheme;
  u.bucket = rest.substr(0, slash);
  std::string key = slash == std::string::npos ? std::string() : rest.substr(slash + 1);
  while (!key.empty() && key.back() == '/') key.pop_back();
  while (!key.empty() && key.front() == '/') key.erase(key.begin());
  u.key = key;
  if (u.bucket.size() < 3 || u.bucket.size() > 222)
    throw Error(ErrorKind::invalid_argument, "a bucket name has 3 to 222 characters (" + scheme + "://bucket/key)", uri);
  for (char c : u.bucket)
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '-' || c == '_'))
      throw Error(ErrorKind::invalid_argument, std::string("a bucket name has lowercase letters, digits, '.', '-' and '_' only; "
                  "this one has '") + c + "'", uri);
  if (u.key.find('?') != std::string::npos || u.key.find('#') != std::string::npos)
    throw Error(ErrorKind::invalid_argument, "cairn keys may not contain '?' or '#'", uri);
  return u;
}

namespace detail {

inline std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

// Every environment variable a store's configuration comes from (here and in
// credentials.hpp), as "NAME=value" lines: the stores that URI strings open are kept per
// bucket and per these (cairn/s3.hpp), so a changed variable opens another store.
inline std::string configuration_environment() {
  static const char* const names[] = {
      "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_SHARED_CREDENTIALS_FILE",
      "AWS_CONFIG_FILE", "HOME", "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL",
      "S3_ENDPOINT_URL", "AWS_ENDPOINT_URL_STS", "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_ROLE_ARN", "AWS_ROLE_SESSION_NAME",
      "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_CONTAINER_CREDENTIALS_FULL_URI",
      "AWS_CONTAINER_AUTHORIZATION_TOKEN", "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", "AWS_EC2_METADATA_DISABLED",
      "AWS_EC2_METADATA_SERVICE_ENDPOINT", "AWS_ENDPOINT_URL_SSO", "AWS_ENDPOINT_URL_SSO_OIDC"};
  std::string out;
  for (const char* n : names) out += std::string(n) + "=" + env(n) + "\n";
  return out;
}

inline std::string trim(const std::string& s) {
  const auto a = s.find_first_not_of(" \t\r\n");
  if (a == std::string::npos) return {};
  const auto b = s.find_last_not_of(" \t\r\n");
  return s.substr(a, b - a + 1);
}

// One section of an INI file (~/.aws/credentials: [name]; ~/.aws/config: [profile name], or
// [default]), as key -> value; empty where the file or section is absent.
inline std::map<std::string, std::string> ini_section(const std::string& path, const std::string& section) {
  std::map<std::string, std::string> out;
  std::ifstream in(path);
  if (!in) return out;
  std::string line;
  bool inside = false;
  while (std::getline(in, line)) {
    line = trim(line);
    if (line.empty() || line[0] == '#' || line[0] == ';') continue;
    if (line.front() == '[' && line.back() == ']') {
      inside = trim(line.substr(1, line.size() - 2)) == section;
      continue;
    }
    const auto eq = line.find('=');
    if (inside && eq != std::string::npos) out[trim(line.substr(0, eq))] = trim(line.substr(eq + 1));
  }
  return out;
}

inline std::string home_file(const char* env_name, const char* relative) {
  std::string p = env(env_name);
  if (!p.empty()) return p;
  const std::string home = env("HOME");
  return home.empty() ? std::string() : home + "/" + relative;
}

// The profile a store reads (`S3Options::profile`, else AWS_PROFILE, else "default"): its
// section of the credentials file, then of the config file.
struct Profile {
  std::string name;
  std::map<std::string, std::string> credentials_file, config_file;
  std::string get(const std::string& k) const {
    auto it = credentials_file.find(k);
    if (it != credentials_file.end()) return it->second;
    it = config_file.find(k);
    return it == config_file.end() ? std::string() : it->second;
  }
};

// A profile whose credentials are a role assumed with another's (role_arn with source_profile
// or credential_source; s3/credentials.hpp): its own keys, if any, are not used as they are.
inline bool is_role_profile(const Profile& p) {
  return !p.get("role_arn").empty() && (!p.get("source_profile").empty() || !p.get("credential_source").empty());
}

inline Profile read_profile(const std::string& option) {
  Profile p;
  p.name = !option.empty() ? option : env("AWS_PROFILE");
  if (p.name.empty()) p.name = "default";
  p.credentials_file = ini_section(home_file("AWS_SHARED_CREDENTIALS_FILE", ".aws/credentials"), p.name);
  p.config_file = ini_section(home_file("AWS_CONFIG_FILE", ".aws/config"), p.name == "default" ? p.name : "profile " + p.name);
  return p;
}

}  // namespace detail

// The settings of a store, every one resolved (options.hpp's order), and where they came from.
struct ResolvedConfig {
  std::string scheme, endpoint, host, region;  // endpoint: "http(s)://host[:port]" without a path
  // From the options, the environment's keys or the profile's keys (no request made); where
  // none of them has any, the rest of the chain is asked when the first request is signed
  // (s3/credentials.hpp, find_credentials).
  Credentials credentials;
  bool path_style = true;
  bool custom_endpoint = false;
  std::string endpoint_from;  // where the endpoint came from, for errors that name it
  bool region_known = false;  // from the caller, the environment or a profile: not asked of the bucket
  bool conditions_enforced = false;  // S3Options::conditional_writes_enforced, resolved
};

inline ResolvedConfig resolve_config(const std::string& scheme, const std::string& bucket, const S3Options& o) {
  using detail::env;
  ResolvedConfig c;
  c.scheme = scheme;
  const detail::Profile profile = detail::read_profile(o.profile);
  auto from_profile = [&](const char* k) { return profile.get(k); };
  if (o.credentials_provider) {
    c.credentials = o.credentials_provider();
  } else if (!o.access_key_id.empty()) {
    c.credentials = {o.access_key_id, o.secret_access_key, o.session_token};
  } else if (!env("AWS_ACCESS_KEY_ID").empty()) {
    c.credentials = {env("AWS_ACCESS_KEY_ID"), env("AWS_SECRET_ACCESS_KEY"), env("AWS_SESSION_TOKEN")};
  } else if (!detail::is_role_profile(profile)) {
    c.credentials = {from_profile("aws_access_key_id"), from_profile("aws_secret_access_key"),
                     from_profile("aws_session_token")};
  }
  for (const std::string& r : {o.region, env("AWS_REGION"), env("AWS_DEFAULT_REGION"), from_profile("region")})
    if (!r.empty() && c.region.empty()) c.region = r;
  c.region_known = !c.region.empty();
  std::string endpoint = o.endpoint;
  c.endpoint_from = "S3Options::endpoint";
  const std::pair<std::string, const char*> sources[] = {{env("AWS_ENDPOINT_URL_S3"), "AWS_ENDPOINT_URL_S3"},
                                                         {env("AWS_ENDPOINT_URL"), "AWS_ENDPOINT_URL"},
                                                         {env("S3_ENDPOINT_URL"), "S3_ENDPOINT_URL"},
                                                         {from_profile("endpoint_url"), "the profile's endpoint_url"}};
  for (const auto& [e, from] : sources)
    if (endpoint.empty() && !e.empty()) endpoint = e, c.endpoint_from = from;
  if (endpoint.empty()) c.endpoint_from = scheme == "gs" ? "Google Cloud Storage's" : "AWS's, for the region";
  if (scheme == "gs") {
    if (endpoint.empty()) endpoint = "https://storage.googleapis.com";
    if (c.region.empty()) c.region = "auto";
    c.region_known = true;
  }
  c.custom_endpoint = !endpoint.empty();
  c.conditions_enforced = o.conditional_writes_enforced ? *o.conditional_writes_enforced : (!c.custom_endpoint && scheme == "s3");
  if (c.region.empty()) c.region = "us-east-1";
  if (endpoint.empty()) endpoint = "https://s3." + c.region + ".amazonaws.com";
  while (!endpoint.empty() && endpoint.back() == '/') endpoint.pop_back();
  const auto sep = endpoint.find("://");
  if (sep == std::string::npos || (endpoint.compare(0, sep, "http") != 0 && endpoint.compare(0, sep, "https") != 0))
    throw Error(ErrorKind::invalid_argument, "an S3 endpoint is an http:// or https:// URL: " + endpoint);
  c.host = endpoint.substr(sep + 3);
  if (c.host.empty() || c.host.find('/') != std::string::npos || c.host.find('@') != std::string::npos)
    throw Error(ErrorKind::invalid_argument, "an S3 endpoint is scheme://host[:port], without a path or user: " + endpoint);
  c.endpoint = endpoint;
  c.path_style = o.path_style ? *o.path_style : (c.custom_endpoint || bucket.find('.') != std::string::npos);
  return c;
}

}  // namespace s3
CAIRN_END_NAMESPACE
