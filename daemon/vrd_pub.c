/* SPDX-License-Identifier: MIT */
/*
 * volrecd's side of publishing: opens the ipc writer for the configured output shape, registers
 * its slots with the backend once (so CUDA's D2H lands straight in shared memory), and turns the
 * pipeline's volume description into the writer's (with the epochs dropped since the previous
 * volume: the gap in the pipeline's epoch numbers).
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

struct vrd_pub {
	struct ipc_writer *w;
	struct be_backend *be;
	void *const *slots; /* registered slot buffers */
	uint32_t nslots, nregistered;
	struct ipc_slot_ref cur; /* slot being filled */
	bool in_progress;
	bool published;      /* a volume was published in this session */
	uint64_t last_epoch; /* epoch of the last one */
};

_Static_assert(CFG_MAX_PUB <= IPC_MAX_PUB, "every configured endpoint fits the writer");

/* Volume ids continue across structural reloads (DESIGN.md §5: the daemon's volume counter). */
static _Atomic uint64_t next_volume_id = 1;

int vrd_pub_open(const struct vr_config *cfg, struct be_backend *be, struct vrd_pub **out,
                 char *err, size_t errlen)
{
	struct vrd_pub *pub = calloc(1, sizeof(*pub));
	const char *eps[CFG_MAX_PUB];
	struct ipc_writer_options o = {
	        .instance = cfg->instance,
	        .run_dir = cfg->ipc.run_dir,
	        .shape = {.nz = cfg_nz(cfg), .dtype = VOLREC_DTYPE_U8},
	        .slots = cfg->output.slots,
	        .max_readers = cfg->ipc.max_readers,
	        .hwm = cfg->ipc.hwm,
	        .pub = eps,
	        .npub = cfg->ipc.npub,
	        .curve_secret_key = cfg->ipc.curve_secret_key,
	        .curve_public_key = cfg->ipc.curve_public_key,
	};
	size_t size;
	int rc;

	if (!pub) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	pub->be = be;
	for (uint32_t i = 0; i < cfg->ipc.npub && i < CFG_MAX_PUB; i++)
		eps[i] = cfg->ipc.pub[i];
	o.shape.ny = cfg->geometry.bscans_per_volume;
	o.shape.nx = cfg->geometry.ascans_per_bscan;
	if (cfg->reconstruct.mode != CFG_RECON_NONE) {
		o.shape.ny *= cfg->geometry.stride[1];
		o.shape.nx *= cfg->geometry.stride[0];
	}
	rc = ipc_writer_open(&o, &pub->w, err, errlen);
	if (rc < 0)
		goto fail;
	ipc_writer_slot_buffers(pub->w, &pub->slots, &pub->nslots, &size);
	for (uint32_t i = 0; i < pub->nslots; i++) {
		rc = be_host_register(be, pub->slots[i], size);
		if (rc < 0) {
			snprintf(err, errlen, "shm slot %u: %s", i, be_last_error(be));
			goto fail;
		}
		pub->nregistered++;
	}
	*out = pub;
	return 0;
fail:
	vrd_pub_close(pub, true);
	return rc;
}

void vrd_pub_close(struct vrd_pub *pub, bool unlink_shm)
{
	if (!pub)
		return;
	if (pub->in_progress)
		ipc_writer_abort(pub->w, &pub->cur);
	for (uint32_t i = 0; i < pub->nregistered; i++)
		be_host_unregister(pub->be, pub->slots[i]);
	ipc_writer_close(pub->w, unlink_shm);
	free(pub);
}

int vrd_pub_begin(struct vrd_pub *pub, uint8_t **volume, char *err, size_t errlen)
{
	int rc = ipc_writer_begin(pub->w, &pub->cur);

	if (rc < 0) {
		snprintf(err, errlen, "shm: no slot to write into: %s", strerror(-rc));
		return rc;
	}
	pub->in_progress = true;
	*volume = pub->cur.data;
	return 0;
}

int vrd_pub_publish(struct vrd_pub *pub, const struct vrd_vol_meta *m, char *err, size_t errlen)
{
	/* the pipeline numbers epochs from 0 in each session and skips the number of every epoch
	 * it drops (ring full, incomplete, processing error, source fault): a gap is a drop */
	uint64_t expected = pub->published ? pub->last_epoch + 1 : 0;
	uint64_t gap = m->epoch > expected ? m->epoch - expected : 0;
	struct ipc_volume_meta meta = {
	        .volume_id = atomic_fetch_add(&next_volume_id, 1),
	        .epoch = m->epoch,
	        .offset_x = (int32_t)m->ox,
	        .offset_y = (int32_t)m->oy,
	        .t_first_ns = m->t_first_ns,
	        .t_last_ns = m->t_last_ns,
	        .latency_ns = m->latency_ns,
	        .flags = m->flags,
	        .drops_before = gap > UINT32_MAX ? UINT32_MAX : (uint32_t)gap,
	};
	int rc = ipc_writer_publish(pub->w, &pub->cur, &meta);

	pub->in_progress = false;
	if (rc == 0) {
		pub->published = true;
		pub->last_epoch = m->epoch;
	}
	if (rc < 0)
		snprintf(err, errlen, "shm: publishing volume of epoch %llu: %s",
		         (unsigned long long)m->epoch, strerror(-rc));
	return rc;
}

void vrd_pub_abort(struct vrd_pub *pub)
{
	if (pub->in_progress)
		ipc_writer_abort(pub->w, &pub->cur);
	pub->in_progress = false;
}

int vrd_pub_send(struct vrd_pub *pub, const char *topic, const char *json)
{
	if (!strcmp(topic, VOLREC_TOPIC_STATUS))
		return ipc_writer_send_status(pub->w, json);
	return ipc_writer_send_event(pub->w, json);
}

int vrd_pub_readers(struct vrd_pub *pub)
{
	return ipc_writer_readers(pub->w);
}

void vrd_pub_stats(struct vrd_pub *pub, struct ipc_writer_stats *st)
{
	ipc_writer_stats(pub->w, st);
}

uint64_t vrd_pub_session(struct vrd_pub *pub)
{
	return ipc_writer_session(pub->w);
}
