/* SPDX-License-Identifier: MIT */
/*
 * libvolrec_genicam_shim.so: GenICam cameras (GigE Vision, USB3 Vision) through Aravis 0.8,
 * one camera frame = one B-scan (Height = ascans_per_bscan lines of Width = K pixels).
 * Frames land in stream buffers the shim allocates in one page-aligned region, which volrecd
 * registers with the backend: acquire_ref() hands them out without a copy (Mono8 excepted,
 * widened to u16 in the region). Positions come from the camera's frame ids: a gap is a lost
 * B-scan, a frame Aravis could not complete an incomplete one, each reported at its position
 * (VOLREC_SHIM_META_LOST / _INCOMPLETE) so that no B-scan ever lands at another's place.
 * Configuration and its checks: docs/cameras.md.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "base/base.h"
#include "drivers/genicam/internal.h"

#define PAGE      4096u
#define BUF_MIN   16u
#define BUF_MAX   4096u
#define GAP16_MAX 32767u /* largest frame-id step told apart from a restart (16-bit ids) */
#define GAP64_MAX (1u << 30)

/* B-scans a caller that does not say (no VOLREC_SHIM_GEOMETRY_HELD) may hold: volrecd's
 * default pipeline.ring_bscans */
#define HELD_DEFAULT 256u

struct gc_shim {
	struct shim_err err; /* last error and its text; first (shim_strerror) */
	/* from open() */
	char want[256];   /* camera id asked for ("" = the first one found) */
	char cam_id[256]; /* the camera's id */
	ArvCamera *cam;
	gulong lost_handler;
	atomic_bool control_lost;
	char pixel_format[64];  /* asked for, "" = chosen from geometry.sample_type */
	uint64_t buffers;       /* asked for, 0 = held B-scans + 1 epoch, or 3 epochs */
	int64_t packet_size;    /* -1: negotiate (GigE Vision) */
	uint64_t socket_buffer; /* GigE Vision receive buffer, bytes; 0: 8 frames */
	int packet_socket;      /* -1 auto (off on loopback), 0, 1 */
	bool packet_resend, set_geometry;
	struct gc_fake_params fake;
	/* OffsetX, OffsetY as given (the last when repeated; key "" when not given): their limits
	 * follow Width and Height (SFNC: OffsetX <= WidthMax - Width), so configure() writes them
	 * after the frame size, not in document order at open */
	struct shim_arg offset[2];
	struct gc_undo undo; /* the known state at open, and what to put back at close */

	/* from configure() */
	bool configured;
	struct volrec_shim_geometry geo;
	bool marks; /* the caller honours VOLREC_SHIM_META_LOST / _INCOMPLETE */
	const struct gc_format *fmt;
	size_t frame_bytes, bscan_bytes, stride, out_stride;
	uint8_t *region;
	size_t region_size;
	uint32_t nbuf;
	ArvBuffer **bufs;
	atomic_uchar *out;  /* [nbuf] camera buffer i: 0 in the stream, 1 out of it, 2 not
	                     * pushed yet */
	atomic_uchar *slot; /* [nbuf] Mono8: widened copy i is held by the caller */
	uint8_t *dummy;     /* handed out for a lost or incomplete position */
	ArvStream *stream;
	struct gc_fake *fk;

	/* acquisition (the acquiring thread) */
	bool started;
	bool have_last, extended;
	uint64_t last_id, last_pos;
	uint64_t next_pos; /* position (epoch * ny + bscan) of the B-scan due next */
	ArvBuffer *held;   /* a complete frame waiting for the marks of the gap before it */
	uint64_t held_pos;
	uint64_t incomplete; /* incomplete frames not yet reported */
	atomic_uint_fast64_t refs;
};
SHIM_HANDLE_CHECK(struct gc_shim);

static void shim_close(void *h);

static void on_control_lost(ArvDevice *dev, gpointer data)
{
	struct gc_shim *s = data;
	atomic_store(&s->control_lost, true);
}

/* The key as given in shim.args (not an item of its features list), NULL when absent. */
static const struct shim_arg *arg_given(const struct shim_args *args, const char *key)
{
	for (size_t i = 0; i < args->n; i++)
		if (!args->a[i].listed && !strcmp(args->a[i].key, key))
			return &args->a[i];
	return NULL;
}

/* "camera 'X' not found (found: A, B)" (shim_open() adds "genicam: ") */
static int not_found(const char *want, GError *ge, char *err, size_t errlen)
{
	char list[512] = "";
	size_t len = 0;
	unsigned n;

	arv_update_device_list();
	n = arv_get_n_devices();
	for (unsigned i = 0; i < n && len < sizeof(list); i++)
		len += (size_t)snprintf(list + len, sizeof(list) - len, "%s%s", i ? ", " : "",
		                        arv_get_device_id(i));
	snprintf(err, errlen, "camera %s%s%s not found (%s%s%s)%s%s", want[0] ? "'" : "",
	         want[0] ? want : "(the first one)", want[0] ? "'" : "",
	         n ? "found: " : "no GenICam camera found", list, "", ge ? "; Aravis: " : "",
	         ge ? ge->message : "");
	return -ENODEV;
}

/*
 * The cameras want can match, listed afresh: for a Fake_ id Aravis's Fake interface alone
 * (no other interface names its cameras so, and a GigE Vision discovery waits a second for
 * answers), else every interface. *iface is the interface listed, NULL for all.
 */
static unsigned list_cameras(const char *want, ArvInterface **iface)
{
	*iface = !strncmp(want, "Fake_", 5) ? arv_fake_interface_get_instance() : NULL;
	if (*iface) {
		arv_interface_update_device_list(*iface);
		return arv_interface_get_n_devices(*iface);
	}
	arv_update_device_list();
	return arv_get_n_devices();
}

/* Camera i of the list list_cameras() made: its id, physical id (MAC) and address. */
static void listed_camera(ArvInterface *iface, unsigned i, const char *names[3])
{
	names[0] = iface ? arv_interface_get_device_id(iface, i) : arv_get_device_id(i);
	names[1] = iface ? arv_interface_get_device_physical_id(iface, i)
	                 : arv_get_device_physical_id(i);
	names[2] = iface ? arv_interface_get_device_address(iface, i) : arv_get_device_address(i);
}

/* -ENOTUNIQ naming them when want ("" = any) matches more than one camera found, by id,
 * physical id (MAC) or address: Aravis would open one of them without a word. The id of the
 * one camera matched goes to id ("" when none). */
static int check_unique(const char *want, char *id, size_t idlen, char *err, size_t errlen)
{
	char list[512] = "";
	size_t len = 0;
	unsigned n, hits = 0;
	ArvInterface *iface;

	n = list_cameras(want, &iface);
	for (unsigned i = 0; i < n; i++) {
		const char *names[3];

		listed_camera(iface, i, names);
		if (want[0] && g_strcmp0(want, names[0]) && g_strcmp0(want, names[1]) &&
		    g_strcmp0(want, names[2]))
			continue;
		if (len < sizeof(list))
			len += (size_t)snprintf(list + len, sizeof(list) - len, "%s%s",
			                        hits ? ", " : "", names[0]);
		if (!hits)
			snprintf(id, idlen, "%s", names[0] ? names[0] : "");
		hits++;
	}
	if (hits < 2)
		return 0;
	if (!want[0])
		snprintf(err, errlen,
		         "shim.args.camera: absent, and %u cameras are found (%s): name one", hits,
		         list);
	else
		snprintf(err, errlen,
		         "shim.args.camera: '%s' matches %u cameras (%s): give the id of one", want,
		         hits, list);
	return -ENOTUNIQ;
}

/* The shim's own keys that are not fields of struct gc_shim: checked and turned into its
 * fields by open_check_args() */
struct gc_open_opts {
	char sock[16], sim[16], reset[16];
	char state_dir[PATH_MAX];
	uint64_t psize;
};

/* A handle with the defaults of every key of shim.args; NULL when out of memory. */
static struct gc_shim *gc_shim_new(struct gc_open_opts *o)
{
	struct gc_shim *s = calloc(1, sizeof(*s));

	if (!s)
		return NULL;
	s->undo.fd = -1;
	s->packet_resend = true;
	s->set_geometry = true;
	snprintf(o->sock, sizeof(o->sock), "auto");
	snprintf(o->sim, sizeof(o->sim), "none");
	snprintf(o->reset, sizeof(o->reset), "auto");
	o->state_dir[0] = '\0';
	o->psize = UINT64_MAX;
	/* systemd's RuntimeDirectory= (the first, when several): kept across a restart */
	if (getenv("RUNTIME_DIRECTORY"))
		snprintf(o->state_dir, sizeof(o->state_dir), "%.*s",
		         (int)strcspn(getenv("RUNTIME_DIRECTORY"), ":"),
		         getenv("RUNTIME_DIRECTORY"));
	sim_args_defaults(&s->fake.sim);
	return s;
}

/* -EINVAL naming the first of keys given in shim.args when the camera is no GigE Vision
 * one (gv) or the simulation is off (!gv), else 0. */
static int open_refuse_keys(const struct gc_shim *s, const struct shim_args *args, bool gv,
                            char *err, size_t errlen)
{
	static const char *const synth_only[] = {"seed", "deg_per_s", "snr_db", "phantom",
	                                         "motion_rate"};
	static const char *const gv_only[] = {"packet_size", "socket_buffer", "packet_socket",
	                                      "packet_resend"};
	const char *const *keys = gv ? gv_only : synth_only;
	size_t n = gv ? VR_ARRAY_SIZE(gv_only) : VR_ARRAY_SIZE(synth_only);

	for (size_t i = 0; i < n; i++) {
		const struct shim_arg *a = arg_given(args, keys[i]);
		if (!a)
			continue;
		if (!gv)
			return vr_err(
			        err, errlen, -EINVAL,
			        "shim.args.%s (line %u): only with simulate: synth (it sets the "
			        "Fake camera's synthetic spectra; simulate is none)",
			        a->key, a->line);
		return vr_err(err, errlen, -EINVAL,
		              "shim.args.%s (line %u): camera %s is not a GigE Vision camera "
		              "(%s), the key applies only there",
		              a->key, a->line, s->cam_id,
		              arv_camera_is_uv_device(s->cam) ? "USB3 Vision"
		              : ARV_IS_FAKE_DEVICE(arv_camera_get_device(s->cam))
		                      ? "Aravis's in-process Fake camera"
		                      : G_OBJECT_TYPE_NAME(arv_camera_get_device(s->cam)));
	}
	return 0;
}

/* The values of the shim's own keys checked and set in s; the camera is not opened yet. */
static int open_check_args(struct gc_shim *s, const struct shim_args *args,
                           const struct gc_open_opts *o, char *err, size_t errlen)
{
	if (s->buffers && s->buffers < BUF_MIN)
		return vr_err(err, errlen, -ERANGE,
		              "shim.args.buffers: %" PRIu64
		              " is too few (0 = pipeline.ring_bscans + "
		              "1 epoch or 3 epochs, whichever is more; else %u..%u)",
		              s->buffers, BUF_MIN, BUF_MAX);
	s->packet_size = o->psize == UINT64_MAX ? -1 : (int64_t)o->psize;
	if (o->psize != UINT64_MAX && o->psize && o->psize < 576)
		return vr_err(err, errlen, -ERANGE,
		              "shim.args.packet_size: %" PRIu64
		              " is too small (0 = negotiate, else "
		              "576..65535 bytes)",
		              o->psize);
	if (!strcmp(o->sock, "auto"))
		s->packet_socket = -1;
	else if (!strcmp(o->sock, "true") || !strcmp(o->sock, "on"))
		s->packet_socket = 1;
	else if (!strcmp(o->sock, "false") || !strcmp(o->sock, "off"))
		s->packet_socket = 0;
	else
		return vr_err(err, errlen, -EINVAL,
		              "shim.args.packet_socket: '%s' is not allowed (auto, true or false)",
		              o->sock);
	if (strcmp(o->reset, "auto") && strcmp(o->reset, "none"))
		return vr_err(err, errlen, -EINVAL,
		              "shim.args.reset: '%s' is not allowed (auto or none)", o->reset);
	if (!strcmp(o->sim, "synth"))
		s->fake.synth = true;
	else if (strcmp(o->sim, "none"))
		return vr_err(err, errlen, -EINVAL,
		              "shim.args.simulate: '%s' is not allowed (none or synth)", o->sim);
	if (!s->fake.synth) {
		int rc = open_refuse_keys(s, args, false, err, errlen);
		if (rc)
			return rc;
	}
	if (s->pixel_format[0] && !gc_format_by_name(s->pixel_format))
		return vr_err(err, errlen, -EINVAL,
		              "shim.args.pixel_format: '%s' is not supported (volrec takes %s)",
		              s->pixel_format, gc_format_names());
	return 0;
}

/* The camera asked for opened, known to be the only one matched and under this process's
 * control; s->cam_id names it. */
static int open_camera(struct gc_shim *s, const struct shim_args *args, char *err, size_t errlen)
{
	GError *ge = NULL;
	int rc;

	if (s->fake.synth || !strncmp(s->want, "Fake_", 5)) {
		rc = gc_fake_enable(err, errlen);
		if (rc)
			return rc;
	}
	rc = check_unique(s->want, s->cam_id, sizeof(s->cam_id), err, errlen);
	if (rc)
		return rc;
	s->cam = arv_camera_new(s->want[0] ? s->want : NULL, &ge);
	if (!s->cam) {
		rc = not_found(s->want, ge, err, errlen);
		g_clear_error(&ge);
		return rc;
	}
	/* the id `camera:` takes: the one asked for, else the one camera found */
	if (s->want[0])
		snprintf(s->cam_id, sizeof(s->cam_id), "%s", s->want);
	else if (!s->cam_id[0])
		snprintf(s->cam_id, sizeof(s->cam_id), "%s",
		         arv_camera_get_device_id(s->cam, NULL)
		                 ? arv_camera_get_device_id(s->cam, NULL)
		                 : "?");
	if (s->fake.synth && !ARV_IS_FAKE_DEVICE(arv_camera_get_device(s->cam)))
		return vr_err(err, errlen, -EINVAL,
		              "shim.args.simulate: synth needs Aravis's in-process Fake camera "
		              "(camera: Fake_1), camera %s is a real one",
		              s->cam_id);
	/* GigE Vision gives one application control: without it every write times out */
	if (arv_camera_is_gv_device(s->cam) &&
	    !arv_gv_device_is_controller(ARV_GV_DEVICE(arv_camera_get_device(s->cam))))
		return vr_err(
		        err, errlen, -EBUSY,
		        "camera %s is controlled by another application (GigE Vision control "
		        "privilege refused: a viewer, another volrecd, or another host holds it)",
		        s->cam_id);
	if (!arv_camera_is_gv_device(s->cam)) {
		rc = open_refuse_keys(s, args, true, err, errlen);
		if (rc)
			return rc;
	}
	s->lost_handler = g_signal_connect(arv_camera_get_device(s->cam), "control-lost",
	                                   G_CALLBACK(on_control_lost), s);
	return 0;
}

/* OffsetX and OffsetY kept for configure(), which writes them after the frame size. */
static void open_keep_offsets(struct gc_shim *s, struct shim_args *args)
{
	for (size_t i = 0; i < args->n; i++) {
		struct shim_arg *a = &args->a[i];
		int k = !strcmp(a->key, "OffsetX") ? 0 : !strcmp(a->key, "OffsetY") ? 1 : -1;
		if (k >= 0 && !a->used) {
			s->offset[k] = *a;
			a->used = true;
		}
	}
}

/* The pixel format asked for written to the camera (none asked: configure() chooses). */
static int open_set_pixel_format(struct gc_shim *s, char *err, size_t errlen)
{
	GError *ge = NULL;
	int rc;

	if (!s->pixel_format[0])
		return 0;
	arv_camera_set_pixel_format_from_string(s->cam, s->pixel_format, &ge);
	if (!ge)
		return 0;
	rc = vr_err(err, errlen, -EINVAL, "shim.args.pixel_format: camera %s refused %s: %s",
	            s->cam_id, s->pixel_format, ge->message);
	g_clear_error(&ge);
	return rc;
}

static void open_describe(const struct gc_shim *s, struct volrec_shim_info *info)
{
	snprintf(info->name, sizeof(info->name), "genicam");
	snprintf(info->version, sizeof(info->version), "%s (Aravis %u.%u.%u)", VOLREC_VERSION,
	         arv_get_major_version(), arv_get_minor_version(), arv_get_micro_version());
	snprintf(info->device, sizeof(info->device), "%.32s %.32s, serial %.24s (%.24s)",
	         arv_camera_get_vendor_name(s->cam, NULL) ? arv_camera_get_vendor_name(s->cam, NULL)
	                                                  : "?",
	         arv_camera_get_model_name(s->cam, NULL) ? arv_camera_get_model_name(s->cam, NULL)
	                                                 : "?",
	         arv_camera_get_device_serial_number(s->cam, NULL)
	                 ? arv_camera_get_device_serial_number(s->cam, NULL)
	                 : "?",
	         s->cam_id);
	/* the camera delivers whatever the scanner repeats: frame n is raw B-scan n of the scan */
	info->flags = VOLREC_SHIM_INFO_REPEATS;
}

static int shim_open(const char *args_yaml, struct volrec_shim_info *info, void **handle)
{
	struct gc_shim *s;
	struct gc_open_opts o;
	struct shim_args args;
	char err[GC_MSG_MAX - 32];
	int rc;

	s = gc_shim_new(&o);
	if (!s)
		return shim_open_fail(-ENOMEM, "genicam: out of memory");
	/* the feature's own name means the same as pixel_format */
	const struct shim_arg_spec feature[] = {
	        {"PixelFormat", .str = s->pixel_format, .max = sizeof(s->pixel_format)},
	};
	/* the shim's own keys: the first two are read before PixelFormat */
	const struct shim_arg_spec spec[] = {
	        {"camera", .str = s->want, .max = sizeof(s->want)},
	        {"pixel_format", .str = s->pixel_format, .max = sizeof(s->pixel_format)},
	        {"buffers", .u64 = &s->buffers, .max = BUF_MAX},
	        {"packet_size", .u64 = &o.psize, .max = 65535},
	        {"packet_socket", .str = o.sock, .max = sizeof(o.sock)},
	        {"packet_resend", .flag = &s->packet_resend},
	        {"socket_buffer", .u64 = &s->socket_buffer, .max = 1u << 30},
	        {"set_geometry", .flag = &s->set_geometry},
	        {"simulate", .str = o.sim, .max = sizeof(o.sim)},
	        {"seed", .u64 = &s->fake.sim.seed, .max = UINT64_MAX},
	        {"deg_per_s", .dbl = &s->fake.sim.deg_per_s, .lo = -3600, .hi = 3600},
	        {"snr_db", .dbl = &s->fake.sim.snr_db, .lo = -20, .hi = 200},
	        {"phantom", .str = s->fake.sim.phantom, .max = sizeof(s->fake.sim.phantom)},
	        {"motion_rate", .dbl = &s->fake.sim.motion_rate, .lo = 0, .hi = 1e6},
	        {"reset", .str = o.reset, .max = sizeof(o.reset)},
	        {"state_dir", .str = o.state_dir, .max = sizeof(o.state_dir)},
	};
	rc = shim_args_parse(args_yaml, SHIM_ARGS_FEATURE_LIST, &args, err, sizeof(err));
	if (!rc)
		rc = shim_args_get(&args, spec, 2, err, sizeof(err));
	if (!rc && s->pixel_format[0] && arg_given(&args, "PixelFormat")) {
		rc = vr_err(err, sizeof(err), -EINVAL,
		            "shim.args.PixelFormat: given besides pixel_format (the same setting: "
		            "give one of them)");
	}
	if (!rc && !s->pixel_format[0])
		rc = shim_args_get(&args, feature, 1, err, sizeof(err));
	if (!rc)
		rc = shim_args_get(&args, spec + 2, VR_ARRAY_SIZE(spec) - 2, err, sizeof(err));
	if (!rc)
		rc = open_check_args(s, &args, &o, err, sizeof(err));
	if (!rc)
		rc = open_camera(s, &args, err, sizeof(err));
	if (rc)
		goto out_msg;
	open_keep_offsets(s, &args);
	/* a known state before anything is written: what an earlier run (or another
	 * application) left in the camera does not carry over */
	if (!strcmp(o.reset, "auto")) {
		rc = gc_camera_reset(s->cam, s->cam_id, o.state_dir, &s->undo, err, sizeof(err));
		if (rc)
			goto out_msg;
	}
	rc = gc_features_apply(s->cam, &args, s->cam_id, &s->undo, err, sizeof(err));
	if (!rc)
		rc = shim_args_check_unused(&args, spec, VR_ARRAY_SIZE(spec), err, sizeof(err));
	if (!rc)
		rc = open_set_pixel_format(s, err, sizeof(err));
	if (rc)
		goto out_msg;
	open_describe(s, info);
	*handle = s;
	return 0;

out_msg:
	shim_open_fail(rc, "genicam: %s", err);
	shim_close(s);
	return rc;
}

/* Keep the error of a failed Aravis call, "genicam: camera ID<what>: <Aravis's text>", and
 * clear *ge; returns -EIO. */
static int aravis_fail(struct gc_shim *s, GError **ge, const char *fmt, ...) VR_PRINTF(3, 4);
static int aravis_fail(struct gc_shim *s, GError **ge, const char *fmt, ...)
{
	char what[256];
	va_list ap;
	int rc;

	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	rc = shim_fail(&s->err, -EIO, "genicam: camera %s%s: %s", s->cam_id, what,
	               *ge ? (*ge)->message : "unknown error");
	g_clear_error(ge);
	return rc;
}

/* ---- configure: pixel format, frame size, stream and buffers --------------------------------- */

static const char *type_name(uint32_t t)
{
	static const char *const n[] = {"u16", "i16", "f32", "u12p", "u12gv"};
	return t < 5 ? n[t] : "?";
}

/* The pixel format for the geometry: the one asked for, else the camera's current one when
 * it delivers the sample type, else the first the camera offers that does. */
static int choose_format(struct gc_shim *s, const struct volrec_shim_geometry *g)
{
	static const char *const order[] = {"Mono16", "Mono14", "Mono12", "Mono10", "Mono8"};
	GError *ge = NULL;
	const struct gc_format *f;
	const char **avail;
	guint n = 0;

	if (g->sample_type == VOLREC_SAMPLE_I16 || g->sample_type == VOLREC_SAMPLE_F32)
		return shim_fail(
		        &s->err, -EINVAL,
		        "genicam: no camera pixel format delivers geometry.sample_type %s (u16 "
		        "for Mono8..Mono16, u12p for Mono12p, u12gv for Mono12Packed)",
		        type_name(g->sample_type));
	ArvPixelFormat cur = arv_camera_get_pixel_format(s->cam, &ge);
	if (ge)
		return aravis_fail(s, &ge, ": reading PixelFormat");
	f = gc_format_by_code(cur);
	if (s->pixel_format[0]) {
		if (!f || f->sample_type != g->sample_type)
			return shim_fail(&s->err, -EINVAL,
			                 "genicam: shim.args.pixel_format %s delivers %s, "
			                 "geometry.sample_type is %s",
			                 s->pixel_format, f ? type_name(f->sample_type) : "?",
			                 type_name(g->sample_type));
		s->fmt = f;
		return 0;
	}
	if (f && f->sample_type == g->sample_type) {
		s->fmt = f;
		return 0;
	}
	avail = arv_camera_dup_available_pixel_formats_as_strings(s->cam, &n, &ge);
	g_clear_error(&ge);
	char list[512] = "";
	size_t len = 0;
	for (guint i = 0; avail && i < n; i++)
		if (len < sizeof(list))
			len += (size_t)snprintf(list + len, sizeof(list) - len, "%s%s",
			                        i ? ", " : "", avail[i]);
	const struct gc_format *pick = NULL;
	if (g->sample_type == VOLREC_SAMPLE_U16) {
		for (size_t o = 0; o < sizeof(order) / sizeof(order[0]) && !pick; o++)
			for (guint i = 0; avail && i < n; i++)
				if (!strcmp(avail[i], order[o]))
					pick = gc_format_by_name(order[o]);
	} else {
		const char *want =
		        g->sample_type == VOLREC_SAMPLE_U12P ? "Mono12p" : "Mono12Packed";
		for (guint i = 0; avail && i < n; i++)
			if (!strcmp(avail[i], want))
				pick = gc_format_by_name(want);
	}
	g_free(avail);
	if (!pick)
		return shim_fail(
		        &s->err, -EINVAL,
		        "genicam: camera %s offers no pixel format for geometry.sample_type %s "
		        "(%s needed; it offers: %s)",
		        s->cam_id, type_name(g->sample_type),
		        g->sample_type == VOLREC_SAMPLE_U16    ? "Mono8..Mono16"
		        : g->sample_type == VOLREC_SAMPLE_U12P ? "Mono12p"
		                                               : "Mono12Packed",
		        list);
	arv_camera_set_pixel_format(s->cam, pick->code, &ge);
	if (ge)
		return aravis_fail(s, &ge, " refused PixelFormat %s", pick->name);
	s->fmt = pick;
	return 0;
}

static int set_frame_size(struct gc_shim *s, const struct volrec_shim_geometry *g)
{
	GError *ge = NULL;
	gint wmin = 0, wmax = 0, hmin = 0, hmax = 0, winc = 1, hinc = 1, x, y, w = 0, h = 0;

	if (s->set_geometry) {
		/* offsets 0 first: a camera's Width limit is what the current OffsetX leaves */
		static const char *const off[2] = {"OffsetX", "OffsetY"};
		for (int k = 0; k < 2 && !ge; k++)
			if (arv_device_get_feature(arv_camera_get_device(s->cam), off[k]))
				arv_camera_set_integer(s->cam, off[k], 0, &ge);
		if (ge)
			goto failed;
		arv_camera_get_width_bounds(s->cam, &wmin, &wmax, &ge);
		if (!ge)
			arv_camera_get_height_bounds(s->cam, &hmin, &hmax, &ge);
		if (!ge)
			winc = arv_camera_get_width_increment(s->cam, &ge);
		if (!ge)
			hinc = arv_camera_get_height_increment(s->cam, &ge);
		if (ge)
			goto failed;
		winc = winc > 0 ? winc : 1;
		hinc = hinc > 0 ? hinc : 1;
		if ((gint64)g->samples_per_ascan < wmin || (gint64)g->samples_per_ascan > wmax ||
		    (g->samples_per_ascan - (uint32_t)wmin) % (uint32_t)winc)
			return shim_fail(
			        &s->err, -EINVAL,
			        "genicam: camera %s: geometry.samples_per_ascan %u does not fit "
			        "the camera's Width (%d..%d, increment %d)",
			        s->cam_id, g->samples_per_ascan, wmin, wmax, winc);
		if ((gint64)g->ascans_per_bscan < hmin || (gint64)g->ascans_per_bscan > hmax ||
		    (g->ascans_per_bscan - (uint32_t)hmin) % (uint32_t)hinc)
			return shim_fail(
			        &s->err, -EINVAL,
			        "genicam: camera %s: geometry.ascans_per_bscan %u does not fit the "
			        "camera's Height, the lines per frame (%d..%d, increment %d)",
			        s->cam_id, g->ascans_per_bscan, hmin, hmax, hinc);
		arv_camera_set_region(s->cam, -1, -1, (gint)g->samples_per_ascan,
		                      (gint)g->ascans_per_bscan, &ge);
		if (ge)
			goto failed;
	}
	for (int k = 0; k < 2; k++) {
		char msg[512];
		int rc;
		if (!s->offset[k].key[0])
			continue;
		rc = gc_feature_apply(arv_camera_get_device(s->cam), &s->offset[k], s->cam_id, msg,
		                      sizeof(msg));
		if (rc)
			return shim_fail(&s->err, rc,
			                 "genicam: %s (written after Width = %u, Height = %u)", msg,
			                 g->samples_per_ascan, g->ascans_per_bscan);
	}
	arv_camera_get_region(s->cam, &x, &y, &w, &h, &ge);
	if (ge)
		goto failed;
	if ((uint32_t)w != g->samples_per_ascan || (uint32_t)h != g->ascans_per_bscan)
		return shim_fail(
		        &s->err, -EINVAL,
		        "genicam: camera %s delivers frames of %d x %d pixels, the geometry "
		        "needs %u x %u (Width = samples_per_ascan, Height = ascans_per_bscan)%s",
		        s->cam_id, w, h, g->samples_per_ascan, g->ascans_per_bscan,
		        s->set_geometry ? "" : "; set_geometry is false");
	return 0;
failed:
	return aravis_fail(s, &ge, ": setting the frame to %u x %u pixels", g->samples_per_ascan,
	                   g->ascans_per_bscan);
}

static void stream_free(struct gc_shim *s)
{
	if (s->stream) {
		/* finalizing the stream stops its thread and unrefs the buffers in its queues;
		 * those out of it are ours */
		g_object_unref(s->stream);
		s->stream = NULL;
		s->held = NULL; /* out of the stream: unref'ed below */
		for (uint32_t i = 0; i < s->nbuf; i++)
			if (atomic_load(&s->out[i]))
				g_object_unref(s->bufs[i]);
	} else {
		for (uint32_t i = 0; s->bufs && i < s->nbuf; i++)
			if (s->bufs[i])
				g_object_unref(s->bufs[i]);
	}
	if (s->fk) {
		gc_fake_free(s->cam, s->fk);
		s->fk = NULL;
	}
	free(s->bufs);
	s->bufs = NULL;
	free(s->out);
	s->out = NULL;
	free(s->slot);
	s->slot = NULL;
	if (s->region)
		munmap(s->region, s->region_size);
	s->region = NULL;
	s->nbuf = 0;
}

static bool is_loopback(ArvGvDevice *gv)
{
	GSocketAddress *sa = arv_gv_device_get_device_address(gv);
	bool lo = false;

	if (sa && G_IS_INET_SOCKET_ADDRESS(sa))
		lo = g_inet_address_get_is_loopback(
		        g_inet_socket_address_get_address(G_INET_SOCKET_ADDRESS(sa)));
	return lo;
}

/* The camera set to stream continuously; a GigE Vision one with its packet socket and size. */
static int configure_transport(struct gc_shim *s)
{
	ArvDevice *dev = arv_camera_get_device(s->cam);
	GError *ge = NULL;

	/* a camera without AcquisitionMode streams continuously anyway; one that has it must
	 * take Continuous, or it would stop after a frame or a few */
	if (arv_device_get_feature(dev, "AcquisitionMode")) {
		arv_camera_set_acquisition_mode(s->cam, ARV_ACQUISITION_MODE_CONTINUOUS, &ge);
		if (ge)
			return aravis_fail(s, &ge, " refused AcquisitionMode Continuous");
	}
	if (arv_camera_is_gv_device(s->cam)) {
		ArvGvDevice *gv = ARV_GV_DEVICE(dev);
		bool lo = is_loopback(gv);
		bool sock = s->packet_socket < 0 ? !lo : s->packet_socket;

		arv_gv_device_set_stream_options(
		        gv, sock ? ARV_GV_STREAM_OPTION_NONE
		                 : ARV_GV_STREAM_OPTION_PACKET_SOCKET_DISABLED);
		if (s->packet_size > 0)
			arv_camera_gv_set_packet_size(s->cam, (gint)s->packet_size, &ge);
		else if (s->packet_size < 0 || s->packet_size == 0)
			arv_camera_gv_auto_packet_size(s->cam, &ge);
		if (ge)
			return aravis_fail(s, &ge, ": packet size %s",
			                   s->packet_size > 0 ? "refused" : "negotiation failed");
	}
	return 0;
}

/* The stream buffers of geometry g into s->nbuf: as asked, else enough for what volrecd holds. */
static void buffer_count(struct gc_shim *s, const struct volrec_shim_geometry *g)
{
	if (s->buffers) {
		s->nbuf = (uint32_t)s->buffers;
	} else {
		/* volrecd holds up to pipeline.ring_bscans buffers when processing falls
		 * behind; with fewer the camera would run out of buffers and lose frames,
		 * counted as source losses instead of the epochs the ring drops */
		uint64_t held =
		        (g->flags & VOLREC_SHIM_GEOMETRY_HELD) ? g->held_bscans : HELD_DEFAULT;
		const uint64_t raw = (uint64_t)g->bscans_per_volume * shim_repeats(g);
		uint64_t n = held + raw;
		if (n < 3 * raw)
			n = 3 * raw;
		s->nbuf = n > BUF_MAX ? BUF_MAX : (uint32_t)n;
	}
	if (s->nbuf < BUF_MIN)
		s->nbuf = BUF_MIN;
	if (s->nbuf > BUF_MAX)
		s->nbuf = BUF_MAX;
}

/* The one region of s->nbuf buffers of payload bytes (and their widened copies, and the
 * dummy B-scan), and an ArvBuffer on each; stream_free() undoes what was done. */
static int buffers_alloc(struct gc_shim *s, size_t payload)
{
	s->stride = (payload + PAGE - 1) / PAGE * PAGE;
	s->out_stride = s->fmt->widen ? (s->bscan_bytes + PAGE - 1) / PAGE * PAGE : 0;
	s->region_size = (size_t)s->nbuf * (s->stride + s->out_stride) +
	                 (s->bscan_bytes + PAGE - 1) / PAGE * PAGE;
	s->region = mmap(NULL, s->region_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
	                 -1, 0);
	if (s->region == MAP_FAILED) {
		s->region = NULL;
		return shim_fail(&s->err, -ENOMEM,
		                 "genicam: cannot map %zu bytes of stream buffers", s->region_size);
	}
	s->dummy = s->region + (size_t)s->nbuf * (s->stride + s->out_stride);
	s->bufs = calloc(s->nbuf, sizeof(*s->bufs));
	s->out = calloc(s->nbuf, sizeof(*s->out));
	s->slot = calloc(s->nbuf, sizeof(*s->slot));
	if (!s->bufs || !s->out || !s->slot)
		return shim_fail(&s->err, -ENOMEM, "genicam: out of memory");
	for (uint32_t i = 0; i < s->nbuf; i++) {
		s->bufs[i] = arv_buffer_new_full(s->stride, s->region + (size_t)i * s->stride,
		                                 GUINT_TO_POINTER(i + 1), NULL);
		if (!s->bufs[i])
			return shim_fail(&s->err, -ENOMEM, "genicam: out of memory");
	}
	return 0;
}

/* The stream (and with simulate: synth, the Fake camera's spectra attached); every buffer
 * starts out of it, start() pushes them. stream_free() undoes what was done. */
static int stream_create(struct gc_shim *s, const struct volrec_shim_geometry *g)
{
	GError *ge = NULL;
	int rc;

	if (s->fake.synth) {
		char err[GC_MSG_MAX - 64];
		rc = gc_fake_attach(s->cam, &s->fake, g, s->fmt, &s->fk, err, sizeof(err));
		if (rc)
			return shim_fail(&s->err, rc, "genicam: %s", err);
	}
	s->stream = arv_camera_create_stream(s->cam, NULL, NULL, &ge);
	if (!s->stream)
		return aravis_fail(s, &ge, ": cannot create the stream");
	if (ARV_IS_GV_STREAM(s->stream)) {
		/* a burst of frames must fit the socket while the receiving thread is not
		 * running: 8 frames by default (the kernel caps it at net.core.rmem_max) */
		uint64_t sb = s->socket_buffer ? s->socket_buffer : 8 * (uint64_t)s->stride;
		g_object_set(s->stream, "packet-resend",
		             s->packet_resend ? ARV_GV_STREAM_PACKET_RESEND_ALWAYS
		                              : ARV_GV_STREAM_PACKET_RESEND_NEVER,
		             "socket-buffer", ARV_GV_STREAM_SOCKET_BUFFER_FIXED,
		             "socket-buffer-size", (gint)(sb > INT32_MAX ? INT32_MAX : sb), NULL);
	}
	for (uint32_t i = 0; i < s->nbuf; i++)
		atomic_store(&s->out[i], 2);
	return 0;
}

static int shim_configure(void *h, const struct volrec_shim_geometry *g)
{
	struct gc_shim *s = h;
	ArvDevice *dev = arv_camera_get_device(s->cam);
	GError *ge = NULL;
	size_t payload;
	int rc;

	if (s->started)
		return shim_fail(&s->err, -EBUSY, "genicam: configure() while started");
	stream_free(s);
	s->configured = false;
	if (!g->samples_per_ascan || !g->ascans_per_bscan || !g->bscans_per_volume)
		return shim_fail(&s->err, -EINVAL, "genicam: empty geometry");
	if ((g->sample_type == VOLREC_SAMPLE_U12P || g->sample_type == VOLREC_SAMPLE_U12GV) &&
	    g->samples_per_ascan % 2)
		return shim_fail(&s->err, -EINVAL, "genicam: samples_per_ascan %u is odd with %s",
		                 g->samples_per_ascan, type_name(g->sample_type));
	rc = choose_format(s, g);
	if (rc)
		return rc;
	/* the Fake camera's own test pattern fills Mono8 and Mono16 only: other frames would
	 * arrive complete but never written */
	if (ARV_IS_FAKE_DEVICE(dev) && !s->fake.synth && s->fmt->code != ARV_PIXEL_FORMAT_MONO_8 &&
	    s->fmt->code != ARV_PIXEL_FORMAT_MONO_16)
		return shim_fail(&s->err, -EINVAL,
		                 "genicam: camera %s fills %s frames only with simulate: synth "
		                 "(its own test pattern is Mono8 or Mono16)",
		                 s->cam_id, s->fmt->name);
	rc = set_frame_size(s, g);
	if (!rc)
		rc = configure_transport(s);
	if (rc)
		return rc;
	payload = arv_camera_get_payload(s->cam, &ge);
	if (ge)
		return aravis_fail(s, &ge, ": reading PayloadSize");
	s->geo = *g;
	s->marks = g->flags & VOLREC_SHIM_GEOMETRY_MARKS;
	s->bscan_bytes = volrec_sample_bytes(g->sample_type,
	                                     (size_t)g->samples_per_ascan * g->ascans_per_bscan);
	s->frame_bytes =
	        s->fmt->widen ? (size_t)g->samples_per_ascan * g->ascans_per_bscan : s->bscan_bytes;
	if (payload < s->frame_bytes)
		return shim_fail(
		        &s->err, -EINVAL,
		        "genicam: camera %s: PayloadSize %zu bytes is less than a frame of %u x "
		        "%u %s pixels (%zu bytes)",
		        s->cam_id, payload, g->samples_per_ascan, g->ascans_per_bscan, s->fmt->name,
		        s->frame_bytes);
	buffer_count(s, g);
	rc = buffers_alloc(s, payload);
	if (!rc)
		rc = stream_create(s, g);
	if (rc) {
		stream_free(s);
		return rc;
	}
	s->configured = true;
	s->next_pos = 0;
	return 0;
}

static int shim_ref_regions(void *h, struct volrec_shim_region *regions, uint32_t max,
                            uint32_t *count)
{
	struct gc_shim *s = h;

	if (!s->configured)
		return shim_fail(&s->err, -EINVAL, "genicam: ref_regions() before configure()");
	if (max >= 1) {
		regions[0].base = s->region;
		regions[0].size = s->region_size;
	}
	*count = 1;
	return 0;
}

static int shim_set_scan_offset(void *h, uint64_t epoch, uint32_t ox, uint32_t oy)
{
	struct gc_shim *s = h;
	uint64_t ny;

	if (!s->configured)
		return shim_fail(&s->err, -EINVAL, "genicam: set_scan_offset() before configure()");
	if (ox >= s->geo.stride_x || oy >= s->geo.stride_y)
		return shim_fail(&s->err, -EINVAL,
		                 "genicam: offset (%u, %u) outside stride [%u, %u]", ox, oy,
		                 s->geo.stride_x, s->geo.stride_y);
	ny = (uint64_t)s->geo.bscans_per_volume * shim_repeats(&s->geo); /* raw B-scans an epoch */
	if (epoch * ny < s->next_pos) {
		if (s->next_pos % ny && s->next_pos / ny == epoch)
			return shim_fail(&s->err, -EBUSY,
			                 "genicam: epoch %" PRIu64 " is being acquired", epoch);
		if (s->started)
			return shim_fail(&s->err, -EINVAL,
			                 "genicam: epoch %" PRIu64 " told after epoch %" PRIu64
			                 " began: a camera cannot go back",
			                 epoch, s->next_pos / ny);
	}
	/* frames of the epochs skipped are discarded as they arrive; the scanner follows the
	 * frame count (docs/cameras.md), so the position, not the told offset, is what counts */
	s->next_pos = epoch * ny;
	return 0;
}

/* Give buffer i back to the stream. */
static void requeue(struct gc_shim *s, ArvBuffer *b)
{
	uint32_t i = GPOINTER_TO_UINT(arv_buffer_get_user_data(b)) - 1;
	atomic_store(&s->out[i], 0);
	arv_stream_push_buffer(s->stream, b);
}

static int shim_start(void *h)
{
	struct gc_shim *s = h;
	GError *ge = NULL;
	ArvBuffer *b;

	if (!s->configured)
		return shim_fail(&s->err, -EINVAL, "genicam: start() before configure()");
	if (s->fk) {
		/* the in-process Fake camera fills whatever is queued: no fill may run while the
		 * frame count restarts */
		arv_stream_stop_thread(s->stream, FALSE);
	}
	while ((b = arv_stream_try_pop_buffer(s->stream)))
		requeue(s, b);
	if (s->held) {
		requeue(s, s->held);
		s->held = NULL;
	}
	for (uint32_t i = 0; i < s->nbuf; i++)
		if (atomic_load(&s->out[i]) == 2)
			requeue(s, s->bufs[i]);
	s->have_last = false;
	s->extended = false;
	s->incomplete = 0;
	atomic_store(&s->control_lost, false);
	if (s->fk) {
		gc_fake_restart(s->fk, s->next_pos);
		arv_stream_start_thread(s->stream);
	}
	arv_camera_start_acquisition(s->cam, &ge);
	if (ge)
		return aravis_fail(s, &ge, ": AcquisitionStart failed");
	s->started = true;
	return 0;
}

/* Frames between two ids: 16-bit GigE Vision ids run 1..65535 (0 is not used), extended
 * (GigE Vision 2, USB3 Vision) ids are 64-bit. */
static uint64_t id_step(struct gc_shim *s, uint64_t last, uint64_t id)
{
	if (id > 65535 || last > 65535)
		s->extended = true;
	if (s->extended)
		return id - last; /* wraps to a huge step when the id went back */
	if (id >= last)
		return id - last;
	return id + 65535 - last;
}

/* A frame Aravis says is complete and that has the shape configured; else why not, in why. */
static bool frame_complete(const struct gc_shim *s, ArvBuffer *b, char *why, size_t whylen)
{
	static const char *const status[] = {"complete",
	                                     "cleared",
	                                     "timed out waiting for its packets",
	                                     "missing packets",
	                                     "a packet of another frame",
	                                     "larger than the buffer (PayloadSize)",
	                                     "still filling",
	                                     "aborted"};
	ArvBufferStatus st = arv_buffer_get_status(b);
	ArvBufferPayloadType pt = arv_buffer_get_payload_type(b);
	size_t got = 0;

	if (st != ARV_BUFFER_STATUS_SUCCESS) {
		if (st >= 0 && (size_t)st < sizeof(status) / sizeof(status[0]))
			snprintf(why, whylen, "%s", status[st]);
		else
			snprintf(why, whylen, "buffer status %d", (int)st);
		return false;
	}
	if (pt != ARV_BUFFER_PAYLOAD_TYPE_IMAGE) {
		snprintf(why, whylen,
		         "payload type %d, not a plain image (chunk data is not taken)", (int)pt);
		return false;
	}
	const struct gc_format *f = gc_format_by_code(arv_buffer_get_image_pixel_format(b));
	if ((uint32_t)arv_buffer_get_image_width(b) != s->geo.samples_per_ascan ||
	    (uint32_t)arv_buffer_get_image_height(b) != s->geo.ascans_per_bscan || f != s->fmt) {
		snprintf(why, whylen, "%d x %d pixels %s, configured %u x %u %s",
		         arv_buffer_get_image_width(b), arv_buffer_get_image_height(b),
		         f ? f->name : "(a format volrec does not take)", s->geo.samples_per_ascan,
		         s->geo.ascans_per_bscan, s->fmt->name);
		return false;
	}
	gint xpad = 0, ypad = 0;
	arv_buffer_get_image_padding(b, &xpad, &ypad);
	if (xpad) { /* lines not back to back: every A-scan after the first would be shifted */
		snprintf(why, whylen,
		         "%d bytes of padding after each line (not taken: the camera's line "
		         "padding must be off)",
		         xpad);
		return false;
	}
	arv_buffer_get_data(b, &got);
	/* 0: nothing received, except from the synthetic fill (fake.c), which cannot set it */
	if (got >= s->frame_bytes || (got == 0 && s->fk))
		return true;
	snprintf(why, whylen, "%zu of %zu bytes received", got, s->frame_bytes);
	return false;
}

/* The held frame at the next position, or (it is further on) the mark of the position before
 * it, lost or incomplete; a mark without VOLREC_SHIM_META_LOST / _INCOMPLETE honoured is a
 * fault. */
static int deliver_held(struct gc_shim *s, ArvBuffer **out, struct volrec_shim_meta *meta)
{
	/* a position counts raw B-scans: ny x M an epoch, the M repeats of a B-scan in a row */
	const uint32_t m_n = shim_repeats(&s->geo);
	const uint64_t raw = (uint64_t)s->geo.bscans_per_volume * m_n;
	uint32_t flag = 0;

	if (s->held_pos > s->next_pos) {
		flag = s->incomplete ? VOLREC_SHIM_META_INCOMPLETE : VOLREC_SHIM_META_LOST;
		if (s->incomplete)
			s->incomplete--;
		if (!s->marks) {
			uint64_t pos = s->next_pos++;
			return shim_fail(&s->err, -EIO,
			                 "genicam: camera %s: the frame of epoch %" PRIu64
			                 " B-scan %" PRIu64 " repeat %" PRIu64 " %s",
			                 s->cam_id, pos / raw, pos % raw / m_n, pos % m_n,
			                 flag == VOLREC_SHIM_META_LOST
			                         ? "never arrived (frame id gap)"
			                         : "arrived incomplete");
		}
	} else {
		*out = s->held;
		s->held = NULL;
		s->incomplete = 0;
	}
	if (meta) {
		uint64_t ts = *out ? arv_buffer_get_system_timestamp(*out) : 0;
		meta->timestamp_ns = ts ? ts : vr_now_ns(CLOCK_REALTIME);
		meta->epoch = s->next_pos / raw;
		meta->bscan = (uint32_t)(s->next_pos % raw / m_n);
		meta->flags = flag;
		if (s->geo.flags & VOLREC_SHIM_GEOMETRY_REPEATS) {
			meta->repeat = (uint32_t)(s->next_pos % m_n);
			meta->reserved = 0;
		}
	}
	s->next_pos++;
	return 0;
}

/*
 * The B-scan due at next_pos: *out a complete frame (the caller gives it back), or NULL with
 * meta->flags carrying why that position has no data. -ETIMEDOUT when nothing came.
 */
static int next_bscan(struct gc_shim *s, int timeout_ms, ArvBuffer **out,
                      struct volrec_shim_meta *meta)
{
	const uint64_t t0 = vr_now_ns(CLOCK_MONOTONIC);
	const uint64_t limit = timeout_ms < 0 ? UINT64_MAX : (uint64_t)timeout_ms * 1000000ull;
	uint64_t bad = 0; /* incomplete frames in this call */
	char why[160] = "";

	*out = NULL;
	for (;;) {
		if (s->held && s->held_pos < s->next_pos) {
			requeue(s, s->held); /* before the epoch told: skipped */
			s->held = NULL;
		}
		if (s->held)
			return deliver_held(s, out, meta);
		if (atomic_load(&s->control_lost))
			return shim_fail(&s->err, -ENODEV,
			                 "genicam: camera %s: control lost (no heartbeat answer: "
			                 "disconnected, powered off or taken over)",
			                 s->cam_id);
		uint64_t el = vr_now_ns(CLOCK_MONOTONIC) - t0;
		if (el >= limit && bad)
			return shim_fail(&s->err, -EIO,
			                 "genicam: camera %s: %" PRIu64
			                 " frame%s within %d ms, none complete (the last: %s)",
			                 s->cam_id, bad, bad == 1 ? "" : "s", timeout_ms, why);
		if (el >= limit)
			return shim_fail(
			        &s->err, -ETIMEDOUT,
			        "genicam: camera %s: no frame within %d ms (trigger wiring, "
			        "TriggerMode, frame rate, or the network: docs/cameras.md)",
			        s->cam_id, timeout_ms);
		uint64_t wait_us = (limit - el) / 1000;
		ArvBuffer *b = arv_stream_timeout_pop_buffer(s->stream,
		                                             wait_us > 100000 ? 100000 : wait_us);
		if (!b)
			continue;
		uint32_t i = GPOINTER_TO_UINT(arv_buffer_get_user_data(b)) - 1;
		atomic_store(&s->out[i], 1);
		if (!frame_complete(s, b, why, sizeof(why))) {
			s->incomplete++;
			bad++;
			requeue(s, b);
			continue;
		}
		uint64_t id = arv_buffer_get_frame_id(b), pos;
		if (!s->have_last) {
			pos = s->next_pos + s->incomplete; /* the first frame anchors the count */
		} else {
			uint64_t d = id_step(s, s->last_id, id);
			if (d == 0) { /* a duplicate */
				requeue(s, b);
				continue;
			}
			if (d > (s->extended ? GAP64_MAX : GAP16_MAX)) {
				/* the camera restarted its count: start over from this frame */
				uint64_t last = s->last_id;
				s->have_last = false;
				s->incomplete = 0;
				requeue(s, b);
				return shim_fail(&s->err, -EIO,
				                 "genicam: camera %s: frame id went from %" PRIu64
				                 " to %" PRIu64 " (the camera restarted its count)",
				                 s->cam_id, last, id);
			}
			pos = s->last_pos + d;
		}
		s->have_last = true;
		s->last_id = id;
		s->last_pos = pos;
		s->held = b;
		s->held_pos = pos;
	}
}

/* The B-scan of frame b in the caller's layout: the frame itself, or (Mono8) widened into
 * dst. */
static const void *deliver(struct gc_shim *s, ArvBuffer *b, void *dst)
{
	const uint8_t *src = arv_buffer_get_data(b, NULL);
	size_t n = (size_t)s->geo.samples_per_ascan * s->geo.ascans_per_bscan;

	if (!s->fmt->widen) {
		if (dst)
			memcpy(dst, src, s->bscan_bytes);
		return src;
	}
	uint16_t *o = dst;
	for (size_t k = 0; k < n; k++)
		o[k] = src[k];
	return o;
}

/* Mono8: take a free slot for a widened copy, waiting up to timeout_ms for a release. */
static int take_slot(struct gc_shim *s, int timeout_ms, uint32_t *out)
{
	const uint64_t t0 = vr_now_ns(CLOCK_MONOTONIC);

	for (;;) {
		for (uint32_t i = 0; i < s->nbuf; i++) {
			unsigned char z = 0;
			if (atomic_compare_exchange_strong(&s->slot[i], &z, 1)) {
				*out = i;
				return 0;
			}
		}
		if (timeout_ms >= 0 &&
		    vr_now_ns(CLOCK_MONOTONIC) - t0 >= (uint64_t)timeout_ms * 1000000ull)
			return shim_fail(
			        &s->err, -ETIMEDOUT,
			        "genicam: all %u B-scan buffers are held (the caller holds more "
			        "than shim.args.buffers)",
			        s->nbuf);
		struct timespec ts = {0, 200000};
		nanosleep(&ts, NULL);
	}
}

static int shim_acquire(void *h, void *buf, size_t size, int timeout_ms,
                        struct volrec_shim_meta *meta)
{
	struct gc_shim *s = h;
	ArvBuffer *b;
	int rc;

	if (!s->started)
		return shim_fail(&s->err, -EINVAL, "genicam: acquire() before start()");
	if (size < s->bscan_bytes)
		return shim_fail(&s->err, -EINVAL, "genicam: buffer of %zu bytes, a B-scan is %zu",
		                 size, s->bscan_bytes);
	rc = next_bscan(s, timeout_ms, &b, meta);
	if (rc || !b)
		return rc;
	deliver(s, b, buf);
	requeue(s, b);
	return 0;
}

static int shim_acquire_ref(void *h, const void **bscan, int timeout_ms,
                            struct volrec_shim_meta *meta)
{
	struct gc_shim *s = h;
	ArvBuffer *b;
	int rc;

	if (!s->started)
		return shim_fail(&s->err, -EINVAL, "genicam: acquire_ref() before start()");
	if (!bscan)
		return shim_fail(&s->err, -EINVAL, "genicam: acquire_ref() without a pointer");
	uint32_t slot = 0;
	if (s->fmt->widen) {
		rc = take_slot(s, timeout_ms, &slot);
		if (rc)
			return rc;
	}
	rc = next_bscan(s, timeout_ms, &b, meta);
	if (rc || !b) {
		if (s->fmt->widen)
			atomic_store(&s->slot[slot], 0);
		if (rc)
			return rc;
		*bscan = s->dummy;
	} else if (s->fmt->widen) {
		/* the widened copy is what is held; the camera buffer goes back at once */
		*bscan = deliver(s, b,
		                 s->region + (size_t)s->nbuf * s->stride +
		                         (size_t)slot * s->out_stride);
		requeue(s, b);
	} else {
		*bscan = deliver(s, b, NULL);
	}
	atomic_fetch_add(&s->refs, 1);
	return 0;
}

static int shim_release_ref(void *h, const void *p)
{
	struct gc_shim *s = h;
	const uint8_t *q = p;
	size_t off, slot;

	if (!atomic_load(&s->refs))
		return shim_fail(&s->err, -EINVAL,
		                 "genicam: release_ref(%p) with no reference held", p);
	if (q == s->dummy) {
		atomic_fetch_sub(&s->refs, 1);
		return 0;
	}
	if (!q || q < s->region || q >= s->dummy)
		return shim_fail(&s->err, -EINVAL,
		                 "genicam: release_ref(%p): not a B-scan of this shim", p);
	off = (size_t)(q - s->region);
	if (!s->fmt->widen) {
		if (off % s->stride)
			return shim_fail(&s->err, -EINVAL,
			                 "genicam: release_ref(%p): not a B-scan start", p);
		slot = off / s->stride;
		if (atomic_load(&s->out[slot]) != 1)
			return shim_fail(&s->err, -EINVAL,
			                 "genicam: release_ref(%p): not a B-scan held", p);
		atomic_fetch_sub(&s->refs, 1);
		requeue(s, s->bufs[slot]);
		return 0;
	}
	if (q < s->region + (size_t)s->nbuf * s->stride)
		return shim_fail(&s->err, -EINVAL, "genicam: release_ref(%p): not a B-scan start",
		                 p);
	off -= (size_t)s->nbuf * s->stride;
	if (off % s->out_stride || !atomic_load(&s->slot[off / s->out_stride]))
		return shim_fail(&s->err, -EINVAL, "genicam: release_ref(%p): not a B-scan held",
		                 p);
	atomic_store(&s->slot[off / s->out_stride], 0);
	atomic_fetch_sub(&s->refs, 1);
	return 0;
}

static int shim_stop(void *h)
{
	struct gc_shim *s = h;
	GError *ge = NULL;
	int rc = 0;

	if (!s->started)
		return 0;
	s->started = false;
	arv_camera_stop_acquisition(s->cam, &ge);
	if (ge)
		rc = aravis_fail(s, &ge, ": AcquisitionStop failed");
	return rc;
}

static void shim_close(void *h)
{
	struct gc_shim *s = h;

	if (!s)
		return;
	if (s->started)
		shim_stop(s);
	stream_free(s);
	if (s->cam) {
		gc_undo_finish(s->cam, &s->undo, !atomic_load(&s->control_lost));
		if (s->lost_handler)
			g_signal_handler_disconnect(arv_camera_get_device(s->cam), s->lost_handler);
		g_object_unref(s->cam);
	}
	free(s);
}

const struct volrec_shim_ops shim_ops = {
        SHIM_OPS_BASE,
        .ref_regions = shim_ref_regions,
        .acquire_ref = shim_acquire_ref,
        .release_ref = shim_release_ref,
};
