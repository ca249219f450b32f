// SPDX-License-Identifier: Apache-2.0
// Writes tests/data/v1-checkpoint with the cairn of the checkout it is built in. It was run
// once, before issue 8 changed the code; it is kept to show how the data was made, not built
// by CI. g++ -std=c++20 -Iinclude -I/usr/include/eigen3 tests/data/make_v1_checkpoint.cpp
#include "compat_state.hpp"

int main(int argc, char** argv) {
  const std::string path = argc > 1 ? argv[1] : "tests/data/v1-checkpoint";
  cairn::SaveOptions options;
  options.cast = {{"cast_on_save", cairn::DType::bfloat16}};
  options.user_metadata = cairn::Json::object({{"epoch", 3}, {"note", "written before the storage seam"}});
  cairn::save(path, compat::make(), options);
}
