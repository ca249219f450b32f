// SPDX-License-Identifier: Apache-2.0
// SafetensorsOptions: how a safetensors file's flat tensor names become key paths. Its own
// header, so that inspect, read_arrays and convert take it without the safetensors loader.
#pragma once

#include <string>

#include "cairn/core/config.hpp"

CAIRN_BEGIN_NAMESPACE

// How flat tensor names map to key paths: "model.layers.0.attn.w" splits at `separator` into
// model/layers/0/attn/w, where a segment of decimal digits (no leading zero) is a sequence
// index, so a std::vector of layers takes it. An empty separator keeps each name whole: one
// key of a flat map (std::map<std::string, Tensor>).
struct SafetensorsOptions {
  std::string separator = ".";
  // Tied weights: safetensors' save_model keeps one name of tensors that share memory and
  // records each other name in the file's __metadata__ ({"lm_head.weight": "embed.weight"}).
  // true: each such name is a leaf of its own that reads the kept tensor's bytes, for a target
  // that holds both. An entry counts only where its key is no tensor of the file and its value
  // is one (single files; a sharded set's index records none).
  bool aliases = false;
};

CAIRN_END_NAMESPACE
