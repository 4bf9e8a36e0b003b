/* SPDX-License-Identifier: MIT */
/*
 * Private declarations of the GenICam shim (docs/cameras.md): cameras through Aravis 0.8, one
 * camera frame = one B-scan. camera.c opens a camera and checks every feature of shim.args
 * against its GenICam node; fake.c drives Aravis's in-process Fake camera with the synthetic
 * scanner's spectra; genicam_shim.c is the shim ABI with the frame-id bookkeeping.
 */
#ifndef VOLREC_SHIMS_GENICAM_INTERNAL_H
#define VOLREC_SHIMS_GENICAM_INTERNAL_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <arv.h>

#include <volrec/shim.h>

#include "drivers/genicam/cameras.h"
#include "sources/shim_args.h"
#include "sources/shim_common.h"
#include "sources/sim.h"

#define GC_MSG_MAX SHIM_MSG_MAX

/* The pixel formats volrec takes and what they become (enum volrec_sample_type). */
struct gc_format {
	const char *name;     /* PFNC name as the camera's PixelFormat enumeration spells it */
	ArvPixelFormat code;  /* PFNC code */
	uint32_t sample_type; /* VOLREC_SAMPLE_U16 (Mono8..Mono16), _U12P, _U12GV */
	uint32_t bits;        /* significant bits per pixel */
	bool widen;           /* Mono8: one byte per pixel, widened to u16 (a copy) */
};

/* The format of a PFNC code, NULL when volrec does not take it. */
const struct gc_format *gc_format_by_code(ArvPixelFormat code);
const struct gc_format *gc_format_by_name(const char *name);
/* "Mono8, Mono10, ..." for messages. */
const char *gc_format_names(void);

/* Simulation of the in-process Fake camera (fake.c). */
struct gc_fake_params {
	bool synth;          /* fill frames with the synthetic scanner's spectra */
	struct sim_args sim; /* its settings, as the synth shim's */
};
struct gc_fake;

/* Make Aravis's Fake interface (camera "Fake_1") available in this process, offering the
 * pixel formats volrec takes besides the Fake camera's own Mono8 and Mono16. Idempotent. */
int gc_fake_enable(char *err, size_t errlen);
/* Install the synthetic scanner as the fill pattern of camera's Fake device for geometry g
 * and the camera's pixel format f: frame n since gc_fake_restart holds B-scan n % ny of epoch
 * n / ny at that epoch's offset (docs/algorithms.md §2.1), as an external scanner counting frames
 * would scan it. *out is freed with gc_fake_free (after the stream is gone). */
int gc_fake_attach(ArvCamera *camera, const struct gc_fake_params *p,
                   const struct volrec_shim_geometry *g, const struct gc_format *f,
                   struct gc_fake **out, char *err, size_t errlen);
void gc_fake_restart(struct gc_fake *fk, uint64_t pos);
void gc_fake_free(ArvCamera *camera, struct gc_fake *fk);

/* A feature value the shim replaced, to put back. */
struct gc_undo_entry {
	char *key, *val; /* GLib strings; val as the camera's node gives it as text */
};

/* How the camera is put back in a known state (reset.c, docs/cameras.md). */
struct gc_undo {
	bool user_set;           /* the camera's default user set was loaded at open */
	bool active;             /* remembering: the camera has no default user set */
	char path[PATH_MAX];     /* the undo file ("" = kept in memory only) */
	int fd;                  /* the undo file, appended to before each write; -1 */
	struct gc_undo_entry *e; /* in the order written */
	size_t n;
};

/* At open, before any feature is written: load the camera's default user set
 * (UserSetSelector Default, UserSetLoad) where it has one; else put back what the undo file in
 * state_dir (NULL or "": none) holds from a run that did not close, and start remembering.
 * -EIO naming the camera when the user set fails to load. */
int gc_camera_reset(ArvCamera *camera, const char *camera_id, const char *state_dir,
                    struct gc_undo *u, char *err, size_t errlen);
/* Before feature key is written: remember its value (in memory and in the undo file). 0, or a
 * negative errno when the undo file cannot be written. */
int gc_undo_remember(ArvDevice *dev, struct gc_undo *u, const char *key);
/* At close: put the remembered values back in reverse order (selectors included, so each
 * value goes back under the selector it was read under) and remove the undo file; when the
 * camera is not reachable (control lost) the file stays for the next open. Frees u's memory. */
void gc_undo_finish(ArvCamera *camera, struct gc_undo *u, bool reachable);

/* One feature: the node must exist, be implemented, available and writable, and the value fit
 * its type and range. Nothing is written unless all of that holds; otherwise a negative errno
 * and a message naming the feature (shim.args.KEY). */
int gc_feature_apply(ArvDevice *dev, const struct shim_arg *a, const char *cam, char *err,
                     size_t errlen);
/* Apply every shim.args key not already used (the shim's own arguments and the region offsets
 * are) as a GenICam feature, in document order, each checked against the camera's node (exists,
 * available, writable, type, range, enumeration entry). -EINVAL / -ERANGE / -EACCES and a
 * message naming the feature otherwise. Each value replaced is remembered in undo first. */
int gc_features_apply(ArvCamera *camera, struct shim_args *args, const char *camera_id,
                      struct gc_undo *undo, char *err, size_t errlen);

#endif
