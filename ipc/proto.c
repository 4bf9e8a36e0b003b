/* SPDX-License-Identifier: MIT */
/*
 * Protocol helpers used by both sides: instance names, segment names, validation of a mapped
 * data segment, and the one description of a volume (struct ipc_volume_meta) to and from the slot
 * header and the `vol` message.
 */
#include <errno.h>
#include <math.h>
#include <string.h>

#include "ipc/internal.h"
#include "ipc/ipc.h"

bool ipc_instance_valid(const char *name)
{
	static const char ok[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-";
	size_t n = name ? strlen(name) : 0;

	return n >= 1 && n <= VOLREC_INSTANCE_MAX && strspn(name, ok) == n;
}

int ipc_shm_names(const char *instance, char *data, size_t dlen, char *lease, size_t llen)
{
	if (!ipc_instance_valid(instance))
		return -EINVAL;
	if (data && (size_t)snprintf(data, dlen, VOLREC_SHM_PREFIX "%s", instance) >= dlen)
		return -ENAMETOOLONG;
	if (lease && (size_t)snprintf(lease, llen, VOLREC_SHM_PREFIX "%s" VOLREC_SHM_LEASE_SUFX,
	                              instance) >= llen)
		return -ENAMETOOLONG;
	return 0;
}

/* Readiness first: the writer sizes the segment, fills the header, then stores the magic
 * (release) and later sets state live. Until then the segment is not ready (-EAGAIN), not
 * wrong. */
static int shm_check_ready(const struct volrec_shm_header *h, size_t size, char *err, size_t errlen)
{
	uint64_t magic;

	if (size < sizeof(*h))
		return vr_err(
		        err, errlen, -EAGAIN,
		        "data segment is %zu bytes, smaller than its header (256): not initialized "
		        "yet",
		        size);
	magic = ipc_load64(&h->magic, memory_order_acquire);
	if (!magic)
		return vr_err(err, errlen, -EAGAIN,
		              "data segment is not initialized yet (magic still 0)");
	if (magic != VOLREC_SHM_MAGIC)
		return vr_err(err, errlen, -EPROTO,
		              "data segment has a bad magic 0x%016llx (not a volrec segment)",
		              (unsigned long long)magic);
	if (h->major != VOLREC_PROTO_MAJOR)
		return vr_err(
		        err, errlen, -EPROTO,
		        "data segment speaks protocol version %u.%u; this client supports major "
		        "version %d only (protocol %d.%d): volrecd and its clients must be of the "
		        "same major version",
		        h->major, h->minor, VOLREC_PROTO_MAJOR, VOLREC_PROTO_MAJOR,
		        VOLREC_PROTO_MINOR);
	if (ipc_load32(&h->state, memory_order_acquire) == VOLREC_STATE_INIT)
		return vr_err(err, errlen, -EAGAIN, "data segment is still being created");
	return 0;
}

/* The header's sizes, the volume's geometry and the layout of the slots in the mapping of
 * size bytes; *table_end the end of the slot table. */
static int shm_check_layout(const struct volrec_shm_header *h, size_t size, uint64_t *table_end,
                            char *err, size_t errlen)
{
	size_t esz;
	uint64_t vbytes;

	esz = volrec_dtype_size(h->dtype);
	if (h->header_size < sizeof(*h) || h->header_size > h->data_offset)
		return vr_err(err, errlen, -EPROTO, "data segment header_size %u is invalid",
		              h->header_size);
	if (!esz)
		return vr_err(err, errlen, -EPROTO, "data segment has an unknown dtype %u",
		              h->dtype);
	/* the product in 128 bits: a wrapped one let 2^22 x 2^21 x 2^21 pass as 0 bytes */
	if (!h->ny || !h->nx || !h->nz || !h->slot_count || h->slot_count > VOLREC_MAX_SLOTS ||
	    __builtin_mul_overflow((uint64_t)h->ny * h->nx, (uint64_t)h->nz * esz, &vbytes) ||
	    h->volume_bytes != vbytes)
		return vr_err(
		        err, errlen, -EPROTO,
		        "data segment geometry is inconsistent (%u x %u x %u, dtype %u, %u slots, "
		        "%llu bytes per volume)",
		        h->ny, h->nx, h->nz, h->dtype, h->slot_count,
		        (unsigned long long)h->volume_bytes);
	/* Offsets and the stride are bounded by the mapping before they take part in a sum, so
	 * no sum below wraps (a wrapped one let a segment with data at 2^63 pass). */
	*table_end = h->slot_table_offset + (uint64_t)h->slot_count * h->slot_header_size;
	if (h->segment_size > size || h->data_offset > h->segment_size ||
	    h->slot_table_offset > h->data_offset || h->slot_stride > h->segment_size ||
	    h->slot_header_size < sizeof(struct volrec_slot_header) || h->slot_header_size % 8 ||
	    h->slot_table_offset % 8 || h->slot_table_offset < h->header_size ||
	    *table_end > h->data_offset || h->data_offset % VOLREC_SLOT_ALIGN ||
	    h->slot_stride % VOLREC_SLOT_ALIGN || h->slot_stride < h->volume_bytes ||
	    h->data_offset + (uint64_t)h->slot_count * h->slot_stride > h->segment_size ||
	    h->segment_size > size)
		return vr_err(
		        err, errlen, -EPROTO,
		        "data segment layout is inconsistent (slot table at %llu, data at %llu, "
		        "stride %llu, segment %llu of %zu bytes mapped)",
		        (unsigned long long)h->slot_table_offset,
		        (unsigned long long)h->data_offset, (unsigned long long)h->slot_stride,
		        (unsigned long long)h->segment_size, size);
	if (h->endpoints_size &&
	    (h->endpoints_offset < *table_end || h->endpoints_offset > h->data_offset ||
	     h->endpoints_offset + h->endpoints_size > h->data_offset))
		return vr_err(err, errlen, -EPROTO,
		              "data segment endpoint list lies outside the header region");
	return 0;
}

/* Inside each slot, past the table that ends at table_end: the channels' volumes, the views
 * area and the channel views. */
static int shm_check_slot_areas(const struct volrec_shm_header *h, uint64_t table_end, char *err,
                                size_t errlen)
{
	/* channels (2.1): the slot holds channels volumes one after another, each described in
	 * the channel table of the header region; 0 (an older writer): the structure alone */
	if (h->channels > VOLREC_CHANNELS_MAX ||
	    (uint64_t)(h->channels ? h->channels : 1) * h->volume_bytes > h->slot_stride ||
	    (h->channels && (h->channel_desc_size < sizeof(struct volrec_channel_desc) ||
	                     h->channel_desc_size % 8 || h->channel_desc_size > 4096 ||
	                     h->channel_table_offset % 8 || h->channel_table_offset < table_end ||
	                     h->channel_table_offset > h->data_offset ||
	                     h->data_offset - h->channel_table_offset <
	                             (uint64_t)h->slot_count * h->channels * h->channel_desc_size)))
		return vr_err(err, errlen, -EPROTO,
		              "data segment channels are inconsistent (%u channels of %llu bytes, "
		              "descriptors of %u bytes at %llu, stride %llu)",
		              h->channels, (unsigned long long)h->volume_bytes,
		              h->channel_desc_size, (unsigned long long)h->channel_table_offset,
		              (unsigned long long)h->slot_stride);
	/* views (1.2): inside each slot, after the volume; bounded by the stride before summing;
	 * at least the header and its descriptors, which a client reads before any size it finds
	 * there (a smaller area let volrec_view_image read past it: tests/fuzz/fuzz_views) */
	if ((h->views_offset || h->views_bytes) &&
	    (h->views_offset < (uint64_t)(h->channels ? h->channels : 1) * h->volume_bytes ||
	     h->views_offset % 64 || h->views_offset > h->slot_stride ||
	     h->views_bytes > h->slot_stride || h->views_offset + h->views_bytes > h->slot_stride ||
	     h->views_bytes < VOLREC_VIEWS_DATA_OFFSET))
		return vr_err(
		        err, errlen, -EPROTO,
		        "data segment views area is inconsistent (offset %llu, %llu bytes, volume "
		        "%llu bytes, stride %llu)",
		        (unsigned long long)h->views_offset, (unsigned long long)h->views_bytes,
		        (unsigned long long)h->volume_bytes, (unsigned long long)h->slot_stride);
	/* channel views (2.1): after the views area, room for every channel but the first */
	if ((h->channel_views_offset || h->channel_views_bytes) &&
	    (!h->views_bytes || h->channel_views_offset % 64 ||
	     h->channel_views_offset < h->views_offset + h->views_bytes ||
	     h->channel_views_offset > h->slot_stride || h->channel_views_bytes > h->slot_stride ||
	     h->channel_views_offset + h->channel_views_bytes > h->slot_stride ||
	     h->channel_views_bytes < volrec_channel_views_bytes(h->ny, h->nx, h->nz, h->channels)))
		return vr_err(err, errlen, -EPROTO,
		              "data segment channel views are inconsistent (offset %llu, %llu "
		              "bytes, %u channels, views at %llu, stride %llu)",
		              (unsigned long long)h->channel_views_offset,
		              (unsigned long long)h->channel_views_bytes, h->channels,
		              (unsigned long long)h->views_offset,
		              (unsigned long long)h->slot_stride);
	return 0;
}

int ipc_shm_validate(const void *map, size_t size, char *err, size_t errlen)
{
	const struct volrec_shm_header *h = map;
	uint64_t table_end = 0;
	int rc;

	rc = shm_check_ready(h, size, err, errlen);
	if (!rc)
		rc = shm_check_layout(h, size, &table_end, err, errlen);
	if (!rc)
		rc = shm_check_slot_areas(h, table_end, err, errlen);
	if (rc)
		return rc;
	if (!h->session_id)
		return vr_err(err, errlen, -EPROTO, "data segment has a zero session id");
	return 0;
}

/* A voxel size read from another process: anything but a finite positive number is unknown. */
static void voxel_sanitize(double um[3])
{
	for (int i = 0; i < 3; i++)
		if (!(um[i] > 0 && um[i] < 1e300))
			um[i] = 0;
}

void ipc_slot_meta_store(struct volrec_slot_header *sh, const struct ipc_volume_meta *m)
{
	IPC_META_COPY(sh, m);
	IPC_META_TO_WIRE_13(sh, m);
	sh->channels = m->channels;
}

uint32_t ipc_segment_channels(const struct volrec_shm_header *h)
{
	return h->channels ? h->channels : 1;
}

const struct volrec_channel_desc *ipc_channel_desc(const void *map, uint32_t i, uint32_t c)
{
	const struct volrec_shm_header *h = map;

	if (!h->channels || c >= h->channels || i >= h->slot_count)
		return NULL;
	return (const struct volrec_channel_desc *)((const char *)map + h->channel_table_offset +
	                                            ((uint64_t)i * h->channels + c) *
	                                                    h->channel_desc_size);
}

void ipc_channels_load(const void *map, uint32_t i, struct ipc_volume_meta *m)
{
	const struct volrec_shm_header *h = map;

	m->channels = ipc_segment_channels(h);
	for (uint32_t c = 0; c < m->channels; c++) {
		const struct volrec_channel_desc *d = ipc_channel_desc(map, i, c);
		struct volrec_channel_desc *o = &m->channel[c];

		if (d) {
			memcpy(o, d, sizeof(*o));
			o->units[sizeof(o->units) - 1] = '\0';
			/* the segment places the channels: a descriptor names its kind and meaning */
			o->offset = (uint64_t)c * h->volume_bytes;
			/* a mapping is two different finite values; anything else is unknown */
			if (!(isfinite(o->value_lo) && isfinite(o->value_hi) &&
			      o->value_lo != o->value_hi))
				o->value_lo = o->value_hi = NAN;
			if (!(isfinite(o->velocity_lo_mm_s) && isfinite(o->velocity_hi_mm_s) &&
			      o->velocity_lo_mm_s != o->velocity_hi_mm_s))
				o->velocity_lo_mm_s = o->velocity_hi_mm_s = NAN;
		} else {
			*o = (struct volrec_channel_desc){.kind = VOLREC_CHANNEL_STRUCTURE,
			                                  .value_lo = NAN,
			                                  .value_hi = NAN,
			                                  .velocity_lo_mm_s = NAN,
			                                  .velocity_hi_mm_s = NAN};
		}
	}
}

void ipc_slot_meta_load(const struct volrec_slot_header *sh, uint64_t sequence,
                        struct ipc_volume_meta *m)
{
	*m = (struct ipc_volume_meta){.sequence = sequence};
	IPC_META_COPY(m, sh);
	IPC_META_FROM_WIRE_13(m, sh);
	voxel_sanitize(m->voxel_um);
}

void ipc_vol_encode(const struct ipc_vol *v, unsigned char out[sizeof(struct volrec_vol_msg)])
{
	const struct ipc_volume_meta *m = &v->meta;
	struct volrec_vol_msg w = {
	        .magic = VOLREC_VOL_MAGIC,
	        .major = VOLREC_PROTO_MAJOR,
	        .minor = VOLREC_PROTO_MINOR,
	        .size = sizeof(w),
	        .slot = v->slot,
	        .session_id = v->session_id,
	        .sequence = m->sequence,
	        .ny = v->shape.ny,
	        .nx = v->shape.nx,
	        .nz = v->shape.nz,
	        .dtype = v->shape.dtype,
	};

	IPC_META_COPY(&w, m);
	IPC_META_TO_WIRE_13(&w, m);
	w.channels = m->channels;
	/* the struct is the little-endian wire layout (no padding, asserted in protocol.h) */
	memcpy(out, &w, sizeof(w));
}

int ipc_vol_decode(const void *buf, size_t len, struct ipc_vol *v, char *err, size_t errlen)
{
	struct volrec_vol_msg t;
	uint32_t magic, size;
	uint16_t major;

	if (len < 12)
		return vr_err(err, errlen, -EPROTO,
		              "vol message of %zu bytes is too short (at least %d)", len,
		              VOLREC_VOL_MSG_MIN);
	memcpy(&magic, buf, 4);
	memcpy(&major, (const char *)buf + 4, 2);
	memcpy(&size, (const char *)buf + 8, 4);
	if (magic != VOLREC_VOL_MAGIC)
		return vr_err(err, errlen, -EPROTO, "vol message has a bad magic 0x%08x", magic);
	if (major != VOLREC_PROTO_MAJOR)
		return vr_err(
		        err, errlen, -EPROTO,
		        "vol message speaks protocol major version %u; this client supports %d "
		        "only (protocol %d.%d): volrecd and its clients must be of the same major "
		        "version",
		        major, VOLREC_PROTO_MAJOR, VOLREC_PROTO_MAJOR, VOLREC_PROTO_MINOR);
	if (len < VOLREC_VOL_MSG_MIN || size < VOLREC_VOL_MSG_MIN || size != len)
		return vr_err(
		        err, errlen, -EPROTO,
		        "vol message is malformed: %zu bytes received, size field %u (at least %d)",
		        len, size, VOLREC_VOL_MSG_MIN);
	memset(&t, 0, sizeof(t));
	memcpy(&t, buf, len < sizeof(t) ? len : sizeof(t));
	if (!volrec_dtype_size(t.dtype) || !t.ny || !t.nx || !t.nz || !t.sequence || !t.session_id)
		return vr_err(
		        err, errlen, -EPROTO,
		        "vol message is malformed: sequence %llu, session %016llx, geometry %u x "
		        "%u x %u, dtype %u",
		        (unsigned long long)t.sequence, (unsigned long long)t.session_id, t.ny,
		        t.nx, t.nz, t.dtype);
	*v = (struct ipc_vol){
	        .session_id = t.session_id,
	        .slot = t.slot,
	        .shape = {.ny = t.ny, .nx = t.nx, .nz = t.nz, .dtype = t.dtype},
	        .meta = {.sequence = t.sequence},
	};
	IPC_META_COPY(&v->meta, &t);
	IPC_META_FROM_WIRE_13(&v->meta, &t);
	v->meta.channels = t.channels;
	voxel_sanitize(v->meta.voxel_um);
	return 0;
}
