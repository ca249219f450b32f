// SPDX-License-Identifier: Apache-2.0
// The `cairn` command-line tool (docs/cli.md); everything it does is cli/cairn_cli.hpp.
#include "cairn_cli.hpp"

#include <iostream>

int main(int argc, char** argv) {
  return cairn::cli::run(std::vector<std::string>(argv + 1, argv + argc), std::cout, std::cerr);
}
