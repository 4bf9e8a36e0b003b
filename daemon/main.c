/* SPDX-License-Identifier: MIT */
/*
 * volrecd's entry point: validates the configuration (--check also loads a shim in a child
 * process, prints the configuration and exits), then runs the service until SIGTERM/SIGINT.
 */
#include <stdio.h>
#include <stdlib.h>

#include "config/config.h"
#include "daemon/internal.h"
#include "sources/source.h"

int main(int argc, char **argv)
{
	struct vrd_options opt;
	struct vr_config cfg;
	char err[CFG_ERR_MAX];
	int rc;

	switch (vrd_options_parse(argc, argv, &opt)) {
	case VRD_RUN:
		break;
	case VRD_EXIT_OK:
		return 0;
	case VRD_EXIT_USAGE:
		return 2;
	}
	if (cfg_load(&cfg, opt.config, err, sizeof(err)) < 0) {
		fprintf(stderr, "%s\n", err);
		return 2;
	}
	if (opt.check) {
		/* a shim is loaded in a child: one that crashes its loader is reported */
		if (cfg.source.type == CFG_SOURCE_SHIM &&
		    src_shim_check(cfg.source.shim.library, true, err, sizeof(err)) < 0) {
			fprintf(stderr, "%s\n", err);
			cfg_free(&cfg);
			return 2;
		}
		rc = cfg_dump(&cfg, stdout);
		cfg_free(&cfg);
		if (rc < 0 || fflush(stdout) == EOF) {
			fprintf(stderr, "volrecd: cannot write the configuration to stdout\n");
			return 1;
		}
		return 0;
	}
	rc = vrd_service_run(opt.config, &cfg);
	cfg_free(&cfg);
	return rc;
}
