/* SPDX-License-Identifier: MIT */
/* The one symbol a shim exports (sources/shim.map): its table, shim_ops (shim_common.h). Linked
 * into the shims only: volrecd's built-in sources have tables of their own. */
#include "sources/shim_common.h"

const struct volrec_shim_ops *volrec_shim_entry(void)
{
	return &shim_ops;
}
