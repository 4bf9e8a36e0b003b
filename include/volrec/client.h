/* SPDX-License-Identifier: MIT */
/*
 * libvolrec: read the volumes a volrecd instance publishes, zero-copy from shared memory,
 * woken by its ZeroMQ notifications. Link with `pkg-config --libs volrec`.
 *
 * Ownership: volrec_client_open() returns a handle the caller frees with volrec_client_close().
 * A view points into the client's read-only mapping of a slot; it stays valid (and the slot
 * leased, so the daemon avoids overwriting it) until volrec_view_release() or close.
 * Thread safety: a handle is not thread-safe; use one handle per thread (handles are
 * independent, any number per process). volrec_strerror() is thread-safe.
 * Errors are negative errno values; volrec_client_error() gives the detailed message.
 */
#ifndef VOLREC_CLIENT_H
#define VOLREC_CLIENT_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct volrec_client;

/* A torn read: the volume was overwritten while (or before) it was read. The value the calls
 * return for it (volrec_view_check, volrec_view_release): compare with ==. */
#define VOLREC_ETORN (-ESTALE)

/* One published volume, as leased to the caller. All fields are copies except data. */
struct volrec_view {
	const void *data;    /* ny * nx * nz elements of dtype, [Y][X][Z] with Z fastest */
	size_t bytes;        /* size of data */
	uint32_t ny, nx, nz; /* shape */
	uint32_t dtype;      /* enum volrec_dtype (protocol.h): 1 u8, 2 u16, 3 f32 */
	uint32_t slot;       /* slot index in the segment */
	uint32_t flags;      /* VOLREC_FLAG_* */
	uint64_t session_id; /* session of the segment it lives in */
	uint64_t sequence;   /* volume sequence number n within the session (1, 2, ...) */
	uint64_t volume_id;  /* daemon's volume counter */
	uint64_t epoch;      /* epoch of the last interlaced low-resolution volume */
	int32_t offset_x;    /* scan offset of that epoch */
	int32_t offset_y;
	uint64_t t_first_ns;   /* CLOCK_REALTIME ns: first B-scan acquired */
	uint64_t t_last_ns;    /* last B-scan acquired */
	uint64_t t_publish_ns; /* published */
	uint64_t latency_ns;   /* processing latency reported by the daemon */
	uint64_t missed;       /* volumes skipped between the previous view and this one */
};

struct volrec_client_options {
	const char *run_dir;  /* NULL: $VOLREC_RUN_DIR, else /run/volrec */
	const char *endpoint; /* NULL: the first ipc:// (else loopback tcp://) endpoint the daemon
				 lists in its segment, else ipc://<run_dir>/<instance>.pub */
	unsigned topics; /* VOLREC_SUB_* mask (0 means volumes only), plus VOLREC_OPEN_* flags */
	int rcvhwm;      /* ZeroMQ receive high-water mark; 0: 1000 */
};

#define VOLREC_SUB_VOL    0x1u
#define VOLREC_SUB_STATUS 0x2u
#define VOLREC_SUB_EVENT  0x4u
/*
 * Open without a reader lease: the client takes no entry in the daemon's lease table, so it
 * works when ipc.max_readers readers are connected (status tools, monitors, anything that reads
 * only the header, the messages or the volumes' descriptions). Its views carry the description
 * of a volume with data NULL and bytes 0; nothing is held, check and release return 0.
 */
#define VOLREC_OPEN_NO_LEASE 0x100u

struct volrec_client_stats {
	uint64_t received; /* views handed out */
	uint64_t missed;   /* volumes never seen (sequence gaps, overwritten before leased) */
	uint64_t torn;     /* views found torn at check or release */
	uint64_t remaps;   /* new sessions followed (daemon restart, structural reload) */
	uint64_t rejected; /* malformed or wrong-version messages dropped */
};

/*
 * Connect to instance ([A-Za-z0-9_-]{1,63}); run_dir may be NULL. Maps the data segment
 * read-only, claims a lease entry (none with VOLREC_OPEN_NO_LEASE), subscribes to `vol`. A
 * segment the daemon is still creating is waited for up to 2 s. -ENOENT: no daemon (segment
 * absent); -EAGAIN: the segment is still not ready (being created): try again; -EPROTO: wrong
 * version or malformed segment; -EUSERS: lease table full. On success the caller owns *out; on
 * failure *out is untouched and nothing is left allocated.
 */
int volrec_client_open(const char *instance, const char *run_dir, struct volrec_client **out);
int volrec_client_open_opts(const char *instance, const struct volrec_client_options *opt,
                            struct volrec_client **out);

/* Release any view, drop the lease, unmap, disconnect, free. NULL is fine. */
void volrec_client_close(struct volrec_client *c);

/*
 * Wait up to timeout_ms (-1 forever, 0 poll) for the next volume and lease it into *view.
 * Follows a new session by itself (remaps). Volumes overwritten before they could be leased
 * count as missed and are skipped. Returns 0, -ETIMEDOUT, -EBUSY (a view is still held: one
 * per handle), -EPROTO (a malformed message was dropped; call again), -EINTR.
 */
int volrec_client_next(struct volrec_client *c, int timeout_ms, struct volrec_view *view);

/* Lease the newest published volume from the segment header, without waiting for a message.
 * Checks for a new session first. -EAGAIN: none published yet (or overwritten meanwhile). */
int volrec_client_latest(struct volrec_client *c, struct volrec_view *view);

/* 0 while the view is intact; -ESTALE (VOLREC_ETORN) once the daemon overwrote it. A read is
 * good if the check after it returns 0. */
int volrec_view_check(struct volrec_client *c, const struct volrec_view *view);

/* Check, then drop the lease. Returns what volrec_view_check would; the view is gone after. */
int volrec_view_release(struct volrec_client *c, struct volrec_view *view);

/* Messages of every subscribed topic (options.topics) in arrival order. */
/*
 * A picture of a volume (protocol.h, views; docs/algorithms.md §4): u8, row-major [rows][cols],
 * inside the slot of the volume it belongs to and covered by the same lease.
 */
struct volrec_image {
	const uint8_t *data; /* rows * cols * planes bytes; valid while the volume's view is held */
	uint32_t kind;       /* enum volrec_image_kind (protocol.h) */
	uint32_t rows, cols;
	uint32_t planes;      /* the volume's Zr (fastest axis); 1 for a picture */
	uint32_t block[3];    /* voxels per element along rows, cols, planes; 1 but for the volume
	                       (whose voxel size is volrec_view_voxel_size's [dx, dy, dz] times
	                       [block[1], block[0], block[2]], NaN staying NaN) */
	uint32_t reduce;      /* the volume's enum volrec_reduce; 0 for a picture */
	uint64_t volume_id;   /* the volume the picture shows (a render may be older) */
	uint32_t slab[2];     /* en-face depth slab [za, zb) */
	uint32_t position[3]; /* [y0, x0, z0] of the bscan, slice and plane */
	float angles_deg[2];  /* render azimuth, elevation */
	float spacing[3];     /* render voxel spacing */
	float step;           /* render sampling step */
};

/*
 * Picture `kind` of the volume `view` holds (from volrec_client_next/latest, leased). Returns 0
 * and fills *img; -ENOENT when the daemon publishes no views or did not compute this one;
 * -EINVAL for an unknown kind or a view without data; -EPROTO for a malformed views area (a
 * picture outside it, or not of its kind's size for the volume, or of a slab or position
 * outside the volume). As
 * for the volume, call volrec_view_check after reading the pixels to know they were intact.
 */
int volrec_view_image(struct volrec_client *c, const struct volrec_view *view, unsigned kind,
                      struct volrec_image *img);

/*
 * The voxel size of the volume `view` describes, in um, [dx, dy, dz] (x along the A-scans of a
 * B-scan, y across B-scans, z in depth; docs/algorithms.md §6): NaN for each size the daemon
 * does not know (or a writer older than protocol 1.3). view must be the last one this handle
 * handed out (volrec_client_next, _latest, _next_message), held or not. 0, or -EINVAL (um then
 * all NaN).
 */
int volrec_view_voxel_size(const struct volrec_client *c, const struct volrec_view *view,
                           double um[3]);

/*
 * The generation of the live parameters that made the volume `view` describes (1, 2, ...:
 * it grows with every accepted live change; the daemon's control request
 * {"op": "get", "generation": N} gives its values, docs/control.md); 0 when the writer did not
 * say (older than protocol 1.3). Same rule for view as volrec_view_voxel_size. 0, or -EINVAL
 * (*generation then 0).
 */
int volrec_view_generation(const struct volrec_client *c, const struct volrec_view *view,
                           uint32_t *generation);

/*
 * One channel of a volume (protocol 2.1, docs/protocol.md §2.7): output.channels puts the
 * structure, angiography and Doppler one after another in the slot. view->data is channel 0.
 */
struct volrec_channel {
	const uint8_t *data; /* ny * nx * nz u8, [Y][X][Z]; NULL for a view without data */
	size_t bytes;
	uint32_t kind;   /* enum volrec_channel_kind (protocol.h) */
	uint32_t method; /* angio: enum volrec_angio_method; Doppler: enum volrec_doppler_axis */
	/* u8 q means value_lo + (value_hi - value_lo) * q / 255 in units; NaN: not told (a
	 * writer older than 2.1) */
	double value_lo, value_hi;
	char units[16];
	double velocity_mm_s[2];     /* Doppler: axial velocity of q = 0 and q = 255; NaN unknown */
	double period_us;            /* Doppler: time between the A-scans of a pair; 0 unknown */
	double mask_db;              /* angio, Doppler: structure threshold (dB) of the mask */
	uint32_t half_window;        /* angio (cdv), Doppler: axial half window */
	uint32_t flags;              /* VOLREC_CHANNEL_BULK */
	double center_wavelength_nm; /* Doppler: lambda0 of the velocities; 0 unknown */
	double refractive_index;     /* Doppler: n of the velocities */
};

/*
 * The channels of the volume `view` describes: their number into *count (1 from a writer older
 * than protocol 2.1: the structure) and channel index's data and meaning into *ch. Same rule
 * for view as volrec_view_voxel_size; the data pointer is valid while the view is held. 0,
 * -EINVAL (a view not the last handed out, an index past the count).
 */
int volrec_view_channels(const struct volrec_client *c, const struct volrec_view *view,
                         uint32_t *count);
int volrec_view_channel(const struct volrec_client *c, const struct volrec_view *view,
                        unsigned index, struct volrec_channel *ch);
/*
 * Picture `kind` (VOLREC_IMAGE_ENFACE_MEAN, _ENFACE_MAX or _BSCAN) of channel `index` of the
 * volume `view` holds (leased), with the parameters of the views area's picture of that kind
 * (docs/protocol.md §2.8); channel 0's is volrec_view_image's. 0; -ENOENT when the daemon
 * publishes no pictures of the channel (no views, a backend that does not compute them) or not
 * this one; -EINVAL for another kind, an index past the channels or a view without data;
 * -EPROTO as volrec_view_image. Check the view after reading the pixels.
 */
int volrec_view_channel_image(struct volrec_client *c, const struct volrec_view *view,
                              unsigned index, unsigned kind, struct volrec_image *img);
/* The channel of a kind (enum volrec_channel_kind): its index, or -ENOENT when the volume does
 * not hold it; -EINVAL as above. */
int volrec_view_find_channel(const struct volrec_client *c, const struct volrec_view *view,
                             unsigned kind);

enum volrec_msg_type { VOLREC_MSG_VOL = 1, VOLREC_MSG_STATUS = 2, VOLREC_MSG_EVENT = 3 };
struct volrec_message {
	enum volrec_msg_type type;
	struct volrec_view view; /* VOLREC_MSG_VOL: leased as by volrec_client_next */
	const char *text;        /* STATUS/EVENT: JSON, NUL-terminated, owned by the client, valid
				    until the next call on the handle */
	size_t len;
};
int volrec_client_next_message(struct volrec_client *c, int timeout_ms, struct volrec_message *msg);

void volrec_client_stats(const struct volrec_client *c, struct volrec_client_stats *st);

/* What the mapped segment says about its writer (for status tools). */
struct volrec_segment_info {
	uint64_t session_id;
	uint32_t ny, nx, nz, dtype;
	uint32_t slots;
	uint32_t max_readers;
	int32_t writer_pid;
	int writer_alive;         /* 1: state live and the pid exists; 0: stopped or crashed */
	uint64_t created_ns;      /* CLOCK_REALTIME ns */
	uint64_t latest_sequence; /* newest published volume, 0 none */
	const char *endpoint;     /* endpoint connected to; owned by the handle */
};
void volrec_client_info(const struct volrec_client *c, struct volrec_segment_info *info);
/* Session id currently mapped. */
uint64_t volrec_client_session(const struct volrec_client *c);
/* Details of the last error on this handle ("" if none); owned by the handle. */
const char *volrec_client_error(const struct volrec_client *c);
/* Text for a negative return code (static string). */
const char *volrec_strerror(int err);

#ifdef __cplusplus
}
#endif
#endif
