#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""A small S3 server in memory, for what no available test server does: it honours
conditional writes (If-None-Match: * and If-Match answer 412; If-Match on a missing key 404,
as AWS), and it fails requests on command: 503 SlowDown, 500, 403, a reset connection, a stalled response, a request answered
late (delay: FAKE_S3_DELAY seconds, 1 by default, then handled), a request applied whose
answer is lost (lost: the connection closes instead), an upload gone at its completion
(nosuchupload), an object not seen (notfound: 404), a 200 that carries an
<Error>, a body cut short, a DeleteObjects that removes every other key and reports the rest
(halfdelete), hostile listings (deep, malformed, a DOCTYPE, a pagination loop),
501 to conditional writes (a store without them), 501 to DeleteObjects (GCS has none). It
honours GCS's create-only header too (x-goog-if-generation-match: 0), and copies
(x-amz-copy-source, whole or a part's range). Signatures are not checked (s3rver checks them in the other tests).

  fake_s3.py DIR       listens on 127.0.0.1 and a free port; writes DIR/endpoint
                       (with FAKE_S3_LOG=FILE, appends "METHOD path?query" per request to FILE;
                       with FAKE_S3_LATENCY=SECONDS, answers every request that much later, as a
                       distant store would: what a benchmark of round trips measures against)
  fake_s3.py DIR --exit-with-parent
                       the same, and exits when the process that started it is gone (the tests)

Control, on the same port (never a bucket name S3 allows, as it starts with '_'):
  POST /_fault?at=N&how=H[&count=C]   requests N..N+C-1 from now fail as H (N=1: the next one)
  POST /_fault?match=S&how=H[&count=C]  requests whose "METHOD path?query" contains S fail (C of them)
                                      (faults are taken in the order given: how=pass lets the
                                      first C of such requests through before later faults)
  POST /_expire?key=AKID              every request signed with access key AKID is answered
                                      400 ExpiredToken (as S3 answers a session token past its end)
  POST /_reset                        no faults, nothing expired, credential sources as at the start;
                                      counters to zero (objects stay)
  GET  /_stats                        {"requests": n, "open_uploads": n, "faults_hit": n, "in_flight": n,
                                       "max_in_flight": n, "bytes_read": n (object bytes GET sent),
                                       "signed_by": {access key: requests},
                                       "issued": {source: credentials handed out}}
                                      (in_flight: requests being handled now, control ones aside;
                                      max_in_flight: the most at once since the last reset;
                                      watched_max_in_flight: the same of those /_watch names)
  POST /_watch?match=S                count in watched_max_in_flight the requests whose
                                      "METHOD path?query" contains S (until the next reset)

Credential sources, as AWS's answer on the machines training runs on (s3/credentials.hpp); each
hands out temporary credentials under a new access key (IMDS1, IMDS2, ..., CONTAINER1, ...,
STS1, ...) with the lifetime set by the control below:
  PUT  /latest/api/token              EC2's instance metadata service (IMDSv2): a session token
  GET  /latest/meta-data/iam/security-credentials/[ROLE]   the role's name, then its credentials
                                      (401 without the session token, as where IMDSv2 is required)
  GET  /_container/credentials        the container endpoint (ECS, EKS Pod Identity): 401 unless
                                      Authorization carries the token set below
  POST /_sts                          STS AssumeRoleWithWebIdentity (a form body; 400
                                      InvalidIdentityToken unless RoleArn and WebIdentityToken match),
                                      and STS AssumeRole (403 unless RoleArn matches and the request
                                      is SigV4-signed for "sts" with the source keys set below: the
                                      signature is checked; "issued" counts it as "assume_role")
  GET  /_sso/federation/credentials?account_id=A&role_name=R   IAM Identity Center's GetRoleCredentials:
                                      401 UnauthorizedException unless x-amz-sso_bearer_token is the
                                      token set below or one /_oidc handed out; 403 ForbiddenException
                                      unless A and R are the ones set below
  POST /_oidc/token                   SSO OIDC CreateToken (grantType refresh_token, JSON): a new
                                      access token (sso-token-N) and refresh token (refresh-N) where
                                      clientId, clientSecret and refreshToken are the ones set below
                                      (the first refresh token) or the last one handed out, else 400
                                      invalid_grant ("issued" counts them as "sso_refresh")
  POST /_credentials?lifetime=S[&auth=T][&role_arn=A][&web_token=W][&imds_fail=N][&require_signed=1]
                     [&source_key=K[,K2...]&source_secret=S[,S2...]][&external_id=E]
                     [&sso_token=T&sso_account=A&sso_role=R][&oidc_client=C&oidc_secret=S&oidc_refresh=F]
                                      credentials handed out from now live S seconds (3600 by
                                      default); T, A, W are checked; the next N requests to the
                                      metadata service answer 500 (counted in "issued" as
                                      "imds_failed"); unsigned S3 requests are
                                      answered 403 AccessDenied (as a private bucket answers them)
"""
import json
import os
import socket
import sys
import threading
import time
import urllib.parse
import hashlib
import hmac
import re
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from xml.etree import ElementTree

lock = threading.Lock()
objects = {}      # (bucket, key) -> (bytes, etag, last_modified)
uploads = {}      # upload id -> {"bucket", "key", "parts": {n: bytes}, "initiated"}
LOG = os.environ.get("FAKE_S3_LOG")
LATENCY = float(os.environ.get("FAKE_S3_LATENCY", "0"))
state = {"requests": 0, "bytes_read": 0, "faults_hit": 0, "faults": [], "next_upload": 0, "in_flight": 0, "max_in_flight": 0,
         "watch": None, "watched_in_flight": 0, "watched_max_in_flight": 0,
         "expired": set(), "signed_by": {}, "issued": {}}
creds_config = {"lifetime": 3600, "auth": "", "role_arn": "", "web_token": "", "imds_fail": 0,
                "require_signed": False, "source_key": "", "source_secret": "", "external_id": "",
                "sso_token": "", "sso_account": "", "sso_role": "", "oidc_client": "", "oidc_secret": "",
                "oidc_refresh": "", "sso_tokens": set()}


def iso(t):
    return time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(t))


def etag_of(data):
    return '"' + hashlib.md5(data).hexdigest() + '"'


def esc(s):
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def setup(self):
        super().setup()
        # Headers and body go out in two writes: without this, each answer on a kept-alive
        # connection waits for the client's delayed ACK (40 ms a request).
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    # Replies ---------------------------------------------------------------
    def reply(self, status, body=b"", headers=None, head=False):
        if getattr(self, "lose_reply", False):
            # The "lost" fault: the request was applied; its answer never reaches the client.
            self.lose_reply = False
            self.close_connection = True
            try:
                self.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            return
        self.send_response(status)
        headers = dict(headers or {})
        headers.setdefault("Content-Length", str(len(body)))
        headers.setdefault("x-amz-request-id", "fake-%d" % state["requests"])
        for k, v in headers.items():
            self.send_header(k, v)
        self.end_headers()
        if body and not head:
            self.wfile.write(body)

    def error(self, status, code, message, head=False):
        body = ("<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>%s</Code><Message>%s</Message>"
                "<RequestId>fake-%d</RequestId></Error>" % (code, esc(message), state["requests"])).encode()
        self.reply(status, body, {"Content-Type": "application/xml"}, head)

    def read_body(self):
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n) if n else b""
        if len(body) != n:
            # The client went away mid-body (killed): S3 stores nothing of such a request.
            raise ConnectionAbortedError("short body")
        return body

    # Faults ----------------------------------------------------------------
    def take_fault(self, what):
        with lock:
            state["requests"] += 1
            n = state["requests"]
            for f in state["faults"]:
                if f.get("match"):
                    hit = f["match"] in what and f["count"] > 0
                    if hit:
                        f["count"] -= 1
                else:
                    hit = f["at"] <= n < f["at"] + f["count"]
                if hit:
                    state["faults_hit"] += 1
                    return f["how"]
        return None

    def apply_fault(self, how, head):
        """True when the request was answered (or dropped) by the fault."""
        if how in ("503", "slowdown"):
            self.read_body()
            self.error(503, "SlowDown", "Please reduce your request rate.", head)
        elif how == "500":
            self.read_body()
            self.error(500, "InternalError", "We encountered an internal error. Please try again.", head)
        elif how == "403":
            self.read_body()
            self.error(403, "AccessDenied", "Access Denied", head)
        elif how == "reset":
            # Close without an answer: the client sees the connection reset or empty.
            self.close_connection = True
            try:
                self.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        elif how == "lost":
            self.lose_reply = True
            return False
        elif how == "delay":
            # Answered late, then as if no fault: a request its sender no longer waits for
            # (killed) still lands, after whatever others did meanwhile.
            time.sleep(float(os.environ.get("FAKE_S3_DELAY", "1")))
            return False
        elif how == "notfound":  # as if the object were not there (yet)
            self.read_body()
            self.error(404, "NoSuchKey", "The specified key does not exist.", head)
        elif how == "stall":
            self.read_body()
            time.sleep(float(os.environ.get("FAKE_S3_STALL", "4")))
            self.close_connection = True
        else:
            return False
        return True

    # Dispatch ----------------------------------------------------------------
    def parse(self):
        u = urllib.parse.urlsplit(self.path)
        q = dict(urllib.parse.parse_qsl(u.query, keep_blank_values=True))
        parts = urllib.parse.unquote(u.path).lstrip("/").split("/", 1)
        bucket = parts[0]
        key = parts[1] if len(parts) > 1 else ""
        return bucket, key, q

    def handle_any(self, method):
        bucket, key, q = self.parse()
        if bucket == "_watch" and method == "POST":
            with lock:
                state.update(watch=q["match"], watched_in_flight=0, watched_max_in_flight=0)
            return self.reply(200)
        if bucket == "_fault" and method == "POST":
            with lock:
                state["faults"].append({"at": state["requests"] + int(q["at"]) if "at" in q else None,
                                        "count": int(q.get("count", "1" if "at" in q else "1000000")),
                                        "match": q.get("match"), "how": q["how"]})
            return self.reply(200)
        if bucket == "_expire" and method == "POST":
            with lock:
                state["expired"].add(q["key"])
            return self.reply(200)
        if bucket == "_reset":
            with lock:
                state.update(requests=0, bytes_read=0, faults_hit=0, faults=[], max_in_flight=0, expired=set(), signed_by={},
                             watch=None, watched_in_flight=0, watched_max_in_flight=0,
                             issued={})
                creds_config.update(lifetime=3600, auth="", role_arn="", web_token="", imds_fail=0,
                                    require_signed=False, source_key="", source_secret="", external_id="",
                                    sso_token="", sso_account="", sso_role="", oidc_client="", oidc_secret="",
                                    oidc_refresh="", sso_tokens=set())
            return self.reply(200)
        if bucket == "_credentials" and method == "POST":
            with lock:
                creds_config["lifetime"] = int(q.get("lifetime", "3600"))
                for k in ("auth", "role_arn", "web_token", "source_key", "source_secret", "external_id", "sso_token",
                          "sso_account", "sso_role", "oidc_client", "oidc_secret", "oidc_refresh"):
                    creds_config[k] = q.get(k, "")
                creds_config["sso_tokens"] = {creds_config["sso_token"]} if creds_config["sso_token"] else set()
                creds_config["imds_fail"] = int(q.get("imds_fail", "0"))
                creds_config["require_signed"] = q.get("require_signed") == "1"
            return self.reply(200)
        if bucket in ("latest", "_container", "_sts"):
            return self.credential_source(method, bucket, key)
        if bucket in ("_sso", "_oidc"):
            return self.sso(method, bucket, key, q)
        if bucket == "_stats":
            with lock:
                body = json.dumps({"requests": state["requests"], "faults_hit": state["faults_hit"],
                                   "open_uploads": len(uploads), "in_flight": state["in_flight"],
                                   "max_in_flight": state["max_in_flight"], "bytes_read": state["bytes_read"],
                                   "watched_max_in_flight": state["watched_max_in_flight"],
                                   "signed_by": state["signed_by"], "issued": state["issued"]}).encode()
            return self.reply(200, body, {"Content-Type": "application/json"})
        head = method == "HEAD"
        if LATENCY > 0:
            time.sleep(LATENCY)
        if LOG:  # FAKE_S3_LOG=FILE: one line per request, to count and name what a call sends
            with lock, open(LOG, "a") as f:
                f.write("%s %s\n" % (method, self.path))
        auth = self.headers.get("Authorization") or ""
        signer = auth.split("Credential=", 1)[1].split("/", 1)[0] if "Credential=" in auth else ""
        watched = state["watch"] is not None and state["watch"] in "%s %s" % (method, self.path)
        with lock:
            state["in_flight"] += 1
            state["max_in_flight"] = max(state["max_in_flight"], state["in_flight"])
            if watched:
                state["watched_in_flight"] += 1
                state["watched_max_in_flight"] = max(state["watched_max_in_flight"], state["watched_in_flight"])
            state["signed_by"][signer] = state["signed_by"].get(signer, 0) + 1
            expired = signer in state["expired"]
            refused = signer == "" and creds_config["require_signed"]
        try:
            if refused:  # as a private bucket answers an unsigned request
                self.read_body()
                return self.error(403, "AccessDenied", "Access Denied", method == "HEAD")
            if expired:  # as S3 answers a request signed with a session token past its end
                self.read_body()
                return self.error(400, "ExpiredToken", "The provided token has expired.", method == "HEAD")
            how = self.take_fault("%s %s" % (method, self.path))
            if how and self.apply_fault(how, head):
                return
            try:
                getattr(self, "op_" + method.lower())(bucket, key, q, how)
            except (BrokenPipeError, ConnectionError):
                self.close_connection = True
        finally:
            with lock:
                state["in_flight"] -= 1
                if watched:
                    state["watched_in_flight"] -= 1

    def issue(self, source):
        with lock:
            n = state["issued"].get(source, 0) + 1
            state["issued"][source] = n
            lifetime = creds_config["lifetime"]
        return {"AccessKeyId": source.upper() + str(n), "SecretAccessKey": "secret-%s-%d" % (source, n),
                "Token": "token-%s-%d" % (source, n), "Expiration": iso(time.time() + lifetime)[:19] + "Z"}

    def credential_source(self, method, bucket, key):
        body = self.read_body()
        if bucket == "latest":  # IMDS
            with lock:
                failing = creds_config["imds_fail"] > 0
                if failing:
                    creds_config["imds_fail"] -= 1
                    state["issued"]["imds_failed"] = state["issued"].get("imds_failed", 0) + 1
            if failing:
                return self.reply(500)
            if method == "PUT" and key == "api/token":
                if not self.headers.get("X-aws-ec2-metadata-token-ttl-seconds"):
                    return self.reply(400)
                with lock:
                    state["issued"]["imds_token"] = state["issued"].get("imds_token", 0) + 1
                return self.reply(200, b"imds-session-token")
            if self.headers.get("X-aws-ec2-metadata-token") != "imds-session-token":
                return self.reply(401)
            prefix = "meta-data/iam/security-credentials/"
            if method != "GET" or not key.startswith(prefix):
                return self.reply(404)
            role = key[len(prefix):]
            if role == "":
                return self.reply(200, b"training-role")
            if role != "training-role":
                return self.reply(404)
            c = self.issue("imds")
            c.update(Code="Success", Type="AWS-HMAC", LastUpdated=iso(time.time()))
            return self.reply(200, json.dumps(c).encode(), {"Content-Type": "text/plain"})
        if bucket == "_container":
            if self.headers.get("Authorization", "") != creds_config["auth"]:
                return self.reply(401, b'{"message": "no"}')
            return self.reply(200, json.dumps(self.issue("container")).encode(), {"Content-Type": "application/json"})
        form = dict(urllib.parse.parse_qsl(body.decode()))
        if form.get("Action") == "AssumeRole":
            return self.assume_role(form, body)
        if (form.get("Action") != "AssumeRoleWithWebIdentity" or form.get("RoleArn") != creds_config["role_arn"]
                or form.get("WebIdentityToken") != creds_config["web_token"] or not form.get("RoleSessionName")):
            return self.reply(400, b"<ErrorResponse><Error><Type>Sender</Type><Code>InvalidIdentityToken</Code>"
                              b"<Message>The web identity token is not valid</Message></Error>"
                              b"<RequestId>sts-1</RequestId></ErrorResponse>")
        return self.sts_answer("AssumeRoleWithWebIdentity", self.issue("sts"))

    def sso(self, method, bucket, key, q):
        body = self.read_body()
        json_type = {"Content-Type": "application/json"}
        if bucket == "_oidc":
            try:
                form = json.loads(body.decode())
            except ValueError:
                form = {}
            with lock:
                cfg = dict(creds_config)
                good = (method == "POST" and key == "token" and form.get("grantType") == "refresh_token"
                        and cfg["oidc_client"] and form.get("clientId") == cfg["oidc_client"]
                        and form.get("clientSecret") == cfg["oidc_secret"] and form.get("refreshToken") == cfg["oidc_refresh"])
                if good:
                    n = state["issued"].get("sso_refresh", 0) + 1
                    state["issued"]["sso_refresh"] = n
                    creds_config["oidc_refresh"] = "refresh-%d" % n  # refresh tokens turn over, as AWS's do
                    creds_config["sso_tokens"].add("sso-token-%d" % n)
            if not good:
                return self.reply(400, json.dumps({"error": "invalid_grant", "error_description": "Invalid refresh token"}).encode(),
                                  json_type)
            return self.reply(200, json.dumps({"accessToken": "sso-token-%d" % n, "expiresIn": 28800,
                                               "refreshToken": "refresh-%d" % n, "tokenType": "Bearer"}).encode(), json_type)
        with lock:
            cfg = dict(creds_config)
        if method != "GET" or key != "federation/credentials":
            return self.reply(404)
        if self.headers.get("x-amz-sso_bearer_token", "") not in cfg["sso_tokens"]:
            return self.reply(401, json.dumps({"message": "Session token not found or invalid"}).encode(),
                              dict(json_type, **{"x-amzn-ErrorType": "UnauthorizedException"}))
        if q.get("account_id") != cfg["sso_account"] or q.get("role_name") != cfg["sso_role"]:
            return self.reply(403, json.dumps({"message": "No access"}).encode(),
                              dict(json_type, **{"x-amzn-ErrorType": "ForbiddenException"}))
        c = self.issue("sso")
        return self.reply(200, json.dumps({"roleCredentials": {
            "accessKeyId": c["AccessKeyId"], "secretAccessKey": c["SecretAccessKey"], "sessionToken": c["Token"],
            "expiration": int((time.time() + cfg["lifetime"]) * 1000)}}).encode(), json_type)

    def sts_answer(self, action, c, extra=""):
        xml = ("<%sResponse><%sResult><Credentials>"
               "<AccessKeyId>%s</AccessKeyId><SecretAccessKey>%s</SecretAccessKey><SessionToken>%s</SessionToken>"
               "<Expiration>%s</Expiration></Credentials>%s</%sResult></%sResponse>") % (
                   action, action, c["AccessKeyId"], c["SecretAccessKey"], c["Token"], c["Expiration"], extra,
                   action, action)
        return self.reply(200, xml.encode(), {"Content-Type": "text/xml"})

    def sigv4_signer(self, body, secret):
        """The access key that signed this request for STS, where its SigV4 signature is right
        for `secret` (computed here as AWS does: canonical request, string to sign, key chain)."""
        m = re.match(r"AWS4-HMAC-SHA256 Credential=([^/]+)/(\d{8})/([^/]+)/([^/]+)/aws4_request, "
                     r"SignedHeaders=([^,]+), Signature=([0-9a-f]{64})$", self.headers.get("Authorization", ""))
        if not m:
            return None
        key, date, region, service, signed, signature = m.groups()
        u = urllib.parse.urlsplit(self.path)
        enc = lambda s: urllib.parse.quote(s, safe="-_.~")
        query = "&".join("%s=%s" % kv for kv in sorted((enc(k), enc(v)) for k, v in
                                                        urllib.parse.parse_qsl(u.query, keep_blank_values=True)))
        headers = "".join("%s:%s\n" % (h, " ".join(self.headers.get(h, "").split())) for h in signed.split(";"))
        canonical = "\n".join([self.command, urllib.parse.quote(u.path, safe="/-_.~"), query, headers, signed,
                               hashlib.sha256(body).hexdigest()])
        to_sign = "\n".join(["AWS4-HMAC-SHA256", self.headers.get("x-amz-date", ""),
                             "%s/%s/%s/aws4_request" % (date, region, service),
                             hashlib.sha256(canonical.encode()).hexdigest()])
        k = ("AWS4" + secret).encode()
        for part in (date, region, service, "aws4_request"):
            k = hmac.new(k, part.encode(), hashlib.sha256).digest()
        good = hmac.compare_digest(hmac.new(k, to_sign.encode(), hashlib.sha256).hexdigest(), signature)
        return key if good and service == "sts" and "host" in signed.split(";") else None

    def assume_role(self, form, body):
        with lock:
            cfg = dict(creds_config)
        # Any of the source key pairs set (comma-separated: a chain of roles signs with each).
        pairs = dict(zip(cfg["source_key"].split(","), cfg["source_secret"].split(",")))
        key = re.search(r"Credential=([^/]+)/", self.headers.get("Authorization", ""))
        signer = self.sigv4_signer(body, pairs[key.group(1)]) if key and key.group(1) in pairs else None
        if (signer is None or form.get("RoleArn") != cfg["role_arn"]
                or not form.get("RoleSessionName") or form.get("ExternalId", "") != cfg["external_id"]):
            return self.reply(403, b"<ErrorResponse><Error><Type>Sender</Type><Code>AccessDenied</Code>"
                              b"<Message>not authorized to perform sts:AssumeRole</Message></Error>"
                              b"<RequestId>sts-2</RequestId></ErrorResponse>")
        return self.sts_answer("AssumeRole", self.issue("assume_role"),
                               "<AssumedRoleUser><Arn>%s</Arn></AssumedRoleUser>" % cfg["role_arn"])

    def do_GET(self): self.handle_any("GET")
    def do_HEAD(self): self.handle_any("HEAD")
    def do_PUT(self): self.handle_any("PUT")
    def do_POST(self): self.handle_any("POST")
    def do_DELETE(self): self.handle_any("DELETE")

    # Operations ----------------------------------------------------------------
    def if_match_missing(self, bucket, key):
        """A write with If-Match to a key that holds nothing: AWS answers 404 NoSuchKey."""
        with lock:
            cur = objects.get((bucket, key))
        return self.headers.get("If-Match") is not None and cur is None

    def precondition_fails(self, bucket, key):
        with lock:
            cur = objects.get((bucket, key))
        if self.headers.get("If-None-Match") == "*" and cur is not None:
            return True
        # Google Cloud Storage's form of create-only.
        if self.headers.get("x-goog-if-generation-match") == "0" and cur is not None:
            return True
        m = self.headers.get("If-Match")
        return m is not None and cur is not None and cur[1] != m

    def refuses_condition(self, how):
        """A store without conditional writes (how=noconditional): 501 for a write that has one."""
        return how == "noconditional" and (self.headers.get("If-None-Match") or self.headers.get("If-Match"))

    def copy_source(self):
        """The bytes a CopyObject or UploadPartCopy names (x-amz-copy-source, with
        x-amz-copy-source-range for a part), or an error already sent (None)."""
        src = urllib.parse.unquote(self.headers.get("x-amz-copy-source").split("?")[0]).lstrip("/")
        sb, _, sk = src.partition("/")
        with lock:
            cur = objects.get((sb, sk))
        if cur is None:
            self.error(404, "NoSuchKey", "The specified key does not exist.")
            return None
        data = cur[0]
        rng = self.headers.get("x-amz-copy-source-range")
        if rng:
            a, b = (int(x) for x in rng.split("=", 1)[1].split("-"))
            if a > b or b >= len(data):
                self.error(400, "InvalidArgument", "The x-amz-copy-source-range value must be within the source object")
                return None
            data = data[a:b + 1]
        return data

    def op_put(self, bucket, key, q, how):
        body = self.read_body()
        if self.refuses_condition(how):
            return self.error(501, "NotImplemented", "A header you provided implies functionality that is not implemented")
        copy = self.headers.get("x-amz-copy-source") is not None
        if copy:
            if how == "error200":  # S3 answers a long copy 200 at once, and an <Error> after
                return self.reply(200, b"<?xml version=\"1.0\"?><Error><Code>InternalError</Code><Message>"
                                       b"We encountered an internal error. Please try again.</Message></Error>")
            body = self.copy_source()
            if body is None:
                return
            # A copy answers with an XML result (S3 and s3rver do), whose ETag is the new one.
            tag = "CopyPartResult" if "uploadId" in q else "CopyObjectResult"
            result = ("<%s><LastModified>%s</LastModified><ETag>%s</ETag></%s>" % (
                tag, iso(time.time()), esc(etag_of(body)), tag)).encode()
        if "uploadId" in q:
            with lock:
                up = uploads.get(q["uploadId"])
                if up is None:
                    return self.error(404, "NoSuchUpload", "The specified upload does not exist.")
                up["parts"][int(q["partNumber"])] = body
            if copy:
                return self.reply(200, result, {"Content-Type": "application/xml"})
            return self.reply(200, headers={"ETag": etag_of(body)})
        if self.if_match_missing(bucket, key):
            return self.error(404, "NoSuchKey", "The specified key does not exist.")
        if self.precondition_fails(bucket, key):
            return self.error(412, "PreconditionFailed", "At least one of the pre-conditions you specified did not hold")
        with lock:
            objects[(bucket, key)] = (body, etag_of(body), time.time())
        if copy:
            return self.reply(200, result, {"Content-Type": "application/xml"})
        self.reply(200, headers={"ETag": etag_of(body)})

    def op_get(self, bucket, key, q, how):
        if key == "" and q.get("list-type") == "2":
            if how == "deepxml":  # hostile answers to a listing
                return self.reply(200, b"<ListBucketResult>" + b"<a>" * 100000)
            if how == "badxml":
                return self.reply(200, b"<ListBucketResult><Contents><Key>x</Contents></ListBucketResult>")
            if how == "doctype":
                return self.reply(200, b"<!DOCTYPE x [<!ENTITY a \"aaaa\">]><ListBucketResult>&a;</ListBucketResult>")
            if how == "loop":  # truncated, with the same continuation token every time
                return self.reply(200, b"<ListBucketResult><IsTruncated>true</IsTruncated>"
                                       b"<NextContinuationToken>same</NextContinuationToken></ListBucketResult>")
            return self.list_objects(bucket, q)
        if key == "" and "uploads" in q:
            with lock:
                items = "".join("<Upload><Key>%s</Key><UploadId>%s</UploadId><Initiated>%s</Initiated></Upload>"
                                % (esc(u["key"]), i, iso(u["initiated"])) for i, u in uploads.items()
                                if u["bucket"] == bucket and u["key"].startswith(q.get("prefix", "")))
            return self.reply(200, ("<ListMultipartUploadsResult>%s</ListMultipartUploadsResult>" % items).encode())
        self.get_object(bucket, key, how, head=False)

    def op_head(self, bucket, key, q, how):
        if key == "":  # HeadBucket: where a client without a region learns it
            return self.reply(200, headers={"x-amz-bucket-region": "us-fake-1"}, head=True)
        self.get_object(bucket, key, how, head=True)

    def get_object(self, bucket, key, how, head):
        with lock:
            cur = objects.get((bucket, key))
        if cur is None:
            return self.error(404, "NoSuchKey", "The specified key does not exist.", head)
        data, etag, _ = cur
        m = self.headers.get("If-Match")
        if m is not None and m != etag:
            return self.error(412, "PreconditionFailed", "At least one of the pre-conditions you specified did not hold", head)
        rng = self.headers.get("Range")
        status, body, extra = 200, data, {}
        if rng and rng.startswith("bytes="):
            a, b = rng[6:].split("-")
            a, b = int(a), min(int(b), len(data) - 1)
            body = data[a:b + 1]
            status = 206
            extra["Content-Range"] = "bytes %d-%d/%d" % (a, b, len(data))
        extra["ETag"] = etag
        if how == "short" and len(body) > 1:
            # Announce the whole body, send half, close: a short read.
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            for k, v in extra.items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(body[:len(body) // 2])
            self.close_connection = True
            return
        if how == "hugesize" and not head:
            # A GET that announces 2^62 bytes and sends 2 MiB of them, then closes: the client
            # must stop at what it may take, and say so.
            self.send_response(status)
            self.send_header("Content-Length", str(1 << 62))
            self.end_headers()
            try:
                for _ in range(32):
                    self.wfile.write(b"\0" * 65536)
            except (BrokenPipeError, ConnectionError):
                pass
            self.close_connection = True
            return
        if head:
            # how=hugesize: a hostile size (2^62 bytes) for the object.
            extra["Content-Length"] = str(1 << 62) if how == "hugesize" else str(len(data))
        else:
            with lock:
                state["bytes_read"] += len(body)
        self.reply(status, body, extra, head)

    def op_delete(self, bucket, key, q, how):
        with lock:
            if "uploadId" in q:
                uploads.pop(q["uploadId"], None)
            else:
                objects.pop((bucket, key), None)
        self.reply(204)

    def op_post(self, bucket, key, q, how):
        body = self.read_body()
        if "delete" in q:
            if how == "nobatchdelete":  # GCS has no DeleteObjects
                return self.error(501, "NotImplemented", "A header you provided implies functionality that is not implemented")
            root = ElementTree.fromstring(body)
            keys = [obj.text or "" for obj in root.iter() if obj.tag.endswith("Key")]
            errors = b""
            with lock:
                for i, k in enumerate(keys):
                    if how == "halfdelete" and i % 2 == 1:  # per-key errors, as S3 reports them
                        errors += ("<Error><Key>%s</Key><Code>AccessDenied</Code><Message>Access Denied</Message>"
                                   "</Error>" % esc(k)).encode()
                    else:
                        objects.pop((bucket, k), None)
            return self.reply(200, b"<DeleteResult>" + errors + b"</DeleteResult>")
        if "uploads" in q:
            with lock:
                state["next_upload"] += 1
                uid = "up%d" % state["next_upload"]
                uploads[uid] = {"bucket": bucket, "key": key, "parts": {}, "initiated": time.time()}
            return self.reply(200, ("<InitiateMultipartUploadResult><Bucket>%s</Bucket><Key>%s</Key><UploadId>%s"
                                    "</UploadId></InitiateMultipartUploadResult>" % (bucket, esc(key), uid)).encode())
        if "uploadId" in q:
            if self.refuses_condition(how):
                return self.error(501, "NotImplemented", "A header you provided implies functionality that is not implemented")
            if how == "error200":
                return self.reply(200, b"<?xml version=\"1.0\"?><Error><Code>InternalError</Code><Message>"
                                       b"We encountered an internal error. Please try again.</Message></Error>")
            if how == "nosuchupload":  # as if aborted by someone else
                with lock:
                    uploads.pop(q["uploadId"], None)
                return self.error(404, "NoSuchUpload", "The specified upload does not exist.")
            if self.if_match_missing(bucket, key):
                return self.error(404, "NoSuchKey", "The specified key does not exist.")
            if self.precondition_fails(bucket, key):
                return self.error(412, "PreconditionFailed", "At least one of the pre-conditions you specified did not hold")
            root = ElementTree.fromstring(body)
            numbers = [int(p.text) for p in root.iter() if p.tag.endswith("PartNumber")]
            with lock:
                up = uploads.pop(q["uploadId"], None)
                if up is None:
                    return self.error(404, "NoSuchUpload", "The specified upload does not exist.")
                data = b"".join(up["parts"][n] for n in numbers)
                # S3's ETag of a multipart object: the MD5 of its parts' MD5s, "-", their number.
                etag = '"%s-%d"' % (hashlib.md5(b"".join(hashlib.md5(up["parts"][n]).digest() for n in numbers)).hexdigest(),
                                    len(numbers))
                objects[(bucket, key)] = (data, etag, time.time())
            return self.reply(200, ("<CompleteMultipartUploadResult><Key>%s</Key><ETag>%s</ETag>"
                                    "</CompleteMultipartUploadResult>" % (esc(key), etag)).encode())
        self.error(400, "InvalidRequest", "unsupported POST")

    def list_objects(self, bucket, q):
        prefix, delim = q.get("prefix", ""), q.get("delimiter")
        after = q.get("continuation-token", "")
        page = 1000
        with lock:
            keys = sorted(k for (b, k) in objects if b == bucket and k.startswith(prefix) and k > after)
            entries, prefixes, last = [], [], None
            for k in keys:
                if delim:
                    rest = k[len(prefix):]
                    if delim in rest:
                        p = prefix + rest[:rest.index(delim) + 1]
                        if p not in prefixes:
                            if len(entries) + len(prefixes) >= page:
                                break
                            prefixes.append(p)
                        last = k
                        continue
                if len(entries) + len(prefixes) >= page:
                    break
                data, etag, t = objects[(bucket, k)]
                entries.append("<Contents><Key>%s</Key><Size>%d</Size><ETag>%s</ETag><LastModified>%s</LastModified>"
                               "</Contents>" % (esc(k), len(data), esc(etag), iso(t)))
                last = k
            truncated = last is not None and last != (keys[-1] if keys else None)
        body = "<ListBucketResult><Name>%s</Name><Prefix>%s</Prefix><IsTruncated>%s</IsTruncated>%s%s%s</ListBucketResult>" % (
            bucket, esc(prefix), "true" if truncated else "false", "".join(entries),
            "".join("<CommonPrefixes><Prefix>%s</Prefix></CommonPrefixes>" % esc(p) for p in prefixes),
            "<NextContinuationToken>%s</NextContinuationToken>" % esc(last) if truncated else "")
        self.reply(200, body.encode(), {"Content-Type": "application/xml"})


class Server(ThreadingHTTPServer):
    daemon_threads = True
    # socketserver's default backlog is 5: more connections opened at once (a client with 8
    # requests in flight) wait for a SYN retransmitted a second later.
    request_queue_size = 128

    def handle_error(self, request, client_address):
        # A client killed mid-request (the tests SIGKILL saving processes) resets its
        # connection: expected, not worth a traceback. Anything else is printed.
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)


def exit_with_parent():
    # A test program that dies (an abort, a sanitizer's report, a SIGKILL at its time limit)
    # cannot stop its server: the server would live on, holding the output pipe that ctest
    # or CI waits on to close. Once the parent is gone (this process is given to another),
    # the server goes too.
    parent = os.getppid()

    def watch():
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(0)

    threading.Thread(target=watch, daemon=True).start()


def main():
    d = sys.argv[1]
    if "--exit-with-parent" in sys.argv[2:]:
        exit_with_parent()
    server = Server(("127.0.0.1", 0), Handler)
    with open(os.path.join(d, "endpoint.tmp"), "w") as f:
        f.write("http://127.0.0.1:%d" % server.server_address[1])
    os.replace(os.path.join(d, "endpoint.tmp"), os.path.join(d, "endpoint"))
    server.serve_forever()


if __name__ == "__main__":
    main()
