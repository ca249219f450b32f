// Reading a checkpoint's data files: open files by name (each once), the read sizes, the
// checksum check and the normalization of stored bools. Shared by the plain and the box
// (sharded) load paths.
#pragma once

#include <string>
#include <unordered_map>
#include <utility>

#include "cairn/format/files.hpp"

CAIRN_BEGIN_NAMESPACE
namespace detail {

class DataFiles {
 public:
  explicit DataFiles(std::string dir) : dir_(std::move(dir)) {}
  const File& get(const std::string& name) {
    auto it = files_.find(name);
    if (it != files_.end()) return it->second.first;
    File f = File::open_read(join_path(dir_, name));
    const std::uint64_t size = f.size();
    return files_.emplace(name, std::make_pair(std::move(f), size)).first->second.first;
  }
  std::uint64_t size(const std::string& name) { get(name); return files_.at(name).second; }

 private:
  std::string dir_;
  std::unordered_map<std::string, std::pair<File, std::uint64_t>> files_;
};

inline constexpr std::uint64_t read_piece_bytes = std::uint64_t{16} << 20;
inline constexpr std::uint64_t coalesce_gap_bytes = 4096;
inline constexpr std::uint64_t crc_piece_bytes = std::uint64_t{4} << 20;

// A stored bool is one byte; any value but 0 reads as true (as in numpy). Bytes are made 0 or
// 1 before anything treats them as bool, since another byte value in a bool is undefined
// behaviour and the file is untrusted.
inline void normalize_bools(void* data, std::uint64_t n) {
  auto* p = static_cast<unsigned char*>(data);
  for (std::uint64_t i = 0; i < n; ++i) p[i] = p[i] != 0;
}

inline void check_crc(std::uint32_t got, const LeafRecord& s, const ChunkRecord& c, const std::string& dir) {
  if (got != c.crc32c)
    throw Error(ErrorKind::corrupt, "checksum mismatch in bytes " + std::to_string(c.offset) + ".." +
                std::to_string(c.offset + c.nbytes) + " (CRC32C " + std::to_string(got) + ", expected " +
                std::to_string(c.crc32c) + ")", join_path(dir, c.file), s.key());
}

}  // namespace detail
CAIRN_END_NAMESPACE
