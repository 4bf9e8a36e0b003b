/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer harness: the two things a client reads from the daemon, on arbitrary bytes: a
 * `vol` message body (ipc_vol_decode) and a mapped data segment (ipc_shm_validate, then every
 * access the client library makes to a segment that passed: slot headers, endpoint list, slot
 * data). The input is the segment, mapped at its own size as the client maps its file.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ipc/internal.h"
#include "ipc/ipc.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fail(const char *msg)
{
	fprintf(stderr, "fuzz_ipc: %s\n", msg);
	abort();
}

static void check_vol(const uint8_t *data, size_t size)
{
	struct ipc_vol v, v2;
	unsigned char out[sizeof(struct volrec_vol_msg)], out2[sizeof(out)];
	char err[256] = "";

	if (ipc_vol_decode(data, size, &v, err, sizeof(err)) != 0) {
		if (!err[0])
			fail("ipc_vol_decode failed without a message");
		return;
	}
	if (size < VOLREC_VOL_MSG_MIN || !v.meta.sequence || !v.session_id ||
	    !volrec_dtype_size(v.shape.dtype) || !v.shape.ny || !v.shape.nx || !v.shape.nz)
		fail("ipc_vol_decode accepted a malformed message");
	/* the defined fields survive encoding (offsets 12..107: all but the version, size and
	 * reserved bytes, which the encoder writes as this version's) */
	ipc_vol_encode(&v, out);
	if (memcmp(out + 12, data + 12, 108 - 12))
		fail("a decoded vol message encodes to other field bytes");
	if (ipc_vol_decode(out, sizeof(out), &v2, err, sizeof(err)))
		fail("a re-encoded vol message is rejected");
	ipc_vol_encode(&v2, out2);
	if (memcmp(out, out2, sizeof(out)))
		fail("a re-encoded vol message decodes differently");
}

/* Touch every byte the client library reads in a segment ipc_shm_validate accepted. */
static void walk_segment(const uint8_t *map, size_t size)
{
	const struct volrec_shm_header *h = (const void *)map;
	volatile uint64_t sink = 0;

	for (uint32_t i = 0; i < h->slot_count; i++) {
		const struct volrec_slot_header *sh = ipc_slot_header(map, i);
		sink += ipc_load64(&sh->sequence, memory_order_acquire) + sh->volume_id + sh->flags;
		const uint8_t *d = map + h->data_offset + (size_t)i * h->slot_stride;
		sink += d[0] + d[h->volume_bytes - 1];
		/* 2.1: every channel's voxels and descriptor, and the channels' pictures */
		for (uint32_t c = 0; c < ipc_segment_channels(h); c++) {
			const struct volrec_channel_desc *cd = ipc_channel_desc(map, i, c);

			sink += d[(size_t)c * h->volume_bytes] +
			        d[(size_t)(c + 1) * h->volume_bytes - 1] + (cd ? cd->kind : 0);
		}
		if (h->channel_views_bytes)
			sink += d[h->channel_views_offset] +
			        d[h->channel_views_offset + h->channel_views_bytes - 1];
	}
	if (h->endpoints_size) {
		const char *list = (const char *)map + h->endpoints_offset;
		for (uint32_t i = 0; i < h->endpoints_size; i++)
			sink += (unsigned char)list[i];
	}
	sink += ipc_load64(&h->latest_sequence, memory_order_acquire) +
	        ipc_load32(&h->latest_slot, memory_order_acquire);
	(void)sink;
}

static void check_segment(const uint8_t *data, size_t size)
{
	char err[256] = "";
	uint8_t *map;
	int rc;

	/* exactly size bytes, so ASan sees any read past the "mapping"; malloc's 16-byte
	 * alignment is what the header's atomics need */
	map = malloc(size ? size : 1);
	if (!map)
		return;
	memcpy(map, data, size);
	rc = ipc_shm_validate(map, size, err, sizeof(err));
	if (rc == 0)
		walk_segment(map, size);
	else if (!err[0])
		fail("ipc_shm_validate failed without a message");
	free(map);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	check_vol(data, size);
	check_segment(data, size);
	return 0;
}
