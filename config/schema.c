/* SPDX-License-Identifier: MIT */
/*
 * The configuration schema: every key once, in one table (path, type, range, default,
 * destination, live or structural), and what follows from it alone: defaults, copy, free,
 * comparison, the structural-change decision and the names of enum values. Parsing
 * (parse.c) and the dump (dump.c) walk the same table; cross-field rules are in validate.c.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "config/internal.h"

static const char *const backend_names[] = {"auto", "cuda", "cpu", NULL};
static const char *const source_names[] = {"synth", "replay", "shim", NULL};
static const char *const replay_format_names[] = {"auto", "raw", NULL};
static const char *const crc_error_names[] = {"stop", "skip", NULL};
static const char *const phantom_names[] = {"retina",   "mirror", "tilted", "blocked", "curved",
                                            "anterior", "skin",   "bowl",   "flow",    NULL};
static const char *const sample_names[] = {"u16", "i16", "f32", "u12p", "u12gv", NULL};
static const char *const background_names[] = {
        "ascan_mean", "bscan_mean", "bscan_median", "reference", "none", "partial_median", NULL};
static const char *const resample_names[] = {"none", "linear", "cubic", "spline", NULL};
static const char *const window_names[] = {"none",  "hann",  "hamming", "blackman",
                                           "gauss", "tukey", NULL};
static const char *const recon_mode_names[] = {
        "none", "noncumulative", "cumulative", "adaptive", "compensated", "registered", NULL};
static const char *const temporal_names[] = {"linear", "exp", NULL};
static const char *const combine_names[] = {"sum", "product", NULL};
static const char *const volume_reduce_names[] = {"max", "mean", NULL};
static const char *const dtype_names[] = {"u8", NULL};
static const char *const overflow_names[] = {"drop_epoch", "block", NULL};
static const char *const channel_names[] = {"structure", "angio", "doppler", NULL};
static const char *const angio_method_names[] = {"cdv", "svar", NULL};
static const char *const doppler_axis_names[] = {"bscan", "ascan", NULL};
static const char *const log_level_names[] = {"error", "warning", "info", "debug", NULL};

/* Rules that make a change of a live key structural after all. */
static const char *dispersion_on_off(const struct vr_config *a, const struct vr_config *b)
{
	if ((a->preprocess.dispersion.kind == CFG_DISP_NONE) ==
	    (b->preprocess.dispersion.kind == CFG_DISP_NONE))
		return NULL;
	return "switches dispersion on or off, which changes the FFT";
}

static const char *output_size(const struct vr_config *a, const struct vr_config *b)
{
	if (cfg_out_voxels(a) == cfg_out_voxels(b))
		return NULL;
	return "changes the size of the output volume, as mode none does with a stride other "
	       "than [1, 1]";
}

/* clang-format off */
/* The destination f (a field of struct vr_config); the compiler checks its C type T, or the
 * type of its elements. */
#define FIELD(f)      (((struct vr_config *)0)->f)
#define AT(T, f)      .off = _Generic(FIELD(f), T: offsetof(struct vr_config, f)), .size = sizeof(FIELD(f))
#define AT_N(T, f)    .off = _Generic(FIELD(f)[0], T: offsetof(struct vr_config, f)), \
                      .size = sizeof(FIELD(f)), .n = sizeof(FIELD(f)) / sizeof(FIELD(f)[0])
#define AT_ENUM(f)    .off = offsetof(struct vr_config, f), .size = sizeof(FIELD(f))
#define WHEN(f, v)    .when = offsetof(struct vr_config, f), .when_is = v
#define KEY(p, t, r)  .path = p, .type = CFG_T_##t, .reload = CFG_##r

#define BOOL(f, d, r)                   {KEY(#f, BOOL, r), AT(bool, f), .def = {d}}
#define INT(f, lo, hi, d, r)            {KEY(#f, INT, r), AT(int, f), .min = lo, .max = hi, .def = {d}}
#define U32(f, lo, hi, d, r)            {KEY(#f, U32, r), AT(uint32_t, f), .min = lo, .max = hi, .def = {d}}
#define U64(f, d, r)                    {KEY(#f, U64, r), AT(uint64_t, f), .def = {d}}
#define F64(f, lo, hi, d, r, ...)       F64_AS(#f, f, lo, hi, d, r, __VA_ARGS__)
#define F64_AS(p, f, lo, hi, d, r, ...) {KEY(p, F64, r), AT(double, f), .min = lo, .max = hi, .def = {d}, __VA_ARGS__}
#define ENUM(f, nm, d, r, ...)          {KEY(#f, ENUM, r), AT_ENUM(f), .names = nm, .def = {d}, __VA_ARGS__}
#define NAME(f, nm, d, r)               {KEY(#f, NAME, r), AT_N(char, f), .names = nm, .sdef = d}
#define STR(f, d, r)                    {KEY(#f, STR, r), AT_N(char, f), .sdef = d}
#define PATH(f, d, r)                   {KEY(#f, PATH, r), AT_N(char, f), .sdef = d}
#define TABLE(f, r, ...)                {KEY(#f, TABLE, r), AT(struct cfg_table, f), __VA_ARGS__}
#define ARGS_AS(p, f, r)                {KEY(p, ARGS, r), AT(char *, f), .sdef = "{}"}
#define U32S(f, lo, hi, sh, r, ...)     {KEY(#f, U32S, r), AT_N(uint32_t, f), .min = lo, .max = hi, .shape = sh, __VA_ARGS__}
#define F64S(f, lo, hi, sh, r, ...)     {KEY(#f, F64S, r), AT_N(double, f), .min = lo, .max = hi, .shape = sh, __VA_ARGS__}
#define F64S_AS(p, f, lo, hi, sh, r, ...) {KEY(p, F64S, r), AT_N(double, f), .min = lo, .max = hi, .shape = sh, __VA_ARGS__}
#define U64_AS(p, f, d, r)              {KEY(p, U64, r), AT(uint64_t, f), .def = {d}}
#define LIST(f, cnt, r, ...)            {KEY(#f, LIST, r), AT_N(char *, f), \
                                         .count = _Generic(FIELD(cnt), uint32_t: offsetof(struct vr_config, cnt)), __VA_ARGS__}
#define INTS(f, cnt, lo, hi, sh, r)     {KEY(#f, INTS, r), AT_N(int, f), .min = lo, .max = hi, .shape = sh, \
                                         .count = _Generic(FIELD(cnt), uint32_t: offsetof(struct vr_config, cnt))}
/* clang-format on */

/*
 * The schema. One line per key, in the order of the dump and of "allowed: ..." messages; the
 * path is the field of struct vr_config (F64_AS/ARGS_AS where the YAML path differs) and its
 * sections follow from the dots. To add a key: add the field to struct vr_config, one line
 * here (type, range, default, LIVE or STRUCTURAL) and a row in docs/configuration.md; a rule
 * that involves other keys goes into validate.c. Parsing, defaults, the dump, cfg_get_key,
 * cfg_set_keys, comparison and reload classification follow, and tests/unit/test_cfg_table.c
 * checks the new key's round trip and classification (a key valid only beside others needs
 * a line in its needs[] too).
 */
const struct cfg_key cfg_keys[] = {
        STR(instance, "default", STRUCTURAL),
        ENUM(backend, backend_names, CFG_BACKEND_AUTO, STRUCTURAL),
        INT(gpu.device, 0, 255, 0, STRUCTURAL),
        INT(gpu.streams, 1, 32, 4, STRUCTURAL),
        INTS(gpu.devices, gpu.ndevices, 0, 255, "[d0, d1, ...] of CUDA device ordinals",
             STRUCTURAL),
        INT(cpu.threads, 0, 256, 0, STRUCTURAL),
        ENUM(source.type, source_names, CFG_SOURCE_SYNTH, STRUCTURAL),
        F64(source.rate, 0, 100000, 25, STRUCTURAL),
        PATH(source.replay.path, "", STRUCTURAL),
        ENUM(source.replay.format, replay_format_names, CFG_REPLAY_AUTO, STRUCTURAL),
        BOOL(source.replay.loop, true, STRUCTURAL),
        ENUM(source.replay.on_crc_error, crc_error_names, CFG_CRC_STOP, STRUCTURAL),
        U64(source.synth.seed, 1, STRUCTURAL),
        NAME(source.synth.phantom, phantom_names, "retina", STRUCTURAL),
        F64_AS("source.synth.motion.deg_per_s", source.synth.deg_per_s, -360, 360, 0.25,
               STRUCTURAL),
        F64S_AS("source.synth.motion.shift_mm_per_s", source.synth.shift_mm_per_s, -1000, 1000,
                "[x, y, depth] in mm/s", STRUCTURAL),
        U64_AS("source.synth.motion.jump.epoch", source.synth.jump_epoch, 0, STRUCTURAL),
        F64S_AS("source.synth.motion.jump.shift_mm", source.synth.jump_mm, -100, 100,
                "[x, y, depth] in mm", STRUCTURAL),
        F64_AS("source.synth.motion.jump.deg", source.synth.jump_deg, -360, 360, 0, STRUCTURAL),
        F64S_AS("source.synth.motion.jump.tilt_deg", source.synth.jump_tilt_deg, -30, 30,
                "[about x, about y] in degrees", STRUCTURAL),
        F64S_AS("source.synth.motion.tilt_deg_per_s", source.synth.tilt_deg_per_s, -3600, 3600,
                "[about x, about y] in degrees/s", STRUCTURAL),
        F64_AS("source.synth.motion.tilt_max_deg", source.synth.tilt_max_deg, 0.1, 30, 5,
               STRUCTURAL),
        F64_AS("source.synth.motion.periodic.hz", source.synth.periodic_hz, 0, 1000, 0, STRUCTURAL),
        F64S_AS("source.synth.motion.periodic.shift_mm", source.synth.periodic_mm, -1, 1,
                "[x, y, depth] in mm", STRUCTURAL),
        F64S_AS("source.synth.motion.periodic.deg", source.synth.periodic_deg, -30, 30,
                "[about x, about y, about depth] in degrees", STRUCTURAL),
        F64_AS("source.synth.motion.warp.mm", source.synth.warp_mm, -0.5, 0.5, 0, STRUCTURAL),
        F64_AS("source.synth.motion.warp.radius_mm", source.synth.warp_radius_mm, 0.05, 3, 0.5,
               STRUCTURAL),
        F64_AS("source.synth.motion.warp.hz", source.synth.warp_hz, 0, 1000, 0.5, STRUCTURAL),
        F64S_AS("source.synth.motion.warp.centre_mm", source.synth.warp_centre_mm, -1.5, 1.5,
                "[x, y] in mm", STRUCTURAL, .def = {0.4, -0.3}),
        F64(source.synth.flow.peak_mm_per_s, 0, 1000, 1, STRUCTURAL),
        INT(source.synth.flow.direction, -1, 1, 1, STRUCTURAL),
        F64(source.synth.flow.bulk_um_per_repeat, -10, 10, 0, STRUCTURAL),
        F64(source.synth.flow.decorrelation_um, 0.01, 1000, 10, STRUCTURAL),
        F64(source.synth.flow.blood_tau_us, 0, 1e6, 3000, STRUCTURAL),
        F64(source.synth.mirror_mm, 0, 1.999, 0, STRUCTURAL),
        F64(source.synth.snr_db, 0, 150, 40, STRUCTURAL),
        F64(source.synth.beam_um, 0, 500, 0, STRUCTURAL),
        PATH(source.shim.library, "", STRUCTURAL),
        ARGS_AS("source.shim.args", source.shim.args_yaml, STRUCTURAL),
        INT(source.shim.timeout_ms, 1, 600000, 1000, STRUCTURAL),
        U32(geometry.samples_per_ascan, CFG_K_MIN, CFG_K_MAX, 2048, STRUCTURAL),
        ENUM(geometry.sample_type, sample_names, CFG_SAMPLE_U16, STRUCTURAL),
        U32(geometry.bit_shift, 0, 15, 0, STRUCTURAL),
        U32(geometry.ascans_per_bscan, 1, CFG_NX_MAX, 60, STRUCTURAL),
        U32(geometry.bscans_per_volume, 1, 65536, 60, STRUCTURAL),
        U32S(geometry.stride, 1, 64, "[sx, sy]", STRUCTURAL, .def = {5, 5}),
        U32S(geometry.depth_range, 0, 131072, "[z0, z1]", STRUCTURAL, .def = {0, 1024}),
        BOOL(geometry.bidirectional, false, STRUCTURAL),
        U32(geometry.repeats, 1, CFG_REPEATS_MAX, 1, STRUCTURAL),
        F64(geometry.ascan_period_us, 0, 1e6, 0, STRUCTURAL),
        F64(geometry.bscan_period_us, 0, 1e9, 0, STRUCTURAL),
        F64(geometry.center_wavelength_nm, 0, 1e5, 0, STRUCTURAL),
        F64S(geometry.scan_size_um, 0, 1e6, "[width_x, height_y] in um, 0: unknown", STRUCTURAL),
        F64(geometry.axial_um_per_pixel, 0, 1e4, 0, STRUCTURAL),
        F64(geometry.refractive_index, 0, 4, 0, STRUCTURAL),
        ENUM(preprocess.background.mode, background_names, CFG_BG_ASCAN_MEAN, LIVE),
        F64(preprocess.background.threshold, 0, 1e6, 10, LIVE),
        TABLE(preprocess.background.reference, STRUCTURAL),
        ENUM(preprocess.resample.method, resample_names, CFG_RS_NONE, STRUCTURAL),
        TABLE(preprocess.resample.table, STRUCTURAL,
              WHEN(preprocess.resample.positions, CFG_RSPOS_TABLE)),
        F64S(preprocess.resample.poly, -1e12, 1e12, "[c0, c1, c2, c3]", STRUCTURAL,
             WHEN(preprocess.resample.positions, CFG_RSPOS_POLY)),
        F64S(preprocess.resample.wavelength_nm, -1e12, 1e12, "[l0, l1, l2, l3]", STRUCTURAL,
             WHEN(preprocess.resample.positions, CFG_RSPOS_WAVELENGTH)),
        ENUM(preprocess.window.type, window_names, CFG_WIN_HANN, LIVE),
        F64(preprocess.window.param, 0, 10, 0.4, LIVE),
        F64S(preprocess.dispersion.coeffs, -1e6, 1e6, "[a2, a3] in radians", LIVE,
             WHEN(preprocess.dispersion.kind, CFG_DISP_COEFFS), .structural_if = dispersion_on_off),
        TABLE(preprocess.dispersion.table, LIVE, WHEN(preprocess.dispersion.kind, CFG_DISP_TABLE),
              .structural_if = dispersion_on_off),
        U32(preprocess.zero_pad, 1, 4, 1, STRUCTURAL),
        F64S(preprocess.db_range, -400, 400, "[lo, hi] in dB", LIVE, .def = {0, 100}),
        BOOL(preprocess.flip.x, false, STRUCTURAL),
        BOOL(preprocess.flip.z, false, STRUCTURAL),
        ENUM(reconstruct.mode, recon_mode_names, CFG_RECON_NONCUMULATIVE, LIVE,
             .structural_if = output_size),
        F64(reconstruct.spatial_sigma, CFG_SPATIAL_SIGMA_MIN, 100, 1, LIVE),
        ENUM(reconstruct.temporal, temporal_names, CFG_TEMPORAL_LINEAR, LIVE),
        F64(reconstruct.tau, 0, 1e6, 5, LIVE, .gt_min = true),
        ENUM(reconstruct.combine, combine_names, CFG_COMBINE_SUM, LIVE),
        F64(reconstruct.adaptive.tolerance, 0, 1, 0.1, LIVE, .gt_min = true),
        U32(reconstruct.adaptive.depth_half_window, 0, 127, 4, LIVE),
        F64(reconstruct.adaptive.speckle_tolerance, 0, 1, 0.05, LIVE),
        BOOL(reconstruct.adaptive.jump_recovery, true, LIVE),
        BOOL(reconstruct.compensated.estimate_pose, true, LIVE),
        ENUM(output.dtype, dtype_names, CFG_DTYPE_U8, STRUCTURAL),
        U32(output.slots, 2, 64, 4, STRUCTURAL),
        LIST(output.channels, output.nchannels, STRUCTURAL, .names = channel_names,
             .sdef = "structure"),
        ENUM(functional.angio.method, angio_method_names, CFG_ANGIO_CDV, LIVE),
        F64S(functional.angio.range, -1e6, 1e6, "[lo, hi]", LIVE,
             WHEN(functional.angio.range_given, 1)),
        U32(functional.axial_half_window, 0, 64, 2, LIVE),
        F64(functional.mask_db, -400, 400, 0, LIVE, WHEN(functional.mask_given, 1)),
        ENUM(functional.doppler.axis, doppler_axis_names, CFG_DOPPLER_BSCAN, LIVE,
             WHEN(functional.doppler.axis_given, 1)),
        BOOL(functional.doppler.bulk, true, LIVE),
        U32(pipeline.ring_bscans, 1, 65536, 256, STRUCTURAL),
        ENUM(pipeline.overflow, overflow_names, CFG_OVERFLOW_DROP_EPOCH, STRUCTURAL),
        PATH(ipc.run_dir, "/run/volrec", STRUCTURAL),
        LIST(ipc.pub, ipc.npub, STRUCTURAL),
        U32(ipc.status_interval_ms, 50, 60000, 1000, LIVE),
        U32(ipc.hwm, 1, 100000, 16, STRUCTURAL),
        U32(ipc.max_readers, 1, 1024, 64, STRUCTURAL),
        BOOL(ipc.keep_shm, false, STRUCTURAL),
        PATH(ipc.curve_secret_key, "", STRUCTURAL),
        PATH(ipc.curve_public_key, "", STRUCTURAL),
        ENUM(log.level, log_level_names, CFG_LOG_INFO, LIVE),
        BOOL(view.enabled, true, STRUCTURAL),
        U32S(view.slab, 0, 131072, "[za, zb]", LIVE, .def = {0, 1024}),
        U32S(view.position, 0, 1048576, "[y0, x0, z0]", LIVE, .def = {150, 150, 512}),
        U32S(view.render.size, 1, 1024, "[H, W] pixels", LIVE, .def = {256, 256}),
        /* docs/algorithms.md §4.4: depth down, across the B-scans from 20 degrees above */
        F64S(view.render.angles_deg, -360, 360, "[azimuth, elevation] in degrees", LIVE,
             .def = {30, -70}),
        F64S(view.render.spacing, 0, 1e6, "[dx, dy, dz]", LIVE, .gt_min = true, .def = {1, 1, 1}),
        F64(view.render.step, 0, 1e6, 0, LIVE),
        U32(view.render.every, 0, 1000, 0, LIVE),
        U32(view.volume.max_side, 0, 256, 128, LIVE), /* 256: VOLREC_VOLUME_MAX */
        ENUM(view.volume.reduce, volume_reduce_names, CFG_VOLUME_MAX, LIVE),
        PATH(record.dir, "/var/lib/volrec/recordings", STRUCTURAL),
        F64(record.min_free_gb, 0, 1e9, 1, STRUCTURAL),
        U32(record.queue_mb, 1, 65536, 256, STRUCTURAL),
        STR(record.name, "", STRUCTURAL),
        U64(record.epochs, 0, STRUCTURAL),
        F64(record.seconds, 0, 1e9, 0, STRUCTURAL),
};
const size_t cfg_nkeys = sizeof(cfg_keys) / sizeof(cfg_keys[0]);
_Static_assert(sizeof(cfg_keys) / sizeof(cfg_keys[0]) <= CFG_KEYS_MAX, "CFG_KEYS_MAX too small");

/* ---- paths ------------------------------------------------------------------------------ */

const struct cfg_key *cfg_key_find(const char *path)
{
	for (size_t i = 0; i < cfg_nkeys; i++)
		if (!strcmp(cfg_keys[i].path, path))
			return &cfg_keys[i];
	return NULL;
}

bool cfg_path_under(const char *path, const char *top)
{
	size_t n = strlen(top);
	return !n || (!strncmp(path, top, n) && (path[n] == '\0' || path[n] == '.'));
}

size_t cfg_children(const char *path, struct cfg_child *out)
{
	size_t skip = *path ? strlen(path) + 1 : 0, n = 0;

	for (size_t i = 0; i < cfg_nkeys; i++) {
		const char *p = cfg_keys[i].path, *name = p + skip, *dot;
		if (!strcmp(p, path) || !cfg_path_under(p, path))
			continue;
		dot = strchr(name, '.');
		struct cfg_child c = {name, dot ? (size_t)(dot - name) : strlen(name),
		                      dot ? NULL : &cfg_keys[i]};
		bool seen = false;
		for (size_t j = 0; j < n && !seen; j++)
			seen = out[j].len == c.len && !memcmp(out[j].name, c.name, c.len);
		if (!seen)
			out[n++] = c;
	}
	return n;
}

bool cfg_is_section(const char *path)
{
	struct cfg_child ch[CFG_KEYS_MAX];
	return cfg_children(path, ch) > 0;
}

void cfg_child_names(const char *path, char *buf, size_t len)
{
	struct cfg_child ch[CFG_KEYS_MAX];
	size_t n = cfg_children(path, ch), off = 0;

	buf[0] = '\0';
	for (size_t i = 0; i < n && off < len; i++) {
		int w = snprintf(buf + off, len - off, "%s%.*s", i ? ", " : "", (int)ch[i].len,
		                 ch[i].name);
		if (w < 0)
			break;
		off += (size_t)w;
	}
}

void cfg_unknown_key(const char *path, char *buf, size_t len)
{
	char top[CFG_KEY_MAX] = "", bad[CFG_KEY_MAX], allowed[512];
	const char *p = path;

	for (;;) {
		size_t n = strcspn(p, ".");
		snprintf(bad, sizeof(bad), "%s%s%.*s", top, *top ? "." : "", (int)n, p);
		if (cfg_key_find(bad) && p[n]) {
			snprintf(buf, len, "%s: unknown key (%s has no keys below it)", path, bad);
			return;
		}
		if (!n || !p[n] || !cfg_is_section(bad))
			break;
		snprintf(top, sizeof(top), "%s", bad);
		p += n + 1;
	}
	cfg_child_names(top, allowed, sizeof(allowed));
	snprintf(buf, len, "%s: unknown key (allowed%s%s: %s)", bad, *top ? " in " : "", top,
	         allowed);
}

/* ---- values ----------------------------------------------------------------------------- */

/* shim.args when absent; never freed. */
static char args_empty[] = "{}";

static const char *args_text(const struct cfg_key *k, const struct vr_config *c)
{
	const char *s = *(char **)cfg_at(c, k);
	return s ? s : args_empty;
}

bool cfg_key_present(const struct cfg_key *k, const struct vr_config *c)
{
	if (k->when && *(const int *)((const char *)c + k->when) != k->when_is)
		return false;
	if (k->type == CFG_T_PATH)
		return *(const char *)cfg_at(c, k) != '\0';
	if (k->type == CFG_T_TABLE)
		return ((const struct cfg_table *)cfg_at(c, k))->path[0] != '\0';
	if (k->type == CFG_T_INTS)
		return *(const uint32_t *)((const char *)c + k->count) != 0;
	return true;
}

bool cfg_key_equal(const struct cfg_key *k, const struct vr_config *a, const struct vr_config *b)
{
	const void *x = cfg_at(a, k), *y = cfg_at(b, k);
	bool present = cfg_key_present(k, a);

	if (present != cfg_key_present(k, b))
		return false;
	if (!present)
		return true;
	switch (k->type) {
	case CFG_T_NAME:
	case CFG_T_STR:
	case CFG_T_PATH:
		return !strcmp(x, y);
	case CFG_T_TABLE: {
		const struct cfg_table *s = x, *t = y;
		if (strcmp(s->path, t->path) || s->len != t->len || !s->data != !t->data)
			return false;
		return !s->data || !memcmp(s->data, t->data, s->len * sizeof(double));
	}
	case CFG_T_ARGS:
		return !strcmp(args_text(k, a), args_text(k, b));
	case CFG_T_LIST: {
		uint32_t n = *(const uint32_t *)((const char *)a + k->count);
		if (n != *(const uint32_t *)((const char *)b + k->count))
			return false;
		for (uint32_t i = 0; i < n && i < k->n; i++)
			if (strcmp((const char *)x + i * CFG_PATH_MAX,
			           (const char *)y + i * CFG_PATH_MAX))
				return false;
		return true;
	}
	case CFG_T_INTS: {
		uint32_t n = *(const uint32_t *)((const char *)a + k->count);
		return n == *(const uint32_t *)((const char *)b + k->count) && n <= k->n &&
		       !memcmp(x, y, n * sizeof(int));
	}
	case CFG_T_F64:
		return *(const double *)x == *(const double *)y;
	default: /* integers, booleans, enums, sequences: no padding inside */
		return !memcmp(x, y, k->size);
	}
}

void cfg_key_reset(const struct cfg_key *k, struct vr_config *c)
{
	void *p = cfg_at(c, k);

	if (k->type == CFG_T_TABLE)
		free(((struct cfg_table *)p)->data);
	else if (k->type == CFG_T_ARGS && *(char **)p != args_empty)
		free(*(char **)p);
	memset(p, 0, k->size);
	if (k->type == CFG_T_ARGS)
		*(char **)p = args_empty;
	else if (k->type == CFG_T_LIST && k->sdef) { /* a list of one entry by default */
		snprintf(p, CFG_PATH_MAX, "%s", k->sdef);
		*(uint32_t *)((char *)c + k->count) = 1;
	} else if (k->type == CFG_T_LIST || k->type == CFG_T_INTS)
		*(uint32_t *)((char *)c + k->count) = 0;
	else if (k->sdef)
		snprintf(p, k->size, "%s", k->sdef);
	for (size_t i = 0; i < (k->n ? k->n : 1) && i < 4; i++) {
		if (k->type == CFG_T_BOOL)
			*(bool *)p = k->def[0] != 0;
		else if (k->type == CFG_T_INT || k->type == CFG_T_ENUM)
			*(int *)p = (int)k->def[0];
		else if (k->type == CFG_T_U32 || k->type == CFG_T_U32S)
			((uint32_t *)p)[i] = (uint32_t)k->def[i];
		else if (k->type == CFG_T_U64)
			*(uint64_t *)p = (uint64_t)k->def[0];
		else if (k->type == CFG_T_F64 || k->type == CFG_T_F64S)
			((double *)p)[i] = k->def[i];
	}
}

/* ---- the configuration as a whole ------------------------------------------------------- */

void cfg_defaults(struct vr_config *c)
{
	memset(c, 0, sizeof(*c));
	for (size_t i = 0; i < cfg_nkeys; i++)
		cfg_key_reset(&cfg_keys[i], c);
}

void cfg_free(struct vr_config *cfg)
{
	if (!cfg)
		return;
	for (size_t i = 0; i < cfg_nkeys; i++)
		if (cfg_keys[i].type == CFG_T_TABLE || cfg_keys[i].type == CFG_T_ARGS)
			cfg_key_reset(&cfg_keys[i], cfg);
	cfg_defaults(cfg);
}

int cfg_copy(struct vr_config *dst, const struct vr_config *src)
{
	*dst = *src;
	/* first let dst own nothing, so that a failure half-way frees only its own copies */
	for (size_t i = 0; i < cfg_nkeys; i++) {
		const struct cfg_key *k = &cfg_keys[i];
		if (k->type == CFG_T_TABLE)
			((struct cfg_table *)cfg_at(dst, k))->data = NULL;
		else if (k->type == CFG_T_ARGS)
			*(char **)cfg_at(dst, k) = args_empty;
	}
	for (size_t i = 0; i < cfg_nkeys; i++) {
		const struct cfg_key *k = &cfg_keys[i];
		if (k->type == CFG_T_TABLE) {
			const struct cfg_table *s = cfg_at(src, k);
			struct cfg_table *t = cfg_at(dst, k);
			if (s->data && !(t->data = malloc(s->len * sizeof(double))))
				goto out_nomem;
			if (s->data)
				memcpy(t->data, s->data, s->len * sizeof(double));
		} else if (k->type == CFG_T_ARGS && strcmp(args_text(k, src), args_empty)) {
			char **t = cfg_at(dst, k);
			if (!(*t = strdup(args_text(k, src)))) {
				*t = args_empty;
				goto out_nomem;
			}
		}
	}
	return 0;

out_nomem:
	cfg_free(dst);
	return -ENOMEM;
}

bool cfg_equal(const struct vr_config *a, const struct vr_config *b)
{
	for (size_t i = 0; i < cfg_nkeys; i++)
		if (!cfg_key_equal(&cfg_keys[i], a, b))
			return false;
	return true;
}

const struct cfg_key *cfg_structural_key(const struct vr_config *a, const struct vr_config *b,
                                         const char **why)
{
	for (size_t i = 0; i < cfg_nkeys; i++) {
		const struct cfg_key *k = &cfg_keys[i];
		if (cfg_key_equal(k, a, b))
			continue;
		*why = k->reload == CFG_LIVE ? NULL : "changes as well, and is structural";
		if (k->reload == CFG_LIVE && k->structural_if)
			*why = k->structural_if(a, b);
		if (*why)
			return k;
	}
	return NULL;
}

bool cfg_is_structural_change(const struct vr_config *a, const struct vr_config *b)
{
	const char *why;
	return cfg_structural_key(a, b, &why) != NULL;
}

/* ---- names ------------------------------------------------------------------------------ */

static const char *name_of(const char *const *names, int v)
{
	for (int i = 0; names[i]; i++)
		if (i == v)
			return names[i];
	return "?";
}

#define NAME_FN(stem, type)                                                                        \
	const char *cfg_##stem##_name(type v)                                                      \
	{                                                                                          \
		return name_of(stem##_names, (int)v);                                              \
	}
CFG_NAMED_ENUMS(NAME_FN)
#undef NAME_FN
