// SPDX-License-Identifier: Apache-2.0
// The records' JSON form, the text of _METADATA (docs/format.md specifies it): its writer
// (metadata_json_writer.hpp) and its reader (metadata_json_reader.hpp), as nlohmann/json keeps
// detail/output and detail/input apart.
#pragma once

#include "cairn/format/metadata_json_reader.hpp"
#include "cairn/format/metadata_json_writer.hpp"
