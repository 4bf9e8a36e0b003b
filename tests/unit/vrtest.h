/* SPDX-License-Identifier: MIT */
/*
 * Shared helpers for the cmocka unit tests. Each tests/unit/test_*.c defines its groups with
 * VR_TEST_GROUP(name) { ... return cmocka_run_group_tests_name(...); } and the single runner
 * (tests/unit/main.c) runs them all, or those named on its command line.
 */
#ifndef VOLREC_VRTEST_H
#define VOLREC_VRTEST_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
/* cmocka.h needs the three above first */
#include <cmocka.h>

#include "config/config.h"

#define VR_TEST_GROUP(name) int vr_test_group_##name(void)

/* Directory of the source tree (VOLREC_SRC, or "." when unset), for test data files. */
const char *vrtest_src_dir(void);
/* Directory of the build tree (VOLREC_BUILD, or "build"). */
const char *vrtest_build_dir(void);

/* The defaults with a small CPU geometry: K samples of type st per A-scan, nx A-scans per
 * B-scan, ny B-scans per volume, stride 1 x 1, depth range [0, K/2), threads CPU threads; the
 * test sets what else it needs. */
void vrtest_cpu_config(struct vr_config *c, uint32_t K, enum cfg_sample st, uint32_t nx,
                       uint32_t ny, int threads);

#endif
