/* SPDX-License-Identifier: MIT */
/*
 * Writer side of volume publishing (ipc_): the shared-memory slot ring with reader leases and the
 * ZeroMQ publisher. The daemon fills a slot (begin), closes it (publish), and sends status and
 * event text; layouts are in include/volrec/protocol.h, the rules in docs/protocol.md.
 */
#ifndef VOLREC_IPC_H
#define VOLREC_IPC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config/config.h"
#include "volrec/protocol.h"

struct ipc_writer;

/* Shape of what is published; fixed for one writer (a new one means a new session). */
struct ipc_geometry {
	uint32_t ny, nx, nz; /* volume [Y][X][Z], Z fastest */
	uint32_t dtype;      /* enum volrec_dtype */
	uint32_t slots;      /* 2..VOLREC_MAX_SLOTS (output.slots) */
};

/* A slot being filled, from ipc_writer_begin() until publish or abort. */
struct ipc_slot_ref {
	uint32_t index;    /* slot number */
	uint64_t sequence; /* volume sequence n it will be published as */
	void *data;        /* volume_bytes writable bytes, 2 MiB aligned (virtual address too) */
	size_t bytes;      /* volume_bytes */
};

/* What the daemon knows about a finished volume. Timestamps: CLOCK_REALTIME ns. */
struct ipc_volume_meta {
	uint64_t volume_id;
	uint64_t epoch;
	int32_t offset_x, offset_y;
	uint64_t t_first_ns; /* first B-scan acquired */
	uint64_t t_last_ns;  /* last B-scan acquired */
	uint64_t latency_ns; /* processing latency (0: publish time - t_last_ns is used) */
	uint32_t flags;      /* VOLREC_FLAG_* */
};

struct ipc_writer_stats {
	uint64_t published;        /* volumes published this session */
	uint64_t aborted;          /* slots given back unpublished */
	uint64_t lease_skips;      /* begin() passed over a slot a live reader held */
	uint64_t forced_overwrite; /* begin() had to overwrite a leased slot (all were leased) */
	uint64_t dead_leases;      /* leases found held by dead processes (ignored, reclaimed) */
	uint64_t send_dropped;     /* ZeroMQ sends that would have blocked and were dropped */
	uint64_t send_errors;      /* other failed sends */
};

/*
 * Create the segments and the publisher for cfg->instance: takes <run_dir>/<instance>.lock
 * (flock, held for the writer's life) and refuses with -EBUSY when another live writer holds it
 * or holds the existing data segment; otherwise takes over (unlinks) stale segments of a crashed
 * writer and creates fresh ones with a new session id. Binds every endpoint of cfg->ipc.pub
 * (default ipc://<run_dir>/<instance>.pub); tcp:// beyond loopback requires the CURVE key files.
 * Uses cfg->instance and cfg->ipc only; cfg is not kept. On success *out is owned by the caller
 * (free with ipc_writer_close); on failure returns a negative errno and a message in err.
 */
__attribute__((warn_unused_result)) int ipc_writer_open(const struct vr_config *cfg,
                                                        const struct ipc_geometry *g,
                                                        struct ipc_writer **out, char *err,
                                                        size_t errlen);

/*
 * Pick the next slot to fill: never one in progress nor the newest published one; among the
 * others the oldest that no live reader leases, else (all leased) the oldest anyway. Marks its
 * sequence odd (readers of the old content then see a torn read). -EBUSY when no slot can be
 * taken (every other slot is already in progress). Call from one thread (the publish thread).
 */
__attribute__((warn_unused_result)) int ipc_writer_begin(struct ipc_writer *w,
                                                         struct ipc_slot_ref *slot);

/* Close the slot's sequence (even), update the header's latest, send `vol`. The volume is
 * visible to readers even if the send fails (the failure is counted, 0 is still returned). */
__attribute__((warn_unused_result)) int ipc_writer_publish(struct ipc_writer *w,
                                                           struct ipc_slot_ref *slot,
                                                           const struct ipc_volume_meta *meta);

/* Give a slot back without publishing it (epoch dropped); its content is discarded. */
void ipc_writer_abort(struct ipc_writer *w, struct ipc_slot_ref *slot);

/* Send JSON text (no NUL, < VOLREC_TEXT_MAX bytes) on topic "status" / "event". Never blocks;
 * callable from any thread. -EINVAL on bad text, -EAGAIN when dropped (counted). */
int ipc_writer_send_status(struct ipc_writer *w, const char *json);
int ipc_writer_send_event(struct ipc_writer *w, const char *json);

/* Send an arbitrary two-frame message (for tests and tools that must exercise readers). */
int ipc_writer_send_raw(struct ipc_writer *w, const char *topic, const void *body, size_t len);

/* Number of lease-table entries owned by live processes (connected readers). Any thread. */
int ipc_writer_readers(struct ipc_writer *w);

/* Slot data buffers for cudaHostRegister: *ptrs[i] (count entries, each size bytes, 2 MiB
 * aligned). The array is owned by the writer and valid until ipc_writer_close. */
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

/* ---- shared with the reader side (ipc/proto.c) ---- */

/* true when name matches [A-Za-z0-9_-]{1,63}. */
bool ipc_instance_valid(const char *name);
/* "/volrec.<instance>" and "/volrec.<instance>.readers"; -ENAMETOOLONG / -EINVAL. */
int ipc_shm_names(const char *instance, char *data, size_t dlen, char *lease, size_t llen);
/* Check a mapped data segment header of size bytes; 0 or -EPROTO/-EAGAIN with a message. */
int ipc_shm_validate(const void *map, size_t size, char *err, size_t errlen);
/* Encode/decode a `vol` body (little-endian on any host). decode: 0, or -EPROTO + message. */
void ipc_vol_encode(const struct volrec_vol_msg *m,
                    unsigned char out[sizeof(struct volrec_vol_msg)]);
int ipc_vol_decode(const void *buf, size_t len, struct volrec_vol_msg *m, char *err, size_t errlen);

#endif
