// SPDX-License-Identifier: Apache-2.0
// The S3 operations a store needs (HEAD, ranged GET, PUT, multipart upload, ListObjectsV2,
// DeleteObjects, ListMultipartUploads), each one signed request retried by one policy:
// throttling (429, 503, SlowDown), server errors (500, 502, 504), timeouts (408) and broken
// or stalled connections are tried again after a full-jitter exponential backoff, up to
// max_attempts; anything else fails at once. Every error names the object's URI, the HTTP
// status, S3's error code and message, and the request id; never a credential.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <ctime>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "cairn/core/config.hpp"
#include "cairn/core/error.hpp"
#include "cairn/core/once.hpp"
#include "cairn/s3/buffer_pool.hpp"
#include "cairn/s3/credentials.hpp"
#include "cairn/s3/http.hpp"
#include "cairn/s3/options.hpp"
#include "cairn/s3/sigv4.hpp"
#include "cairn/s3/xml.hpp"

CAIRN_BEGIN_NAMESPACE
namespace s3 {

struct ObjectInfo {
  std::uint64_t size = 0;
  std::string etag;
};

struct ListedObject {
  std::string key;  // the whole key in the bucket
  std::uint64_t size = 0;
  std::string etag;
  std::string last_modified;  // ISO 8601, as the server wrote it
};

struct Listing {
  std::vector<ListedObject> objects;
  std::vector<std::string> prefixes;  // with their trailing delimiter
};

struct MultipartUpload {
  std::string key, upload_id, initiated;
};

// Preconditions of a write (PUT, CompleteMultipartUpload).
struct WriteCondition {
  bool create_only = false;  // If-None-Match: * (GCS: x-goog-if-generation-match: 0)
  std::string if_match;      // an ETag: replace only that version
};

// Seconds since the epoch of an ISO 8601 UTC time ("2026-11-25T21:29:41.000Z"); 0 if unreadable.
inline std::int64_t parse_iso8601(const std::string& s) {
  std::tm tm{};
  if (s.size() < 19 || std::sscanf(s.c_str(), "%4d-%2d-%2dT%2d:%2d:%2d", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &tm.tm_hour,
                                   &tm.tm_min, &tm.tm_sec) != 6)
    return 0;
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  return static_cast<std::int64_t>(timegm(&tm));
}

// The ETag S3 gives an object written by one PUT (`bytes`), or completed from parts whose
// ETags are `parts`: the MD5 in hex, or the MD5 of the parts' MD5s with "-<parts>". Quoted, as
// S3 answers. "" where a part's ETag is no MD5 (encrypted with SSE-KMS or SSE-C, or a store
// that makes ETags its own way): nothing can be told from it then.
inline std::string expected_etag(const void* bytes, std::uint64_t n) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(bytes, static_cast<std::size_t>(n), md, &len, EVP_md5(), nullptr);
  return "\"" + hex(md, len) + "\"";
}
inline std::string expected_etag(const std::vector<std::string>& parts) {
  std::string md5s;
  for (std::string e : parts) {
    if (e.size() == 34 && e.front() == '"' && e.back() == '"') e = e.substr(1, 32);
    if (e.size() != 32 || e.find_first_not_of("0123456789abcdefABCDEF") != std::string::npos) return {};
    for (std::size_t i = 0; i < 32; i += 2) md5s += static_cast<char>(std::stoi(e.substr(i, 2), nullptr, 16));
  }
  const std::string whole = expected_etag(md5s.data(), md5s.size());
  return whole.substr(0, whole.size() - 1) + "-" + std::to_string(parts.size()) + "\"";
}

class Client {
 public:
  // Keys are relative to `root` in the bucket ("" for the bucket's top).
  Client(std::string bucket, std::string root, const S3Options& options, ResolvedConfig config)
      : bucket_(std::move(bucket)),
        root_(std::move(root)),
        options_(options),
        config_(std::move(config)),
        credentials_(std::make_shared<const Credentials>(config_.credentials)),
        http_(HttpTimeouts{static_cast<long>(options.connect_timeout.count()), static_cast<long>(options.low_speed_bytes),
                           static_cast<long>(options.low_speed_time.count())},
              HttpClient::Tls{options.verify_tls, options.ca_bundle}) {}

  const std::string& bucket() const { return bucket_; }
  const ResolvedConfig& config() const { return config_; }
  // "s3://bucket/key": how errors name an object.
  std::string uri(const std::string& key) const { return config_.scheme + "://" + bucket_ + "/" + full(key); }
  // Requests sent, retries included (benchmarks and tests count them).
  std::uint64_t requests() const { return requests_.load(); }

  // The region requests are signed for: where nobody said it, the bucket is asked once, before
  // the first request (S3 answers a HEAD of a bucket with x-amz-bucket-region, even a 301 or a
  // 403; MinIO does too). On AWS the endpoint follows the region.
  std::string region() {
    ensure_region();
    return config_.region;
  }

  std::optional<ObjectInfo> head(const std::string& key) {
    Call c;
    c.method = "HEAD";
    c.key = key;
    c.accept = {200, 404};
    const HttpResponse r = send(c);
    if (r.status == 404) return std::nullopt;
    ObjectInfo info;
    info.size = std::strtoull(r.header("content-length").c_str(), nullptr, 10);
    info.etag = r.header("etag");
    return info;
  }

  // Exactly n bytes at `offset` of `key` into dst, from the version `etag` names (If-Match;
  // empty: any). A changed object is a 412, raised as corrupt: the blob changed under a read.
  void get_range(const std::string& key, void* dst, std::uint64_t n, std::uint64_t offset, const std::string& etag) {
    if (n == 0) return;
    Call c;
    c.method = "GET";
    c.key = key;
    c.headers.push_back({"range", "bytes=" + std::to_string(offset) + "-" + std::to_string(offset + n - 1)});
    if (!etag.empty()) c.headers.push_back({"if-match", etag});
    c.sink = dst;
    c.sink_size = n;
    c.accept = {200, 206, 412};
    const HttpResponse r = send(c);
    if (r.status == 412)
      throw Error(ErrorKind::corrupt, "the object changed while it was being read (its ETag is no longer " + etag + ")", uri(key));
    if (r.status == 200 && offset != 0)
      throw Error(ErrorKind::io, "the server ignored the Range header (HTTP 200 for bytes " + std::to_string(offset) + "-)", uri(key));
  }

  // A whole small object, refused above `limit` bytes; its ETag into `etag` where given.
  std::string get(const std::string& key, std::uint64_t limit, std::string* etag = nullptr) {
    Call c;
    c.method = "GET";
    c.key = key;
    c.max_body = limit + 1;
    const HttpResponse r = send(c);
    if (r.body.size() > limit || r.body_overflow)
      throw Error(ErrorKind::corrupt, "object is over the limit of " + std::to_string(limit) + " bytes", uri(key));
    if (etag) *etag = r.header("etag");
    return r.body;
  }

  // The first `n` bytes of an object, or all of it where it is shorter (a ranged GET), its
  // whole size into `total` and its ETag into `etag` where given: how a commit marker that may
  // carry a small checkpoint inline is read (S3Store::read_generation). A server that ignores
  // the Range header answers 200 with the whole object: cut off at n (not sent again), its
  // size from Content-Length.
  Buffer get_first(const std::string& key, std::uint64_t n, std::uint64_t& total, std::string* etag = nullptr) {
    Call c;
    c.method = "GET";
    c.key = key;
    c.headers.push_back({"range", "bytes=0-" + std::to_string(n == 0 ? 0 : n - 1)});
    c.max_body = n;
    c.accept = {200, 206, 416};
    c.bulk_body = true;
    HttpResponse r = send(c);
    // The bytes as read: in huge pages where the body was megabytes (HttpRequest::bulk_body).
    const bool bulk = static_cast<bool>(r.bulk);
    Buffer got = bulk ? Buffer(std::move(r.bulk), r.bulk_size) : Buffer(r.body.size());
    if (!bulk && !r.body.empty()) std::memcpy(got.data(), r.body.data(), r.body.size());
    total = first_bytes_total(r, got.size(), key);
    if (r.status == 416) got.n = 0;  // an empty object: no byte 0
    if (got.size() > n) got.n = static_cast<std::size_t>(n);
    if (etag) *etag = r.header("etag");
    return got;
  }

  // get_first with the body handed to `into` as it arrives (BodyStream; s3/arriving_body.hpp),
  // not kept in the response: returns the response (its status and headers) once the body
  // has all arrived. first_bytes_total gives the object's size from the headers.
  HttpResponse get_first_streamed(const std::string& key, std::uint64_t n, BodyStream& into) {
    Call c;
    c.method = "GET";
    c.key = key;
    c.headers.push_back({"range", "bytes=0-" + std::to_string(n == 0 ? 0 : n - 1)});
    c.max_body = n;
    c.accept = {200, 206, 416};
    c.stream = &into;
    return send(c);
  }
  // The whole size of an object from the answer to a GET of its first bytes, of which `got`
  // came (get_first): Content-Range's total where the answer is a range (206), Content-Length
  // where the server sent the whole object (200), 0 for an empty object (416).
  std::uint64_t first_bytes_total(const HttpResponse& r, std::uint64_t got, const std::string& key) const {
    if (r.status == 416) return 0;
    if (r.status == 206) {
      const std::string range = r.header("content-range");  // "bytes 0-N/TOTAL"
      const auto slash = range.rfind('/');
      char* end = nullptr;
      const std::uint64_t total = slash == std::string::npos ? 0 : std::strtoull(range.c_str() + slash + 1, &end, 10);
      if (slash == std::string::npos || end == range.c_str() + slash + 1 || total < got)
        throw Error(ErrorKind::io, "a ranged GET answered without a usable Content-Range (" + range + ")", uri(key));
      return total;
    }
    const std::string length = r.header("content-length");
    const std::uint64_t total = length.empty() ? got : std::strtoull(length.c_str(), nullptr, 10);
    return std::max(total, got);
  }

  // A PUT of a whole object; returns its ETag, or nullopt where the condition failed (412, or
  // 409 from a store with a concurrent conditional write). `sha256`: the body's SHA-256 in hex
  // where the caller computed it already (Call::body_sha256), else computed here.
  std::optional<std::string> put(const std::string& key, const void* data, std::uint64_t n, const WriteCondition& cond = {},
                                 std::string sha256 = {}) {
    Call c;
    c.method = "PUT";
    c.key = key;
    c.body = data;
    c.body_size = n;
    c.body_sha256 = std::move(sha256);
    add_condition(c, cond);
    c.accept = {200, 412, 409, 501, 400};
    const HttpResponse r = send_conditional(c);
    if (r.status != 200) return std::nullopt;
    return r.header("etag");
  }

  // Whether write conditions are sent: S3Options::conditional_writes, until a store refuses
  // them (501 NotImplemented), after which the HEAD check alone guards (docs/object-store.md).
  bool conditional_writes() const { return options_.conditional_writes && conditional_ok_.load(); }
  // Whether a failed condition is sure to be refused (S3Options::conditional_writes_enforced):
  // then a commit needs no look at the marker before its conditional PUT.
  bool conditions_enforced() const { return config_.conditions_enforced && conditional_writes(); }

  std::string create_multipart(const std::string& key) {
    Call c;
    c.method = "POST";
    c.key = key;
    c.query = {{"uploads", ""}};
    const HttpResponse r = send(c);
    const std::string id = parse_xml(r.body).child_text("UploadId");
    if (id.empty()) throw Error(ErrorKind::io, "CreateMultipartUpload answered without an UploadId", uri(key));
    return id;
  }

  std::string upload_part(const std::string& key, const std::string& upload_id, int number, const void* data, std::uint64_t n) {
    Call c;
    c.method = "PUT";
    c.key = key;
    c.query = {{"partNumber", std::to_string(number)}, {"uploadId", upload_id}};
    c.body = data;
    c.body_size = n;
    c.data = true;
    const HttpResponse r = send(c);
    const std::string etag = r.header("etag");
    if (etag.empty()) throw Error(ErrorKind::io, "UploadPart " + std::to_string(number) + " answered without an ETag", uri(key));
    return etag;
  }

  // True when completed; false where the write condition failed. A 200 whose body is an
  // <Error> (S3 sends one when it fails after starting the answer) is an error, retried where
  // the code is a transient one.
  bool complete_multipart(const std::string& key, const std::string& upload_id, const std::vector<std::string>& etags,
                          const WriteCondition& cond = {}) {
    std::string xml = "<CompleteMultipartUpload>";
    for (std::size_t i = 0; i < etags.size(); ++i)
      xml += "<Part><PartNumber>" + std::to_string(i + 1) + "</PartNumber><ETag>" + xml_escape(etags[i]) + "</ETag></Part>";
    xml += "</CompleteMultipartUpload>";
    Call c;
    c.method = "POST";
    c.key = key;
    c.query = {{"uploadId", upload_id}};
    c.body = xml.data();
    c.body_size = xml.size();
    add_condition(c, cond);
    c.accept = {200, 412, 409, 501, 400};
    c.error_in_200 = true;
    const HttpResponse r = send_conditional(c);
    return r.status == 200;
  }

  // The whole key in the bucket of a key relative to this client's root.
  std::string bucket_key(const std::string& key) const { return full(key); }

  // A copy of the object whose whole key in this bucket is `from_bucket_key` (`size` bytes)
  // at `to`, made by the server
  // (CopyObject; above copy_part_size, a multipart upload of UploadPartCopy parts): no byte
  // passes through this process. Pinned to the source's ETag where one is given. A 200 that
  // carries an <Error> (S3 answers a long copy before it is done) is an error.
  void copy(const std::string& from_bucket_key, const std::string& to, std::uint64_t size, const std::string& source_etag = {}) {
    const std::string source = "/" + bucket_ + "/" + uri_encode(from_bucket_key, true);
    auto source_headers = [&](Call& c) {
      c.headers.push_back({"x-amz-copy-source", source});
      if (!source_etag.empty()) c.headers.push_back({"x-amz-copy-source-if-match", source_etag});
    };
    const std::uint64_t part = std::max<std::uint64_t>(options_.copy_part_size, (size + 9999) / 10000);
    if (size <= part) {
      Call c;
      c.method = "PUT";
      c.key = to;
      source_headers(c);
      c.error_in_200 = true;
      const HttpResponse r = send(c);
      if (parse_checked(r, to).name != "CopyObjectResult")
        throw Error(ErrorKind::io, "CopyObject answered without a CopyObjectResult", uri(to));
      return;
    }
    const std::string id = create_multipart(to);
    try {
      std::vector<std::string> etags;
      for (std::uint64_t at = 0, n = 1; at < size; at += part, ++n) {
        Call c;
        c.method = "PUT";
        c.key = to;
        c.query = {{"partNumber", std::to_string(n)}, {"uploadId", id}};
        source_headers(c);
        c.headers.push_back({"x-amz-copy-source-range", "bytes=" + std::to_string(at) + "-" + std::to_string(std::min(size, at + part) - 1)});
        c.error_in_200 = true;
        const HttpResponse r = send(c);
        const std::string etag = parse_checked(r, to).child_text("ETag");
        if (etag.empty()) throw Error(ErrorKind::io, "UploadPartCopy " + std::to_string(n) + " answered without an ETag", uri(to));
        etags.push_back(etag);
      }
      if (!complete_multipart(to, id, etags)) throw Error(ErrorKind::io, "the copy's CompleteMultipartUpload was refused", uri(to));
    } catch (...) {
      abort_multipart(to, id);
      throw;
    }
  }

  // Best effort: an upload left open costs storage until a lifecycle rule or the next
  // cleanup removes it; a store that does not support the call (405) is not an error.
  void abort_multipart(const std::string& key, const std::string& upload_id) noexcept {
    try {
      Call c;
      c.method = "DELETE";
      c.key = key;
      c.query = {{"uploadId", upload_id}};
      c.accept = {200, 204, 404, 405};
      c.attempts = 3;
      send(c);
    } catch (...) {
    }
  }

  // One level (delimiter "/") or everything (no delimiter) under `prefix`, every page.
  Listing list(const std::string& prefix, bool one_level, std::size_t max_objects = SIZE_MAX) {
    Listing out;
    std::string token;
    while (true) {
      Call c;
      c.method = "GET";
      c.bucket_level = true;
      c.query = {{"list-type", "2"}, {"prefix", full(prefix)}};
      if (one_level) c.query.push_back({"delimiter", "/"});
      if (!token.empty()) c.query.push_back({"continuation-token", token});
      c.max_body = std::uint64_t{64} << 20;
      c.what_key = prefix;
      const HttpResponse r = send(c);
      const XmlElement x = parse_checked(r, prefix);
      x.each("Contents", [&](const XmlElement& e) {
        out.objects.push_back({relative(e.child_text("Key")), std::strtoull(e.child_text("Size").c_str(), nullptr, 10),
                               e.child_text("ETag"), e.child_text("LastModified")});
      });
      x.each("CommonPrefixes", [&](const XmlElement& e) { out.prefixes.push_back(relative(e.child_text("Prefix"))); });
      if (x.child_text("IsTruncated") != "true" || out.objects.size() >= max_objects) break;
      const std::string next = x.child_text("NextContinuationToken");
      if (next.empty() || next == token)
        throw Error(ErrorKind::io, "a truncated listing without a new continuation token", uri(prefix));
      token = next;
    }
    return out;
  }

  // Deletes keys, 1,000 to a DeleteObjects request; where the store has no DeleteObjects
  // (GCS answers 501 or 400), one DELETE each.
  void remove(const std::vector<std::string>& keys) {
    std::size_t at = 0;
    while (at < keys.size() && batch_delete_) {
      const std::size_t n = std::min<std::size_t>(1000, keys.size() - at);
      std::string xml = "<Delete><Quiet>true</Quiet>";
      for (std::size_t i = at; i < at + n; ++i) xml += "<Object><Key>" + xml_escape(full(keys[i])) + "</Key></Object>";
      xml += "</Delete>";
      Call c;
      c.method = "POST";
      c.bucket_level = true;
      c.query = {{"delete", ""}};
      c.body = xml.data();
      c.body_size = xml.size();
      c.headers.push_back({"content-md5", md5_base64(xml)});
      c.accept = {200, 400, 501, 405};
      c.what_key = keys[at];
      const HttpResponse r = send(c);
      if (r.status != 200) {
        batch_delete_ = false;
        break;
      }
      const XmlElement x = parse_checked(r, keys[at]);
      if (const XmlElement* e = x.child("Error"))
        throw Error(ErrorKind::io, "DeleteObjects failed for " + e->child_text("Key") + ": " + e->child_text("Code") + " " +
                    e->child_text("Message"), uri(e->child_text("Key")));
      at += n;
    }
    for (; at < keys.size(); ++at) {
      Call c;
      c.method = "DELETE";
      c.key = keys[at];
      c.accept = {200, 204, 404};
      send(c);
    }
  }

  std::vector<MultipartUpload> list_multipart_uploads(const std::string& prefix) {
    std::vector<MultipartUpload> out;
    Call c;
    c.method = "GET";
    c.bucket_level = true;
    c.query = {{"uploads", ""}, {"prefix", full(prefix)}};
    c.accept = {200, 404, 405, 501};
    c.max_body = std::uint64_t{16} << 20;
    c.what_key = prefix;
    const HttpResponse r = send(c);
    if (r.status != 200) return out;
    parse_checked(r, prefix).each("Upload", [&](const XmlElement& e) {
      out.push_back({relative(e.child_text("Key")), e.child_text("UploadId"), e.child_text("Initiated")});
    });
    return out;
  }

 private:
  struct Call {
    std::string method;
    std::string key;           // the object's key ("" with bucket_level)
    bool bucket_level = false;
    std::string what_key;      // the key an error names for a bucket-level call
    std::vector<std::pair<std::string, std::string>> query;
    std::vector<std::pair<std::string, std::string>> headers;  // lowercase names; all signed
    const void* body = nullptr;
    std::uint64_t body_size = 0;
    bool data = false;         // array bytes: sent with UNSIGNED-PAYLOAD over HTTPS
    std::string body_sha256;   // the body's SHA-256 (hex) where known before the call; else computed
    void* sink = nullptr;
    std::uint64_t sink_size = 0;
    std::uint64_t max_body = 1 << 20;
    bool bulk_body = false;    // HttpRequest::bulk_body
    BodyStream* stream = nullptr;  // HttpRequest::stream
    std::vector<long> accept = {200};  // statuses returned to the caller rather than raised
    bool error_in_200 = false;
    int attempts = 0;          // 0: options.max_attempts
  };

  static std::string xml_escape(const std::string& s) {
    std::string out;
    for (char c : s) {
      switch (c) {
        case '&': out += "&amp;"; break;
        case '<': out += "&lt;"; break;
        case '>': out += "&gt;"; break;
        case '"': out += "&quot;"; break;
        case '\'': out += "&apos;"; break;
        default: out += c;
      }
    }
    return out;
  }

  // Content-MD5: the body's MD5 in base64 (OpenSSL's encoder).
  static std::string md5_base64(const std::string& s) {
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    EVP_Digest(s.data(), s.size(), md, &len, EVP_md5(), nullptr);
    unsigned char b64[4 * ((EVP_MAX_MD_SIZE + 2) / 3) + 1];
    const int n = EVP_EncodeBlock(b64, md, static_cast<int>(len));
    return std::string(reinterpret_cast<const char*>(b64), static_cast<std::size_t>(n));
  }

  void add_condition(Call& c, const WriteCondition& cond) const {
    if (!conditional_writes()) return;
    if (cond.create_only) {
      if (config_.scheme == "gs") c.headers.push_back({"x-goog-if-generation-match", "0"});
      else c.headers.push_back({"if-none-match", "*"});
    }
    if (!cond.if_match.empty()) c.headers.push_back({"if-match", cond.if_match});
  }

  XmlElement parse_checked(const HttpResponse& r, const std::string& key) const {
    if (r.body_overflow) throw Error(ErrorKind::io, "the response is larger than cairn reads (a hostile or broken server)", uri(key));
    try {
      return parse_xml(r.body);
    } catch (const Error& e) {
      throw Error(ErrorKind::io, e.message(), uri(key));
    }
  }

  std::string object_path(const Call& c) const {
    std::string p = "/";
    if (config_.path_style) p += bucket_ + (c.bucket_level ? std::string() : "/" + full(c.key));
    else if (!c.bucket_level) p += full(c.key);
    return p;
  }
  std::string host() const { return config_.path_style ? config_.host : bucket_ + "." + config_.host; }
  std::string scheme_prefix() const { return config_.endpoint.substr(0, config_.endpoint.find("://") + 3); }

  static bool retryable_status(long s) { return s == 408 || s == 429 || s == 500 || s == 502 || s == 503 || s == 504; }
  static bool retryable_code(const std::string& code) {
    return code == "SlowDown" || code == "Throttling" || code == "ThrottlingException" || code == "RequestTimeout" ||
           code == "InternalError" || code == "ServiceUnavailable" || code == "RequestLimitExceeded" ||
           code == "TooManyRequests";
  }
  static bool retryable_transport(CURLcode rc) {
    switch (rc) {
      case CURLE_COULDNT_CONNECT: case CURLE_OPERATION_TIMEDOUT: case CURLE_SEND_ERROR: case CURLE_RECV_ERROR:
      case CURLE_GOT_NOTHING: case CURLE_PARTIAL_FILE: case CURLE_COULDNT_RESOLVE_HOST: case CURLE_SSL_CONNECT_ERROR:
      case CURLE_HTTP2: case CURLE_HTTP2_STREAM: case CURLE_READ_ERROR: case CURLE_WRITE_ERROR:
        return true;
      default:
        return false;
    }
  }

  void backoff(int attempt) {
    const double cap = static_cast<double>(options_.backoff_cap.count());
    const double top = std::min(cap, static_cast<double>(options_.backoff_base.count()) * static_cast<double>(1u << std::min(attempt, 20)));
    thread_local std::mt19937_64 rng{std::random_device{}()};
    const auto ms = static_cast<long long>(std::uniform_real_distribution<double>(0, top)(rng));
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  }

  // S3's <Error> of a body: code, message, request id.
  static void read_error(const std::string& body, std::string& code, std::string& message, std::string& request_id) {
    try {
      const XmlElement x = parse_xml(body);
      if (x.name != "Error") return;
      code = x.child_text("Code");
      message = x.child_text("Message");
      if (request_id.empty()) request_id = x.child_text("RequestId");
    } catch (const Error&) {
    }
  }

  static bool is_condition_header(const std::string& name) {
    return name == "if-none-match" || name == "if-match" || name == "x-goog-if-generation-match";
  }

  // A write with conditions (put, complete_multipart accept 400 and 501 for this): a store
  // that does not implement them answers 501 NotImplemented (or 400 NotImplemented); cairn
  // then stops sending them, for this store, and sends the write again without. Any other
  // 400 or 501 is the error it is.
  HttpResponse send_conditional(Call c) {
    HttpResponse r = send(c);
    if (r.status != 400 && r.status != 501) return r;
    std::string code, message, request_id = r.header("x-amz-request-id");
    read_error(r.body, code, message, request_id);
    const bool had = std::any_of(c.headers.begin(), c.headers.end(), [](const auto& h) { return is_condition_header(h.first); });
    if (had && (r.status == 501 || code == "NotImplemented")) {
      conditional_ok_ = false;
      std::erase_if(c.headers, [](const auto& h) { return is_condition_header(h.first); });
      r = send(c);
      if (r.status != 400 && r.status != 501) return r;
      code.clear();
      message.clear();
      read_error(r.body, code, message, request_id);
    }
    throw Error(ErrorKind::io, c.method + " failed: HTTP " + std::to_string(r.status) + (code.empty() ? "" : " " + code) +
                (message.empty() ? "" : ": " + message) + (request_id.empty() ? "" : " (request id " + request_id + ")"),
                uri(c.key));
  }

  // The credentials requests are signed with now (replaced where they expire).
  std::shared_ptr<const Credentials> credentials() const {
    std::lock_guard<std::mutex> lock(credentials_mutex_);
    return credentials_;
  }
  // Where neither the options, the environment's keys nor the profile's keys had credentials,
  // the rest of the chain (credentials.hpp) is asked once, before the first request is
  // signed; a source that is configured and fails throws here, and is asked again by the
  // next request.
  void ensure_credentials() {
    credentials_once_([this] {
      if (!config_.credentials.anonymous() || options_.credentials_provider || !options_.access_key_id.empty()) return;
      FoundCredentials f = find_credentials(config_.scheme, bucket_, options_, config_.region);
      std::lock_guard<std::mutex> lock(credentials_mutex_);
      credentials_ = std::make_shared<const Credentials>(std::move(f.credentials));
      credentials_tried_ = std::move(f.tried);
    });
  }
  // Temporary credentials are renewed this long before their end, as the AWS SDKs do, so no
  // request is signed with credentials that end while it is on its way.
  static constexpr std::chrono::minutes renew_before{5};
  static bool ending_soon(const Credentials& c) {
    return c.expiration != std::chrono::system_clock::time_point{} &&
           std::chrono::system_clock::now() + renew_before >= c.expiration;
  }
  // Credentials asked for again, after S3 said those that signed a request (`used`) expired,
  // or refused a request sent unsigned, or before they end (`ahead`): from
  // S3Options::credentials_provider, else from the chain (credentials.hpp) as at the start,
  // unless they were options. True where the store now has
  // others than `used` (this call's, or another thread's that met the same answer first).
  // A renewal ahead of the end, or for a store without credentials, is not tried again for
  // 30 s: the requests meanwhile go out with the credentials they have.
  bool refresh_credentials(const Credentials& used, bool ahead = false) {
    if (!options_.credentials_provider && !options_.access_key_id.empty()) return false;
    // One refresh at a time: the requests that met the end together ask once, not each.
    std::lock_guard<std::mutex> refreshing(refresh_mutex_);
    if (!(*credentials() == used)) return true;  // renewed meanwhile by another request
    // Ahead of the end, and for a store that found none (S3 answers 403 to every request a
    // public bucket does not allow, a HEAD of a missing key among them): the chain once in
    // 30 s at most, whatever it gave. Otherwise a source whose credentials all live less than
    // renew_before, or every refusal of an anonymous store, would ask it before each request.
    const bool throttled = ahead || used.anonymous();
    const auto now = std::chrono::steady_clock::now();
    if (throttled && now < no_renewal_before_) return false;
    Credentials fresh;
    try {
      fresh = options_.credentials_provider ? options_.credentials_provider()
                                            : find_credentials(config_.scheme, bucket_, options_, config_.region).credentials;
    } catch (...) {
      fresh = used;  // the source failed: an expired request's error says what happened
    }
    if (throttled) no_renewal_before_ = now + std::chrono::seconds(30);
    if (fresh == used) return false;
    std::lock_guard<std::mutex> lock(credentials_mutex_);
    credentials_ = std::make_shared<const Credentials>(std::move(fresh));
    return true;
  }
  static bool expired_credentials(const std::string& code) {
    return code == "ExpiredToken" || code == "TokenRefreshRequired" || code == "ExpiredTokenException";
  }

  // One signed request, no retry, signed with `creds`.
  HttpResponse attempt(const Call& c, const Credentials& creds) {
    SignedRequest s;
    s.method = c.method;
    s.path = object_path(c);
    s.query = c.query;
    const bool https = config_.endpoint.rfind("https://", 0) == 0;
    s.payload_hash = !c.body ? empty_sha256()
                     : (c.data && https)       ? std::string("UNSIGNED-PAYLOAD")
                     : !c.body_sha256.empty() ? c.body_sha256
                                               : sha256_hex(c.body, static_cast<std::size_t>(c.body_size));
    s.headers = c.headers;
    s.headers.push_back({"host", host()});
    const std::string amz_date = amz_date_now();
    s.headers.push_back({"x-amz-date", amz_date});
    s.headers.push_back({"x-amz-content-sha256", s.payload_hash});
    if (!creds.session_token.empty()) s.headers.push_back({"x-amz-security-token", creds.session_token});
    HttpRequest h;
    h.method = c.method;
    h.head = c.method == "HEAD";
    h.url = scheme_prefix() + host() + s.request_target();
    for (const auto& [k, v] : s.headers) h.headers.push_back(k + ": " + v);
    if (!creds.anonymous())
      h.headers.push_back("authorization: " + sign(s, creds, config_.region, "s3", amz_date).authorization);
    h.body = c.body;
    h.body_size = c.body_size;
    h.sink = c.sink;
    h.sink_size = c.sink_size;
    h.max_body = c.max_body;
    h.bulk_body = c.bulk_body;
    h.stream = c.stream;
    ++requests_;
    return http_.perform(h);
  }

  // The error code and message of a failed HEAD, which has no body to carry them: the same
  // object asked for its first byte (and the answer used only if it fails the same way).
  void explain_head(const Call& c, const Credentials& creds, long status, std::string& code, std::string& message,
                    std::string& request_id) {
    Call g = c;
    g.method = "GET";
    g.headers.push_back({"range", "bytes=0-0"});
    const HttpResponse r = attempt(g, creds);
    if (r.transport == CURLE_OK && r.status == status) read_error(r.body, code, message, request_id);
  }

  void ensure_region() {
    region_once_([this] {
      if (config_.region_known) return;
      Call c;
      c.method = "HEAD";
      c.bucket_level = true;
      c.what_key = "";
      c.accept = {200, 301, 307, 400, 403, 404};
      c.attempts = 3;
      std::string region;
      try {
        region = send_signed(c).header("x-amz-bucket-region");
      } catch (const Error&) {
        // Unreachable or refused: the default region stands, and the real request says why.
      }
      if (!region.empty() && region != config_.region) {
        config_.region = region;
        if (!config_.custom_endpoint) {
          config_.endpoint = "https://s3." + region + ".amazonaws.com";
          config_.host = "s3." + region + ".amazonaws.com";
        }
      }
      config_.region_known = true;
    });
  }

  HttpResponse send(const Call& c) {
    ensure_region();
    return send_signed(c);
  }

  HttpResponse send_signed(const Call& c) {
    const std::string what = uri(c.bucket_level ? c.what_key : c.key);
    const int attempts = c.attempts > 0 ? c.attempts : std::max(1, options_.max_attempts);
    std::string last;
    bool refreshed = false;  // credentials asked for again once (they had expired)
    ensure_credentials();
    for (int attempt_no = 0; attempt_no < attempts + (refreshed ? 1 : 0); ++attempt_no) {
      if (attempt_no > 0) backoff(attempt_no);
      std::shared_ptr<const Credentials> creds = credentials();
      if (ending_soon(*creds) && refresh_credentials(*creds, true)) creds = credentials();
      HttpResponse r = attempt(c, *creds);
      if (r.transport != CURLE_OK) {
        last = "the request to " + config_.endpoint + " (the endpoint: " + config_.endpoint_from + ") failed: " + r.transport_error;
        // An endpoint that has never answered and cannot be found or connected to is most
        // likely a wrong one (a typo, a local server not started): three attempts, a second or
        // so, rather than a quarter of a minute of backoff. Once it has answered, the same
        // failure is an outage, and gets every attempt.
        const bool unreachable = r.transport == CURLE_COULDNT_RESOLVE_HOST || r.transport == CURLE_COULDNT_CONNECT;
        if (unreachable && !reached_.load() && attempt_no + 1 >= std::min(attempts, first_contact_attempts))
          throw Error(ErrorKind::io, c.method + " failed after " + std::to_string(attempt_no + 1) + " attempts: " + last +
                      "; it has not answered since this store was opened: check the endpoint", what);
        if (retryable_transport(r.transport)) continue;
        throw Error(r.transport == CURLE_OPERATION_TIMEDOUT ? ErrorKind::timeout : ErrorKind::io, c.method + " " + last, what);
      }
      reached_.store(true);
      const bool ok = r.status >= 200 && r.status < 300;
      if (ok && c.sink && r.sink_received != c.sink_size) {  // a short or long body
        last = "the response carried " + std::to_string(r.sink_received) + (r.body_overflow ? "+" : "") + " of " +
               std::to_string(c.sink_size) + " bytes";
        if (!r.body_overflow) continue;
        throw Error(ErrorKind::io, c.method + ": " + last, what);
      }
      std::string code, message, request_id = r.header("x-amz-request-id");
      if (ok && c.error_in_200) {
        read_error(r.body, code, message, request_id);
        if (!code.empty()) {
          last = "HTTP 200 carrying an error: " + code + " " + message + " (request id " + request_id + ")";
          if (retryable_code(code)) continue;
          throw Error(ErrorKind::io, c.method + " failed: " + last, what);
        }
      }
      if (std::find(c.accept.begin(), c.accept.end(), r.status) != c.accept.end()) return r;
      if (!ok) read_error(r.body, code, message, request_id);
      if (!ok && c.method == "HEAD" && code.empty() && !retryable_status(r.status))
        explain_head(c, *creds, r.status, code, message, request_id);
      last = "HTTP " + std::to_string(r.status) + (code.empty() ? "" : " " + code) + (message.empty() ? "" : ": " + message) +
             (request_id.empty() ? "" : " (request id " + request_id + ")");
      if (retryable_status(r.status) || retryable_code(code)) continue;
      ErrorKind kind = ErrorKind::io;
      std::string hint;
      if (expired_credentials(code)) {
        // Sent again, once, with the credentials asked for anew (they are replaced for every
        // request after it), where there are others.
        if (!refreshed && refresh_credentials(*creds)) {
          refreshed = true;
          continue;
        }
        hint = options_.credentials_provider || options_.access_key_id.empty()
                   ? "; the credentials expired and none newer were found (S3Options::credentials_provider, the "
                     "environment's AWS_SESSION_TOKEN or the profile's aws_session_token): refresh them"
                   : "; the credentials given in S3Options expired: set credentials_provider to renew them";
      }
      if ((r.status == 403 || r.status == 401) && creds->anonymous() && !refreshed && refresh_credentials(*creds)) {
        // Refused unsigned, and the chain has credentials now where it found none before (the
        // instance metadata service did not answer the store's first request in time, say):
        // sent again, signed, and every request after it.
        refreshed = true;
        continue;
      }
      if (r.status == 404) {
        kind = ErrorKind::not_found;
        if (code == "NoSuchBucket") hint = "; the bucket '" + bucket_ + "' does not exist";
      } else if (!hint.empty()) {
      } else if (r.status == 403 || r.status == 401) {
        hint = creds->anonymous()
                   ? "; no credentials were found (S3Options, AWS_ACCESS_KEY_ID, AWS_PROFILE, a web identity, the container "
                     "endpoint" + (credentials_tried_.empty() ? std::string() : "; " + credentials_tried_) +
                         "), so the request was unsigned"
                   : "; check the credentials and the bucket's policy";
      } else if (r.status == 412 || r.status == 409) {
        kind = ErrorKind::already_exists;
      }
      throw Error(kind, c.method + " failed: " + last + hint, what);
    }
    throw Error(ErrorKind::io, c.method + " failed after " + std::to_string(attempts) + " attempts; the last: " + last, what);
  }

  // A key of the store as a key of the bucket, and back (listings name whole keys; a key
  // outside the root, which a server should never list, stays whole and matches nothing).
  std::string full(const std::string& key) const { return root_.empty() ? key : key.empty() ? root_ + "/" : root_ + "/" + key; }
  std::string relative(const std::string& key) const {
    if (root_.empty()) return key;
    const std::string p = root_ + "/";
    return key.rfind(p, 0) == 0 ? key.substr(p.size()) : key;
  }

  std::string bucket_;
  std::string root_;
  S3Options options_;
  ResolvedConfig config_;  // (its credentials: those of the start; credentials_ is what signs)
  mutable std::mutex credentials_mutex_;
  std::shared_ptr<const Credentials> credentials_;
  std::string credentials_tried_;  // where the chain found none: what the instance metadata probe met
  cairn::detail::Once credentials_once_;  // (not std::once_flag: a source that fails is asked again, core/once.hpp)
  std::mutex refresh_mutex_;
  std::chrono::steady_clock::time_point no_renewal_before_ = {};  // (under refresh_mutex_)
  HttpClient http_;
  std::atomic<std::uint64_t> requests_{0};
  // Whether the endpoint has answered a request (any HTTP status) since the store was opened.
  std::atomic<bool> reached_{false};
  static constexpr int first_contact_attempts = 3;
  cairn::detail::Once region_once_;
  std::atomic<bool> conditional_ok_{true};
  std::atomic<bool> batch_delete_{true};
};

}  // namespace s3
CAIRN_END_NAMESPACE
