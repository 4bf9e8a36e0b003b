/* SPDX-License-Identifier: MIT */
/*
 * `volrec snapshot`: PNG pictures of the newest volume from the views the daemon publishes
 * beside it (docs/algorithms.md §4: en-face mean and maximum over the slab, the B-scan, the
 * orthogonal slice and the plane at view.position, the maximum-intensity render), with a JSON
 * sidecar naming the volume, the geometry and each view's parameters. It computes nothing of
 * its own: what it writes is what every client and the web viewer see.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <json-c/json.h>

#include "base/base.h"
#include "clients/volrec/tools.h"
#include "formats/png.h"

#define SNAP_PICTURES 6 /* of the views area */
#define SNAP_MAX      9 /* and the channels': angio en-face mean and maximum, Doppler B-scan */

static void snapshot_usage(FILE *f)
{
	fprintf(f,
	        "usage: volrec snapshot -o DIR [--auto-contrast[=P]] [--scale N|auto] [--timeout "
	        "S]\n"
	        "                       [-i NAME] [-r DIR] [-c FILE]\n\n"
	        "Write 8-bit PNG pictures (greyscale, the Doppler one RGB) of the newest\n"
	        "published volume [Y][X][Z] into DIR\n"
	        "(created if missing; files of an earlier snapshot are replaced), taken from the "
	        "views\n"
	        "the daemon publishes beside each volume (view: section of its configuration; "
	        "change\n"
	        "them live with volrec set):\n"
	        "  enface-mean_xXyY.png   mean over the depth slab view.slab (x across, y down)\n"
	        "  enface-max_xXyY.png    maximum over the slab\n"
	        "  bscan-yN_xXzZ.png      the B-scan at y = view.position[0] (x across, depth z "
	        "down)\n"
	        "  slice-xN_yYzZ.png      the orthogonal slice at x = view.position[1] (y across, "
	        "z down)\n"
	        "  enface-zN_xXyY.png     the en-face plane at z = view.position[2]\n"
	        "  render_wWhH.png        the maximum-intensity render (view.render.*)\n"
	        "with output.channels also the channels' pictures the daemon publishes:\n"
	        "  angio-enface-mean_xXyY.png, angio-enface-max_xXyY.png  the angiography's "
	        "en-face\n"
	        "                         mean and maximum over the slab\n"
	        "  doppler-bscan-yN_xXzZ.png  RGB: the B-scan of the structure in grey under the\n"
	        "                         Doppler phase in a diverging map (blue -pi, red +pi),\n"
	        "                         opaque as |phase| / pi\n"
	        "  snapshot.json          volume (session, sequence, epoch, offset, timestamps),\n"
	        "                         shape, and per file: plane, size, scale, contrast range\n"
	        "X, Y, Z (and N, the plane's index) are the numbers of the volume in the names.\n\n"
	        "  -o, --output DIR     directory for the pictures (required)\n"
	        "      --auto-contrast[=P]  stretch the P-th..(100-P)-th percentile to 0..255 "
	        "(default\n"
	        "                       P = 0.5); without it each picture's minimum..maximum is "
	        "stretched\n"
	        "                       to the full 0..255\n"
	        "      --scale N|auto   enlarge N times (nearest neighbour, 1..16); auto (the "
	        "default):\n"
	        "                       the smaller side at least 256 pixels, at most 8 times\n"
	        "  -t, --timeout S      wait at most S seconds for a volume (default "
	        "5)\n" TOOL_COMMON_HELP "\n" TOOL_EXIT_HELP ",\n"
	        "6 also: no volume published within the timeout, 7 also for DIR, 8 disk full (1 "
	        "for other\n"
	        "errors writing DIR).\n");
}

struct picture {
	const char *kind; /* enface-mean, enface-max, bscan, slice, enface, render */
	char what[160];   /* description */
	char file[128];
	char axes[8]; /* "xy", "xz", "yz" */
	int index;    /* plane index, -1 for projections */
	uint32_t w, h, scale;
	float *v; /* w*h values */
	double lo, hi;
	double px_um[2]; /* a pixel's size [across, down] in um before scaling; 0: unknown */
	double bar_um;   /* the scale bar drawn, 0: none */
	char bar_label[24];
	const char *channel; /* the channel shown: "structure" (the views area's), "angio" ... */
	float *phase;        /* Doppler B-scan: w*h phases / pi in [-1, 1] over v (the structure) */
	bool no_under;       /* the volume has no structure: the phase over black */
	double velocity_mm_s[2]; /* Doppler: the velocities of -pi and +pi (NaN unknown) */
};

/* Contrast range: min..max, or the percentiles p..100-p. */
static int contrast(struct picture *p, double pct)
{
	size_t n = (size_t)p->w * p->h;

	if (pct < 0) {
		float lo = p->v[0], hi = p->v[0];

		for (size_t i = 1; i < n; i++) {
			lo = p->v[i] < lo ? p->v[i] : lo;
			hi = p->v[i] > hi ? p->v[i] : hi;
		}
		p->lo = lo;
		p->hi = hi;
		return 0;
	}
	double *s = malloc(n * sizeof(*s));
	if (!s)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++)
		s[i] = p->v[i];
	p->lo = vr_percentile(s, n, pct);
	p->hi = vr_percentile(s, n, 100.0 - pct); /* s is sorted now */
	free(s);
	return 0;
}

/* Quantize with the contrast range and enlarge; returns a malloc'ed picture. */
static uint8_t *render(const struct picture *p)
{
	uint32_t W = p->w * p->scale, H = p->h * p->scale;
	uint8_t *out = malloc((size_t)W * H);
	double span = p->hi > p->lo ? p->hi - p->lo : 1.0;

	if (!out)
		return NULL;
	for (uint32_t y = 0; y < H; y++)
		for (uint32_t x = 0; x < W; x++) {
			double v = (p->v[(size_t)(y / p->scale) * p->w + x / p->scale] - p->lo) /
			           span * 255.0;

			out[(size_t)y * W + x] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : lrint(v));
		}
	return out;
}

static uint32_t auto_scale(uint32_t w, uint32_t h)
{
	uint32_t small = w < h ? w : h, big = w > h ? w : h, s = (256 + small - 1) / small;

	if (s > 8)
		s = 8;
	while (s > 1 && big * s > 2048)
		s--;
	return s ? s : 1;
}

/* The picture of view kind k (a leased volume's, copied out) as floats in PNG orientation:
 * the B-scan and slice are stored [x][z] and [y][z] and shown with depth down. */
static int picture_from_view(const struct volrec_image *img, struct picture *p)
{
	const uint32_t R = img->rows, C = img->cols;
	bool depth_down = img->kind == VOLREC_IMAGE_BSCAN || img->kind == VOLREC_IMAGE_SLICE;

	p->w = depth_down ? R : C;
	p->h = depth_down ? C : R;
	p->v = malloc((size_t)R * C * sizeof(float));
	if (!p->v)
		return -ENOMEM;
	for (uint32_t r = 0; r < R; r++)
		for (uint32_t c = 0; c < C; c++)
			p->v[depth_down ? (size_t)c * R + r : (size_t)r * C + c] =
			        img->data[(size_t)r * C + c];
	return 0;
}

static void picture_describe(struct picture *p, const struct volrec_image *img)
{
	static const char *const kinds[] = {"enface-mean", "enface-max", "bscan",
	                                    "slice",       "enface",     "render"};
	static const char *const axes[] = {"xy", "xy", "xz", "yz", "xy", "rd"};

	p->kind = kinds[img->kind];
	p->scale = 1;
	snprintf(p->axes, sizeof(p->axes), "%s", axes[img->kind]);
	p->index = img->kind == VOLREC_IMAGE_BSCAN   ? (int)img->position[0]
	           : img->kind == VOLREC_IMAGE_SLICE ? (int)img->position[1]
	           : img->kind == VOLREC_IMAGE_PLANE ? (int)img->position[2]
	                                             : -1;
	switch (img->kind) {
	case VOLREC_IMAGE_ENFACE_MEAN:
	case VOLREC_IMAGE_ENFACE_MAX:
		snprintf(p->what, sizeof(p->what), "%s over depths %u..%u",
		         img->kind == VOLREC_IMAGE_ENFACE_MEAN ? "mean" : "maximum", img->slab[0],
		         img->slab[1] - 1);
		break;
	case VOLREC_IMAGE_BSCAN:
		snprintf(p->what, sizeof(p->what), "B-scan at y = %u", img->position[0]);
		break;
	case VOLREC_IMAGE_SLICE:
		snprintf(p->what, sizeof(p->what), "orthogonal slice at x = %u", img->position[1]);
		break;
	case VOLREC_IMAGE_PLANE:
		snprintf(p->what, sizeof(p->what), "en-face plane at z = %u", img->position[2]);
		break;
	default:
		snprintf(p->what, sizeof(p->what),
		         "maximum-intensity render at azimuth %g, elevation %g deg (volume #%llu)",
		         img->angles_deg[0], img->angles_deg[1],
		         (unsigned long long)img->volume_id);
	}
}

/* The pixel sizes of each picture from the volume's voxel size um = [dx, dy, dz] (NaN: unknown):
 * its axes say which (the render has none). */
static void picture_units(struct picture *p, int n, const double um[3])
{
	for (int i = 0; i < n; i++)
		for (int a = 0; a < 2; a++) {
			const char *at = strchr("xyz", p[i].axes[a]);
			double v = at ? um[at - "xyz"] : 0;

			p[i].px_um[a] = v > 0 ? v : 0; /* NaN and unknown: 0 */
		}
}

/* "%g" of a pixel size, "unknown" for 0. */
static const char *px_text(double v, char *buf, size_t len)
{
	if (v > 0)
		snprintf(buf, len, "%.4g", v);
	else
		snprintf(buf, len, "unknown");
	return buf;
}

/* 3 x 5 glyphs of the scale bar's label: rows top down, bit 2 the left column. */
static const struct {
	char c;
	uint8_t rows[5];
} glyphs[] = {
        {'0', {7, 5, 5, 5, 7}}, {'1', {2, 6, 2, 2, 7}}, {'2', {7, 1, 7, 4, 7}},
        {'3', {7, 1, 7, 1, 7}}, {'4', {5, 5, 7, 1, 1}}, {'5', {7, 4, 7, 1, 7}},
        {'6', {7, 4, 7, 5, 7}}, {'7', {7, 1, 1, 1, 1}}, {'8', {7, 5, 7, 5, 7}},
        {'9', {7, 5, 7, 1, 7}}, {'.', {0, 0, 0, 0, 2}}, {'u', {5, 5, 5, 7, 4}}, /* mu */
        {'m', {0, 6, 7, 5, 5}}, {' ', {0, 0, 0, 0, 0}},
};

static void fill(uint8_t *pix, uint32_t W, uint32_t x0, uint32_t y0, uint32_t w, uint32_t h,
                 uint8_t v)
{
	for (uint32_t y = y0; y < y0 + h; y++)
		memset(pix + (size_t)y * W + x0, v, w);
}

/*
 * Draw a scale bar into the picture pix (W x H, after scaling) when its horizontal pixel size
 * is known: a white bar of a round length (1, 2 or 5 x 10^k um, at most a quarter of the width)
 * with its length above it, on a black box at the bottom left. Records the length in p.
 */
static void scale_bar(struct picture *p, uint8_t *pix)
{
	uint32_t W = p->w * p->scale, H = p->h * p->scale, f, m, bar, tw, bw, bh, x0, y0;
	double um_px, width_um, len = 0;
	size_t n;

	p->bar_um = 0;
	if (!(p->px_um[0] > 0))
		return;
	um_px = p->px_um[0] / p->scale;
	width_um = W * um_px;
	for (double d = 1e-3; d <= width_um / 4; d *= 10)
		for (int k = 0; k < 3; k++) {
			double v = d * (k == 0 ? 1 : k == 1 ? 2 : 5);

			if (v <= width_um / 4)
				len = v;
		}
	if (len <= 0)
		return;
	bar = (uint32_t)lround(len / um_px);
	if (len >= 1000)
		snprintf(p->bar_label, sizeof(p->bar_label), "%g mm", len / 1000);
	else
		snprintf(p->bar_label, sizeof(p->bar_label), "%g um", len);
	n = strlen(p->bar_label);
	f = (W < H ? W : H) / 128 ? (W < H ? W : H) / 128 : 1; /* glyph pixel */
	m = 3 * f;
	tw = (uint32_t)n * 4 * f;
	bw = (bar > tw ? bar : tw) + 2 * f;
	bh = 5 * f + 2 * f + 2 * f + 2 * f; /* text, gap, bar, borders */
	if (bar < 4 || bw + m > W || bh + m > H / 2)
		return;
	x0 = m;
	y0 = H - m - bh;
	fill(pix, W, x0, y0, bw, bh, 0);
	fill(pix, W, x0 + f, y0 + bh - 3 * f, bar, 2 * f, 255);
	for (size_t i = 0; i < n; i++) {
		const uint8_t *rows = NULL;

		for (size_t g = 0; g < VR_ARRAY_SIZE(glyphs) && !rows; g++)
			if (glyphs[g].c == p->bar_label[i])
				rows = glyphs[g].rows;
		for (uint32_t r = 0; rows && r < 5; r++)
			for (uint32_t c = 0; c < 3; c++)
				if (rows[r] >> (2 - c) & 1)
					fill(pix, W, x0 + f + (uint32_t)i * 4 * f + c * f,
					     y0 + f + r * f, f, f, 255);
	}
	p->bar_um = len;
}

static void picture_names(struct picture *p, uint32_t Y, uint32_t X, uint32_t Z)
{
	snprintf(p[0].file, sizeof(p[0].file), "enface-mean_x%uy%u.png", X, Y);
	snprintf(p[1].file, sizeof(p[1].file), "enface-max_x%uy%u.png", X, Y);
	snprintf(p[2].file, sizeof(p[2].file), "bscan-y%d_x%uz%u.png", p[2].index, X, Z);
	snprintf(p[3].file, sizeof(p[3].file), "slice-x%d_y%uz%u.png", p[3].index, Y, Z);
	snprintf(p[4].file, sizeof(p[4].file), "enface-z%d_x%uy%u.png", p[4].index, X, Y);
	snprintf(p[5].file, sizeof(p[5].file), "render_w%uh%u.png", p[5].w, p[5].h);
	for (int i = SNAP_PICTURES; i < SNAP_MAX && p[i].v; i++)
		if (p[i].index >= 0)
			snprintf(p[i].file, sizeof(p[i].file), "%s-%s-y%d_x%uz%u.png", p[i].channel,
			         p[i].kind, p[i].index, X, Z);
		else
			snprintf(p[i].file, sizeof(p[i].file), "%s-%s_x%uy%u.png", p[i].channel,
			         p[i].kind, X, Y);
}

/* A volume's 64-bit fields in the sidecar: the key, where the field is in struct volrec_view. */
struct view_u64 {
	const char *key;
	size_t off;
};
static const struct view_u64 view_ids[] = {
        {"session", offsetof(struct volrec_view, session_id)},
        {"sequence", offsetof(struct volrec_view, sequence)},
        {"volume_id", offsetof(struct volrec_view, volume_id)},
        {"epoch", offsetof(struct volrec_view, epoch)},
};
static const struct view_u64 view_times[] = {
        {"t_first_ns", offsetof(struct volrec_view, t_first_ns)},
        {"t_last_ns", offsetof(struct volrec_view, t_last_ns)},
        {"t_publish_ns", offsetof(struct volrec_view, t_publish_ns)},
        {"latency_ns", offsetof(struct volrec_view, latency_ns)},
};

/* The fields f[0..n) of v into o, in that order. */
static void add_u64s(struct json_object *o, const struct volrec_view *v, const struct view_u64 *f,
                     size_t n)
{
	for (size_t i = 0; i < n; i++) {
		uint64_t u;

		memcpy(&u, (const char *)v + f[i].off, sizeof(u));
		json_object_object_add(o, f[i].key, json_object_new_uint64(u));
	}
}

/* A JSON array of the two values a and b. */
static struct json_object *pair(struct json_object *a, struct json_object *b)
{
	struct json_object *x = json_object_new_array();

	json_object_array_add(x, a);
	json_object_array_add(x, b);
	return x;
}

static struct json_object *sidecar(const struct tool_target *t, const struct volrec_view *v,
                                   const struct picture *p, int npics, double pct,
                                   const double um[3], uint32_t generation)
{
	struct json_object *o = json_object_new_object(), *x, *files = json_object_new_array();

#define ADD(obj, key, val) json_object_object_add(obj, key, val)
	ADD(o, "instance", json_object_new_string(t->instance));
	add_u64s(o, v, view_ids, VR_ARRAY_SIZE(view_ids));
	ADD(o, "offset", pair(json_object_new_int(v->offset_x), json_object_new_int(v->offset_y)));
	ADD(o, "flags", json_object_new_int64(v->flags));
	add_u64s(o, v, view_times, VR_ARRAY_SIZE(view_times));
	x = json_object_new_object();
	ADD(x, "Y", json_object_new_int64(v->ny));
	ADD(x, "X", json_object_new_int64(v->nx));
	ADD(x, "Z", json_object_new_int64(v->nz));
	ADD(o, "shape", x);
	ADD(o, "layout", json_object_new_string("[Y][X][Z] u8, Z fastest"));
	x = json_object_new_array(); /* [dx, dy, dz] in um, null: unknown */
	for (int a = 0; a < 3; a++)
		json_object_array_add(x, um[a] > 0 ? json_object_new_double(um[a]) : NULL);
	ADD(o, "voxel_size_um", x);
	ADD(o, "generation", json_object_new_int64(generation));
	x = json_object_new_object();
	ADD(x, "method", json_object_new_string(pct < 0 ? "minmax" : "percentile"));
	if (pct >= 0)
		ADD(x, "percent", json_object_new_double(pct));
	ADD(o, "contrast", x);
	for (int i = 0; i < npics; i++) {
		struct json_object *f = json_object_new_object();

		ADD(f, "file", json_object_new_string(p[i].file));
		ADD(f, "kind", json_object_new_string(p[i].kind));
		ADD(f, "channel",
		    json_object_new_string(p[i].channel ? p[i].channel : "structure"));
		if (p[i].phase) {
			ADD(f, "colour_map",
			    json_object_new_string(
			            "Doppler phase: blue -pi, red +pi, opacity |phase| "
			            "/ pi, over the structure's B-scan in grey"));
			ADD(f, "velocity_mm_s",
			    isfinite(p[i].velocity_mm_s[0])
			            ? pair(json_object_new_double(p[i].velocity_mm_s[0]),
			                   json_object_new_double(p[i].velocity_mm_s[1]))
			            : NULL);
		}
		ADD(f, "what", json_object_new_string(p[i].what));
		ADD(f, "axes",
		    pair(json_object_new_string_len(p[i].axes, 1),
		         json_object_new_string_len(p[i].axes + 1, 1)));
		if (p[i].index >= 0) {
			/* the axis the plane is normal to: z for xy, y for xz, x for yz */
			const char *normal = !strcmp(p[i].axes, "xy")   ? "z"
			                     : !strcmp(p[i].axes, "xz") ? "y"
			                                                : "x";

			x = json_object_new_object();
			ADD(x, normal, json_object_new_int(p[i].index));
			ADD(f, "plane", x);
		}
		ADD(f, "width", json_object_new_int64((int64_t)p[i].w * p[i].scale));
		ADD(f, "height", json_object_new_int64((int64_t)p[i].h * p[i].scale));
		ADD(f, "scale", json_object_new_int64(p[i].scale));
		ADD(f, "range",
		    pair(json_object_new_double(p[i].lo), json_object_new_double(p[i].hi)));
		/* a pixel of the PNG (after scaling) in um, across and down; null: unknown */
		ADD(f, "pixel_size_um",
		    pair(p[i].px_um[0] > 0 ? json_object_new_double(p[i].px_um[0] / p[i].scale)
		                           : NULL,
		         p[i].px_um[1] > 0 ? json_object_new_double(p[i].px_um[1] / p[i].scale)
		                           : NULL));
		ADD(f, "scale_bar_um",
		    p[i].bar_um > 0 ? json_object_new_double(p[i].bar_um) : NULL);
		json_object_array_add(files, f);
	}
	ADD(o, "files", files);
#undef ADD
	return o;
}

/* snapshot.json beside the pictures, written to a temporary name and renamed into place. */
static int write_sidecar(const char *dir, const struct tool_target *t, const struct volrec_view *v,
                         const struct picture *p, int npics, double pct, const double um[3],
                         uint32_t generation, char *err, size_t errlen)
{
	char path[TOOL_PATH_MAX + 32], tmp[TOOL_PATH_MAX + 48];
	struct json_object *o = sidecar(t, v, p, npics, pct, um, generation);
	const char *text;
	FILE *f;
	int rc = 0;

	text = json_object_to_json_string_ext(o, JSON_C_TO_STRING_PRETTY |
	                                                 JSON_C_TO_STRING_NOSLASHESCAPE);
	if (!text) {
		json_object_put(o);
		return vr_err(err, errlen, -ENOMEM, "out of memory");
	}
	snprintf(path, sizeof(path), "%s/snapshot.json", dir);
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	f = fopen(tmp, "we");
	if (!f) {
		rc = -errno;
		json_object_put(o);
		return vr_err_errno(err, errlen, rc, "%s", tmp);
	}
	errno = 0;
	if (fputs(text, f) == EOF || fputc('\n', f) == EOF || fflush(f) == EOF || ferror(f))
		rc = errno ? -errno : -EIO;
	if (fclose(f) == EOF && !rc)
		rc = errno ? -errno : -EIO;
	json_object_put(o);
	if (!rc && rename(tmp, path) < 0)
		rc = -errno;
	if (rc) {
		unlink(tmp);
		if (rc == -ENOSPC)
			return vr_err(err, errlen, rc, "%s: disk full", path);
		return vr_err_errno(err, errlen, rc, "%s", path);
	}
	return 0;
}

static const char *const channel_names[VOLREC_CHANNEL_KINDS] = {"structure", "angio", "doppler"};

/* The Doppler B-scan (channel d) over the structure's (channel st, -1: none) as picture p. */
static int doppler_picture(struct volrec_client *c, const struct volrec_view *v, int st, int d,
                           const struct volrec_channel *dch, struct picture *p)
{
	struct volrec_image dimg, simg;
	int rc = volrec_view_channel_image(c, v, (unsigned)d, VOLREC_IMAGE_BSCAN, &dimg);

	if (!rc && st >= 0)
		rc = volrec_view_channel_image(c, v, (unsigned)st, VOLREC_IMAGE_BSCAN, &simg);
	if (rc)
		return rc;
	picture_describe(p, &dimg);
	rc = picture_from_view(st >= 0 ? &simg : &dimg, p);
	if (rc)
		return rc;
	p->phase = malloc((size_t)p->w * p->h * sizeof(float));
	if (!p->phase)
		return -ENOMEM;
	/* shown depth down: [x][z] stored, row z of column x; q = 255 (dphi + pi) / (2 pi) */
	for (uint32_t x = 0; x < dimg.rows; x++)
		for (uint32_t z = 0; z < dimg.cols; z++) {
			size_t at = (size_t)z * dimg.rows + x;
			uint8_t q = dimg.data[(size_t)x * dimg.cols + z];

			p->phase[at] = 2.0f * (float)q / 255.0f - 1.0f;
			if (st < 0)
				p->v[at] = 0.0f;
		}
	p->no_under = st < 0;
	p->channel = "doppler";
	p->velocity_mm_s[0] = dch->velocity_mm_s[0];
	p->velocity_mm_s[1] = dch->velocity_mm_s[1];
	snprintf(p->what, sizeof(p->what),
	         "Doppler phase (blue -pi .. red +pi) over the structure, B-scan at y = %u",
	         dimg.position[0]);
	return 0;
}

/*
 * The pictures of the channels past the views area's (docs/protocol.md section 2.8) into
 * pics[SNAP_PICTURES..]: the angiography's en-face mean and maximum, the Doppler B-scan over
 * the structure; *n the pictures in all. *none: the volume has channels whose pictures the
 * daemon does not publish. 0 or a negative errno.
 */
static int grab_channels(struct volrec_client *c, const struct volrec_view *v, struct picture *pics,
                         int *n, bool *none)
{
	struct volrec_channel ch[VOLREC_CHANNELS_MAX];
	int at[VOLREC_CHANNEL_KINDS] = {-1, -1, -1};
	uint32_t nch = 0;
	int rc = 0;

	*n = SNAP_PICTURES;
	*none = false;
	if (volrec_view_channels(c, v, &nch) < 0)
		return -EINVAL;
	for (uint32_t i = 0; i < nch && i < VOLREC_CHANNELS_MAX; i++)
		if (volrec_view_channel(c, v, i, &ch[i]) == 0 && ch[i].kind < VOLREC_CHANNEL_KINDS)
			at[ch[i].kind] = (int)i;
	for (int i = 0; i < SNAP_PICTURES; i++)
		pics[i].channel = nch ? channel_names[ch[0].kind] : "structure";
	if (nch < 2)
		return 0;
	for (unsigned k = VOLREC_IMAGE_ENFACE_MEAN;
	     at[VOLREC_CHANNEL_ANGIO] >= 0 && !rc && k <= VOLREC_IMAGE_ENFACE_MAX; k++) {
		struct volrec_image img;
		struct picture *p = &pics[*n];

		rc = volrec_view_channel_image(c, v, (unsigned)at[VOLREC_CHANNEL_ANGIO], k, &img);
		if (!rc) {
			picture_describe(p, &img);
			p->channel = "angio";
			rc = picture_from_view(&img, p);
			if (!rc) {
				snprintf(p->what, sizeof(p->what),
				         "angiography %s over depths %u..%u",
				         k == VOLREC_IMAGE_ENFACE_MEAN ? "mean" : "maximum",
				         img.slab[0], img.slab[1] - 1);
				(*n)++;
			}
		}
	}
	if (!rc && at[VOLREC_CHANNEL_DOPPLER] >= 0) {
		rc = doppler_picture(c, v, at[VOLREC_CHANNEL_STRUCTURE], at[VOLREC_CHANNEL_DOPPLER],
		                     &ch[at[VOLREC_CHANNEL_DOPPLER]], &pics[*n]);
		if (!rc)
			(*n)++;
	}
	if (rc == -ENOENT) { /* no channel views: the views area's pictures alone */
		for (int i = SNAP_PICTURES; i < SNAP_MAX; i++) {
			free(pics[i].v);
			free(pics[i].phase);
			pics[i] = (struct picture){0};
		}
		*n = SNAP_PICTURES;
		*none = true;
		rc = 0;
	}
	return rc;
}

static void pictures_free(struct picture *pics)
{
	for (int k = 0; k < SNAP_MAX; k++) {
		free(pics[k].v);
		free(pics[k].phase);
		pics[k].v = NULL;
		pics[k].phase = NULL;
	}
}

/* Lease the newest volume and copy its views (and its channels' pictures) out intact; waits up
 * to deadline for one. */
static int grab_latest(struct volrec_client *c, double deadline, struct picture *pics,
                       struct volrec_view *meta, int *npics, bool *no_channel_views)
{
	for (;;) {
		struct volrec_view v;
		int rc = volrec_client_latest(c, &v);

		if (rc == -EAGAIN || rc == -ENOENT) {
			if (vr_mono_s() > deadline || tool_interrupted())
				return -ETIMEDOUT;
			vr_sleep_ns(20 * 1000000ull);
			continue;
		}
		if (rc)
			return rc;
		for (unsigned k = 0; k < SNAP_PICTURES && rc == 0; k++) {
			struct volrec_image img;

			rc = volrec_view_image(c, &v, k, &img);
			if (rc == 0) {
				picture_describe(&pics[k], &img);
				rc = picture_from_view(&img, &pics[k]);
			}
		}
		if (rc == 0)
			rc = grab_channels(c, &v, pics, npics, no_channel_views);
		/* a volume with views but a picture not computed for it (a render that goes on
		 * over the next volumes has no whole picture yet, docs/algorithms.md §4): the
		 * next volume's, until the deadline */
		bool pending = rc == -ENOENT && (v.flags & VOLREC_FLAG_VIEWS);
		uint64_t id = v.volume_id;
		/* an error read from a slot overwritten meanwhile (the daemon clears its views area
		 * first) is the torn read's, not the volume's: take the next one */
		if (volrec_view_release(c, &v) != VOLREC_ETORN && !pending) {
			if (rc)
				return rc;
			*meta = v;
			meta->data = NULL;
			return 0;
		}
		pictures_free(pics); /* torn: overwritten while copying, or a picture pending */
		if (pending) {
			struct volrec_view n;

			/* wait for a newer volume */
			while (vr_mono_s() <= deadline && !tool_interrupted() &&
			       volrec_client_latest(c, &n) == 0) {
				bool newer = n.volume_id != id;

				volrec_view_release(c, &n);
				if (newer)
					break;
				vr_sleep_ns(20 * 1000000ull);
			}
			if (vr_mono_s() > deadline || tool_interrupted())
				return -EINPROGRESS;
			continue;
		}
		if (vr_mono_s() > deadline || tool_interrupted())
			return -ETIMEDOUT;
	}
}

/* What the command line asks for besides the target. */
struct snap_opts {
	const char *dir;
	double pct;     /* --auto-contrast percentile, -1: the views' own range */
	uint64_t scale; /* 0: auto */
};

/* -1 when the options are read into tg and o, else the exit status. */
static int snap_parse_args(int argc, char **argv, struct tool_target *tg, struct snap_opts *o)
{
	static const struct option longopts[] = {
	        TOOL_COMMON_LONGOPTS,
	        {"output", required_argument, NULL, 'o'},
	        {"auto-contrast", optional_argument, NULL, 'A'},
	        {"scale", required_argument, NULL, 'S'},
	        {"timeout", required_argument, NULL, 't'},
	        VR_CLI_LONGOPTS_END,
	};
	int opt;

	while ((opt = tool_getopt(tg, "snapshot", argc, argv, "i:r:c:o:t:h", longopts)) != -1) {
		switch (opt) {
		case 'o':
			o->dir = optarg;
			break;
		case 'A':
			o->pct = 0.5;
			if (optarg) {
				char *end;

				errno = 0;
				o->pct = strtod(optarg, &end);
				if (errno || *end || !*optarg || !(o->pct >= 0 && o->pct < 50)) {
					fprintf(stderr,
					        "volrec snapshot: --auto-contrast=%s: need a "
					        "percentile from 0 to below 50\n",
					        optarg);
					return VR_EXIT_USAGE;
				}
			}
			break;
		case 'S':
			if (!strcmp(optarg, "auto"))
				o->scale = 0;
			else if (vr_cli_u64("volrec snapshot", "--scale", optarg, 1, 16,
			                    "1 to 16, or auto", &o->scale))
				return VR_EXIT_USAGE;
			break;
		default:
			return tool_usage(snapshot_usage, opt);
		}
	}
	if (vr_cli_args_done("volrec snapshot", argc, argv))
		return VR_EXIT_USAGE;
	if (!o->dir || !*o->dir) {
		fprintf(stderr, "volrec snapshot: -o DIR is required (see --help)\n");
		return VR_EXIT_USAGE;
	}
	if (strlen(o->dir) > TOOL_PATH_MAX - 160) {
		fprintf(stderr, "volrec snapshot: -o %s: path too long\n", o->dir);
		return VR_EXIT_USAGE;
	}
	return -1;
}

/* The newest volume's views copied into pics, its description into v, voxel size into um and
 * generation; 0, else the exit status with the reason said. */
static int snap_grab(struct tool_target *tg, struct picture *pics, struct volrec_view *v,
                     double um[3], uint32_t *generation, int *npics)
{
	struct tool_daemon d;
	struct volrec_client *c = NULL;
	int rc, status;

	status = tool_daemon_require(tg, "snapshot", &d);
	if (status)
		return status;
	status = tool_client_open(tg, "snapshot", VOLREC_SUB_VOL, 0, &c);
	if (status)
		return status;
	tool_catch_signals();
	bool none = false;

	rc = grab_latest(c, vr_mono_s() + tg->timeout, pics, v, npics, &none);
	if (!rc && none)
		fprintf(stderr,
		        "volrec snapshot: volrecd of instance '%s' publishes no pictures of the "
		        "channels past the first (its backend does not compute them): the "
		        "angiography and Doppler pictures are left out\n",
		        tg->instance);
	volrec_view_voxel_size(c, v, um);
	volrec_view_generation(c, v, generation);
	volrec_client_close(c);
	if (rc == -ETIMEDOUT) {
		fprintf(stderr,
		        "volrec snapshot: volrecd (pid %d) of instance '%s' published no volume "
		        "within %.1f s\n",
		        d.pid, tg->instance, tg->timeout);
		return tool_interrupted() ? VR_EXIT_FAIL : VR_EXIT_TIMEOUT;
	}
	if (rc == -EINPROGRESS) {
		fprintf(stderr,
		        "volrec snapshot: volrecd (pid %d) of instance '%s' published volumes with "
		        "views but not all their pictures within %.1f s (a render slower than the "
		        "volumes: a smaller view.render.size or a larger view.render.step, or a "
		        "longer --timeout)\n",
		        d.pid, tg->instance, tg->timeout);
		return tool_interrupted() ? VR_EXIT_FAIL : VR_EXIT_TIMEOUT;
	}
	if (rc == -ENOENT) {
		fprintf(stderr,
		        "volrec snapshot: volrecd of instance '%s' publishes no views "
		        "(view.enabled: false): the pictures are its views\n",
		        tg->instance);
		return VR_EXIT_FAIL;
	}
	if (rc) {
		fprintf(stderr, "volrec snapshot: cannot read a volume: %s\n", volrec_strerror(rc));
		return tool_exit_for(rc);
	}
	return 0;
}

/* The Doppler picture p in RGB from its structure in grey (pix, scaled): each pixel the grey
 * blended with the end of a diverging map by the phase's size, a = |dphi| / pi: blue
 * (33, 102, 172) for -pi, red (178, 24, 43) for +pi (ColorBrewer RdBu's ends); a masked voxel
 * (phase 0) shows the structure alone. malloc'ed, NULL out of memory. */
static uint8_t *doppler_rgb(const struct picture *p, const uint8_t *pix)
{
	static const float blue[3] = {33, 102, 172}, red[3] = {178, 24, 43};
	uint32_t W = p->w * p->scale, H = p->h * p->scale;
	uint8_t *out = malloc((size_t)W * H * 3);

	if (!out)
		return NULL;
	for (uint32_t y = 0; y < H; y++)
		for (uint32_t x = 0; x < W; x++) {
			float ph = p->phase[(size_t)(y / p->scale) * p->w + x / p->scale];
			float a = ph < 0 ? -ph : ph,
			      g = p->no_under ? 0.0f : pix[(size_t)y * W + x];
			const float *end = ph < 0 ? blue : red;
			uint8_t *o = out + ((size_t)y * W + x) * 3;

			a = a > 1.0f ? 1.0f : a;
			for (int k = 0; k < 3; k++)
				o[k] = (uint8_t)lrintf(g * (1.0f - a) + end[k] * a);
		}
	return out;
}

/* Picture p scaled, contrasted, with its scale bar, written as DIR/<file> with its
 * description; 0, else the exit status with the reason said. */
static int snap_write_picture(const struct tool_target *tg, const struct snap_opts *o,
                              const struct volrec_view *v, struct picture *p)
{
	char path[TOOL_PATH_MAX + 160], desc[640], px0[32], px1[32], err[TOOL_PATH_MAX + 256];
	uint8_t *pix;
	int rc;

	p->scale = o->scale ? (uint32_t)o->scale : auto_scale(p->w, p->h);
	if (contrast(p, o->pct) || !(pix = render(p))) {
		fprintf(stderr, "volrec snapshot: out of memory\n");
		return VR_EXIT_FAIL;
	}
	double px[2] = {p->px_um[0] / p->scale, p->px_um[1] / p->scale};

	if (p->phase) {
		uint8_t *rgb = doppler_rgb(p, pix);

		free(pix);
		if (!rgb) {
			fprintf(stderr, "volrec snapshot: out of memory\n");
			return VR_EXIT_FAIL;
		}
		pix = rgb;
		p->bar_um = 0; /* no scale bar over the colours */
	} else {
		scale_bar(p, pix);
	}
	snprintf(path, sizeof(path), "%s/%s", o->dir, p->file);
	snprintf(desc, sizeof(desc),
	         "volrec %s session %016" PRIx64 " volume #%" PRIu64 " epoch %" PRIu64
	         ": %s (%s) of a %u x %u x %u [Y][X][Z] volume; grey %.4g..%.4g -> 0..255; "
	         "pixel %s x %s um; scale bar %s",
	         tg->instance, v->session_id, v->sequence, v->epoch, p->what, p->file, v->ny, v->nx,
	         v->nz, p->lo, p->hi, px_text(px[0], px0, sizeof(px0)),
	         px_text(px[1], px1, sizeof(px1)),
	         p->bar_um > 0 ? p->bar_label : "none (pixel size unknown)");
	rc = p->phase ? fmt_png_write_rgb(path, pix, p->w * p->scale, p->h * p->scale, desc, px,
	                                  err, sizeof(err))
	              : fmt_png_write_phys(path, pix, p->w * p->scale, p->h * p->scale, desc, px,
	                                   err, sizeof(err));
	free(pix);
	if (rc) {
		fprintf(stderr, "volrec snapshot: %s\n", err);
		return tool_exit_for_output(rc);
	}
	return 0;
}

VR_COMMAND(snapshot, "PNG pictures of the newest volume: projections and orthogonal slices")
{
	struct picture pics[SNAP_MAX] = {0};
	int npics = SNAP_PICTURES;
	struct snap_opts o = {.pct = -1};
	struct tool_target tg;
	struct volrec_view v = {0};
	double um[3] = {NAN, NAN, NAN};
	uint32_t generation = 0;
	char err[TOOL_PATH_MAX + 256];
	int rc, status = VR_EXIT_FAIL;
	bool made;

	tool_target_init(&tg);
	tg.timeout = 5;
	rc = snap_parse_args(argc, argv, &tg, &o);
	if (rc >= 0)
		return rc;
	rc = tool_target_finish(&tg, "snapshot");
	if (rc)
		return rc;
	/* first, so that a DIR that cannot be made says so before any wait */
	made = mkdir(o.dir, 0777) == 0;
	if (!made && errno != EEXIST) {
		fprintf(stderr, "volrec snapshot: cannot create %s: %s\n", o.dir, strerror(errno));
		return errno == EACCES || errno == EPERM ? VR_EXIT_PERM : VR_EXIT_FAIL;
	}
	status = snap_grab(&tg, pics, &v, um, &generation, &npics);
	if (status)
		goto out;
	picture_names(pics, v.ny, v.nx, v.nz);
	picture_units(pics, npics, um);
	for (int i = 0; i < npics && !status; i++)
		status = snap_write_picture(&tg, &o, &v, &pics[i]);
	if (status)
		goto out;
	rc = write_sidecar(o.dir, &tg, &v, pics, npics, o.pct, um, generation, err, sizeof(err));
	if (rc) {
		fprintf(stderr, "volrec snapshot: %s\n", err);
		status = tool_exit_for_output(rc);
		goto out;
	}
	printf("volume #%" PRIu64 " (epoch %" PRIu64
	       ", %u x %u x %u [Y][X][Z]) of instance '%s' -> %s/\n",
	       v.sequence, v.epoch, v.ny, v.nx, v.nz, tg.instance, o.dir);
	for (int i = 0; i < npics; i++)
		printf("  %-28s %s\n", pics[i].file, pics[i].what);
	printf("  %-28s %s\n", "snapshot.json", "volume, geometry, files");
	status = VR_EXIT_OK;
out:
	pictures_free(pics);
	if (status != VR_EXIT_OK && made)
		rmdir(o.dir); /* the DIR this run made, when it stayed empty */
	return status;
}
