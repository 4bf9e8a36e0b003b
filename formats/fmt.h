/* SPDX-License-Identifier: MIT */
/*
 * Files for other tools (fmt_): OME-Zarr (NGFF 0.4), NIfTI-2 and OME-TIFF writers behind one
 * table of operations, the reader of processed HDF5 recordings, and the export engine that
 * copies the one into the others (`volrec export`, bench/export_bench). docs/formats.md
 * describes every file.
 */
#ifndef VOLREC_FORMATS_FMT_H
#define VOLREC_FORMATS_FMT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "base/base.h"

struct json_object;

/* The channels of a volume (docs/algorithms.md §5 "Channels"): structure, angio, doppler. */
#define FMT_CHANNELS_MAX 3

/* One channel of the volumes and what its 8-bit values mean (docs/formats.md "Channels"). */
struct fmt_channel {
	char name[16];               /* "structure", "angio", "doppler" */
	char dataset[16];            /* its HDF5 dataset: "volumes", "angio", "doppler" */
	char unit[16];               /* of range: "dB", "1", "dB^2", "rad"; "": unknown */
	double range[2];             /* the values u8 0 and 255 stand for, linear between; NaN */
	struct json_object *meaning; /* the dataset's attributes, borrowed (may be NULL) */
};

/* What a writer is told about the volumes before the first one. */
struct fmt_info {
	uint64_t nt;        /* volumes in the series */
	uint32_t shape[3];  /* one volume's [y][x][z], z (depth) fastest in memory */
	double voxel_um[3]; /* voxel size in micrometres, [y, x, z]; NaN: unknown */
	double interval_s;  /* time between volumes in seconds; NaN: unknown */
	/* Provenance, borrowed (may be NULL): a JSON object of the source's attributes (version,
	 * configuration, ...), and one of per-volume columns (name -> array of nt values). */
	struct json_object *attrs;
	struct json_object *columns;
	/* The channels of each volume, one after another ([c][y][x][z]). 0 is one structure
	 * channel; so is 1 with ch[0] the structure: both are the layout without a channel axis
	 * that every format had before channels (fmt_channel_axis false). */
	uint32_t nch;
	struct fmt_channel ch[FMT_CHANNELS_MAX];
};

/* The channels of in's volumes (at least 1). */
static inline uint32_t fmt_nch(const struct fmt_info *in)
{
	return in->nch ? in->nch : 1;
}

/* Whether the outputs carry a channel axis: more than one channel, or one that is not the
 * structure. */
static inline bool fmt_channel_axis(const struct fmt_info *in)
{
	return in->nch > 1 || (in->nch == 1 && strcmp(in->ch[0].name, "structure") != 0);
}

/* The bytes of one channel of one volume. */
static inline size_t fmt_channel_bytes(const struct fmt_info *in)
{
	return (size_t)in->shape[0] * in->shape[1] * in->shape[2];
}

static inline bool fmt_voxel_known(const struct fmt_info *in)
{
	return in->voxel_um[0] == in->voxel_um[0] && in->voxel_um[1] == in->voxel_um[1] &&
	       in->voxel_um[2] == in->voxel_um[2];
}

/*
 * The codec of OME-Zarr chunks (docs/formats.md "Codecs"), named by `--codec` wherever a store is
 * written: blosc with zstd (the default: the smallest files), blosc with lz4 and byte shuffle
 * (several times faster, larger files) or none (Zarr's `compressor: null`, the chunks raw). Every
 * codec stores the same values; the store's .zarray says which one its chunks have.
 */
enum fmt_codec {
	FMT_CODEC_DEFAULT = 0, /* zstd for a new store; an image's own for fmt_zarr_image_open */
	FMT_CODEC_ZSTD,
	FMT_CODEC_LZ4,
	FMT_CODEC_NONE,
};
#define FMT_CODEC_NAMES "zstd, lz4, none"
/* The codec called name: 0 with *out, or -EINVAL with "--codec NAME: unknown codec (zstd,
 * lz4, none)" in err. */
int fmt_codec_parse(const char *name, enum fmt_codec *out, char *err, size_t errlen) VR_MUST_CHECK;
/* The name of codec c ("zstd" for FMT_CODEC_DEFAULT). */
const char *fmt_codec_name(enum fmt_codec c);

/* How a writer writes; zero is the default of every field. */
struct fmt_options {
	unsigned threads;     /* compression threads (OME-Zarr), 0: one per online CPU */
	enum fmt_codec codec; /* OME-Zarr chunks' codec (FMT_CODEC_DEFAULT: zstd) */
	uint32_t chunk[3];    /* OME-Zarr chunk [y, x, z] of level 0; 0: FMT_ZARR_CHUNK_* */
	bool series;          /* NIfTI: one 4-D file instead of one file per volume */
	bool replace;         /* replace an existing output instead of failing with -EEXIST */
	const char *source;   /* the input's path, for the provenance (may be NULL) */
	/* The channels to export, comma-separated ("structure,angio"), in the order given; NULL
	 * or "": every channel of the input. */
	const char *channels;
};

/* The default OME-Zarr chunk (docs/formats.md, "Chunks": measured against B-scan and en-face
 * reads). */
#define FMT_ZARR_CHUNK_Y 16
#define FMT_ZARR_CHUNK_X 512
#define FMT_ZARR_CHUNK_Z 128
/* The OME-Zarr chunk of a level of shape [y, x, z] for the chunk asked for (want, NULL or 0s:
 * the default): want as given (clipped to the shape); the default as many chunks along each axis
 * as FMT_ZARR_CHUNK_* makes, of even sizes (300 in 128s: 3 of 100; 300 in 512s: 300). */
void fmt_zarr_chunk(const uint32_t shape[3], const uint32_t want[3], uint32_t chunk[3]);
/* OME-Zarr chunks of blosc (zstd, lz4) are at FMT_ZARR_CLEVEL (level 0, the volumes) and
 * FMT_ZARR_CLEVEL_PYRAMID (the pyramid's levels, means made for browsing), in blocks of
 * FMT_ZARR_BLOCKSIZE bytes: blosc's own choice for a 256 KiB chunk is the whole chunk, whose zstd
 * tables outgrow the caches; 32 KiB blocks compress the same volumes twice as fast to the same
 * size, and zstd level 1 the pyramid's means six times as fast as level 5 to the same size
 * (docs/formats.md, "Export speed"). */
#define FMT_ZARR_CLEVEL         5
#define FMT_ZARR_CLEVEL_PYRAMID 1
#define FMT_ZARR_BLOCKSIZE      32768
/* The pyramid ends at the first level whose largest side is at most this. */
#define FMT_ZARR_PYRAMID_SIDE 256

enum fmt_kind {
	FMT_NONE = 0,
	FMT_ZARR,  /* .zarr, .ome.zarr: a directory */
	FMT_NIFTI, /* .nii, .nii.gz */
	FMT_TIFF,  /* .ome.tif, .ome.tiff */
};

/* The format a path's suffix names, FMT_NONE for any other. */
enum fmt_kind fmt_kind_of(const char *path);

struct fmt_writer;

/*
 * One format's operations (version FMT_OPS_VERSION); called only through the fmt_writer_*
 * wrappers, which keep the call order (open, put for t = 0..nt-1 in order, then finish; abort
 * at any point after open) and the bookkeeping of partial outputs.
 *  open:   create the outputs under their partial names; 0 or a negative errno.
 *  put:    write volume t (fmt_nch channels, [c][y][x][z]); 0 or a negative errno (-ENOSPC
 *          for a full disk).
 *  finish: write what remains and close, still under the partial names; 0 or a negative errno.
 *  commit: move every output to its final name (after finish); 0 or a negative errno.
 *  abort:  remove every output written so far, partial or committed (never fails).
 */
#define FMT_OPS_VERSION 1
struct fmt_ops {
	unsigned version;
	const char *name; /* "ome-zarr", "nifti-2", "ome-tiff" */
	int (*open)(struct fmt_writer *w, char *err, size_t errlen);
	int (*put)(struct fmt_writer *w, uint64_t t, const uint8_t *vol, char *err, size_t errlen);
	int (*finish)(struct fmt_writer *w, char *err, size_t errlen);
	int (*commit)(struct fmt_writer *w, char *err, size_t errlen);
	void (*abort)(struct fmt_writer *w);
	void (*free)(struct fmt_writer *w);
};

/* The writer every format shares; priv is the format's own state. */
struct fmt_writer {
	const struct fmt_ops *ops;
	struct fmt_info info;
	struct fmt_options opt;
	char *path;       /* the output as named */
	uint64_t next;    /* the next volume put expects */
	int state;        /* FMT_W_* (fmt_writer.c) */
	uint64_t written; /* bytes written so far (compressed where the format compresses) */
	void *priv;
};

extern const struct fmt_ops fmt_zarr_ops, fmt_nifti_ops, fmt_tiff_ops;

/*
 * Open a writer of the format path's suffix names for the volumes in info (copied; the JSON
 * objects are borrowed until fmt_writer_free). Outputs are written under partial names
 * (PATH.partial) and take their final names at fmt_writer_finish only. 0 with *out, or a
 * negative errno with the message in err: -EINVAL for an unknown suffix, -EEXIST when the output
 * exists and opt->replace is false, the file system's errno otherwise. Nothing is left behind on
 * failure.
 */
int fmt_writer_open(const char *path, const struct fmt_info *info, const struct fmt_options *opt,
                    struct fmt_writer **out, char *err, size_t errlen) VR_MUST_CHECK;
/* Write volume t (fmt_nch(info) channels of shape info.shape, [c][y][x][z]; the next in order). 0 or a negative errno; after an error the
 * writer is good for fmt_writer_free only, which removes the partial output. */
int fmt_writer_put(struct fmt_writer *w, uint64_t t, const uint8_t *vol, char *err,
                   size_t errlen) VR_MUST_CHECK;
/* After the last volume: finish the files, flush them to the disk and give them their final
 * names (an existing output is replaced only with opt.replace). 0 or a negative errno (outputs
 * removed). */
int fmt_writer_finish(struct fmt_writer *w, char *err, size_t errlen) VR_MUST_CHECK;
/* Free the writer; outputs not finished are removed. NULL is fine. */
void fmt_writer_free(struct fmt_writer *w);

/* ---- OME-Zarr images written time point by time point (fmt_zarr.c; `volrec reprocess`) --- */

/*
 * Create the OME-Zarr image path (a directory, which must not exist) for info's volumes with
 * every level's metadata and no chunk (each reads as the fill value 0 until written), under
 * PATH.partial first. 0 or a negative errno with the message (nothing left behind).
 */
int fmt_zarr_image_create(const char *path, const struct fmt_info *info,
                          const struct fmt_options *opt, char *err, size_t errlen) VR_MUST_CHECK;
/*
 * Open the image path made by fmt_zarr_image_create for info (its shape must be the image's;
 * opt's codec the image's or FMT_CODEC_DEFAULT, which takes the image's own) to write time
 * points in any order: each is written, every level, into the folder
 * PATH/STAGING.partial (removed first; staging a name of the caller's, distinct for each
 * concurrent writer), and each level's folder of the time point then takes its place in the
 * image by rename, replacing an earlier one. 0 with *out, or a negative errno with the message.
 */
int fmt_zarr_image_open(const char *path, const struct fmt_info *info,
                        const struct fmt_options *opt, const char *staging, struct fmt_writer **out,
                        char *err, size_t errlen) VR_MUST_CHECK;
/* The codec of the chunks of the image at path (its level 0's .zarray): 0 with *out, or a
 * negative errno with the message (not an image of volrec, a compressor volrec does not
 * write). */
int fmt_zarr_image_codec(const char *path, enum fmt_codec *out, char *err,
                         size_t errlen) VR_MUST_CHECK;
/* Write time point t of w's image (shape info.shape). 0 or a negative errno with the
 * message. */
int fmt_zarr_image_put(struct fmt_writer *w, uint64_t t, const uint8_t *vol, char *err,
                       size_t errlen) VR_MUST_CHECK;
/* With err: flush the image's file system to the disk (syncfs), the result returned; then
 * remove the staging folder and free w (err NULL: after a failure, no flush). NULL is fine. */
int fmt_zarr_image_close(struct fmt_writer *w, char *err, size_t errlen);

/* ---- helpers the formats share (fmt_writer.c) ---------------------------------------------- */

/* "PATH.partial", malloc'ed (NULL when out of memory). */
char *fmt_partial_name(const char *path);
/* Remove path, a file or a directory tree; missing is fine. */
void fmt_remove_tree(const char *path);
/* fsync a file or directory by path; 0 or a negative errno. */
int fmt_sync_path(const char *path);
/* Rename from to to, replacing an existing to (file or directory tree) only when replace is
 * true (else -EEXIST), and sync the directory. 0 or a negative errno with the message. */
int fmt_commit_rename(const char *from, const char *to, bool replace, char *err,
                      size_t errlen) VR_MUST_CHECK;
/* A channel's meaning as JSON (docs/formats.md "Channels"): name, dataset, value_unit and
 * value_range (null where unknown), attributes (its dataset's); the caller owns it. */
struct json_object *fmt_channel_json(const struct fmt_channel *ch);
/* Write all of buf to fd; 0 or a negative errno (-ENOSPC, ...). */
int fmt_write_all(int fd, const void *buf, size_t n) VR_MUST_CHECK;

/* ---- processed HDF5 recordings (fmt_h5read.c) ---------------------------------------------- */

struct fmt_h5in;

/*
 * Open a processed recording (the channels /volumes, /angio, /doppler of `volrec record` and
 * `volrec process -o`, each [t][y][x][z] u8 of one shape) and fill info: the channels (channels,
 * comma-separated, in that order; NULL or "": every one the file has, in the order structure,
 * angio, doppler) with what their values mean from their attributes, the shape, voxel_size_um
 * when present (else unknown), the interval from /t_first_ns when present, the file's
 * attributes and the per-volume columns (every root dataset of nt rows of at most 16 numbers,
 * /generation among them; the JSON of /generations under "generations") as JSON objects owned
 * by the reader. 0 with *out, or a negative errno (-ENOENT, -EACCES, -EINVAL for a file that is
 * not such a recording or lacks a channel asked for) with the message in err.
 */
int fmt_h5in_open_channels(const char *path, const char *channels, struct fmt_h5in **out,
                           struct fmt_info *info, char *err, size_t errlen) VR_MUST_CHECK;
/* fmt_h5in_open_channels of every channel. */
int fmt_h5in_open(const char *path, struct fmt_h5in **out, struct fmt_info *info, char *err,
                  size_t errlen) VR_MUST_CHECK;
/* Read volume t into vol (fmt_nch(info) channels of shape info.shape, [c][y][x][z]). 0 or a
 * negative errno with the message. */
int fmt_h5in_read(struct fmt_h5in *r, uint64_t t, uint8_t *vol, char *err,
                  size_t errlen) VR_MUST_CHECK;
/* Close the file and free the JSON objects of info. NULL is fine. */
void fmt_h5in_close(struct fmt_h5in *r);

/* ---- the export engine (fmt_export.c) ------------------------------------------------------ */

/* Progress, called after each volume: done of total volumes, bytes written so far, seconds
 * since the start. */
typedef void (*fmt_progress_fn)(void *ctx, uint64_t done, uint64_t total, uint64_t bytes,
                                double seconds);

struct fmt_export_stats {
	uint64_t volumes;   /* volumes written */
	uint64_t bytes_in;  /* volume bytes read */
	uint64_t bytes_out; /* bytes written */
	double seconds;     /* from open to the final rename */
	double read_s;      /* of which the reader spent reading (overlapped with writing) */
};

/*
 * Copy every volume of the processed recording in into out (the channels of opt->channels, or
 * every one), in the format its suffix names: a
 * reader thread reads volume t+1 while volume t is written. progress may be NULL; interrupted
 * may be NULL, else polled between volumes (true: stop with -EINTR). On failure the outputs are
 * removed and the message is in err. 0 or a negative errno.
 */
int fmt_export(const char *in, const char *out, const struct fmt_options *opt,
               fmt_progress_fn progress, void *ctx, bool (*interrupted)(void),
               struct fmt_export_stats *stats, char *err, size_t errlen) VR_MUST_CHECK;

#endif
