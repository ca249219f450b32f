// SPDX-License-Identifier: Apache-2.0
// AWS Signature Version 4, written here rather than taken from libcurl's CURLOPT_AWS_SIGV4,
// which on Debian 12's curl 7.88 leaves x-amz-content-sha256 unsigned, does not sort or encode
// query parameters and signs "?uploads" wrongly (curl/curl#9717, #11794, #13754). SHA-256 and
// HMAC-SHA256 come from OpenSSL's libcrypto. Checked against the published vectors of the AWS
// test suite and the S3 documentation (tests/unit-s3-sigv4.cpp).
//
// S3's form of the algorithm: the path is encoded once with '/' kept and never normalized
// ("a//b/../c" is a key, not a path); query parameters are encoded, then sorted; every header
// handed to sign() is signed.
#pragma once

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <ctime>
#include <string>
#include <utility>
#include <vector>

#include "cairn/core/config.hpp"
#include "cairn/core/error.hpp"

CAIRN_BEGIN_NAMESPACE
namespace s3 {

inline std::string hex(const unsigned char* p, std::size_t n) {
  static const char digits[] = "0123456789abcdef";
  std::string out(2 * n, '\0');
  for (std::size_t i = 0; i < n; ++i) {
    out[2 * i] = digits[p[i] >> 4];
    out[2 * i + 1] = digits[p[i] & 15];
  }
  return out;
}

// A digest of a buffer (OpenSSL's `md_type`, called `name` in errors), as lowercase hex.
inline std::string digest_hex(const EVP_MD* md_type, const char* name, const void* data, std::size_t n) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (EVP_Digest(data, n, md, &len, md_type, nullptr) != 1) throw Error(ErrorKind::io, std::string(name) + " failed (OpenSSL)");
  return hex(md, len);
}
// SHA-256 of a buffer, as lowercase hex (the x-amz-content-sha256 of a body).
inline std::string sha256_hex(const void* data, std::size_t n) { return digest_hex(EVP_sha256(), "SHA-256", data, n); }
inline std::string sha256_hex(const std::string& s) { return sha256_hex(s.data(), s.size()); }

// The hash of an empty body, sent with every GET, HEAD and DELETE.
inline const std::string& empty_sha256() {
  static const std::string h = sha256_hex("", 0);
  return h;
}

inline std::string hmac_sha256(const std::string& key, const std::string& data) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (!HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), reinterpret_cast<const unsigned char*>(data.data()),
            data.size(), md, &len))
    throw Error(ErrorKind::io, "HMAC-SHA256 failed (OpenSSL)");
  return std::string(reinterpret_cast<const char*>(md), len);
}

// RFC 3986 percent-encoding as SigV4 wants it: unreserved characters kept, every other byte as
// %XX in uppercase hex; '/' kept where asked (a path), encoded otherwise (a query value).
inline std::string uri_encode(const std::string& s, bool keep_slash) {
  static const char digits[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(s.size() + s.size() / 2);
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    const bool unreserved = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
                            c == '.' || c == '_' || c == '~';
    if (unreserved || (keep_slash && c == '/')) {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += digits[c >> 4];
      out += digits[c & 15];
    }
  }
  return out;
}

struct Credentials {
  std::string access_key_id;
  std::string secret_access_key;
  std::string session_token;  // temporary credentials (STS, instance roles); signed where set
  // When temporary credentials end (the store renews them a few minutes before); the epoch
  // (the default): they do not end, or nobody said when.
  std::chrono::system_clock::time_point expiration = {};
  bool anonymous() const { return access_key_id.empty(); }
  friend bool operator==(const Credentials&, const Credentials&) = default;
};

// One request to sign. `path` and `query` are raw (unencoded): sign() encodes them exactly as
// the request line must carry them (request_target()).
struct SignedRequest {
  std::string method;
  std::string path = "/";                                   // "/bucket/key" or "/key"
  std::vector<std::pair<std::string, std::string>> query;   // {"uploads", ""}, {"partNumber", "3"}
  std::vector<std::pair<std::string, std::string>> headers; // every one is signed; "host" required
  std::string payload_hash;                                  // hex SHA-256 of the body, or "UNSIGNED-PAYLOAD"

  // The canonical query string: each name and value encoded, sorted by name then value.
  std::string canonical_query() const {
    std::vector<std::pair<std::string, std::string>> q;
    q.reserve(query.size());
    for (const auto& [k, v] : query) q.emplace_back(uri_encode(k, false), uri_encode(v, false));
    std::sort(q.begin(), q.end());
    std::string out;
    for (const auto& [k, v] : q) {
      if (!out.empty()) out += '&';
      out += k + "=" + v;
    }
    return out;
  }
  // What goes after the method on the request line: the encoded path and query.
  std::string request_target() const {
    const std::string q = canonical_query();
    return uri_encode(path, true) + (q.empty() ? "" : "?" + q);
  }
};

// What sign() works out, kept for tests and for the message of a SignatureDoesNotMatch.
struct Signature {
  std::string canonical_request;
  std::string string_to_sign;
  std::string signed_headers;
  std::string signature;      // hex
  std::string authorization;  // the Authorization header's value
};

namespace detail {
// A header value as signed: outer whitespace trimmed, runs of spaces inside made one.
inline std::string canonical_header_value(const std::string& v) {
  std::string out;
  bool space = false;
  for (char c : v) {
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
      space = !out.empty();
      continue;
    }
    if (space) out += ' ';
    space = false;
    out += c;
  }
  return out;
}
inline std::string lowercase(std::string s) {
  for (char& c : s)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  return s;
}
}  // namespace detail

// Now as SigV4 writes it ("20150830T123600Z", UTC): the x-amz-date of a request signed now.
inline std::string amz_date_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[20];
  std::strftime(buf, sizeof buf, "%Y%m%dT%H%M%SZ", &tm);
  return buf;
}

// Signs `request` for `service` in `region` at `amz_date` ("20150830T123600Z", UTC).
inline Signature sign(const SignedRequest& request, const Credentials& credentials, const std::string& region,
                      const std::string& service, const std::string& amz_date) {
  if (amz_date.size() != 16) throw Error(ErrorKind::invalid_argument, "SigV4 date must be YYYYMMDDTHHMMSSZ: " + amz_date);
  std::vector<std::pair<std::string, std::string>> headers;
  for (const auto& [k, v] : request.headers) headers.emplace_back(detail::lowercase(k), detail::canonical_header_value(v));
  std::stable_sort(headers.begin(), headers.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::string canonical_headers, signed_headers;
  for (std::size_t i = 0; i < headers.size(); ++i) {
    if (i > 0 && headers[i].first == headers[i - 1].first) {  // repeated: one line, values joined by ','
      canonical_headers.back() = ',';
      canonical_headers += headers[i].second + "\n";
      continue;
    }
    canonical_headers += headers[i].first + ":" + headers[i].second + "\n";
    if (!signed_headers.empty()) signed_headers += ';';
    signed_headers += headers[i].first;
  }
  Signature s;
  s.signed_headers = signed_headers;
  s.canonical_request = request.method + "\n" + uri_encode(request.path, true) + "\n" + request.canonical_query() + "\n" +
                        canonical_headers + "\n" + signed_headers + "\n" + request.payload_hash;
  const std::string date = amz_date.substr(0, 8);
  const std::string scope = date + "/" + region + "/" + service + "/aws4_request";
  s.string_to_sign = "AWS4-HMAC-SHA256\n" + amz_date + "\n" + scope + "\n" + sha256_hex(s.canonical_request);
  const std::string k_date = hmac_sha256("AWS4" + credentials.secret_access_key, date);
  const std::string k_signing = hmac_sha256(hmac_sha256(hmac_sha256(k_date, region), service), "aws4_request");
  const std::string raw = hmac_sha256(k_signing, s.string_to_sign);
  s.signature = hex(reinterpret_cast<const unsigned char*>(raw.data()), raw.size());
  s.authorization = "AWS4-HMAC-SHA256 Credential=" + credentials.access_key_id + "/" + scope +
                    ", SignedHeaders=" + signed_headers + ", Signature=" + s.signature;
  return s;
}

}  // namespace s3
CAIRN_END_NAMESPACE
