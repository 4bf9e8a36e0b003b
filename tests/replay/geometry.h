/* SPDX-License-Identifier: MIT */
/*
 * The geometry of the replay files the source tests write and read (tests/replay/make_bad.py):
 * K 64, 4 A-scans, 3 B-scans, stride [2, 1], u16, depth [0, 32), unpaced. Shared by the unit
 * tests of sources/ and the replay fuzz harness.
 */
#ifndef VOLREC_TESTS_REPLAY_GEOMETRY_H
#define VOLREC_TESTS_REPLAY_GEOMETRY_H

#include "config/config.h"

/* cfg: the defaults, then the geometry above (the source type stays the default). */
static inline void test_replay_geometry(struct vr_config *c)
{
	cfg_defaults(c);
	c->source.rate = 0;
	c->geometry.samples_per_ascan = 64;
	c->geometry.ascans_per_bscan = 4;
	c->geometry.bscans_per_volume = 3;
	c->geometry.stride[0] = 2;
	c->geometry.stride[1] = 1;
	c->geometry.depth_range[1] = 32;
}

#endif
