/* SPDX-License-Identifier: MIT */
/*
 * Volume publishing (ipc_): the writer side (the shared-memory slot ring with reader leases and
 * the ZeroMQ publisher) and what it shares with the reader side (ipc/reader.c, the volrec_client_*
 * API of libvolrec): the description of a published volume and its encodings. Layouts are in
 * include/volrec/protocol.h, the rules in docs/protocol.md.
 */
#ifndef VOLREC_IPC_H
#define VOLREC_IPC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <volrec/protocol.h>

#include "base/base.h"

#define IPC_MAX_PUB 8 /* endpoints one writer binds */

struct ipc_writer;

/* Shape of the published volumes; fixed for one writer (a new one means a new session). */
struct ipc_shape {
	uint32_t ny, nx, nz; /* volume [Y][X][Z], Z fastest */
	uint32_t dtype;      /* enum volrec_dtype */
};

/* What ipc_writer_open needs; nothing is kept after it returns (strings are copied). */
struct ipc_writer_options {
	const char *instance;   /* [A-Za-z0-9_-]{1,63}: names the segments and files */
	const char *run_dir;    /* lock file, default endpoint; created 0770 if missing */
	struct ipc_shape shape; /* of every volume of this session */
	uint32_t slots;         /* 2..VOLREC_MAX_SLOTS */
	uint32_t max_readers;   /* lease-table entries, 1..VOLREC_MAX_READERS */
	uint32_t hwm;           /* ZMQ_SNDHWM of the PUB sockets, >= 1 */
	const char *const *pub; /* npub endpoints to bind; npub 0: ipc://<run_dir>/<instance>.pub */
	uint32_t npub;          /* 0..IPC_MAX_PUB */
	const char *curve_secret_key; /* z85 key files, needed by tcp:// beyond loopback */
	const char *curve_public_key;
	bool views; /* reserve a views area in each slot (u8 volumes; protocol.h, views) */
	/* channels of each volume (protocol 2.1), one after another in the slot; 0 is taken as 1.
	 * channel: their descriptors, which every slot's get at creation (so that the kinds are
	 * readable before the first volume); NULL: one structure channel of an unknown mapping */
	uint32_t channels;
	const struct volrec_channel_desc *channel;
	/* with views and more than one channel: room for the pictures of channels 1.. (2.1) */
	bool channel_views;
	/* connections each PUB socket keeps at once (more are shut down as they come, counted in
	 * connections_refused); 0: no bound */
	uint32_t max_connections;
};

/*
 * One published volume: what the publisher passes to ipc_writer_publish, what the slot header
 * and the `vol` message carry (ipc_slot_meta_store/load, ipc_vol_encode/decode) and what the
 * reader hands out in a struct volrec_view. Timestamps: CLOCK_REALTIME ns.
 */
struct ipc_volume_meta {
	uint64_t volume_id;         /* publisher's volume counter (continues across sessions) */
	uint64_t epoch;             /* epoch of the last low-resolution volume interlaced */
	int32_t offset_x, offset_y; /* scan offset of that epoch */
	uint64_t t_first_ns;        /* first B-scan acquired */
	uint64_t t_last_ns;         /* last B-scan acquired */
	uint64_t latency_ns;        /* processing latency; 0 at publish: t_publish_ns - t_last_ns */
	uint32_t flags;             /* VOLREC_FLAG_*; the writer sets DROPPED_BEFORE itself */
	uint32_t drops_before;      /* publisher's input: epochs dropped since the previous volume
	                               it published (or since the session began); > 0 sets
	                               VOLREC_FLAG_DROPPED_BEFORE. Not on the wire: 0 when read */
	uint32_t generation;        /* generation of the live parameters that made it, 0 unknown */
	double voxel_um[3];         /* voxel size [dx, dy, dz] in um, 0 where unknown */
	/* 2.1: the channels and what their u8 values mean. The writer takes channel[0..channels)
	 * (their offsets it sets itself) and stores the segment's count; read from a slot, a 2.0
	 * writer's volume is channels 1, channel[0] the structure with an unknown mapping (NaN);
	 * a `vol` message carries the count alone */
	uint32_t channels;
	struct volrec_channel_desc channel[VOLREC_CHANNELS_MAX];
	uint64_t sequence;     /* set by the writer: volume sequence n in the session */
	uint64_t t_publish_ns; /* set by the writer: when the volume was published */
};

/* A `vol` message: which volume of which segment, and its description. */
struct ipc_vol {
	uint64_t session_id;
	uint32_t slot;
	struct ipc_shape shape;
	struct ipc_volume_meta meta; /* drops_before is 0 */
};

/* A slot being filled, from ipc_writer_begin() until publish or abort. */
struct ipc_slot_ref {
	uint32_t index;    /* slot number */
	uint64_t sequence; /* volume sequence n it will be published as */
	void *data;        /* channels * volume_bytes writable bytes, 2 MiB aligned (virtual address
	                      too): the channels one after another */
	size_t bytes;      /* volume_bytes, one channel's */
	uint32_t channels; /* of the segment */
	void *views;       /* the slot's views area (views_bytes, 64-aligned), NULL without views */
	size_t views_bytes;
	void *channel_views; /* the pictures of channels 1.. (protocol.h), NULL without */
};

struct ipc_writer_stats {
	uint64_t published;           /* volumes published this session */
	uint64_t aborted;             /* slots given back unpublished */
	uint64_t lease_skips;         /* begin() passed over a slot a live reader held */
	uint64_t forced_overwrite;    /* begin() had to overwrite a leased slot (all were leased) */
	uint64_t dead_leases;         /* leases found held by dead processes (ignored, reclaimed) */
	uint64_t send_errors;         /* sends that failed (libzmq error other than a full queue) */
	uint64_t connections_refused; /* beyond max_connections, since the writer opened */
};

/*
 * Create the segments and the publisher of o->instance: takes <run_dir>/<instance>.lock
 * (flock, held for the writer's life) and refuses with -EBUSY when another live writer holds it
 * or holds the existing data segment; otherwise takes over (unlinks) stale segments of a crashed
 * writer and creates fresh ones with a new session id. The header becomes visible complete: its
 * magic is stored last (release), state goes live once the endpoints are listed. Binds every
 * endpoint of o->pub; tcp:// beyond loopback requires the CURVE key files; an ipc:// socket file
 * gets mode 0660 whatever the umask. On success *out is owned by the caller (free with
 * ipc_writer_close); on failure returns a negative errno and a message in err.
 */
VR_MUST_CHECK int ipc_writer_open(const struct ipc_writer_options *o, struct ipc_writer **out,
                                  char *err, size_t errlen);

/*
 * Pick the next slot to fill: never one in progress nor the newest published one; among the
 * others the oldest that no live reader leases, else (all leased) the oldest anyway. Marks its
 * sequence odd (readers of the old content then see a torn read). -EBUSY when no slot can be
 * taken (every other slot is already in progress). Call from one thread (the publish thread).
 */
VR_MUST_CHECK int ipc_writer_begin(struct ipc_writer *w, struct ipc_slot_ref *slot);

/*
 * Close the slot's sequence (even), update the header's latest, send `vol`. meta's sequence and
 * t_publish_ns are ignored (the writer sets them). The volume is visible to readers even if the
 * send fails (the failure is counted, 0 is still returned).
 */
VR_MUST_CHECK int ipc_writer_publish(struct ipc_writer *w, struct ipc_slot_ref *slot,
                                     const struct ipc_volume_meta *meta);
/* ipc_writer_publish, and the description as the slot holds it into *as (its sequence,
 * t_publish_ns, latency, flags and channels as readers see them) when as is not NULL. */
VR_MUST_CHECK int ipc_writer_publish_as(struct ipc_writer *w, struct ipc_slot_ref *slot,
                                        const struct ipc_volume_meta *meta,
                                        struct ipc_volume_meta *as);

/* Give a slot back without publishing it (epoch dropped); its content is discarded. */
void ipc_writer_abort(struct ipc_writer *w, struct ipc_slot_ref *slot);

/* Send JSON text (no NUL, < VOLREC_TEXT_MAX bytes) on topic "status" / "event". Never blocks;
 * callable from any thread. -EINVAL on bad text; a subscriber whose queue is full loses the
 * message without a trace (libzmq's PUB socket: docs/protocol.md §4). */
int ipc_writer_send_status(struct ipc_writer *w, const char *json);
int ipc_writer_send_event(struct ipc_writer *w, const char *json);

/* Send an arbitrary two-frame message (for tests and tools that must exercise readers). */
int ipc_writer_send_raw(struct ipc_writer *w, const char *topic, const void *body, size_t len);

/* Number of lease-table entries owned by live processes (connected readers). Any thread. */
int ipc_writer_readers(struct ipc_writer *w);

/* Slot data buffers for cudaHostRegister: *ptrs[i] (count entries, each size bytes: the volume
 * and its views area when there is one; 2 MiB aligned). The array is owned by the writer and
 * valid until ipc_writer_close. */
void ipc_writer_slot_buffers(struct ipc_writer *w, void *const **ptrs, uint32_t *count,
                             size_t *size);

void ipc_writer_stats(struct ipc_writer *w, struct ipc_writer_stats *st);
uint64_t ipc_writer_session(const struct ipc_writer *w);
/* Endpoint i as bound (tcp://...:0 resolved), NULL past the end. Owned by the writer. */
const char *ipc_writer_endpoint(const struct ipc_writer *w, uint32_t i);

/*
 * Stop publishing: marks the segment closed, unbinds, and unlinks both segments when unlink is
 * true (keep_shm false); releases the instance lock. Readers keep their mappings. NULL is fine.
 */
void ipc_writer_close(struct ipc_writer *w, bool unlink);

/* ---- the control socket's client side (ipc/ctl_wire.c, docs/control.md) ---- */

#define IPC_CTL_REPLY_MAX (1u << 20) /* bytes of one reply, at most */

/* Connect to volrecd's control socket at path (AF_UNIX, SOCK_SEQPACKET). The descriptor, or
 * a negative errno (-ENOENT: no daemon; -EACCES: not in its group; -ECONNREFUSED: a stale
 * file). */
int ipc_ctl_connect(const char *path);
/* Send one request (one datagram), never blocking: 0, or a negative errno (-EAGAIN: the
 * daemon has not read the earlier ones; -EPIPE: it is gone). */
int ipc_ctl_send(int fd, const char *json, size_t len);
/* The next reply, waiting up to timeout_ms (0: not at all, -1: for ever): 0 and *out (NUL
 * terminated, malloc'ed: the caller frees) of *len bytes; -EAGAIN none yet; -EPIPE the daemon
 * closed the connection; -EMSGSIZE a reply over IPC_CTL_REPLY_MAX (discarded). */
int ipc_ctl_recv(int fd, int timeout_ms, char **out, size_t *len);

/* ---- shared with the reader side (ipc/proto.c) ---- */

/* true when name matches [A-Za-z0-9_-]{1,63}. */
bool ipc_instance_valid(const char *name);
/* "/volrec.<instance>" and "/volrec.<instance>.readers"; -ENAMETOOLONG / -EINVAL. */
int ipc_shm_names(const char *instance, char *data, size_t dlen, char *lease, size_t llen);
/*
 * Check a mapped data segment of size bytes. 0: valid and live or closed. -EAGAIN: not ready
 * yet (smaller than a header, magic still 0, or state "being created"): retry. -EPROTO: not a
 * volrec segment of this major version, or inconsistent. A message in err either way.
 */
int ipc_shm_validate(const void *map, size_t size, char *err, size_t errlen);
/* Write / read a slot header's description (all but its sequence, which is the seqlock). */
void ipc_slot_meta_store(struct volrec_slot_header *sh, const struct ipc_volume_meta *m);
void ipc_slot_meta_load(const struct volrec_slot_header *sh, uint64_t sequence,
                        struct ipc_volume_meta *m);
/* The channel descriptor c of slot i of a validated segment map (2.1), NULL when the segment has
 * no channel table (a 2.0 writer). */
const struct volrec_channel_desc *ipc_channel_desc(const void *map, uint32_t i, uint32_t c);
/* Read the channel descriptors of slot i into m (after ipc_slot_meta_load, under the same
 * seqlock): a 2.0 writer's volume gets one channel, the structure, its mapping unknown. */
void ipc_channels_load(const void *map, uint32_t i, struct ipc_volume_meta *m);
/* The segment's channel count (1 for a 2.0 writer). */
uint32_t ipc_segment_channels(const struct volrec_shm_header *h);
/* Encode/decode a `vol` body (little-endian on any host). decode: 0, or -EPROTO + message. */
void ipc_vol_encode(const struct ipc_vol *v, unsigned char out[sizeof(struct volrec_vol_msg)]);
int ipc_vol_decode(const void *buf, size_t len, struct ipc_vol *v, char *err, size_t errlen);

#endif
