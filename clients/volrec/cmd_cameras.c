/* SPDX-License-Identifier: MIT */
/*
 * `volrec cameras`: the GenICam cameras Aravis finds (id, vendor, model, serial, address,
 * current frame size and pixel format, the pixel formats offered and what volrec makes of
 * them), what an operator runs before pointing source.shim.args.camera at one. The listing is
 * the GenICam shim's own code (it exports volrec_genicam_cameras): `volrec` itself does not
 * link Aravis.
 */
#include <dlfcn.h>
#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"

#ifndef VOLREC_SHIMDIR
#define VOLREC_SHIMDIR "/usr/lib/volrec"
#endif

static void usage(FILE *f)
{
	fprintf(f, "usage: volrec cameras [--json] [--fake] [--shim PATH]\n"
	           "  List the GenICam cameras (GigE Vision, USB3 Vision) found through Aravis.\n"
	           "  --json       one JSON array, an object per camera\n"
	           "  --fake       include Aravis's in-process Fake camera (Fake_1)\n"
	           "  --shim PATH  the GenICam shim to use (default: $VOLREC_SHIM_DIR or\n"
	           "               " VOLREC_SHIMDIR ", genicam-shim.so)\n"
	           "Exit codes: 0 listed (possibly none), 1 listing failed, 2 usage or the shim\n"
	           "cannot be loaded.\n");
}

VR_COMMAND(cameras, "list the GenICam cameras found (id, model, pixel formats, frame size)")
{
	static const struct option opts[] = {{"json", no_argument, NULL, 'j'},
	                                     {"fake", no_argument, NULL, 'f'},
	                                     {"shim", required_argument, NULL, 's'},
	                                     VR_CLI_LONGOPTS_END};
	int (*list)(FILE *, int, int, char *, size_t);
	bool json = false, fake = false;
	char path[4096], err[1024] = "";
	const char *shim = NULL, *dir = getenv("VOLREC_SHIM_DIR");
	void *dl;
	int c, rc;
	const struct vr_cli_str strs[] = {{'s', &shim}};

	optind = 1;
	while ((c = VR_CLI_GETOPT(argc, argv, "", opts, strs)) != -1) {
		switch (c) {
		case 'j':
			json = true;
			break;
		case 'f':
			fake = true;
			break;
		default:
			return vr_cli_usage(usage, c);
		}
	}
	if (vr_cli_args_done("volrec cameras", argc, argv))
		return vr_cli_usage(usage, '?');
	if (!shim) {
		snprintf(path, sizeof(path), "%s/genicam-shim.so",
		         dir && dir[0] ? dir : VOLREC_SHIMDIR);
		shim = path;
	}
	dl = dlopen(shim, RTLD_NOW | RTLD_LOCAL);
	if (!dl) {
		fprintf(stderr,
		        "volrec cameras: cannot load the GenICam shim: %s (is volrec built with "
		        "Aravis? --shim PATH names another)\n",
		        dlerror());
		return VR_EXIT_USAGE;
	}
	*(void **)&list = dlsym(dl, "volrec_genicam_cameras");
	if (!list) {
		fprintf(stderr, "volrec cameras: %s has no volrec_genicam_cameras()\n", shim);
		dlclose(dl);
		return VR_EXIT_USAGE;
	}
	rc = list(stdout, json, fake, err, sizeof(err));
	if (fflush(stdout) == EOF && !rc) {
		snprintf(err, sizeof(err), "writing to stdout failed");
		rc = -1;
	}
	if (rc) {
		fprintf(stderr, "volrec cameras: %s\n", err);
		return VR_EXIT_FAIL;
	}
	/* the shim stays loaded (linked -z nodelete: Aravis registers GObject types) */
	return VR_EXIT_OK;
}
