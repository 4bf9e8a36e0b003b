/* SPDX-License-Identifier: MIT */
/*
 * The web viewer's picture frames (clients/view/frame.c, docs/viewer.md): the header's fields
 * at their documented offsets, raw and deflate payloads that give back the picture, large
 * pictures reduced by block maxima, the geometry in um of each picture's axes, and the reduced
 * volume sent whole with its planes and block factors.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <zlib.h>

#include "clients/view/internal.h"
#include "tests/unit/vrtest.h"

static uint32_t rd32(const unsigned char *p)
{
	return p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t rd64(const unsigned char *p)
{
	return rd32(p) | (uint64_t)rd32(p + 4) << 32;
}

static double rdd(const unsigned char *p)
{
	uint64_t v = rd64(p);
	double d;

	memcpy(&d, &v, sizeof(d));
	return d;
}

static float rdf(const unsigned char *p)
{
	uint32_t v = rd32(p);
	float f;

	memcpy(&f, &v, sizeof(f));
	return f;
}

static uint8_t *picture(uint32_t rows, uint32_t cols, unsigned seed)
{
	uint8_t *p = malloc((size_t)rows * cols);
	uint64_t x = 0x9E3779B97F4A7C15u ^ seed;

	for (size_t i = 0; i < (size_t)rows * cols; i++) { /* xorshift64: incompressible */
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		p[i] = (uint8_t)(x >> 24);
	}
	return p;
}

static struct volrec_image image(const uint8_t *pix, uint32_t rows, uint32_t cols)
{
	return (struct volrec_image){
	        .data = pix,
	        .kind = VOLREC_IMAGE_BSCAN,
	        .rows = rows,
	        .cols = cols,
	        .planes = 1,
	        .block = {1, 1, 1},
	        .volume_id = 0x1122334455667788u,
	        .slab = {3, 40},
	        .position = {5, 6, 7},
	        .angles_deg = {30.5f, -15.25f},
	        .spacing = {1.0f, 2.0f, 0.5f},
	        .step = 0.25f,
	};
}

static const struct vw_frame_meta META = {
        .volume_id = 0x1122334455667788u,
        .epoch = 99,
        .t_last_ns = 1000,
        .t_publish_ns = 2000,
        .t_read_ns = 3000,
        .session_id = 0xabcdefu,
        .shape = {16, 32, 64},
        .voxel_um = {12.5, 6.0, 3.25}, /* [dy, dx, dz] */
};

static void test_header_fields_at_their_offsets(void **state)
{
	uint8_t *pix = picture(32, 64, 1);
	struct volrec_image img = image(pix, 32, 64);
	struct vw_encode_opts o = {.mode = VW_MODE_RAW, .max_side = 1024, .level = 1};
	struct vw_frame *f;
	const unsigned char *h;

	(void)state;
	assert_int_equal(vw_frame_encode(&img, &META, &o, &f), 0);
	h = f->buf + VW_PRE;
	assert_int_equal(rd32(h), VW_FRAME_MAGIC);
	assert_int_equal(h[4] | h[5] << 8, VW_FRAME_VERSION);
	assert_int_equal(h[6] | h[7] << 8, VW_FRAME_HEADER);
	assert_int_equal(h[8], VOLREC_IMAGE_BSCAN);
	assert_int_equal(h[9], VW_ENC_RAW);
	assert_int_equal(h[10], 1);
	assert_int_equal(h[11], 1);
	assert_int_equal(rd32(h + 12), 32);
	assert_int_equal(rd32(h + 16), 64);
	assert_int_equal(rd32(h + 20), 32 * 64);
	assert_true(rd64(h + 24) == 0x1122334455667788u);
	assert_int_equal(rd64(h + 32), 99);
	assert_int_equal(rd64(h + 40), 1000);
	assert_int_equal(rd64(h + 48), 2000);
	assert_int_equal(rd64(h + 56), 3000);
	assert_int_equal(rd64(h + 64), 0xabcdefu);
	assert_int_equal(rd32(h + 72), 16);
	assert_int_equal(rd32(h + 76), 32);
	assert_int_equal(rd32(h + 80), 64);
	assert_int_equal(rd32(h + 84), 3);
	assert_int_equal(rd32(h + 88), 40);
	assert_int_equal(rd32(h + 92), 5);
	assert_int_equal(rd32(h + 96), 6);
	assert_int_equal(rd32(h + 100), 7);
	assert_true(rdf(h + 104) == 30.5f && rdf(h + 108) == -15.25f);
	assert_true(rdf(h + 112) == 1.0f && rdf(h + 116) == 2.0f && rdf(h + 120) == 0.5f);
	assert_true(rdf(h + 124) == 0.25f);
	/* a B-scan's rows run along x, its cols along depth */
	assert_true(rdd(h + 128) == 12.5 && rdd(h + 136) == 6.0 && rdd(h + 144) == 3.25);
	assert_true(rdd(h + 152) == 6.0 && rdd(h + 160) == 3.25 && rdd(h + 168) == 0.0);
	assert_int_equal(rd32(h + 176), 1);
	assert_int_equal(rd32(h + 180) * 100 + rd32(h + 184) * 10 + rd32(h + 188), 111);
	assert_int_equal(h[192], 0);
	for (int i = 193; i < VW_FRAME_HEADER; i++)
		assert_int_equal(h[i], 0);
	assert_int_equal(f->len, VW_FRAME_HEADER + 32 * 64);
	assert_memory_equal(h + VW_FRAME_HEADER, pix, 32 * 64);
	vw_frame_free(f);
	free(pix);
}

static void test_deflate_payload_inflates_to_the_picture(void **state)
{
	uint32_t rows = 100, cols = 300;
	uint8_t *pix = calloc((size_t)rows * cols, 1), *back = malloc((size_t)rows * cols);
	struct volrec_image img;
	struct vw_encode_opts o = {
	        .mode = VW_MODE_AUTO, .max_side = 1024, .deflate_min = 1024, .level = 1};
	struct vw_frame *f;
	uLongf n = (uLongf)rows * cols;
	const unsigned char *h;

	(void)state;
	for (uint32_t r = 0; r < rows; r++) /* layers: compressible, like an OCT B-scan's air */
		memset(pix + (size_t)r * cols + 100, (int)(r * 2), 50);
	img = image(pix, rows, cols);
	assert_int_equal(vw_frame_encode(&img, &META, &o, &f), 0);
	h = f->buf + VW_PRE;
	assert_int_equal(h[9], VW_ENC_DEFLATE);
	assert_true(rd32(h + 20) < rows * cols / 8);
	assert_int_equal(f->len, VW_FRAME_HEADER + rd32(h + 20));
	assert_int_equal(uncompress(back, &n, h + VW_FRAME_HEADER, rd32(h + 20)), Z_OK);
	assert_int_equal(n, rows * cols);
	assert_memory_equal(back, pix, (size_t)rows * cols);
	vw_frame_free(f);
	free(pix);
	free(back);
}

static void test_auto_sends_incompressible_pictures_raw(void **state)
{
	uint8_t *pix = picture(200, 200, 7);
	struct volrec_image img = image(pix, 200, 200);
	struct vw_encode_opts o = {
	        .mode = VW_MODE_AUTO, .max_side = 1024, .deflate_min = 1024, .level = 1};
	struct vw_frame *f;

	(void)state;
	assert_int_equal(vw_frame_encode(&img, &META, &o, &f), 0);
	assert_int_equal(f->buf[VW_PRE + 9], VW_ENC_RAW);
	assert_memory_equal(f->buf + VW_PRE + VW_FRAME_HEADER, pix, 200 * 200);
	vw_frame_free(f);
	free(pix);
}

static void test_large_pictures_are_reduced_by_block_maxima(void **state)
{
	uint32_t rows = 300, cols = 4096, rs, cs, orows, ocols;
	uint8_t *pix = picture(rows, cols, 3);
	struct volrec_image img = image(pix, rows, cols);
	struct vw_encode_opts o = {.mode = VW_MODE_RAW, .max_side = 1024, .level = 1};
	struct vw_frame *f;
	const unsigned char *h, *d;

	(void)state;
	vw_reduce_dims(rows, cols, 1024, &rs, &cs, &orows, &ocols);
	assert_int_equal(rs, 1);
	assert_int_equal(cs, 4);
	assert_int_equal(orows, 300);
	assert_int_equal(ocols, 1024);
	vw_reduce_dims(1000, 1030, 1024, &rs, &cs, &orows, &ocols);
	assert_int_equal(cs, 2);
	assert_int_equal(ocols, 515);
	assert_int_equal(vw_frame_encode(&img, &META, &o, &f), 0);
	h = f->buf + VW_PRE;
	d = h + VW_FRAME_HEADER;
	assert_int_equal(h[10], 1);
	assert_int_equal(h[11], 4);
	assert_int_equal(rd32(h + 12), 300);
	assert_int_equal(rd32(h + 16), 1024);
	/* a sent pixel covers 4 depths: its size is 4 voxels' */
	assert_int_equal(rd32(h + 180), 1);
	assert_int_equal(rd32(h + 184), 4);
	assert_true(rdd(h + 152) == 6.0 && rdd(h + 160) == 4 * 3.25);
	for (uint32_t r = 0; r < rows; r += 37)
		for (uint32_t c = 0; c < 1024; c += 13) {
			uint8_t m = 0;

			for (uint32_t k = 0; k < 4; k++)
				m = pix[(size_t)r * cols + 4 * c + k] > m
				            ? pix[(size_t)r * cols + 4 * c + k]
				            : m;
			if (d[(size_t)r * 1024 + c] != m)
				fail_msg("pixel (%u, %u): %u, block maximum %u", r, c,
				         d[(size_t)r * 1024 + c], m);
		}
	vw_frame_free(f);
	free(pix);
}

static void test_partial_edge_blocks_take_what_is_there(void **state)
{
	const uint8_t src[3 * 5] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 99};
	uint8_t dst[2 * 3];
	const uint8_t want[2 * 3] = {7, 9, 10, 12, 14, 99};

	(void)state;
	vw_reduce_max(src, 3, 5, 2, 2, dst);
	assert_memory_equal(dst, want, sizeof(want));
}

/* Each kind's axes: an en-face [Y][X] rows along y; a slice [Y][Z]; a render has no size in
 * um (its space is scaled by view.render.spacing); an unknown size stays 0. */
static void test_pixel_sizes_follow_each_pictures_axes(void **state)
{
	uint8_t *pix = picture(16, 64, 5);
	struct volrec_image img = image(pix, 16, 64);
	struct vw_encode_opts o = {.mode = VW_MODE_RAW, .max_side = 1024, .level = 1};
	struct vw_frame_meta m = META;
	struct vw_frame *f;
	const unsigned char *h;

	(void)state;
	img.kind = VOLREC_IMAGE_SLICE;
	assert_int_equal(vw_frame_encode(&img, &m, &o, &f), 0);
	h = f->buf + VW_PRE;
	assert_true(rdd(h + 152) == 12.5 && rdd(h + 160) == 3.25);
	vw_frame_free(f);
	img.kind = VOLREC_IMAGE_ENFACE_MEAN;
	img.cols = 32;
	assert_int_equal(vw_frame_encode(&img, &m, &o, &f), 0);
	h = f->buf + VW_PRE;
	assert_true(rdd(h + 152) == 12.5 && rdd(h + 160) == 6.0);
	vw_frame_free(f);
	img.kind = VOLREC_IMAGE_RENDER;
	assert_int_equal(vw_frame_encode(&img, &m, &o, &f), 0);
	h = f->buf + VW_PRE;
	assert_true(rdd(h + 152) == 0.0 && rdd(h + 160) == 0.0 && rdd(h + 128) == 12.5);
	vw_frame_free(f);
	m.voxel_um[0] = 0.0; /* dy unknown */
	img.kind = VOLREC_IMAGE_ENFACE_MAX;
	assert_int_equal(vw_frame_encode(&img, &m, &o, &f), 0);
	h = f->buf + VW_PRE;
	assert_true(rdd(h + 128) == 0.0 && rdd(h + 152) == 0.0 && rdd(h + 160) == 6.0);
	vw_frame_free(f);
	free(pix);
}

/* The reduced volume [Yr][Xr][Zr] goes whole (--max-side does not reduce it), with its planes,
 * block factors, reduction, and pixel sizes of its blocks; deflated it inflates to it. */
static void test_the_volume_goes_whole_with_its_blocks(void **state)
{
	const uint32_t yr = 6, xr = 11, zr = 40;
	uint8_t *pix = picture(yr * xr, zr, 7), back[6 * 11 * 40];
	struct volrec_image img = image(pix, yr, xr);
	struct vw_encode_opts o = {.mode = VW_MODE_DEFLATE, .max_side = 4, .level = 1};
	struct vw_frame *f;
	const unsigned char *h;
	uLongf n = sizeof(back);

	(void)state;
	img.kind = VOLREC_IMAGE_VOLUME;
	img.planes = zr;
	img.block[0] = 3, img.block[1] = 3, img.block[2] = 2;
	img.reduce = VOLREC_REDUCE_MEAN;
	assert_int_equal(vw_frame_encode(&img, &META, &o, &f), 0);
	h = f->buf + VW_PRE;
	assert_int_equal(h[8], VOLREC_IMAGE_VOLUME);
	assert_int_equal(h[9], VW_ENC_DEFLATE);
	assert_int_equal(rd32(h + 12), yr);
	assert_int_equal(rd32(h + 16), xr);
	assert_int_equal(rd32(h + 176), zr);
	assert_int_equal(rd32(h + 180) * 100 + rd32(h + 184) * 10 + rd32(h + 188), 332);
	assert_int_equal(h[10] * 10 + h[11], 33);
	assert_int_equal(h[192], VOLREC_REDUCE_MEAN);
	assert_true(rdd(h + 152) == 3 * 12.5 && rdd(h + 160) == 3 * 6.0 &&
	            rdd(h + 168) == 2 * 3.25);
	assert_int_equal(uncompress(back, &n, h + VW_FRAME_HEADER, rd32(h + 20)), Z_OK);
	assert_int_equal(n, yr * xr * zr);
	assert_memory_equal(back, pix, n);
	vw_frame_free(f);
	free(pix);
}

static void test_kind_names_round_trip(void **state)
{
	(void)state;
	for (unsigned k = 0; k < VW_KIND_COUNT; k++)
		assert_int_equal(vw_kind_from_name(vw_kind_name(k)), (int)k);
	assert_string_equal(vw_kind_name(VOLREC_IMAGE_ENFACE_MAX), "enface_max");
	assert_null(vw_kind_name(VW_KIND_COUNT));
	/* the channels' pictures after the daemon's own: each made as its views-area picture */
	assert_string_equal(vw_kind_name(VW_CHANNEL_KIND0), "angio_enface_mean");
	assert_string_equal(vw_kind_name(VW_KIND_COUNT - 1), "doppler_bscan");
	assert_int_equal(vw_kind_from_name("angio_enface_max"), VW_CHANNEL_KIND0 + 1);
	assert_int_equal(vw_kind_base(VW_CHANNEL_KIND0 + 1), VOLREC_IMAGE_ENFACE_MAX);
	assert_int_equal(vw_kind_base(VW_CHANNEL_KIND0 + 5), VOLREC_IMAGE_BSCAN);
	assert_int_equal(vw_kind_channel(VW_CHANNEL_KIND0 + 2), VOLREC_CHANNEL_ANGIO);
	assert_int_equal(vw_kind_channel(VW_CHANNEL_KIND0 + 3), VOLREC_CHANNEL_DOPPLER);
	assert_int_equal(vw_kind_channel(VOLREC_IMAGE_BSCAN), VOLREC_CHANNEL_STRUCTURE);
	assert_int_equal(vw_kind_base(VOLREC_IMAGE_SLICE), VOLREC_IMAGE_SLICE);
	assert_true(VW_CHANNEL_KINDS == 0x1f80u);
	assert_string_equal(vw_kind_name(VOLREC_IMAGE_VOLUME), "volume");
	assert_int_equal(vw_kind_from_name("volumes"), -1);
}

/* A channel's picture: its kind at 8 and its meaning at 193..256 (docs/viewer.md), the
 * geometry of the picture it is made as. */
static void test_a_channel_frame_says_what_its_values_mean(void **state)
{
	uint8_t *pix = picture(32, 64, 1);
	struct volrec_image img = image(pix, 32, 64);
	struct vw_encode_opts o = {.mode = VW_MODE_RAW, .max_side = 1024, .level = 1};
	struct volrec_channel ch = {
	        .kind = VOLREC_CHANNEL_DOPPLER,
	        .method = 1,
	        .value_lo = -3.14159265358979,
	        .value_hi = 3.14159265358979,
	        .units = "rad",
	        .velocity_mm_s = {-0.38, 0.38},
	        .mask_db = 40.0,
	        .half_window = 2,
	        .flags = 1,
	};
	struct vw_frame_meta m = META;
	struct vw_frame *f;
	const unsigned char *h;

	(void)state;
	m.kind = VW_CHANNEL_KIND0 + 5;
	m.chan = &ch;
	assert_int_equal(vw_frame_encode(&img, &m, &o, &f), 0);
	h = f->buf + VW_PRE;
	assert_int_equal(h[8], VW_CHANNEL_KIND0 + 5);
	assert_true(rdd(h + 152) == 6.0 && rdd(h + 160) == 3.25); /* a B-scan's geometry */
	assert_int_equal(h[193], VOLREC_CHANNEL_DOPPLER);
	assert_int_equal(h[194], 1);
	assert_int_equal(h[195], 1);
	assert_int_equal(rd32(h + 196), 2);
	assert_true(rdd(h + 200) == -3.14159265358979 && rdd(h + 208) == 3.14159265358979);
	assert_true(rdd(h + 216) == -0.38 && rdd(h + 224) == 0.38);
	assert_string_equal((const char *)h + 232, "rad");
	assert_int_equal(h[247], 0);
	assert_true(rdd(h + 248) == 40.0);
	assert_memory_equal(h + VW_FRAME_HEADER, pix, 32 * 64);
	vw_frame_free(f);
	free(pix);
}

/* A Doppler picture reduced for the screen keeps each block's fastest flow with its sign, never
 * the largest u8 (which would turn flow towards the probe into flow away). */
static void test_doppler_is_reduced_to_its_fastest_flow(void **state)
{
	/* 2 x 6, reduced by 1 x 3: blocks {127, 10, 200} {128, 130, 126} / {255, 0, 128} {3, 252, 9} */
	static const uint8_t src[12] = {127, 10, 200, 128, 130, 126, 255, 0, 128, 3, 252, 9};
	uint8_t dst[4];

	(void)state;
	vw_reduce_signed(src, 2, 6, 1, 3, dst);
	assert_int_equal(dst[0], 10);  /* |2q - 255|: 1, 235, 145 */
	assert_int_equal(dst[1], 130); /* 1, 5, 3 */
	assert_int_equal(dst[2], 255); /* 255 and 0 tie: the first */
	assert_int_equal(dst[3], 3);   /* 249, 249, 237: the first */
	vw_reduce_max(src, 2, 6, 1, 3, dst);
	assert_int_equal(dst[0], 200); /* what maxima would have said */
}

/* A browser's own pictures (extract.c) against docs/algorithms.md §4 computed by hand on a
 * 2 x 3 x 4 volume V[y][x][z] = 10y + 3x + z, and the en-face mean's rounding half up. */
static void test_own_pictures_are_the_volumes_voxels(void **state)
{
	enum { Y = 2, X = 3, Z = 4 };
	uint8_t vol[Y * X * Z], out[16];
	const uint32_t pos[3] = {1, 2, 3}, slab[2] = {1, 3};
	struct volrec_image img;

	(void)state;
	for (unsigned y = 0; y < Y; y++)
		for (unsigned x = 0; x < X; x++)
			for (unsigned z = 0; z < Z; z++)
				vol[(y * X + x) * Z + z] = (uint8_t)(10 * y + 3 * x + z);
	vw_extract(vol, Y, X, Z, VOLREC_IMAGE_BSCAN, pos, slab, out, &img);
	assert_int_equal(img.rows, X);
	assert_int_equal(img.cols, Z);
	assert_memory_equal(out, vol + 1 * X * Z, X * Z);
	assert_int_equal(img.position[0], 1);
	assert_int_equal(img.slab[1], 3);
	vw_extract(vol, Y, X, Z, VOLREC_IMAGE_SLICE, pos, slab, out, &img);
	assert_int_equal(img.rows, Y);
	assert_int_equal(img.cols, Z);
	for (unsigned y = 0; y < Y; y++)
		for (unsigned z = 0; z < Z; z++)
			assert_int_equal(out[y * Z + z], 10 * y + 6 + z);
	vw_extract(vol, Y, X, Z, VOLREC_IMAGE_PLANE, pos, slab, out, &img);
	for (unsigned y = 0; y < Y; y++)
		for (unsigned x = 0; x < X; x++)
			assert_int_equal(out[y * X + x], 10 * y + 3 * x + 3);
	/* over z 1..2: mean of (v+1, v+2) = v + 1.5, rounded half up to v + 2; max v + 2 */
	vw_extract(vol, Y, X, Z, VOLREC_IMAGE_ENFACE_MEAN, pos, slab, out, &img);
	for (unsigned yx = 0; yx < Y * X; yx++)
		assert_int_equal(out[yx], vol[yx * Z] + 2);
	vw_extract(vol, Y, X, Z, VOLREC_IMAGE_ENFACE_MAX, pos, slab, out, &img);
	for (unsigned yx = 0; yx < Y * X; yx++)
		assert_int_equal(out[yx], vol[yx * Z] + 2);
	/* thirds: 0 0 1 -> 0.33 -> 0; 0 1 1 -> 0.67 -> 1; 255 255 254 stays below 256 */
	{
		const uint8_t v3[3 * 3] = {0, 0, 1, 0, 1, 1, 255, 255, 254};
		const uint32_t all[2] = {0, 3};

		vw_extract(v3, 1, 3, 3, VOLREC_IMAGE_ENFACE_MEAN, pos, all, out, &img);
		assert_int_equal(out[0], 0);
		assert_int_equal(out[1], 1);
		assert_int_equal(out[2], 255);
	}
}

static void test_a_view_outside_the_volume_is_refused(void **state)
{
	const uint32_t shape[3] = {48, 40, 256}, none[3] = {0, 0, 0};
	char err[256];

	(void)state;
	assert_int_equal(vw_view_check(shape, (const uint32_t[3]){47, 39, 255},
	                               (const uint32_t[2]){0, 256}, err, sizeof(err)),
	                 0);
	assert_int_equal(
	        vw_view_check(shape, (const uint32_t[3]){0, 40, 0}, NULL, err, sizeof(err)),
	        -EINVAL);
	assert_string_equal(err, "view: position: x0 40 is outside the volume (0..39 for 48 x 40 x "
	                         "256 [Y, X, Z])");
	assert_int_equal(vw_view_check(shape, NULL, (const uint32_t[2]){5, 5}, err, sizeof(err)),
	                 -EINVAL);
	assert_string_equal(err,
	                    "view: slab [5, 5): need 0 <= za < zb <= 256 (the volume's depth)");
	assert_int_equal(vw_view_check(none, NULL, (const uint32_t[2]){0, 1}, err, sizeof(err)),
	                 -EINVAL);
}

VR_TEST_GROUP(view_frame)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_header_fields_at_their_offsets),
	        cmocka_unit_test(test_deflate_payload_inflates_to_the_picture),
	        cmocka_unit_test(test_auto_sends_incompressible_pictures_raw),
	        cmocka_unit_test(test_large_pictures_are_reduced_by_block_maxima),
	        cmocka_unit_test(test_partial_edge_blocks_take_what_is_there),
	        cmocka_unit_test(test_pixel_sizes_follow_each_pictures_axes),
	        cmocka_unit_test(test_the_volume_goes_whole_with_its_blocks),
	        cmocka_unit_test(test_kind_names_round_trip),
	        cmocka_unit_test(test_a_channel_frame_says_what_its_values_mean),
	        cmocka_unit_test(test_doppler_is_reduced_to_its_fastest_flow),
	        cmocka_unit_test(test_own_pictures_are_the_volumes_voxels),
	        cmocka_unit_test(test_a_view_outside_the_volume_is_refused),
	};

	return cmocka_run_group_tests_name("view_frame", tests, NULL, NULL);
}
