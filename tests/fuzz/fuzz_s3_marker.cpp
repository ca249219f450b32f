// SPDX-License-Identifier: Apache-2.0
// libFuzzer target: the first bytes of an object store's commit marker, read as S3Store reads
// them (s3::parse_commit_marker): the generation it names, its files' sizes, and where a
// checkpoint written inline keeps each file. The first 8 bytes give the marker's whole size
// (a hostile size is as likely as hostile text). Untrusted network input must end in a
// cairn::Error or a marker whose every inline file lies inside the object.
#include <cairn/s3/commit_marker.hpp>

#include <cstdint>
#include <cstring>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::uint64_t extra = 0;  // bytes of the object past those read
  if (size >= 8) {
    std::memcpy(&extra, data, 8);
    data += 8;
    size -= 8;
  }
  const std::string_view first(reinterpret_cast<const char*>(data), size);
  const std::uint64_t total = size + (extra >> 1);  // (never wraps)
  try {
    const cairn::s3::CommitMarker m = cairn::s3::parse_commit_marker(first, total);
    if (m.generation.rfind(cairn::s3::generation_prefix, 0) != 0) __builtin_trap();
    for (const auto& [name, f] : m.files)
      if (f.offset < m.line_end || f.offset > total || f.size > total - f.offset || name.empty()) __builtin_trap();
    if (m.inlined && m.files.size() != m.sizes.size() && !m.sizes.empty()) __builtin_trap();
  } catch (const cairn::Error&) {
  }
  return 0;
}
