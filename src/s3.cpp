// SPDX-License-Identifier: Apache-2.0
// cairn/s3.hpp compiled once: the source of CMake's cairn::s3 library and meson's cairn-s3
// dependency (built with CAIRN_SEPARATE_COMPILATION, as every user of it is; it links cairn's
// runtime, libcurl and OpenSSL's libcrypto). docs/compile-time.md.
#define CAIRN_BUILDING_S3 1
#include <cairn/s3.hpp>
