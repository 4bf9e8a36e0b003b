/* SPDX-License-Identifier: MIT */
/*
 * Helpers shared by the ipc tests and the benchmark: a minimal vr_config for the publisher and
 * a content pattern derived from the volume sequence, so any reader can verify what it got.
 */
#ifndef VOLREC_TESTS_IPC_TESTUTIL_H
#define VOLREC_TESTS_IPC_TESTUTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config/config.h"

/* Zeroed config with the ipc keys the writer reads (hwm 10000, 64 readers). */
void ipc_test_config(struct vr_config *cfg, const char *instance, const char *run_dir);
/* Fill / verify bytes (a multiple of 8) with the pattern of volume sequence seq:
 * u64 word i = seq * 0x9E3779B97F4A7C15 + i * 0xBF58476D1CE4E5B9 (mod 2^64). */
void ipc_test_fill(void *data, size_t bytes, uint64_t seq);
bool ipc_test_verify(const void *data, size_t bytes, uint64_t seq);
/* A unique instance name for this process: prefix-<pid>-<counter>. */
void ipc_test_instance(char *out, size_t len, const char *prefix);

#endif
