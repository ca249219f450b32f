// SPDX-License-Identifier: Apache-2.0
// What a key path that a checkpoint does not have comes closest to, for the errors of
// load_subtree, read_arrays and `cairn show`: the deepest part of it that is there and what
// that holds, and a stored leaf a typo away. Error paths only.
#pragma once

#include <algorithm>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "cairn/core/key_path.hpp"
#include "cairn/format/records.hpp"
#include "cairn/format/root_layout.hpp"

CAIRN_BEGIN_NAMESPACE
namespace detail {

// The edit distance of a and b (insertions, deletions, substitutions), or most + 1 where it
// is more than `most`: only a band of 2 * most + 1 cells per row is looked at.
inline std::size_t edit_distance_at_most(std::string_view a, std::string_view b, std::size_t most) {
  if ((a.size() > b.size() ? a.size() - b.size() : b.size() - a.size()) > most) return most + 1;
  const std::size_t none = most + 1;
  std::vector<std::size_t> prev(b.size() + 1, none), cur(b.size() + 1, none);
  for (std::size_t j = 0; j <= std::min(b.size(), most); ++j) prev[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    // Only the band is written; the cell left of it is read, and cells right of it were
    // never written (none).
    const std::size_t from = i > most ? i - most : 0, to = std::min(b.size(), i + most);
    if (from == 0) cur[0] = i;
    else cur[from - 1] = none;
    std::size_t row_best = from == 0 ? cur[0] : none;
    for (std::size_t j = std::max<std::size_t>(from, 1); j <= to; ++j) {
      std::size_t d = prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      d = std::min({d, prev[j] + 1, cur[j - 1] + 1});
      cur[j] = std::min(d, none);
      row_best = std::min(row_best, cur[j]);
    }
    if (row_best > most) return none;
    std::swap(prev, cur);
  }
  return std::min(prev[b.size()], none);
}

// "; 'layers' holds 0, 1, 2" (the deepest part of `wanted` that stored leaves lie under, and
// what it holds), then "; did you mean 'layers/1/w'?" where one stored leaf is at most two
// edits away (looked for among up to 100,000 leaves).
inline std::string missing_key_hint(const LeafRecords& stored, const std::string& wanted) {
  std::vector<std::string> leaves;
  leaves.reserve(stored.size());
  for (const auto& l : stored) leaves.push_back(l.key());
  const std::vector<std::string> want = split_key_path(wanted);
  std::size_t depth = 0;  // segments of `wanted` that some stored leaf starts with
  std::vector<std::vector<std::string>> split;
  split.reserve(leaves.size());
  for (const auto& l : leaves) {
    split.push_back(split_key_path(l));
    const auto& s = split.back();
    std::size_t d = 0;
    while (d < s.size() && d < want.size() && s[d] == want[d]) ++d;
    depth = std::max(depth, std::min(d, want.size() > 0 ? want.size() - 1 : 0));
  }
  std::set<std::string> held_set;
  for (const auto& s : split)
    if (s.size() > depth && std::equal(want.begin(), want.begin() + static_cast<std::ptrdiff_t>(depth), s.begin()))
      held_set.insert(s[depth].empty() ? "\"\" (the empty key)" : escape_key_segment(s[depth]));
  std::string hint;
  if (!held_set.empty()) {
    std::vector<std::string> held(held_set.begin(), held_set.end());
    sort_in_step_order(held);  // indices in their order: 2 before 10
    std::string prefix;
    for (std::size_t i = 0; i < depth; ++i) prefix += (i ? "/" : "") + escape_key_segment(want[i]);
    hint = "; " + (depth ? "'" + prefix + "' holds " : std::string("the top of the tree holds ")) + listed_names(held, 12);
  }
  if (leaves.size() <= 100000) {
    const std::size_t most = wanted.size() < 4 ? 1 : 2;
    std::size_t best = most + 1;
    const std::string* nearest = nullptr;
    for (const auto& l : leaves) {
      const std::size_t d = edit_distance_at_most(wanted, l, most);
      if (d < best) best = d, nearest = &l;
    }
    // An index past the end ("layers/7" of three) is said by what the prefix holds; another
    // index is no better a guess.
    const auto digits = [](const std::string& t) { return !t.empty() && t.find_first_not_of("0123456789") == std::string::npos; };
    if (nearest) {
      const std::vector<std::string> n = split_key_path(*nearest);
      if (depth < want.size() && depth < n.size() && digits(want[depth]) && digits(n[depth])) nearest = nullptr;
    }
    if (nearest) hint += "; did you mean '" + *nearest + "'?";
  }
  return hint;
}

}  // namespace detail
CAIRN_END_NAMESPACE
