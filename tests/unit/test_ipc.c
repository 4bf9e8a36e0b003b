/* SPDX-License-Identifier: MIT */
/*
 * ipc writer and libvolrec, in one process (plus forked children): message encoding, segment
 * layout, slot choice under leases, torn reads, dead readers, read-only mappings, versioning.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include <volrec/client.h>

#include "ipc/internal.h"
#include "ipc/ipc.h"
#include "tests/ipc/ipc_testutil.h"
#include "tests/unit/vrtest.h"

struct fx {
	char run_dir[64];
	char instance[64];
	struct ipc_writer_options o;
	const char *pub[1];
	char pub0[128];
	char curve_sec[128], curve_pub[128];
	struct ipc_writer *w;
	char err[1024];
};

static int fx_setup(void **state)
{
	struct fx *f = calloc(1, sizeof(*f));

	assert_non_null(f);
	snprintf(f->run_dir, sizeof(f->run_dir), "/tmp/volrec-ipc-XXXXXX");
	assert_non_null(mkdtemp(f->run_dir));
	ipc_test_instance(f->instance, sizeof(f->instance), "ut");
	ipc_test_options(&f->o, f->instance, f->run_dir);
	f->o.slots = 3;
	f->pub[0] = f->pub0;
	*state = f;
	return 0;
}

static int fx_teardown(void **state)
{
	struct fx *f = *state;
	char cmd[128];

	ipc_writer_close(f->w, true);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", f->run_dir);
	if (system(cmd) != 0)
		fprintf(stderr, "cannot remove %s\n", f->run_dir);
	free(f);
	return 0;
}

static void open_writer(struct fx *f)
{
	int rc = ipc_writer_open(&f->o, &f->w, f->err, sizeof(f->err));
	if (rc)
		fail_msg("ipc_writer_open: %d %s", rc, f->err);
}

/* Publish one volume with the test pattern; returns its slot. */
static uint32_t publish(struct fx *f)
{
	struct ipc_slot_ref s;
	struct ipc_volume_meta m = {.epoch = 7, .offset_x = 1, .offset_y = 2};

	assert_int_equal(ipc_writer_begin(f->w, &s), 0);
	ipc_test_fill(s.data, s.bytes, s.sequence);
	m.volume_id = 100 + s.sequence;
	assert_int_equal(ipc_writer_publish(f->w, &s, &m), 0);
	return s.index;
}

/* A client of f's writer with options o (run_dir set here), returned once its subscription
 * has reached the publisher (ZeroMQ joins asynchronously); o must subscribe to events. */
static struct volrec_client *open_client_with(struct fx *f, struct volrec_client_options *o)
{
	struct volrec_client *c = NULL;
	struct volrec_message msg;
	int rc;

	o->run_dir = f->run_dir;
	rc = volrec_client_open_opts(f->instance, o, &c);
	if (rc)
		fail_msg("volrec_client_open: %d %s", rc, volrec_strerror(rc));
	for (int i = 0; i < 400; i++) {
		assert_int_equal(ipc_writer_send_event(f->w, "{\"event\":\"sync\"}"), 0);
		rc = volrec_client_next_message(c, 25, &msg);
		if (rc == 0 && msg.type == VOLREC_MSG_EVENT)
			break;
		assert_int_equal(rc, -ETIMEDOUT);
	}
	/* drain the other sync events */
	while (volrec_client_next_message(c, 20, &msg) == 0)
		assert_int_equal(msg.type, VOLREC_MSG_EVENT);
	return c;
}

static struct volrec_client *open_client(struct fx *f)
{
	struct volrec_client_options o = {.topics = VOLREC_SUB_VOL | VOLREC_SUB_EVENT};

	return open_client_with(f, &o);
}

/* Publish volume seq; c's next one is it, with the pattern and none missed. Returns its slot. */
static uint32_t publish_and_read(struct fx *f, struct volrec_client *c, uint64_t seq)
{
	struct volrec_view v;
	uint32_t slot = publish(f);

	assert_int_equal(volrec_client_next(c, 5000, &v), 0);
	assert_int_equal(v.sequence, seq);
	assert_int_equal(v.slot, slot);
	assert_true(ipc_test_verify(v.data, v.bytes, seq));
	assert_int_equal(v.missed, 0);
	assert_int_equal(volrec_view_release(c, &v), 0);
	return slot;
}

/* A raw vol message that c must refuse with -EPROTO and an error text holding what. */
static void send_refused(struct fx *f, struct volrec_client *c, const void *msg, size_t size,
                         const char *what)
{
	struct volrec_view v;

	assert_int_equal(ipc_writer_send_raw(f->w, "vol", msg, size), 0);
	assert_int_equal(volrec_client_next(c, 5000, &v), -EPROTO);
	assert_non_null(strstr(volrec_client_error(c), what));
}

static void test_vol_message_roundtrip_and_rejects(void **state)
{
	struct ipc_vol m = {.session_id = 9,
	                    .slot = 1,
	                    .shape = {.ny = 1, .nx = 2, .nz = 3, .dtype = VOLREC_DTYPE_U16},
	                    .meta = {.volume_id = 11,
	                             .epoch = 12,
	                             .offset_x = -1,
	                             .offset_y = 2,
	                             .t_first_ns = 13,
	                             .t_last_ns = 14,
	                             .latency_ns = 15,
	                             .flags = VOLREC_FLAG_RESET | VOLREC_FLAG_DROPPED_BEFORE,
	                             .sequence = 3,
	                             .t_publish_ns = 16}};
	unsigned char buf[sizeof(struct volrec_vol_msg)];
	struct volrec_vol_msg raw;
	struct ipc_vol d;
	char err[256];

	(void)state;
	ipc_vol_encode(&m, buf);
	/* the wire layout of protocol.h, field by field */
	memcpy(&raw, buf, sizeof(raw));
	assert_int_equal(raw.magic, VOLREC_VOL_MAGIC);
	assert_int_equal(raw.minor, VOLREC_PROTO_MINOR);
	assert_int_equal(raw.size, sizeof(raw));
	assert_int_equal(raw.slot, 1);
	assert_int_equal(raw.sequence, 3);
	assert_int_equal(raw.volume_id, 11);
	assert_int_equal(raw.offset_x, -1);
	assert_int_equal(raw.dtype, VOLREC_DTYPE_U16);
	assert_int_equal(raw.t_publish_ns, 16);
	assert_int_equal(raw.flags, VOLREC_FLAG_RESET | VOLREC_FLAG_DROPPED_BEFORE);
	assert_int_equal(ipc_vol_decode(buf, sizeof(buf), &d, err, sizeof(err)), 0);
	assert_int_equal(d.session_id, 9);
	assert_int_equal(d.slot, 1);
	assert_memory_equal(&d.shape, &m.shape, sizeof(m.shape));
	assert_int_equal(d.meta.volume_id, 11);
	assert_int_equal(d.meta.epoch, 12);
	assert_int_equal(d.meta.offset_x, -1);
	assert_int_equal(d.meta.offset_y, 2);
	assert_int_equal(d.meta.t_first_ns, 13);
	assert_int_equal(d.meta.t_last_ns, 14);
	assert_int_equal(d.meta.latency_ns, 15);
	assert_int_equal(d.meta.flags, m.meta.flags);
	assert_int_equal(d.meta.sequence, 3);
	assert_int_equal(d.meta.t_publish_ns, 16);
	assert_int_equal(ipc_vol_decode(buf, 100, &d, err, sizeof(err)), -EPROTO);
	assert_non_null(strstr(err, "malformed"));
	buf[4] = 1; /* an older major: both versions named */
	assert_int_equal(ipc_vol_decode(buf, sizeof(buf), &d, err, sizeof(err)), -EPROTO);
	assert_non_null(strstr(err, "vol message speaks protocol major version 1; this client "
	                            "supports 2 only (protocol 2."));
	assert_non_null(strstr(err, "must be of the same major version"));
	buf[4] = VOLREC_PROTO_MAJOR;
	buf[0] ^= 0xff;
	assert_int_equal(ipc_vol_decode(buf, sizeof(buf), &d, err, sizeof(err)), -EPROTO);
	assert_non_null(strstr(err, "magic"));
}

static void test_writer_creates_aligned_segments_and_unlinks(void **state)
{
	struct fx *f = *state;
	char name[128], lname[128], path[160];
	struct stat st;
	void *const *ptrs;
	uint32_t n;
	size_t size;

	open_writer(f);
	ipc_shm_names(f->instance, name, sizeof(name), lname, sizeof(lname));
	snprintf(path, sizeof(path), "/dev/shm%s", name);
	assert_int_equal(stat(path, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0640);
	snprintf(path, sizeof(path), "/dev/shm%s", lname);
	assert_int_equal(stat(path, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0660);
	ipc_writer_slot_buffers(f->w, &ptrs, &n, &size);
	assert_int_equal(n, 3);
	assert_int_equal(size, 8 * 16 * 32);
	for (uint32_t i = 0; i < n; i++)
		assert_int_equal((uintptr_t)ptrs[i] % VOLREC_SLOT_ALIGN, 0);
	ipc_writer_close(f->w, true);
	f->w = NULL;
	assert_int_equal(stat(path, &st), -1);
	snprintf(path, sizeof(path), "/dev/shm%s", name);
	assert_int_equal(stat(path, &st), -1);
}

static void test_second_writer_refused(void **state)
{
	struct fx *f = *state;
	struct ipc_writer *w2 = NULL;
	char err[512];

	open_writer(f);
	assert_int_equal(ipc_writer_open(&f->o, &w2, err, sizeof(err)), -EBUSY);
	assert_null(w2);
	assert_non_null(strstr(err, "already has a live writer"));
}

static void test_client_reads_volume_and_metadata(void **state)
{
	struct fx *f = *state;
	struct volrec_client *c;
	struct volrec_view v;
	uint32_t slot;

	open_writer(f);
	c = open_client(f);
	assert_int_equal(ipc_writer_readers(f->w), 1);
	slot = publish(f);
	assert_int_equal(volrec_client_next(c, 5000, &v), 0);
	assert_int_equal(v.slot, slot);
	assert_int_equal(v.sequence, 1);
	assert_int_equal(v.volume_id, 101);
	assert_int_equal(v.epoch, 7);
	assert_int_equal(v.offset_y, 2);
	assert_int_equal(v.ny * v.nx * v.nz, v.bytes);
	assert_true(ipc_test_verify(v.data, v.bytes, 1));
	assert_int_equal(volrec_client_next(c, 0, &v), -EBUSY);
	{
		struct volrec_segment_info info;
		volrec_client_info(c, &info);
		assert_int_equal(info.writer_pid, getpid());
		assert_int_equal(info.writer_alive, 1);
		assert_int_equal(info.latest_sequence, 1);
		assert_int_equal(info.slots, 3);
		assert_non_null(strstr(info.endpoint, "ipc://"));
	}
	assert_int_equal(volrec_view_release(c, &v), 0);
	volrec_client_close(c);
	assert_int_equal(ipc_writer_readers(f->w), 0);
}

static void test_latest_counts_missed_volumes(void **state)
{
	struct fx *f = *state;
	struct volrec_client *c;
	struct volrec_view v;
	struct volrec_client_stats st;

	open_writer(f);
	c = open_client(f);
	assert_int_equal(volrec_client_latest(c, &v), -EAGAIN);
	publish(f);
	assert_int_equal(volrec_client_latest(c, &v), 0);
	assert_int_equal(v.sequence, 1);
	assert_int_equal(volrec_view_release(c, &v), 0);
	publish(f);
	publish(f);
	publish(f);
	assert_int_equal(volrec_client_latest(c, &v), 0);
	assert_int_equal(v.sequence, 4);
	assert_int_equal(v.missed, 2);
	assert_true(ipc_test_verify(v.data, v.bytes, 4));
	assert_int_equal(volrec_view_release(c, &v), 0);
	volrec_client_stats(c, &st);
	assert_int_equal(st.missed, 2);
	volrec_client_close(c);
}

static void test_writer_avoids_leased_slot(void **state)
{
	struct fx *f = *state;
	struct volrec_client *c;
	struct volrec_view v;
	uint32_t s1, s2, s3, s4;

	open_writer(f);
	c = open_client(f);
	s1 = publish(f);
	assert_int_equal(volrec_client_latest(c, &v), 0); /* leases volume 1 */
	s2 = publish(f);
	s3 = publish(f);
	assert_int_not_equal(s2, s1);
	assert_int_not_equal(s3, s1);
	s4 = publish(f); /* oldest is s1, but leased: must take s2 */
	assert_int_equal(s4, s2);
	assert_int_equal(volrec_view_check(c, &v), 0);
	assert_true(ipc_test_verify(v.data, v.bytes, 1));
	assert_int_equal(volrec_view_release(c, &v), 0);
	assert_int_equal(publish(f), s1); /* released: the oldest again */
	volrec_client_close(c);
}

static void test_all_leased_writer_overwrites_and_readers_see_torn(void **state)
{
	struct fx *f = *state;
	struct volrec_client *c[3];
	struct volrec_view v[3];
	struct ipc_writer_stats ws;
	struct volrec_client_stats cs;
	int torn = 0;

	open_writer(f);
	for (int i = 0; i < 3; i++) {
		c[i] = open_client(f);
		publish(f);
		assert_int_equal(volrec_client_latest(c[i], &v[i]), 0);
		assert_int_equal(v[i].sequence, (uint64_t)i + 1);
	}
	for (int i = 0; i < 10; i++)
		publish(f); /* never blocks, never fails */
	ipc_writer_stats(f->w, &ws);
	assert_true(ws.forced_overwrite >= 1);
	assert_int_equal(ws.published, 13);
	for (int i = 0; i < 3; i++) {
		int rc = volrec_view_release(c[i], &v[i]);
		assert_true(rc == 0 || rc == VOLREC_ETORN); /* the constant callers compare with */
		if (rc == -ESTALE) {
			torn++;
			volrec_client_stats(c[i], &cs);
			assert_int_equal(cs.torn, 1);
			assert_non_null(strstr(volrec_client_error(c[i]), "torn read"));
		}
		volrec_client_close(c[i]);
	}
	assert_true(torn >= 2);
}

/* A forked reader that, once told, leases the latest volume and holds it until killed. */
struct leaser {
	pid_t pid;
	int go[2], ready[2];
};

static void leaser_fork(struct fx *f, struct leaser *l)
{
	char b = 0;

	assert_int_equal(pipe(l->go), 0);
	assert_int_equal(pipe(l->ready), 0);
	l->pid = fork();
	assert_true(l->pid >= 0);
	if (l->pid == 0) {
		struct volrec_client *c;
		struct volrec_view v;
		if (read(l->go[0], &b, 1) != 1 || volrec_client_open(f->instance, f->run_dir, &c) ||
		    volrec_client_latest(c, &v))
			_exit(1);
		b = (char)v.slot;
		if (write(l->ready[1], &b, 1) != 1)
			_exit(1);
		pause(); /* hold the lease until killed */
		_exit(0);
	}
}

/* Tell the reader to lease; it must lease slot. */
static void leaser_lease(struct leaser *l, uint32_t slot)
{
	char b = 0;

	assert_int_equal(write(l->go[1], &b, 1), 1);
	assert_int_equal(read(l->ready[0], &b, 1), 1);
	assert_int_equal(b, (char)slot);
}

static void leaser_close(struct leaser *l)
{
	close(l->go[0]);
	close(l->go[1]);
	close(l->ready[0]);
	close(l->ready[1]);
}

static void test_dead_reader_lease_reclaimed(void **state)
{
	struct fx *f = *state;
	struct leaser l;
	uint32_t s1, s2, s4, s5;
	int status;

	leaser_fork(f, &l);
	open_writer(f);
	s1 = publish(f);
	leaser_lease(&l, s1);
	assert_int_equal(ipc_writer_readers(f->w), 1);
	s2 = publish(f);
	publish(f);
	s4 = publish(f);
	assert_int_equal(s4, s2); /* s1 leased by the live child */
	kill(l.pid, SIGKILL);
	assert_int_equal(waitpid(l.pid, &status, 0), l.pid);
	/* reclaimed at once (well within 1 s): the oldest, s1, is taken again */
	assert_int_equal(ipc_writer_readers(f->w), 0);
	s5 = publish(f);
	assert_int_equal(s5, s1);
	{
		struct ipc_writer_stats ws;
		ipc_writer_stats(f->w, &ws);
		assert_int_equal(ws.dead_leases, 1);
	}
	leaser_close(&l);
}

/*
 * A lease counts only while its owner holds the entry's lock: a killed reader that is not yet
 * reaped (a zombie, still "alive" to kill(pid, 0)) and an entry whose pid now names another
 * live process (pid reuse, or a reader in another pid namespace) must not block a slot.
 */
static void test_lease_liveness_follows_the_lock_not_the_pid(void **state)
{
	struct fx *f = *state;
	struct leaser l;
	struct ipc_writer_stats ws;
	uint32_t s1, s2, s3;
	siginfo_t si;
	int status;

	leaser_fork(f, &l);
	open_writer(f);
	s1 = publish(f);
	leaser_lease(&l, s1);
	s2 = publish(f);
	s3 = publish(f);
	assert_int_equal(publish(f), s2); /* s1 leased by the live child */
	kill(l.pid, SIGKILL);
	/* wait until it has exited, but leave it a zombie (not reaped) */
	memset(&si, 0, sizeof(si));
	assert_int_equal(waitid(P_PID, (id_t)l.pid, &si, WEXITED | WNOWAIT), 0);
	assert_int_equal(si.si_pid, l.pid);
	assert_int_equal(ipc_writer_readers(f->w), 0);
	assert_int_equal(publish(f), s1); /* the zombie's lease went with its lock */
	assert_int_equal(waitpid(l.pid, &status, 0), l.pid);
	ipc_writer_stats(f->w, &ws);
	assert_int_equal(ws.dead_leases, 1);

	/* an entry naming a live pid (ours) whose lock nobody holds: stale, not a lease */
	{
		char lname[128];
		size_t lsz = sizeof(struct volrec_lease_header) + sizeof(struct volrec_lease_entry);
		struct volrec_lease_entry *e;
		void *lm;
		int fd;

		ipc_shm_names(f->instance, NULL, 0, lname, sizeof(lname));
		fd = shm_open(lname, O_RDWR, 0);
		assert_true(fd >= 0);
		lm = mmap(NULL, lsz, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
		assert_true(lm != MAP_FAILED);
		e = ipc_lease_entry(lm, 0); /* the dead child's entry */
		e->session_id = ipc_writer_session(f->w);
		e->slot = s3; /* the oldest candidate now (s1 newest, s2 next) */
		e->pid = (uint32_t)getpid();
		assert_int_equal(publish(f), s3);
		munmap(lm, lsz);
		close(fd);
	}
	leaser_close(&l);
}

static void on_segv(int sig)
{
	(void)sig;
	_exit(42);
}

static void test_client_mapping_is_read_only(void **state)
{
	struct fx *f = *state;
	struct volrec_client *c;
	struct volrec_view v;
	int status;
	pid_t pid;

	open_writer(f);
	publish(f);
	c = open_client(f);
	assert_int_equal(volrec_client_latest(c, &v), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		struct sigaction sa = {.sa_handler = on_segv};
		sigaction(SIGSEGV, &sa, NULL);
		sigaction(SIGBUS, &sa, NULL);
		*(volatile unsigned char *)v.data = 0xAB;
		_exit(0);
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 42);
	assert_true(ipc_test_verify(v.data, v.bytes, 1));
	assert_int_equal(volrec_view_release(c, &v), 0);
	volrec_client_close(c);
}

static void test_wrong_version_segment_rejected(void **state)
{
	struct fx *f = *state;
	struct volrec_client *c = NULL;
	char name[128];
	struct volrec_shm_header *h;
	int fd, rc;

	open_writer(f);
	ipc_writer_close(f->w, false); /* leave a closed, valid segment behind */
	f->w = NULL;
	ipc_shm_names(f->instance, name, sizeof(name), NULL, 0);
	fd = shm_open(name, O_RDWR, 0);
	assert_true(fd >= 0);
	h = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	assert_true(h != MAP_FAILED);
	h->major = VOLREC_PROTO_MAJOR - 1; /* an older volrecd */
	rc = volrec_client_open(f->instance, f->run_dir, &c);
	assert_int_equal(rc, -EPROTO);
	assert_null(c);
	h->major = VOLREC_PROTO_MAJOR + 1; /* a newer one */
	rc = volrec_client_open(f->instance, f->run_dir, &c);
	assert_int_equal(rc, -EPROTO);
	assert_null(c);
	h->major = VOLREC_PROTO_MAJOR;
	h->magic = 0x1234;
	assert_int_equal(volrec_client_open(f->instance, f->run_dir, &c), -EPROTO);
	munmap(h, 4096);
	close(fd);
	open_writer(f); /* a new writer takes the stale segment over */
	c = open_client(f);
	volrec_client_close(c);
	{
		char msg[512];
		void *map = calloc(1, 4096);
		struct volrec_shm_header *m = map;
		m->magic = VOLREC_SHM_MAGIC;
		m->major = 3;
		assert_int_equal(ipc_shm_validate(map, 4096, msg, sizeof(msg)), -EPROTO);
		assert_non_null(strstr(msg, "version 3.0"));
		free(map);
	}
}

/* A valid header of 2 slots of 2 x 3 x 4 u8 for a mapping of 3 x 2 MiB (only the header is
 * read by ipc_shm_validate, so a 4 KiB buffer stands for the mapping). */
static void valid_segment_header(struct volrec_shm_header *h)
{
	memset(h, 0, sizeof(*h));
	h->magic = VOLREC_SHM_MAGIC;
	h->major = VOLREC_PROTO_MAJOR;
	h->header_size = sizeof(*h);
	h->session_id = 0x1234;
	h->ny = 2;
	h->nx = 3;
	h->nz = 4;
	h->dtype = VOLREC_DTYPE_U8;
	h->slot_count = 2;
	h->slot_header_size = sizeof(struct volrec_slot_header);
	h->slot_table_offset = 256;
	h->data_offset = VOLREC_SLOT_ALIGN;
	h->slot_stride = VOLREC_SLOT_ALIGN;
	h->volume_bytes = 24;
	h->segment_size = 3 * VOLREC_SLOT_ALIGN;
	h->state = VOLREC_STATE_LIVE;
	h->endpoints_offset = 512;
	h->endpoints_size = 64;
}

/* Sums of header fields that wrap around 2^64 must not make a layout pass (found by
 * tests/fuzz/fuzz_ipc: data at 2^63 in a 4 KiB segment was accepted). */
static void test_segment_layout_sums_do_not_wrap(void **state)
{
	const size_t size = 3 * VOLREC_SLOT_ALIGN;
	struct volrec_shm_header *h = calloc(1, 4096);
	char msg[512];

	(void)state;
	assert_non_null(h);
	valid_segment_header(h);
	assert_int_equal(ipc_shm_validate(h, size, msg, sizeof(msg)), 0);

	/* data_offset + slot_count * slot_stride = 2^63 + 2 * 2^62 wraps to 0 */
	h->data_offset = UINT64_C(1) << 63;
	h->slot_stride = UINT64_C(1) << 62;
	h->segment_size = 4096;
	assert_int_equal(ipc_shm_validate(h, 4096, msg, sizeof(msg)), -EPROTO);
	assert_non_null(strstr(msg, "layout is inconsistent"));

	/* slot_table_offset + slot_count * slot_header_size wraps below data_offset */
	valid_segment_header(h);
	h->slot_table_offset = UINT64_MAX - 255; /* a multiple of 8 */
	assert_int_equal(ipc_shm_validate(h, size, msg, sizeof(msg)), -EPROTO);
	assert_non_null(strstr(msg, "layout is inconsistent"));

	/* endpoints_offset + endpoints_size wraps to 8 */
	valid_segment_header(h);
	h->endpoints_offset = UINT64_MAX - 7;
	h->endpoints_size = 16;
	assert_int_equal(ipc_shm_validate(h, size, msg, sizeof(msg)), -EPROTO);
	assert_non_null(strstr(msg, "endpoint list"));

	/* ny * nx * nz = 2^22 * 2^21 * 2^21 wraps to 0 = volume_bytes */
	valid_segment_header(h);
	h->ny = 1u << 22;
	h->nx = 1u << 21;
	h->nz = 1u << 21;
	h->volume_bytes = 0;
	assert_int_equal(ipc_shm_validate(h, size, msg, sizeof(msg)), -EPROTO);
	assert_non_null(strstr(msg, "geometry is inconsistent"));
	free(h);
}

/* A views area too small for its header and descriptors is refused at open: the client reads
 * the descriptors before any picture size (found by tests/fuzz/fuzz_views: an area of 128
 * bytes at the end of the mapping was read 480 bytes past it). */
/* Protocol 2.1: the channels of a slot one after another, each with its descriptor (written at
 * creation for every slot, then with each volume); a segment of a 2.0 writer (channels 0) reads
 * as one channel, the structure, of an unknown mapping; inconsistent channel fields are refused. */
static void test_channels_of_a_slot_and_of_an_older_writer(void **state)
{
	struct fx *f = *state;
	struct volrec_channel_desc d[VOLREC_CHANNELS_MAX] = {
	        {.kind = VOLREC_CHANNEL_STRUCTURE, .value_lo = 0, .value_hi = 100, .units = "dB"},
	        {.kind = VOLREC_CHANNEL_ANGIO,
	         .method = VOLREC_ANGIO_CDV,
	         .value_lo = 0,
	         .value_hi = 1,
	         .units = "1",
	         .mask_db = 30},
	        {.kind = VOLREC_CHANNEL_DOPPLER,
	         .value_lo = -M_PI,
	         .value_hi = M_PI,
	         .units = "rad",
	         .velocity_lo_mm_s = -0.5,
	         .velocity_hi_mm_s = 0.5,
	         .period_us = 400,
	         .flags = VOLREC_CHANNEL_BULK},
	};
	struct ipc_volume_meta m = {.epoch = 3, .channels = 3};
	struct volrec_client *c;
	struct volrec_channel ch;
	struct volrec_view v;
	struct ipc_slot_ref s;
	struct volrec_shm_header *h;
	uint32_t n = 0;
	char name[128], msg[512];
	int fd;

	f->o.channels = 3;
	f->o.channel = d;
	open_writer(f);
	c = open_client(f);
	assert_int_equal(ipc_writer_begin(f->w, &s), 0);
	assert_int_equal(s.channels, 3);
	for (uint32_t k = 0; k < 3; k++)
		memset((uint8_t *)s.data + k * s.bytes, 10 + (int)k, s.bytes);
	memcpy(m.channel, d, sizeof(d));
	m.channel[1].value_hi = 0.5; /* this volume's range differs from the first */
	assert_int_equal(ipc_writer_publish(f->w, &s, &m), 0);
	assert_int_equal(volrec_client_next(c, 5000, &v), 0);
	assert_int_equal(volrec_view_channels(c, &v, &n), 0);
	assert_int_equal(n, 3);
	for (uint32_t k = 0; k < 3; k++) {
		assert_int_equal(volrec_view_channel(c, &v, k, &ch), 0);
		assert_int_equal(ch.kind, k);
		assert_ptr_equal(ch.data, (const uint8_t *)v.data + k * v.bytes);
		assert_int_equal(ch.bytes, v.bytes);
		assert_int_equal(ch.data[0], 10 + k);
		assert_int_equal(ch.data[v.bytes - 1], 10 + k);
	}
	assert_int_equal(volrec_view_channel(c, &v, 1, &ch), 0);
	assert_true(ch.value_hi == 0.5 && ch.mask_db == 30 && !strcmp(ch.units, "1"));
	assert_int_equal(volrec_view_channel(c, &v, 2, &ch), 0);
	assert_true(ch.value_lo == -M_PI && ch.velocity_mm_s[1] == 0.5 && ch.period_us == 400);
	assert_true(ch.flags == VOLREC_CHANNEL_BULK && !strcmp(ch.units, "rad"));
	assert_int_equal(volrec_view_find_channel(c, &v, VOLREC_CHANNEL_DOPPLER), 2);
	assert_int_equal(volrec_view_channel(c, &v, 3, &ch), -EINVAL);
	assert_int_equal(volrec_view_release(c, &v), 0);
	volrec_client_close(c);

	/* the descriptors of every slot were written at creation: slot 2 never held a volume */
	ipc_shm_names(f->instance, name, sizeof(name), NULL, 0);
	fd = shm_open(name, O_RDWR, 0);
	assert_true(fd >= 0);
	h = mmap(NULL, VOLREC_SLOT_ALIGN, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	assert_true(h != MAP_FAILED);
	assert_int_equal(h->channels, 3);
	assert_int_equal(ipc_channel_desc(h, 2, 2)->kind, VOLREC_CHANNEL_DOPPLER);
	assert_int_equal(ipc_channel_desc(h, 2, 1)->offset, h->volume_bytes);
	/* a 2.0 writer: no channels; its volume is the structure, of an unknown mapping */
	h->channels = 0;
	c = open_client(f);
	publish(f);
	assert_int_equal(volrec_client_next(c, 5000, &v), 0);
	assert_int_equal(volrec_view_channels(c, &v, &n), 0);
	assert_int_equal(n, 1);
	assert_int_equal(volrec_view_channel(c, &v, 0, &ch), 0);
	assert_true(ch.kind == VOLREC_CHANNEL_STRUCTURE && ch.data == v.data);
	assert_true(isnan(ch.value_lo) && isnan(ch.value_hi) && isnan(ch.velocity_mm_s[0]));
	assert_int_equal(volrec_view_find_channel(c, &v, VOLREC_CHANNEL_ANGIO), -ENOENT);
	assert_int_equal(volrec_view_release(c, &v), 0);
	volrec_client_close(c);
	h->channels = 3;
	munmap(h, VOLREC_SLOT_ALIGN);
	close(fd);

	/* inconsistent channel fields */
	{
		struct volrec_shm_header *b = calloc(1, 4096);

		valid_segment_header(b);
		b->channels = 2;
		b->channel_desc_size = sizeof(struct volrec_channel_desc);
		b->channel_table_offset = 1024;
		assert_int_equal(ipc_shm_validate(b, 3 * VOLREC_SLOT_ALIGN, msg, sizeof(msg)), 0);
		b->channels = 4;
		assert_int_equal(ipc_shm_validate(b, 3 * VOLREC_SLOT_ALIGN, msg, sizeof(msg)),
		                 -EPROTO);
		assert_non_null(strstr(msg, "channels are inconsistent"));
		b->channels = 2;
		b->channel_desc_size = 64; /* smaller than a descriptor */
		assert_int_equal(ipc_shm_validate(b, 3 * VOLREC_SLOT_ALIGN, msg, sizeof(msg)),
		                 -EPROTO);
		b->channel_desc_size = sizeof(struct volrec_channel_desc);
		b->channel_table_offset = VOLREC_SLOT_ALIGN - 100; /* past the header region */
		assert_int_equal(ipc_shm_validate(b, 3 * VOLREC_SLOT_ALIGN, msg, sizeof(msg)),
		                 -EPROTO);
		b->channel_table_offset = 1024;
		b->volume_bytes = VOLREC_SLOT_ALIGN / 2 + 8; /* two do not fit the stride */
		b->ny = 1;
		b->nx = 1;
		b->nz = (uint32_t)b->volume_bytes;
		assert_int_equal(ipc_shm_validate(b, 3 * VOLREC_SLOT_ALIGN, msg, sizeof(msg)),
		                 -EPROTO);
		free(b);
	}
	/* more channels than a slot holds */
	ipc_writer_close(f->w, true);
	f->w = NULL;
	f->o.channels = 4;
	assert_int_equal(ipc_writer_open(&f->o, &f->w, f->err, sizeof(f->err)), -EINVAL);
	assert_non_null(strstr(f->err, "output.channels"));
}

static void test_views_area_holds_its_descriptors(void **state)
{
	const size_t size = 3 * VOLREC_SLOT_ALIGN;
	struct volrec_shm_header *h = calloc(1, 4096);
	char msg[512];

	(void)state;
	assert_non_null(h);
	valid_segment_header(h);
	h->views_bytes = VOLREC_VIEWS_DATA_OFFSET;
	h->views_offset = h->slot_stride - h->views_bytes;
	assert_int_equal(ipc_shm_validate(h, size, msg, sizeof(msg)), 0);
	h->views_bytes = 128;
	h->views_offset = h->slot_stride - h->views_bytes;
	assert_int_equal(ipc_shm_validate(h, size, msg, sizeof(msg)), -EPROTO);
	assert_non_null(strstr(msg, "views area is inconsistent"));
	h->views_bytes = VOLREC_VIEWS_DATA_OFFSET - 64;
	h->views_offset = h->slot_stride - h->views_bytes;
	assert_int_equal(ipc_shm_validate(h, size, msg, sizeof(msg)), -EPROTO);
	free(h);
}

/* The views of an 8 x 16 x 32 volume as a daemon writes them (protocol.md §2.5), a render of
 * 4 x 6, a volume reduced by blocks of 3 x 5 x 7 (the far blocks partial), every picture
 * present. */
static void views_write(void *area)
{
	static const uint32_t dims[VOLREC_IMAGE_COUNT][3] = {
	        {8, 16, 1}, {8, 16, 1}, {16, 32, 1}, {8, 32, 1}, {8, 16, 1}, {4, 6, 1}, {3, 4, 5}};
	struct volrec_views_header *vh = area;
	struct volrec_image_desc *d = (struct volrec_image_desc *)(vh + 1);
	uint64_t off = VOLREC_VIEWS_DATA_OFFSET;

	memset(area, 0, VOLREC_VIEWS_DATA_OFFSET);
	vh->magic = VOLREC_VIEWS_MAGIC;
	vh->count = VOLREC_IMAGE_COUNT;
	vh->desc_size = sizeof(*d);
	for (uint32_t k = 0; k < VOLREC_IMAGE_COUNT; k++) {
		d[k].kind = k;
		d[k].present = 1;
		d[k].rows = dims[k][0];
		d[k].cols = dims[k][1];
		d[k].offset = off;
		d[k].slab_zb = 32;
		d[k].position_y = 7;
		d[k].position_x = 15;
		d[k].position_z = 31;
		d[k].planes = dims[k][2];
		d[k].block_y = k == VOLREC_IMAGE_VOLUME ? 3 : 1;
		d[k].block_x = k == VOLREC_IMAGE_VOLUME ? 5 : 1;
		d[k].block_z = k == VOLREC_IMAGE_VOLUME ? 7 : 1;
		d[k].reduce = k == VOLREC_IMAGE_VOLUME ? VOLREC_REDUCE_MEAN : 0;
		off += ((uint64_t)dims[k][0] * dims[k][1] * dims[k][2] + 63) / 64 * 64;
	}
}

/* Publish a volume with views, broken by breaking(descriptors) (NULL: none); c's next volume
 * is it, held. */
static void publish_views(struct fx *f, struct volrec_client *c, struct volrec_view *v,
                          void (*breaking)(struct volrec_image_desc *d))
{
	struct ipc_slot_ref s;
	struct ipc_volume_meta m = {.flags = VOLREC_FLAG_VIEWS};

	assert_int_equal(ipc_writer_begin(f->w, &s), 0);
	assert_non_null(s.views);
	views_write(s.views);
	if (breaking)
		breaking((struct volrec_image_desc *)((struct volrec_views_header *)s.views + 1));
	assert_int_equal(ipc_writer_publish(f->w, &s, &m), 0);
	assert_int_equal(volrec_client_next(c, 5000, v), 0);
}

static void bscan_no_rows(struct volrec_image_desc *d)
{
	d[VOLREC_IMAGE_BSCAN].rows = 0;
}
static void slice_transposed(struct volrec_image_desc *d)
{
	d[VOLREC_IMAGE_SLICE].rows = 32;
	d[VOLREC_IMAGE_SLICE].cols = 8;
}
static void render_no_cols(struct volrec_image_desc *d)
{
	d[VOLREC_IMAGE_RENDER].cols = 0;
}
static void plane_outside(struct volrec_image_desc *d)
{
	d[VOLREC_IMAGE_PLANE].position_z = 32;
}
static void slab_outside(struct volrec_image_desc *d)
{
	d[VOLREC_IMAGE_ENFACE_MAX].slab_zb = 33;
}
static void volume_blocks_wrong(struct volrec_image_desc *d)
{
	d[VOLREC_IMAGE_VOLUME].block_z = 8; /* 32 / 8 = 4 planes, not 5 */
}
static void volume_reduce_unknown(struct volrec_image_desc *d)
{
	d[VOLREC_IMAGE_VOLUME].reduce = 2;
}
static void bscan_with_planes(struct volrec_image_desc *d)
{
	d[VOLREC_IMAGE_BSCAN].planes = 2;
}

/* A picture whose size is not its kind's for the volume (a 0-row B-scan, a slice [Z][Y]), a
 * render of no pixels, a plane or slab outside the volume is -EPROTO naming it, not a picture:
 * `volrec snapshot` divided by a zero size (SIGFPE) and named files after planes that do not
 * exist. The other pictures of the same volume stay readable. */
static void test_view_image_refuses_pictures_that_do_not_fit_the_volume(void **state)
{
	static const struct {
		void (*breaking)(struct volrec_image_desc *d);
		unsigned kind;
		const char *what;
	} cases[] = {
	        {bscan_no_rows, VOLREC_IMAGE_BSCAN, "bscan of 0 x 32 pixels"},
	        {slice_transposed, VOLREC_IMAGE_SLICE, "slice of 32 x 8 pixels"},
	        {render_no_cols, VOLREC_IMAGE_RENDER, "render of 4 x 0 pixels"},
	        {plane_outside, VOLREC_IMAGE_PLANE, "plane at [y 7, x 15, z 32]"},
	        {slab_outside, VOLREC_IMAGE_ENFACE_MAX, "depths [0, 33)"},
	        {volume_blocks_wrong, VOLREC_IMAGE_VOLUME,
	         "volume of 3 x 4 x 5 in blocks of 3 x 5 x 8 (reduce 1) for a 8 x 16 x 32 volume"},
	        {volume_reduce_unknown, VOLREC_IMAGE_VOLUME, "(reduce 2)"},
	        {bscan_with_planes, VOLREC_IMAGE_BSCAN, "bscan with 2 planes"},
	};
	struct fx *f = *state;
	struct volrec_client *c;
	struct volrec_view v;
	struct volrec_image img;

	f->o.views = true;
	open_writer(f);
	c = open_client(f);
	publish_views(f, c, &v, NULL);
	for (unsigned k = 0; k < VOLREC_IMAGE_COUNT; k++)
		assert_int_equal(volrec_view_image(c, &v, k, &img), 0);
	assert_int_equal(volrec_view_image(c, &v, VOLREC_IMAGE_VOLUME, &img), 0);
	assert_int_equal(img.rows * 100 + img.cols * 10 + img.planes, 345);
	assert_int_equal(img.block[0] * 100 + img.block[1] * 10 + img.block[2], 357);
	assert_int_equal(img.reduce, VOLREC_REDUCE_MEAN);
	assert_int_equal(volrec_view_image(c, &v, VOLREC_IMAGE_SLICE, &img), 0);
	assert_int_equal(img.planes * 100 + img.block[0] * 10 + img.block[2], 111);
	assert_int_equal(volrec_view_release(c, &v), 0);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		publish_views(f, c, &v, cases[i].breaking);
		for (unsigned k = 0; k < VOLREC_IMAGE_COUNT; k++) {
			int rc = volrec_view_image(c, &v, k, &img);

			if (k != cases[i].kind) {
				assert_int_equal(rc, 0);
				continue;
			}
			assert_int_equal(rc, -EPROTO);
			if (!strstr(volrec_client_error(c), cases[i].what))
				fail_msg("case %zu: '%s' does not say '%s'", i,
				         volrec_client_error(c), cases[i].what);
		}
		assert_int_equal(volrec_view_release(c, &v), 0);
	}
	volrec_client_close(c);
}

static void test_malformed_messages_rejected_then_good_one_read(void **state)
{
	struct fx *f = *state;
	struct volrec_client *c;
	struct volrec_vol_msg m = {0};
	struct volrec_client_stats st;

	open_writer(f);
	c = open_client(f);
	send_refused(f, c, "garbage", 7, "too short");
	m.magic = VOLREC_VOL_MAGIC;
	m.major = 9;
	m.size = sizeof(m);
	send_refused(f, c, &m, sizeof(m), "major version 9");
	publish_and_read(f, c, 1);
	volrec_client_stats(c, &st);
	assert_int_equal(st.rejected, 2);
	volrec_client_close(c);
}

/*
 * A vol message announcing a volume the segment has not published (sequence above the
 * header's latest_sequence, e.g. 2^63 + 1 whose 2n wraps to a published slot's 2) is
 * malformed: it must neither return a view nor make later volumes look like old news.
 */
static void test_vol_message_beyond_latest_rejected(void **state)
{
	struct fx *f = *state;
	struct volrec_client *c;
	struct ipc_vol m = {0};
	struct volrec_client_stats st;
	unsigned char buf[sizeof(struct volrec_vol_msg)];

	open_writer(f);
	c = open_client(f);
	m.session_id = ipc_writer_session(f->w);
	m.shape = f->o.shape;
	m.slot = publish_and_read(f, c, 1);        /* volume 1: the slot reads 2 */
	m.meta.sequence = (UINT64_C(1) << 63) + 1; /* 2n wraps to 2 */
	ipc_vol_encode(&m, buf);
	send_refused(f, c, buf, sizeof(buf), "not published");
	m.meta.sequence = 5; /* not published yet */
	ipc_vol_encode(&m, buf);
	send_refused(f, c, buf, sizeof(buf), "not published");
	publish_and_read(f, c, 2); /* not old news, none missed */
	volrec_client_stats(c, &st);
	assert_int_equal(st.rejected, 2);
	assert_int_equal(st.missed, 0);
	volrec_client_close(c);
}

static void test_client_follows_new_session(void **state)
{
	struct fx *f = *state;
	struct volrec_client *c;
	struct volrec_view v;
	struct volrec_client_stats st;
	uint64_t s1;
	int rc = -ETIMEDOUT;

	open_writer(f);
	c = open_client(f);
	s1 = volrec_client_session(c);
	ipc_writer_close(f->w, true);
	f->w = NULL;
	f->o.shape.nz = 64; /* structural change: new geometry */
	open_writer(f);
	assert_int_not_equal(ipc_writer_session(f->w), s1);
	/* the SUB socket reconnects by itself; publish until one arrives */
	for (int i = 0; i < 200 && rc == -ETIMEDOUT; i++) {
		publish(f);
		rc = volrec_client_next(c, 25, &v);
	}
	assert_int_equal(rc, 0);
	assert_int_equal(v.nz, 64);
	assert_int_equal(volrec_client_session(c), ipc_writer_session(f->w));
	assert_true(ipc_test_verify(v.data, v.bytes, v.sequence));
	assert_int_equal(volrec_view_release(c, &v), 0);
	volrec_client_stats(c, &st);
	assert_int_equal(st.remaps, 1);
	volrec_client_close(c);
}

static void test_status_and_event_text_delivered(void **state)
{
	struct fx *f = *state;
	struct volrec_client_options o = {.topics = VOLREC_SUB_STATUS | VOLREC_SUB_EVENT};
	struct volrec_client *c;
	struct volrec_message msg;
	int rc = -ETIMEDOUT;

	open_writer(f);
	o.run_dir = f->run_dir;
	assert_int_equal(volrec_client_open_opts(f->instance, &o, &c), 0);
	for (int i = 0; i < 200 && rc == -ETIMEDOUT; i++) {
		assert_int_equal(ipc_writer_send_status(f->w, "{\"uptime_s\":1}"), 0);
		rc = volrec_client_next_message(c, 25, &msg);
	}
	assert_int_equal(rc, 0);
	assert_int_equal(msg.type, VOLREC_MSG_STATUS);
	assert_string_equal(msg.text, "{\"uptime_s\":1}");
	assert_int_equal(ipc_writer_send_status(f->w, ""), -EINVAL);
	volrec_client_close(c);
}

static void test_bad_arguments_rejected(void **state)
{
	struct fx *f = *state;
	struct volrec_client *c = NULL;

	assert_int_equal(volrec_client_open("bad/name", f->run_dir, &c), -EINVAL);
	assert_int_equal(volrec_client_open(f->instance, f->run_dir, &c), -ENOENT);
	f->o.slots = 1;
	assert_int_equal(ipc_writer_open(&f->o, &f->w, f->err, sizeof(f->err)), -EINVAL);
	assert_non_null(strstr(f->err, "output.slots"));
	f->o.slots = 3;
	f->o.hwm = 0;
	assert_int_equal(ipc_writer_open(&f->o, &f->w, f->err, sizeof(f->err)), -EINVAL);
	assert_non_null(strstr(f->err, "ipc.hwm"));
	f->o.hwm = 100;
	snprintf(f->pub0, sizeof(f->pub0), "tcp://0.0.0.0:0");
	f->o.pub = f->pub;
	f->o.npub = 1;
	assert_int_equal(ipc_writer_open(&f->o, &f->w, f->err, sizeof(f->err)), -EINVAL);
	assert_non_null(strstr(f->err, "curve_secret_key"));
	snprintf(f->pub0, sizeof(f->pub0), "tcp://127.0.0.1:0");
	open_writer(f);
	assert_non_null(strstr(ipc_writer_endpoint(f->w, 0), "tcp://127.0.0.1:"));
}

static void write_file(const char *path, const char *text)
{
	FILE *fp = fopen(path, "w");

	assert_non_null(fp);
	fputs(text, fp);
	fclose(fp);
}

static void test_tcp_beyond_loopback_needs_matching_curve_keys(void **state)
{
	struct fx *f = *state;
	char pub[41], sec[41], pub2[41], sec2[41];

	assert_int_equal(zmq_curve_keypair(pub, sec), 0);
	assert_int_equal(zmq_curve_keypair(pub2, sec2), 0);
	snprintf(f->curve_sec, sizeof(f->curve_sec), "%s/server.key", f->run_dir);
	snprintf(f->curve_pub, sizeof(f->curve_pub), "%s/server.pub", f->run_dir);
	f->o.curve_secret_key = f->curve_sec;
	f->o.curve_public_key = f->curve_pub;
	write_file(f->curve_sec, sec);
	write_file(f->curve_pub, pub2); /* not the secret key's */
	snprintf(f->pub0, sizeof(f->pub0), "tcp://*:0");
	f->o.pub = f->pub;
	f->o.npub = 1;
	assert_int_equal(ipc_writer_open(&f->o, &f->w, f->err, sizeof(f->err)), -EINVAL);
	assert_non_null(strstr(f->err, "does not belong"));
	write_file(f->curve_pub, "short\n");
	assert_int_equal(ipc_writer_open(&f->o, &f->w, f->err, sizeof(f->err)), -EINVAL);
	assert_non_null(strstr(f->err, "40"));
	write_file(f->curve_pub, pub);
	open_writer(f);
	assert_non_null(strstr(ipc_writer_endpoint(f->w, 0), "tcp://"));
}

/* Create the instance's data segment as a writer does before filling its header: sized, all
 * zero. Returns the fd (the caller closes it). */
static int unwritten_segment(const struct fx *f, off_t size)
{
	char name[128];
	int fd;

	ipc_shm_names(f->instance, name, sizeof(name), NULL, 0);
	fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
	assert_true(fd >= 0);
	assert_int_equal(ftruncate(fd, size), 0);
	return fd;
}

/*
 * A client opening while the writer creates its segment must hear "not ready" (-EAGAIN, retry),
 * not a protocol error: the segment is sized before its header is written (this was -EPROTO,
 * "bad magic 0x0000000000000000").
 */
static void test_segment_being_created_is_not_ready_not_a_protocol_error(void **state)
{
	struct fx *f = *state;
	struct volrec_client *c = NULL;
	void *zero = calloc(1, 4096);
	char msg[512], name[128];
	int fd;

	assert_non_null(zero);
	assert_int_equal(ipc_shm_validate(zero, 4096, msg, sizeof(msg)), -EAGAIN);
	assert_non_null(strstr(msg, "not initialized yet"));
	assert_int_equal(ipc_shm_validate(zero, 100, msg, sizeof(msg)), -EAGAIN);
	assert_non_null(strstr(msg, "smaller than its header"));
	free(zero);

	fd = unwritten_segment(f, 2 * VOLREC_SLOT_ALIGN);
	assert_int_equal(volrec_client_open(f->instance, f->run_dir, &c), -EAGAIN);
	assert_null(c);
	assert_non_null(strstr(volrec_strerror(-EAGAIN), "not ready"));
	close(fd);
	ipc_shm_names(f->instance, name, sizeof(name), NULL, 0);
	shm_unlink(name);
	fd = unwritten_segment(f, 100); /* shorter than a header: still being sized */
	assert_int_equal(volrec_client_open(f->instance, f->run_dir, &c), -EAGAIN);
	close(fd);
	/* a writer takes the unfinished segment over; the client then opens */
	open_writer(f);
	c = open_client(f);
	volrec_client_close(c);
}

static void *open_writer_later(void *arg)
{
	struct fx *f = arg;
	struct timespec ts = {0, 300 * 1000000L};

	nanosleep(&ts, NULL);
	open_writer(f);
	return NULL;
}

/* volrec_client_open waits for a segment being created and then opens it. */
static void test_open_waits_for_a_segment_being_created(void **state)
{
	struct fx *f = *state;
	struct volrec_client *c = NULL;
	pthread_t thr;
	int fd = unwritten_segment(f, 2 * VOLREC_SLOT_ALIGN);

	assert_int_equal(pthread_create(&thr, NULL, open_writer_later, f), 0);
	assert_int_equal(volrec_client_open(f->instance, f->run_dir, &c), 0);
	assert_int_equal(pthread_join(thr, NULL), 0);
	assert_int_equal(volrec_client_session(c), ipc_writer_session(f->w));
	volrec_client_close(c);
	close(fd);
}

/* What volrec_client_open does first: open the data segment, map what is there, validate. */
static int probe_segment(const char *instance)
{
	char name[128], msg[512];
	struct stat st;
	void *map;
	int fd, rc;

	ipc_shm_names(instance, name, sizeof(name), NULL, 0);
	fd = shm_open(name, O_RDONLY, 0);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st)) {
		rc = -errno;
		close(fd);
		return rc;
	}
	if ((size_t)st.st_size < sizeof(struct volrec_shm_header)) {
		close(fd);
		return -EAGAIN; /* as session_map: mmap needs a size */
	}
	map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
	close(fd);
	if (map == MAP_FAILED)
		return -errno;
	rc = ipc_shm_validate(map, (size_t)st.st_size, msg, sizeof(msg));
	munmap(map, (size_t)st.st_size);
	return rc;
}

/* Readers opening again and again while a writer creates and removes its segments again and
 * again: an open succeeds, finds no daemon or finds it not ready, never a protocol error. The
 * writer makes at least MIN_CYCLES segments and goes on for at least 1.5 s, however slow a
 * loaded machine is (with an upper bound); the readers open until it closes their stop pipe. */
static void test_opens_racing_a_writer_never_see_a_protocol_error(void **state)
{
	struct fx *f = *state;
	enum { READERS = 3, MIN_CYCLES = 50 };
	pid_t pids[READERS];
	int counts[2], stop[2], status;
	uint64_t cycles = 0;
	double t0, now;

	assert_int_equal(pipe(counts), 0);
	assert_int_equal(pipe(stop), 0);
	for (int i = 0; i < READERS; i++) {
		pids[i] = fork();
		assert_true(pids[i] >= 0);
		if (pids[i] == 0) {
			unsigned ok = 0, proto = 0;
			struct pollfd pfd = {.fd = stop[0], .events = POLLIN};

			close(stop[1]);
			for (unsigned n = 0;; n++) {
				struct volrec_client *c = NULL;
				int rc;

				/* the writer is done when the pipe reads end of file */
				if (n % 64 == 0 && poll(&pfd, 1, 0) > 0)
					break;
				/* mostly the library's own first steps (cheap, so the window is
				 * probed often), every 64th time a whole open */
				if (n % 64) {
					rc = probe_segment(f->instance);
				} else {
					rc = volrec_client_open(f->instance, f->run_dir, &c);
					volrec_client_close(c);
				}
				if (rc == 0)
					ok++;
				else if (rc == -EPROTO)
					proto++;
				else if (rc != -ENOENT && rc != -EAGAIN)
					_exit(3);
			}
			if (write(counts[1], &ok, sizeof(ok)) != sizeof(ok))
				_exit(4);
			_exit(proto ? 2 : 0);
		}
	}
	close(stop[0]);
	t0 = (double)vr_now_ns(CLOCK_MONOTONIC) / 1e9;
	do {
		open_writer(f);
		ipc_writer_close(f->w, true);
		f->w = NULL;
		cycles++;
		now = (double)vr_now_ns(CLOCK_MONOTONIC) / 1e9;
		if (now > t0 + 300)
			fail_msg("%llu writer cycles in 300 s", (unsigned long long)cycles);
	} while (cycles < MIN_CYCLES || now < t0 + 1.5);
	close(stop[1]);
	for (int i = 0; i < READERS; i++) {
		unsigned ok = 0;

		assert_int_equal(waitpid(pids[i], &status, 0), pids[i]);
		assert_true(WIFEXITED(status));
		if (WEXITSTATUS(status) == 2)
			fail_msg("reader %d saw -EPROTO from a segment being created (%llu writer "
			         "cycles)",
			         i, (unsigned long long)cycles);
		assert_int_equal(WEXITSTATUS(status), 0);
		assert_int_equal(read(counts[0], &ok, sizeof(ok)), sizeof(ok));
	}
	close(counts[0]);
	close(counts[1]);
}

/*
 * With every reader entry taken (ipc.max_readers), a client opened with VOLREC_OPEN_NO_LEASE
 * still gets the status messages, the header and the volumes' descriptions, and takes nothing.
 */
static void test_no_lease_client_works_with_a_full_reader_table(void **state)
{
	struct fx *f = *state;
	struct volrec_client_options o = {.topics = VOLREC_SUB_VOL | VOLREC_SUB_STATUS |
	                                            VOLREC_OPEN_NO_LEASE};
	struct volrec_client *holder, *c = NULL, *c2 = NULL;
	struct volrec_segment_info info;
	struct volrec_message msg;
	struct volrec_view v;
	int rc = -ETIMEDOUT;

	f->o.max_readers = 1;
	open_writer(f);
	holder = open_client(f);
	assert_int_equal(volrec_client_open(f->instance, f->run_dir, &c), -EUSERS);
	assert_null(c);
	o.run_dir = f->run_dir;
	assert_int_equal(volrec_client_open_opts(f->instance, &o, &c), 0);
	assert_int_equal(volrec_client_open_opts(f->instance, &o, &c2), 0);
	assert_int_equal(ipc_writer_readers(f->w), 1);
	for (int i = 0; i < 200 && rc == -ETIMEDOUT; i++) {
		assert_int_equal(ipc_writer_send_status(f->w, "{\"uptime_s\":2}"), 0);
		rc = volrec_client_next_message(c, 25, &msg);
	}
	assert_int_equal(rc, 0);
	assert_int_equal(msg.type, VOLREC_MSG_STATUS);
	volrec_client_info(c, &info);
	assert_int_equal(info.writer_alive, 1);
	assert_int_equal(info.max_readers, 1);

	/* a volume: its description, no data, nothing held */
	while (volrec_client_next_message(c, 20, &msg) == 0)
		;
	publish(f);
	do
		rc = volrec_client_next_message(c, 5000, &msg);
	while (rc == 0 && msg.type != VOLREC_MSG_VOL);
	assert_int_equal(rc, 0);
	assert_int_equal(msg.view.sequence, 1);
	assert_int_equal(msg.view.volume_id, 101);
	assert_int_equal(msg.view.epoch, 7);
	assert_null(msg.view.data);
	assert_int_equal(msg.view.bytes, 0);
	assert_int_equal(volrec_view_release(c, &msg.view), 0);
	assert_int_equal(volrec_client_latest(c2, &v), 0);
	assert_int_equal(v.sequence, 1);
	assert_int_equal(v.offset_y, 2);
	assert_null(v.data);
	assert_int_equal(volrec_client_latest(c2, &v), 0); /* nothing held: no -EBUSY */
	assert_int_equal(volrec_view_release(c2, &v), 0);
	assert_int_equal(ipc_writer_readers(f->w), 1);
	volrec_client_close(c);
	volrec_client_close(c2);
	volrec_client_close(holder);
}

/* The flags the writer publishes, in the slot header (a leased view) and the `vol` message (a
 * view without lease): DROPPED_BEFORE exactly when the publisher says epochs were dropped before
 * the volume, whatever flags it passed; RESET as passed; reserved bits untouched. */
static void test_dropped_before_flag_follows_the_publishers_drop_count(void **state)
{
	struct fx *f = *state;
	struct volrec_client_options o = {.topics = VOLREC_SUB_VOL | VOLREC_OPEN_NO_LEASE};
	struct volrec_client *c, *msgonly = NULL;
	struct volrec_message msg;
	struct volrec_view v;
	const struct {
		uint32_t flags, drops_before, want;
	} cases[] = {
	        {VOLREC_FLAG_RESET, 0, VOLREC_FLAG_RESET},
	        {0, 2, VOLREC_FLAG_DROPPED_BEFORE},
	        {VOLREC_FLAG_RESET, 1, VOLREC_FLAG_RESET | VOLREC_FLAG_DROPPED_BEFORE},
	        {VOLREC_FLAG_DROPPED_BEFORE | 0x1, 0, 0x1},
	};

	open_writer(f);
	c = open_client(f);
	o.run_dir = f->run_dir;
	assert_int_equal(volrec_client_open_opts(f->instance, &o, &msgonly), 0);
	/* the message-only client subscribed too: wait until a volume reaches it */
	for (int i = 0; i < 400; i++) {
		publish(f);
		assert_int_equal(volrec_client_next(c, 5000, &v), 0);
		assert_int_equal(volrec_view_release(c, &v), 0);
		if (volrec_client_next_message(msgonly, 25, &msg) == 0)
			break;
	}
	while (volrec_client_next_message(msgonly, 50, &msg) == 0)
		;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct ipc_slot_ref s;
		struct ipc_volume_meta m = {.epoch = 40 + i,
		                            .flags = cases[i].flags,
		                            .drops_before = cases[i].drops_before};

		assert_int_equal(ipc_writer_begin(f->w, &s), 0);
		assert_int_equal(ipc_writer_publish(f->w, &s, &m), 0);
		assert_int_equal(volrec_client_next(c, 5000, &v), 0);
		assert_int_equal(v.epoch, 40 + i);
		assert_int_equal(v.flags, cases[i].want);
		assert_int_equal(volrec_view_release(c, &v), 0);
		assert_int_equal(volrec_client_next_message(msgonly, 5000, &msg), 0);
		assert_int_equal(msg.view.epoch, 40 + i);
		assert_int_equal(msg.view.flags, cases[i].want);
	}
	volrec_client_close(msgonly);
	volrec_client_close(c);
}

/*
 * libzmq's PUB socket drops a notification for a subscriber whose queue is full without telling
 * the publisher (the writer counts no loss: it cannot know one). The loss shows where it can be
 * known: in the reader, as missed volumes, every one accounted for.
 */
static void test_notifications_lost_at_hwm_are_counted_by_the_reader(void **state)
{
	struct fx *f = *state;
	struct volrec_client_options o = {.topics = VOLREC_SUB_VOL | VOLREC_SUB_EVENT, .rcvhwm = 2};
	struct volrec_client *c;
	struct volrec_client_stats st;
	struct ipc_writer_stats ws;
	struct volrec_message msg;
	const int n = 20000;
	int rc;

	f->o.hwm = 2;
	open_writer(f);
	c = open_client_with(f, &o);
	for (int i = 0; i < n; i++)
		publish(f); /* the reader does not read meanwhile */
	ipc_writer_stats(f->w, &ws);
	assert_int_equal(ws.published, n);
	assert_int_equal(ws.send_errors, 0);
	for (;;) {
		rc = volrec_client_next_message(c, 500, &msg);
		if (rc)
			break;
		assert_int_equal(msg.type, VOLREC_MSG_VOL);
		rc = volrec_view_release(c, &msg.view);
		assert_true(rc == 0 || rc == -ESTALE);
	}
	assert_int_equal(rc, -ETIMEDOUT);
	publish(f); /* the next one that gets through closes the gap */
	assert_int_equal(volrec_client_next(c, 5000, &msg.view), 0);
	assert_int_equal(msg.view.sequence, n + 1);
	assert_int_equal(volrec_view_release(c, &msg.view), 0);
	volrec_client_stats(c, &st);
	assert_true(st.missed > 0);
	assert_int_equal(st.received + st.missed, n + 1);
	volrec_client_close(c);
}

#define T(fn) cmocka_unit_test_setup_teardown(fn, fx_setup, fx_teardown)

VR_TEST_GROUP(ipc)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_vol_message_roundtrip_and_rejects),
	        T(test_writer_creates_aligned_segments_and_unlinks),
	        T(test_second_writer_refused),
	        T(test_client_reads_volume_and_metadata),
	        T(test_latest_counts_missed_volumes),
	        T(test_writer_avoids_leased_slot),
	        T(test_all_leased_writer_overwrites_and_readers_see_torn),
	        T(test_dead_reader_lease_reclaimed),
	        T(test_lease_liveness_follows_the_lock_not_the_pid),
	        T(test_client_mapping_is_read_only),
	        T(test_wrong_version_segment_rejected),
	        cmocka_unit_test(test_segment_layout_sums_do_not_wrap),
	        cmocka_unit_test(test_views_area_holds_its_descriptors),
	        T(test_channels_of_a_slot_and_of_an_older_writer),
	        T(test_view_image_refuses_pictures_that_do_not_fit_the_volume),
	        T(test_malformed_messages_rejected_then_good_one_read),
	        T(test_vol_message_beyond_latest_rejected),
	        T(test_client_follows_new_session),
	        T(test_status_and_event_text_delivered),
	        T(test_bad_arguments_rejected),
	        T(test_tcp_beyond_loopback_needs_matching_curve_keys),
	        T(test_segment_being_created_is_not_ready_not_a_protocol_error),
	        T(test_open_waits_for_a_segment_being_created),
	        T(test_opens_racing_a_writer_never_see_a_protocol_error),
	        T(test_no_lease_client_works_with_a_full_reader_table),
	        T(test_dropped_before_flag_follows_the_publishers_drop_count),
	        T(test_notifications_lost_at_hwm_are_counted_by_the_reader),
	};
	return cmocka_run_group_tests_name("ipc", tests, NULL, NULL);
}
