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

#endif
