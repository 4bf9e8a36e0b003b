/* SPDX-License-Identifier: MIT */
/*
 * Helpers shared by the ipc tests and the benchmark: writer options for a small test instance
 * and a content pattern derived from the volume sequence, so any reader can verify what it got.
 */
#ifndef VOLREC_TESTS_IPC_TESTUTIL_H
#define VOLREC_TESTS_IPC_TESTUTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ipc/ipc.h"

/* Writer options: 8 x 16 x 32 u8 volumes in 4 slots, hwm 10000, 64 readers, the default
 * endpoint. instance and run_dir are referenced, not copied. */
void ipc_test_options(struct ipc_writer_options *o, const char *instance, const char *run_dir);
/* Fill / verify bytes (a multiple of 8) with the pattern of volume sequence seq:
 * u64 word i = seq * 0x9E3779B97F4A7C15 + i * 0xBF58476D1CE4E5B9 (mod 2^64). */
void ipc_test_fill(void *data, size_t bytes, uint64_t seq);
bool ipc_test_verify(const void *data, size_t bytes, uint64_t seq);
/* The options both test programs take: -i INSTANCE and -r RUN_DIR into *instance and *run_dir
 * (optarg, referenced). True when opt was one of them. */
bool ipc_test_target_option(int opt, const char **instance, const char **run_dir);
/* A unique instance name for this process: prefix-<pid>-<counter>. */
void ipc_test_instance(char *out, size_t len, const char *prefix);

#endif
