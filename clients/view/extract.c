/* SPDX-License-Identifier: MIT */
/*
 * A browser's own pictures: the B-scan, slice and plane at its crosshair and the en-face mean
 * and maximum over its slab, taken from the published u8 volume itself with the definitions of
 * docs/algorithms.md §4 (the daemon's views at another position and slab, voxel for voxel).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "base/base.h"
#include "clients/view/internal.h"

bool vw_own_key_equal(const struct vw_own_key *a, const struct vw_own_key *b)
{
	if (a->own_pos != b->own_pos || a->own_slab != b->own_slab)
		return false;
	if (a->own_pos && memcmp(a->pos, b->pos, sizeof(a->pos)))
		return false;
	return !a->own_slab || !memcmp(a->slab, b->slab, sizeof(a->slab));
}

int vw_view_check(const uint32_t shape[3], const uint32_t *pos, const uint32_t *slab, char *err,
                  size_t errlen)
{
	static const char *const name[3] = {"y0", "x0", "z0"};

	if (!shape[0] || !shape[1] || !shape[2])
		return vr_err(err, errlen, -EINVAL,
		              "view: no volume read yet: the crosshair and slab can be set once "
		              "pictures arrive");
	for (unsigned a = 0; pos && a < 3; a++)
		if (pos[a] >= shape[a])
			return vr_err(err, errlen, -EINVAL,
			              "view: position: %s %" PRIu32
			              " is outside the volume (0..%" PRIu32 " for %" PRIu32
			              " x %" PRIu32 " x %" PRIu32 " [Y, X, Z])",
			              name[a], pos[a], shape[a] - 1, shape[0], shape[1], shape[2]);
	if (slab && (slab[0] >= slab[1] || slab[1] > shape[2]))
		return vr_err(err, errlen, -EINVAL,
		              "view: slab [%" PRIu32 ", %" PRIu32 "): need 0 <= za < zb <= %" PRIu32
		              " (the volume's depth)",
		              slab[0], slab[1], shape[2]);
	return 0;
}

/* En-face mean and maximum over [za, zb): §4.1, the mean floor((2 sum + n) / (2n)). */
static void enface(const uint8_t *vol, uint32_t ny, uint32_t nx, uint32_t nz, bool mean,
                   uint32_t za, uint32_t zb, uint8_t *out)
{
	const uint64_t n = zb - za;

	for (size_t yx = 0; yx < (size_t)ny * nx; yx++) {
		const uint8_t *a = vol + yx * nz;
		uint64_t sum = 0;
		uint8_t mx = 0;

		for (uint32_t z = za; z < zb; z++) {
			sum += a[z];
			mx = a[z] > mx ? a[z] : mx;
		}
		out[yx] = mean ? (uint8_t)((2 * sum + n) / (2 * n)) : mx;
	}
}

void vw_extract(const uint8_t *vol, uint32_t ny, uint32_t nx, uint32_t nz, unsigned kind,
                const uint32_t pos[3], const uint32_t slab[2], uint8_t *out,
                struct volrec_image *img)
{
	memset(img, 0, sizeof(*img));
	img->kind = kind;
	img->data = out;
	img->planes = 1;
	img->block[0] = img->block[1] = img->block[2] = 1;
	memcpy(img->position, pos, sizeof(img->position));
	memcpy(img->slab, slab, sizeof(img->slab));
	switch (kind) {
	case VOLREC_IMAGE_ENFACE_MEAN:
	case VOLREC_IMAGE_ENFACE_MAX:
		img->rows = ny;
		img->cols = nx;
		enface(vol, ny, nx, nz, kind == VOLREC_IMAGE_ENFACE_MEAN, slab[0], slab[1], out);
		break;
	case VOLREC_IMAGE_BSCAN: /* [X][Z] at y0: one contiguous block of the volume */
		img->rows = nx;
		img->cols = nz;
		memcpy(out, vol + (size_t)pos[0] * nx * nz, (size_t)nx * nz);
		break;
	case VOLREC_IMAGE_SLICE: /* [Y][Z] at x0 */
		img->rows = ny;
		img->cols = nz;
		for (uint32_t y = 0; y < ny; y++)
			memcpy(out + (size_t)y * nz, vol + ((size_t)y * nx + pos[1]) * nz, nz);
		break;
	default: /* VOLREC_IMAGE_PLANE: [Y][X] at z0 */
		img->rows = ny;
		img->cols = nx;
		for (size_t yx = 0; yx < (size_t)ny * nx; yx++)
			out[yx] = vol[yx * nz + pos[2]];
		break;
	}
}
