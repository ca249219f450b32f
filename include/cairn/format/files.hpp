// SPDX-License-Identifier: Apache-2.0
// The on-disk format's files, in one include: the layout of a checkpoint (layout.hpp), where
// checkpoints are among other keys and what a step is named (root_layout.hpp), the
// cross-checks of untrusted records (validation.hpp), and reading the metadata verified
// against the commit marker (verified_read.hpp).
#pragma once

#include "cairn/format/layout.hpp"
#include "cairn/format/root_layout.hpp"
#include "cairn/format/validation.hpp"
#include "cairn/format/verified_read.hpp"
