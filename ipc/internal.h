/* SPDX-License-Identifier: MIT */
/*
 * ipc_ private helpers shared by the writer and the client library: atomic access to the
 * protocol's shared fields and their layouts (clocks and error text: base/).
 */
#ifndef VOLREC_IPC_INTERNAL_H
#define VOLREC_IPC_INTERNAL_H

#include <stdatomic.h>
#include <stdint.h>
#include <time.h>

#include <volrec/protocol.h>

#include "base/base.h"

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the protocol is little-endian");
_Static_assert(sizeof(_Atomic uint64_t) == 8 && _Alignof(_Atomic uint64_t) == 8, "u64 atomics");
_Static_assert(sizeof(_Atomic uint32_t) == 4, "u32 atomics");
_Static_assert(ATOMIC_LLONG_LOCK_FREE == 2 && ATOMIC_INT_LOCK_FREE == 2,
               "shared-memory atomics must be lock-free");

/* The shared fields are plain integers in protocol.h; these view them as C11 atomics. */
#define IPC_A64(p) ((_Atomic uint64_t *)(void *)(p))
#define IPC_A32(p) ((_Atomic uint32_t *)(void *)(p))

static inline uint64_t ipc_load64(const uint64_t *p, memory_order o)
{
	return atomic_load_explicit(IPC_A64((uint64_t *)p), o);
}
static inline uint32_t ipc_load32(const uint32_t *p, memory_order o)
{
	return atomic_load_explicit(IPC_A32((uint32_t *)p), o);
}
static inline void ipc_store64(uint64_t *p, uint64_t v, memory_order o)
{
	atomic_store_explicit(IPC_A64(p), v, o);
}
static inline void ipc_store32(uint32_t *p, uint32_t v, memory_order o)
{
	atomic_store_explicit(IPC_A32(p), v, o);
}

/*
 * Copy the description of a volume between the layouts that carry it under the same field names:
 * struct ipc_volume_meta, the slot header, the vol message and struct volrec_view. The sequence
 * is not copied (the slot header keeps it as its seqlock), nor drops_before (not on the wire).
 */
#define IPC_META_COPY(dst, src)                                                                    \
	do {                                                                                       \
		(dst)->volume_id = (src)->volume_id;                                               \
		(dst)->epoch = (src)->epoch;                                                       \
		(dst)->offset_x = (src)->offset_x;                                                 \
		(dst)->offset_y = (src)->offset_y;                                                 \
		(dst)->t_first_ns = (src)->t_first_ns;                                             \
		(dst)->t_last_ns = (src)->t_last_ns;                                               \
		(dst)->t_publish_ns = (src)->t_publish_ns;                                         \
		(dst)->latency_ns = (src)->latency_ns;                                             \
		(dst)->flags = (src)->flags;                                                       \
	} while (0)

static inline struct volrec_slot_header *ipc_slot_header(const void *map, uint32_t i)
{
	const struct volrec_shm_header *h = map;
	return (struct volrec_slot_header *)((char *)map + h->slot_table_offset +
	                                     (size_t)i * h->slot_header_size);
}

static inline struct volrec_lease_entry *ipc_lease_entry(const void *map, uint32_t i)
{
	const struct volrec_lease_header *h = map;
	return (struct volrec_lease_entry *)((char *)map + h->header_size +
	                                     (size_t)i * h->entry_size);
}

/* Byte range of lease entry i in the lease segment file (what an OFD lock covers). */
static inline off_t ipc_lease_entry_offset(uint32_t i)
{
	return (off_t)sizeof(struct volrec_lease_header) +
	       (off_t)i * (off_t)sizeof(struct volrec_lease_entry);
}

/* ---- connguard.c: a bound on the connections of a socket that binds ---- */
struct ipc_connguard;
/* Watch sock (of zctx) and shut down every connection accepted beyond max at once; name
 * prefixes messages. 0, or a negative errno with a message in err. */
int ipc_connguard_start(void *zctx, void *sock, const char *name, unsigned max,
                        struct ipc_connguard **out, char *err, size_t errlen);
/* Connections refused so far; any thread. */
uint64_t ipc_connguard_refused(struct ipc_connguard *g);
/* Stop watching (before the socket closes). NULL is fine. */
void ipc_connguard_stop(struct ipc_connguard *g);

#endif
