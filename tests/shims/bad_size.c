/* SPDX-License-Identifier: MIT */
/* A broken test shim: a table of 16 bytes. */
#define BAD_STRUCT_SIZE 16u
#include "tests/shims/bad_common.h"
