/* SPDX-License-Identifier: MIT */
/*
 * The HDF5 sink of `volrec process` (process_h5.c): the pipeline's volumes, and on request L_e
 * and the unquantized output, written into /volumes, /lowres, /full with /epoch, /offset,
 * /median_depths (background.mode partial_median) and the attributes `volrec process --help`
 * lists.
 */
#ifndef VOLREC_CLIENTS_PROCESS_H
#define VOLREC_CLIENTS_PROCESS_H

#include <stdbool.h>
#include <stdint.h>

#include "pipeline/pipeline.h"

struct proc_h5;

/*
 * Create path (replaced) for n volumes of cfg's shape, with host buffers from be (which must
 * outlive the sink); lowres/full: also write those. progress: print a progress line on stderr
 * as volumes are written. 0, or a negative errno with the message in err.
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
/* Trim the datasets to the volumes written, write /epoch, /offset, /median_depths and the
 * attributes (backend: its name and device) and flush. 0, or -EIO with the message in err (also
 * when a volume could not be written: the file cannot be completed). */
VR_MUST_CHECK int proc_h5_finish(struct proc_h5 *h, const char *backend, const char *device,
                                 char *err, size_t errlen);
/* Close the file and free the buffers; -EIO when closing failed. NULL is fine. */
int proc_h5_close(struct proc_h5 *h);
/* Close as proc_h5_close, then remove the file (a run that cannot be completed); 0, or the
 * negative errno of unlink. NULL is fine. */
int proc_h5_remove(struct proc_h5 *h);

#endif
