/* SPDX-License-Identifier: MIT */
/*
 * What the unit tests of sources/ (test_src.c, test_src_faults.c) share: opening a source that must
 * open, and the configuration of a shim source in the geometry of tests/replay.
 */
#ifndef VOLREC_TESTS_UNIT_SRCTEST_H
#define VOLREC_TESTS_UNIT_SRCTEST_H

#include <stdio.h>

#include "sources/internal.h"
#include "tests/replay/geometry.h"
#include "tests/unit/vrtest.h"

/* src_open(c, flags) into s; the test fails with src_open's message if it does not open. */
static inline void srctest_open_ok(const struct vr_config *c, unsigned flags, struct src_source *s)
{
	char err[CFG_ERR_MAX] = "";
	int rc = src_open(c, flags, s, err, sizeof(err));
	if (rc)
		fail_msg("src_open: %s (%d)", err, rc);
}

/* The tests/replay geometry with the shim lib<lib>.so of the build tree and args (referenced). */
static inline void srctest_shim_cfg(struct vr_config *c, const char *lib, const char *args)
{
	test_replay_geometry(c);
	c->source.type = CFG_SOURCE_SHIM;
	snprintf(c->source.shim.library, sizeof(c->source.shim.library), "%s/lib/lib%s.so",
	         vrtest_build_dir(), lib);
	c->source.shim.args_yaml = (char *)args;
}

#endif
