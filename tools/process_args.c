/* SPDX-License-Identifier: MIT */
/* The option arguments the processing subcommands share. */
#include <stdio.h>
#include <string.h>

#include "config/config.h"
#include "tools/process.h"

int proc_backend_arg(const char *cmd, const char *name)
{
	for (int b = CFG_BACKEND_AUTO; b <= CFG_BACKEND_CPU; b++)
		if (!strcmp(name, cfg_backend_name((enum cfg_backend)b)))
			return b;
	fprintf(stderr, "volrec %s: --backend %s: allowed cpu, cuda, auto\n", cmd, name);
	return -1;
}
