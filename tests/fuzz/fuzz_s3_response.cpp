// SPDX-License-Identifier: Apache-2.0
// libFuzzer target: an S3 response body (a listing, an <Error>, a multipart answer), read as
// the S3 client reads it: parsed, then walked for the fields it takes. Untrusted network input
// must end in a cairn::Error or a tree, never a crash or an unbounded allocation.
#include <cairn/s3/xml.hpp>

#include <cstdint>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    const cairn::s3::XmlElement x = cairn::s3::parse_xml(std::string_view(reinterpret_cast<const char*>(data), size));
    std::size_t seen = x.child_text("Code").size() + x.child_text("UploadId").size() + x.child_text("IsTruncated").size();
    x.each("Contents", [&](const cairn::s3::XmlElement& e) { seen += e.child_text("Key").size() + e.child_text("Size").size(); });
    x.each("CommonPrefixes", [&](const cairn::s3::XmlElement& e) { seen += e.child_text("Prefix").size(); });
    if (seen > size * 8 + 64) __builtin_trap();  // decoded text never grows past a few bytes per input byte
  } catch (const cairn::Error&) {
  }
  return 0;
}
