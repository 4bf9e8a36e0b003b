/* SPDX-License-Identifier: MIT */
/*
 * volrecd's command line: -c FILE, --check, --help, --version.
 */
#include <getopt.h>
#include <stdio.h>

#include "daemon/internal.h"

static void usage(FILE *out, const char *prog)
{
	fprintf(out,
	        "Usage: %s [-c FILE] [--check]\n"
	        "volrec acquisition and reconstruction service for Fourier-domain OCT.\n"
	        "\n"
	        "  -c, --config FILE  configuration file (default %s)\n"
	        "      --check        validate the configuration (loading a shim in a child\n"
	        "                     process), print it with every default filled in, and\n"
	        "                     exit (0 valid, 2 invalid)\n"
	        "  -h, --help         show this help and exit\n"
	        "  -V, --version      show the version and exit\n"
	        "\n"
	        "The configuration keys: man volrecd.yaml; the service: man volrecd.\n",
	        prog, VRD_DEFAULT_CONFIG);
}

enum vrd_parse_result vrd_options_parse(int argc, char **argv, struct vrd_options *opt)
{
	enum { OPT_CHECK = 256 };
	static const struct option longopts[] = {
	        {"config", required_argument, NULL, 'c'},
	        {"check", no_argument, NULL, OPT_CHECK},
	        {"help", no_argument, NULL, 'h'},
	        {"version", no_argument, NULL, 'V'},
	        {NULL, 0, NULL, 0},
	};
	const char *prog = argc > 0 && argv[0] ? argv[0] : "volrecd";
	int c;

	opt->config = VRD_DEFAULT_CONFIG;
	opt->check = false;
	opterr = 0;
	optind = 1;
	while ((c = getopt_long(argc, argv, ":c:hV", longopts, NULL)) != -1) {
		switch (c) {
		case 'c':
			opt->config = optarg;
			break;
		case OPT_CHECK:
			opt->check = true;
			break;
		case 'h':
			usage(stdout, prog);
			return VRD_EXIT_OK;
		case 'V':
			printf("volrecd %s\n", VOLREC_VERSION);
			return VRD_EXIT_OK;
		case ':':
			fprintf(stderr, "%s: option '%s' needs an argument\n", prog,
			        argv[optind - 1]);
			goto out_usage;
		default:
			if (optopt)
				fprintf(stderr, "%s: unknown option '-%c'\n", prog, optopt);
			else
				fprintf(stderr, "%s: unknown option '%s'\n", prog,
				        argv[optind - 1]);
			goto out_usage;
		}
	}
	if (vr_cli_args_done(prog, argc, argv))
		goto out_usage;
	if (!opt->config[0]) {
		fprintf(stderr, "%s: -c needs a file name\n", prog);
		goto out_usage;
	}
	return VRD_RUN;

out_usage:
	fprintf(stderr, "Try '%s --help'.\n", prog);
	return VRD_EXIT_USAGE;
}
