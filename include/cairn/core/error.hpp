// SPDX-License-Identifier: Apache-2.0
// The one exception type cairn throws. Every error says what kind of failure it is, which
// file it concerns and which key path in the tree, so a user can act on it without a debugger.
#pragma once

#include <stdexcept>
#include <string>
#include <utility>

#include "cairn/core/config.hpp"

CAIRN_BEGIN_NAMESPACE

enum class ErrorKind {
  io,                  // the operating system refused a read, write, rename, ...
  not_found,           // no checkpoint (or no such key) at the path
  already_exists,      // save without overwrite onto an existing checkpoint
  incomplete,          // a temporary or uncommitted checkpoint directory
  corrupt,             // checksum mismatch, truncated file, bad JSON, impossible offsets or shapes
  unsupported_version, // written by a newer format version
  structure_mismatch,  // keys missing from or unexpected in the target
  shape_mismatch,      // a fixed-size target with another shape
  dtype_mismatch,      // a cast that cairn will not do (string <-> number, or casting disabled), or a stored dtype it does not read
  value_out_of_range,  // a cast whose value does not fit the target type
  invalid_argument,    // a bad option, pattern or key path from the caller
  // The save committed: the new checkpoint is at its path and loads. A step after the commit
  // failed (the parent directory's fsync, so durability across a power loss is unknown; the
  // Checkpointer's `latest` marker or retention). Do not retry the save as if nothing happened.
  after_commit,
  // A rank did not reach a collective of a multi-process save or load within the
  // coordinator's deadline (cairn/mpi.hpp); the message names the phase and the ranks.
  timeout,
};

// "io", "not_found", ...: the kind as the messages print it.
CAIRN_API const char* to_string(ErrorKind kind);

class Error : public std::runtime_error {
 public:
  CAIRN_API Error(ErrorKind kind, std::string message, std::string file = {}, std::string key = {});

  ErrorKind kind() const noexcept { return kind_; }
  // The file the error concerns ("" when none), and the key path ("" when the whole tree).
  const std::string& file() const noexcept { return file_; }
  const std::string& key_path() const noexcept { return key_; }
  // The bare message, without kind, file and key.
  const std::string& message() const noexcept { return message_; }

  // The same error with file or key filled in where the thrower did not know them.
  Error with_file(const std::string& file) const {
    return file_.empty() ? Error(kind_, message_, file, key_) : *this;
  }
  Error with_key(const std::string& key) const {
    return key_.empty() ? Error(kind_, message_, file_, key) : *this;
  }

 private:
  CAIRN_API static std::string format(ErrorKind kind, const std::string& message, const std::string& file,
                                      const std::string& key);

  ErrorKind kind_;
  std::string message_, file_, key_;
};

CAIRN_END_NAMESPACE

// Error's members and to_string are defined once in the runtime with separate compilation:
// every throw site of every file would otherwise compile the message's formatting.
#if CAIRN_DEFINES_RUNTIME
#include "cairn/core/error_impl.hpp"
#endif
