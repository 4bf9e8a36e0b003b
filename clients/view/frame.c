/* SPDX-License-Identifier: MIT */
/*
 * The viewer's picture frames (docs/viewer.md, "Picture frames"): a 256-byte little-endian
 * header with the picture's volume, timestamps, view parameters and geometry in um, then its
 * pixels raw or as a zlib stream, a picture reduced by block maxima when a side is larger than
 * a screen shows (the reduced volume is sent as the daemon made it).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <libwebsockets.h>
#include <zlib.h>

#include "clients/view/internal.h"

const size_t VW_PRE = LWS_PRE;

static const char *const kind_names[VW_KIND_COUNT] = {
        [VOLREC_IMAGE_ENFACE_MEAN] = "enface_mean",
        [VOLREC_IMAGE_ENFACE_MAX] = "enface_max",
        [VOLREC_IMAGE_BSCAN] = "bscan",
        [VOLREC_IMAGE_SLICE] = "slice",
        [VOLREC_IMAGE_PLANE] = "plane",
        [VOLREC_IMAGE_RENDER] = "render",
        [VOLREC_IMAGE_VOLUME] = "volume",
        [VW_CHANNEL_KIND0 + 0] = "angio_enface_mean",
        [VW_CHANNEL_KIND0 + 1] = "angio_enface_max",
        [VW_CHANNEL_KIND0 + 2] = "angio_bscan",
        [VW_CHANNEL_KIND0 + 3] = "doppler_enface_mean",
        [VW_CHANNEL_KIND0 + 4] = "doppler_enface_max",
        [VW_CHANNEL_KIND0 + 5] = "doppler_bscan",
};

const char *vw_kind_name(unsigned kind)
{
	return kind < VW_KIND_COUNT ? kind_names[kind] : NULL;
}

int vw_kind_from_name(const char *name)
{
	for (int k = 0; k < VW_KIND_COUNT; k++)
		if (!strcmp(name, kind_names[k]))
			return k;
	return -1;
}

void vw_reduce_dims(uint32_t rows, uint32_t cols, uint32_t max_side, uint32_t *rstep,
                    uint32_t *cstep, uint32_t *orows, uint32_t *ocols)
{
	uint32_t rs = 1, cs = 1;

	if (max_side) {
		rs = rows > max_side ? (rows + max_side - 1) / max_side : 1;
		cs = cols > max_side ? (cols + max_side - 1) / max_side : 1;
	}
	*rstep = rs;
	*cstep = cs;
	*orows = (rows + rs - 1) / rs;
	*ocols = (cols + cs - 1) / cs;
}

void vw_reduce_max(const uint8_t *src, uint32_t rows, uint32_t cols, uint32_t rstep, uint32_t cstep,
                   uint8_t *dst)
{
	uint32_t orows = (rows + rstep - 1) / rstep, ocols = (cols + cstep - 1) / cstep;

	memset(dst, 0, (size_t)orows * ocols);
	for (uint32_t r = 0; r < rows; r++) {
		const uint8_t *s = src + (size_t)r * cols;
		uint8_t *d = dst + (size_t)(r / rstep) * ocols;

		/* one block of cstep columns per output pixel: no division per input byte */
		for (uint32_t oc = 0, c = 0; oc < ocols; oc++) {
			uint32_t end = cols - c > cstep ? c + cstep : cols;
			uint8_t v = d[oc];

			for (; c < end; c++)
				v = s[c] > v ? s[c] : v;
			d[oc] = v;
		}
	}
}

void vw_reduce_signed(const uint8_t *src, uint32_t rows, uint32_t cols, uint32_t rstep,
                      uint32_t cstep, uint8_t *dst)
{
	uint32_t orows = (rows + rstep - 1) / rstep, ocols = (cols + cstep - 1) / cstep;

	/* |2q - 255| is twice the distance from zero flow; a block starts with its first value */
	for (uint32_t orow = 0; orow < orows; orow++)
		for (uint32_t oc = 0; oc < ocols; oc++) {
			uint32_t r1 = (orow + 1) * rstep < rows ? (orow + 1) * rstep : rows,
			         c1 = (oc + 1) * cstep < cols ? (oc + 1) * cstep : cols;
			uint8_t best = src[(size_t)orow * rstep * cols + (size_t)oc * cstep];
			int far = abs(2 * best - 255);

			for (uint32_t r = orow * rstep; r < r1; r++)
				for (uint32_t c = oc * cstep; c < c1; c++) {
					uint8_t q = src[(size_t)r * cols + c];

					if (abs(2 * q - 255) > far) {
						far = abs(2 * q - 255);
						best = q;
					}
				}
			dst[(size_t)orow * ocols + oc] = best;
		}
}

/* Deflate with run-length matching only (Z_RLE): OCT pictures are speckle, which no longer
 * match finds, and dark runs (air, below the tissue), which RLE does; about three times faster
 * than compress2() at level 1 for the same size. 0, or -EIO. */
static int deflate_rle(const uint8_t *src, size_t len, int level, unsigned char *dst, size_t *dlen)
{
	z_stream z = {0};
	int rc;

	if (deflateInit2(&z, level, Z_DEFLATED, 15, 8, Z_RLE) != Z_OK)
		return -EIO;
	z.next_in = (Bytef *)(uintptr_t)src;
	z.avail_in = (uInt)len;
	z.next_out = dst;
	z.avail_out = (uInt)*dlen;
	rc = deflate(&z, Z_FINISH);
	*dlen = z.total_out;
	deflateEnd(&z);
	return rc == Z_STREAM_END ? 0 : -EIO;
}

/* v as n little-endian bytes at p */
static void put(unsigned char *p, uint64_t v, int n)
{
	for (int i = 0; i < n; i++)
		p[i] = (unsigned char)(v >> (8 * i));
}

static void putf(unsigned char *p, float f)
{
	uint32_t v;

	memcpy(&v, &f, sizeof(v));
	put(p, v, 4);
}

static void putd(unsigned char *p, double d)
{
	uint64_t v;

	memcpy(&v, &d, sizeof(v));
	put(p, v, 8);
}

/* The volume axes (0 y, 1 x, 2 z) a picture's rows, cols and planes run along; -1: none (a
 * render's screen, a picture's planes). */
static void picture_axes(unsigned kind, int ax[3])
{
	ax[0] = 0, ax[1] = 1, ax[2] = -1;
	switch (kind) {
	case VOLREC_IMAGE_BSCAN:
		ax[0] = 1, ax[1] = 2;
		break;
	case VOLREC_IMAGE_SLICE:
		ax[1] = 2;
		break;
	case VOLREC_IMAGE_RENDER:
		ax[0] = ax[1] = -1;
		break;
	case VOLREC_IMAGE_VOLUME:
		ax[2] = 2;
		break;
	default:
		break;
	}
}

/* The header's geometry (docs/viewer.md, offsets 128..192): the volume's voxel size, the size
 * of one sent pixel along each axis of the payload, its planes, its factors and reduction. */
static void put_geometry(unsigned char *h, const struct volrec_image *img,
                         const struct vw_frame_meta *m, uint32_t rs, uint32_t cs)
{
	const bool vol = img->kind == VOLREC_IMAGE_VOLUME;
	const uint32_t factor[3] = {img->block[0] * rs, img->block[1] * cs,
	                            vol ? img->block[2] : 1};
	int ax[3];

	picture_axes(img->kind, ax);
	for (int a = 0; a < 3; a++) {
		double um = ax[a] >= 0 ? m->voxel_um[ax[a]] : 0.0;

		putd(h + 128 + 8 * a, m->voxel_um[a] > 0 ? m->voxel_um[a] : 0.0);
		putd(h + 152 + 8 * a, um > 0 ? um * factor[a] : 0.0);
		put(h + 180 + 4 * a, factor[a], 4);
	}
	/* version 1's steps: the factors, capped */
	h[10] = (unsigned char)(factor[0] > 255 ? 255 : factor[0]);
	h[11] = (unsigned char)(factor[1] > 255 ? 255 : factor[1]);
	put(h + 176, vol ? img->planes : 1, 4);
	h[192] = (unsigned char)(vol ? img->reduce : 0);
}

/* A channel's meaning (docs/viewer.md, offsets 193..256): its kind, method and flags, the value
 * of u8 0 and 255 in its units, Doppler's velocities (NaN unknown) and the mask. */
static void put_channel(unsigned char *h, const struct volrec_channel *ch)
{
	h[193] = (unsigned char)ch->kind;
	h[194] = (unsigned char)ch->method;
	h[195] = (unsigned char)ch->flags;
	put(h + 196, ch->half_window, 4);
	putd(h + 200, ch->value_lo);
	putd(h + 208, ch->value_hi);
	putd(h + 216, ch->velocity_mm_s[0]);
	putd(h + 224, ch->velocity_mm_s[1]);
	memcpy(h + 232, ch->units, 15); /* NUL-terminated: byte 247 stays 0 */
	putd(h + 248, ch->mask_db);
}

void vw_frame_free(struct vw_frame *f)
{
	if (!f)
		return;
	free(f->buf);
	free(f);
}

int vw_frame_encode(const struct volrec_image *img, const struct vw_frame_meta *m,
                    const struct vw_encode_opts *o, struct vw_frame **out)
{
	uint32_t rs, cs, rows, cols;
	size_t raw, cap, payload;
	const uint8_t *pix = img->data;
	uint8_t *reduced = NULL;
	struct vw_frame *f;
	unsigned char *h;
	int enc = VW_ENC_RAW;

	/* the reduced volume goes as the daemon made it (view.volume.max_side bounds it) */
	vw_reduce_dims(img->rows, img->cols, img->kind == VOLREC_IMAGE_VOLUME ? 0 : o->max_side,
	               &rs, &cs, &rows, &cols);
	raw = (size_t)rows * cols * (img->kind == VOLREC_IMAGE_VOLUME ? img->planes : 1);
	if (rs > 1 || cs > 1) {
		reduced = malloc(raw ? raw : 1);
		if (!reduced)
			return -ENOMEM;
		if (m->chan && m->chan->kind == VOLREC_CHANNEL_DOPPLER)
			vw_reduce_signed(img->data, img->rows, img->cols, rs, cs, reduced);
		else
			vw_reduce_max(img->data, img->rows, img->cols, rs, cs, reduced);
		pix = reduced;
	}
	if (o->mode == VW_MODE_DEFLATE || (o->mode == VW_MODE_AUTO && raw > o->deflate_min))
		enc = VW_ENC_DEFLATE;
	cap = enc == VW_ENC_DEFLATE ? compressBound((uLong)raw) : raw;
	if (cap < raw)
		cap = raw;
	f = calloc(1, sizeof(*f));
	if (f)
		f->buf = malloc(VW_PRE + VW_FRAME_HEADER + cap);
	if (!f || !f->buf) {
		vw_frame_free(f);
		free(reduced);
		return -ENOMEM;
	}
	h = f->buf + VW_PRE;
	payload = raw;
	if (enc == VW_ENC_DEFLATE) {
		size_t n = cap;

		if (deflate_rle(pix, raw, o->level, h + VW_FRAME_HEADER, &n)) {
			vw_frame_free(f);
			free(reduced);
			return -EIO;
		}
		payload = n;
		/* auto: a picture deflate hardly shrinks (speckle) costs the browser for nothing */
		if (o->mode == VW_MODE_AUTO && payload > raw - raw / 8)
			enc = VW_ENC_RAW;
	}
	if (enc == VW_ENC_RAW) {
		memcpy(h + VW_FRAME_HEADER, pix, raw);
		payload = raw;
	}
	free(reduced);

	memset(h, 0, VW_FRAME_HEADER);
	put(h + 0, VW_FRAME_MAGIC, 4);
	put(h + 4, VW_FRAME_VERSION, 2);
	put(h + 6, VW_FRAME_HEADER, 2);
	h[8] = (unsigned char)(m->chan ? m->kind : img->kind);
	h[9] = (unsigned char)enc;
	h[10] = (unsigned char)(rs > 255 ? 255 : rs);
	h[11] = (unsigned char)(cs > 255 ? 255 : cs);
	put(h + 12, rows, 4);
	put(h + 16, cols, 4);
	put(h + 20, (uint32_t)payload, 4);
	put(h + 24, img->volume_id, 8);
	put(h + 32, m->epoch, 8);
	put(h + 40, m->t_last_ns, 8);
	put(h + 48, m->t_publish_ns, 8);
	put(h + 56, m->t_read_ns, 8);
	put(h + 64, m->session_id, 8);
	for (int a = 0; a < 3; a++)
		put(h + 72 + 4 * a, m->shape[a], 4);
	put(h + 84, img->slab[0], 4);
	put(h + 88, img->slab[1], 4);
	for (int a = 0; a < 3; a++)
		put(h + 92 + 4 * a, img->position[a], 4);
	putf(h + 104, img->angles_deg[0]);
	putf(h + 108, img->angles_deg[1]);
	for (int a = 0; a < 3; a++)
		putf(h + 112 + 4 * a, img->spacing[a]);
	putf(h + 124, img->step);
	put_geometry(h, img, m, rs, cs);
	if (m->chan)
		put_channel(h, m->chan);

	f->len = VW_FRAME_HEADER + payload;
	*out = f;
	return 0;
}
