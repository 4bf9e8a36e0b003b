/* SPDX-License-Identifier: MIT */
/*
 * `volrec view` (vw_): the web viewer. A feed thread reads the views of the newest volume
 * through libvolrec and encodes each picture once into a WebSocket frame (frame.c, feed.c);
 * the libwebsockets thread serves the page's assets and hands every browser the newest frame of
 * each pane it shows when its socket can take one (server.c); `set` requests go to the daemon's
 * control socket (control.c). The wire format is docs/viewer.md.
 */
#ifndef VOLREC_CLIENTS_VIEW_INTERNAL_H
#define VOLREC_CLIENTS_VIEW_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <json-c/json.h>

#include <volrec/client.h>
#include <volrec/protocol.h>

#include "base/base.h"

#define VW_PATH_MAX 4096

/* ---- frames (frame.c): the binary WebSocket message of one picture -------------------------- */

#define VW_FRAME_MAGIC   UINT32_C(0x46565256) /* "VRVF" read as little-endian */
#define VW_FRAME_VERSION 2
#define VW_FRAME_HEADER  256 /* bytes before the payload */

enum vw_encoding {
	VW_ENC_RAW = 0,     /* rows * cols bytes, row-major */
	VW_ENC_DEFLATE = 1, /* the same bytes as a zlib stream (RFC 1950) */
};

/* What the viewer chooses per picture. */
enum vw_encoding_mode {
	VW_MODE_AUTO,    /* deflate above deflate_min bytes when it saves an eighth, raw below */
	VW_MODE_RAW,     /* always raw */
	VW_MODE_DEFLATE, /* always deflate */
};

struct vw_encode_opts {
	enum vw_encoding_mode mode;
	uint32_t max_side;    /* pictures larger are reduced (max over blocks) to at most this */
	uint32_t deflate_min; /* auto: raw up to this many bytes */
	int level;            /* zlib level, 1 (fast) .. 9 */
};

/*
 * Picture kinds: the daemon's own (0..VOLREC_IMAGE_COUNT-1, of the structure, protocol.h), then
 * the pictures of the channels past the structure (docs/protocol.md §2.8): angiography's and
 * Doppler's en-face mean, en-face maximum and B-scan, in that order (docs/viewer.md).
 */
#define VW_CHANNEL_KIND0    VOLREC_IMAGE_COUNT /* angio_enface_mean */
#define VW_CHANNEL_PICTURES 3                  /* enface_mean, enface_max, bscan */
#define VW_KIND_COUNT       (VOLREC_IMAGE_COUNT + 2 * VW_CHANNEL_PICTURES)
#define VW_CHANNEL_KINDS    (((1u << VW_KIND_COUNT) - 1) & ~((1u << VW_CHANNEL_KIND0) - 1))

/* The picture of the views area (enum volrec_image_kind) a kind is made as, and its channel
 * (enum volrec_channel_kind: 0 structure, 1 angio, 2 doppler). */
static inline unsigned vw_kind_base(unsigned k)
{
	static const unsigned base[VW_CHANNEL_PICTURES] = {
	        VOLREC_IMAGE_ENFACE_MEAN, VOLREC_IMAGE_ENFACE_MAX, VOLREC_IMAGE_BSCAN};

	return k < VW_CHANNEL_KIND0 ? k : base[(k - VW_CHANNEL_KIND0) % VW_CHANNEL_PICTURES];
}

static inline unsigned vw_kind_channel(unsigned k)
{
	return k < VW_CHANNEL_KIND0 ? 0 : 1 + (k - VW_CHANNEL_KIND0) / VW_CHANNEL_PICTURES;
}

/* What a frame says about the picture beside its pixels. */
struct vw_frame_meta {
	uint64_t volume_id;    /* the volume the picture shows */
	uint64_t epoch;        /* epoch of the volume it was read with */
	uint64_t t_last_ns;    /* CLOCK_REALTIME: last B-scan of the pictured volume acquired */
	uint64_t t_publish_ns; /* it was published */
	uint64_t t_read_ns;    /* the viewer took the picture */
	uint64_t session_id;   /* the daemon's session */
	uint32_t shape[3];     /* volume [Y, X, Z] */
	double voxel_um[3];    /* its voxel size [dy, dx, dz] in um, 0 unknown */
	/* a channel's picture: its kind (VW_CHANNEL_KIND0 ...) and the channel's meaning; NULL:
	 * the structure's, of kind img->kind */
	unsigned kind;
	const struct volrec_channel *chan;
};

/* One encoded picture: header and payload at buf + VW_PRE (room for the WebSocket header). */
struct vw_frame {
	uint64_t serial; /* set by the server when it takes the frame (per kind, increasing) */
	size_t len;      /* header + payload bytes */
	unsigned char *buf;
};

/* Encode picture img into a new frame (*out, freed with vw_frame_free): a 2-D picture reduced
 * above o->max_side, the reduced volume as it is. 0, -ENOMEM, or -EIO when zlib fails. */
int vw_frame_encode(const struct volrec_image *img, const struct vw_frame_meta *m,
                    const struct vw_encode_opts *o, struct vw_frame **out) VR_MUST_CHECK;
void vw_frame_free(struct vw_frame *f);
/* Bytes of the reduced picture: rows x cols reduced by the smallest integer steps that bring
 * both sides to at most max_side (0: no reduction). */
void vw_reduce_dims(uint32_t rows, uint32_t cols, uint32_t max_side, uint32_t *rstep,
                    uint32_t *cstep, uint32_t *orows, uint32_t *ocols);
/* Reduce src (rows x cols) by rstep x cstep blocks, each to its maximum, into dst. */
void vw_reduce_max(const uint8_t *src, uint32_t rows, uint32_t cols, uint32_t rstep, uint32_t cstep,
                   uint8_t *dst);
/* The same for a signed quantity stored as q = 127.5 + 127.5 s (Doppler: zero flow at 127.5):
 * each block to its value farthest from zero flow (the first such), so fast flow either way
 * stays visible and a block's sign is never made up. */
void vw_reduce_signed(const uint8_t *src, uint32_t rows, uint32_t cols, uint32_t rstep,
                      uint32_t cstep, uint8_t *dst);
/* Name of a picture kind ("enface_mean", ..., "doppler_bscan"), NULL past the end; and back
 * (-1 unknown). */
const char *vw_kind_name(unsigned kind);
int vw_kind_from_name(const char *name);

/* Bytes the server reserves in front of a frame's header (LWS_PRE). */
extern const size_t VW_PRE;

/* ---- a browser's own crosshair and slab (extract.c) ----------------------------------------- */

/* The pictures that depend on the crosshair or the slab: the ones a browser may have its own of. */
#define VW_OWN_KINDS                                                                               \
	((1u << VOLREC_IMAGE_ENFACE_MEAN) | (1u << VOLREC_IMAGE_ENFACE_MAX) |                      \
	 (1u << VOLREC_IMAGE_BSCAN) | (1u << VOLREC_IMAGE_SLICE) | (1u << VOLREC_IMAGE_PLANE) |    \
	 VW_CHANNEL_KINDS)
#define VW_OWN_MAX 64 /* different own views extracted at once, at most */

/* A browser's view: its own position and/or slab, the daemon's for what is not its own. */
struct vw_own_key {
	bool own_pos, own_slab;
	uint32_t pos[3];  /* [y0, x0, z0] when own_pos */
	uint32_t slab[2]; /* [za, zb) when own_slab */
};

bool vw_own_key_equal(const struct vw_own_key *a, const struct vw_own_key *b);

/* Picture kind (one of VW_OWN_KINDS) of the u8 volume vol ([ny][nx][nz], z fastest) at position
 * pos / over slab [za, zb) (docs/algorithms.md §4: the en-face mean rounded half up in
 * integers), into out (room for the picture: the largest of ny*nx, nx*nz, ny*nz bytes) and
 * *img (its data out; the caller sets volume_id). The position and slab must lie in the volume
 * (vw_view_check). */
void vw_extract(const uint8_t *vol, uint32_t ny, uint32_t nx, uint32_t nz, unsigned kind,
                const uint32_t pos[3], const uint32_t slab[2], uint8_t *out,
                struct volrec_image *img);

/* Whether a position and a slab (either NULL) lie in a volume of shape [Y, X, Z]: 0, or -EINVAL
 * and what is wrong in err. */
int vw_view_check(const uint32_t shape[3], const uint32_t *pos, const uint32_t *slab, char *err,
                  size_t errlen) VR_MUST_CHECK;

/* ---- the feed thread (feed.c) --------------------------------------------------------------- */

/* The own views some browser shows (set by the server) and their newest pictures (set by the
 * feed), in the mailbox. */
struct vw_own_req {
	struct vw_own_key key;
	unsigned kinds; /* the pictures of VW_OWN_KINDS some browser with this view shows */
	bool fresh;     /* the server has not all of them: extract even if done for this volume */
};

struct vw_own_out {
	struct vw_own_key key;
	struct vw_frame *frame[VW_KIND_COUNT];
};

/* The texts a browser gets besides pictures, in the order it gets them when several are due. */
enum vw_text_kind {
	VW_STATE,  /* the feed's connection state as a JSON object */
	VW_STATUS, /* daemon status JSON */
	VW_EVENT,  /* newest daemon event JSON */
	VW_TEXTS,
};

/* The mailbox between the feed thread and the server: the newest frame of each kind and the
 * newest text of each kind, replaced (never queued) until the server takes them. */
struct vw_mailbox {
	pthread_mutex_t lock;
	struct vw_frame *frame[VW_KIND_COUNT];
	char *text[VW_TEXTS]; /* malloc'ed */
	bool clear;           /* a new session: the server drops the pictures of the one before */
	bool dirty;
	/* own views: the server's requests, the feed's pictures of them (the newest of each view
	 * and kind) */
	struct vw_own_req req[VW_OWN_MAX];
	unsigned nreq;
	struct vw_own_out out[VW_OWN_MAX];
	unsigned nout;
	uint32_t shape[3]; /* of the newest volume read, 0 none */
};

struct vw_feed {
	char instance[VOLREC_INSTANCE_MAX + 1];
	char run_dir[VW_PATH_MAX];
	struct vw_encode_opts enc;
	double max_rate;         /* volumes encoded per second, at most */
	atomic_uint wanted;      /* bit k: some browser at the daemon's view shows picture kind k */
	atomic_bool own_any;     /* some browser shows pictures of its own view (box.req) */
	atomic_bool own_changed; /* box.req changed: extract from the newest volume again */
	atomic_bool stop;
	struct vw_mailbox box;
	void (*wake)(void *ctx); /* called after the mailbox changed (any thread) */
	void *wake_ctx;
	uint64_t
	        session; /* the daemon's session the feed reads (0 before the first); feed thread */
	bool no_views;   /* the session's volumes carry no views (view.enabled: false) */
	pthread_t thread;
	bool started;
};

int vw_feed_start(struct vw_feed *f) VR_MUST_CHECK;
void vw_feed_stop(struct vw_feed *f);

/* ---- the control socket client (control.c), used from the server thread only --------------- */

struct vw_control;

/* Reply to one forwarded request: ok, the daemon's error text (NULL when ok) and the whole
 * reply object as JSON text. */
typedef void (*vw_control_done)(void *ctx, uint64_t cookie, bool ok, const char *error,
                                const char *reply_json);

/* Connect (lazily: nothing needs to listen yet) to the daemon's control endpoint, for at most
 * max_inflight requests in flight. */
int vw_control_open(const char *endpoint, double timeout_s, unsigned max_inflight,
                    struct vw_control **out) VR_MUST_CHECK;
void vw_control_close(struct vw_control *c);
/* Send the request object text (without an id: the client adds its own, and expires_ms, the
 * end of the timeout) for cookie. 0, or
 * -EAGAIN when the daemon's socket is not there (nothing listening), -ENOSPC with too many
 * requests in flight, another negative errno on failure. */
int vw_control_send(struct vw_control *c, const char *request_json, uint64_t cookie);
/* Forget the request sent for cookie (its browser left): its slot is free at once, and its
 * reply, should volrecd still send one, is dropped. */
void vw_control_cancel(struct vw_control *c, uint64_t cookie);
/* Receive the replies that arrived and time out the requests volrecd did not read before they
 * expired (done gets error "volrecd did not read the request ..."; volrecd refuses them if it
 * reads them later). Returns the requests still in flight. */
int vw_control_poll(struct vw_control *c, vw_control_done done, void *ctx);

/* ---- the server (server.c) ------------------------------------------------------------------ */

#define VW_SUBPROTOCOL "volrec-view"
#define VW_COOKIE      "volrec_token"
#define VW_TOKEN_MIN   16 /* characters of a token, at least */
#define VW_TOKEN_BYTES 32 /* random bytes of a generated token (256 bits) */

struct vw_tokens {
	char view[256];        /* "" none */
	char control[256];     /* "" none */
	char control_name[32]; /* what the daemon's log calls the control token */
};

struct vw_server_opts {
	char addr[256];                 /* listen address (numeric or "localhost"), "" all */
	int port;                       /* 0: any free port */
	const char *cert, *key;         /* TLS files, NULL: plain HTTP */
	const struct vw_tokens *tokens; /* who may view and control */
	bool open_view;                 /* loopback without a token file: any local page of the
	                                   viewer's own origin may view without a token */
	const char *assets;             /* folder of the page's files */
	const char *ctl_endpoint;       /* daemon's control socket */
	const char *instance;
	uint32_t max_message;  /* bytes of one browser message, at most */
	uint32_t max_sessions; /* browsers at once, at most */
};

struct vw_server;

int vw_server_create(const struct vw_server_opts *o, struct vw_feed *feed,
                     struct vw_server **out) VR_MUST_CHECK;
/* The port actually listened on (port 0 given). */
int vw_server_port(const struct vw_server *s);
/* Serve until vw_server_stop (async-signal-safe) is called. */
int vw_server_run(struct vw_server *s);
void vw_server_stop(struct vw_server *s);
void vw_server_destroy(struct vw_server *s);
/* Wake the server thread (the feed's wake callback); any thread. */
void vw_server_wake(void *server);

/* ---- access (access.c): pure functions on the text of a request's headers ------------------ */

/* Whether given is the expected token; constant time over the expected one, never for "". */
bool vw_token_equal(const char *given, const char *expected);
/* The value of the viewer's cookie (VW_COOKIE) in the text of one Cookie header, into out;
 * false when there is none or it does not fit len. */
bool vw_cookie_token(const char *cookies, char *out, size_t len);
/* The token of an Authorization header "Bearer TOKEN" into out; false for any other. */
bool vw_bearer_token(const char *authorization, char *out, size_t len);
/* Whether a Host header names this machine's loopback: exactly localhost, [::1] or a dotted
 * IPv4 address in 127.0.0.0/8, in any case, with an optional port. A name that only looks like
 * one (127.attacker.example, 127.0.0.1.nip.io) is a DNS name that may point anywhere. */
bool vw_loopback_host(const char *hostport);
/* Whether an Origin header names the host[:port] of a Host header (in any case); an origin or
 * host of 256 bytes or more is no match. */
bool vw_same_origin(const char *origin, const char *host);
/* Whether a Sec-WebSocket-Protocol list names VW_SUBPROTOCOL. */
bool vw_offers_subprotocol(const char *list);
/* Parse the text of a token file (len bytes): lines "view: TOKEN" and "control: TOKEN", '#'
 * comments. 0 and *t, or -EINVAL and a message in err naming the line ("line 3: ..."). */
int vw_tokens_parse(const char *text, size_t len, struct vw_tokens *t, char *err,
                    size_t errlen) VR_MUST_CHECK;
/* A new random token of VW_TOKEN_BYTES (getrandom), base64url without padding, into out
 * (at least 44 bytes). 0, -ENOSPC, or getrandom's negative errno. */
int vw_token_generate(char *out, size_t len) VR_MUST_CHECK;

/* ---- browser messages (msg.c) ---------------------------------------------------------------- */

enum vw_msg_type {
	VW_MSG_SUBSCRIBE,
	VW_MSG_SET,
	VW_MSG_GET,
	VW_MSG_PING,
	VW_MSG_RECORD_START,
	VW_MSG_RECORD_STOP,
	VW_MSG_VIEW,
};

/* A browser's message, checked: what the server acts on. The json_object pointers are
 * borrowed from root (vw_msg_free puts it). */
struct vw_msg {
	struct json_object *root;
	enum vw_msg_type type;
	struct json_object *id;     /* a string or exact number, NULL none */
	unsigned views;             /* subscribe: bit k for picture kind k */
	struct json_object *values; /* set: an object of one or more keys */
	struct json_object *key;    /* get: a string, NULL the whole configuration */
	struct json_object *t;      /* ping: a string or exact number, NULL none */
	struct json_object *fields; /* record_start/_stop: the request's fields for the daemon (an
	                               object of its own, put by vw_msg_free) */
	/* view: which of position and slab it sets; each either the browser's own (own_*) or
	 * the daemon's again (null) */
	bool has_pos, has_slab, own_pos, own_slab;
	uint32_t pos[3], slab[2];
};

/* Parse and check one text message of len bytes (docs/viewer.md, the WebSocket protocol), at
 * most depth levels of JSON deep. 0 and *m (vw_msg_free it); or -EINVAL, what is wrong in err
 * (possibly cut, not yet sanitized) and, when the message's id could be read and may be echoed,
 * m->id with m->root holding it (vw_msg_free it too). */
int vw_msg_parse(const char *text, size_t len, int depth, struct vw_msg *m, char *err,
                 size_t errlen) VR_MUST_CHECK;
void vw_msg_free(struct vw_msg *m);

/* ---- logging (main.c) ------------------------------------------------------------------------ */

/* What rate-limited lines are about: at most VW_LOG_BURST lines of a kind per second, the rest
 * counted and said in one line. */
enum vw_log_kind {
	VW_LOG_BROWSER,  /* a browser's message refused */
	VW_LOG_HTTP,     /* a request or upgrade refused */
	VW_LOG_CONTROL,  /* the daemon refused a forwarded request */
	VW_LOG_SESSIONS, /* browsers connecting and leaving */
	VW_LOG_LWS,      /* libwebsockets' own warnings and errors */
	VW_LOG_KINDS,
};
#define VW_LOG_BURST 10

void vw_log(const char *fmt, ...) VR_PRINTF(1, 2);
/* vw_log, unless VW_LOG_BURST lines of this kind were logged in the last second. */
void vw_log_limited(enum vw_log_kind kind, const char *fmt, ...) VR_PRINTF(2, 3);
/* Say how many lines of each kind were left out in a second that has ended (called
 * periodically, so that the count comes even when no more lines do). */
void vw_log_flush(void);

#endif
