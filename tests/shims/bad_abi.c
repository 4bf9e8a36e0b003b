/* SPDX-License-Identifier: MIT */
/* A broken test shim: ABI version 2. */
#define BAD_ABI_VERSION 2u
#include "tests/shims/bad_common.h"
