/* SPDX-License-Identifier: MIT */
/* A broken test shim: a NULL acquire(). */
#define BAD_NULL_ACQUIRE 1
#include "tests/shims/bad_common.h"
