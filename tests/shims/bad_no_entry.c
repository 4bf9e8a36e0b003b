/* SPDX-License-Identifier: MIT */
/* A broken test shim: no volrec_shim_entry symbol. */
#define BAD_NO_ENTRY 1
#include "tests/shims/bad_common.h"
