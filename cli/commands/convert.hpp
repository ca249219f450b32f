// SPDX-License-Identifier: Apache-2.0
// cairn convert SRC DST [--cast GLOB=DTYPE]... [--select GLOB]... [--max-file-bytes N]
// [--overwrite] [--to cairn|safetensors|orbax] [--link] [--orbax-layout v1|v0] [--zarr 3|2]
// [--no-ocdbt] [--zstd LEVEL]: between cairn checkpoints, safetensors files and Orbax
// checkpoints (cairn::convert; --link: cairn::link_as_orbax).
#pragma once

#include <ostream>

#include "../output.hpp"

namespace cairn::cli {

inline int convert(const std::string& src, const std::string& dst, ConvertOptions options, std::ostream& out,
                   std::ostream* progress = nullptr) {
  ConvertReport r;
  {
    ProgressLine line(progress, "reading " + src);
    options.progress = line.callback();
    r = cairn::convert(src, dst, options);
  }
  if (r.to == ConvertTo::safetensors) {
    out << "wrote " << dst << ": " << counted(r.leaves, "tensor", "tensors") << ", " << human_bytes(r.bytes) << " in "
        << counted(r.files.size(), "file", "files");
  } else if (r.to == ConvertTo::orbax) {
    const ConvertToOrbax& o = options.orbax;
    out << "wrote " << dst << ": Orbax checkpoint (" << (o.v0_standard ? "StandardCheckpointer's layout, " : "")
        << (o.ocdbt ? "OCDBT" : "a directory per parameter") << ", zarr v" << (o.zarr3 ? 3 : 2)
        << (o.zstd_level ? ", zstd level " + std::to_string(o.zstd_level) : std::string()) << "), " << counted(r.leaves, "leaf", "leaves") << ", "
        << human_bytes(r.bytes);
    if (options.link)
      out << (r.linked            ? ", reading " + src + "'s data files (hard links)"
              : r.copied_by_store ? ", its data files copied by the store (they could not be linked; no byte went through this machine)"
                                  : ", its data files copied (they could not be linked)");
  } else {
    out << "wrote " << dst << ": cairn checkpoint, " << counted(r.leaves, "leaf", "leaves") << ", " << human_bytes(r.bytes);
  }
  if (!r.cast.empty()) out << ", " << r.cast.size() << " cast";
  out << "\n";
  if (!r.not_cast.empty()) {
    out << "note: --cast matched " << r.not_cast.size() << " leaf" << (r.not_cast.size() == 1 ? "" : "s")
        << " it left as stored (a floating-point target changes floating-point leaves only; strings never):";
    for (std::size_t i = 0; i < r.not_cast.size() && i < 8; ++i) out << (i ? ", " : " ") << r.not_cast[i];
    if (r.not_cast.size() > 8) out << ", ...";
    out << "\n";
  }
  return exit_ok;
}

}  // namespace cairn::cli
