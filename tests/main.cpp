// SPDX-License-Identifier: Apache-2.0
// The doctest main, built once and linked into every test program.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
