/* SPDX-License-Identifier: MIT */
/*
 * The publishing side: creates the data and lease segments of an instance, hands out slots
 * (avoiding leased ones), closes their seqlock on publish and announces volumes over ZeroMQ.
 * The reader side of the same protocol is ipc/reader.c.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#include "ipc/internal.h"
#include "ipc/ipc.h"

#define IPC_NAME_MAX  96
#define IPC_EP_MAX    512
#define IPC_DIR_MODE  0770 /* run_dir when the writer creates it */
#define IPC_SOCK_MODE 0660 /* ipc:// socket files */

struct ipc_writer {
	char data_name[IPC_NAME_MAX];
	char lease_name[IPC_NAME_MAX];
	int lock_fd;
	int data_fd;
	int lease_fd;
	void *map; /* data segment, 2 MiB aligned */
	size_t map_size;
	void *lmap; /* lease segment */
	size_t lmap_size;
	struct volrec_shm_header *hdr;
	uint64_t session;
	uint32_t slots;
	uint32_t max_readers;
	size_t volume_bytes;              /* of one channel */
	uint32_t channels;                /* each slot holds this many volumes (2.1) */
	uint64_t ch_off;                  /* the channel descriptor table in the header region */
	size_t views_offset, views_bytes; /* views area in each slot (0: none) */
	size_t chv_offset, chv_bytes;     /* the channels' pictures in each slot (0: none) */
	void *slot_ptrs[VOLREC_MAX_SLOTS];
	bool in_progress[VOLREC_MAX_SLOTS];
	uint64_t content[VOLREC_MAX_SLOTS]; /* sequence n held by each slot, 0 = none */
	uint64_t next_seq;                  /* last sequence handed out */
	uint64_t latest_seq;                /* newest published */
	uint32_t latest_slot;
	uint32_t *dead_seen; /* per lease entry: dead pid already counted */
	void *zctx;
	void *pub;                      /* plain PUB: ipc://, inproc://, loopback tcp:// */
	void *pub_curve;                /* CURVE server PUB: tcp:// beyond loopback */
	struct ipc_connguard *guard[2]; /* of pub and pub_curve: connections at once, bounded */
	char endpoints[IPC_MAX_PUB][IPC_EP_MAX];
	uint32_t nendpoints;
	pthread_mutex_t send_lock; /* guards the sockets and every counter of st */
	struct ipc_writer_stats st;
};

static bool tcp_is_loopback(const char *ep)
{
	const char *host = ep + strlen("tcp://");
	const char *colon = strrchr(host, ':');
	size_t n;

	if (strchr(host, ';') || !colon)
		return false;
	n = (size_t)(colon - host);
	if (n == 9 && !strncmp(host, "localhost", 9))
		return true;
	if (n == 5 && !strncmp(host, "[::1]", 5))
		return true;
	return n >= 5 && !strncmp(host, "127.", 4) && strspn(host + 4, "0123456789.") >= n - 4;
}

/* Read a z85 key file (40 characters, whitespace around allowed) into 32 bytes. */
static int read_z85_key(const char *path, const char *what, uint8_t key[32], char *err,
                        size_t errlen)
{
	char buf[128], z[41];
	size_t n, b, e;
	FILE *f;

	if (!path[0])
		return vr_err(err, errlen, -EINVAL,
		              "ipc.%s: required for tcp:// endpoints beyond loopback (CURVE)",
		              what);
	f = fopen(path, "re");
	if (!f)
		return vr_err(err, errlen, -errno, "ipc.%s: cannot open %s: %s", what, path,
		              strerror(errno));
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = 0;
	b = strspn(buf, " \n\r\t");
	for (e = n; e > b && buf[e - 1] && strchr(" \n\r\t", buf[e - 1]); e--)
		;
	if (e - b != 40)
		return vr_err(err, errlen, -EINVAL,
		              "ipc.%s: %s holds %zu characters, a z85 CURVE key has 40", what, path,
		              e - b);
	memcpy(z, buf + b, 40);
	z[40] = 0;
	if (!zmq_z85_decode(key, z))
		return vr_err(err, errlen, -EINVAL, "ipc.%s: %s is not valid z85 text", what, path);
	return 0;
}

static int make_curve_socket(struct ipc_writer *w, const struct ipc_writer_options *o, char *err,
                             size_t errlen)
{
	uint8_t sec[32], pub[32];
	char pub_z[41], derived[41], sec_z[41];
	int one = 1, rc;

	if (!zmq_has("curve"))
		return vr_err(err, errlen, -ENOTSUP,
		              "this libzmq was built without CURVE; tcp:// beyond loopback "
		              "cannot be secured");
	rc = read_z85_key(o->curve_secret_key ? o->curve_secret_key : "", "curve_secret_key", sec,
	                  err, errlen);
	if (rc)
		return rc;
	rc = read_z85_key(o->curve_public_key ? o->curve_public_key : "", "curve_public_key", pub,
	                  err, errlen);
	if (rc)
		return rc;
	zmq_z85_encode(sec_z, sec, 32);
	zmq_z85_encode(pub_z, pub, 32);
	if (zmq_curve_public(derived, sec_z) || strcmp(derived, pub_z))
		return vr_err(err, errlen, -EINVAL,
		              "ipc.curve_public_key (%s) does not belong to the secret key %s",
		              o->curve_public_key, o->curve_secret_key);
	w->pub_curve = zmq_socket(w->zctx, ZMQ_PUB);
	if (!w->pub_curve || zmq_setsockopt(w->pub_curve, ZMQ_CURVE_SERVER, &one, sizeof(one)) ||
	    zmq_setsockopt(w->pub_curve, ZMQ_CURVE_SECRETKEY, sec, 32))
		return vr_err(err, errlen, -zmq_errno(), "cannot set up the CURVE publisher: %s",
		              zmq_strerror(zmq_errno()));
	return 0;
}

static int setup_socket_opts(void *s, uint32_t sndhwm)
{
	/* a short listen queue: connections wait in the kernel, not as descriptors of ours */
	int hwm = (int)sndhwm, linger = 0, backlog = 16;

	if (zmq_setsockopt(s, ZMQ_SNDHWM, &hwm, sizeof(hwm)) ||
	    zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof(linger)) ||
	    zmq_setsockopt(s, ZMQ_BACKLOG, &backlog, sizeof(backlog)))
		return -zmq_errno();
	return 0;
}

/*
 * An ipc:// socket file gets the umask's mode from bind(2): set it to IPC_SOCK_MODE so that the
 * group can connect whatever the umask (a umask of 022 left it srwxr-xr-x). The file is in
 * run_dir, so the window between bind and chmod is no wider than run_dir's own mode.
 */
static int chmod_ipc_socket(const char *ep, uint32_t i, char *err, size_t errlen)
{
	const char *path = ep + strlen("ipc://");

	if (strncmp(ep, "ipc://", 6) || path[0] == '@')
		return 0; /* not a file (tcp, inproc, abstract namespace) */
	if (chmod(path, IPC_SOCK_MODE))
		return vr_err(err, errlen, -errno, "ipc.pub[%u]: cannot set mode %o on %s: %s", i,
		              IPC_SOCK_MODE, path, strerror(errno));
	return 0;
}

static int bind_endpoints(struct ipc_writer *w, const struct ipc_writer_options *o, char *err,
                          size_t errlen)
{
	char def[IPC_EP_MAX];
	uint32_t n = o->npub ? o->npub : 1;
	int rc;

	if (o->npub > IPC_MAX_PUB || (o->npub && !o->pub))
		return vr_err(err, errlen, -EINVAL, "ipc.pub: %u endpoints, at most %d", o->npub,
		              IPC_MAX_PUB);
	if ((size_t)snprintf(def, sizeof(def), "ipc://%s/%s.pub", o->run_dir, o->instance) >=
	    sizeof(def))
		return vr_err(err, errlen, -ENAMETOOLONG, "ipc.run_dir: %s is too long",
		              o->run_dir);
	w->zctx = zmq_ctx_new();
	if (!w->zctx)
		return vr_err(err, errlen, -ENOMEM, "cannot create a ZeroMQ context: %s",
		              zmq_strerror(errno));
	w->pub = zmq_socket(w->zctx, ZMQ_PUB);
	if (!w->pub || (rc = setup_socket_opts(w->pub, o->hwm)))
		return vr_err(err, errlen, -ENOMEM, "cannot create the PUB socket: %s",
		              zmq_strerror(zmq_errno()));
	for (uint32_t i = 0; i < n; i++) {
		const char *ep = o->npub ? o->pub[i] : def;
		void *s = w->pub;
		size_t len = sizeof(w->endpoints[i]);

		if (!strncmp(ep, "tcp://", 6) && !tcp_is_loopback(ep)) {
			if (!w->pub_curve) {
				rc = make_curve_socket(w, o, err, errlen);
				if (rc)
					return rc;
				rc = setup_socket_opts(w->pub_curve, o->hwm);
				if (rc)
					return vr_err(err, errlen, rc,
					              "cannot configure the CURVE socket: %s",
					              zmq_strerror(-rc));
			}
			s = w->pub_curve;
		} else if (strncmp(ep, "tcp://", 6) && strncmp(ep, "ipc://", 6) &&
		           strncmp(ep, "inproc://", 9))
			return vr_err(
			        err, errlen, -EINVAL,
			        "ipc.pub[%u]: '%s' is not an ipc://, tcp:// or inproc:// endpoint",
			        i, ep);
		if (zmq_bind(s, ep))
			return vr_err(err, errlen, -zmq_errno(), "ipc.pub[%u]: cannot bind %s: %s",
			              i, ep, zmq_strerror(zmq_errno()));
		if (zmq_getsockopt(s, ZMQ_LAST_ENDPOINT, w->endpoints[i], &len))
			snprintf(w->endpoints[i], sizeof(w->endpoints[i]), "%s", ep);
		w->nendpoints = i + 1;
		rc = chmod_ipc_socket(w->endpoints[i], i, err, errlen);
		if (rc)
			return rc;
	}
	for (int k = 0; k < 2 && o->max_connections; k++) {
		void *s = k ? w->pub_curve : w->pub;
		if (s && (rc = ipc_connguard_start(w->zctx, s,
		                                   k ? "the CURVE publisher" : "the publisher",
		                                   o->max_connections, &w->guard[k], err, errlen)))
			return rc;
	}
	return 0;
}

/* Map fd (size bytes) read-write at a 2 MiB aligned virtual address. */
static void *map_aligned(int fd, size_t size)
{
	size_t span = size + VOLREC_SLOT_ALIGN;
	char *res, *at, *m;

	res = mmap(NULL, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (res == MAP_FAILED)
		return NULL;
	at = (char *)(((uintptr_t)res + VOLREC_SLOT_ALIGN - 1) &
	              ~(uintptr_t)(VOLREC_SLOT_ALIGN - 1));
	m = mmap(at, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0);
	if (m == MAP_FAILED) {
		munmap(res, span);
		return NULL;
	}
	if (at > res)
		munmap(res, (size_t)(at - res));
	if (res + span > at + size)
		munmap(at + size, (size_t)(res + span - (at + size)));
	return m;
}

/* Create the shared memory object name, which must not exist yet, with mode: its descriptor in
 * *fd (-1 on failure). */
static int shm_create(const char *name, mode_t mode, int *fd, char *err, size_t errlen)
{
	*fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, mode);
	if (*fd < 0)
		return vr_err(err, errlen, -errno, "cannot create shared memory %s: %s", name,
		              strerror(errno));
	return 0;
}

static int ofd_lock(int fd, short type, off_t start, off_t len, int cmd)
{
	struct flock fl = {.l_type = type, .l_whence = SEEK_SET, .l_start = start, .l_len = len};

	if (fcntl(fd, cmd, &fl) < 0)
		return -errno;
	return cmd == F_OFD_GETLK ? fl.l_type : 0;
}

/* Refuse when another live writer holds the lock file or the existing data segment. */
static int take_instance(struct ipc_writer *w, const struct ipc_writer_options *o, char *err,
                         size_t errlen)
{
	char path[PATH_MAX + VOLREC_INSTANCE_MAX + 8], pidtxt[32];
	int fd, rc;

	/* a run_dir we create gets its mode whatever the umask; an existing one is left as
	 * its owner (tmpfiles.d, the operator) made it */
	if (!mkdir(o->run_dir, IPC_DIR_MODE)) {
		if (chmod(o->run_dir, IPC_DIR_MODE))
			return vr_err(err, errlen, -errno,
			              "ipc.run_dir: cannot set mode %o on %s: %s", IPC_DIR_MODE,
			              o->run_dir, strerror(errno));
	} else if (errno != EEXIST) {
		return vr_err(err, errlen, -errno, "ipc.run_dir: cannot create %s: %s", o->run_dir,
		              strerror(errno));
	}
	if ((size_t)snprintf(path, sizeof(path), "%s/%s.lock", o->run_dir, o->instance) >=
	    sizeof(path))
		return vr_err(err, errlen, -ENAMETOOLONG, "ipc.run_dir: %s is too long",
		              o->run_dir);
	w->lock_fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
	if (w->lock_fd < 0)
		return vr_err(err, errlen, -errno, "cannot open the instance lock %s: %s", path,
		              strerror(errno));
	if (flock(w->lock_fd, LOCK_EX | LOCK_NB)) {
		rc = errno == EWOULDBLOCK ? -EBUSY : -errno;
		ssize_t n = pread(w->lock_fd, pidtxt, sizeof(pidtxt) - 1, 0);
		pidtxt[n > 0 ? n : 0] = 0;
		pidtxt[strcspn(pidtxt, "\n")] = 0;
		return vr_err(
		        err, errlen, rc,
		        "instance '%s' already has a live writer (pid %s, lock %s); refusing to "
		        "take its segments and socket",
		        o->instance, pidtxt[0] ? pidtxt : "unknown", path);
	}
	fd = shm_open(w->data_name, O_RDONLY | O_CLOEXEC, 0);
	if (fd >= 0) {
		rc = ofd_lock(fd, F_WRLCK, 0, 1, F_OFD_GETLK);
		if (rc >= 0 && rc != F_UNLCK) {
			struct volrec_shm_header h = {0};
			ssize_t n = pread(fd, &h, sizeof(h), 0);
			close(fd);
			return vr_err(err, errlen, -EBUSY,
			              "shared memory %s is held by a live writer (pid %d, another "
			              "run_dir?); refusing to take it over",
			              w->data_name, n == (ssize_t)sizeof(h) ? h.writer_pid : -1);
		}
		close(fd);
	}
	/* stale segments of a crashed writer: readers keep their mappings, new ones get ours */
	shm_unlink(w->data_name);
	shm_unlink(w->lease_name);
	return 0;
}

/* Channel c's descriptor of slot i, by the writer's own layout (never the shared header's). */
static struct volrec_channel_desc *writer_desc(const struct ipc_writer *w, uint32_t i, uint32_t c)
{
	return (struct volrec_channel_desc *)((char *)w->map + w->ch_off +
	                                      ((uint64_t)i * w->channels + c) *
	                                              sizeof(struct volrec_channel_desc));
}

/* The data segment's header, mapped at w->map, with its slots of stride bytes, the endpoint
 * list at ep_off and the channel table at ch_off; the magic last. */
static void fill_data_header(struct ipc_writer *w, const struct ipc_writer_options *o,
                             uint64_t stride, uint64_t ep_off, uint64_t ch_off)
{
	struct volrec_shm_header *h;

	/* Readers may map the segment from now on: every field is written before the magic,
	 * which is stored last with release order (a reader loads it with acquire and sees a
	 * complete header, or magic 0: not ready). state stays 0 (being created) until the
	 * endpoints and the lease table are ready (ipc_writer_open). */
	h = w->hdr = w->map;
	h->major = VOLREC_PROTO_MAJOR;
	h->minor = VOLREC_PROTO_MINOR;
	h->header_size = sizeof(*h);
	h->session_id = w->session;
	h->ny = o->shape.ny;
	h->nx = o->shape.nx;
	h->nz = o->shape.nz;
	h->dtype = o->shape.dtype;
	h->slot_count = o->slots;
	h->slot_header_size = sizeof(struct volrec_slot_header);
	h->slot_table_offset = sizeof(*h);
	h->data_offset = VOLREC_SLOT_ALIGN;
	h->slot_stride = stride;
	h->volume_bytes = w->volume_bytes;
	h->views_offset = w->views_offset;
	h->views_bytes = w->views_bytes;
	h->segment_size = w->map_size;
	h->latest_slot = VOLREC_SLOT_NONE;
	h->writer_pid = (int32_t)getpid();
	h->created_ns = vr_now_ns(CLOCK_REALTIME);
	h->max_readers = o->max_readers;
	h->endpoints_offset = ep_off;
	h->endpoints_size = VOLREC_ENDPOINTS_MAX;
	h->channels = w->channels;
	h->channel_desc_size = sizeof(struct volrec_channel_desc);
	h->channel_table_offset = ch_off;
	h->channel_views_offset = w->chv_offset;
	h->channel_views_bytes = w->chv_bytes;
	for (uint32_t i = 0; i < o->slots; i++) {
		w->slot_ptrs[i] = (char *)w->map + h->data_offset + (size_t)i * stride;
		/* the kinds (and first meaning) of the channels, before any volume */
		for (uint32_t c = 0; c < w->channels; c++) {
			struct volrec_channel_desc *d = writer_desc(w, i, c);

			if (o->channel)
				*d = o->channel[c];
			d->offset = (uint64_t)c * w->volume_bytes;
			memset(d->reserved, 0, sizeof(d->reserved));
			d->units[sizeof(d->units) - 1] = '\0';
		}
	}
	ipc_store64(&h->magic, VOLREC_SHM_MAGIC, memory_order_release);
}

/* The lease segment: a header and o->max_readers entries, none holding a slot. */
static int create_lease_segment(struct ipc_writer *w, const struct ipc_writer_options *o, char *err,
                                size_t errlen)
{
	struct volrec_lease_header *lh;
	int rc;

	w->lmap_size = sizeof(*lh) + (size_t)o->max_readers * sizeof(struct volrec_lease_entry);
	rc = shm_create(w->lease_name, 0660, &w->lease_fd, err, errlen);
	if (rc)
		return rc;
	if (fchmod(w->lease_fd, 0660) || ftruncate(w->lease_fd, (off_t)w->lmap_size))
		return vr_err(err, errlen, -errno, "cannot size %s: %s", w->lease_name,
		              strerror(errno));
	w->lmap = mmap(NULL, w->lmap_size, PROT_READ | PROT_WRITE, MAP_SHARED, w->lease_fd, 0);
	if (w->lmap == MAP_FAILED) {
		rc = -errno;
		w->lmap = NULL;
		return vr_err(err, errlen, rc, "cannot map %s: %s", w->lease_name, strerror(errno));
	}
	lh = w->lmap;
	lh->major = VOLREC_PROTO_MAJOR;
	lh->minor = VOLREC_PROTO_MINOR;
	lh->header_size = sizeof(*lh);
	lh->session_id = w->session;
	lh->entry_count = o->max_readers;
	lh->entry_size = sizeof(struct volrec_lease_entry);
	for (uint32_t i = 0; i < o->max_readers; i++)
		ipc_lease_entry(w->lmap, i)->slot = VOLREC_SLOT_NONE;
	ipc_store64(&lh->magic, VOLREC_LEASE_MAGIC, memory_order_release);
	return 0;
}

static int create_segments(struct ipc_writer *w, const struct ipc_writer_options *o, char *err,
                           size_t errlen)
{
	uint64_t stride, table_end, ep_off, ch_off, session = 0;
	int rc;

	stride = w->chv_bytes     ? w->chv_offset + w->chv_bytes
	         : w->views_bytes ? w->views_offset + w->views_bytes
	                          : (uint64_t)w->channels * w->volume_bytes;
	stride = (stride + VOLREC_SLOT_ALIGN - 1) & ~(VOLREC_SLOT_ALIGN - 1);
	table_end = sizeof(struct volrec_shm_header) +
	            (uint64_t)o->slots * sizeof(struct volrec_slot_header);
	ep_off = (table_end + 63) & ~(uint64_t)63;
	ch_off = w->ch_off = ep_off + VOLREC_ENDPOINTS_MAX;
	_Static_assert(
	        sizeof(struct volrec_shm_header) +
	                        VOLREC_MAX_SLOTS *
	                                (sizeof(struct volrec_slot_header) +
	                                 VOLREC_CHANNELS_MAX * sizeof(struct volrec_channel_desc)) +
	                        64 + VOLREC_ENDPOINTS_MAX <=
	                VOLREC_SLOT_ALIGN,
	        "the header region holds the tables");
	w->map_size = VOLREC_SLOT_ALIGN + (size_t)o->slots * stride;
	while (!session)
		if (getrandom(&session, sizeof(session), 0) != sizeof(session))
			return vr_err(err, errlen, -errno, "getrandom: %s", strerror(errno));
	w->session = session;

	rc = shm_create(w->data_name, 0640, &w->data_fd, err, errlen);
	if (rc)
		return rc;
	if (fchmod(w->data_fd, 0640) || ofd_lock(w->data_fd, F_WRLCK, 0, 1, F_OFD_SETLK))
		return vr_err(err, errlen, -errno, "cannot set up %s: %s", w->data_name,
		              strerror(errno));
	rc = posix_fallocate(w->data_fd, 0, (off_t)w->map_size);
	if (rc)
		return vr_err(err, errlen, -rc,
		              "cannot allocate %zu bytes of shared memory for %s: %s", w->map_size,
		              w->data_name, strerror(rc));
	w->map = map_aligned(w->data_fd, w->map_size);
	if (!w->map)
		return vr_err(err, errlen, -errno, "cannot map %s: %s", w->data_name,
		              strerror(errno));
	fill_data_header(w, o, stride, ep_off, ch_off);
	return create_lease_segment(w, o, err, errlen);
}

static int check_options(const struct ipc_writer_options *o, size_t *bytes, char *err,
                         size_t errlen)
{
	const struct ipc_shape *g = &o->shape;
	size_t esz = volrec_dtype_size(g->dtype);

	if (!ipc_instance_valid(o->instance))
		return vr_err(err, errlen, -EINVAL,
		              "instance: '%s' is not a valid name ([A-Za-z0-9_-]{1,63})",
		              o->instance ? o->instance : "(null)");
	if (!o->run_dir || !o->run_dir[0])
		return vr_err(err, errlen, -EINVAL, "ipc.run_dir: empty");
	if (strlen(o->run_dir) >= PATH_MAX)
		return vr_err(err, errlen, -ENAMETOOLONG, "ipc.run_dir: longer than %d bytes",
		              PATH_MAX - 1);
	if (!esz)
		return vr_err(err, errlen, -EINVAL,
		              "output dtype %u is not one of u8 (1), u16 (2), f32 (3)", g->dtype);
	if (o->slots < 2 || o->slots > VOLREC_MAX_SLOTS)
		return vr_err(err, errlen, -EINVAL, "output.slots: %u, allowed 2..%d", o->slots,
		              VOLREC_MAX_SLOTS);
	if (o->max_readers < 1 || o->max_readers > VOLREC_MAX_READERS)
		return vr_err(err, errlen, -EINVAL, "ipc.max_readers: %u, allowed 1..%d",
		              o->max_readers, VOLREC_MAX_READERS);
	if (o->hwm < 1 || o->hwm > INT_MAX)
		return vr_err(err, errlen, -EINVAL, "ipc.hwm: %u, allowed 1..%d", o->hwm, INT_MAX);
	if (!g->ny || !g->nx || !g->nz || (uint64_t)g->ny * g->nx * g->nz > (UINT64_C(1) << 38))
		return vr_err(err, errlen, -EINVAL,
		              "volume geometry %u x %u x %u is empty or too large", g->ny, g->nx,
		              g->nz);
	if (o->channels > VOLREC_CHANNELS_MAX)
		return vr_err(err, errlen, -EINVAL, "output.channels: %u channels, at most %d",
		              o->channels, VOLREC_CHANNELS_MAX);
	*bytes = (size_t)g->ny * g->nx * g->nz * esz;
	return 0;
}

int ipc_writer_open(const struct ipc_writer_options *o, struct ipc_writer **out, char *err,
                    size_t errlen)
{
	struct ipc_writer *w;
	size_t bytes = 0; /* written by check_options on success */
	char *eps;
	size_t off = 0;
	int rc;

	if (!o || !out)
		return vr_err(err, errlen, -EINVAL,
		              "ipc_writer_open: no options or no result pointer");
	rc = check_options(o, &bytes, err, errlen);
	if (rc)
		return rc;
	w = calloc(1, sizeof(*w));
	if (!w)
		return vr_err(err, errlen, -ENOMEM, "out of memory");
	w->lock_fd = w->data_fd = w->lease_fd = -1;
	w->slots = o->slots;
	w->max_readers = o->max_readers;
	w->volume_bytes = bytes;
	w->channels = o->channels ? o->channels : 1;
	if (o->views && o->shape.dtype == VOLREC_DTYPE_U8) {
		w->views_offset = (bytes * w->channels + 63) & ~(size_t)63;
		w->views_bytes = volrec_views_bytes(o->shape.ny, o->shape.nx, o->shape.nz);
		if (o->channel_views && w->channels > 1) {
			w->chv_offset = (w->views_offset + w->views_bytes + 63) & ~(size_t)63;
			w->chv_bytes = volrec_channel_views_bytes(o->shape.ny, o->shape.nx,
			                                          o->shape.nz, w->channels);
		}
	}
	w->latest_slot = VOLREC_SLOT_NONE;
	pthread_mutex_init(&w->send_lock, NULL);
	w->dead_seen = calloc(o->max_readers, sizeof(*w->dead_seen));
	if (!w->dead_seen) {
		rc = vr_err(err, errlen, -ENOMEM, "out of memory");
		goto out_free;
	}
	rc = ipc_shm_names(o->instance, w->data_name, sizeof(w->data_name), w->lease_name,
	                   sizeof(w->lease_name));
	if (rc) {
		vr_err(err, errlen, rc, "instance '%s': name too long", o->instance);
		goto out_free;
	}
	rc = take_instance(w, o, err, errlen);
	if (rc)
		goto out_free;
	rc = create_segments(w, o, err, errlen);
	if (rc)
		goto out_free;
	rc = bind_endpoints(w, o, err, errlen);
	if (rc)
		goto out_free;

	eps = (char *)w->map + w->hdr->endpoints_offset;
	for (uint32_t i = 0; i < w->nendpoints; i++) {
		size_t n = strlen(w->endpoints[i]) + 1;
		if (off + n + 1 > VOLREC_ENDPOINTS_MAX)
			break;
		memcpy(eps + off, w->endpoints[i], n);
		off += n;
	}
	ipc_store32(&w->hdr->state, VOLREC_STATE_LIVE, memory_order_release);
	{
		char pidtxt[32];
		int n = snprintf(pidtxt, sizeof(pidtxt), "%d\n", (int)getpid());
		if (ftruncate(w->lock_fd, 0) || pwrite(w->lock_fd, pidtxt, (size_t)n, 0) != n) {
			rc = vr_err(err, errlen, -errno, "cannot write the instance lock file: %s",
			            strerror(errno));
			goto out_free;
		}
	}
	*out = w;
	return 0;

out_free:
	ipc_writer_close(w, true);
	return rc;
}

/*
 * Whether the owner of lease entry i still holds it: its OFD lock on the entry's byte range
 * vanishes when the owner exits (before it is reaped) or closes the table, whatever pid
 * namespace it lives in and whoever reuses its pid later. An error counts as held.
 */
static bool entry_held(const struct ipc_writer *w, uint32_t i)
{
	return ofd_lock(w->lease_fd, F_WRLCK, ipc_lease_entry_offset(i),
	                sizeof(struct volrec_lease_entry), F_OFD_GETLK) != F_UNLCK;
}

/* Count one event in w->st: the counters are read by ipc_writer_stats from another thread. */
static void stat_inc(struct ipc_writer *w, uint64_t *counter)
{
	pthread_mutex_lock(&w->send_lock);
	(*counter)++;
	pthread_mutex_unlock(&w->send_lock);
}

/* Slots (bit i) that some live reader leases among those in cand. */
static uint64_t leased_slots(struct ipc_writer *w, uint64_t cand)
{
	uint64_t mask = 0;

	for (uint32_t i = 0; i < w->max_readers; i++) {
		struct volrec_lease_entry *e = ipc_lease_entry(w->lmap, i);
		uint32_t pid = ipc_load32(&e->pid, memory_order_seq_cst);
		uint32_t s;

		if (!pid)
			continue;
		s = ipc_load32(&e->slot, memory_order_seq_cst);
		if (s >= w->slots || !(cand & (UINT64_C(1) << s)) || (mask & (UINT64_C(1) << s)))
			continue;
		if (ipc_load64(&e->session_id, memory_order_relaxed) != w->session)
			continue;
		if (!entry_held(w, i)) {
			if (w->dead_seen[i] != pid) {
				w->dead_seen[i] = pid;
				stat_inc(w, &w->st.dead_leases);
			}
			continue;
		}
		mask |= UINT64_C(1) << s;
	}
	return mask;
}

static int pick_oldest(const struct ipc_writer *w, uint64_t mask)
{
	int best = -1;

	for (uint32_t i = 0; i < w->slots; i++)
		if ((mask & (UINT64_C(1) << i)) && (best < 0 || w->content[i] < w->content[best]))
			best = (int)i;
	return best;
}

int ipc_writer_begin(struct ipc_writer *w, struct ipc_slot_ref *slot)
{
	uint64_t cand = 0, leased;
	int s, oldest;

	for (uint32_t i = 0; i < w->slots; i++)
		if (!w->in_progress[i] && i != w->latest_slot)
			cand |= UINT64_C(1) << i;
	if (!cand)
		return -EBUSY;
	leased = leased_slots(w, cand);
	oldest = pick_oldest(w, cand);
	s = pick_oldest(w, cand & ~leased);
	if (s < 0) {
		s = oldest; /* every candidate is leased: real time wins */
		stat_inc(w, &w->st.forced_overwrite);
	} else if (s != oldest) {
		stat_inc(w, &w->st.lease_skips);
	}
	w->in_progress[s] = true;
	w->content[s] = 0;
	w->next_seq++;
	ipc_store64(&ipc_slot_header(w->map, (uint32_t)s)->sequence, 2 * w->next_seq - 1,
	            memory_order_seq_cst);
	atomic_thread_fence(memory_order_release);
	slot->index = (uint32_t)s;
	slot->sequence = w->next_seq;
	slot->data = w->slot_ptrs[s];
	slot->bytes = w->volume_bytes;
	slot->channels = w->channels;
	slot->views = w->views_bytes ? (char *)w->slot_ptrs[s] + w->views_offset : NULL;
	slot->views_bytes = w->views_bytes;
	slot->channel_views = w->chv_bytes ? (char *)w->slot_ptrs[s] + w->chv_offset : NULL;
	return 0;
}

static int send_msg(struct ipc_writer *w, const char *topic, const void *body, size_t len)
{
	void *socks[2] = {w->pub, w->pub_curve};
	int rc = 0;

	pthread_mutex_lock(&w->send_lock);
	for (int i = 0; i < 2; i++) {
		if (!socks[i])
			continue;
		/* a PUB socket never blocks nor fails at a subscriber's HWM: libzmq drops the
		 * message for that subscriber silently, so only real errors are seen here */
		if (zmq_send(socks[i], topic, strlen(topic), ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0 ||
		    zmq_send(socks[i], body, len, ZMQ_DONTWAIT) < 0) {
			rc = -zmq_errno();
			w->st.send_errors++;
		}
	}
	pthread_mutex_unlock(&w->send_lock);
	return rc;
}

static bool slot_ref_ok(const struct ipc_writer *w, const struct ipc_slot_ref *slot)
{
	return slot && slot->index < w->slots && w->in_progress[slot->index] && slot->sequence &&
	       slot->sequence <= w->next_seq;
}

int ipc_writer_publish(struct ipc_writer *w, struct ipc_slot_ref *slot,
                       const struct ipc_volume_meta *meta)
{
	return ipc_writer_publish_as(w, slot, meta, NULL);
}

int ipc_writer_publish_as(struct ipc_writer *w, struct ipc_slot_ref *slot,
                          const struct ipc_volume_meta *meta, struct ipc_volume_meta *as)
{
	struct ipc_vol v;
	struct ipc_volume_meta *m = &v.meta;
	unsigned char buf[sizeof(struct volrec_vol_msg)];

	if (!slot_ref_ok(w, slot) || !meta)
		return -EINVAL;
	v = (struct ipc_vol){
	        .session_id = w->session,
	        .slot = slot->index,
	        .shape = {.ny = w->hdr->ny,
	                  .nx = w->hdr->nx,
	                  .nz = w->hdr->nz,
	                  .dtype = w->hdr->dtype},
	        .meta = *meta,
	};
	m->sequence = slot->sequence;
	m->t_publish_ns = vr_now_ns(CLOCK_REALTIME);
	if (!m->latency_ns && m->t_last_ns && m->t_publish_ns > m->t_last_ns)
		m->latency_ns = m->t_publish_ns - m->t_last_ns;
	m->flags &= ~VOLREC_FLAG_DROPPED_BEFORE;
	if (m->drops_before)
		m->flags |= VOLREC_FLAG_DROPPED_BEFORE;
	m->drops_before = 0; /* not on the wire */
	m->channels = w->channels;
	for (uint32_t c = 0; c < w->channels; c++) {
		struct volrec_channel_desc *d = writer_desc(w, slot->index, c);

		*d = meta->channel[c];
		d->offset = (uint64_t)c * w->volume_bytes;
		d->units[sizeof(d->units) - 1] = '\0';
		memset(d->reserved, 0, sizeof(d->reserved));
	}
	ipc_slot_meta_store(ipc_slot_header(w->map, slot->index), m);
	ipc_store64(&ipc_slot_header(w->map, slot->index)->sequence, 2 * slot->sequence,
	            memory_order_release);
	w->in_progress[slot->index] = false;
	w->content[slot->index] = slot->sequence;
	if (slot->sequence > w->latest_seq) {
		w->latest_seq = slot->sequence;
		w->latest_slot = slot->index;
		ipc_store32(&w->hdr->latest_slot, slot->index, memory_order_release);
		ipc_store64(&w->hdr->latest_sequence, slot->sequence, memory_order_release);
	}
	stat_inc(w, &w->st.published);

	ipc_vol_encode(&v, buf);
	send_msg(w, VOLREC_TOPIC_VOL, buf, sizeof(buf));
	slot->data = NULL;
	if (as)
		*as = *m;
	return 0;
}

void ipc_writer_abort(struct ipc_writer *w, struct ipc_slot_ref *slot)
{
	if (!w || !slot_ref_ok(w, slot))
		return;
	ipc_store64(&ipc_slot_header(w->map, slot->index)->sequence, 0, memory_order_release);
	w->in_progress[slot->index] = false;
	w->content[slot->index] = 0;
	if (slot->sequence == w->next_seq)
		w->next_seq--; /* no gap for readers */
	stat_inc(w, &w->st.aborted);
	slot->data = NULL;
}

static int send_text(struct ipc_writer *w, const char *topic, const char *json)
{
	size_t n;

	if (!w || !json)
		return -EINVAL;
	n = strnlen(json, VOLREC_TEXT_MAX);
	if (!n || n >= VOLREC_TEXT_MAX)
		return -EINVAL;
	return send_msg(w, topic, json, n);
}

int ipc_writer_send_status(struct ipc_writer *w, const char *json)
{
	return send_text(w, VOLREC_TOPIC_STATUS, json);
}

int ipc_writer_send_event(struct ipc_writer *w, const char *json)
{
	return send_text(w, VOLREC_TOPIC_EVENT, json);
}

int ipc_writer_send_raw(struct ipc_writer *w, const char *topic, const void *body, size_t len)
{
	if (!w || !topic || (!body && len))
		return -EINVAL;
	return send_msg(w, topic, body, len);
}

int ipc_writer_readers(struct ipc_writer *w)
{
	int n = 0;

	for (uint32_t i = 0; i < w->max_readers; i++) {
		struct volrec_lease_entry *e = ipc_lease_entry(w->lmap, i);

		if (ipc_load32(&e->pid, memory_order_acquire) && entry_held(w, i))
			n++;
	}
	return n;
}

void ipc_writer_slot_buffers(struct ipc_writer *w, void *const **ptrs, uint32_t *count,
                             size_t *size)
{
	*ptrs = w->slot_ptrs;
	*count = w->slots;
	/* the volume and its views area: both are written by the backend's copies */
	*size = w->chv_bytes     ? w->chv_offset + w->chv_bytes
	        : w->views_bytes ? w->views_offset + w->views_bytes
	                         : (size_t)w->channels * w->volume_bytes;
}

void ipc_writer_stats(struct ipc_writer *w, struct ipc_writer_stats *st)
{
	pthread_mutex_lock(&w->send_lock);
	*st = w->st;
	pthread_mutex_unlock(&w->send_lock);
	st->connections_refused =
	        ipc_connguard_refused(w->guard[0]) + ipc_connguard_refused(w->guard[1]);
}

uint64_t ipc_writer_session(const struct ipc_writer *w)
{
	return w->session;
}

const char *ipc_writer_endpoint(const struct ipc_writer *w, uint32_t i)
{
	return i < w->nendpoints ? w->endpoints[i] : NULL;
}

void ipc_writer_close(struct ipc_writer *w, bool unlink)
{
	if (!w)
		return;
	if (w->hdr)
		ipc_store32(&w->hdr->state, VOLREC_STATE_CLOSED, memory_order_release);
	ipc_connguard_stop(w->guard[0]);
	ipc_connguard_stop(w->guard[1]);
	if (w->pub)
		zmq_close(w->pub);
	if (w->pub_curve)
		zmq_close(w->pub_curve);
	if (w->zctx)
		zmq_ctx_term(w->zctx);
	if (unlink && w->data_fd >= 0)
		shm_unlink(w->data_name);
	if (unlink && w->lease_fd >= 0)
		shm_unlink(w->lease_name);
	if (w->map)
		munmap(w->map, w->map_size);
	if (w->lmap)
		munmap(w->lmap, w->lmap_size);
	if (w->data_fd >= 0)
		close(w->data_fd);
	if (w->lease_fd >= 0)
		close(w->lease_fd);
	if (w->lock_fd >= 0)
		close(w->lock_fd);
	pthread_mutex_destroy(&w->send_lock);
	free(w->dead_seen);
	free(w);
}
