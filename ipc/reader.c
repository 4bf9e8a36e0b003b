/* SPDX-License-Identifier: MIT */
/*
 * The reader side of volume publishing, the volrec_client_* API of libvolrec (client.h): maps an
 * instance's data segment read-only, leases slots through the lease table (unless opened with
 * VOLREC_OPEN_NO_LEASE), waits on the ZeroMQ `vol` notifications and follows new sessions by
 * itself. The writer side is ipc/writer.c.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#include <volrec/client.h>

#include "ipc/internal.h"
#include "ipc/ipc.h"

#define CL_EP_MAX        512
#define CL_OPEN_RETRY_MS 2000 /* how long open waits for a segment being created */

struct cl_session {
	void *map; /* data segment, PROT_READ */
	size_t size;
	const struct volrec_shm_header *h;
	void *lmap; /* lease segment, read-write */
	size_t lsize;
	int lease_fd;
	struct volrec_lease_entry *entry; /* ours; NULL without a lease */
	uint64_t id;
};

struct volrec_client {
	char instance[VOLREC_INSTANCE_MAX + 1];
	char run_dir[PATH_MAX];
	char data_name[96];
	char lease_name[112];
	char endpoint[CL_EP_MAX]; /* connected */
	bool endpoint_fixed;
	bool no_lease; /* VOLREC_OPEN_NO_LEASE: no entry in the lease table, views hold no data */
	unsigned topics;
	int rcvhwm;
	struct cl_session s;
	bool mapped;
	void *zctx;
	void *sub;
	uint64_t last_seq; /* newest sequence seen in this session, 0 none */
	bool view_held;
	uint32_t view_slot;
	uint64_t view_seq;
	/* protocol 1.3's description of the last view handed out (volrec_view_voxel_size) */
	struct {
		uint64_t session_id, sequence;
		uint32_t generation;
		double voxel_um[3];
		uint32_t channels; /* 2.1 */
		struct volrec_channel_desc channel[VOLREC_CHANNELS_MAX];
		const char *data; /* the slot's data, NULL without */
	} last;
	struct volrec_client_stats st;
	char *text; /* VOLREC_TEXT_MAX + 1 bytes, for status/event bodies */
	char err[512];
};

static int64_t mono_ms(void)
{
	return (int64_t)(vr_now_ns(CLOCK_MONOTONIC) / 1000000u);
}

VR_PRINTF(3, 4) static int cl_fail(struct volrec_client *c, int rc, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(c->err, sizeof(c->err), fmt, ap);
	va_end(ap);
	return rc;
}

static void session_unmap(struct cl_session *s)
{
	if (s->entry) {
		ipc_store32(&s->entry->slot, VOLREC_SLOT_NONE, memory_order_seq_cst);
		ipc_store32(&s->entry->pid, 0, memory_order_release);
	}
	if (s->lease_fd >= 0)
		close(s->lease_fd); /* drops the OFD lock on our entry */
	if (s->lmap)
		munmap(s->lmap, s->lsize);
	if (s->map)
		munmap(s->map, s->size);
	memset(s, 0, sizeof(*s));
	s->lease_fd = -1;
}

static int claim_entry(struct volrec_client *c, struct cl_session *s)
{
	const struct volrec_lease_header *lh = s->lmap;

	for (uint32_t i = 0; i < lh->entry_count; i++) {
		struct flock fl = {.l_type = F_WRLCK,
		                   .l_whence = SEEK_SET,
		                   .l_start = ipc_lease_entry_offset(i),
		                   .l_len = sizeof(struct volrec_lease_entry)};
		struct volrec_lease_entry *e;

		if (fcntl(s->lease_fd, F_OFD_SETLK, &fl) < 0) {
			if (errno == EAGAIN || errno == EACCES)
				continue;
			return cl_fail(c, -errno, "cannot lock a lease entry of %s: %s",
			               c->lease_name, strerror(errno));
		}
		e = ipc_lease_entry(s->lmap, i);
		ipc_store32(&e->slot, VOLREC_SLOT_NONE, memory_order_seq_cst);
		ipc_store64(&e->sequence, 0, memory_order_relaxed);
		ipc_store64(&e->session_id, s->id, memory_order_relaxed);
		ipc_store64(&e->heartbeat_ns, vr_now_ns(CLOCK_MONOTONIC), memory_order_relaxed);
		ipc_store32(&e->pid, (uint32_t)getpid(), memory_order_seq_cst);
		s->entry = e;
		return 0;
	}
	return cl_fail(c, -EUSERS, "all %u reader entries of %s are taken (ipc.max_readers)",
	               lh->entry_count, c->lease_name);
}

/* Map the current data segment of the instance into *s (what is mapped stays in s for
 * session_unmap()). */
static int session_map_data(struct volrec_client *c, struct cl_session *s)
{
	struct stat st;
	int fd, rc;

	memset(s, 0, sizeof(*s));
	s->lease_fd = -1;
	fd = shm_open(c->data_name, O_RDONLY | O_CLOEXEC, 0);
	if (fd < 0) {
		rc = -errno;
		if (rc == -ENOENT)
			return cl_fail(c, rc,
			               "no volrec daemon publishes instance '%s' (no shared memory "
			               "%s)",
			               c->instance, c->data_name);
		return cl_fail(c, rc, "cannot open shared memory %s: %s", c->data_name,
		               strerror(errno));
	}
	if (fstat(fd, &st)) {
		rc = cl_fail(c, -errno, "fstat %s: %s", c->data_name, strerror(errno));
		close(fd);
		return rc;
	}
	if ((size_t)st.st_size < sizeof(struct volrec_shm_header)) {
		/* the writer creates the segment, then sizes it: not ready yet */
		close(fd);
		return cl_fail(c, -EAGAIN,
		               "shared memory %s is %lld bytes, smaller than its header: not "
		               "initialized yet",
		               c->data_name, (long long)st.st_size);
	}
	s->size = (size_t)st.st_size;
	s->map = mmap(NULL, s->size, PROT_READ, MAP_SHARED, fd, 0);
	close(fd);
	if (s->map == MAP_FAILED) {
		s->map = NULL;
		return cl_fail(c, -errno, "cannot map %s: %s", c->data_name, strerror(errno));
	}
	s->h = s->map;
	rc = ipc_shm_validate(s->map, s->size, c->err, sizeof(c->err));
	if (rc)
		return rc;
	s->id = s->h->session_id;
	return 0;
}

/* Map the lease table of the session s maps, check that it is that session's, and claim an
 * entry (what is mapped stays in s for session_unmap()). */
static int session_map_leases(struct volrec_client *c, struct cl_session *s)
{
	const struct volrec_lease_header *lh;
	struct stat st;

	s->lease_fd = shm_open(c->lease_name, O_RDWR | O_CLOEXEC, 0);
	if (s->lease_fd < 0)
		return cl_fail(c, errno == ENOENT ? -EAGAIN : -errno,
		               "cannot open the lease table %s: %s", c->lease_name,
		               strerror(errno));
	if (fstat(s->lease_fd, &st))
		return cl_fail(c, -errno, "fstat %s: %s", c->lease_name, strerror(errno));
	s->lsize = (size_t)st.st_size;
	if (s->lsize < sizeof(struct volrec_lease_header))
		return cl_fail(c, -EAGAIN, "lease table %s is not initialized yet", c->lease_name);
	s->lmap = mmap(NULL, s->lsize, PROT_READ | PROT_WRITE, MAP_SHARED, s->lease_fd, 0);
	if (s->lmap == MAP_FAILED) {
		s->lmap = NULL;
		return cl_fail(c, -errno, "cannot map %s: %s", c->lease_name, strerror(errno));
	}
	lh = s->lmap;
	if (ipc_load64(&lh->magic, memory_order_acquire) != VOLREC_LEASE_MAGIC)
		return cl_fail(c, -EAGAIN, "lease table %s is not initialized yet", c->lease_name);
	if (lh->major != VOLREC_PROTO_MAJOR)
		return cl_fail(
		        c, -EPROTO,
		        "lease table %s speaks protocol major version %u; this client supports "
		        "%d only (protocol %d.%d): volrecd and its clients must be of the same "
		        "major version",
		        c->lease_name, lh->major, VOLREC_PROTO_MAJOR, VOLREC_PROTO_MAJOR,
		        VOLREC_PROTO_MINOR);
	if (lh->session_id != s->id)
		return cl_fail(c, -EAGAIN, "lease table %s belongs to another session (rebuilding)",
		               c->lease_name);
	if (lh->header_size != sizeof(*lh) || lh->entry_size != sizeof(struct volrec_lease_entry) ||
	    !lh->entry_count || lh->entry_count > VOLREC_MAX_READERS ||
	    lh->header_size + (uint64_t)lh->entry_count * lh->entry_size > s->lsize)
		return cl_fail(c, -EPROTO, "lease table %s has an inconsistent layout",
		               c->lease_name);
	return claim_entry(c, s);
}

/* Map the current data and lease segments of the instance into *s. */
static int session_map(struct volrec_client *c, struct cl_session *s)
{
	int rc = session_map_data(c, s);

	if (!rc && !c->no_lease)
		rc = session_map_leases(c, s);
	if (rc)
		session_unmap(s);
	return rc;
}

/* The endpoint to connect: fixed, else the first usable one the daemon lists, else default. */
static void pick_endpoint(struct volrec_client *c, char *ep, size_t len)
{
	const char *list, *p, *tcp = NULL;
	const struct volrec_shm_header *h = c->s.h;

	if (c->endpoint_fixed) {
		snprintf(ep, len, "%s", c->endpoint);
		return;
	}
	if (c->mapped && h->endpoints_size) {
		list = (const char *)c->s.map + h->endpoints_offset;
		for (p = list; p < list + h->endpoints_size && *p;) {
			size_t n = strnlen(p, (size_t)(list + h->endpoints_size - p));
			if (p + n >= list + h->endpoints_size)
				break;
			if (!strncmp(p, "ipc://", 6)) {
				snprintf(ep, len, "%s", p);
				return;
			}
			if (!tcp && !strncmp(p, "tcp://127.", 10))
				tcp = p;
			p += n + 1;
		}
		if (tcp) {
			snprintf(ep, len, "%s", tcp);
			return;
		}
	}
	if ((size_t)snprintf(ep, len, "ipc://%s/%s.pub", c->run_dir, c->instance) >= len)
		ep[0] = 0; /* too long for an ipc:// path: connect fails with a message */
}

static int connect_endpoint(struct volrec_client *c)
{
	char ep[CL_EP_MAX];

	pick_endpoint(c, ep, sizeof(ep));
	if (c->endpoint[0] && !strcmp(ep, c->endpoint) && !c->endpoint_fixed)
		return 0;
	if (c->endpoint[0] && !c->endpoint_fixed && strcmp(ep, c->endpoint))
		zmq_disconnect(c->sub, c->endpoint);
	if (c->endpoint_fixed && c->endpoint[0] && c->st.remaps)
		return 0; /* fixed endpoint stays connected across sessions */
	if (zmq_connect(c->sub, ep))
		return cl_fail(c, -zmq_errno(), "cannot connect to %s: %s", ep,
		               zmq_strerror(zmq_errno()));
	snprintf(c->endpoint, sizeof(c->endpoint), "%s", ep);
	return 0;
}

/* Follow the instance to its current session, if it changed. */
static int remap(struct volrec_client *c)
{
	struct cl_session ns;
	int rc;

	if (c->view_held)
		return cl_fail(c, -EBUSY, "a view is still held; release it first");
	rc = session_map(c, &ns);
	if (rc)
		return rc;
	if (c->mapped && ns.id == c->s.id) {
		session_unmap(&ns);
		return 0;
	}
	if (c->mapped) {
		session_unmap(&c->s);
		c->st.remaps++;
	}
	c->s = ns;
	c->mapped = true;
	c->last_seq = 0;
	return connect_endpoint(c);
}

/* Cheap check of the session the segment name now refers to: 0 same, 1 changed, <0 gone. */
static int session_changed(struct volrec_client *c)
{
	struct volrec_shm_header h;
	int fd = shm_open(c->data_name, O_RDONLY | O_CLOEXEC, 0);
	ssize_t n;

	if (fd < 0)
		return -errno;
	n = pread(fd, &h, sizeof(h), 0);
	close(fd);
	if (n != (ssize_t)sizeof(h))
		return -EAGAIN;
	return !c->mapped || h.session_id != c->s.id;
}

int volrec_client_open_opts(const char *instance, const struct volrec_client_options *opt,
                            struct volrec_client **out)
{
	struct volrec_client *c;
	const char *rd = opt ? opt->run_dir : NULL;
	unsigned topics = opt && opt->topics ? opt->topics : VOLREC_SUB_VOL;
	int64_t deadline;
	int rc, hwm;

	if (!out || !ipc_instance_valid(instance))
		return -EINVAL;
	if (!rd || !*rd)
		rd = getenv("VOLREC_RUN_DIR");
	if (!rd || !*rd)
		rd = VOLREC_DEFAULT_RUN_DIR;
	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->s.lease_fd = -1;
	snprintf(c->instance, sizeof(c->instance), "%s", instance);
	if ((size_t)snprintf(c->run_dir, sizeof(c->run_dir), "%s", rd) >= sizeof(c->run_dir)) {
		free(c);
		return -ENAMETOOLONG;
	}
	ipc_shm_names(instance, c->data_name, sizeof(c->data_name), c->lease_name,
	              sizeof(c->lease_name));
	c->no_lease = topics & VOLREC_OPEN_NO_LEASE;
	topics &= ~VOLREC_OPEN_NO_LEASE;
	if (!(topics & (VOLREC_SUB_VOL | VOLREC_SUB_STATUS | VOLREC_SUB_EVENT)))
		topics |= VOLREC_SUB_VOL;
	c->topics = topics;
	c->rcvhwm = opt && opt->rcvhwm > 0 ? opt->rcvhwm : 1000;
	if (opt && opt->endpoint && *opt->endpoint) {
		snprintf(c->endpoint, sizeof(c->endpoint), "%s", opt->endpoint);
		c->endpoint_fixed = true;
	}
	if (topics & (VOLREC_SUB_STATUS | VOLREC_SUB_EVENT)) {
		c->text = malloc(VOLREC_TEXT_MAX + 1);
		if (!c->text) {
			rc = -ENOMEM;
			goto out_free;
		}
	}
	c->zctx = zmq_ctx_new();
	c->sub = c->zctx ? zmq_socket(c->zctx, ZMQ_SUB) : NULL;
	if (!c->sub) {
		rc = -ENOMEM;
		goto out_free;
	}
	hwm = c->rcvhwm;
	rc = 0;
	zmq_setsockopt(c->sub, ZMQ_RCVHWM, &hwm, sizeof(hwm));
	hwm = 0;
	zmq_setsockopt(c->sub, ZMQ_LINGER, &hwm, sizeof(hwm));
	if (topics & VOLREC_SUB_VOL)
		rc |= zmq_setsockopt(c->sub, ZMQ_SUBSCRIBE, VOLREC_TOPIC_VOL, 3);
	if (topics & VOLREC_SUB_STATUS)
		rc |= zmq_setsockopt(c->sub, ZMQ_SUBSCRIBE, VOLREC_TOPIC_STATUS, 6);
	if (topics & VOLREC_SUB_EVENT)
		rc |= zmq_setsockopt(c->sub, ZMQ_SUBSCRIBE, VOLREC_TOPIC_EVENT, 5);
	if (rc) {
		rc = -zmq_errno();
		goto out_free;
	}
	/* a segment being created (or rebuilt) is not ready yet: retry for a while (sizing a
	 * large segment takes the writer a moment); then -EAGAIN says "not ready", not broken */
	deadline = mono_ms() + CL_OPEN_RETRY_MS;
	for (;;) {
		rc = remap(c);
		if (rc != -EAGAIN || mono_ms() >= deadline)
			break;
		usleep(10000);
	}
	if (rc)
		goto out_free;
	*out = c;
	return 0;

out_free:
	volrec_client_close(c);
	return rc;
}

int volrec_client_open(const char *instance, const char *run_dir, struct volrec_client **out)
{
	struct volrec_client_options o = {.run_dir = run_dir};

	return volrec_client_open_opts(instance, &o, out);
}

void volrec_client_close(struct volrec_client *c)
{
	if (!c)
		return;
	if (c->mapped)
		session_unmap(&c->s);
	else if (c->s.lease_fd >= 0)
		close(c->s.lease_fd);
	if (c->sub)
		zmq_close(c->sub);
	if (c->zctx)
		zmq_ctx_term(c->zctx);
	free(c->text);
	free(c);
}

/* The view of volume m in slot of the mapped segment; data only with a lease. */
static void view_fill(struct volrec_client *c, uint32_t slot, const struct ipc_volume_meta *m,
                      bool with_data, struct volrec_view *v)
{
	const struct volrec_shm_header *h = c->s.h;

	*v = (struct volrec_view){
	        .data = with_data ? (const char *)c->s.map + h->data_offset +
	                                    (size_t)slot * h->slot_stride
	                          : NULL,
	        .bytes = with_data ? h->volume_bytes : 0,
	        .ny = h->ny,
	        .nx = h->nx,
	        .nz = h->nz,
	        .dtype = h->dtype,
	        .slot = slot,
	        .session_id = c->s.id,
	        .sequence = m->sequence,
	};
	IPC_META_COPY(v, m);
	c->last.session_id = c->s.id;
	c->last.sequence = m->sequence;
	c->last.generation = m->generation;
	memcpy(c->last.voxel_um, m->voxel_um, sizeof(c->last.voxel_um));
	c->last.channels = m->channels;
	memcpy(c->last.channel, m->channel, sizeof(c->last.channel));
	c->last.data = v->data;
}

/* Read the description of volume n from slot under its seqlock: 0, or -EAGAIN if the slot does
 * not hold volume n (any more). */
static int slot_meta_read(const struct volrec_client *c, uint32_t slot, uint64_t n,
                          struct ipc_volume_meta *m)
{
	const struct volrec_slot_header *sh = ipc_slot_header(c->s.map, slot);

	if (ipc_load64(&sh->sequence, memory_order_seq_cst) != 2 * n)
		return -EAGAIN;
	ipc_slot_meta_load(sh, n, m);
	ipc_channels_load(c->s.map, slot, m);
	atomic_thread_fence(memory_order_acquire);
	if (ipc_load64(&sh->sequence, memory_order_relaxed) != 2 * n)
		return -EAGAIN;
	return 0;
}

/* Lease (slot, n) and check that the slot still holds volume n; fill *v from its header. Without
 * a lease (VOLREC_OPEN_NO_LEASE) only the description is read, under the seqlock. */
static int lease_and_fill(struct volrec_client *c, uint32_t slot, uint64_t n, struct volrec_view *v)
{
	struct volrec_lease_entry *e = c->s.entry;
	struct ipc_volume_meta m;

	if (c->no_lease) {
		if (slot_meta_read(c, slot, n, &m))
			return -EAGAIN;
		view_fill(c, slot, &m, false, v);
		c->st.received++;
		return 0;
	}
	ipc_store64(&e->heartbeat_ns, vr_now_ns(CLOCK_MONOTONIC), memory_order_relaxed);
	ipc_store64(&e->session_id, c->s.id, memory_order_relaxed);
	ipc_store64(&e->sequence, n, memory_order_relaxed);
	ipc_store32(&e->slot, slot, memory_order_seq_cst);
	if (slot_meta_read(c, slot, n, &m)) {
		ipc_store32(&e->slot, VOLREC_SLOT_NONE, memory_order_release);
		return -EAGAIN;
	}
	view_fill(c, slot, &m, true, v);
	c->view_held = true;
	c->view_slot = slot;
	c->view_seq = n;
	c->st.received++;
	return 0;
}

/* Account the sequence n: missed volumes since the previous one. false for old news. */
static bool account(struct volrec_client *c, uint64_t n, uint64_t *missed)
{
	*missed = 0;
	if (c->last_seq && n <= c->last_seq)
		return false;
	if (c->last_seq && n > c->last_seq + 1)
		*missed = n - c->last_seq - 1;
	c->st.missed += *missed;
	c->last_seq = n;
	return true;
}

/* A `vol` body arrived: 0 with *v leased, -EAGAIN to keep waiting, <0 error. */
static int handle_vol(struct volrec_client *c, const void *body, size_t len, struct volrec_view *v)
{
	struct ipc_vol m;
	const struct volrec_shm_header *h;
	uint64_t missed;
	int rc;

	rc = ipc_vol_decode(body, len, &m, c->err, sizeof(c->err));
	if (rc) {
		c->st.rejected++;
		return rc;
	}
	if (!c->mapped || m.session_id != c->s.id) {
		uint64_t before = c->mapped ? c->s.id : 0;
		rc = remap(c);
		if (rc && rc != -ENOENT && rc != -EAGAIN)
			return rc;
		if (!c->mapped || c->s.id == before || m.session_id != c->s.id)
			return -EAGAIN; /* a stale message of another session: drop it */
	}
	h = c->s.h;
	if (m.slot >= h->slot_count || m.shape.ny != h->ny || m.shape.nx != h->nx ||
	    m.shape.nz != h->nz || m.shape.dtype != h->dtype) {
		c->st.rejected++;
		return cl_fail(
		        c, -EPROTO,
		        "vol message does not match its segment (slot %u of %u, %u x %u x %u "
		        "dtype %u vs %u x %u x %u dtype %u)",
		        m.slot, h->slot_count, m.shape.ny, m.shape.nx, m.shape.nz, m.shape.dtype,
		        h->ny, h->nx, h->nz, h->dtype);
	}
	/* the writer stores latest_sequence before it sends: a higher one was never published
	 * (and a huge one would wrap 2n onto a published slot, or make all later volumes old) */
	if (m.meta.sequence > ipc_load64(&h->latest_sequence, memory_order_acquire)) {
		c->st.rejected++;
		return cl_fail(
		        c, -EPROTO,
		        "vol message announces volume %llu, but the segment has not published "
		        "it (newest %llu)",
		        (unsigned long long)m.meta.sequence,
		        (unsigned long long)ipc_load64(&h->latest_sequence, memory_order_relaxed));
	}
	if (!account(c, m.meta.sequence, &missed))
		return -EAGAIN;
	if (c->no_lease) {
		/* the message is the description; nothing to lease */
		view_fill(c, m.slot, &m.meta, false, v);
		c->st.received++;
	} else if (lease_and_fill(c, m.slot, m.meta.sequence, v)) {
		c->st.missed++; /* overwritten before we could look */
		return -EAGAIN;
	}
	v->missed = missed;
	return 0;
}

static int receive(struct volrec_client *c, int timeout_ms, struct volrec_message *msg)
{
	int64_t deadline = timeout_ms < 0 ? -1 : mono_ms() + timeout_ms;
	char topic[16];

	if (c->view_held)
		return cl_fail(c, -EBUSY, "a view is still held; release it before the next one");
	if (c->mapped && c->s.entry)
		ipc_store64(&c->s.entry->heartbeat_ns, vr_now_ns(CLOCK_MONOTONIC),
		            memory_order_relaxed);
	for (;;) {
		zmq_pollitem_t it = {.socket = c->sub, .events = ZMQ_POLLIN};
		long wait = deadline < 0 ? -1 : (long)(deadline - mono_ms());
		zmq_msg_t body;
		int more = 0, n, rc;
		size_t ml = sizeof(more);

		if (deadline >= 0 && wait < 0)
			wait = 0;
		n = zmq_poll(&it, 1, wait);
		if (n < 0)
			return zmq_errno() == EINTR ? -EINTR : -zmq_errno();
		if (n == 0) {
			if (deadline >= 0 && mono_ms() >= deadline)
				return cl_fail(c, -ETIMEDOUT, "no volume within %d ms", timeout_ms);
			continue;
		}
		n = zmq_recv(c->sub, topic, sizeof(topic) - 1, ZMQ_DONTWAIT);
		if (n < 0)
			continue;
		topic[n < (int)sizeof(topic) - 1 ? n : (int)sizeof(topic) - 1] = 0;
		zmq_getsockopt(c->sub, ZMQ_RCVMORE, &more, &ml);
		if (!more) {
			c->st.rejected++;
			return cl_fail(c, -EPROTO, "message on topic '%s' has no body frame",
			               topic);
		}
		zmq_msg_init(&body);
		if (zmq_msg_recv(&body, c->sub, ZMQ_DONTWAIT) < 0) {
			zmq_msg_close(&body);
			continue;
		}
		/* drain unexpected extra frames */
		while (zmq_getsockopt(c->sub, ZMQ_RCVMORE, &more, &ml) == 0 && more) {
			zmq_msg_t x;
			zmq_msg_init(&x);
			zmq_msg_recv(&x, c->sub, 0);
			zmq_msg_close(&x);
			more = -1;
		}
		if (more == -1) {
			zmq_msg_close(&body);
			c->st.rejected++;
			return cl_fail(c, -EPROTO, "message on topic '%s' has more than two frames",
			               topic);
		}
		if (!strcmp(topic, VOLREC_TOPIC_VOL)) {
			rc = handle_vol(c, zmq_msg_data(&body), zmq_msg_size(&body), &msg->view);
			zmq_msg_close(&body);
			if (rc == -EAGAIN)
				continue;
			if (rc)
				return rc;
			msg->type = VOLREC_MSG_VOL;
			msg->text = NULL;
			msg->len = 0;
			return 0;
		}
		if ((!strcmp(topic, VOLREC_TOPIC_STATUS) && (c->topics & VOLREC_SUB_STATUS)) ||
		    (!strcmp(topic, VOLREC_TOPIC_EVENT) && (c->topics & VOLREC_SUB_EVENT))) {
			size_t len = zmq_msg_size(&body);
			if (len > VOLREC_TEXT_MAX || memchr(zmq_msg_data(&body), 0, len)) {
				zmq_msg_close(&body);
				c->st.rejected++;
				return cl_fail(c, -EPROTO,
				               "%s message of %zu bytes is too long or holds a NUL",
				               topic, len);
			}
			memcpy(c->text, zmq_msg_data(&body), len);
			c->text[len] = 0;
			zmq_msg_close(&body);
			memset(msg, 0, sizeof(*msg));
			msg->type = topic[0] == 's' ? VOLREC_MSG_STATUS : VOLREC_MSG_EVENT;
			msg->text = c->text;
			msg->len = len;
			return 0;
		}
		zmq_msg_close(&body); /* a topic we did not ask for (prefix match) */
	}
}

int volrec_client_next_message(struct volrec_client *c, int timeout_ms, struct volrec_message *msg)
{
	if (!c || !msg)
		return -EINVAL;
	return receive(c, timeout_ms, msg);
}

int volrec_client_next(struct volrec_client *c, int timeout_ms, struct volrec_view *view)
{
	struct volrec_message m;
	int64_t deadline = timeout_ms < 0 ? -1 : mono_ms() + timeout_ms;
	int rc;

	if (!c || !view)
		return -EINVAL;
	for (;;) {
		int left = deadline < 0 ? -1 : (int)(deadline - mono_ms());
		rc = receive(c, left < 0 && deadline >= 0 ? 0 : left, &m);
		if (rc)
			return rc;
		if (m.type == VOLREC_MSG_VOL) {
			*view = m.view;
			return 0;
		}
	}
}

int volrec_client_latest(struct volrec_client *c, struct volrec_view *view)
{
	const struct volrec_shm_header *h;
	uint64_t n, missed;
	uint32_t s;
	int rc;

	if (!c || !view)
		return -EINVAL;
	if (c->view_held)
		return cl_fail(c, -EBUSY, "a view is still held; release it before the next one");
	rc = session_changed(c);
	if (rc == 1) {
		rc = remap(c);
		if (rc)
			return rc;
	}
	h = c->s.h;
	for (int tries = 0; tries < 4; tries++) {
		n = ipc_load64(&h->latest_sequence, memory_order_acquire);
		if (!n)
			return cl_fail(c, -EAGAIN, "no volume published yet");
		s = ipc_load32(&h->latest_slot, memory_order_acquire);
		if (s >= h->slot_count || ipc_load64(&ipc_slot_header(c->s.map, s)->sequence,
		                                     memory_order_acquire) != 2 * n) {
			for (s = 0; s < h->slot_count; s++)
				if (ipc_load64(&ipc_slot_header(c->s.map, s)->sequence,
				               memory_order_acquire) == 2 * n)
					break;
			if (s == h->slot_count)
				continue;
		}
		if (lease_and_fill(c, s, n, view))
			continue;
		account(c, n, &missed);
		view->missed = missed;
		return 0;
	}
	return cl_fail(c, -EAGAIN, "the newest volume was overwritten while being leased");
}

int volrec_view_check(struct volrec_client *c, const struct volrec_view *view)
{
	const struct volrec_slot_header *sh;

	if (c && view && c->no_lease && !view->data)
		return 0; /* a description only: read consistently, nothing held */
	if (!c || !view || !c->view_held || view->slot != c->view_slot ||
	    view->sequence != c->view_seq)
		return -EINVAL;
	sh = ipc_slot_header(c->s.map, view->slot);
	atomic_thread_fence(memory_order_acquire);
	if (ipc_load64(&sh->sequence, memory_order_relaxed) != 2 * view->sequence)
		return cl_fail(c, -ESTALE,
		               "torn read: volume %llu in slot %u was overwritten while held",
		               (unsigned long long)view->sequence, view->slot);
	return 0;
}

int volrec_view_release(struct volrec_client *c, struct volrec_view *view)
{
	int rc = volrec_view_check(c, view);

	if (rc == -EINVAL || (!rc && c->no_lease))
		return rc;
	if (rc)
		c->st.torn++;
	ipc_store32(&c->s.entry->slot, VOLREC_SLOT_NONE, memory_order_release);
	ipc_store64(&c->s.entry->sequence, 0, memory_order_relaxed);
	c->view_held = false;
	view->data = NULL;
	return rc;
}

/* The last view handed out is view: 0, else -EINVAL. */
static int last_view(const struct volrec_client *c, const struct volrec_view *view)
{
	if (!c || !view || !view->sequence || view->session_id != c->last.session_id ||
	    view->sequence != c->last.sequence)
		return -EINVAL;
	return 0;
}

int volrec_view_voxel_size(const struct volrec_client *c, const struct volrec_view *view,
                           double um[3])
{
	int rc = last_view(c, view);

	for (int i = 0; i < 3 && um; i++)
		um[i] = rc || c->last.voxel_um[i] <= 0 ? NAN : c->last.voxel_um[i];
	return rc;
}

int volrec_view_generation(const struct volrec_client *c, const struct volrec_view *view,
                           uint32_t *generation)
{
	int rc = last_view(c, view);

	if (generation)
		*generation = rc ? 0 : c->last.generation;
	return rc;
}

int volrec_view_channels(const struct volrec_client *c, const struct volrec_view *view,
                         uint32_t *count)
{
	int rc = last_view(c, view);

	if (count)
		*count = rc ? 0 : c->last.channels;
	return rc;
}

int volrec_view_channel(const struct volrec_client *c, const struct volrec_view *view,
                        unsigned index, struct volrec_channel *ch)
{
	const struct volrec_channel_desc *d;
	int rc = last_view(c, view);

	if (rc || !ch || index >= c->last.channels)
		return -EINVAL;
	d = &c->last.channel[index];
	*ch = (struct volrec_channel){
	        .data = view->data && c->last.data ? (const uint8_t *)c->last.data + d->offset
	                                           : NULL,
	        .bytes = view->data ? c->s.h->volume_bytes : 0,
	        .kind = d->kind,
	        .method = d->method,
	        .value_lo = d->value_lo,
	        .value_hi = d->value_hi,
	        .velocity_mm_s = {d->velocity_lo_mm_s, d->velocity_hi_mm_s},
	        .period_us = d->period_us,
	        .mask_db = d->mask_db,
	        .half_window = d->half_window,
	        .flags = d->flags,
	        .center_wavelength_nm = d->center_wavelength_nm,
	        .refractive_index = d->refractive_index,
	};
	memcpy(ch->units, d->units, sizeof(ch->units));
	ch->units[sizeof(ch->units) - 1] = '\0';
	return 0;
}

int volrec_view_find_channel(const struct volrec_client *c, const struct volrec_view *view,
                             unsigned kind)
{
	int rc = last_view(c, view);

	if (rc)
		return rc;
	for (uint32_t i = 0; i < c->last.channels; i++)
		if (c->last.channel[i].kind == kind)
			return (int)i;
	return -ENOENT;
}

/* Whether picture d (present) has the size and parameters of its kind for volume Y x X x Z
 * (protocol.md §2.5): what a daemon writes; a reader would divide by a zero size or name a
 * plane outside the volume otherwise. Says what is wrong in why. */
static bool image_fits(const struct volrec_image_desc *d, uint32_t Y, uint32_t X, uint32_t Z,
                       char *why, size_t len)
{
	static const char *const names[] = {"enface_mean", "enface_max", "bscan", "slice",
	                                    "plane",       "render",     "volume"};
	uint32_t rows = Y, cols = X;
	bool slab = false, ok;

	if (d->kind != VOLREC_IMAGE_VOLUME &&
	    (d->planes != 1 || d->block_y != 1 || d->block_x != 1 || d->block_z != 1)) {
		snprintf(why, len, "%s with %u planes in blocks of %u x %u x %u (a picture: 1)",
		         names[d->kind], d->planes, d->block_y, d->block_x, d->block_z);
		return false;
	}
	switch (d->kind) {
	case VOLREC_IMAGE_VOLUME:
		ok = d->block_y >= 1 && d->block_x >= 1 && d->block_z >= 1 &&
		     d->rows == (Y - 1) / d->block_y + 1 && d->cols == (X - 1) / d->block_x + 1 &&
		     d->planes == (Z - 1) / d->block_z + 1 && d->rows <= VOLREC_VOLUME_MAX &&
		     d->cols <= VOLREC_VOLUME_MAX && d->planes <= VOLREC_VOLUME_MAX &&
		     d->reduce <= VOLREC_REDUCE_MEAN;
		if (!ok)
			snprintf(why, len,
			         "volume of %u x %u x %u in blocks of %u x %u x %u (reduce %u) for "
			         "a "
			         "%u x %u x %u volume",
			         d->rows, d->cols, d->planes, d->block_y, d->block_x, d->block_z,
			         d->reduce, Y, X, Z);
		return ok;
	case VOLREC_IMAGE_ENFACE_MEAN:
	case VOLREC_IMAGE_ENFACE_MAX:
		slab = true;
		break;
	case VOLREC_IMAGE_BSCAN:
		rows = X, cols = Z;
		break;
	case VOLREC_IMAGE_SLICE:
		cols = Z;
		break;
	case VOLREC_IMAGE_RENDER:
		ok = d->rows >= 1 && d->cols >= 1 && d->rows <= VOLREC_RENDER_MAX &&
		     d->cols <= VOLREC_RENDER_MAX;
		if (!ok)
			snprintf(why, len, "render of %u x %u pixels (1 to %d a side)", d->rows,
			         d->cols, VOLREC_RENDER_MAX);
		return ok;
	default:
		break;
	}
	if (d->rows != rows || d->cols != cols) {
		snprintf(why, len, "%s of %u x %u pixels for a %u x %u x %u volume (%u x %u)",
		         names[d->kind], d->rows, d->cols, Y, X, Z, rows, cols);
		return false;
	}
	if (slab && !(d->slab_za < d->slab_zb && d->slab_zb <= Z)) {
		snprintf(why, len, "%s over depths [%u, %u) outside 0..%u", names[d->kind],
		         d->slab_za, d->slab_zb, Z);
		return false;
	}
	if ((d->kind == VOLREC_IMAGE_BSCAN && d->position_y >= Y) ||
	    (d->kind == VOLREC_IMAGE_SLICE && d->position_x >= X) ||
	    (d->kind == VOLREC_IMAGE_PLANE && d->position_z >= Z)) {
		snprintf(why, len, "%s at [y %u, x %u, z %u] outside the %u x %u x %u volume",
		         names[d->kind], d->position_y, d->position_x, d->position_z, Y, X, Z);
		return false;
	}
	return true;
}

int volrec_view_image(struct volrec_client *c, const struct volrec_view *view, unsigned kind,
                      struct volrec_image *img)
{
	const struct volrec_shm_header *h;
	const struct volrec_views_header *vh;
	struct volrec_image_desc dd, *d = &dd;
	char why[160];
	uint64_t end, bytes;

	if (!c || !view || !img || kind >= VOLREC_IMAGE_COUNT)
		return -EINVAL;
	if (!view->data || !c->mapped || view->session_id != c->s.id)
		return cl_fail(c, -EINVAL, "volrec_view_image: the view holds no volume data");
	h = c->s.h;
	if (!h->views_bytes || !(view->flags & VOLREC_FLAG_VIEWS))
		return cl_fail(c, -ENOENT, "the daemon publishes no views (view.enabled: false?)");
	vh = (const struct volrec_views_header *)((const char *)view->data + h->views_offset);
	/* a copy: what is checked is what is handed out, even if a writer forced to overwrite
	 * the slot (every slot leased) changes the descriptor meanwhile */
	memcpy(&dd, (const struct volrec_image_desc *)(vh + 1) + kind, sizeof(dd));
	if (vh->magic != VOLREC_VIEWS_MAGIC || vh->count < VOLREC_IMAGE_COUNT ||
	    vh->desc_size != sizeof(*d) || d->kind != kind ||
	    __builtin_mul_overflow((uint64_t)d->rows * d->cols, (uint64_t)d->planes, &bytes) ||
	    __builtin_add_overflow(d->offset, bytes, &end) || end > h->views_bytes ||
	    d->offset < VOLREC_VIEWS_DATA_OFFSET)
		return cl_fail(c, -EPROTO, "malformed views area in slot %u", view->slot);
	if (!d->present)
		return cl_fail(c, -ENOENT, "picture %u was not computed for volume %llu", kind,
		               (unsigned long long)view->volume_id);
	if (!image_fits(d, h->ny, h->nx, h->nz, why, sizeof(why)))
		return cl_fail(c, -EPROTO, "malformed views area in slot %u: %s", view->slot, why);
	*img = (struct volrec_image){
	        .data = (const uint8_t *)vh + d->offset,
	        .kind = kind,
	        .rows = d->rows,
	        .cols = d->cols,
	        .planes = d->planes,
	        .block = {d->block_y, d->block_x, d->block_z},
	        .reduce = d->reduce,
	        .volume_id = d->volume_id,
	        .slab = {d->slab_za, d->slab_zb},
	        .position = {d->position_y, d->position_x, d->position_z},
	        .angles_deg = {d->azimuth_deg, d->elevation_deg},
	        .spacing = {d->spacing_x, d->spacing_y, d->spacing_z},
	        .step = d->step,
	};
	return 0;
}

int volrec_view_channel_image(struct volrec_client *c, const struct volrec_view *view,
                              unsigned index, unsigned kind, struct volrec_image *img)
{
	const struct volrec_shm_header *h;
	uint64_t off;
	int rc;

	if (!c || !view || !img ||
	    (kind != VOLREC_IMAGE_ENFACE_MEAN && kind != VOLREC_IMAGE_ENFACE_MAX &&
	     kind != VOLREC_IMAGE_BSCAN) ||
	    last_view(c, view) || index >= c->last.channels)
		return -EINVAL;
	rc = volrec_view_image(c, view, kind, img);
	if (rc || index == 0)
		return rc;
	h = c->s.h;
	if (!h->channel_views_bytes || !(view->flags & VOLREC_FLAG_CHANNEL_VIEWS))
		return cl_fail(c, -ENOENT,
		               "the daemon publishes no pictures of the channels past the first "
		               "(view.enabled: false, or a backend that does not compute them)");
	/* the area's size was checked with the segment: channel index's pictures lie inside */
	off = h->channel_views_offset +
	      (index - 1) * volrec_channel_views_step(h->ny, h->nx, h->nz) +
	      volrec_channel_view_offset(h->ny, h->nx, kind);
	img->data = (const uint8_t *)view->data + off;
	return 0;
}

void volrec_client_stats(const struct volrec_client *c, struct volrec_client_stats *st)
{
	*st = c->st;
}

void volrec_client_info(const struct volrec_client *c, struct volrec_segment_info *info)
{
	const struct volrec_shm_header *h = c->s.h;

	memset(info, 0, sizeof(*info));
	info->endpoint = c->endpoint;
	if (!c->mapped)
		return;
	info->session_id = h->session_id;
	info->ny = h->ny;
	info->nx = h->nx;
	info->nz = h->nz;
	info->dtype = h->dtype;
	info->slots = h->slot_count;
	info->max_readers = h->max_readers;
	info->writer_pid = h->writer_pid;
	info->created_ns = h->created_ns;
	info->latest_sequence = ipc_load64(&h->latest_sequence, memory_order_acquire);
	info->writer_alive = ipc_load32(&h->state, memory_order_acquire) == VOLREC_STATE_LIVE &&
	                     h->writer_pid > 0 && (kill(h->writer_pid, 0) == 0 || errno != ESRCH);
}

uint64_t volrec_client_session(const struct volrec_client *c)
{
	return c->mapped ? c->s.id : 0;
}

const char *volrec_client_error(const struct volrec_client *c)
{
	return c ? c->err : "";
}

const char *volrec_strerror(int err)
{
	switch (err) {
	case 0:
		return "success";
	case -ESTALE:
		return "torn read: the volume was overwritten while it was being read";
	case -ETIMEDOUT:
		return "timed out waiting for a volume";
	case -ENOENT:
		return "no volrec daemon publishes this instance";
	case -EPROTO:
		return "protocol error: wrong version or malformed segment or message";
	case -EBUSY:
		return "a view is still held on this client";
	case -EUSERS:
		return "the daemon's reader table is full (ipc.max_readers)";
	case -EAGAIN:
		return "not ready yet (no volume published, or the daemon is still creating its "
		       "shared memory): try again";
	case -EINVAL:
		return "invalid argument";
	default: {
		const char *s = err < 0 ? strerrordesc_np(-err) : NULL;
		return s ? s : "unknown error";
	}
	}
}
