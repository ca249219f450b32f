// SPDX-License-Identifier: Apache-2.0
// libFuzzer target: the parts of an Orbax checkpoint cairn decodes from untrusted bytes. The
// first byte picks one:
//   0: an OCDBT manifest (then the whole database it leads to, whose data file is the same bytes);
//   1: a B+tree node, reached from a valid manifest (the next byte is the height it must have);
//   2: zarr metadata, v2 or v3 (by the next byte's low bit);
//   3: a zarr v3 shard of 2 inner chunks (zstd, CRC32C-checked index), each read as a load does;
//   4: a zstd stream decoded within a limit;
//   5: the msgpack aggregate file of Orbax's older layout, and each flax ndarray in it;
//   6: a pytree's _METADATA, read into its entries;
//   7: a small checkpoint as Orbax v1 writes it (OCDBT, each array's zarr.json and shard back
//      to back; zstd by the next byte's low bit), its data file XORed with the rest from an
//      offset (the next byte's other bits), loaded as a load does: shard indexes read at
//      open, small chunks read in runs (PytreeReader::add_direct_chunk).
// Every outcome is a result or a cairn::Error, never a crash or an unbounded allocation.
#include <cairn/orbax.hpp>

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace {

void put_varint(std::string& s, std::uint64_t v) {
  while (v >= 0x80) {
    s += static_cast<char>((v & 0x7f) | 0x80);
    v >>= 7;
  }
  s += static_cast<char>(v);
}

// A valid, uncompressed manifest whose one version's root is `length` bytes at offset 0 of d/a.
std::string manifest_for(std::uint64_t length, std::uint8_t height) {
  std::string body(16, 'u');     // uuid
  body += '\0';                  // single manifest
  put_varint(body, 100);         // max inline value bytes
  put_varint(body, 1 << 20);     // max decoded node bytes
  body += '\x04';                // version tree arity 2^4
  put_varint(body, 0);           // no compression
  put_varint(body, 1);           // data files: 1
  put_varint(body, 3);           // suffix length of "d/a"
  put_varint(body, 0);           // base path length
  body += "d/a";
  put_varint(body, 1);           // versions: 1
  put_varint(body, 1);           // generation 1
  body += static_cast<char>(height);
  put_varint(body, 0);           // data file 0
  put_varint(body, 0);           // offset
  put_varint(body, length);
  put_varint(body, 0), put_varint(body, 0), put_varint(body, 0);  // statistics
  body += std::string(8, '\0');  // commit time
  put_varint(body, 0);           // no version nodes
  std::string out = "\x0c\xdb\x3a\x2a";
  const std::uint64_t total = 4 + 8 + 2 + body.size() + 4;
  for (int i = 0; i < 8; ++i) out += static_cast<char>((total >> (8 * i)) & 0xff);
  out += '\0';  // version
  out += '\0';  // compression
  out += body;
  const std::uint32_t crc = cairn::crc32c(out.data(), out.size());
  for (int i = 0; i < 4; ++i) out += static_cast<char>((crc >> (8 * i)) & 0xff);
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 2) return 0;
  const std::string rest(reinterpret_cast<const char*>(data) + 2, size - 2);
  namespace o = cairn::detail::orbax;
  try {
    switch (data[0] % 8) {
      case 0:
      case 1: {
        cairn::MemoryStore store;
        const std::string manifest = data[0] % 8 == 0 ? rest : manifest_for(rest.size(), data[1] % 4);
        cairn::detail::write_blob(store, "db/manifest.ocdbt", manifest);
        cairn::detail::write_blob(store, "db/d/a", rest);
        o::OcdbtDatabase db(store, "db");
        std::uint64_t total = 0;
        for (const auto& [k, v] : db.entries())
          if (v.size() < (1u << 20)) total += db.read(v, std::string(k)).size();
        if (total > (std::uint64_t(db.entries().size()) + 1) * (1u << 20)) __builtin_trap();
        break;
      }
      case 2: {
        const o::ZarrArray a = o::parse_zarr_metadata(rest, data[1] % 2 ? 3 : 2, "f", "k");
        cairn::Shape at(a.shape.size(), 0);
        (void)o::zarr_chunk_key(a, at);
        break;
      }
      case 3: {
        const std::string meta =
            R"({"zarr_format":3,"node_type":"array","shape":[8],"data_type":"int32","chunk_grid":{"name":"regular",)"
            R"("configuration":{"chunk_shape":[8]}},"fill_value":0,"codecs":[{"name":"sharding_indexed","configuration":)"
            R"({"chunk_shape":[4],"codecs":[{"name":"bytes"},{"name":"zstd"}],"index_codecs":[{"name":"bytes"},)"
            R"({"name":"crc32c"}]}}]})";
        const o::ZarrArray a = o::parse_zarr_metadata(meta, 3, "f", "k");
        const std::uint64_t index_size = o::zarr_index_bytes(a.shard, 2);
        if (rest.size() < index_size) break;
        const auto entries = o::zarr_parse_shard_index(a.shard, std::string_view(rest).substr(rest.size() - index_size), 2,
                                                       rest.size(), "f", "k");
        for (const auto& e : entries) {
          if (e.missing()) continue;
          unsigned char out[16];
          o::zarr_decode_chunk(a.shard.inner, std::string_view(rest).substr(e.offset, e.nbytes), out, sizeof out, "f", "k");
        }
        break;
      }
      case 5: {
        const o::MsgValue v = o::MsgReader(rest, "f").read_all();
        std::size_t seen = 0;
        for (const auto& x : v.items)
          if (x.kind == o::MsgValue::Kind::ext) seen += o::MsgReader(x.s, "f").read_all().items.size();
        if (seen > rest.size()) __builtin_trap();
        break;
      }
      case 6: {
        const o::TreeMetadata m = o::read_tree_metadata(rest, "f");
        std::size_t keys = 0;
        for (const auto& e : m.entries) keys += e.path.size();
        if (keys > rest.size()) __builtin_trap();  // every key is spelled in the text
        break;
      }
      case 7: {
        using Flat = std::map<std::string, std::vector<float>>;
        // The two checkpoints (uncompressed, zstd), saved once: every blob's key and bytes.
        static const auto saved = [] {
          Flat state;
          for (int i = 0; i < 6; ++i) {
            std::vector<float> v(static_cast<std::size_t>(20 + 13 * i));
            for (std::size_t k = 0; k < v.size(); ++k) v[k] = static_cast<float>((k * 7 + static_cast<std::size_t>(i)) % 5);
            state["p" + std::to_string(i)] = std::move(v);
          }
          std::array<std::map<std::string, std::string>, 2> blobs;
          for (int z = 0; z < 2; ++z) {
            cairn::MemoryStore made;
            cairn::OrbaxSaveOptions so;
            so.zstd_level = z ? 3 : 0;
            cairn::save_orbax(cairn::Location(made, "c"), state, so);
            for (const std::string& k : made.keys()) blobs[z][k] = made.bytes(k);
          }
          return blobs;
        }();
        cairn::MemoryStore store;
        std::string file;
        for (const auto& [k, b] : saved[data[1] & 1]) {
          store.put(k, b);
          if (k.find("/d/") != std::string::npos) file = k;
        }
        if (file.empty()) __builtin_trap();
        std::string bytes = store.bytes(file);
        const std::size_t from = (data[1] >> 1) * bytes.size() / 128;
        for (std::size_t i = 0; i < rest.size() && from + i < bytes.size(); ++i) bytes[from + i] ^= rest[i];
        store.put(file, bytes);
        const Flat back = cairn::load_orbax<Flat>(cairn::Location(store, "c"));
        // What loads has the arrays' sizes: a size comes from the zarr.json, checked against
        // the chunk's (a changed one is refused or fits what is stored).
        std::uint64_t elements = 0;
        for (const auto& [k, v] : back) elements += v.size();
        if (elements > (std::uint64_t(bytes.size()) << 15) + (1u << 20)) __builtin_trap();
        break;
      }
      case 4: {
        const std::string out = o::zstd_decompress(rest.data(), rest.size(), std::uint64_t(data[1]) << 12, "f", "k");
        if (out.size() > (std::uint64_t(data[1]) << 12)) __builtin_trap();
        break;
      }
    }
  } catch (const cairn::Error&) {
  }
  return 0;
}
