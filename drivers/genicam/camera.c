/* SPDX-License-Identifier: MIT */
/*
 * The camera side of the GenICam shim: the pixel formats volrec takes, camera features from
 * shim.args each checked against its GenICam node before it is written, and the camera list
 * of `volrec cameras` (cameras.h: each camera as a struct; the command writes text or JSON).
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "drivers/genicam/internal.h"

static const struct gc_format formats[] = {
        {"Mono8", ARV_PIXEL_FORMAT_MONO_8, VOLREC_SAMPLE_U16, 8, true},
        {"Mono10", ARV_PIXEL_FORMAT_MONO_10, VOLREC_SAMPLE_U16, 10, false},
        {"Mono12", ARV_PIXEL_FORMAT_MONO_12, VOLREC_SAMPLE_U16, 12, false},
        {"Mono14", ARV_PIXEL_FORMAT_MONO_14, VOLREC_SAMPLE_U16, 14, false},
        {"Mono16", ARV_PIXEL_FORMAT_MONO_16, VOLREC_SAMPLE_U16, 16, false},
        {"Mono12p", (ArvPixelFormat)0x010c0047u, VOLREC_SAMPLE_U12P, 12, false},
        {"Mono12Packed", ARV_PIXEL_FORMAT_MONO_12_PACKED, VOLREC_SAMPLE_U12GV, 12, false},
};
#define NFORMATS (sizeof(formats) / sizeof(formats[0]))

const struct gc_format *gc_format_by_code(ArvPixelFormat code)
{
	for (size_t i = 0; i < NFORMATS; i++)
		if (formats[i].code == code)
			return &formats[i];
	return NULL;
}

const struct gc_format *gc_format_by_name(const char *name)
{
	for (size_t i = 0; i < NFORMATS; i++)
		if (strcmp(formats[i].name, name) == 0)
			return &formats[i];
	return NULL;
}

const char *gc_format_names(void)
{
	return "Mono8, Mono10, Mono12, Mono14, Mono16 (as u16), Mono12p (as u12p), Mono12Packed "
	       "(as u12gv)";
}

/* ---- features ------------------------------------------------------------------------------ */

static bool parse_i64(const char *s, int64_t *v)
{
	char *end;
	errno = 0;
	long long x = strtoll(s, &end, 0);
	if (errno || end == s || *end)
		return false;
	*v = x;
	return true;
}

static bool parse_f64(const char *s, double *v)
{
	char *end;
	errno = 0;
	double x = strtod(s, &end);
	if (errno || end == s || *end || !isfinite(x))
		return false;
	*v = x;
	return true;
}

static bool parse_bool(const char *s, bool *v)
{
	if (!strcmp(s, "true") || !strcmp(s, "True") || !strcmp(s, "on") || !strcmp(s, "1")) {
		*v = true;
		return true;
	}
	if (!strcmp(s, "false") || !strcmp(s, "False") || !strcmp(s, "off") || !strcmp(s, "0")) {
		*v = false;
		return true;
	}
	return false;
}

/* Enumeration a->key set to a->val, one of the values the camera offers now. 0 with *ge set
 * when the camera refused it. */
static int set_enumeration(ArvGcNode *node, const struct shim_arg *a, const char *cam, GError **ge,
                           char *err, size_t errlen)
{
	ArvGcEnumeration *en = ARV_GC_ENUMERATION(node);
	guint n = 0;
	const char **vals = arv_gc_enumeration_dup_available_string_values(en, &n, ge);
	bool found = false;
	char list[512] = "";
	size_t len = 0;

	for (guint i = 0; vals && i < n; i++) {
		found |= strcmp(vals[i], a->val) == 0;
		if (len < sizeof(list))
			len += (size_t)snprintf(list + len, sizeof(list) - len, "%s%s",
			                        i ? ", " : "", vals[i]);
	}
	g_free(vals);
	if (*ge)
		return 0; /* refused: *ge says why */
	if (!found)
		return vr_err(err, errlen, -EINVAL,
		              "shim.args.%s: '%s' is not a value camera %s offers for '%s' "
		              "(one of: %s)",
		              a->key, a->val, cam, a->key, list);
	arv_gc_enumeration_set_string_value(en, a->val, ge);
	return 0;
}

/* Float a->key set to a->val within the camera's range. 0 with *ge set when it refused. */
static int set_float(ArvGcNode *node, const struct shim_arg *a, const char *cam, GError **ge,
                     char *err, size_t errlen)
{
	ArvGcFloat *fl = ARV_GC_FLOAT(node);
	const char *unit = arv_gc_float_get_unit(fl);
	double v, lo, hi = 0;

	if (!parse_f64(a->val, &v))
		return vr_err(err, errlen, -EINVAL,
		              "shim.args.%s: '%s' is not a number (feature '%s' is a Float)",
		              a->key, a->val, a->key);
	lo = arv_gc_float_get_min(fl, ge);
	if (!*ge)
		hi = arv_gc_float_get_max(fl, ge);
	if (*ge)
		return 0; /* refused: *ge says why */
	if (v < lo || v > hi)
		return vr_err(err, errlen, -ERANGE,
		              "shim.args.%s: %g%s%s is out of range for camera %s (%g..%g%s%s)",
		              a->key, v, unit && *unit ? " " : "", unit ? unit : "", cam, lo, hi,
		              unit && *unit ? " " : "", unit ? unit : "");
	arv_gc_float_set_value(fl, v, ge);
	return 0;
}

/* Integer a->key set to a->val within the camera's range and increment. 0 with *ge set
 * when it refused. */
static int set_integer(ArvGcNode *node, const struct shim_arg *a, const char *cam, GError **ge,
                       char *err, size_t errlen)
{
	ArvGcInteger *in = ARV_GC_INTEGER(node);
	const char *unit = arv_gc_integer_get_unit(in);
	int64_t v, lo, hi = 0, inc = 1;

	if (!parse_i64(a->val, &v))
		return vr_err(err, errlen, -EINVAL,
		              "shim.args.%s: '%s' is not an integer (feature '%s' is an "
		              "Integer)",
		              a->key, a->val, a->key);
	lo = arv_gc_integer_get_min(in, ge);
	if (!*ge)
		hi = arv_gc_integer_get_max(in, ge);
	if (!*ge)
		inc = arv_gc_integer_get_inc(in, ge);
	if (*ge)
		return 0; /* refused: *ge says why */
	if (v < lo || v > hi)
		return vr_err(err, errlen, -ERANGE,
		              "shim.args.%s: %" PRId64 "%s%s is out of range for camera %s "
		              "(%" PRId64 "..%" PRId64 "%s%s)",
		              a->key, v, unit && *unit ? " " : "", unit ? unit : "", cam, lo, hi,
		              unit && *unit ? " " : "", unit ? unit : "");
	if (inc > 1 && (v - lo) % inc)
		return vr_err(err, errlen, -ERANGE,
		              "shim.args.%s: %" PRId64 " is not %" PRId64 " plus a multiple of "
		              "the increment %" PRId64 " on camera %s",
		              a->key, v, lo, inc, cam);
	arv_gc_integer_set_value(in, v, ge);
	return 0;
}

int gc_feature_apply(ArvDevice *dev, const struct shim_arg *a, const char *cam, char *err,
                     size_t errlen)
{
	ArvGcNode *node = arv_device_get_feature(dev, a->key);
	GError *ge = NULL;
	int rc = 0;

	if (!node || !ARV_IS_GC_FEATURE_NODE(node))
		return vr_err(
		        err, errlen, -EINVAL,
		        "shim.args.%s (line %u): camera %s has no feature '%s' (and it is not "
		        "an argument of the shim either)",
		        a->key, a->line, cam, a->key);
	ArvGcFeatureNode *fn = ARV_GC_FEATURE_NODE(node);
	if (!arv_gc_feature_node_is_implemented(fn, &ge) || ge)
		goto unavailable;
	if (!arv_gc_feature_node_is_available(fn, &ge) || ge)
		goto unavailable;
	ArvGcAccessMode mode = arv_gc_feature_node_get_actual_access_mode(fn);
	if (mode == ARV_GC_ACCESS_MODE_RO || arv_gc_feature_node_is_locked(fn, NULL))
		return vr_err(
		        err, errlen, -EACCES,
		        "shim.args.%s: feature '%s' of camera %s is read-only now (locked, or "
		        "only readable)",
		        a->key, a->key, cam);

	if (ARV_IS_GC_ENUMERATION(node)) {
		rc = set_enumeration(node, a, cam, &ge, err, errlen);
		if (rc)
			return rc;
	} else if (ARV_IS_GC_BOOLEAN(node)) {
		bool v;
		if (!parse_bool(a->val, &v))
			return vr_err(
			        err, errlen, -EINVAL,
			        "shim.args.%s: '%s' is not a boolean (feature '%s' is a Boolean: "
			        "true or false)",
			        a->key, a->val, a->key);
		arv_gc_boolean_set_value(ARV_GC_BOOLEAN(node), v, &ge);
	} else if (ARV_IS_GC_FLOAT(node)) {
		rc = set_float(node, a, cam, &ge, err, errlen);
		if (rc)
			return rc;
	} else if (ARV_IS_GC_INTEGER(node)) {
		rc = set_integer(node, a, cam, &ge, err, errlen);
		if (rc)
			return rc;
	} else if (ARV_IS_GC_STRING(node)) {
		ArvGcString *st = ARV_GC_STRING(node);
		gint64 max = arv_gc_string_get_max_length(st, &ge);
		if (ge)
			goto failed;
		if ((gint64)strlen(a->val) > max)
			return vr_err(err, errlen, -ERANGE,
			              "shim.args.%s: '%s' is longer than the %" PRId64
			              " characters camera %s takes",
			              a->key, a->val, (int64_t)max, cam);
		arv_gc_string_set_value(st, a->val, &ge);
	} else {
		return vr_err(
		        err, errlen, -EINVAL,
		        "shim.args.%s: feature '%s' of camera %s is a %s, not a value the shim "
		        "can set (Integer, Float, Enumeration, Boolean or String)",
		        a->key, a->key, cam, G_OBJECT_TYPE_NAME(node));
	}
	if (ge)
		goto failed;
	return 0;

unavailable:
	rc = vr_err(err, errlen, -EINVAL,
	            "shim.args.%s: feature '%s' of camera %s is not available%s%s", a->key, a->key,
	            cam, ge ? ": " : " now (another feature disables it)", ge ? ge->message : "");
	g_clear_error(&ge);
	return rc;
failed:
	rc = vr_err(err, errlen, -EIO, "shim.args.%s: camera %s refused '%s' for '%s': %s", a->key,
	            cam, a->val, a->key, ge ? ge->message : "unknown error");
	g_clear_error(&ge);
	return rc;
}

int gc_features_apply(ArvCamera *camera, struct shim_args *args, const char *camera_id,
                      struct gc_undo *undo, char *err, size_t errlen)
{
	ArvDevice *dev = arv_camera_get_device(camera);

	for (size_t i = 0; i < args->n; i++) {
		struct shim_arg *a = &args->a[i];
		int rc;

		if (a->used)
			continue; /* one of the shim's own arguments, or OffsetX/OffsetY */
		if (!a->listed && !strcmp(a->key, "features"))
			return vr_err(
			        err, errlen, -EINVAL,
			        "shim.args.features (line %u): a list of 'Feature: value' "
			        "items, written in order, e.g. [{TriggerSelector: LineStart}, "
			        "{TriggerMode: On}]",
			        a->line);
		/* the shim's own setting, which it writes at configure() */
		if (a->listed && !strcmp(a->key, "PixelFormat"))
			return vr_err(err, errlen, -EINVAL,
			              "shim.args.features (line %u): PixelFormat is shim.args."
			              "pixel_format",
			              a->line);
		if (!strcmp(a->key, "Width") || !strcmp(a->key, "Height"))
			return vr_err(
			        err, errlen, -EINVAL,
			        "shim.args.%s: the frame size comes from the geometry (Width = "
			        "geometry.samples_per_ascan, Height = geometry.ascans_per_bscan)",
			        a->key);
		/* written by the shim at configure(): a value given here would be overwritten */
		if (!strcmp(a->key, "AcquisitionMode"))
			return vr_err(err, errlen, -EINVAL,
			              "shim.args.AcquisitionMode: the shim sets it (Continuous: "
			              "the camera streams until volrecd stops it)");
		if (!strcmp(a->key, "GevSCPSPacketSize"))
			return vr_err(err, errlen, -EINVAL,
			              "shim.args.GevSCPSPacketSize: the packet size is "
			              "shim.args.packet_size (negotiated when absent)");
		rc = gc_undo_remember(dev, undo, a->key);
		if (rc)
			return vr_err(
			        err, errlen, rc,
			        "shim.args.%s: cannot remember its value to put back (%s): %s",
			        a->key, undo->path, strerror(-rc));
		rc = gc_feature_apply(dev, a, camera_id, err, errlen);
		if (rc)
			return rc;
		a->used = true;
	}
	return 0;
}

/* ---- the camera list ----------------------------------------------------------------------- */

int volrec_genicam_cameras_v2(bool fake,
                              int (*fn)(const struct volrec_genicam_camera *camera, void *ctx),
                              void *ctx, char *err, size_t errlen)
{
	unsigned n;
	int rc = 0;

	if (fake) {
		rc = gc_fake_enable(err, errlen);
		if (rc)
			return rc;
	}
	arv_update_device_list();
	n = arv_get_n_devices();
	for (unsigned i = 0; i < n && !rc; i++) {
		struct volrec_genicam_camera c = {
		        .id = arv_get_device_id(i),
		        .vendor = arv_get_device_vendor(i),
		        .model = arv_get_device_model(i),
		        .serial = arv_get_device_serial_nbr(i),
		        .protocol = arv_get_device_protocol(i),
		        .address = arv_get_device_address(i),
		};
		struct volrec_genicam_format *offered = NULL;
		GError *ge = NULL;
		ArvCamera *cam = arv_camera_new(c.id, &ge);
		const char **names = NULL;
		guint nf = 0;
		gint x = 0, y = 0;

		if (cam) {
			c.opened = true;
			c.pixel_format = arv_camera_get_pixel_format_as_string(cam, NULL);
			names = arv_camera_dup_available_pixel_formats_as_strings(cam, &nf, NULL);
			arv_camera_get_region(cam, &x, &y, &c.width, &c.height, NULL);
			offered = calloc(nf ? nf : 1, sizeof(*offered));
			if (!offered) {
				rc = vr_err(err, errlen, -ENOMEM, "genicam: out of memory");
				goto next;
			}
			for (guint k = 0; k < nf; k++) {
				const struct gc_format *f = gc_format_by_name(names[k]);

				offered[k].name = names[k];
				offered[k].sample_type = f ? (int)f->sample_type : -1;
			}
			c.formats = offered;
			c.nformats = nf;
		} else {
			c.error = ge ? ge->message : NULL;
		}
		rc = fn(&c, ctx);
	next:
		free(offered);
		g_free(names);
		g_clear_error(&ge);
		if (cam)
			g_object_unref(cam);
	}
	return rc;
}
