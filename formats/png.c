/* SPDX-License-Identifier: MIT */
/*
 * 8-bit greyscale and RGB PNG output through libpng, written to a temporary name and renamed into place
 * so that a failed write (disk full) never leaves a truncated picture behind.
 */
#include <errno.h>
#include <math.h>
#include <limits.h>
#include <png.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "formats/png.h"

struct png_err {
	char msg[256];
	int err; /* errno seen by the write callback */
};

static void on_error(png_structp png, png_const_charp msg)
{
	struct png_err *e = png_get_error_ptr(png);

	snprintf(e->msg, sizeof(e->msg), "%s", msg);
	png_longjmp(png, 1);
}

static void on_warning(png_structp png, png_const_charp msg)
{
	/* a warning is no failure: the picture is written */
}

static void on_write(png_structp png, png_bytep data, size_t len)
{
	FILE *f = png_get_io_ptr(png);

	if (fwrite(data, 1, len, f) != len) {
		struct png_err *e = png_get_error_ptr(png);

		e->err = errno ? errno : EIO;
		png_error(png, "write failed");
	}
}

static void on_flush(png_structp png)
{
	/* the file is flushed when it is closed */
}

/* The part that may longjmp: no automatic variables are changed in it after setjmp. */
static int png_encode(FILE *f, struct png_err *e, const uint8_t *pix, uint32_t w, uint32_t h,
                      unsigned channels, const char *description, const double *px_um)
{
	png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, e, on_error, on_warning);
	png_infop info = png ? png_create_info_struct(png) : NULL;
	volatile int rc = -EIO; /* set after setjmp */

	if (!png || !info) {
		png_destroy_write_struct(&png, NULL);
		snprintf(e->msg, sizeof(e->msg), "out of memory");
		return -ENOMEM;
	}
	if (setjmp(png_jmpbuf(png)))
		goto out;
	png_set_write_fn(png, f, on_write, on_flush);
	png_set_IHDR(png, info, w, h, 8, channels == 3 ? PNG_COLOR_TYPE_RGB : PNG_COLOR_TYPE_GRAY,
	             PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
	if (description && *description) {
		png_text t = {.compression = PNG_TEXT_COMPRESSION_NONE,
		              .key = "Description",
		              .text = (char *)description};
		png_set_text(png, info, &t, 1);
	}
	/* pHYs: pixels per metre across and down, when both sizes are known */
	if (px_um && px_um[0] > 0 && px_um[1] > 0 && px_um[0] < 1e9 && px_um[1] < 1e9)
		png_set_pHYs(png, info, (png_uint_32)lround(1e6 / px_um[0]),
		             (png_uint_32)lround(1e6 / px_um[1]), PNG_RESOLUTION_METER);
	png_write_info(png, info);
	for (uint32_t y = 0; y < h; y++)
		png_write_row(png, pix + (size_t)y * w * channels);
	png_write_end(png, info);
	rc = 0;
out:
	png_destroy_write_struct(&png, &info);
	return rc;
}

int fmt_png_write(const char *path, const uint8_t *pix, uint32_t w, uint32_t h,
                  const char *description, char *err, size_t errlen)
{
	return fmt_png_write_phys(path, pix, w, h, description, NULL, err, errlen);
}

static int png_write_file(const char *path, const uint8_t *pix, uint32_t w, uint32_t h,
                          unsigned channels, const char *description, const double px_um[2],
                          char *err, size_t errlen)
{
	struct png_err e = {{0}, 0};
	char tmp[PATH_MAX + 16];
	FILE *f;
	int rc;

	if (!w || !h || w > 1u << 20 || h > 1u << 20) {
		snprintf(err, errlen, "%s: bad picture size %u x %u", path, w, h);
		return -EINVAL;
	}
	if ((size_t)snprintf(tmp, sizeof(tmp), "%s.tmp", path) >= sizeof(tmp)) {
		snprintf(err, errlen, "%s: path too long", path);
		return -ENAMETOOLONG;
	}
	f = fopen(tmp, "wbx");
	if (!f && errno == EEXIST && unlink(tmp) == 0)
		f = fopen(tmp, "wbx");
	if (!f) {
		rc = -errno;
		snprintf(err, errlen, "%s: %s", tmp, strerror(errno));
		return rc;
	}
	rc = png_encode(f, &e, pix, w, h, channels, description, px_um);
	if (rc == 0 && fflush(f) == EOF)
		e.err = errno, rc = -EIO;
	if (rc == 0 && fsync(fileno(f)) < 0 && errno != EINVAL)
		e.err = errno, rc = -EIO;
	if (fclose(f) == EOF && rc == 0)
		e.err = errno, rc = -EIO;
	if (rc == 0 && rename(tmp, path) < 0)
		e.err = errno, rc = -EIO;
	if (rc) {
		if (e.err)
			rc = -e.err;
		unlink(tmp);
		snprintf(err, errlen, "%s: %s", path,
		         e.err == ENOSPC ? "disk full"
		         : e.err         ? strerror(e.err)
		                         : e.msg);
		return rc;
	}
	return 0;
}

int fmt_png_write_phys(const char *path, const uint8_t *pix, uint32_t w, uint32_t h,
                       const char *description, const double px_um[2], char *err, size_t errlen)
{
	return png_write_file(path, pix, w, h, 1, description, px_um, err, errlen);
}

int fmt_png_write_rgb(const char *path, const uint8_t *rgb, uint32_t w, uint32_t h,
                      const char *description, const double px_um[2], char *err, size_t errlen)
{
	return png_write_file(path, rgb, w, h, 3, description, px_um, err, errlen);
}
