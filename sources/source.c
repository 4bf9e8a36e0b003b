/* SPDX-License-Identifier: MIT */
/*
 * src_open / src_close: dispatch to the synth, replay and shim openers; the wrappers through
 * which every source is called (call order, positive returns, UTF-8 texts); the pacing clock
 * the built-in sources share.
 */
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "sources/internal.h"

int src_builtin_open(const char *args_yaml, struct volrec_shim_info *info, void **handle)
{
	return -EOPNOTSUPP; /* built-ins are opened by src_open() from the configuration */
}

int src_builtin_stop(void *h)
{
	return 0;
}

const char *src_sample_name(uint32_t t)
{
	/* indexed by enum volrec_sample_type */
	static const char *const names[] = {"u16", "i16", "f32", "u12p", "u12gv"};

	return t < VR_ARRAY_SIZE(names) ? names[t] : "unknown";
}

void src_geometry_from_config(struct volrec_shim_geometry *g, const struct vr_config *cfg,
                              unsigned flags)
{
	memset(g, 0, sizeof(*g));
	g->samples_per_ascan = cfg->geometry.samples_per_ascan;
	g->ascans_per_bscan = cfg->geometry.ascans_per_bscan;
	g->bscans_per_volume = cfg->geometry.bscans_per_volume;
	g->sample_type = cfg_sample_abi(cfg->geometry.sample_type);
	g->stride_x = cfg->geometry.stride[0];
	g->stride_y = cfg->geometry.stride[1];
	g->bidirectional = cfg->geometry.bidirectional;
	g->flags = ((flags & SRC_DROP_MARKS) ? VOLREC_SHIM_GEOMETRY_MARKS : 0) |
	           VOLREC_SHIM_GEOMETRY_HELD | VOLREC_SHIM_GEOMETRY_REPEATS;
	g->rate = (flags & SRC_UNPACED) ? 0 : cfg->source.rate;
	g->held_bscans = cfg->pipeline.ring_bscans;
	g->repeats = cfg->geometry.repeats;
}

/* A source's text as one line of valid UTF-8 into out: a newline or tab a shim wrote would
 * start a line of the log that seems to be volrecd's own, or break the status's layout. */
static void one_line(const char *s, char *out, size_t outlen)
{
	vr_utf8_sanitize(s, out, outlen);
	for (char *p = out; *p; p++)
		if (*p == '\n' || *p == '\t')
			*p = ' ';
}

/* Sanitize a string field of fixed size in place. */
static void sanitize_field(char *f, size_t size)
{
	char tmp[256];

	f[size - 1] = 0;
	one_line(f, tmp, size < sizeof(tmp) ? size : sizeof(tmp));
	memcpy(f, tmp, strlen(tmp) + 1);
}

int src_open(const struct vr_config *cfg, unsigned flags, struct src_source *src, char *err,
             size_t errlen)
{
	struct src_source s;
	int rc;

	memset(&s, 0, sizeof(s));
	if (flags & ~(SRC_UNPACED | SRC_NO_LOOP | SRC_DROP_MARKS))
		return vr_err(err, errlen, -EINVAL, "src_open: unknown flags 0x%x", flags);
	switch (cfg->source.type) {
	case CFG_SOURCE_SYNTH:
		rc = src_synth_open(cfg, flags, &s, err, errlen);
		break;
	case CFG_SOURCE_REPLAY:
		rc = src_replay_open(cfg, flags, &s, err, errlen);
		break;
	case CFG_SOURCE_SHIM:
		rc = src_shim_open(cfg, flags, &s, err, errlen);
		break;
	default:
		rc = vr_err(err, errlen, -EINVAL, "source.type: unknown source %d",
		            (int)cfg->source.type);
		break;
	}
	if (rc) {
		/* messages quote paths and shim texts: keep them valid UTF-8 */
		if (err && errlen) {
			char tmp[CFG_ERR_MAX];
			one_line(err, tmp, sizeof(tmp));
			snprintf(err, errlen, "%s", tmp);
		}
		return rc;
	}
	s.open = true;
	sanitize_field(s.info.name, sizeof(s.info.name));
	sanitize_field(s.info.version, sizeof(s.info.version));
	sanitize_field(s.info.device, sizeof(s.info.device));
	*src = s;
	return 0;
}

int src_close_checked(struct src_source *src, char *err, size_t errlen)
{
	int rc = 0;

	if (!src || !src->impl.close)
		return 0;
	if (src->open) { /* a shim's open() may succeed with a NULL handle */
		if (src->started) {
			rc = src_stop(src);
			if (rc < 0)
				vr_err(err, errlen, rc, "%s", src_strerror(src, rc));
		}
		src->impl.close(src->handle);
	}
	if (src->dl)
		dlclose(src->dl);
	memset(src, 0, sizeof(*src));
	return rc;
}

void src_close(struct src_source *src)
{
	char err[8];

	(void)src_close_checked(src, err, sizeof(err));
}

/* ---- the wrappers: every call to a source goes through one of these ------------------------ */

/* The text of the last error a wrapper itself made on this thread (a broken call order, a
 * positive return), for src_strerror(). Per thread because src_release_ref() may run on
 * another thread than the acquiring one. */
static _Thread_local struct {
	const struct src_source *src;
	int code;
	char text[640];
} wrap_msg;

/* The last call made through a wrapper on this thread, for src_strerror(). */
static _Thread_local struct {
	const struct src_source *src;
	const char *call;
} last_call;

/* How messages name the source: "shim NAME", "replay PATH", "synth". */
static void who(const struct src_source *src, char *out, size_t len)
{
	const char *kind = src && src->kind ? src->kind : "source";

	if (src && !strcmp(kind, "replay") && src->info.device[0])
		snprintf(out, len, "replay %s", src->info.device);
	else if (src && src->info.name[0] && strcmp(src->info.name, kind) != 0)
		snprintf(out, len, "%s %s", kind, src->info.name);
	else
		snprintf(out, len, "%s", kind);
}

static int wrap_fail(const struct src_source *src, int code, const char *fmt, ...) VR_PRINTF(3, 4);
static int wrap_fail(const struct src_source *src, int code, const char *fmt, ...)
{
	char name[300], text[320];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(text, sizeof(text), fmt, ap);
	va_end(ap);
	who(src, name, sizeof(name));
	snprintf(wrap_msg.text, sizeof(wrap_msg.text), "%s: %s", name, text);
	wrap_msg.src = src;
	wrap_msg.code = code;
	return code;
}

/* A source's result: 0 or a negative errno as it is; a positive value breaks the ABI. */
static int result(const struct src_source *src, const char *call, int rc)
{
	if (rc > 0)
		return wrap_fail(src, -EPROTO,
		                 "%s() returned %d: positive values are not allowed (0 or a "
		                 "negative errno)",
		                 call, rc);
	return rc;
}

/* The source is open (not a zeroed or closed struct); remembers the call for src_strerror(). */
static int check_open(const struct src_source *src, const char *call)
{
	wrap_msg.src = NULL;
	last_call.src = src;
	last_call.call = call;
	if (!src || !src->impl.acquire)
		return wrap_fail(src, -EBADF, "%s() on a source that is not open", call);
	return 0;
}

int src_set_scan_offset(struct src_source *src, uint64_t epoch, uint32_t ox, uint32_t oy)
{
	int rc = check_open(src, "set_scan_offset");

	if (rc)
		return rc;
	return result(src, "set_scan_offset",
	              src->impl.set_scan_offset(src->handle, epoch, ox, oy));
}

int src_start(struct src_source *src)
{
	int rc = check_open(src, "start");

	if (rc)
		return rc;
	if (src->started)
		return wrap_fail(src, -EINVAL, "start() while started");
	rc = result(src, "start", src->impl.start(src->handle));
	if (rc == 0)
		src->started = true;
	return rc;
}

int src_stop(struct src_source *src)
{
	int rc = check_open(src, "stop");

	if (rc || !src->started)
		return rc;
	src->started = false;
	return result(src, "stop", src->impl.stop(src->handle));
}

/* Checks common to both acquire forms: started, and one form only. */
static int acquire_allowed(struct src_source *src, const char *call, bool by_ref)
{
	int rc = check_open(src, call);

	if (rc)
		return rc;
	if (!src->started)
		return wrap_fail(src, -EINVAL, "%s() before start()", call);
	if (by_ref ? src->by_copy : src->by_ref)
		return wrap_fail(src, -EINVAL,
		                 "%s() after %s(): a source delivers by copy or by reference, "
		                 "not both",
		                 call, by_ref ? "acquire" : "acquire_ref");
	return 0;
}

int src_acquire(struct src_source *src, void *buf, size_t size, int timeout_ms,
                struct volrec_shim_meta *meta)
{
	int rc = acquire_allowed(src, "acquire", false);

	if (rc)
		return rc;
	src->by_copy = true;
	return result(src, "acquire", src->impl.acquire(src->handle, buf, size, timeout_ms, meta));
}

bool src_has_refs(const struct src_source *src)
{
	return src && src->impl.ref_regions && src->impl.acquire_ref && src->impl.release_ref;
}

int src_ref_regions(struct src_source *src, struct volrec_shim_region *regions, uint32_t max,
                    uint32_t *count)
{
	int rc = check_open(src, "ref_regions");

	if (rc)
		return rc;
	if (!src_has_refs(src))
		return wrap_fail(src, -EOPNOTSUPP, "ref_regions(): no zero-copy calls");
	if (src->started)
		return wrap_fail(src, -EINVAL, "ref_regions() after start()");
	rc = result(src, "ref_regions", src->impl.ref_regions(src->handle, regions, max, count));
	if (rc == 0)
		src->regions = true;
	return rc;
}

int src_acquire_ref(struct src_source *src, const void **bscan, int timeout_ms,
                    struct volrec_shim_meta *meta)
{
	int rc = acquire_allowed(src, "acquire_ref", true);

	if (rc)
		return rc;
	if (!src->regions)
		return wrap_fail(src, -EINVAL, "acquire_ref() before ref_regions()");
	src->by_ref = true;
	return result(src, "acquire_ref",
	              src->impl.acquire_ref(src->handle, bscan, timeout_ms, meta));
}

int src_release_ref(const struct src_source *src, const void *bscan)
{
	wrap_msg.src = NULL;
	last_call.src = src;
	last_call.call = "release_ref";
	if (!src_has_refs(src))
		return wrap_fail(src, -EOPNOTSUPP,
		                 "release_ref() on a source without zero-copy calls");
	return result(src, "release_ref", src->impl.release_ref(src->handle, bscan));
}

const char *src_strerror(const struct src_source *src, int code)
{
	static _Thread_local char text[512];
	const char *call = src && last_call.src == src ? last_call.call : NULL;
	char raw[sizeof(wrap_msg.text) + 64], name[300];
	const char *t = NULL;

	if (src && wrap_msg.src == src && wrap_msg.code == code) {
		/* the wrapper's own text names the source and the call */
		snprintf(raw, sizeof(raw), "%s", wrap_msg.text);
	} else {
		if (src && src->impl.strerror)
			t = src->impl.strerror(src->handle, code);
		if (t) {
			/* the source's own text names the source (docs/shim.md): the call is
			 * what adds information */
			snprintf(raw, sizeof(raw), "%s%s%s", call ? call : "", call ? ": " : "", t);
		} else {
			t = code == INT_MIN ? "unknown error" : strerror(code < 0 ? -code : code);
			who(src, name, sizeof(name));
			snprintf(raw, sizeof(raw), "%s: %s%s%s", name, call ? call : "",
			         call ? ": " : "", t);
		}
	}
	/* a shim's text, a path: whatever the bytes, what leaves here is one line of valid
	 * UTF-8 */
	one_line(raw, text, sizeof(text));
	return text;
}
