/* SPDX-License-Identifier: MIT */
/*
 * volrecd's side of publishing: opens the ipc writer for the configured output shape,
 * registers its slots with the backend once (so CUDA's D2H lands straight in shared memory),
 * and is the pipeline's shared-memory sink: begin takes a slot, publish closes it and sends
 * `vol`, abort gives it back.
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
};

/* Volume ids continue across structural reloads (DESIGN.md §5: the daemon's volume counter). */
static _Atomic uint64_t next_volume_id = 1;

int vrd_pub_open(const struct vr_config *cfg, struct be_backend *be, struct vrd_pub **out,
                 char *err, size_t errlen)
{
	struct vrd_pub *pub = calloc(1, sizeof(*pub));
	struct ipc_geometry g = {0};
	size_t size;
	int rc;

	if (!pub)
		return vr_err(err, errlen, -ENOMEM, "out of memory");
	pub->be = be;
	g.ny = cfg->geometry.bscans_per_volume;
	g.nx = cfg->geometry.ascans_per_bscan;
	if (cfg->reconstruct.mode != CFG_RECON_NONE) {
		g.ny *= cfg->geometry.stride[1];
		g.nx *= cfg->geometry.stride[0];
	}
	g.nz = cfg_nz(cfg);
	g.dtype = VOLREC_DTYPE_U8;
	g.slots = cfg->output.slots;
	rc = ipc_writer_open(cfg, &g, &pub->w, err, errlen);
	if (rc < 0)
		goto fail;
	ipc_writer_slot_buffers(pub->w, &pub->slots, &pub->nslots, &size);
	for (uint32_t i = 0; i < pub->nslots; i++) {
		rc = be_host_register(be, pub->slots[i], size);
		if (rc < 0) {
			vr_err_errno(
			        err, errlen, rc,
			        "backend %s: registering shm slot %u (%zu bytes) for transfers",
			        be_name(be), i, size);
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

static int sink_begin(void *ctx, uint64_t epoch, struct be_output *out, char *err, size_t errlen)
{
	struct vrd_pub *pub = ctx;
	int rc = ipc_writer_begin(pub->w, &pub->cur);

	(void)epoch;
	if (rc < 0)
		return vr_err_errno(err, errlen, rc, "shm: no slot to write into");
	pub->in_progress = true;
	out->volume = pub->cur.data;
	return 0;
}

static int sink_publish(void *ctx, const struct pl_volume *v, char *err, size_t errlen)
{
	struct vrd_pub *pub = ctx;
	struct ipc_volume_meta meta = {
	        .volume_id = atomic_fetch_add(&next_volume_id, 1),
	        .epoch = v->epoch,
	        .offset_x = (int32_t)v->ox,
	        .offset_y = (int32_t)v->oy,
	        .t_first_ns = v->t_first_ns,
	        .t_last_ns = v->t_last_ns,
	        .latency_ns = v->latency_ns,
	        .flags = v->flags,
	};
	int rc = ipc_writer_publish(pub->w, &pub->cur, &meta);

	pub->in_progress = false;
	if (rc < 0)
		return vr_err_errno(err, errlen, rc, "shm: publishing volume of epoch %llu",
		                    (unsigned long long)v->epoch);
	return 0;
}

static void sink_abort(void *ctx)
{
	struct vrd_pub *pub = ctx;

	if (pub->in_progress)
		ipc_writer_abort(pub->w, &pub->cur);
	pub->in_progress = false;
}

void vrd_pub_sink(struct vrd_pub *pub, struct pl_sink *sink)
{
	sink->ctx = pub;
	sink->begin = sink_begin;
	sink->publish = sink_publish;
	sink->abort = sink_abort;
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
