// SPDX-License-Identifier: Apache-2.0
// The S3 protocol pieces that need no server: the XML reader of responses, the configuration
// (options, environment, profile files, addressing), the store's pool of transfer buffers, and the SigV4 signer against published vectors: the AWS Signature Version 4 test suite (as
// kept in awslabs/aws-c-auth, tests/aws-signing-test-suite/v4/<case>/) and the S3 examples of
// the AWS documentation ("Signature Calculations for the Authorization Header"). The expected
// signatures are that published data; the signer that reproduces them is cairn's own.
#include <doctest/doctest.h>

#include <cairn/core/once.hpp>
#include <cairn/s3/arriving_body.hpp>
#include <cairn/s3/buffer_pool.hpp>
#include <cairn/s3/credentials.hpp>
#include <cairn/s3/options.hpp>
#include <cairn/s3/sigv4.hpp>
#include <cairn/s3/xml.hpp>

#include "../test_util.hpp"  // test::ScopedEnv

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <set>
#include <stdexcept>
#include <thread>
#include <filesystem>
#include <fstream>
#include <unistd.h>
#include <vector>

namespace {

using cairn::s3::Credentials;
using cairn::s3::SignedRequest;

// The test suite's context: one key pair, one instant, a service named "service".
const Credentials suite{"AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", ""};
const char* const suite_date = "20150830T123600Z";

SignedRequest suite_request(const std::string& method, const std::string& path,
                            std::vector<std::pair<std::string, std::string>> query = {}) {
  SignedRequest r;
  r.method = method;
  r.path = path;
  r.query = std::move(query);
  r.headers = {{"Host", "example.amazonaws.com"}, {"X-Amz-Date", suite_date}};
  r.payload_hash = cairn::s3::empty_sha256();
  return r;
}

std::string suite_signature(const SignedRequest& r, const Credentials& c = suite) {
  return cairn::s3::sign(r, c, "us-east-1", "service", suite_date).signature;
}

}  // namespace

TEST_CASE("SigV4: the AWS test suite's cases") {
  CHECK(suite_signature(suite_request("GET", "/")) == "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31");
  CHECK(suite_signature(suite_request("POST", "/")) == "5da7c1a2acd57cee7505fc6676e4e544621c30862966e37dddb68e92efbe5d6b");
  // get-vanilla-query-order-key-case: parameters sorted, whatever order they came in.
  CHECK(suite_signature(suite_request("GET", "/", {{"Param2", "value2"}, {"Param1", "value1"}})) ==
        "b97d918cfa904a5beff61c982a1b6f458b799221646efd99d3219ec94cdf2500");
  CHECK(suite_signature(suite_request("GET", "/", {{"Param1", "value1"}})) ==
        "a67d582fa61cc504c4bae71f336f98b97f1ea3c7a6bfe1b6e45aec72011b9aeb");
  // get-vanilla-query-unreserved: unreserved characters are not encoded.
  const std::string unreserved = "-._~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
  CHECK(suite_signature(suite_request("GET", "/", {{unreserved, unreserved}})) ==
        "9c3e54bfcdf0b19771a7f523ee5669cdf59bc7cc0884027167c21bb143a40197");
  // get-vanilla-utf8-query and get-utf8: UTF-8 bytes encoded, once.
  CHECK(suite_signature(suite_request("GET", "/", {{"\xe1\x88\xb4", "bar"}})) ==
        "2cdec8eed098649ff3a119c94853b13c643bcf08f8b0a1d91e12c9027818dd04");
  CHECK(suite_signature(suite_request("GET", "/\xe1\x88\xb4")) ==
        "8318018e0b0f223aa2bbf98705b62bb787dc9c0e678f255a891fd03141be5d85");
  // get-space-unnormalized: a space in the path, encoded once, the path not normalized.
  CHECK(suite_signature(suite_request("GET", "/example space/")) ==
        "652487583200325589f1fba4c7e578f72c47cb61beeca81406b39ddec1366741");
  // get-header-value-trim: values trimmed and inner runs of spaces made one.
  SignedRequest trim = suite_request("GET", "/");
  trim.headers.push_back({"My-Header1", " value1"});
  trim.headers.push_back({"My-Header2", " \"a   b   c\""});
  const auto trimmed = cairn::s3::sign(trim, suite, "us-east-1", "service", suite_date);
  CHECK(trimmed.signed_headers == "host;my-header1;my-header2;x-amz-date");
  CHECK(trimmed.signature == "acc3ed3afb60bb290fc8d2dd0098b9911fcaa05412b367055dee359757a9c736");
  // get-vanilla-with-session-token: the token is a signed header.
  Credentials with_token = suite;
  with_token.session_token = "6e86291e8372ff2a2260956d9b8aae1d763fbf315fa00fa31553b73ebf194267";
  SignedRequest token = suite_request("GET", "/");
  token.headers.push_back({"X-Amz-Security-Token", with_token.session_token});
  CHECK(suite_signature(token, with_token) == "07ec1639c89043aa0e3e2de82b96708f198cceab042d4a97044c66dd9f74e7f8");
}

TEST_CASE("SigV4: the S3 examples of the AWS documentation") {
  const Credentials docs{"AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", ""};
  const std::string date = "20130524T000000Z";
  auto s3_sign = [&](const SignedRequest& r) { return cairn::s3::sign(r, docs, "us-east-1", "s3", date); };
  // GET Object with a Range header.
  SignedRequest get;
  get.method = "GET";
  get.path = "/test.txt";
  get.payload_hash = cairn::s3::empty_sha256();
  get.headers = {{"Host", "examplebucket.s3.amazonaws.com"}, {"Range", "bytes=0-9"},
                 {"x-amz-content-sha256", get.payload_hash}, {"x-amz-date", date}};
  const auto g = s3_sign(get);
  CHECK(g.signature == "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41");
  CHECK(g.authorization == "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, "
                           "SignedHeaders=host;range;x-amz-content-sha256;x-amz-date, Signature=" + g.signature);
  // PUT Object: a '$' in the key, encoded; the body's hash signed.
  SignedRequest put;
  put.method = "PUT";
  put.path = "/test$file.text";
  put.payload_hash = cairn::s3::sha256_hex(std::string("Welcome to Amazon S3."));
  CHECK(put.payload_hash == "44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072");
  put.headers = {{"Host", "examplebucket.s3.amazonaws.com"}, {"Date", "Fri, 24 May 2013 00:00:00 GMT"},
                 {"x-amz-date", date}, {"x-amz-storage-class", "REDUCED_REDUNDANCY"},
                 {"x-amz-content-sha256", put.payload_hash}};
  CHECK(put.request_target() == "/test%24file.text");
  CHECK(s3_sign(put).signature == "98ad721746da40c64f1a55b78f14c238d841ea1380cd77a1b5971af0ece108bd");
  // GET Bucket lifecycle: a parameter without a value.
  SignedRequest lifecycle;
  lifecycle.method = "GET";
  lifecycle.path = "/";
  lifecycle.query = {{"lifecycle", ""}};
  lifecycle.payload_hash = cairn::s3::empty_sha256();
  lifecycle.headers = {{"Host", "examplebucket.s3.amazonaws.com"}, {"x-amz-date", date},
                       {"x-amz-content-sha256", lifecycle.payload_hash}};
  CHECK(s3_sign(lifecycle).signature == "fea454ca298b7da1c68078a5d1bdbfbbe0d65c699e0f91ac7a200a0136783543");
  // GET Bucket (list objects) with max-keys and prefix.
  SignedRequest list = lifecycle;
  list.query = {{"prefix", "J"}, {"max-keys", "2"}};
  CHECK(list.canonical_query() == "max-keys=2&prefix=J");
  CHECK(s3_sign(list).signature == "34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7");
}

TEST_CASE("SigV4: encoding keeps '/' in paths only, and every other reserved byte is %XX") {
  CHECK(cairn::s3::uri_encode("a b/c+d=e&f", true) == "a%20b/c%2Bd%3De%26f");
  CHECK(cairn::s3::uri_encode("a/b", false) == "a%2Fb");
  CHECK(cairn::s3::uri_encode("run7//x/../y", true) == "run7//x/../y");  // keys are not normalized
  SignedRequest r;
  r.query = {{"list-type", "2"}, {"continuation-token", "1/a+b="}, {"delimiter", "/"}};
  CHECK(r.canonical_query() == "continuation-token=1%2Fa%2Bb%3D&delimiter=%2F&list-type=2");
  CHECK_THROWS_AS(cairn::s3::sign(r, suite, "us-east-1", "s3", "2015-08-30"), cairn::Error);
}

TEST_CASE("S3 XML: what S3 servers write is read; anything malformed or hostile is a corrupt error") {
  const auto x = cairn::s3::parse_xml(
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<ListBucketResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">"
      "<!-- a comment --><IsTruncated>false</IsTruncated>"
      "<Contents><Key>a&amp;b &lt;c&gt; &#x41;&#66;\xc3\xa9</Key><Size>12</Size></Contents>"
      "<Contents><Key><![CDATA[x<y]]></Key><Size>0</Size></Contents>"
      "<s3:CommonPrefixes><Prefix>p/</Prefix></s3:CommonPrefixes><Empty/></ListBucketResult>");
  CHECK(x.name == "ListBucketResult");
  std::vector<std::string> keys;
  x.each("Contents", [&](const cairn::s3::XmlElement& e) { keys.push_back(e.child_text("Key")); });
  CHECK(keys == std::vector<std::string>{"a&b <c> AB\xc3\xa9", "x<y"});
  CHECK(x.child("CommonPrefixes")->child_text("Prefix") == "p/");  // a namespace prefix is dropped
  CHECK(x.child_text("Missing").empty());
  for (const char* bad : {"", "text", "<a>", "<a></b>", "<a>&unknown;</a>", "<a>&#0;</a>", "<a>&#xD800;</a>",
                          "<a b=c></a>", "<!DOCTYPE a><a/>", "<a/><b/>", "<a>&amp</a>", "<a><![CDATA[x</a>"}) {
    CAPTURE(bad);
    CHECK_THROWS_AS(cairn::s3::parse_xml(bad), cairn::Error);
  }
  std::string deep;
  for (int i = 0; i < 33; ++i) deep += "<a>";
  CHECK_THROWS_WITH_AS(cairn::s3::parse_xml(deep), doctest::Contains("deeper than 32"), cairn::Error);
}

TEST_CASE("S3 configuration: options first, then the environment, then the profile; addressing by endpoint and bucket") {
  test::ScopedEnv env;
  const auto dir = std::filesystem::temp_directory_path() / ("cairn-s3-config-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "credentials") << "[default]\naws_access_key_id = DEFAULTKEY\naws_secret_access_key = s1\n"
                                        "[team]\naws_access_key_id=TEAMKEY\naws_secret_access_key=s2\naws_session_token = tok\n";
  std::ofstream(dir / "config") << "[default]\nregion = eu-west-1\n[profile team]\nregion = ap-south-1\n"
                                   "endpoint_url = https://minio.example.com:9000/\n";
  env.set("AWS_SHARED_CREDENTIALS_FILE", (dir / "credentials").string());
  env.set("AWS_CONFIG_FILE", (dir / "config").string());
  for (const char* k : {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_REGION",
                        "AWS_DEFAULT_REGION", "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL", "S3_ENDPOINT_URL"})
    if (std::getenv(k)) env.set(k, ""), ::unsetenv(k);
  using cairn::s3::resolve_config;
  // The default profile: AWS, virtual-host style, the profile's region.
  auto c = resolve_config("s3", "bucket", {});
  CHECK(c.credentials.access_key_id == "DEFAULTKEY");
  CHECK(c.region == "eu-west-1");
  CHECK(c.endpoint == "https://s3.eu-west-1.amazonaws.com");
  CHECK(!c.path_style);
  CHECK(c.conditions_enforced);  // AWS enforces If-None-Match and If-Match on PUT
  CHECK(resolve_config("s3", "my.dotted.bucket", {}).path_style);  // TLS names cannot hold the dots
  // A named profile with an endpoint: path style, its token.
  env.set("AWS_PROFILE", "team");
  c = resolve_config("s3", "bucket", {});
  CHECK(c.credentials.access_key_id == "TEAMKEY");
  CHECK(c.credentials.session_token == "tok");
  CHECK(c.region == "ap-south-1");
  CHECK(c.endpoint == "https://minio.example.com:9000");
  CHECK(c.host == "minio.example.com:9000");
  CHECK(c.path_style);
  CHECK(!c.conditions_enforced);  // another server: not assumed
  {
    cairn::S3Options enforced;
    enforced.conditional_writes_enforced = true;
    CHECK(resolve_config("s3", "bucket", enforced).conditions_enforced);
  }
  // The environment over the profile; Composer's S3_ENDPOINT_URL last of the endpoints.
  env.set("AWS_ACCESS_KEY_ID", "ENVKEY");
  env.set("AWS_SECRET_ACCESS_KEY", "s3");
  env.set("AWS_REGION", "us-west-2");
  env.set("S3_ENDPOINT_URL", "http://127.0.0.1:1");
  env.set("AWS_ENDPOINT_URL", "http://127.0.0.1:2");
  c = resolve_config("s3", "bucket", {});
  CHECK(c.credentials.access_key_id == "ENVKEY");
  CHECK(c.credentials.session_token.empty());
  CHECK(c.region == "us-west-2");
  CHECK(c.endpoint == "http://127.0.0.1:2");
  // Options over everything.
  cairn::S3Options o;
  o.access_key_id = "OPTKEY";
  o.secret_access_key = "s4";
  o.region = "sa-east-1";
  o.endpoint = "http://localhost:3";
  o.path_style = false;
  c = resolve_config("s3", "bucket", o);
  CHECK(c.credentials.access_key_id == "OPTKEY");
  CHECK(c.region == "sa-east-1");
  CHECK(c.host == "localhost:3");
  CHECK(!c.path_style);
  // gs:// goes to Google Cloud Storage's XML API unless told otherwise.
  env.set("AWS_ENDPOINT_URL", "");
  env.set("S3_ENDPOINT_URL", "");
  env.set("AWS_PROFILE", "");  // the default profile, which names no endpoint
  c = resolve_config("gs", "bucket", {});
  CHECK(c.endpoint == "https://storage.googleapis.com");
  CHECK(!c.conditions_enforced);  // GCS's XML API: its own header for create-only; If-Match not relied on
  {
    cairn::S3Options not_enforced;
    not_enforced.conditional_writes_enforced = false;
    CHECK(!resolve_config("s3", "bucket", not_enforced).conditions_enforced);
  }
  std::filesystem::remove_all(dir);
}

namespace {
// Every variable of the credential chain, cleared, and no instance metadata probe: each case
// sets what it needs.
void clear_credential_chain(test::ScopedEnv& env, const std::filesystem::path& dir) {
  for (const char* k : {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE",
                        "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_ROLE_ARN", "AWS_ROLE_SESSION_NAME",
                        "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_CONTAINER_CREDENTIALS_FULL_URI",
                        "AWS_CONTAINER_AUTHORIZATION_TOKEN", "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE",
                        "AWS_EC2_METADATA_SERVICE_ENDPOINT"})
    env.unset(k);
  env.set("AWS_SHARED_CREDENTIALS_FILE", (dir / "credentials").string());
  env.set("AWS_CONFIG_FILE", (dir / "config").string());
  env.set("AWS_EC2_METADATA_DISABLED", "true");
}
}  // namespace

TEST_CASE("S3 credentials: expiration times as STS, IMDS and credential helpers write them") {
  using cairn::s3::detail::parse_iso8601;
  using std::chrono::system_clock;
  const auto at = system_clock::from_time_t(1795813200);  // 2026-11-27T21:00:00Z
  CHECK(parse_iso8601("2026-11-27T21:00:00Z", "t") == at);
  CHECK(parse_iso8601("2026-11-27T21:00:00.123Z", "t") == at);
  CHECK(parse_iso8601("2026-11-27T23:00:00+02:00", "t") == at);
  CHECK(parse_iso8601("2026-11-27T15:30:00-05:30", "t") == at);
  for (const char* bad : {"", "2026-11-27 21:00:00Z", "2026-11-27T21:00:00", "2026-11-27T21:00Z", "tomorrow",
                          "2026-11-27T21:00:00+0200",
                          // past what system_clock holds (its nanoseconds overflow after 2262), or no date
                          "9999-12-31T23:59:59Z", "1900-01-01T00:00:00Z", "2026-13-01T00:00:00Z", "2026-00-10T00:00:00Z"})
    CHECK_THROWS_WITH_AS(parse_iso8601(bad, "the helper"), doctest::Contains("the helper"), cairn::Error);
}

TEST_CASE("S3 credentials: a profile's credential_process, after its keys; failures name the profile and keep secrets out") {
  test::ScopedEnv env;
  const auto dir = std::filesystem::temp_directory_path() / ("cairn-s3-process-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  clear_credential_chain(env, dir);
  auto helper = [&](const std::string& name, const std::string& script) {
    std::ofstream(dir / name) << script;
    return "/bin/sh " + (dir / name).string();
  };
  const std::string good = helper("good.sh",
                                  "echo '{\"Version\": 1, \"AccessKeyId\": \"PROCKEY\", \"SecretAccessKey\": \"procsecret\", "
                                  "\"SessionToken\": \"proctoken\", \"Expiration\": \"2026-11-27T21:00:00Z\"}'\n");
  const std::string fails = helper("fails.sh", "echo 'not logged in' >&2; exit 3\n");
  const std::string v2 = helper("v2.sh", "echo '{\"Version\": 2, \"AccessKeyId\": \"K\", \"SecretAccessKey\": \"S\"}'\n");
  const std::string leaky = helper("leaky.sh", "echo '{\"Version\": 1, \"SecretAccessKey\": \"TOPSECRET\"}'\n");
  std::ofstream(dir / "credentials") << "[keys]\naws_access_key_id = STATICKEY\naws_secret_access_key = s\n";
  std::ofstream(dir / "config") << "[profile helper]\ncredential_process = " << good << "\n[profile keys]\ncredential_process = "
                                << good << "\n[profile fails]\ncredential_process = " << fails
                                << "\n[profile v2]\ncredential_process = " << v2 << "\n[profile leaky]\ncredential_process = "
                                << leaky << "\n";
  cairn::S3Options o;
  o.profile = "helper";
  const auto f = cairn::s3::find_credentials("s3", "bucket", o, "us-east-1");
  CHECK(f.credentials.access_key_id == "PROCKEY");
  CHECK(f.credentials.secret_access_key == "procsecret");
  CHECK(f.credentials.session_token == "proctoken");
  CHECK(f.credentials.expiration == std::chrono::system_clock::from_time_t(1795813200));
  CHECK(f.source == "credential_process of profile helper");
  o.profile = "keys";  // the profile's own keys come first
  CHECK(cairn::s3::find_credentials("s3", "bucket", o, "us-east-1").credentials.access_key_id == "STATICKEY");
  o.profile = "fails";
  CHECK_THROWS_WITH_AS(cairn::s3::find_credentials("s3", "bucket", o, "us-east-1"),
                       doctest::Contains("credential_process of profile 'fails': the command exited with status 3"),
                       cairn::Error);
  o.profile = "v2";
  CHECK_THROWS_WITH_AS(cairn::s3::find_credentials("s3", "bucket", o, "us-east-1"), doctest::Contains("\"Version\": 1"),
                       cairn::Error);
  o.profile = "leaky";
  try {
    cairn::s3::find_credentials("s3", "bucket", o, "us-east-1");
    FAIL("credentials without an access key were taken");
  } catch (const cairn::Error& e) {
    CHECK(std::string(e.what()).find("without AccessKeyId") != std::string::npos);
    CHECK(std::string(e.what()).find("TOPSECRET") == std::string::npos);
  }
  // gs:// takes HMAC keys only: no helper is run for it.
  o.profile = "fails";
  CHECK(cairn::s3::find_credentials("gs", "bucket", o, "auto").credentials.anonymous());
  // A helper that never finishes (waiting for a login nobody gives), or that prints its
  // credentials and goes on running, is stopped after credential_process_timeout, with what
  // it started: an error that says so, not a hang. The one that finishes in time is taken.
  const std::string marker = (dir / "child-alive").string();
  const std::string hangs = helper("hangs.sh", "(sleep 2; touch " + marker + ") &\nsleep 30\n");
  const std::string lingers =
      helper("lingers.sh", "echo '{\"Version\": 1, \"AccessKeyId\": \"K\", \"SecretAccessKey\": \"S\"}'\nexec >&-\nsleep 30\n");
  const std::string slow = helper("slow.sh", "sleep 0.3\necho '{\"Version\": 1, \"AccessKeyId\": \"SLOW\", \"SecretAccessKey\": \"S\"}'\n");
  std::ofstream(dir / "config", std::ios::app) << "[profile hangs]\ncredential_process = " << hangs
                                               << "\n[profile lingers]\ncredential_process = " << lingers
                                               << "\n[profile slow]\ncredential_process = " << slow << "\n";
  o.credential_process_timeout = std::chrono::milliseconds(1000);
  for (const char* name : {"hangs", "lingers"}) {
    CAPTURE(name);
    o.profile = name;
    const auto start = std::chrono::steady_clock::now();
    CHECK_THROWS_WITH_AS(cairn::s3::find_credentials("s3", "bucket", o, "us-east-1"),
                         doctest::Contains("did not finish within 1 s"), cairn::Error);
    CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(10));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));
  CHECK_MESSAGE(!std::filesystem::exists(marker), "what the helper started outlived it");
  o.profile = "slow";
  CHECK(cairn::s3::find_credentials("s3", "bucket", o, "us-east-1").credentials.access_key_id == "SLOW");
  std::filesystem::remove_all(dir);
}

TEST_CASE("S3 credentials: no source configured, the metadata probe disabled or unreachable, and a container URL refused") {
  test::ScopedEnv env;
  const auto dir = std::filesystem::temp_directory_path() / ("cairn-s3-chain-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  clear_credential_chain(env, dir);
  auto f = cairn::s3::find_credentials("s3", "bucket", {}, "us-east-1");
  CHECK(f.credentials.anonymous());
  CHECK(f.tried.find("AWS_EC2_METADATA_DISABLED") != std::string::npos);
  // Nothing listens there: unsigned, at once (connection refused), and the probe says so.
  env.unset("AWS_EC2_METADATA_DISABLED");
  env.set("AWS_EC2_METADATA_SERVICE_ENDPOINT", "http://127.0.0.1:1");
  const auto start = std::chrono::steady_clock::now();
  f = cairn::s3::find_credentials("s3", "bucket", {}, "us-east-1");
  CHECK(f.credentials.anonymous());
  CHECK(f.tried.find("did not answer") != std::string::npos);
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(5));
  // The container token goes only to https, loopback or the ECS/EKS addresses.
  env.set("AWS_CONTAINER_CREDENTIALS_FULL_URI", "http://example.com/creds");
  CHECK_THROWS_WITH_AS(cairn::s3::find_credentials("s3", "bucket", {}, "us-east-1"),
                       doctest::Contains("AWS_CONTAINER_CREDENTIALS_FULL_URI must be https://"), cairn::Error);
  std::filesystem::remove_all(dir);
}

TEST_CASE("S3 credentials: a role profile's own keys are not used as they are; what it cannot assume is a clear error") {
  test::ScopedEnv env;
  const auto dir = std::filesystem::temp_directory_path() / ("cairn-s3-role-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  clear_credential_chain(env, dir);
  env.set("AWS_PROFILE", "trainer");
  auto config = [&](const std::string& text) { test::write_file((dir / "config").string(), text); };
  auto refused = [&](const std::string& why) {
    CAPTURE(why);
    CHECK_THROWS_WITH_AS(cairn::s3::find_credentials("s3", "bucket", {}, "us-east-1"), doctest::Contains(why.c_str()), cairn::Error);
  };
  test::write_file((dir / "credentials").string(), "[empty]\nregion = eu-west-1\n");
  config("[profile trainer]\nrole_arn = arn:aws:iam::1:role/r\nsource_profile = base\naws_access_key_id = OWN\n"
         "aws_secret_access_key = own-secret\n");
  CHECK(cairn::s3::resolve_config("s3", "bucket", {}).credentials.anonymous());  // the role, not these keys
  refused("profile 'trainer': its source_profile 'base' is in neither the credentials nor the config file");
  config("[profile trainer]\nrole_arn = arn:aws:iam::1:role/r\nsource_profile = empty\n");
  refused("its source_profile 'empty' has neither keys, an SSO login nor a credential_process");
  config("[profile trainer]\nrole_arn = arn:aws:iam::1:role/r\nsource_profile = trainer\n");
  refused("profile 'trainer' is its own source_profile but has no keys");
  config("[profile trainer]\nrole_arn = arn:aws:iam::1:role/r\ncredential_source = Vault\n");
  refused("credential_source 'Vault' is none of Environment, Ec2InstanceMetadata and EcsContainer");
  config("[profile trainer]\nrole_arn = arn:aws:iam::1:role/r\ncredential_source = Environment\n");
  refused("its credential_source (Environment) has no keys");
  config("[profile trainer]\nrole_arn = arn:aws:iam::1:role/r\nsource_profile = a\n[profile a]\nrole_arn = x\n"
         "source_profile = trainer\n");
  refused("source_profile chain is more than 8 profiles long (or a cycle)");
  config("[profile trainer]\nrole_arn = arn:aws:iam::1:role/r\nsource_profile = trainer\nmfa_serial = arn:aws:iam::1:mfa/me\n");
  refused("asks for an MFA code (mfa_serial)");
  config("[profile trainer]\nrole_arn = arn:aws:iam::1:role/r\nsource_profile = trainer\naws_access_key_id = K\n"
         "aws_secret_access_key = S\nduration_seconds = 1h\n");
  refused("duration_seconds is not a number of seconds");
  // A role_arn alone (no source_profile, no credential_source) is no role profile: its keys stand.
  config("[profile trainer]\nrole_arn = arn:aws:iam::1:role/r\naws_access_key_id = OWN\naws_secret_access_key = own-secret\n");
  CHECK(cairn::s3::find_credentials("s3", "bucket", {}, "us-east-1").credentials.access_key_id == "OWN");
  std::filesystem::remove_all(dir);
}

TEST_CASE("S3 URIs: bucket and key, and what is refused") {
  const auto u = cairn::s3::parse_bucket_uri("s3", "my-bucket/run7/100/");
  CHECK(u.bucket == "my-bucket");
  CHECK(u.key == "run7/100");
  CHECK(cairn::s3::parse_bucket_uri("gs", "b_c.d").key.empty());
  for (const char* bad : {"", "ab", "UPPER/k", "a b/k", "bucket/k?x", "bucket/k#f"}) {
    CAPTURE(bad);
    CHECK_THROWS_AS(cairn::s3::parse_bucket_uri("s3", bad), cairn::Error);
  }
}

TEST_CASE("S3 buffer pool: blocks come back and are handed out again, at most `keep`, freed when idle") {
  using namespace std::chrono_literals;
  const std::size_t block = 1 << 16;
  cairn::s3::BufferPool pool(block, 2, 200ms);
  std::set<const unsigned char*> kept_blocks;
  {
    auto a = pool.take(block);
    REQUIRE(a->size() == block);
    std::memset(a->data(), 7, block);  // every byte writable
    auto b = pool.take(block / 2);     // half a block or more: a block
    CHECK(b->size() == block / 2);
    CHECK(b->capacity() == block);
    auto c = pool.take(block);
    CHECK(pool.kept() == 0);
    kept_blocks = {b->data(), c->data()};  // given back first (reverse order): the two kept
  }  // three back, two kept, the third freed
  CHECK(pool.kept() == 2);
  {
    // The kept blocks are handed out again.
    std::vector<std::shared_ptr<cairn::s3::Buffer>> out{pool.take(block), pool.take(block)};
    CHECK(pool.kept() == 0);
    CHECK(std::set<const unsigned char*>{out[0]->data(), out[1]->data()} == kept_blocks);
  }
  // Sizes a block would waste or not hold are the caller's alone: never kept.
  CHECK(pool.kept() == 2);
  { auto small = pool.take(100), large = pool.take(block + 1); CHECK(small->capacity() == 100); CHECK(large->size() == block + 1); }
  CHECK(pool.kept() == 2);
  // Idle for 200 ms: the trimmer frees them (waited for up to 10 s on a loaded machine).
  const auto start = std::chrono::steady_clock::now();
  while (pool.kept() > 0 && std::chrono::steady_clock::now() - start < 10s) std::this_thread::sleep_for(20ms);
  CHECK(pool.kept() == 0);
  CHECK(std::chrono::steady_clock::now() - start >= 150ms);  // not before the idle time
  // Still a pool after a trim.
  { auto again = pool.take(block); }
  CHECK(pool.kept() == 1);
}

TEST_CASE("S3 buffer pool: an idle time of zero keeps nothing; buffers outlive their pool") {
  using namespace std::chrono_literals;
  cairn::s3::BufferPool none(4096, 8, 0ms);
  { auto a = none.take(4096); }
  CHECK(none.kept() == 0);
  std::shared_ptr<cairn::s3::Buffer> survivor;
  {
    cairn::s3::BufferPool pool(4096, 8, 10s);
    survivor = pool.take(4096);
    { auto kept = pool.take(4096); }
    CHECK(pool.kept() == 1);
  }  // the pool goes first (its trimmer stopped): the buffer still out is freed by its user
  std::memset(survivor->data(), 1, survivor->size());
  survivor.reset();
}

// The client asks for credentials and the bucket's region once, with detail::Once: a source
// that throws (a refused container endpoint, IMDS unreachable) must be asked again by the next
// request. std::call_once did that, except under ThreadSanitizer, where every later caller
// waited forever (CI's TSan step hung in unit-s3-faults).
TEST_CASE("detail::Once: a throw leaves the work for the next caller; callers at the same time run it once") {
  cairn::detail::Once once;
  int runs = 0;
  for (int i = 0; i < 3; ++i) {
    CHECK_THROWS_AS(once([&] { ++runs; throw std::runtime_error("refused"); }), std::runtime_error);
    CHECK_FALSE(once.done());
  }
  CHECK(runs == 3);
  std::atomic<int> done_runs{0}, returned_before_done{0};
  std::vector<std::thread> callers;
  for (int t = 0; t < 8; ++t)
    callers.emplace_back([&] {
      once([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the others arrive meanwhile
        done_runs.fetch_add(1);
      });
      if (!once.done() || done_runs.load() != 1) returned_before_done.fetch_add(1);  // none may
    });
  for (auto& c : callers) c.join();
  CHECK(done_runs.load() == 1);
  CHECK(returned_before_done.load() == 0);
  once([&] { done_runs.fetch_add(1); });  // done: never again
  CHECK(done_runs.load() == 1);
}

namespace {
cairn::s3::HttpResponse answer(std::uint64_t length, const std::string& etag, long status = 206) {
  cairn::s3::HttpResponse r;
  r.status = status;
  r.headers["content-length"] = std::to_string(length);
  r.headers["etag"] = etag;
  return r;
}
}  // namespace

TEST_CASE("S3 ArrivingBody: readers wait for their own bytes; a retry does not rewrite them; a changed object or a failure reaches every waiter") {
  using cairn::s3::ArrivingBody;
  std::string body = "{\"generation\":\"g\"}\n";
  for (int i = 0; body.size() < 300000; ++i) body += static_cast<char>('a' + i % 26);
  const std::uint64_t n = body.size();
  SUBCASE("the first line before the rest; each reader gets its range whole, from another thread") {
    auto b = std::make_shared<ArrivingBody>(1 << 20, "s3://b/m");
    std::atomic<bool> line_seen{false};
    std::vector<std::thread> readers;
    std::vector<std::string> got(4);
    for (int r = 0; r < 4; ++r)
      readers.emplace_back([&, r] {
        const std::uint64_t line = b->wait_for_line();
        CHECK(line == body.find('\n') + 1);
        line_seen = true;
        const std::uint64_t end = n * static_cast<std::uint64_t>(r + 1) / 4;
        b->wait_for(end);
        got[r] = std::string(reinterpret_cast<const char*>(b->bytes()->data()), end);
      });
    REQUIRE(b->start(answer(n, "\"e1\"")));
    for (std::uint64_t at = 0; at < n; at += 1000) {
      REQUIRE(b->take(body.data() + at, static_cast<std::size_t>(std::min<std::uint64_t>(1000, n - at))));
      if (at == 0) {  // the line is in: the readers go on before the rest arrives
        for (int i = 0; i < 2000 && !line_seen; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        CHECK(line_seen.load());
      }
    }
    b->finish(answer(n, "\"e1\""));
    for (auto& t : readers) t.join();
    for (int r = 0; r < 4; ++r) CHECK(got[r] == body.substr(0, got[r].size()));
    CHECK(b->bytes()->size() == n);
  }
  SUBCASE("a retry of the same version: bytes already in are kept, the rest written") {
    auto b = std::make_shared<ArrivingBody>(1 << 20, "s3://b/m");
    REQUIRE(b->start(answer(n, "\"e1\"")));
    REQUIRE(b->take(body.data(), 5000));
    // A reader holds the first bytes; the retry's copy of them (here different bytes, which a
    // rewrite would show) must not be written.
    std::string second = body;
    for (std::size_t i = 0; i < 5000; ++i) second[i] = 'X';
    REQUIRE(b->start(answer(n, "\"e1\"")));
    REQUIRE(b->take(second.data(), second.size()));
    b->finish(answer(n, "\"e1\""));
    b->wait_for(n);
    CHECK(std::string(reinterpret_cast<const char*>(b->bytes()->data()), n) == body);
  }
  SUBCASE("a retry that got another version is refused: waiters get an error naming the object") {
    auto b = std::make_shared<ArrivingBody>(1 << 20, "s3://b/m");
    REQUIRE(b->start(answer(n, "\"e1\"")));
    REQUIRE(b->take(body.data(), 5000));
    std::thread waiter([&] { CHECK_CAIRN_ERROR(b->wait_for(n), cairn::ErrorKind::io, "the object changed"); });
    CHECK_FALSE(b->start(answer(n, "\"e2\"")));
    b->finish(answer(n, "\"e2\""));
    waiter.join();
    CHECK_CAIRN_ERROR(b->wait_for_line(), cairn::ErrorKind::io, "the object changed");
  }
  SUBCASE("a failed transfer: every reader waiting, and every later one, gets its error") {
    auto b = std::make_shared<ArrivingBody>(1 << 20, "s3://b/m");
    std::vector<std::thread> waiters;
    for (int r = 0; r < 3; ++r)
      waiters.emplace_back([&] { CHECK_CAIRN_ERROR(b->wait_for(n), cairn::ErrorKind::timeout, "stalled"); });
    REQUIRE(b->start(answer(n, "\"e1\"")));
    REQUIRE(b->take(body.data(), 100));
    b->fail(cairn::Error(cairn::ErrorKind::timeout, "GET stalled", "s3://b/m"));
    for (auto& t : waiters) t.join();
    CHECK_CAIRN_ERROR(b->wait_for(n), cairn::ErrorKind::timeout, "stalled");
    b->wait_for(100);  // what arrived stays readable
  }
  SUBCASE("a body longer than the limit is cut there; one shorter than announced is an error at its end") {
    auto cut = std::make_shared<ArrivingBody>(1000, "s3://b/m");
    REQUIRE(cut->start(answer(n, "\"e1\"", 200)));
    CHECK_FALSE(cut->take(body.data(), 5000));  // the transfer ends
    cut->finish(answer(n, "\"e1\"", 200));
    cut->wait_for(1000);
    CHECK(cut->bytes()->size() == 1000);
    auto shorter = std::make_shared<ArrivingBody>(1 << 20, "s3://b/m");
    REQUIRE(shorter->start(answer(n, "\"e1\"")));
    REQUIRE(shorter->take(body.data(), 100));
    shorter->finish(answer(n, "\"e1\""));
    CHECK_CAIRN_ERROR(shorter->wait_for(n), cairn::ErrorKind::io, "ended at byte 100");
  }
  SUBCASE("no Content-Length: the readers look once it has all arrived") {
    auto b = std::make_shared<ArrivingBody>(1 << 20, "s3://b/m");
    cairn::s3::HttpResponse r;
    r.status = 200;
    REQUIRE(b->start(r));
    REQUIRE(b->take(body.data(), 500));
    std::atomic<bool> looked{false};
    std::thread reader([&] {
      CHECK(b->wait_for_line() == 500);
      looked = true;
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    CHECK_FALSE(looked.load());
    b->finish(r);
    reader.join();
    CHECK(b->bytes()->size() == 500);
  }
}
