/* SPDX-License-Identifier: MIT */
/*
 * Checks that involve more than one key (geometry, sizes, mutually exclusive keys, endpoints),
 * the files a configuration names, and loading of its tables (one float per line).
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config/internal.h"

/* ---- tables ----------------------------------------------------------------------------- */

/* The length of a table: exactly n values, else an error naming key. */
static int table_length(struct cfg_ctx *ctx, const char *key, const char *path, size_t count,
                        size_t n)
{
	if (count == n)
		return 0;
	return cfg_error(ctx, -EINVAL, key,
	                 "the table %s has %zu value%s (exactly %zu, one per spectral sample: "
	                 "geometry.samples_per_ascan)",
	                 path, count, count == 1 ? "" : "s", n);
}

/* Read a table file (one float per line) of exactly n finite values into t->data. */
static int table_read(struct cfg_ctx *ctx, struct cfg_table *t, size_t n, const char *key)
{
	char *line = NULL;
	size_t cap = 0, count = 0, lineno = 0;
	ssize_t got;
	struct stat st;
	FILE *f;
	int fd, rc = 0;

	/* O_NONBLOCK: a FIFO must not block the open; a device (/dev/zero) or a file of
	 * endless lines must not be read without bound */
	fd = open(t->path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0)
		return cfg_error(ctx, -errno, key,
		                 "cannot open the table file %s: %s (a readable "
		                 "file with one number per line)",
		                 t->path, strerror(errno));
	f = NULL;
	if (fstat(fd, &st) < 0)
		rc = cfg_error(ctx, -errno, key, "cannot stat the table file %s: %s", t->path,
		               strerror(errno));
	else if (!S_ISREG(st.st_mode))
		rc = cfg_error(ctx, -EINVAL, key,
		               "the table file %s is not a regular file (a text file with one "
		               "number per line)",
		               t->path);
	else if (st.st_size > CFG_TABLE_FILE_MAX)
		rc = cfg_error(ctx, -EFBIG, key,
		               "the table file %s is %lld bytes, larger than the %u allowed",
		               t->path, (long long)st.st_size, CFG_TABLE_FILE_MAX);
	else if (!(f = fdopen(fd, "r")))
		rc = cfg_error(ctx, -errno, key, "cannot read the table file %s: %s", t->path,
		               strerror(errno));
	if (rc) {
		close(fd);
		return rc;
	}
	t->data = calloc(n, sizeof(double));
	if (!t->data) {
		rc = cfg_error(ctx, -ENOMEM, key, "out of memory for the table %s", t->path);
		goto out_close;
	}
	while ((got = getline(&line, &cap, f)) >= 0) {
		char *s = line, *end;
		double v;

		lineno++;
		if (memchr(line, '\0', (size_t)got)) {
			rc = cfg_error(ctx, -EINVAL, key,
			               "%s:%zu: contains a NUL byte (a text file "
			               "with one number per line)",
			               t->path, lineno);
			goto out_free;
		}
		while (isspace((unsigned char)*s))
			s++;
		if (!*s || *s == '#')
			continue;
		end = s + strlen(s);
		while (end > s && isspace((unsigned char)end[-1]))
			*--end = '\0';
		errno = 0;
		v = strtod(s, &end);
		if (end == s || *end) {
			rc = cfg_error(ctx, -EINVAL, key,
			               "%s:%zu: not a number (one number per line; blank lines "
			               "and # comments allowed)",
			               t->path, lineno);
			goto out_free;
		}
		if (!isfinite(v)) {
			rc = cfg_error(ctx, -ERANGE, key,
			               "%s:%zu: not a finite number (finite values only)", t->path,
			               lineno);
			goto out_free;
		}
		if (count < n)
			t->data[count] = v;
		count++;
	}
	if (ferror(f)) {
		rc = cfg_error(ctx, -EIO, key, "cannot read the table file %s: %s", t->path,
		               strerror(errno));
		goto out_free;
	}
	rc = table_length(ctx, key, t->path, count, n);
	if (!rc)
		t->len = n;
out_free:
	if (rc) {
		free(t->data);
		t->data = NULL;
	}
	free(line);
out_close:
	fclose(f);
	return rc;
}

/* The table at key: read when its file name was written now, else already loaded
 * (cfg_set_keys) or set in code (cfg_check): n values long, each finite, as a read checks. */
static int table_load(struct cfg_ctx *ctx, struct cfg_table *t, size_t n, const char *key)
{
	int rc;

	if (cfg_mark_of(ctx, key).line)
		return table_read(ctx, t, n, key);
	rc = table_length(ctx, key, t->path, t->data ? t->len : 0, n);
	for (size_t j = 0; !rc && j < n; j++)
		if (!isfinite(t->data[j]))
			rc = cfg_error(ctx, -ERANGE, key,
			               "value %zu of the table %s is not a finite number (finite "
			               "values only)",
			               j + 1, t->path);
	return rc;
}

/* ---- helpers ---------------------------------------------------------------------------- */

/* A regular file we can read, else an error naming key. Files that were checked when they
 * were given are not looked at again (keep_files). */
static int check_readable(struct cfg_ctx *ctx, const char *key, const char *path, const char *what)
{
	struct stat st;
	if (ctx->keep_files && !cfg_mark_of(ctx, key).line)
		return 0;
	if (stat(path, &st) < 0)
		return cfg_error(ctx, -errno, key, "%s %s: %s (an existing, readable file)", what,
		                 path, strerror(errno));
	if (!S_ISREG(st.st_mode))
		return cfg_error(ctx, -EINVAL, key,
		                 "%s %s is not a regular file (an existing, "
		                 "readable file)",
		                 what, path);
	if (access(path, R_OK) < 0)
		return cfg_error(ctx, -errno, key, "%s %s: %s (an existing, readable file)", what,
		                 path, strerror(errno));
	return 0;
}

/* Keys a and b given together where one is allowed: -EINVAL at the later of them in the file,
 * naming the other, hint saying what is allowed. */
static int given_together(struct cfg_ctx *ctx, const char *a, const char *b, const char *hint)
{
	struct cfg_mark ma = cfg_mark_of(ctx, a), mb = cfg_mark_of(ctx, b);
	bool b_later = ma.line != mb.line ? mb.line > ma.line : mb.col >= ma.col;

	return cfg_error(ctx, -EINVAL, b_later ? b : a, "given together with %s (%s)",
	                 b_later ? a : b, hint);
}

static int mul_check(uint64_t *acc, uint64_t v)
{
	return __builtin_mul_overflow(*acc, v, acc) ? -EOVERFLOW : 0;
}

static double gib(uint64_t b)
{
	return (double)b / (double)(1ull << 30);
}

/* ---- sections --------------------------------------------------------------------------- */

static int check_instance(struct cfg_ctx *ctx)
{
	const char *s = ctx->cfg->instance;
	size_t len = strlen(s);
	if (!len || len > 63)
		return cfg_error(ctx, -EINVAL, "instance",
		                 "'%s' has %zu characters (1 to 63 of "
		                 "A-Z a-z 0-9 _ -)",
		                 s, len);
	for (size_t i = 0; i < len; i++)
		if (!isalnum((unsigned char)s[i]) && s[i] != '_' && s[i] != '-')
			return cfg_error(ctx, -EINVAL, "instance",
			                 "'%s' contains '%c' (1 to 63 "
			                 "of A-Z a-z 0-9 _ -)",
			                 s, s[i]);
	return 0;
}

static int check_source(struct cfg_ctx *ctx)
{
	struct vr_config *c = ctx->cfg;

	if (c->source.rate > 0 && c->source.rate < CFG_RATE_MIN)
		return cfg_error(
		        ctx, -ERANGE, "source.rate",
		        "%g epochs/s is below the slowest pace, %g (one epoch every %g s); "
		        "0 is as fast as the pipeline takes them",
		        c->source.rate, CFG_RATE_MIN, 1 / CFG_RATE_MIN);
	if (c->source.type == CFG_SOURCE_REPLAY) {
		if (!c->source.replay.path[0])
			return cfg_error(ctx, -EINVAL, "source.replay.path",
			                 "missing (required when source.type is replay)");
		return check_readable(ctx, "source.replay.path", c->source.replay.path,
		                      "replay file");
	}
	if (c->source.type == CFG_SOURCE_SHIM) {
		if (!c->source.shim.library[0])
			return cfg_error(ctx, -EINVAL, "source.shim.library",
			                 "missing (required when source.type is shim)");
		if (c->pipeline.overflow == CFG_OVERFLOW_BLOCK)
			return cfg_error(ctx, -EINVAL, "pipeline.overflow",
			                 "block would stall a hardware source (drop_epoch with "
			                 "source.type shim; block only with synth or replay)");
		if (!strchr(c->source.shim.library, '/'))
			return 0; /* a shipped shim's short name (`genicam`): src/shim.c finds it */
		return check_readable(ctx, "source.shim.library", c->source.shim.library,
		                      "shim library");
	}
	return 0;
}

/* The sizes the geometry makes: the output volume, a low-resolution float volume, the slots,
 * the ring; each within its bound. */
static int check_sizes(struct cfg_ctx *ctx)
{
	const struct vr_config *c = ctx->cfg;
	uint64_t out = c->geometry.bscans_per_volume, low = out;
	int ovf = 0;

	if (c->reconstruct.mode != CFG_RECON_NONE)
		ovf |= mul_check(&out, c->geometry.stride[1]);
	ovf |= mul_check(&out, c->geometry.ascans_per_bscan);
	if (c->reconstruct.mode != CFG_RECON_NONE)
		ovf |= mul_check(&out, c->geometry.stride[0]);
	ovf |= mul_check(&out, cfg_nz(c));
	ovf |= mul_check(&low, c->geometry.ascans_per_bscan);
	ovf |= mul_check(&low, cfg_nz(c));
	ovf |= mul_check(&low, sizeof(float));
	if (ovf || out > CFG_MAX_VOLUME_BYTES || out > SIZE_MAX)
		return cfg_error(
		        ctx, -EOVERFLOW, "geometry",
		        "the output volume (%u x %u x %u x %u x %u voxels) exceeds %.0f GiB "
		        "(make the geometry, stride or depth_range smaller)",
		        c->geometry.bscans_per_volume,
		        c->reconstruct.mode != CFG_RECON_NONE ? c->geometry.stride[1] : 1,
		        c->geometry.ascans_per_bscan,
		        c->reconstruct.mode != CFG_RECON_NONE ? c->geometry.stride[0] : 1,
		        cfg_nz(c), gib(CFG_MAX_VOLUME_BYTES));
	if (low > CFG_MAX_VOLUME_BYTES)
		return cfg_error(
		        ctx, -EOVERFLOW, "geometry",
		        "the low-resolution float volume (%.1f GiB) exceeds %.0f GiB (make "
		        "the geometry or depth_range smaller)",
		        gib(low), gib(CFG_MAX_VOLUME_BYTES));
	uint64_t slot = (out + CFG_SLOT_ALIGN - 1) / CFG_SLOT_ALIGN * CFG_SLOT_ALIGN;
	if (slot * c->output.slots > CFG_MAX_SLOTS_BYTES)
		return cfg_error(
		        ctx, -EOVERFLOW, "output.slots",
		        "%u slots of %.2f GiB need %.1f GiB of shared memory (at most %.0f "
		        "GiB)",
		        c->output.slots, gib(slot), gib(slot * c->output.slots),
		        gib(CFG_MAX_SLOTS_BYTES));
	uint64_t ring = (uint64_t)c->pipeline.ring_bscans * cfg_bscan_bytes(c);
	if (!ctx->backend_only && ring > CFG_MAX_RING_BYTES)
		return cfg_error(ctx, -EOVERFLOW, "pipeline.ring_bscans",
		                 "%u B-scans of %llu bytes need %.1f GiB (at most %.0f GiB; at "
		                 "least 2 x geometry.bscans_per_volume B-scans)",
		                 c->pipeline.ring_bscans, (unsigned long long)cfg_bscan_bytes(c),
		                 gib(ring), gib(CFG_MAX_RING_BYTES));
	return 0;
}

static int check_geometry(struct cfg_ctx *ctx)
{
	struct vr_config *c = ctx->cfg;
	struct cfg_mark m;
	uint32_t zp = c->preprocess.zero_pad, n, half;

	if (c->geometry.sample_type == CFG_SAMPLE_F32 && c->geometry.bit_shift)
		return cfg_error(ctx, -EINVAL, "geometry.bit_shift",
		                 "%u with sample_type f32 (0; a shift applies to integer samples "
		                 "only)",
		                 c->geometry.bit_shift);
	if (cfg_sample_packed(c->geometry.sample_type) && c->geometry.samples_per_ascan % 2)
		return cfg_error(ctx, -EINVAL, "geometry.samples_per_ascan",
		                 "%u is odd with sample_type %s (two samples share three bytes: K "
		                 "must be even)",
		                 c->geometry.samples_per_ascan,
		                 cfg_sample_name(c->geometry.sample_type));
	if (cfg_sample_packed(c->geometry.sample_type) && c->geometry.bit_shift > 11)
		return cfg_error(ctx, -ERANGE, "geometry.bit_shift",
		                 "%u with sample_type %s (0..11: the samples have 12 bits)",
		                 c->geometry.bit_shift, cfg_sample_name(c->geometry.sample_type));
	if (zp != 1 && zp != 2 && zp != 4)
		return cfg_error(ctx, -EINVAL, "preprocess.zero_pad",
		                 "%u is not allowed (1, 2 or 4)", zp);
	n = c->geometry.samples_per_ascan * zp;
	half = n / 2;
	if (!cfg_given(ctx, "geometry.depth_range")) {
		c->geometry.depth_range[0] = 0;
		c->geometry.depth_range[1] = half;
	} else {
		uint32_t z0 = c->geometry.depth_range[0], z1 = c->geometry.depth_range[1];
		if (z0 >= z1)
			return cfg_error(ctx, -EINVAL, "geometry.depth_range",
			                 "[%u, %u] is empty (z0 < z1 <= N/2 = %u)", z0, z1, half);
		if (z1 > half)
			return cfg_error(ctx, -ERANGE, "geometry.depth_range[1]",
			                 "%u is beyond N/2 = %u (N = samples_per_ascan %u x "
			                 "zero_pad %u; z1 <= %u)",
			                 z1, half, c->geometry.samples_per_ascan, zp, half);
	}
	if (c->geometry.refractive_index != 0 && c->geometry.refractive_index < 1)
		return cfg_error(ctx, -ERANGE, "geometry.refractive_index",
		                 "%g is below 1 (0: unknown, else a tissue's group index, 1..4)",
		                 c->geometry.refractive_index);
	if (cfg_stride_area(c) > CFG_MAX_STRIDE_AREA)
		return cfg_error(ctx, -ERANGE, "geometry.stride",
		                 "[%u, %u] interlaces %u epochs (sx x sy at most %d)",
		                 c->geometry.stride[0], c->geometry.stride[1], cfg_stride_area(c),
		                 CFG_MAX_STRIDE_AREA);

	if (c->geometry.ascan_period_us != 0 && c->geometry.bscan_period_us != 0 &&
	    c->geometry.bscan_period_us <
	            c->geometry.ascan_period_us * c->geometry.ascans_per_bscan)
		return cfg_error(ctx, -ERANGE, "geometry.bscan_period_us",
		                 "%g is shorter than a B-scan of %u A-scans at "
		                 "geometry.ascan_period_us %g (%g us): a position cannot be "
		                 "scanned again before its B-scan ends",
		                 c->geometry.bscan_period_us, c->geometry.ascans_per_bscan,
		                 c->geometry.ascan_period_us,
		                 c->geometry.ascan_period_us * c->geometry.ascans_per_bscan);
	if (c->geometry.bscans_per_volume * (uint64_t)c->geometry.repeats > 65536)
		return cfg_error(ctx, -ERANGE, "geometry.repeats",
		                 "%u x geometry.bscans_per_volume %u = %llu raw B-scans an epoch "
		                 "(at most 65536)",
		                 c->geometry.repeats, c->geometry.bscans_per_volume,
		                 (unsigned long long)c->geometry.bscans_per_volume *
		                         c->geometry.repeats);

	/* ring: one epoch (ny x M raw B-scans) processed while the next is acquired */
	uint64_t need = 2ull * cfg_raw_bscans(c);
	if (!ctx->backend_only && c->pipeline.ring_bscans < need) {
		m = cfg_mark_of(ctx, "pipeline.ring_bscans");
		if (!m.line)
			m = cfg_mark_of(ctx, "geometry.bscans_per_volume");
		if (!m.line)
			m = ctx->root;
		if (c->geometry.repeats > 1)
			return cfg_error_at(
			        ctx, -ERANGE, m, "pipeline.ring_bscans",
			        "%u%s is too small (at least 2 x geometry.bscans_per_volume x "
			        "geometry.repeats = %llu raw B-scans: one epoch is processed while "
			        "the next is acquired; at most 65536)",
			        c->pipeline.ring_bscans,
			        cfg_given(ctx, "pipeline.ring_bscans") ? "" : " (the default)",
			        (unsigned long long)need);
		return cfg_error_at(ctx, -ERANGE, m, "pipeline.ring_bscans",
		                    "%u%s is too small (at least 2 x geometry.bscans_per_volume = "
		                    "%llu: one epoch is processed while the next is acquired; at "
		                    "most 65536)",
		                    c->pipeline.ring_bscans,
		                    cfg_given(ctx, "pipeline.ring_bscans") ? "" : " (the default)",
		                    (unsigned long long)need);
	}

	return check_sizes(ctx);
}

int cfg_wavelength_check(const double l[4], uint32_t k, char *err, size_t errlen)
{
	double prev = 0, dir = 0, prevk = 0;

	for (uint32_t i = 0; i < k; i++) {
		double x = i, lam = l[0] + x * (l[1] + x * (l[2] + x * l[3]));
		double kap = 2.0 * M_PI / lam; /* the wavenumber the resampling inverts */
		if (!(lam > 0) || !isfinite(lam)) {
			snprintf(err, errlen,
			         "gives a wavelength of %g nm at pixel %u (positive wavelengths, "
			         "strictly monotone over the %u pixels)",
			         lam, i, k);
			return -ERANGE;
		}
		if (i) {
			double d = lam - prev;
			if (d == 0 || (dir != 0 && (d > 0) != (dir > 0))) {
				snprintf(err, errlen,
				         "is not strictly monotone at pixel %u (%.10g nm after "
				         "%.10g nm; strictly increasing or decreasing over all "
				         "%u pixels)",
				         i, lam, prev, k);
				return -EINVAL;
			}
			/* lambda strictly monotone gives a monotone 2 pi / lambda, strictly so
			 * unless two wavelengths are too close for double precision */
			if (kap == prevk) {
				snprintf(
				        err, errlen,
				        "gives the same wavenumber 2*pi/lambda at pixels %u and %u "
				        "(%.17g nm and %.17g nm: too close to tell apart)",
				        i - 1, i, prev, lam);
				return -EINVAL;
			}
			dir = d;
		}
		prev = lam;
		prevk = kap;
	}
	return 0;
}

static int check_resample(struct cfg_ctx *ctx)
{
	struct vr_config *c = ctx->cfg;
	static const char *const keys[] = {"preprocess.resample.table", "preprocess.resample.poly",
	                                   "preprocess.resample.wavelength_nm"};
	static const enum cfg_rs_pos kinds[] = {CFG_RSPOS_TABLE, CFG_RSPOS_POLY,
	                                        CFG_RSPOS_WAVELENGTH};
	const char *first = NULL;
	uint32_t k = c->geometry.samples_per_ascan;
	int given = 0;

	for (int i = 0; i < 3; i++) {
		if (!cfg_given(ctx, keys[i]))
			continue;
		if (c->preprocess.resample.method == CFG_RS_NONE)
			return cfg_error(ctx, -EINVAL, keys[i],
			                 "given but preprocess.resample.method is none (set a "
			                 "method: linear, cubic or spline; or remove this key)");
		if (first)
			return given_together(ctx, first, keys[i],
			                      "exactly one of table, poly, wavelength_nm");
		first = keys[i];
		c->preprocess.resample.positions = kinds[i];
		given++;
	}
	if (c->preprocess.resample.method == CFG_RS_NONE) {
		c->preprocess.resample.positions = CFG_RSPOS_NONE;
		return 0;
	}
	if (!given)
		return cfg_error(
		        ctx, -EINVAL, "preprocess.resample",
		        "method %s needs the sample positions (exactly one of table, poly, "
		        "wavelength_nm)",
		        cfg_resample_name(c->preprocess.resample.method));
	switch (c->preprocess.resample.positions) {
	case CFG_RSPOS_TABLE:
		return table_load(ctx, &c->preprocess.resample.table, k,
		                  "preprocess.resample.table");
	case CFG_RSPOS_POLY:
		for (uint32_t j = 0; j < k; j++) {
			const double *p = c->preprocess.resample.poly;
			double u = (double)j / (k - 1);
			double v = p[0] + u * (p[1] + u * (p[2] + u * p[3]));
			if (!isfinite(v))
				return cfg_error(ctx, -ERANGE, "preprocess.resample.poly",
				                 "gives a non-finite position at sample %u (finite "
				                 "positions)",
				                 j);
		}
		return 0;
	case CFG_RSPOS_WAVELENGTH: {
		char why[CFG_ERR_MAX];
		int rc = cfg_wavelength_check(c->preprocess.resample.wavelength_nm, k, why,
		                              sizeof(why));
		return rc ? cfg_error(ctx, rc, "preprocess.resample.wavelength_nm", "%s", why) : 0;
	}
	default:
		return 0;
	}
}

static int check_preprocess(struct cfg_ctx *ctx)
{
	struct vr_config *c = ctx->cfg;
	uint32_t k = c->geometry.samples_per_ascan;
	bool ref = cfg_given(ctx, "preprocess.background.reference");
	int rc;

	/* background */
	if (c->preprocess.background.mode == CFG_BG_REFERENCE && !ref)
		return cfg_error(ctx, -EINVAL, "preprocess.background.reference",
		                 "missing (required when preprocess.background.mode is reference)");
	if (c->preprocess.background.mode != CFG_BG_REFERENCE && ref)
		return cfg_error(ctx, -EINVAL, "preprocess.background.reference",
		                 "given but preprocess.background.mode is %s (only with mode "
		                 "reference)",
		                 cfg_background_name(c->preprocess.background.mode));
	if (ref) {
		rc = table_load(ctx, &c->preprocess.background.reference, k,
		                "preprocess.background.reference");
		if (rc)
			return rc;
	}

	rc = check_resample(ctx);
	if (rc)
		return rc;

	/* window */
	bool param = cfg_given(ctx, "preprocess.window.param");
	double p = c->preprocess.window.param;
	if (!param)
		c->preprocess.window.param = cfg_window_param_default(c->preprocess.window.type);
	else if (c->preprocess.window.type == CFG_WIN_GAUSS && !(p > 0))
		return cfg_error(ctx, -ERANGE, "preprocess.window.param",
		                 "%g is out of range for gauss (sigma as a fraction of the "
		                 "half-width: greater than 0 and at most 10)",
		                 p);
	else if (c->preprocess.window.type == CFG_WIN_TUKEY && p > 1)
		return cfg_error(ctx, -ERANGE, "preprocess.window.param",
		                 "%g is out of range for tukey (alpha from 0 to 1)", p);

	/* dispersion */
	bool co = cfg_given(ctx, "preprocess.dispersion.coeffs");
	bool tab = cfg_given(ctx, "preprocess.dispersion.table");
	if (co && tab)
		return given_together(ctx, "preprocess.dispersion.coeffs",
		                      "preprocess.dispersion.table", "coeffs or table, not both");
	c->preprocess.dispersion.kind = co ? CFG_DISP_COEFFS : tab ? CFG_DISP_TABLE : CFG_DISP_NONE;
	if (tab) {
		rc = table_load(ctx, &c->preprocess.dispersion.table, k,
		                "preprocess.dispersion.table");
		if (rc)
			return rc;
	}

	if (!(c->preprocess.db_range[0] < c->preprocess.db_range[1]))
		return cfg_error(ctx, -EINVAL, "preprocess.db_range",
		                 "[%g, %g] is empty (lo < hi, in dB)", c->preprocess.db_range[0],
		                 c->preprocess.db_range[1]);
	return 0;
}

/* Whether a tcp:// host is a loopback address. */
static bool is_loopback(const char *host, size_t len)
{
	static const char *const lo[] = {"127.0.0.1", "localhost", "[::1]"};
	for (size_t i = 0; i < 3; i++)
		if (strlen(lo[i]) == len && !strncmp(host, lo[i], len))
			return true;
	return false;
}

static int check_endpoint(struct cfg_ctx *ctx, const char *key, const char *ep, bool *remote)
{
	const char *allowed = "ipc://PATH, or tcp://HOST:PORT with PORT 1 to 65535";

	if (!strncmp(ep, "ipc://", 6)) {
		size_t len = strlen(ep + 6);
		if (!len || len > CFG_SUN_PATH_MAX)
			return cfg_error(ctx, -EINVAL, key,
			                 "'%s': the path has %zu bytes (%s; "
			                 "the path 1 to %d bytes)",
			                 ep, len, allowed, CFG_SUN_PATH_MAX);
		return 0;
	}
	if (strncmp(ep, "tcp://", 6))
		return cfg_error(ctx, -EINVAL, key, "'%s' is not a supported endpoint (%s)", ep,
		                 allowed);
	const char *host = ep + 6, *colon = strrchr(host, ':');
	if (!colon || colon == host || (host[0] == '[' && colon[-1] != ']'))
		return cfg_error(ctx, -EINVAL, key, "'%s' has no HOST:PORT (%s)", ep, allowed);
	char *end;
	errno = 0;
	long port = strtol(colon + 1, &end, 10);
	if (!isdigit((unsigned char)colon[1]) || *end || errno || port < 1 || port > 65535)
		return cfg_error(ctx, -EINVAL, key, "'%s' has a bad port '%s' (%s)", ep, colon + 1,
		                 allowed);
	for (const char *p = host; p < colon; p++)
		if (isspace((unsigned char)*p) || *p == '/')
			return cfg_error(ctx, -EINVAL, key, "'%s' has a bad host (%s)", ep,
			                 allowed);
	*remote = !is_loopback(host, (size_t)(colon - host));
	return 0;
}

static int check_ipc(struct cfg_ctx *ctx)
{
	struct vr_config *c = ctx->cfg;
	char key[CFG_KEY_MAX];
	int rc;

	for (uint32_t i = 0; i < c->ipc.npub; i++) {
		bool remote = false;
		snprintf(key, sizeof(key), "ipc.pub[%u]", i);
		rc = check_endpoint(ctx, key, c->ipc.pub[i], &remote);
		if (rc)
			return rc;
		for (uint32_t j = 0; j < i; j++)
			if (!strcmp(c->ipc.pub[i], c->ipc.pub[j]))
				return cfg_error(ctx, -EINVAL, key,
				                 "'%s' is listed twice (each "
				                 "endpoint once)",
				                 c->ipc.pub[i]);
		if (remote && (!c->ipc.curve_secret_key[0] || !c->ipc.curve_public_key[0]))
			return cfg_error(ctx, -EPERM, key,
			                 "'%s' is reachable beyond this "
			                 "host and needs CURVE: set ipc.curve_secret_key and "
			                 "ipc.curve_public_key (or bind to 127.0.0.1, "
			                 "localhost or [::1])",
			                 c->ipc.pub[i]);
	}
	if (!c->ipc.npub) {
		size_t len = strlen(c->ipc.run_dir) + 1 + strlen(c->instance) + 4;
		if (len > CFG_SUN_PATH_MAX)
			return cfg_error(
			        ctx, -ENAMETOOLONG, "ipc.run_dir",
			        "the default endpoint ipc://%s/%s.pub has %zu bytes of path "
			        "(at most %d; use a shorter run_dir or set ipc.pub)",
			        c->ipc.run_dir, c->instance, len, CFG_SUN_PATH_MAX);
	}
	if (!c->ipc.curve_secret_key[0] != !c->ipc.curve_public_key[0])
		return cfg_error(ctx, -EINVAL,
		                 c->ipc.curve_secret_key[0] ? "ipc.curve_secret_key"
		                                            : "ipc.curve_public_key",
		                 "given alone (both curve_secret_key and curve_public_key, or "
		                 "neither)");
	if (c->ipc.curve_secret_key[0]) {
		rc = check_readable(ctx, "ipc.curve_secret_key", c->ipc.curve_secret_key,
		                    "CURVE secret key file");
		if (!rc)
			rc = check_readable(ctx, "ipc.curve_public_key", c->ipc.curve_public_key,
			                    "CURVE public key file");
		if (rc)
			return rc;
	}
	return 0;
}

/* The views' slab and position lie inside the output volume (docs/algorithms.md §4: never
 * clamped); absent, they default to the whole depth and the centre. */
static int check_view(struct cfg_ctx *ctx)
{
	struct vr_config *c = ctx->cfg;
	uint32_t d[3], *slab = c->view.slab, *pos = c->view.position;

	cfg_out_dims(c, d);
	if (!cfg_given(ctx, "view.slab")) {
		slab[0] = 0;
		slab[1] = d[2];
	} else if (!(slab[0] < slab[1] && slab[1] <= d[2])) {
		return cfg_error(ctx, -EINVAL, "view.slab",
		                 "[%u, %u] is not a depth range inside the volume (0 <= za < zb <= "
		                 "Z = %u)",
		                 slab[0], slab[1], d[2]);
	}
	if (!cfg_given(ctx, "view.position")) {
		for (int a = 0; a < 3; a++)
			pos[a] = d[a] / 2;
	} else if (pos[0] >= d[0] || pos[1] >= d[1] || pos[2] >= d[2]) {
		return cfg_error(ctx, -EINVAL, "view.position",
		                 "[%u, %u, %u] is outside the volume ([y, x, z] with y < Y = %u, "
		                 "x < X = %u, z < Z = %u)",
		                 pos[0], pos[1], pos[2], d[0], d[1], d[2]);
	}
	{
		double D = cfg_render_diagonal(c), h = cfg_render_step(c);
		if (D / h > 1e6)
			return cfg_error(ctx, -ERANGE,
			                 c->view.render.step > 0 ? "view.render.step"
			                                         : "view.render.spacing",
			                 "%g samples along the volume's diagonal (%g / step %g; at "
			                 "most 10^6)",
			                 D / h, D, h);
		/* the cost of one render: every ray samples the whole diagonal at most */
		double cost = (double)c->view.render.size[0] * c->view.render.size[1] * ceil(D / h);
		if (cost > (double)CFG_RENDER_SAMPLES_MAX)
			return cfg_error(
			        ctx, -ERANGE,
			        cfg_given(ctx, "view.render.size") ? "view.render.size"
			        : c->view.render.step > 0          ? "view.render.step"
			                                           : "view.render.spacing",
			        "a render of %u x %u rays of %.0f samples is %.3g samples, "
			        "more than the %llu allowed (a smaller view.render.size or a "
			        "larger view.render.step)",
			        c->view.render.size[0], c->view.render.size[1], ceil(D / h), cost,
			        (unsigned long long)CFG_RENDER_SAMPLES_MAX);
	}
	return 0;
}

double cfg_window_param_default(int type)
{
	return type == CFG_WIN_TUKEY ? 0.5 : 0.4;
}

/* output.channels and functional.* (docs/algorithms.md §5; docs/configuration.md). */
static int check_functional(struct cfg_ctx *ctx)
{
	static const char *const names[CFG_CH_COUNT] = {"structure", "angio", "doppler"};
	struct vr_config *c = ctx->cfg;
	const uint32_t M = c->geometry.repeats;
	char key[64];
	int last = -1;

	if (!c->output.nchannels)
		return cfg_error(
		        ctx, -EINVAL, "output.channels",
		        "is empty (one or more of structure, angio, doppler, in that order)");
	for (uint32_t i = 0; i < c->output.nchannels; i++) {
		const char *n = c->output.channels[i];
		int k = 0;

		snprintf(key, sizeof(key), "output.channels[%u]", i);
		while (k < CFG_CH_COUNT && strcmp(n, names[k]))
			k++;
		if (k == CFG_CH_COUNT)
			return cfg_error(
			        ctx, -EINVAL, key,
			        "'%s' is not a channel (allowed: structure, angio, doppler)", n);
		if (k == last)
			return cfg_error(ctx, -EINVAL, key, "%s is given twice (each channel once)",
			                 n);
		if (k < last)
			return cfg_error(
			        ctx, -EINVAL, key,
			        "%s comes after %s (the order is structure, angio, doppler)", n,
			        names[last]);
		last = k;
		if (k == CFG_CH_ANGIO && M < 2)
			return cfg_error(ctx, -EINVAL, key,
			                 "angio needs geometry.repeats of 2 or more (it is %u): "
			                 "angiography compares the repeats of a B-scan",
			                 M);
	}
	c->functional.angio.range_given = cfg_given(ctx, "functional.angio.range");
	c->functional.mask_given = cfg_given(ctx, "functional.mask_db");
	c->functional.doppler.axis_given = cfg_given(ctx, "functional.doppler.axis");
	if (c->functional.angio.range_given &&
	    !(c->functional.angio.range[0] < c->functional.angio.range[1]))
		return cfg_error(ctx, -EINVAL, "functional.angio.range",
		                 "[%g, %g] is empty (lo < hi)", c->functional.angio.range[0],
		                 c->functional.angio.range[1]);
	if (cfg_doppler_axis(c) == CFG_DOPPLER_BSCAN && M < 2)
		return cfg_error(ctx, -EINVAL, "functional.doppler.axis",
		                 "bscan needs geometry.repeats of 2 or more (it is 1): use ascan, "
		                 "the phase between neighbouring A-scans");
	if (cfg_functional(c) && (c->reconstruct.mode == CFG_RECON_ADAPTIVE ||
	                          c->reconstruct.mode == CFG_RECON_COMPENSATED ||
	                          c->reconstruct.mode == CFG_RECON_REGISTERED))
		return cfg_error(ctx, -EINVAL, "reconstruct.mode",
		                 "%s with output.channels other than [structure] is not available "
		                 "yet (modes none, noncumulative and cumulative reconstruct every "
		                 "channel)",
		                 cfg_recon_mode_name(c->reconstruct.mode));
	return 0;
}

int cfg_validate(struct cfg_ctx *ctx)
{
	static int (*const checks[])(struct cfg_ctx *) = {
	        check_instance, check_geometry, check_source,     check_preprocess,
	        check_ipc,      check_view,     check_functional,
	};
	int rc = 0;

	for (size_t i = 0; i < sizeof(checks) / sizeof(checks[0]) && !rc; i++)
		if (!(ctx->backend_only && checks[i] == check_source))
			rc = checks[i](ctx);
	return rc;
}
