/* SPDX-License-Identifier: MIT */
/* A broken test shim: loading it kills the loading process (SIGBUS in a constructor), as a
 * damaged library can during dlopen; only src_shim_check's child may load it. */
#include <signal.h>

#include "tests/shims/bad_common.h"

__attribute__((constructor)) static void crash_on_load(void)
{
	raise(SIGBUS);
}
