/* SPDX-License-Identifier: MIT */
/* Test helpers for the ipc module: writer options, content pattern, unique names. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <getopt.h>

#include "tests/ipc/ipc_testutil.h"

#define PAT_SEQ  UINT64_C(0x9E3779B97F4A7C15)
#define PAT_WORD UINT64_C(0xBF58476D1CE4E5B9)

void ipc_test_options(struct ipc_writer_options *o, const char *instance, const char *run_dir)
{
	*o = (struct ipc_writer_options){
	        .instance = instance,
	        .run_dir = run_dir,
	        .shape = {.ny = 8, .nx = 16, .nz = 32, .dtype = VOLREC_DTYPE_U8},
	        .slots = 4,
	        .max_readers = 64,
	        .hwm = 10000,
	};
}

void ipc_test_fill(void *data, size_t bytes, uint64_t seq)
{
	uint64_t *w = data, v = seq * PAT_SEQ;

	for (size_t i = 0; i < bytes / 8; i++, v += PAT_WORD)
		w[i] = v;
}

bool ipc_test_verify(const void *data, size_t bytes, uint64_t seq)
{
	const volatile uint64_t *w = data;
	uint64_t v = seq * PAT_SEQ;

	for (size_t i = 0; i < bytes / 8; i++, v += PAT_WORD)
		if (w[i] != v)
			return false;
	return true;
}

void ipc_test_instance(char *out, size_t len, const char *prefix)
{
	static unsigned counter;

	snprintf(out, len, "%s-%d-%u", prefix, (int)getpid(), counter++);
}

bool ipc_test_target_option(int opt, const char **instance, const char **run_dir)
{
	if (opt == 'i')
		*instance = optarg;
	else if (opt == 'r')
		*run_dir = optarg;
	return opt == 'i' || opt == 'r';
}
