/* SPDX-License-Identifier: MIT */
/*
 * What the processing subcommands share: the value of --backend (process_args.c) and the
 * HDF5 sink of `volrec process` (process_h5.c): the pipeline's volumes, and on request L_e
 * and the unquantized output, written into /volumes, /lowres, /full with /epoch, /offset,
 * /median_depths (background.mode partial_median) and the attributes `volrec process --help`
 * lists.
 */
#ifndef VOLREC_TOOLS_PROCESS_H
#define VOLREC_TOOLS_PROCESS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "formats/fmt.h"
#include "pipeline/pipeline.h"

/* The value of --backend NAME (cpu, cuda, auto) as an enum cfg_backend, or -1 after "volrec CMD:
 * --backend NAME: allowed cpu, cuda, auto". */
int proc_backend_arg(const char *cmd, const char *name);

struct proc_h5;

/*
 * Create path (replaced) for up to n volumes of cfg's shape through h5vol (h5vol_init first),
 * with the attributes that describe them (backend: be's name and device) and host buffers from
 * be (which must outlive the sink); lowres/full: also write those. progress: print a progress
 * line on stderr as volumes are written. 0, or a negative errno with the message in err and no
 * file left behind.
 */
VR_MUST_CHECK int proc_h5_create(const char *path, const struct vr_config *cfg,
                                 struct be_backend *be, uint64_t n, bool lowres, bool full,
                                 bool progress, struct proc_h5 **out, char *err, size_t errlen);
/* The pipeline sink writing into h. */
void proc_h5_sink(struct proc_h5 *h, struct pl_sink *sink);
/* Volumes written so far. */
uint64_t proc_h5_done(const struct proc_h5 *h);
/* With background.mode partial_median and a volume written: true, and the mean and the
 * largest number of median depths per B-scan over the volumes written; false otherwise. */
bool proc_h5_median_depths(const struct proc_h5 *h, double *mean, uint32_t *max);
/* Write the attribute `epochs` (the volumes written) and close the file through h5vol_close,
 * then free the buffers. 0, or a negative errno with the message in err (h5vol's: what failed
 * and what the file holds now; after it the program must not call H5close). NULL is fine. */
int proc_h5_close(struct proc_h5 *h, char *err, size_t errlen);

/* ---- raw recordings (process_recording.c) ---- */

/* Load the configuration recording rec carries (with its tables) into cfg (cfg_load's
 * contract). 0, or a negative errno with the message in err. */
VR_MUST_CHECK int proc_recording_config(const char *rec, struct vr_config *cfg, char *err,
                                        size_t errlen);
/* Check every recorded epoch's CRC-32C, printing each mismatch by epoch on report; *bad says
 * how many. 0, or a negative errno with the message in err. */
VR_MUST_CHECK int proc_recording_verify(const char *rec, FILE *report, uint64_t *bad, char *err,
                                        size_t errlen);

/* ---- a part of a recording (process_into.c) ---- */

struct src_rec_frame;

/* A sink in front of inner that processes the volumes of epochs before start_epoch (the
 * warm-up of `--warm-up`) and does not pass them on; warm counts them. */
struct proc_warm {
	struct pl_sink inner;
	uint64_t start_epoch;
	uint64_t warm;
};
void proc_warm_sink(struct proc_warm *f, struct pl_sink *sink);

struct proc_into;

/* The shape and voxel size of cfg's output volumes as an OME-Zarr image of nt time points
 * (interval unknown, no provenance). */
void proc_fmt_info(const struct vr_config *cfg, uint64_t nt, struct fmt_info *info);

/*
 * Write volumes into time points first..end-1 of the OME-Zarr image at path (made by `volrec
 * reprocess` for the recording whose index is frames[0..nframes), at cfg's output shape),
 * checking that volume t is frames[t]'s epoch; host buffers from be. codec: the chunks' codec
 * (FMT_CODEC_DEFAULT: the image's own; another than the image's is refused). 0 or a negative
 * errno with the message.
 */
VR_MUST_CHECK int proc_into_open(const char *image, const struct vr_config *cfg,
                                 struct be_backend *be, const struct src_rec_frame *frames,
                                 uint64_t nframes, uint64_t first, uint64_t end,
                                 enum fmt_codec codec, struct proc_into **out, char *err,
                                 size_t errlen);
void proc_into_sink(struct proc_into *p, struct pl_sink *sink);
/* The next time point to be written (first + volumes written). */
uint64_t proc_into_next(const struct proc_into *p);
/* With err: flush the image to the disk (0 or a negative errno with the message); free p. */
int proc_into_close(struct proc_into *p, char *err, size_t errlen);

#endif
