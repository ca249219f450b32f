// SPDX-License-Identifier: Apache-2.0
// A user's file with separate compilation that saves and loads an Orbax checkpoint and opens
// an S3 store: tests/opt_in/light_check.sh looks in its object file for any code of the Orbax
// reader and writer or of the S3 store, which must be compiled once, in libcairn-orbax and
// libcairn-s3, and never into the files that include cairn/orbax.hpp and cairn/s3.hpp
// (docs/internals.md, "Light headers, the runtime, and separate compilation"). It calls no
// inline member of theirs, which an unoptimized build (the sanitizers') compiles here.
#include <cairn/cairn.hpp>
#include <cairn/orbax.hpp>
#include <cairn/s3.hpp>

#include <map>
#include <memory>
#include <string>
#include <vector>

using State = std::map<std::string, std::vector<float>>;

bool orbax_round_trip(const std::string& dir, const State& state) {
  cairn::save_orbax(dir, state);
  const cairn::OrbaxCheckpoint info = cairn::orbax_metadata(dir);
  return !info.metadata.items.empty() && cairn::load_orbax<State>(dir) == state;
}

bool s3_round_trip(const std::string& uri, const State& state) {
  auto store = std::make_shared<cairn::S3Store>("s3", "bucket", cairn::S3Options{.endpoint = "http://127.0.0.1:9"});
  cairn::save(cairn::Location(store, "a"), state);
  cairn::save(cairn::s3_location(uri), state);
  return cairn::load<State>(uri) == state;
}
