/* SPDX-License-Identifier: MIT */
/*
 * `volrec quality --functional`: score angiography and Doppler volumes against the flow
 * phantom's truth (process_fnscore.c, docs/algorithms.md "Scoring functional OCT").
 */
#ifndef VOLREC_TOOLS_FNSCORE_H
#define VOLREC_TOOLS_FNSCORE_H

#include <stddef.h>
#include <stdint.h>

/* Area under the ROC curve of pos[np] against neg[nn] (ties count a half); both arrays are
 * sorted in place. NAN when either is empty. */
double fn_auc(double *pos, size_t np, double *neg, size_t nn);

/* The subcommand with its own arguments (argv[0] "quality"); the exit status. */
int fn_quality_main(int argc, char **argv);

#endif
