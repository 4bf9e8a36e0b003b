/* SPDX-License-Identifier: MIT */
/*
 * The camera list the GenICam shim hands to `volrec cameras` (clients/volrec/cmd_cameras.c):
 * one struct per camera through a callback, so that the command writes the text and the JSON
 * (with json-c, which the shim does not link) and the shim only asks Aravis.
 */
#ifndef VOLREC_GENICAM_CAMERAS_H
#define VOLREC_GENICAM_CAMERAS_H

#include <stdbool.h>
#include <stddef.h>

/* The symbol the shim exports. A change of the structs or the call below gets a new name, so
 * that a command and a shim of different builds find it missing instead of misreading it. */
#define VOLREC_GENICAM_CAMERAS_SYMBOL "volrec_genicam_cameras_v2"

/* A pixel format a camera offers. */
struct volrec_genicam_format {
	const char *name; /* the GenICam PixelFormat value, e.g. "Mono12p" */
	int sample_type;  /* enum volrec_sample_type volrec takes it as; -1: volrec does not */
};

/*
 * A camera found. The strings are Aravis's and the camera's as they are (NULL when unknown,
 * not necessarily UTF-8), valid during the callback only.
 */
struct volrec_genicam_camera {
	const char *id, *vendor, *model, *serial, *protocol, *address;
	bool opened;       /* false: it cannot be opened, error says why; the rest is unset */
	const char *error; /* Aravis's message when !opened (NULL when it gave none) */
	int width, height; /* the current frame: samples per A-scan, A-scans per B-scan */
	const char *pixel_format;                    /* the current one, NULL when unknown */
	const struct volrec_genicam_format *formats; /* those offered, nformats of them */
	size_t nformats;
};

/*
 * volrec_genicam_cameras_v2(fake, fn, ctx, err, errlen): calls fn(camera, ctx) for each camera
 * Aravis finds (fake: Aravis's in-process Fake camera too), in Aravis's order. A nonzero
 * return of fn ends the listing with that value. Returns 0, fn's value, or a negative errno
 * with a message in err.
 */
int volrec_genicam_cameras_v2(bool fake,
                              int (*fn)(const struct volrec_genicam_camera *camera, void *ctx),
                              void *ctx, char *err, size_t errlen);

#endif
