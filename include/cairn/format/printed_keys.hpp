// SPDX-License-Identifier: Apache-2.0
// The printed key paths of an item's leaves, kept one after another in one string: what the
// metadata parsers hand to validate_metadata and to a load's index of stored keys, so that no
// key is printed twice.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "cairn/core/config.hpp"

CAIRN_BEGIN_NAMESPACE
namespace detail {

// Keys in one string and where each ends, not a std::string each: 10,000 keys were 320 KB of
// std::string (each short one inside its 32 bytes), in memory new to a load, where the text
// of the keys is 110 KB. A leaf table's keys are spelled this way already (format/
// metadata_json_reader.hpp), and where they print as stored the list takes them whole.
class PrintedKeyList {
 public:
  PrintedKeyList() = default;
  // Takes `text` and the end of each key in it (ascending, the last at most text.size()).
  PrintedKeyList(std::string text, std::vector<std::size_t> ends) : text_(std::move(text)), ends_(std::move(ends)) {}

  std::size_t size() const { return ends_.size(); }
  bool empty() const { return ends_.empty(); }
  std::string_view operator[](std::size_t i) const {
    const std::size_t from = i ? ends_[i - 1] : 0;
    return std::string_view(text_).substr(from, ends_[i] - from);
  }
  std::string_view back() const { return (*this)[size() - 1]; }

  void push_back(std::string_view key) {
    text_.append(key);
    ends_.push_back(text_.size());
  }
  // Room for `keys` more keys of `key_bytes` bytes together.
  void reserve_more(std::size_t keys, std::size_t key_bytes) {
    ends_.reserve(ends_.size() + keys);
    text_.reserve(text_.size() + key_bytes);
  }
  void append(const PrintedKeyList& more) {
    reserve_more(more.size(), more.text_.size());
    for (std::size_t i = 0; i < more.size(); ++i) push_back(more[i]);
  }
  void clear() {
    text_.clear();
    ends_.clear();
  }
  // Views of every key, in order (for KeyTable, format/validation.hpp).
  std::vector<std::string_view> views() const {
    std::vector<std::string_view> v;
    v.reserve(size());
    for (std::size_t i = 0; i < size(); ++i) v.push_back((*this)[i]);
    return v;
  }

 private:
  std::string text_;
  std::vector<std::size_t> ends_;
};

// Each item's leaves' printed key paths, in order: printed while the parser has each record
// in cache, for validate_metadata and a load's index (at 100,000 leaves, printing them again
// from records spread over 50 MB of heap took about 10 ms a time).
using PrintedKeys = std::vector<PrintedKeyList>;

}  // namespace detail
CAIRN_END_NAMESPACE
