/* SPDX-License-Identifier: MIT */
/* The VolRec scan-offset schedule (docs/algorithms.md §2): q = e mod S, ox = q mod sx, oy = q div sx. */
#include "base/base.h"

void vr_scan_offset(uint64_t epoch, uint32_t sx, uint32_t sy, uint32_t *ox, uint32_t *oy)
{
	uint64_t nx = sx ? sx : 1, S = nx * (sy ? sy : 1);
	uint64_t q = epoch % S;

	*ox = (uint32_t)(q % nx);
	*oy = (uint32_t)(q / nx);
}
