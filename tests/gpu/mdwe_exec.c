/* SPDX-License-Identifier: MIT */
/*
 * mdwe_exec COMMAND [ARG...]: run COMMAND with memory-deny-write-execute in force (Linux's
 * PR_SET_MDWE, what systemd's MemoryDenyWriteExecute=yes applies where the kernel has it), to
 * check that the CUDA backend works under the hardened unit. Exits 77 when the kernel lacks it.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

#ifndef PR_SET_MDWE
#define PR_SET_MDWE 65
#endif
#ifndef PR_MDWE_REFUSE_EXEC_GAIN
#define PR_MDWE_REFUSE_EXEC_GAIN (1UL << 0)
#endif

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: mdwe_exec COMMAND [ARG...]\n");
		return 2;
	}
	if (prctl(PR_SET_MDWE, PR_MDWE_REFUSE_EXEC_GAIN, 0L, 0L, 0L) < 0) {
		fprintf(stderr, "mdwe_exec: PR_SET_MDWE: %s (kernel older than 6.3?)\n",
		        strerror(errno));
		return 77;
	}
	fprintf(stderr, "mdwe_exec: memory-deny-write-execute in force\n");
	execvp(argv[1], argv + 1);
	fprintf(stderr, "mdwe_exec: %s: %s\n", argv[1], strerror(errno));
	return 127;
}
