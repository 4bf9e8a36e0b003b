/* SPDX-License-Identifier: MIT */
/* 8-bit greyscale PNG pictures (png.c), written by `volrec snapshot` and `volrec calibrate`. */
#ifndef VOLREC_FORMATS_PNG_H
#define VOLREC_FORMATS_PNG_H

#include <stddef.h>
#include <stdint.h>

/*
 * Write an 8-bit grey PNG of w x h pixels (row-major, h rows of w) to path, with optional
 * tEXt Description. Returns 0 or a negative errno (-ENOSPC for a full disk); the message is
 * in err. A failed write leaves no partial file behind.
 */
int fmt_png_write(const char *path, const uint8_t *pix, uint32_t w, uint32_t h,
                  const char *description, char *err, size_t errlen);

#endif
