// SPDX-License-Identifier: Apache-2.0
// Where an S3 store's credentials come from, the chain the AWS SDKs follow, for the machines
// training runs on: after the options, the environment's keys and the profile's keys
// (options.hpp, no request made), a profile's role (role_arn with source_profile: STS
// AssumeRole, signed with the source's credentials), a profile's IAM Identity Center (SSO)
// login (the token `aws sso login` cached, traded with SSO for the role's credentials), a
// profile's `credential_process` (vault and other helpers), a web identity token exchanged
// with STS (EKS's IAM roles for service accounts), the container credentials endpoint (ECS
// tasks, EKS Pod Identity), then EC2's instance metadata service (IMDSv2). These hand out
// temporary credentials with an end, which the client renews a few minutes before it
// (client.hpp).
//
// What they answer is untrusted: bodies are capped, fields checked, and no secret is ever
// part of an error. A source that is configured and fails (a credential_process that exits
// non-zero, an STS refusal, a container endpoint that says no) is an error naming it; the
// instance metadata service is only a probe (most machines are no EC2 instance), so where it
// does not answer the requests go unsigned and the 403 that follows says what was tried.
#pragma once

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "cairn/core/config.hpp"
#include "cairn/core/error.hpp"
#include "cairn/core/json.hpp"
#include "cairn/core/utc_time.hpp"
#include "cairn/s3/http.hpp"
#include "cairn/s3/options.hpp"
#include "cairn/s3/sigv4.hpp"
#include "cairn/s3/xml.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;

CAIRN_BEGIN_NAMESPACE
namespace s3 {

// Credentials, and where they came from (for errors and tests: never the secret).
struct FoundCredentials {
  Credentials credentials;
  std::string source;  // "S3Options", "environment", "profile dev", "credential_process of profile dev", ...
  std::string tried;   // where none were found: what the instance metadata probe met
};

namespace detail {

// "2026-11-27T21:00:00Z", with fractional seconds or a "+00:00" offset, as STS, IMDS and the
// credential helpers write it. Anything else is an error (a credential without a readable end
// would be trusted forever).
inline std::chrono::system_clock::time_point parse_iso8601(const std::string& s, const std::string& where) {
  std::tm t{};
  int consumed = 0;
  if (std::sscanf(s.c_str(), "%4d-%2d-%2dT%2d:%2d:%2d%n", &t.tm_year, &t.tm_mon, &t.tm_mday, &t.tm_hour, &t.tm_min,
                  &t.tm_sec, &consumed) != 6 ||
      consumed != 19)
    throw Error(ErrorKind::io, where + ": the credentials' Expiration is not an ISO 8601 time: '" + s.substr(0, 40) + "'");
  std::size_t i = 19;
  if (i < s.size() && s[i] == '.')
    for (++i; i < s.size() && s[i] >= '0' && s[i] <= '9';) ++i;
  long offset = 0;
  const std::string zone = s.substr(i);
  if (zone.size() == 6 && (zone[0] == '+' || zone[0] == '-') && zone[3] == ':') {
    offset = (std::stol(zone.substr(1, 2)) * 60 + std::stol(zone.substr(4, 2))) * 60 * (zone[0] == '-' ? -1 : 1);
  } else if (zone != "Z") {
    throw Error(ErrorKind::io, where + ": the credentials' Expiration is not an ISO 8601 time in UTC: '" + s.substr(0, 40) + "'");
  }
  // (Years past 2200 would overflow system_clock's nanoseconds: no credential lasts that long.)
  if (t.tm_year < 1970 || t.tm_year > 2200 || t.tm_mon < 1 || t.tm_mon > 12 || t.tm_mday < 1 || t.tm_mday > 31)
    throw Error(ErrorKind::io, where + ": the credentials' Expiration is not a time of this era: '" + s.substr(0, 40) + "'");
  t.tm_year -= 1900;
  t.tm_mon -= 1;
  const std::time_t secs = timegm(&t);
  return std::chrono::system_clock::from_time_t(secs - offset);
}

inline std::string read_small_file(const std::string& path, const std::string& what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(ErrorKind::io, "cannot read " + what, path);
  std::string text(16 << 10, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<std::size_t>(in.gcount()));
  return trim(text);
}

// The JSON that the container endpoint, IMDS and credential helpers answer.
inline Json parse_credentials_json(const std::string& text, const std::string& where) {
  try {
    Json j = Json::parse(text);
    if (j.is_object()) return j;
  } catch (const Error&) {
  }
  throw Error(ErrorKind::io, where + " answered something that is not JSON credentials");
}
// A member of an untrusted JSON object that should be a string: "" where it is absent or not one.
inline std::string string_member(const Json& j, const char* key) {
  const Json* v = j.find(key);
  return v && v->is_string() ? v->as_string() : std::string();
}
inline Credentials credentials_from_json(const Json& j, const std::string& where, const char* token_field) {
  Credentials c{string_member(j, "AccessKeyId"), string_member(j, "SecretAccessKey"), string_member(j, token_field)};
  if (c.access_key_id.empty() || c.secret_access_key.empty())
    throw Error(ErrorKind::io, where + " answered credentials without AccessKeyId or SecretAccessKey");
  if (const std::string end = string_member(j, "Expiration"); !end.empty()) c.expiration = parse_iso8601(end, where);
  return c;
}
inline Credentials credentials_from_json(const std::string& text, const std::string& where, const char* token_field) {
  return credentials_from_json(parse_credentials_json(text, where), where, token_field);
}

// A request of a credential source, sent again twice after a transport error or a 5xx.
inline HttpResponse perform_with_retries(HttpClient& http, const HttpRequest& rq) {
  HttpResponse r;
  for (int attempt = 0; attempt < 3; ++attempt) {
    if (attempt > 0) std::this_thread::sleep_for(std::chrono::milliseconds(100 << (attempt - 1)));
    r = http.perform(rq);
    if (r.transport == CURLE_OK && r.status < 500) break;
  }
  return r;
}

// A profile's credential_process: a command whose standard output is {"Version": 1,
// "AccessKeyId", "SecretAccessKey", "SessionToken"?, "Expiration"?} (the AWS CLI's contract).
// Its standard error goes where the program's goes, as the SDKs leave it. It runs under
// /bin/sh in a process group of its own, and one that has not exited within `timeout` is
// killed with everything it started (S3Options::credential_process_timeout): a helper that
// waits for a login nobody gives would otherwise hang every save (until 2026-11-28 it did).
inline Credentials run_credential_process(const std::string& command, const std::string& where,
                                          std::chrono::milliseconds timeout) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) throw Error(ErrorKind::io, where + ": no pipe for the command's output");
  posix_spawn_file_actions_t actions;
  posix_spawnattr_t attributes;
  ::posix_spawn_file_actions_init(&actions);
  ::posix_spawn_file_actions_adddup2(&actions, fds[1], 1);
  ::posix_spawnattr_init(&attributes);
  ::posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETPGROUP);
  ::posix_spawnattr_setpgroup(&attributes, 0);
  std::string shell = "/bin/sh", dash_c = "-c", text = command;
  char* argv[] = {shell.data(), dash_c.data(), text.data(), nullptr};
  pid_t pid = 0;
  const int spawned = ::posix_spawn(&pid, "/bin/sh", &actions, &attributes, argv, environ);
  ::posix_spawn_file_actions_destroy(&actions);
  ::posix_spawnattr_destroy(&attributes);
  ::close(fds[1]);
  if (spawned != 0) {
    ::close(fds[0]);
    throw Error(ErrorKind::io, where + ": the command could not be started");
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  auto left_ms = [&] {
    return std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
  };
  std::string out;
  bool late = false;
  char buf[4096];
  while (true) {  // its output, until it closes it
    const auto left = left_ms();
    if (left <= 0) {
      late = true;
      break;
    }
    pollfd p{fds[0], POLLIN, 0};
    const int ready = ::poll(&p, 1, static_cast<int>(std::min<long long>(left, 1 << 30)));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) {
      late = ready == 0;
      break;
    }
    const ssize_t n = ::read(fds[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    if (out.size() < (1 << 20)) out.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fds[0]);
  int status = -1;  // (not reaped: SIGCHLD ignored by the program) "did not exit normally"
  while (!late) {  // then its exit
    const pid_t done = ::waitpid(pid, &status, WNOHANG);
    if (done == pid || (done < 0 && errno != EINTR)) break;
    if (left_ms() <= 0) late = true;
    else std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (late) {
    ::kill(-pid, SIGKILL);
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    throw Error(ErrorKind::timeout, where + ": the command did not finish within " +
                std::to_string(std::chrono::duration_cast<std::chrono::seconds>(timeout).count()) +
                " s (S3Options::credential_process_timeout); it was stopped");
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    throw Error(ErrorKind::io, where + ": the command " +
                                   (status != -1 && WIFEXITED(status) ? "exited with status " + std::to_string(WEXITSTATUS(status))
                                                                      : std::string("did not exit normally")));
  const Json j = parse_credentials_json(out, where);
  const Json* version = j.find("Version");
  if (!version || !version->is_int() || version->as_int() != 1)
    throw Error(ErrorKind::io, where + ": the command's JSON must say \"Version\": 1");
  return credentials_from_json(j, where, "SessionToken");
}

inline std::string form_encode(const std::string& s) { return uri_encode(s, false); }

// An endpoint of an AWS service: its own variable (AWS_ENDPOINT_URL_STS, ..._SSO,
// ..._SSO_OIDC), else AWS_ENDPOINT_URL, else AWS's.
inline std::string service_url(const char* variable, const std::string& aws) {
  std::string url = env(variable);
  if (url.empty()) url = env("AWS_ENDPOINT_URL");
  if (url.empty()) url = aws;
  while (!url.empty() && url.back() == '/') url.pop_back();
  return url;
}

// STS's endpoint: AWS_ENDPOINT_URL_STS, AWS_ENDPOINT_URL, else STS of the region.
inline std::string sts_url(const std::string& region) {
  return service_url("AWS_ENDPOINT_URL_STS", "https://sts." + (region.empty() ? std::string("us-east-1") : region) + ".amazonaws.com");
}

inline std::string default_session_name() {
  return "cairn-" + std::to_string(std::chrono::duration_cast<std::chrono::seconds>(
                                       std::chrono::system_clock::now().time_since_epoch())
                                       .count());
}

// One STS action (a form body POSTed to sts_url), its answer's Credentials. `signer`, where
// given, signs it (AssumeRole: with the source's credentials); AssumeRoleWithWebIdentity goes
// unsigned, the token being the proof. `where` names the call in errors.
inline Credentials sts_credentials(const std::string& action, const std::string& form, const std::string& region,
                                   const Credentials* signer, const std::string& where, const S3Options& o) {
  const std::string url = sts_url(region);
  const std::string body = "Action=" + action + "&Version=2011-06-15&" + form;
  HttpClient http(HttpTimeouts{10, 1024, 30, 60}, HttpClient::Tls{o.verify_tls, o.ca_bundle});
  HttpRequest rq;
  rq.method = "POST";
  rq.url = url + "/";
  rq.headers = {"Accept: application/xml"};
  SignedRequest s;  // its headers are the ones sent (curl sends the host itself)
  s.headers = {{"content-type", "application/x-www-form-urlencoded"}};
  const std::string amz_date = amz_date_now();
  if (signer) {
    s.headers.push_back({"x-amz-date", amz_date});
    if (!signer->session_token.empty()) s.headers.push_back({"x-amz-security-token", signer->session_token});
  }
  for (const auto& [k, v] : s.headers) rq.headers.push_back(k + ": " + v);
  if (signer) {
    // SigV4 for the service "sts" in the region (us-east-1 for the global endpoint), over the
    // URL's host[:port] and its path (an endpoint may have one: a proxy's, a test's).
    const auto scheme_end = url.find("://");
    const std::string rest = scheme_end == std::string::npos ? url : url.substr(scheme_end + 3);
    const auto slash = rest.find('/');
    s.method = "POST";
    s.path = (slash == std::string::npos ? std::string() : rest.substr(slash)) + "/";
    s.headers.push_back({"host", rest.substr(0, slash)});
    s.payload_hash = sha256_hex(body);
    const std::string sts_region = region.empty() ? std::string("us-east-1") : region;
    rq.headers.push_back("Authorization: " + sign(s, *signer, sts_region, "sts", amz_date).authorization);
  }
  rq.body = body.data();
  rq.body_size = body.size();
  rq.max_body = 64 << 10;
  const HttpResponse r = perform_with_retries(http, rq);
  if (r.transport != CURLE_OK) throw Error(ErrorKind::io, where + " failed: " + r.transport_error, url);
  XmlElement x;
  try {
    x = parse_xml(r.body);
  } catch (const Error&) {
    throw Error(ErrorKind::io, where + " answered HTTP " + std::to_string(r.status) + " without readable XML", url);
  }
  if (r.status != 200) {
    const XmlElement* e = x.child("Error");
    throw Error(ErrorKind::io,
                where + " failed: HTTP " + std::to_string(r.status) +
                    (e ? " " + e->child_text("Code") + ": " + e->child_text("Message") : std::string()),
                url);
  }
  const XmlElement* result = x.child(action + "Result");
  const XmlElement* creds = result ? result->child("Credentials") : nullptr;
  if (!creds) throw Error(ErrorKind::io, where + " answered no Credentials", url);
  Credentials c{creds->child_text("AccessKeyId"), creds->child_text("SecretAccessKey"), creds->child_text("SessionToken")};
  if (c.access_key_id.empty() || c.secret_access_key.empty())
    throw Error(ErrorKind::io, where + " answered credentials without AccessKeyId or SecretAccessKey", url);
  if (const std::string end = creds->child_text("Expiration"); !end.empty()) c.expiration = parse_iso8601(end, where);
  return c;
}

// STS AssumeRoleWithWebIdentity: the token file's content for a role's temporary credentials
// (unsigned: the token is the proof).
inline Credentials assume_role_with_web_identity(const std::string& token_file, const std::string& role_arn,
                                                 std::string session_name, const std::string& region,
                                                 const S3Options& o) {
  const std::string token = read_small_file(token_file, "the web identity token file (AWS_WEB_IDENTITY_TOKEN_FILE)");
  if (session_name.empty()) session_name = default_session_name();
  return sts_credentials("AssumeRoleWithWebIdentity",
                         "RoleArn=" + form_encode(role_arn) + "&RoleSessionName=" + form_encode(session_name) +
                             "&WebIdentityToken=" + form_encode(token),
                         region, nullptr, "STS AssumeRoleWithWebIdentity for " + role_arn, o);
}

// IAM Identity Center (AWS SSO): a profile with `sso_session` (whose [sso-session NAME] section
// of the config file holds sso_region and sso_start_url) or, in the older form, with
// sso_start_url and sso_region of its own; both with sso_account_id and sso_role_name. The
// access token is the one `aws sso login` left in ~/.aws/sso/cache/<SHA-1 of the session's name
// (older form: of the start URL)>.json; SSO's GetRoleCredentials trades it for the role's
// temporary credentials. cairn never logs anyone in: a token that has ended is renewed with its
// refresh token where the login left one (SSO OIDC CreateToken, written back to the cache as
// the AWS CLI does, so the CLI and other SDKs go on with it), else the error says which
// `aws sso login` to run.
inline bool is_sso_profile(const Profile& p) { return !p.get("sso_session").empty() || !p.get("sso_start_url").empty(); }

// What a JSON error body of SSO or SSO OIDC says: "UnauthorizedException: Session token not
// found or invalid", "invalid_grant", ... (short, and never a token: they carry none).
inline std::string aws_json_error(const std::string& body) {
  try {
    const Json j = Json::parse(body);
    if (!j.is_object()) return {};
    std::string out;
    for (const char* k : {"__type", "error", "message", "Message", "error_description"})
      if (const Json* v = j.find(k); v && v->is_string() && !v->as_string().empty())
        out += (out.empty() ? "" : ": ") + v->as_string().substr(0, 200);
    return out;
  } catch (const Error&) {
    return {};
  }
}

// SSO OIDC CreateToken with the login's refresh token. Returns false (and says why in `why`)
// where it cannot be renewed; on success updates `cache` (accessToken, expiresAt, refreshToken).
inline bool refresh_sso_token(Json& cache, const std::string& region, const S3Options& o, std::string& why) {
  const std::string client_id = string_member(cache, "clientId"), client_secret = string_member(cache, "clientSecret"),
                    refresh = string_member(cache, "refreshToken");
  if (client_id.empty() || client_secret.empty() || refresh.empty()) {
    why = "the cached login has no refresh token";
    return false;
  }
  if (const std::string ends = string_member(cache, "registrationExpiresAt"); !ends.empty()) {
    try {
      if (parse_iso8601(ends, "the SSO token cache") <= std::chrono::system_clock::now()) {
        why = "the login's client registration has ended";
        return false;
      }
    } catch (const Error&) {
    }
  }
  Json body = Json::object();
  body["clientId"] = Json(client_id);
  body["clientSecret"] = Json(client_secret);
  body["grantType"] = Json(std::string("refresh_token"));
  body["refreshToken"] = Json(refresh);
  const std::string text = body.dump();
  const std::string url = service_url("AWS_ENDPOINT_URL_SSO_OIDC", "https://oidc." + region + ".amazonaws.com") + "/token";
  HttpClient http(HttpTimeouts{10, 1024, 30, 60}, HttpClient::Tls{o.verify_tls, o.ca_bundle});
  HttpRequest rq;
  rq.method = "POST";
  rq.url = url;
  rq.headers = {"Content-Type: application/json", "Accept: application/json"};
  rq.body = text.data();
  rq.body_size = text.size();
  rq.max_body = 64 << 10;
  const HttpResponse r = perform_with_retries(http, rq);
  if (r.transport != CURLE_OK) {
    why = "SSO OIDC (" + url + ") did not answer: " + r.transport_error;
    return false;
  }
  if (r.status != 200) {
    const std::string e = aws_json_error(r.body);
    why = "SSO OIDC refused to renew it (HTTP " + std::to_string(r.status) + (e.empty() ? "" : " " + e) + ")";
    return false;
  }
  try {
    const Json answer = Json::parse(r.body);
    const Json* token = answer.find("accessToken");
    const Json* seconds = answer.find("expiresIn");
    if (!token || !token->is_string() || token->as_string().empty() || !seconds || !seconds->is_int() ||
        seconds->as_int() <= 0 || seconds->as_int() > 366 * 24 * 3600)
      throw Error(ErrorKind::io, "no accessToken and expiresIn");
    cache["accessToken"] = Json(token->as_string());
    cache["expiresAt"] = Json(cairn::detail::iso8601_utc(cairn::detail::now_unix_ms() + seconds->as_int() * 1000));
    if (const Json* next = answer.find("refreshToken"); next && next->is_string() && !next->as_string().empty())
      cache["refreshToken"] = Json(next->as_string());
    return true;
  } catch (const Error&) {
    why = "SSO OIDC answered something that is not a token";
    return false;
  }
}

// The cache file replaced whole (a temporary file beside it, renamed over it, readable by its
// owner alone, as the CLI keeps it: it holds a refresh token and a client secret, which
// detail::write_whole_file's 0644 would show to every user); where it cannot be written the
// renewed token is still used.
inline void write_sso_cache(const std::string& path, const Json& cache) {
  const std::string tmp = path + ".cairn-" + std::to_string(::getpid()) + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return;
  const std::string text = cache.dump();
  bool ok = true;
  for (std::size_t at = 0; ok && at < text.size();) {
    const ssize_t n = ::write(fd, text.data() + at, text.size() - at);
    if (n < 0 && errno == EINTR) continue;
    ok = n > 0;
    if (ok) at += static_cast<std::size_t>(n);
  }
  ok = ::fsync(fd) == 0 && ok;
  ok = ::close(fd) == 0 && ok;
  if (!ok || ::rename(tmp.c_str(), path.c_str()) != 0) ::unlink(tmp.c_str());
}

inline Credentials sso_credentials(const Profile& p, const S3Options& o) {
  const std::string where = "IAM Identity Center (SSO) for profile '" + p.name + "'";
  const std::string account = p.get("sso_account_id"), role = p.get("sso_role_name");
  if (account.empty() || role.empty())
    throw Error(ErrorKind::invalid_argument, where + ": the profile needs sso_account_id and sso_role_name");
  const std::string session = p.get("sso_session");
  std::string region, start_url, login;
  if (!session.empty()) {
    const auto section = ini_section(home_file("AWS_CONFIG_FILE", ".aws/config"), "sso-session " + session);
    auto get = [&](const char* k) {
      const auto it = section.find(k);
      return it == section.end() ? std::string() : it->second;
    };
    region = get("sso_region");
    start_url = get("sso_start_url");
    if (region.empty() || start_url.empty())
      throw Error(ErrorKind::invalid_argument, where + ": its sso_session '" + session +
                                                   "' needs a [sso-session " + session +
                                                   "] section with sso_region and sso_start_url in the config file");
    login = "aws sso login --sso-session " + session;
  } else {
    region = p.get("sso_region");
    start_url = p.get("sso_start_url");
    if (region.empty())
      throw Error(ErrorKind::invalid_argument, where + ": the profile has sso_start_url but no sso_region");
    login = "aws sso login --profile " + p.name;
  }
  if (region.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789-") != std::string::npos)
    throw Error(ErrorKind::invalid_argument, where + ": sso_region '" + region.substr(0, 40) + "' is not a region");
  const std::string home = env("HOME");
  if (home.empty()) throw Error(ErrorKind::invalid_argument, where + ": HOME is not set, so no SSO login can be found");
  const std::string& cache_key = session.empty() ? start_url : session;
  const std::string path =
      home + "/.aws/sso/cache/" + digest_hex(EVP_sha1(), "SHA-1", cache_key.data(), cache_key.size()) + ".json";
  std::string text;
  try {
    text = read_small_file(path, "the cached SSO token");
  } catch (const Error&) {
    throw Error(ErrorKind::io, where + ": no SSO login found (no cached token); run `" + login + "`", path);
  }
  Json cache;
  try {
    cache = Json::parse(text);
  } catch (const Error&) {
  }
  const Json* token = cache.is_object() ? cache.find("accessToken") : nullptr;
  const Json* ends = cache.is_object() ? cache.find("expiresAt") : nullptr;
  if (!token || !token->is_string() || token->as_string().empty() || !ends || !ends->is_string())
    throw Error(ErrorKind::io, where + ": the cached SSO token has no accessToken and expiresAt; run `" + login + "`", path);
  std::string access_token = token->as_string();
  // AWS CLI 2.0 wrote "2020-06-17T10:02:08UTC"; later ones write RFC 3339 ("...Z").
  std::string end_text = ends->as_string();
  if (end_text.size() > 3 && end_text.compare(end_text.size() - 3, 3, "UTC") == 0) end_text.replace(end_text.size() - 3, 3, "Z");
  const auto end = parse_iso8601(end_text, where + " (the cached token's expiresAt)");
  const auto now = std::chrono::system_clock::now();
  // Renewed within 5 minutes of its end, as the SDKs do (older-form logins have no refresh token).
  if (end - now < std::chrono::minutes(5)) {
    std::string why = "the login is of the older form (sso_start_url in the profile), which cannot be renewed";
    if (!session.empty() && refresh_sso_token(cache, region, o, why)) {
      access_token = cache.find("accessToken")->as_string();
      write_sso_cache(path, cache);
    } else if (end <= now) {
      throw Error(ErrorKind::io, where + ": the SSO login has ended and " + why + "; run `" + login + "`", path);
    }
  }
  if (access_token.find_first_of("\r\n") != std::string::npos)
    throw Error(ErrorKind::io, where + ": the cached SSO token holds a line break", path);
  const std::string url = service_url("AWS_ENDPOINT_URL_SSO", "https://portal.sso." + region + ".amazonaws.com") +
                          "/federation/credentials?account_id=" + uri_encode(account, false) +
                          "&role_name=" + uri_encode(role, false);
  HttpClient http(HttpTimeouts{10, 1024, 30, 60}, HttpClient::Tls{o.verify_tls, o.ca_bundle});
  HttpRequest rq;
  rq.method = "GET";
  rq.url = url;
  rq.headers = {"x-amz-sso_bearer_token: " + access_token, "Accept: application/json"};
  rq.max_body = 64 << 10;
  const HttpResponse r = perform_with_retries(http, rq);
  const std::string call = where + ": SSO GetRoleCredentials for role " + role + " in account " + account;
  if (r.transport != CURLE_OK) throw Error(ErrorKind::io, call + " failed: " + r.transport_error, url);
  if (r.status != 200) {
    // The error's type comes in a header ("UnauthorizedException:..."), its message in the body.
    std::string e = r.header("x-amzn-errortype").substr(0, 64);
    e = e.substr(0, e.find(':'));
    if (const std::string m = aws_json_error(r.body); !m.empty()) e += (e.empty() ? "" : ": ") + m;
    throw Error(ErrorKind::io,
                call + " failed: HTTP " + std::to_string(r.status) + (e.empty() ? "" : " " + e) +
                    (r.status == 401 ? "; run `" + login + "`" : std::string()),
                url);
  }
  Json answer;
  try {
    answer = Json::parse(r.body);
  } catch (const Error&) {
  }
  const Json* rc = answer.is_object() ? answer.find("roleCredentials") : nullptr;
  if (!rc || !rc->is_object()) throw Error(ErrorKind::io, call + " answered no roleCredentials", url);
  Credentials c{string_member(*rc, "accessKeyId"), string_member(*rc, "secretAccessKey"), string_member(*rc, "sessionToken")};
  if (c.access_key_id.empty() || c.secret_access_key.empty())
    throw Error(ErrorKind::io, call + " answered credentials without accessKeyId or secretAccessKey", url);
  // Milliseconds since 1970; past 2200 (system_clock's nanoseconds would overflow) is refused.
  if (const Json* ms = rc->find("expiration"); ms && ms->is_int() && ms->as_int() > 0) {
    if (ms->as_int() > std::int64_t{7258118400} * 1000)
      throw Error(ErrorKind::io, call + " answered an expiration past the year 2200", url);
    c.expiration = std::chrono::system_clock::time_point(std::chrono::milliseconds(ms->as_int()));
  }
  return c;
}

inline Credentials container_credentials(const std::string& relative, const std::string& full);
inline std::optional<Credentials> instance_credentials(std::string& tried);
inline Credentials assume_role_of_profile(const Profile& p, const std::string& region, const S3Options& o, int depth = 0);

// The credentials a role profile assumes its role with: its credential_source (Environment,
// Ec2InstanceMetadata, EcsContainer), else its source_profile's keys, credential_process, or
// role (a chain; a profile that names itself lends its own keys).
inline Credentials role_source_credentials(const Profile& role, const std::string& region, const S3Options& o, int depth) {
  const std::string where = "profile '" + role.name + "'";
  if (const std::string cs = role.get("credential_source"); !cs.empty()) {
    Credentials c;
    if (cs == "Environment") {
      c = {env("AWS_ACCESS_KEY_ID"), env("AWS_SECRET_ACCESS_KEY"), env("AWS_SESSION_TOKEN")};
    } else if (cs == "Ec2InstanceMetadata") {
      std::string tried;
      if (auto imds = instance_credentials(tried)) c = std::move(*imds);
      else throw Error(ErrorKind::io, where + ": its credential_source, EC2's instance metadata, gave none: " + tried);
    } else if (cs == "EcsContainer") {
      c = container_credentials(env("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI"), env("AWS_CONTAINER_CREDENTIALS_FULL_URI"));
    } else {
      throw Error(ErrorKind::invalid_argument,
                  where + ": credential_source '" + cs + "' is none of Environment, Ec2InstanceMetadata and EcsContainer");
    }
    if (c.anonymous()) throw Error(ErrorKind::invalid_argument, where + ": its credential_source (" + cs + ") has no keys");
    return c;
  }
  const std::string name = role.get("source_profile");
  if (name == role.name) {
    Credentials c{role.get("aws_access_key_id"), role.get("aws_secret_access_key"), role.get("aws_session_token")};
    if (c.anonymous()) throw Error(ErrorKind::invalid_argument, where + " is its own source_profile but has no keys");
    return c;
  }
  if (depth >= 8)
    throw Error(ErrorKind::invalid_argument, where + ": its source_profile chain is more than 8 profiles long (or a cycle)");
  const Profile source = read_profile(name);
  if (source.credentials_file.empty() && source.config_file.empty())
    throw Error(ErrorKind::invalid_argument, where + ": its source_profile '" + name + "' is in neither the credentials nor the config file");
  if (is_role_profile(source)) return assume_role_of_profile(source, region, o, depth + 1);
  Credentials c{source.get("aws_access_key_id"), source.get("aws_secret_access_key"), source.get("aws_session_token")};
  if (!c.anonymous()) return c;
  if (is_sso_profile(source)) return sso_credentials(source, o);
  if (const std::string command = source.get("credential_process"); !command.empty())
    return run_credential_process(command, "the credential_process of profile '" + source.name + "'",
                                  o.credential_process_timeout);
  throw Error(ErrorKind::invalid_argument,
              where + ": its source_profile '" + name + "' has neither keys, an SSO login nor a credential_process");
}

// A profile's role_arn, assumed with STS AssumeRole signed with the source's credentials, as
// the AWS CLI does (role_session_name, external_id and duration_seconds are sent where set).
// A role that asks for an MFA code (mfa_serial) cannot be assumed without a person: refused.
inline Credentials assume_role_of_profile(const Profile& p, const std::string& region, const S3Options& o, int depth) {
  const std::string role_arn = p.get("role_arn");
  const std::string where = "STS AssumeRole for " + role_arn + " (profile '" + p.name + "')";
  if (!p.get("mfa_serial").empty())
    throw Error(ErrorKind::invalid_argument,
                where + ": the role asks for an MFA code (mfa_serial), which cairn cannot prompt for; give the profile a "
                        "credential_process such as `aws configure export-credentials --profile " + p.name +
                        " --format process` after `aws sts get-session-token`");
  const Credentials source = role_source_credentials(p, region, o, depth);
  std::string session = p.get("role_session_name");
  if (session.empty()) session = default_session_name();
  std::string form = "RoleArn=" + form_encode(role_arn) + "&RoleSessionName=" + form_encode(session);
  if (const std::string id = p.get("external_id"); !id.empty()) form += "&ExternalId=" + form_encode(id);
  if (const std::string d = p.get("duration_seconds"); !d.empty()) {
    if (d.size() > 6 || !std::all_of(d.begin(), d.end(), [](char ch) { return ch >= '0' && ch <= '9'; }))
      throw Error(ErrorKind::invalid_argument, "profile '" + p.name + "': duration_seconds is not a number of seconds");
    form += "&DurationSeconds=" + d;
  }
  return sts_credentials("AssumeRole", form, region, &source, where, o);
}

// The container endpoint: AWS_CONTAINER_CREDENTIALS_RELATIVE_URI (ECS: under 169.254.170.2)
// or AWS_CONTAINER_CREDENTIALS_FULL_URI (EKS Pod Identity, or any https:// or loopback URL;
// other plain http hosts are refused, as the SDKs refuse them, since the token goes there).
// Authorization: the content of AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE, else
// AWS_CONTAINER_AUTHORIZATION_TOKEN.
inline Credentials container_credentials(const std::string& relative, const std::string& full) {
  std::string url = !relative.empty() ? "http://169.254.170.2" + relative : full;
  if (relative.empty()) {
    const auto sep = url.find("://");
    const std::string scheme = sep == std::string::npos ? std::string() : url.substr(0, sep);
    std::string host = sep == std::string::npos ? std::string() : url.substr(sep + 3);
    host = host.substr(0, host.find('/'));
    if (!host.empty() && host.front() == '[') host = host.substr(0, host.find(']') + 1);
    else host = host.substr(0, host.find(':'));
    const bool allowed = scheme == "https" ||
                         (scheme == "http" && (host == "localhost" || host.rfind("127.", 0) == 0 || host == "[::1]" ||
                                               host == "169.254.170.2" || host == "169.254.170.23" ||
                                               host == "[fd00:ec2::23]"));
    if (!allowed)
      throw Error(ErrorKind::invalid_argument,
                  "AWS_CONTAINER_CREDENTIALS_FULL_URI must be https://, a loopback address or the ECS/EKS "
                  "credential address (169.254.170.2, 169.254.170.23, fd00:ec2::23): " + url.substr(0, 200));
  }
  std::string token;
  if (const std::string file = env("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE"); !file.empty())
    token = read_small_file(file, "the container credentials token (AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE)");
  else
    token = env("AWS_CONTAINER_AUTHORIZATION_TOKEN");
  if (token.find_first_of("\r\n") != std::string::npos)
    throw Error(ErrorKind::invalid_argument, "the container credentials token holds a line break");
  HttpClient http(HttpTimeouts{2, 1, 5, 5}, HttpClient::Tls{});
  HttpRequest rq;
  rq.method = "GET";
  rq.url = url;
  if (!token.empty()) rq.headers.push_back("Authorization: " + token);
  rq.max_body = 64 << 10;
  const HttpResponse r = perform_with_retries(http, rq);
  const std::string where = "the container credentials endpoint";
  if (r.transport != CURLE_OK) throw Error(ErrorKind::io, where + " did not answer: " + r.transport_error, url);
  if (r.status != 200)
    throw Error(ErrorKind::io, where + " answered HTTP " + std::to_string(r.status), url);
  return credentials_from_json(r.body, where, "Token");
}

// EC2's instance metadata service, IMDSv2 (a session token first), falling back to IMDSv1
// where the token is refused. A probe: no answer means no credentials from here, and `tried`
// says why. Where the service cannot be reached at all (no EC2 instance, whose address may
// swallow packets for the whole second of the connect timeout), the process does not ask it
// again for a minute.
inline std::optional<Credentials> instance_credentials(std::string& tried) {
  using clock = std::chrono::steady_clock;
  static std::atomic<clock::rep> unreachable_until{0};
  std::string disabled = env("AWS_EC2_METADATA_DISABLED");
  for (char& ch : disabled) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  if (disabled == "true") {
    tried = "the EC2 instance metadata service is disabled (AWS_EC2_METADATA_DISABLED)";
    return std::nullopt;
  }
  std::string base = env("AWS_EC2_METADATA_SERVICE_ENDPOINT");
  const bool custom = !base.empty();
  if (base.empty()) base = "http://169.254.169.254";
  while (!base.empty() && base.back() == '/') base.pop_back();
  if (!custom && clock::now().time_since_epoch().count() < unreachable_until.load()) {
    tried = "the EC2 instance metadata service (" + base + ") did not answer";
    return std::nullopt;
  }
  HttpClient http(HttpTimeouts{1, 1, 2, 2}, HttpClient::Tls{});
  static const char nothing = 0;
  HttpRequest put;
  put.method = "PUT";
  put.url = base + "/latest/api/token";
  put.headers = {"X-aws-ec2-metadata-token-ttl-seconds: 21600"};
  put.body = &nothing;
  put.max_body = 4096;
  const HttpResponse t = http.perform(put);
  if (t.transport != CURLE_OK) {
    if (!custom) unreachable_until = (clock::now() + std::chrono::minutes(1)).time_since_epoch().count();
    tried = "the EC2 instance metadata service (" + base + ") did not answer: " + t.transport_error;
    return std::nullopt;
  }
  std::vector<std::string> headers;
  if (t.status == 200 && !t.body.empty() && t.body.find_first_of("\r\n") == std::string::npos)
    headers.push_back("X-aws-ec2-metadata-token: " + t.body);
  auto get = [&](const std::string& path) {
    HttpRequest rq;
    rq.method = "GET";
    rq.url = base + path;
    rq.headers = headers;
    rq.max_body = 64 << 10;
    return http.perform(rq);
  };
  const std::string prefix = "/latest/meta-data/iam/security-credentials/";
  const HttpResponse role = get(prefix);
  if (role.transport != CURLE_OK || role.status != 200) {
    tried = "the EC2 instance metadata service (" + base + ") named no role (" +
            (role.transport != CURLE_OK ? role.transport_error : "HTTP " + std::to_string(role.status)) + ")";
    return std::nullopt;
  }
  const std::string name = trim(role.body.substr(0, role.body.find('\n')));
  if (name.empty() || name.size() > 128 || name.find_first_of("/?#% ") != std::string::npos) {
    tried = "the EC2 instance metadata service (" + base + ") named no role";
    return std::nullopt;
  }
  const HttpResponse r = get(prefix + name);
  if (r.transport != CURLE_OK || r.status != 200) {
    tried = "the EC2 instance metadata service (" + base + ") gave no credentials for role " + name;
    return std::nullopt;
  }
  try {
    const std::string where = "the EC2 instance metadata service";
    const Json j = parse_credentials_json(r.body, where);
    const Json* code = j.find("Code");
    if (code && code->is_string() && code->as_string() != "Success") {
      tried = where + " answered " + code->as_string().substr(0, 64) + " for role " + name;
      return std::nullopt;
    }
    return credentials_from_json(j, where, "Token");
  } catch (const Error& e) {
    tried = e.what();
    return std::nullopt;
  }
}

}  // namespace detail

// Every source in turn (the order of the comment at the top, which docs/object-store.md
// repeats); `region` is where STS is asked. gs:// stops after the profile's keys.
inline FoundCredentials find_credentials(const std::string& scheme, const std::string& bucket, const S3Options& o,
                                         const std::string& region) {
  using detail::env;
  FoundCredentials f;
  if (o.credentials_provider) {
    f.credentials = o.credentials_provider();
    f.source = "S3Options::credentials_provider";
    return f;
  }
  const ResolvedConfig c = resolve_config(scheme, bucket, o);
  const detail::Profile profile = detail::read_profile(o.profile);
  if (!c.credentials.anonymous()) {
    f.credentials = c.credentials;
    f.source = !o.access_key_id.empty()               ? "S3Options"
               : !env("AWS_ACCESS_KEY_ID").empty()    ? "environment"
                                                      : "profile " + profile.name;
    return f;
  }
  if (scheme != "s3") {
    f.tried = "no HMAC keys in S3Options, the environment or the profile";
    return f;
  }
  if (detail::is_role_profile(profile)) {
    f.credentials = detail::assume_role_of_profile(profile, region, o);
    f.source = "role " + profile.get("role_arn") + " of profile " + profile.name;
    return f;
  }
  if (detail::is_sso_profile(profile)) {
    f.credentials = detail::sso_credentials(profile, o);
    f.source = "IAM Identity Center (SSO) of profile " + profile.name;
    return f;
  }
  if (const std::string command = profile.get("credential_process"); !command.empty()) {
    f.credentials = detail::run_credential_process(command, "the credential_process of profile '" + profile.name + "'",
                                                   o.credential_process_timeout);
    f.source = "credential_process of profile " + profile.name;
    return f;
  }
  std::string token_file = env("AWS_WEB_IDENTITY_TOKEN_FILE"), role_arn = env("AWS_ROLE_ARN"),
              session = env("AWS_ROLE_SESSION_NAME");
  if (token_file.empty() || role_arn.empty()) {
    token_file = profile.get("web_identity_token_file");
    role_arn = profile.get("role_arn");
    session = profile.get("role_session_name");
  }
  if (!token_file.empty() && !role_arn.empty()) {
    f.credentials = detail::assume_role_with_web_identity(token_file, role_arn, session, region, o);
    f.source = "web identity (" + role_arn + ")";
    return f;
  }
  const std::string relative = env("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI"), full = env("AWS_CONTAINER_CREDENTIALS_FULL_URI");
  if (!relative.empty() || !full.empty()) {
    f.credentials = detail::container_credentials(relative, full);
    f.source = "container endpoint";
    return f;
  }
  if (auto imds = detail::instance_credentials(f.tried)) {
    f.credentials = std::move(*imds);
    f.source = "EC2 instance metadata";
  }
  return f;
}

}  // namespace s3
CAIRN_END_NAMESPACE
