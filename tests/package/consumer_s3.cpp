// SPDX-License-Identifier: Apache-2.0
// A user's program with the opt-in object store: the packaging tests build it against the
// installed cairn with cairn::s3 (CMake) and cairn-s3 (pkg-config). No server is needed: it
// checks that the URI schemes are registered and that a URI names its object.
#include <cairn/cairn.hpp>
#include <cairn/s3.hpp>

#include <algorithm>
#include <cstdio>

int main() {
  const auto schemes = cairn::store_schemes();
  const bool registered = std::count(schemes.begin(), schemes.end(), "s3") == 1 &&
                          std::count(schemes.begin(), schemes.end(), "gs") == 1;
  const cairn::Location at("s3://my-bucket/run7/100");
  const bool named = at.describe() == "s3://my-bucket/run7/100" && at.key() == "run7/100";
  std::printf("consumer_s3: %s\n", registered && named ? "ok" : "MISMATCH");
  return registered && named ? 0 : 1;
}
