/* SPDX-License-Identifier: MIT */
/* The helpers the unit tests share (vrtest.h). */
#include <stdlib.h>

#include "tests/unit/vrtest.h"

const char *vrtest_src_dir(void)
{
	const char *s = getenv("VOLREC_SRC");
	return s && *s ? s : ".";
}

const char *vrtest_build_dir(void)
{
	const char *s = getenv("VOLREC_BUILD");
	return s && *s ? s : "build";
}

void vrtest_cpu_config(struct vr_config *c, uint32_t K, enum cfg_sample st, uint32_t nx,
                       uint32_t ny, int threads)
{
	cfg_defaults(c);
	c->backend = CFG_BACKEND_CPU;
	c->cpu.threads = threads;
	c->geometry.samples_per_ascan = K;
	c->geometry.sample_type = st;
	c->geometry.ascans_per_bscan = nx;
	c->geometry.bscans_per_volume = ny;
	c->geometry.stride[0] = c->geometry.stride[1] = 1;
	c->geometry.depth_range[0] = 0;
	c->geometry.depth_range[1] = K / 2;
}
