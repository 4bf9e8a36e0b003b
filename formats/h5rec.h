/* SPDX-License-Identifier: MIT */
/*
 * The processed recording's HDF5 file (h5rec_): the published volumes with their channels, one
 * row per volume, and their per-volume columns, /missed, /generations, the channels' meaning
 * and the file's summary attributes (docs/formats.md "Processed recordings (HDF5)",
 * docs/tools.md). It writes only; following a daemon (which volumes, gaps, restarts)
 * is the caller's, so that every writer of processed recordings writes the same file. Built on
 * h5vol (h5vol.h): readable after every volume, closed whole when the disk fills up.
 */
#ifndef VOLREC_FORMATS_H5REC_H
#define VOLREC_FORMATS_H5REC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <hdf5.h>
#include <volrec/client.h>
#include <volrec/protocol.h>

#include "base/base.h"

struct h5vol;
struct h5rec;

/* What each volume holds: its shape and its channels, in the slot's order. */
struct h5rec_layout {
	uint32_t Y, X, Z;
	uint32_t nch;                       /* channels of each volume, 1 .. VOLREC_CHANNELS_MAX */
	uint32_t kind[VOLREC_CHANNELS_MAX]; /* their enum volrec_channel_kind */
};

/* Why volumes are in /missed: never received, torn while copied, left out by a recorder that
 * fell behind (volrecd's, docs/recording.md). */
enum h5rec_reason { H5REC_GAP = 1, H5REC_TORN = 2, H5REC_LEFT_OUT = 3 };

/* The values of the daemon's generation n as JSON text (malloc'ed, the writer frees it), or NULL
 * when they cannot be known (the row then says null). */
typedef char *(*h5rec_gen_fn)(void *ctx, uint32_t n);

/* Where the file comes from, written when it is created. */
struct h5rec_origin {
	const char *instance;    /* the daemon's instance */
	const char *config_yaml; /* its effective configuration, or NULL */
	const char *config_from; /* what config_yaml is ("daemon", "config file") */
	h5rec_gen_fn gen_values; /* how to read a generation's values; NULL: never */
	void *ctx;               /* for gen_values */
};

/* The dataset name of a channel kind ("volumes", "angio", "doppler"), and its name
 * ("structure", "angio", "doppler"); "?" for an unknown kind. */
const char *h5rec_channel_dataset(uint32_t kind);
const char *h5rec_channel_name(uint32_t kind);

/*
 * Create path (replace: truncate an existing one, else -EEXIST) for volumes of layout l.
 * deflate: 0, or the level of the volumes' compression (h5vol_options). o is copied (its
 * strings must outlive the writer). Returns 0 with *out (close it with h5rec_close) or a
 * negative errno with the message in err; on failure nothing is left behind.
 */
int h5rec_create(const char *path, bool replace, unsigned deflate, const struct h5rec_layout *l,
                 const struct h5rec_origin *o, struct h5rec **out, char *err,
                 size_t errlen) VR_MUST_CHECK;

/* Write the attributes known at once (shape, channels, layout, instance, configuration,
 * volrec's version, end "recording", complete 0) and flush. 0 or as h5vol_flush. */
int h5rec_describe(struct h5rec *r, char *err, size_t errlen) VR_MUST_CHECK;

/* A string attribute name of obj from text that came from elsewhere, made valid UTF-8 first
 * (nothing written when memory is short). */
void h5rec_attr_text(hid_t obj, const char *name, const char *text);

/* The file's writer (its count, flush, truncate: h5vol.h) and HDF5 file (for attributes). */
struct h5vol *h5rec_vol(struct h5rec *r);
hid_t h5rec_file(struct h5rec *r);
/* Volumes written, and volumes noted missing. */
uint64_t h5rec_count(const struct h5rec *r);
uint64_t h5rec_missed(const struct h5rec *r);

/*
 * Append volume v: data holds its nch channels [c][Y][X][Z] u8, ch their meaning (the value
 * ranges go into /channel_range; the first volume's meaning, and um = [dx, dy, dz] in µm, into
 * the datasets' attributes), gen the generation of the live values that made it (0: not
 * told). 0 or as h5vol_append (err names the volume).
 */
int h5rec_append(struct h5rec *r, const struct volrec_view *v, const uint8_t *data,
                 const struct volrec_channel *ch, const double um[3], uint32_t gen, char *err,
                 size_t errlen) VR_MUST_CHECK;

/* Note the sequences [first, last] of session as missing (a row of /missed). 0 or as
 * h5vol_log. */
int h5rec_miss(struct h5rec *r, uint64_t session, uint64_t first, uint64_t last,
               enum h5rec_reason why, char *err, size_t errlen) VR_MUST_CHECK;

/*
 * Write the summary (volumes, missed_volumes, sessions, end, complete) and close the file; the
 * volumes it holds into *volumes. r is freed whatever happens (NULL is fine). 0, or a negative
 * errno with the message in err (the file is then as of its last flush, h5vol_close).
 */
int h5rec_close(struct h5rec *r, const char *end, bool complete, uint64_t sessions,
                uint64_t *volumes, char *err, size_t errlen);

#endif
