// SPDX-License-Identifier: Apache-2.0
// The object that tests/CMakeLists.txt makes the test programs' precompiled header with
// (cairn_test_pch: test_util.hpp, compiled once per build and reused by each program).
