// SPDX-License-Identifier: Apache-2.0
// Error's members and the names of the kinds (core/error.hpp).
#pragma once

#include <string>
#include <utility>

#include "cairn/core/error.hpp"

CAIRN_BEGIN_NAMESPACE

CAIRN_API const char* to_string(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::io: return "io";
    case ErrorKind::not_found: return "not_found";
    case ErrorKind::already_exists: return "already_exists";
    case ErrorKind::incomplete: return "incomplete";
    case ErrorKind::corrupt: return "corrupt";
    case ErrorKind::unsupported_version: return "unsupported_version";
    case ErrorKind::structure_mismatch: return "structure_mismatch";
    case ErrorKind::shape_mismatch: return "shape_mismatch";
    case ErrorKind::dtype_mismatch: return "dtype_mismatch";
    case ErrorKind::value_out_of_range: return "value_out_of_range";
    case ErrorKind::invalid_argument: return "invalid_argument";
    case ErrorKind::after_commit: return "after_commit";
    case ErrorKind::timeout: return "timeout";
  }
  return "unknown";
}

CAIRN_API Error::Error(ErrorKind kind, std::string message, std::string file, std::string key)
    : std::runtime_error(format(kind, message, file, key)),
      kind_(kind), message_(std::move(message)), file_(std::move(file)), key_(std::move(key)) {}

CAIRN_API std::string Error::format(ErrorKind kind, const std::string& message, const std::string& file,
                                  const std::string& key) {
  std::string s = "cairn: ";
  s += to_string(kind);
  if (!file.empty()) s += ": " + file;
  if (!key.empty()) s += ": key '" + key + "'";
  s += ": " + message;
  // what() is read as a C string: a NUL in a key (a map's key may hold any bytes) or in a name
  // from a file would cut the message there, before the reason.
  for (std::size_t at = 0; (at = s.find('\0', at)) != std::string::npos; at += 4) s.replace(at, 1, "\\x00");
  return s;
}

CAIRN_END_NAMESPACE
