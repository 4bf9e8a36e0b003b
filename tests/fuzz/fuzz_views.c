/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer harness: the views area parser of the client library (ipc/reader.c,
 * volrec_view_image) on an arbitrary views area. The segment around it is valid (one slot of
 * an 8 x 8 x 8 u8 volume): the input's first two bytes give the views area's size (what the
 * header says, 64 to 64 KiB; it ends where the segment ends, so ASan sees any read past it),
 * the rest is the area. A segment ipc_shm_validate refuses is not read further (the client
 * would not map it). For every picture kind the parser must answer 0, -ENOENT or -EPROTO (-EINVAL for a
 * kind past the last) with a message, and a picture it hands out must lie inside the area,
 * after the descriptors; every byte of it is read.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* the client's private state is built by hand here: the harness compiles reader.c itself */
#include "ipc/reader.c"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define SEG_SIZE  (2 * (size_t)VOLREC_SLOT_ALIGN)
#define VIEWS_MAX 65536u

/* the segment: header and slot table in the first 2 MiB, the slot's data in the second */
static _Alignas(16) uint8_t seg[SEG_SIZE]; /* (ASan guards no global aligned past 32) */

static void fail(const char *msg)
{
	fprintf(stderr, "fuzz_views: %s\n", msg);
	abort();
}

/* The segment with a views area of views_bytes at the end of its slot; whether it is valid. */
static bool make_segment(uint64_t views_bytes)
{
	struct volrec_shm_header *h = (struct volrec_shm_header *)seg;
	char err[256];

	memset(h, 0, sizeof(*h));
	h->magic = VOLREC_SHM_MAGIC;
	h->major = VOLREC_PROTO_MAJOR;
	h->minor = VOLREC_PROTO_MINOR;
	h->header_size = sizeof(*h);
	h->session_id = 7;
	h->ny = h->nx = h->nz = 8;
	h->dtype = VOLREC_DTYPE_U8;
	h->slot_count = 1;
	h->slot_header_size = sizeof(struct volrec_slot_header);
	h->slot_table_offset = 1024;
	h->data_offset = VOLREC_SLOT_ALIGN;
	h->slot_stride = VOLREC_SLOT_ALIGN;
	h->volume_bytes = 8 * 8 * 8;
	h->segment_size = SEG_SIZE;
	h->state = VOLREC_STATE_LIVE;
	h->views_offset = VOLREC_SLOT_ALIGN - views_bytes;
	h->views_bytes = views_bytes;
	return ipc_shm_validate(seg, SEG_SIZE, err, sizeof(err)) == 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct volrec_client c;
	struct volrec_view v = {0};
	uint8_t *area;
	uint64_t vb;

	if (size < 2)
		return 0;
	/* a multiple of 64 from 64 to VIEWS_MAX: the area starts 64-aligned and ends at the
	 * segment's end */
	vb = ((uint64_t)(data[0] | data[1] << 8) % (VIEWS_MAX / 64) + 1) * 64;
	data += 2;
	size -= 2;
	if (!make_segment(vb)) {
		if (vb >= VOLREC_VIEWS_DATA_OFFSET)
			fail("a valid views area size is refused");
		return 0;
	}
	area = seg + VOLREC_SLOT_ALIGN + ((struct volrec_shm_header *)seg)->views_offset;
	memset(area, 0, vb);
	memcpy(area, data, size < vb ? size : vb);

	memset(&c, 0, sizeof(c));
	c.mapped = true;
	c.s.map = seg;
	c.s.size = SEG_SIZE;
	c.s.h = (const struct volrec_shm_header *)seg;
	c.s.id = 7;
	v.data = seg + VOLREC_SLOT_ALIGN;
	v.bytes = 8 * 8 * 8;
	v.ny = v.nx = v.nz = 8;
	v.dtype = VOLREC_DTYPE_U8;
	v.session_id = 7;
	v.flags = VOLREC_FLAG_VIEWS;
	v.volume_id = 3;
	for (unsigned kind = 0; kind <= VOLREC_IMAGE_COUNT; kind++) {
		struct volrec_image img;
		int rc;

		c.err[0] = '\0';
		rc = volrec_view_image(&c, &v, kind, &img);
		if (kind == VOLREC_IMAGE_COUNT) {
			if (rc != -EINVAL)
				fail("a kind past the last is not -EINVAL");
			continue;
		}
		if (rc == -ENOENT || rc == -EPROTO) {
			if (!c.err[0])
				fail("refused without a message");
			continue;
		}
		if (rc)
			fail("an answer other than 0, -ENOENT or -EPROTO");
		if (img.kind != kind || img.data < area + VOLREC_VIEWS_DATA_OFFSET ||
		    (uint64_t)(img.data - area) + (uint64_t)img.rows * img.cols * img.planes > vb)
			fail("a picture outside its views area");
		{
			volatile uint8_t sink = 0;

			for (uint64_t i = 0; i < (uint64_t)img.rows * img.cols * img.planes; i++)
				sink ^= img.data[i];
			(void)sink;
		}
	}
	return 0;
}
