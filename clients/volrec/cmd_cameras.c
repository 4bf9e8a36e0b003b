/* SPDX-License-Identifier: MIT */
/*
 * `volrec cameras`: the GenICam cameras Aravis finds (id, vendor, model, serial, address,
 * current frame size and pixel format, the pixel formats offered and what volrec makes of
 * them), what an operator runs before pointing source.shim.args.camera at one. The GenICam
 * shim finds them (it exports volrec_genicam_cameras_v2, drivers/genicam/cameras.h: each camera
 * as a struct) and this writes them as text or JSON: `volrec` itself does not link Aravis.
 */
#include <dlfcn.h>
#include <errno.h>
#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include <volrec/shim.h>

#include "base/base.h"
#include "drivers/genicam/cameras.h"

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

/* What the listing writes: text to stdout, or the JSON array it builds. */
struct listing {
	bool json;
	unsigned n;                /* cameras listed */
	struct json_object *array; /* --json */
};

/* A camera's string as valid UTF-8 without control characters ("" for NULL). */
static const char *clean(const char *s, char *buf, size_t len)
{
	vr_utf8_sanitize(s ? s : "", buf, len);
	return buf;
}

/* The sample type volrec takes a pixel format as, in the text listing (" (u12p)"). */
static const char *taken_as(int sample_type)
{
	switch (sample_type) {
	case VOLREC_SAMPLE_U16:
		return " (u16)";
	case VOLREC_SAMPLE_U12P:
		return " (u12p)";
	case VOLREC_SAMPLE_U12GV:
		return " (u12gv)";
	default:
		return "";
	}
}

static void jstr(struct json_object *o, const char *key, const char *s)
{
	char buf[512];

	json_object_object_add(o, key, json_object_new_string(clean(s, buf, sizeof(buf))));
}

static int camera_json(const struct volrec_genicam_camera *c, struct listing *l)
{
	struct json_object *o = json_object_new_object(), *fmts;

	if (!o || json_object_array_add(l->array, o)) {
		json_object_put(o);
		return -ENOMEM;
	}
	jstr(o, "id", c->id);
	jstr(o, "vendor", c->vendor);
	jstr(o, "model", c->model);
	jstr(o, "serial", c->serial);
	jstr(o, "protocol", c->protocol);
	jstr(o, "address", c->address);
	if (!c->opened) {
		jstr(o, "error", c->error ? c->error : "cannot open");
		return 0;
	}
	json_object_object_add(o, "width", json_object_new_int(c->width));
	json_object_object_add(o, "height", json_object_new_int(c->height));
	jstr(o, "pixel_format", c->pixel_format);
	fmts = json_object_new_array();
	json_object_object_add(o, "pixel_formats", fmts);
	for (size_t k = 0; k < c->nformats; k++) {
		char buf[256];

		json_object_array_add(
		        fmts, json_object_new_string(clean(c->formats[k].name, buf, sizeof(buf))));
	}
	return 0;
}

static void camera_text(const struct volrec_genicam_camera *c)
{
	char id[512], vendor[512], model[512], serial[512], protocol[256], address[256];
	char buf[512];

	printf("%s\n  vendor %s, model %s, serial %s, %s at %s\n", clean(c->id, id, sizeof(id)),
	       clean(c->vendor, vendor, sizeof(vendor)), clean(c->model, model, sizeof(model)),
	       clean(c->serial, serial, sizeof(serial)),
	       clean(c->protocol, protocol, sizeof(protocol)),
	       clean(c->address, address, sizeof(address)));
	if (!c->opened) {
		printf("  cannot open: %s\n",
		       clean(c->error ? c->error : "unknown", buf, sizeof(buf)));
		return;
	}
	printf("  frame %d x %d pixels (Width = samples per A-scan, Height = A-scans per B-scan), "
	       "PixelFormat %s\n  pixel formats:",
	       c->width, c->height,
	       clean(c->pixel_format ? c->pixel_format : "?", buf, sizeof(buf)));
	for (size_t k = 0; k < c->nformats; k++)
		printf(" %s%s", clean(c->formats[k].name, buf, sizeof(buf)),
		       taken_as(c->formats[k].sample_type));
	printf("\n");
}

static int one_camera(const struct volrec_genicam_camera *c, void *ctx)
{
	struct listing *l = ctx;

	l->n++;
	if (l->json)
		return camera_json(c, l);
	camera_text(c);
	return 0;
}

VR_COMMAND(cameras, "list the GenICam cameras found (id, model, pixel formats, frame size)")
{
	static const struct option opts[] = {{"json", no_argument, NULL, 'j'},
	                                     {"fake", no_argument, NULL, 'f'},
	                                     {"shim", required_argument, NULL, 's'},
	                                     VR_CLI_LONGOPTS_END};
	int (*list)(bool, int (*)(const struct volrec_genicam_camera *, void *), void *, char *,
	            size_t);
	struct listing l = {0};
	bool fake = false;
	char path[4096], err[1024] = "";
	const char *shim = NULL, *dir = getenv("VOLREC_SHIM_DIR");
	void *dl;
	int c, rc;
	const struct vr_cli_str strs[] = {{'s', &shim}};

	optind = 1;
	while ((c = VR_CLI_GETOPT(argc, argv, "", opts, strs)) != -1) {
		switch (c) {
		case 'j':
			l.json = true;
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
	*(void **)&list = dlsym(dl, VOLREC_GENICAM_CAMERAS_SYMBOL);
	if (!list) {
		fprintf(stderr,
		        "volrec cameras: %s has no " VOLREC_GENICAM_CAMERAS_SYMBOL "() (a shim of "
		        "another volrec version?)\n",
		        shim);
		dlclose(dl);
		return VR_EXIT_USAGE;
	}
	if (l.json && !(l.array = json_object_new_array())) {
		fprintf(stderr, "volrec cameras: out of memory\n");
		return VR_EXIT_FAIL;
	}
	rc = list(fake, one_camera, &l, err, sizeof(err));
	if (rc == -ENOMEM && !err[0])
		snprintf(err, sizeof(err), "out of memory");
	if (!rc && l.json)
		printf("%s\n", json_object_to_json_string_ext(
		                       l.array, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_SPACED));
	else if (!rc && l.n == 0)
		printf("no GenICam camera found (GigE Vision: same subnet, firewall open for UDP "
		       "3956; USB3 Vision: udev permissions)\n");
	json_object_put(l.array);
	if (!rc && (fflush(stdout) == EOF || ferror(stdout))) {
		snprintf(err, sizeof(err), "writing to stdout failed");
		rc = -EIO;
	}
	if (rc) {
		fprintf(stderr, "volrec cameras: %s\n", err);
		return VR_EXIT_FAIL;
	}
	/* the shim stays loaded (linked -z nodelete: Aravis registers GObject types) */
	return VR_EXIT_OK;
}
