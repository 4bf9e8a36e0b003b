/* SPDX-License-Identifier: MIT */
/*
 * The `shim` source: dlopen source.shim.library, check its volrec_shim_entry() table (ABI
 * version, size, every function present), open it with source.shim.args and configure it.
 * The shim's table is copied (struct_size bytes of it: an older, shorter table gets NULL for
 * the optional zero-copy calls) and wrapped so that src_close knows whether it was started.
 */
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

struct shim {
	struct src_common com;             /* first: src_close reads it */
	const struct volrec_shim_ops *ops; /* = &table */
	struct volrec_shim_ops table;      /* the shim's table, zero past its struct_size */
	void *h;                           /* the shim's own handle */
};

static const char *shim_text(const struct volrec_shim_ops *ops, void *h, int code)
{
	const char *t = ops->strerror ? ops->strerror(h, code) : NULL;
	return t ? t : strerror(code < 0 ? -code : code);
}

static int wrap_open(const char *args_yaml, struct volrec_shim_info *info, void **handle)
{
	(void)args_yaml;
	(void)info;
	(void)handle;
	return -EOPNOTSUPP; /* opened by src_open() */
}

static int wrap_configure(void *h, const struct volrec_shim_geometry *g)
{
	struct shim *s = h;
	return s->ops->configure(s->h, g);
}

static int wrap_set_scan_offset(void *h, uint64_t epoch, uint32_t ox, uint32_t oy)
{
	struct shim *s = h;
	return s->ops->set_scan_offset(s->h, epoch, ox, oy);
}

static int wrap_start(void *h)
{
	struct shim *s = h;
	int rc = s->ops->start(s->h);
	if (!rc)
		s->com.started = true;
	return rc;
}

static int wrap_acquire(void *h, void *buf, size_t size, int timeout_ms,
                        struct volrec_shim_meta *meta)
{
	struct shim *s = h;
	return s->ops->acquire(s->h, buf, size, timeout_ms, meta);
}

static int wrap_stop(void *h)
{
	struct shim *s = h;
	s->com.started = false;
	return s->ops->stop(s->h);
}

static void wrap_close(void *h)
{
	struct shim *s = h;

	if (!s)
		return;
	s->ops->close(s->h);
	free(s);
}

static const char *wrap_strerror(void *h, int code)
{
	struct shim *s = h;
	return s->ops->strerror(s->h, code);
}

static int wrap_ref_regions(void *h, struct volrec_shim_region *regions, uint32_t max,
                            uint32_t *count)
{
	struct shim *s = h;
	return s->ops->ref_regions(s->h, regions, max, count);
}

static int wrap_acquire_ref(void *h, const void **bscan, int timeout_ms,
                            struct volrec_shim_meta *meta)
{
	struct shim *s = h;
	return s->ops->acquire_ref(s->h, bscan, timeout_ms, meta);
}

static int wrap_release_ref(void *h, const void *bscan)
{
	struct shim *s = h;
	return s->ops->release_ref(s->h, bscan);
}

/* For a shim with the zero-copy calls. */
static const struct volrec_shim_ops wrap_ref_ops = {
        .abi_version = VOLREC_SHIM_ABI_VERSION,
        .struct_size = sizeof(struct volrec_shim_ops),
        .open = wrap_open,
        .configure = wrap_configure,
        .set_scan_offset = wrap_set_scan_offset,
        .start = wrap_start,
        .acquire = wrap_acquire,
        .stop = wrap_stop,
        .close = wrap_close,
        .strerror = wrap_strerror,
        .ref_regions = wrap_ref_regions,
        .acquire_ref = wrap_acquire_ref,
        .release_ref = wrap_release_ref,
};

const struct volrec_shim_ops src_shim_wrap_ops = {
        .abi_version = VOLREC_SHIM_ABI_VERSION,
        .struct_size = sizeof(struct volrec_shim_ops),
        .open = wrap_open,
        .configure = wrap_configure,
        .set_scan_offset = wrap_set_scan_offset,
        .start = wrap_start,
        .acquire = wrap_acquire,
        .stop = wrap_stop,
        .close = wrap_close,
        .strerror = wrap_strerror,
};

/* Name of the first NULL function pointer of a table, or NULL when all are set. */
static const char *missing_function(const struct volrec_shim_ops *o)
{
	if (!o->open)
		return "open";
	if (!o->configure)
		return "configure";
	if (!o->set_scan_offset)
		return "set_scan_offset";
	if (!o->start)
		return "start";
	if (!o->acquire)
		return "acquire";
	if (!o->stop)
		return "stop";
	if (!o->close)
		return "close";
	if (!o->strerror)
		return "strerror";
	return NULL;
}

#ifndef VOLREC_SHIMDIR /* set by src/module.mk from SHIMDIR; builds without it (fuzzing) */
#define VOLREC_SHIMDIR "/usr/local/lib/volrec"
#endif

/* source.shim.library: a path, or the short name of a shipped shim (`genicam`, `synth`):
 * NAME-shim.so in VOLREC_SHIM_DIR, else in the installed shim directory. */
static void shim_path(const char *lib, char *out, size_t n)
{
	const char *dir = getenv("VOLREC_SHIM_DIR");

	if (strchr(lib, '/') || !lib[0])
		snprintf(out, n, "%s", lib);
	else
		snprintf(out, n, "%s/%s-shim.so", dir && dir[0] ? dir : VOLREC_SHIMDIR, lib);
}

int src_shim_open(const struct vr_config *cfg, unsigned flags, struct src_source *src, char *err,
                  size_t errlen)
{
	char path[CFG_PATH_MAX + 64];
	const char *lib = path;
	const struct volrec_shim_ops *(*entry)(void);
	const struct volrec_shim_ops *ops;
	struct volrec_shim_ops table;
	struct volrec_shim_geometry g;
	struct volrec_shim_info info;
	struct shim *s = NULL;
	const char *miss;
	void *dl, *h = NULL;
	int rc;

	shim_path(cfg->source.shim.library, path, sizeof(path));
	if (!lib[0])
		return src_err(err, errlen, -EINVAL, "source.shim.library is not set");
	dlerror();
	dl = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
	if (!dl)
		return src_err(err, errlen, -ENOENT, "shim %s: dlopen failed: %s", lib, dlerror());
	*(void **)&entry = dlsym(dl, VOLREC_SHIM_ENTRY);
	if (!entry) {
		const char *e = dlerror();
		rc = src_err(err, errlen, -ENOSYS, "shim %s: no symbol %s: %s", lib,
		             VOLREC_SHIM_ENTRY, e ? e : "symbol is NULL");
		goto out_dlclose;
	}
	ops = entry();
	if (!ops) {
		rc = src_err(err, errlen, -EINVAL, "shim %s: %s() returned NULL", lib,
		             VOLREC_SHIM_ENTRY);
		goto out_dlclose;
	}
	if (ops->abi_version != VOLREC_SHIM_ABI_VERSION) {
		rc = src_err(err, errlen, -EPROTONOSUPPORT,
		             "shim %s: ABI version %u, this volrec speaks version %u (rebuild the "
		             "shim against this volrec/shim.h)",
		             lib, ops->abi_version, VOLREC_SHIM_ABI_VERSION);
		goto out_dlclose;
	}
	if (ops->struct_size < VOLREC_SHIM_OPS_SIZE_BASE) {
		rc = src_err(
		        err, errlen, -EPROTONOSUPPORT,
		        "shim %s: function table is %u bytes, ABI version %u needs at least %zu",
		        lib, ops->struct_size, VOLREC_SHIM_ABI_VERSION,
		        (size_t)VOLREC_SHIM_OPS_SIZE_BASE);
		goto out_dlclose;
	}
	/* read no further than the shim's struct_size: fields a shorter (older) table lacks
	 * are NULL; a longer (newer) one's extra fields are ignored */
	memset(&table, 0, sizeof(table));
	memcpy(&table, ops, ops->struct_size < sizeof(table) ? ops->struct_size : sizeof(table));
	ops = &table;
	miss = missing_function(ops);
	if (miss) {
		rc = src_err(err, errlen, -EINVAL, "shim %s: function table has no %s() (NULL)",
		             lib, miss);
		goto out_dlclose;
	}
	{
		int n = !!ops->ref_regions + !!ops->acquire_ref + !!ops->release_ref;
		if (n != 0 && n != 3) {
			rc = src_err(err, errlen, -EINVAL,
			             "shim %s: the zero-copy calls come together, but ref_regions "
			             "is %s, acquire_ref %s, release_ref %s",
			             lib, ops->ref_regions ? "set" : "NULL",
			             ops->acquire_ref ? "set" : "NULL",
			             ops->release_ref ? "set" : "NULL");
			goto out_dlclose;
		}
	}
	memset(&info, 0, sizeof(info));
	rc = ops->open(cfg->source.shim.args_yaml ? cfg->source.shim.args_yaml : "{}", &info, &h);
	if (rc) {
		/* no handle: the shim's strerror gets NULL, as the ABI allows after a failure */
		src_err(err, errlen, rc < 0 ? rc : -EIO, "shim %s: open(args) failed: %s (%d)", lib,
		        shim_text(ops, h, rc), rc);
		if (h)
			ops->close(h);
		rc = rc < 0 ? rc : -EIO;
		goto out_dlclose;
	}
	info.name[sizeof(info.name) - 1] = 0;
	info.version[sizeof(info.version) - 1] = 0;
	info.device[sizeof(info.device) - 1] = 0;
	src_geometry_from_config(&g, cfg, flags);
	rc = ops->configure(h, &g);
	if (rc) {
		src_err(err, errlen, rc < 0 ? rc : -EIO,
		        "shim %s: configure(K %u, nx %u, ny %u, %s, stride [%u, %u]%s, rate %g) "
		        "failed: %s (%d)",
		        lib, g.samples_per_ascan, g.ascans_per_bscan, g.bscans_per_volume,
		        src_sample_name(g.sample_type), g.stride_x, g.stride_y,
		        g.bidirectional ? ", bidirectional" : "", g.rate, shim_text(ops, h, rc),
		        rc);
		rc = rc < 0 ? rc : -EIO;
		goto out_close;
	}
	s = calloc(1, sizeof(*s));
	if (!s) {
		rc = src_err(err, errlen, -ENOMEM, "shim %s: out of memory", lib);
		goto out_close;
	}
	s->com.kind = "shim";
	s->table = table;
	s->ops = &s->table;
	s->h = h;
	/* zero-copy when the shim has the three calls (checked above: all or none) */
	src->ops = table.ref_regions && table.acquire_ref && table.release_ref ? &wrap_ref_ops
	                                                                       : &src_shim_wrap_ops;
	src->handle = s;
	src->dl = dl;
	src->info = info;
	src->epochs = 0;
	return 0;

out_close:
	ops->close(h);
out_dlclose:
	dlclose(dl);
	return rc;
}
