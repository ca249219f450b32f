// SPDX-License-Identifier: Apache-2.0
// Store's destructor (store/store.hpp), the class's key function: with separate compilation,
// Store's virtual table and its default members are compiled once, in the runtime.
#pragma once

#include "cairn/store/store.hpp"

CAIRN_BEGIN_NAMESPACE

CAIRN_API Store::~Store() = default;

CAIRN_END_NAMESPACE
