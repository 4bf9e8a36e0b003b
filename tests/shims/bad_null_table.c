/* SPDX-License-Identifier: MIT */
/* A broken test shim: volrec_shim_entry() returning NULL. */
#define BAD_NULL_TABLE 1
#include "tests/shims/bad_common.h"
