// SPDX-License-Identifier: Apache-2.0
// The `cairn` command-line tool (docs/cli.md); everything it does is cli/cairn_cli.hpp.
#include "cairn_cli.hpp"
#if CAIRN_CLI_S3
#include <cairn/s3.hpp>  // s3:// and gs:// URIs (built where libcurl and OpenSSL are found)
#endif
#if CAIRN_CLI_ORBAX
#include <cairn/orbax.hpp>  // Orbax checkpoints (built where libzstd is found)
#endif

#include <iostream>

#include <unistd.h>

int main(int argc, char** argv) {
  return cairn::cli::run(std::vector<std::string>(argv + 1, argv + argc), std::cout, std::cerr, ::isatty(STDERR_FILENO) == 1);
}
