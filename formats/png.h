/* SPDX-License-Identifier: MIT */
/* 8-bit greyscale and RGB PNG pictures (png.c), written by `volrec snapshot` and `volrec calibrate`. */
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
/* The same with the physical size of a pixel, [across, down] in um (0: unknown), written as a
 * pHYs chunk (pixels per metre) when both are known; px_um may be NULL. */
int fmt_png_write_phys(const char *path, const uint8_t *pix, uint32_t w, uint32_t h,
                       const char *description, const double px_um[2], char *err, size_t errlen);

/* The same for an 8-bit RGB picture, rgb holding h rows of w (r, g, b) triplets. */
int fmt_png_write_rgb(const char *path, const uint8_t *rgb, uint32_t w, uint32_t h,
                      const char *description, const double px_um[2], char *err, size_t errlen);

#endif
