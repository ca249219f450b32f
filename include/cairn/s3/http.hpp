// SPDX-License-Identifier: Apache-2.0
// One HTTP exchange over libcurl, with no policy: the S3 client (s3/client.hpp) signs, retries
// and reads errors. A body goes out from caller memory and a response body comes straight
// into caller memory where the caller gives a place (a ranged GET into a leaf's bytes), or
// into a string capped at a limit (XML), so a hostile server cannot make cairn allocate
// without bound. Connections are kept in a small pool of curl handles and reused.
#pragma once

#include <curl/curl.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "cairn/core/bulk_bytes.hpp"
#include "cairn/core/config.hpp"
#include "cairn/core/error.hpp"

CAIRN_BEGIN_NAMESPACE
namespace s3 {

struct HttpTimeouts {
  long connect_seconds = 10;
  // A transfer slower than low_speed_bytes per second for low_speed_seconds fails (and is
  // retried): a stalled upload ends instead of hanging (marin-community/marin#9209).
  long low_speed_bytes = 1024;
  long low_speed_seconds = 30;
  // The whole exchange, connection included; 0: no limit (data transfers rely on the
  // low-speed rule instead). The credential sources' small requests have one.
  long total_seconds = 0;
};

struct HttpResponse;

// Where a 2xx body goes as it arrives, for a caller that uses its first bytes while the rest
// are on their way (S3Store::read_generation: a marker with its checkpoint inline is parsed,
// and the load planned, while its data arrive; s3/arriving_body.hpp). start() is called with
// the response's status and headers before its first byte, once per attempt (a retried
// request starts again); take() with each piece, in order. False from either ends the
// transfer (HttpResponse::body_overflow, no transport error).
class BodyStream {
 public:
  virtual bool start(const HttpResponse& response) = 0;
  virtual bool take(const char* p, std::size_t n) = 0;

 protected:
  ~BodyStream() = default;
};

struct HttpRequest {
  std::string method;
  std::string url;
  std::vector<std::string> headers;     // "Name: value"
  const void* body = nullptr;           // sent as is; `body_size` bytes
  std::uint64_t body_size = 0;
  void* sink = nullptr;                 // a 2xx response body goes here, exactly sink_size bytes
  std::uint64_t sink_size = 0;
  std::uint64_t max_body = 1 << 20;     // otherwise into HttpResponse::body, at most this much
  // A 2xx body of a Content-Length of megabytes goes into HttpResponse::bulk instead (huge
  // pages: core/bulk_bytes.hpp), also at most max_body: a commit marker with its checkpoint
  // inline, whose fresh string a process's first load faulted in 4 KiB at a time.
  bool bulk_body = false;
  bool head = false;                    // no response body expected (HEAD)
  BodyStream* stream = nullptr;         // a 2xx body goes here as it arrives, instead of the above
};

struct HttpResponse {
  long status = 0;
  std::map<std::string, std::string> headers;  // names lowercased
  std::string body;
  cairn::detail::BulkBytes bulk;               // the body instead, bulk_size bytes (HttpRequest::bulk_body)
  std::size_t bulk_size = 0;
  std::uint64_t sink_received = 0;             // bytes written into the request's sink
  bool body_overflow = false;                  // more than the sink or max_body: the rest dropped
  CURLcode transport = CURLE_OK;               // not OK: no response (connection, timeout)
  std::string transport_error;
  std::string header(const std::string& lower_name) const {
    auto it = headers.find(lower_name);
    return it == headers.end() ? std::string() : it->second;
  }
};

namespace detail {

inline void curl_global() {
  static const bool once = [] {
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) throw Error(ErrorKind::io, "libcurl failed to initialize");
    return true;
  }();
  (void)once;
}

struct Exchange {
  const HttpRequest* request;
  HttpResponse* response;
  std::uint64_t sent = 0;
  bool streaming = false;  // the request's stream has been started in this exchange
  bool ok_status() const { return response->status >= 200 && response->status < 300; }
};

inline std::size_t on_body(char* p, std::size_t size, std::size_t n, void* user) {
  auto& x = *static_cast<Exchange*>(user);
  const std::size_t len = size * n;
  HttpResponse& r = *x.response;
  if (x.request->stream && x.ok_status()) {
    if (!x.streaming) {  // the headers are all in before the first byte
      x.streaming = true;
      if (!x.request->stream->start(r)) {
        r.body_overflow = true;
        return 0;
      }
    }
    if (!x.request->stream->take(p, len)) {
      r.body_overflow = true;
      return 0;
    }
    return len;
  }
  if (x.request->sink && x.ok_status()) {
    const std::uint64_t room = x.request->sink_size - r.sink_received;
    const std::size_t take = static_cast<std::size_t>(std::min<std::uint64_t>(room, len));
    std::memcpy(static_cast<char*>(x.request->sink) + r.sink_received, p, take);
    r.sink_received += take;
    if (take < len) r.body_overflow = true;
  } else {
    if (r.body.empty() && !r.bulk && x.ok_status()) {
      // Room for the announced size (up to what is kept) at once: a body of megabytes (a
      // commit marker with its checkpoint inline) was grown by doubling, each step a new
      // allocation, its pages faulted in, and a copy.
      const std::string announced = r.header("content-length");
      if (!announced.empty()) {
        const auto expected = static_cast<std::size_t>(
            std::min<std::uint64_t>(std::strtoull(announced.c_str(), nullptr, 10), x.request->max_body));
        if (x.request->bulk_body && expected >= cairn::detail::huge_page_buffer_min) r.bulk = cairn::detail::BulkBytes(expected);
        else r.body.reserve(expected);
      }
    }
    // Into the bulk buffer while the body fits the size it announced (a server cannot send
    // more than that through curl; a longer one is cut here like any body over max_body).
    const std::uint64_t held = r.bulk ? r.bulk_size : r.body.size();
    const std::uint64_t cap = r.bulk ? r.bulk.size() : x.request->max_body;
    const std::uint64_t room = cap > held ? cap - held : 0;
    const std::size_t take = static_cast<std::size_t>(std::min<std::uint64_t>(room, len));
    if (r.bulk) {
      std::memcpy(r.bulk.data() + r.bulk_size, p, take);
      r.bulk_size += take;
    } else {
      r.body.append(p, take);
    }
    if (take < len) {
      r.body_overflow = true;
      // A successful answer larger than the caller takes (a hostile size): the transfer ends
      // here rather than reading gigabytes to drop them (HttpClient::perform says so).
      if (x.ok_status()) return 0;
    }
  }
  return len;  // the rest of an oversized body is read and dropped, so the connection stays usable
}

inline std::size_t on_header(char* p, std::size_t size, std::size_t n, void* user) {
  auto& x = *static_cast<Exchange*>(user);
  const std::size_t len = size * n;
  std::string line(p, len);
  while (!line.empty() && (line.back() == '\r' || line.back() == '\n')) line.pop_back();
  if (line.rfind("HTTP/", 0) == 0) {  // a new status line (after a 100 Continue, say): start over
    x.response->headers.clear();
    const auto sp = line.find(' ');
    x.response->status = sp == std::string::npos ? 0 : std::strtol(line.c_str() + sp + 1, nullptr, 10);
    return len;
  }
  const auto colon = line.find(':');
  if (colon == std::string::npos || x.response->headers.size() > 200) return len;
  std::string name = line.substr(0, colon), value = line.substr(colon + 1);
  for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  const auto first = value.find_first_not_of(" \t");
  value = first == std::string::npos ? std::string() : value.substr(first);
  if (value.size() <= 8192) x.response->headers[name] = value;
  return len;
}

inline std::size_t on_send(char* p, std::size_t size, std::size_t n, void* user) {
  auto& x = *static_cast<Exchange*>(user);
  const std::uint64_t left = x.request->body_size - x.sent;
  const std::size_t take = static_cast<std::size_t>(std::min<std::uint64_t>(left, size * n));
  std::memcpy(p, static_cast<const char*>(x.request->body) + x.sent, take);
  x.sent += take;
  return take;
}

inline int on_seek(void* user, curl_off_t offset, int origin) {
  auto& x = *static_cast<Exchange*>(user);
  if (origin != SEEK_SET || offset < 0 || static_cast<std::uint64_t>(offset) > x.request->body_size)
    return CURL_SEEKFUNC_FAIL;
  x.sent = static_cast<std::uint64_t>(offset);  // a resend after a redirect or an auth retry
  return CURL_SEEKFUNC_OK;
}

}  // namespace detail

// A pool of curl handles: each exchange borrows one, so connections (and TLS sessions) are
// reused across requests and threads.
class HttpClient {
 public:
  struct Tls {
    bool verify = true;
    std::string ca_bundle;  // a PEM file; empty: the system's
  };
  HttpClient(HttpTimeouts timeouts, Tls tls) : timeouts_(timeouts), tls_(std::move(tls)) { detail::curl_global(); }
  ~HttpClient() {
    for (CURL* h : idle_) curl_easy_cleanup(h);
  }
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  HttpResponse perform(const HttpRequest& request) {
    HttpResponse response;
    detail::Exchange x{&request, &response};
    CURL* h = borrow();
    struct Return {
      HttpClient* self;
      CURL* h;
      ~Return() { self->give_back(h); }
    } give{this, h};
    curl_easy_reset(h);
    curl_easy_setopt(h, CURLOPT_URL, request.url.c_str());
    // S3 keys are taken as they are: "a/../b" is a key of its own, and the signature covers the
    // path as sent. curl would otherwise remove "." and ".." segments (RFC 3986) after signing.
    curl_easy_setopt(h, CURLOPT_PATH_AS_IS, 1L);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT, timeouts_.connect_seconds);
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, timeouts_.low_speed_bytes);
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, timeouts_.low_speed_seconds);
    if (timeouts_.total_seconds > 0) curl_easy_setopt(h, CURLOPT_TIMEOUT, timeouts_.total_seconds);
    curl_easy_setopt(h, CURLOPT_SSL_VERIFYPEER, tls_.verify ? 1L : 0L);
    curl_easy_setopt(h, CURLOPT_SSL_VERIFYHOST, tls_.verify ? 2L : 0L);
    if (!tls_.ca_bundle.empty()) curl_easy_setopt(h, CURLOPT_CAINFO, tls_.ca_bundle.c_str());
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, &detail::on_header);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, &x);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, &detail::on_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &x);
    if (request.head) {
      curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
    } else if (request.method == "PUT" || request.method == "POST") {
      curl_easy_setopt(h, CURLOPT_UPLOAD, 1L);
      curl_easy_setopt(h, CURLOPT_INFILESIZE_LARGE, static_cast<curl_off_t>(request.body_size));
      curl_easy_setopt(h, CURLOPT_READFUNCTION, &detail::on_send);
      curl_easy_setopt(h, CURLOPT_READDATA, &x);
      curl_easy_setopt(h, CURLOPT_SEEKFUNCTION, &detail::on_seek);
      curl_easy_setopt(h, CURLOPT_SEEKDATA, &x);
      if (request.method == "POST") curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, "POST");
    } else if (request.method != "GET") {
      curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, request.method.c_str());
    }
    curl_slist* headers = nullptr;
    for (const auto& hd : request.headers) headers = curl_slist_append(headers, hd.c_str());
    // No "Expect: 100-continue" wait before a body, and no Content-Type that curl would sign
    // nothing of: S3 accepts bodies without either.
    headers = curl_slist_append(headers, "Expect:");
    if (request.method == "PUT" || request.method == "POST") headers = curl_slist_append(headers, "Content-Type:");
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers);
    const CURLcode rc = curl_easy_perform(h);
    curl_slist_free_all(headers);
    long status = 0;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
    response.status = status;
    // Ended by on_body: the answer is what was kept, marked body_overflow (no transport error,
    // and nothing to retry: the same request would get the same body).
    response.transport = rc == CURLE_WRITE_ERROR && response.body_overflow ? CURLE_OK : rc;
    if (response.transport != CURLE_OK) response.transport_error = curl_easy_strerror(rc);
    return response;
  }

 private:
  CURL* borrow() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!idle_.empty()) {
        CURL* h = idle_.back();
        idle_.pop_back();
        return h;
      }
    }
    CURL* h = curl_easy_init();
    if (!h) throw Error(ErrorKind::io, "libcurl could not make a connection handle");
    return h;
  }
  void give_back(CURL* h) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (idle_.size() < 64) idle_.push_back(h);
    else curl_easy_cleanup(h);
  }

  HttpTimeouts timeouts_;
  Tls tls_;
  std::mutex mutex_;
  std::vector<CURL*> idle_;
};

}  // namespace s3
CAIRN_END_NAMESPACE
