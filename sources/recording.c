/* SPDX-License-Identifier: MIT */
/*
 * Raw recordings: CRC-32C, the framed epochs of replay format version 2 with their index
 * entries, the header's sections (configuration and tables) and the writer volrecd records
 * with (docs/replay-format.md). Large aligned writes: O_DIRECT where the file system allows
 * it, else buffered writes pushed out as they go so that the page cache does not fill up.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sources/internal.h"
#include "sources/recording.h"

/* ---- CRC-32C ------------------------------------------------------------------------------- */

#define CRC32C_POLY 0x82f63b78u /* Castagnoli, reflected */

static uint32_t crc_table[8][256];

static void crc_table_init(void)
{
	for (uint32_t i = 0; i < 256; i++) {
		uint32_t c = i;
		for (int k = 0; k < 8; k++)
			c = c & 1 ? (c >> 1) ^ CRC32C_POLY : c >> 1;
		crc_table[0][i] = c;
	}
	for (uint32_t i = 0; i < 256; i++)
		for (int t = 1; t < 8; t++)
			crc_table[t][i] = (crc_table[t - 1][i] >> 8) ^
			                  crc_table[0][crc_table[t - 1][i] & 0xff];
}

/* Slicing by 8 over the tables (any machine). */
static uint32_t crc_sw(uint32_t c, const uint8_t *p, size_t n)
{
	while (n >= 8) {
		uint32_t lo = c ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
		                   (uint32_t)p[3] << 24);
		c = crc_table[7][lo & 0xff] ^ crc_table[6][(lo >> 8) & 0xff] ^
		    crc_table[5][(lo >> 16) & 0xff] ^ crc_table[4][lo >> 24] ^ crc_table[3][p[4]] ^
		    crc_table[2][p[5]] ^ crc_table[1][p[6]] ^ crc_table[0][p[7]];
		p += 8;
		n -= 8;
	}
	while (n--)
		c = (c >> 8) ^ crc_table[0][(c ^ *p++) & 0xff];
	return c;
}

/* a * b modulo the polynomial, both reflected (bit 31 is x^0), as zlib's multmodp. */
static uint32_t crc_multmodp(uint32_t a, uint32_t b)
{
	uint32_t m = 1u << 31, p = 0;

	for (;;) {
		if (a & m) {
			p ^= b;
			if ((a & (m - 1)) == 0)
				break;
		}
		m >>= 1;
		b = b & 1 ? (b >> 1) ^ CRC32C_POLY : b >> 1;
	}
	return p;
}

/* x^(8n) modulo the polynomial: what a register is multiplied by when n zero bytes follow. */
static uint32_t crc_x8n(uint64_t n)
{
	uint32_t r = 1u << 31, sq = 1u << 23; /* x^0, x^8 */

	for (; n; n >>= 1) {
		if (n & 1)
			r = crc_multmodp(r, sq);
		sq = crc_multmodp(sq, sq);
	}
	return r;
}

#if defined(__x86_64__)
/* The SSE 4.2 crc32 instruction computes the same polynomial. One instruction waits for the
 * one before (3 cycles for 8 bytes): a long buffer is cut in three streams computed
 * side by side, their registers joined by crc_x8n (the register of A then B is A's shifted by
 * B's length, xor B's from 0), three times as fast. */
__attribute__((target("sse4.2"))) static uint32_t crc_hw(uint32_t c, const uint8_t *p, size_t n)
{
	uint64_t c64 = c;

	if (n >= 3 * 4096) {
		size_t l = n / 24 * 8; /* each stream, a multiple of 8 */
		uint64_t c1 = 0, c2 = 0, v0, v1, v2;
		uint32_t shift = crc_x8n(l);

		for (size_t i = 0; i < l; i += 8) {
			memcpy(&v0, p + i, 8);
			memcpy(&v1, p + l + i, 8);
			memcpy(&v2, p + 2 * l + i, 8);
			c64 = __builtin_ia32_crc32di(c64, v0);
			c1 = __builtin_ia32_crc32di(c1, v1);
			c2 = __builtin_ia32_crc32di(c2, v2);
		}
		c64 = crc_multmodp(shift, (uint32_t)c64) ^ (uint32_t)c1;
		c64 = crc_multmodp(shift, (uint32_t)c64) ^ (uint32_t)c2;
		p += 3 * l;
		n -= 3 * l;
	}
	while (n >= 8) {
		uint64_t v;
		memcpy(&v, p, 8);
		c64 = __builtin_ia32_crc32di(c64, v);
		p += 8;
		n -= 8;
	}
	c = (uint32_t)c64;
	while (n--)
		c = __builtin_ia32_crc32qi(c, *p++);
	return c;
}
#endif

static pthread_once_t crc_once = PTHREAD_ONCE_INIT;
static bool crc_have_hw;

static void crc_init(void)
{
	crc_table_init();
#if defined(__x86_64__)
	__builtin_cpu_init();
	crc_have_hw = __builtin_cpu_supports("sse4.2");
#endif
}

uint32_t src_crc32c(uint32_t crc, const void *data, size_t n)
{
	uint32_t c = ~crc;

	pthread_once(&crc_once, crc_init);
#if defined(__x86_64__)
	if (crc_have_hw)
		return ~crc_hw(c, data, n);
#endif
	return ~crc_sw(c, data, n);
}

uint32_t src_crc32c_tables(uint32_t crc, const void *data, size_t n)
{
	pthread_once(&crc_once, crc_init);
	return ~crc_sw(~crc, data, n);
}

/* ---- little-endian fields ------------------------------------------------------------------ */

static uint32_t rd32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t rd64(const uint8_t *p)
{
	return (uint64_t)rd32(p) | (uint64_t)rd32(p + 4) << 32;
}

static void wr32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static void wr64(uint8_t *p, uint64_t v)
{
	wr32(p, (uint32_t)v);
	wr32(p + 4, (uint32_t)(v >> 32));
}

/* ---- frames -------------------------------------------------------------------------------- */

uint64_t src_rec_frame_size(uint64_t epoch_bytes)
{
	return SRC_REC_FRAME_HDR +
	       (epoch_bytes + SRC_REPLAY_ALIGN - 1) / SRC_REPLAY_ALIGN * SRC_REPLAY_ALIGN;
}

void src_rec_frame_encode(uint8_t *p, const struct src_rec_frame *f)
{
	memset(p, 0, SRC_REC_ENTRY_SIZE);
	memcpy(p, SRC_REC_FRAME_MAGIC, 8);
	wr64(p + 8, f->epoch);
	wr32(p + 16, f->ox);
	wr32(p + 20, f->oy);
	wr64(p + 24, f->t_first_ns);
	wr64(p + 32, f->t_last_ns);
	wr32(p + 40, f->marks);
	wr32(p + 44, f->crc);
	wr64(p + 48, f->skipped_before);
	wr64(p + 56, f->index);
	wr32(p + 68, src_crc32c(0, p, 68));
}

int src_rec_frame_decode(const uint8_t *p, struct src_rec_frame *f)
{
	struct src_rec_frame g;

	if (memcmp(p, SRC_REC_FRAME_MAGIC, 8) || rd32(p + 68) != src_crc32c(0, p, 68))
		return -EBADMSG;
	g.epoch = rd64(p + 8);
	g.ox = rd32(p + 16);
	g.oy = rd32(p + 20);
	g.t_first_ns = rd64(p + 24);
	g.t_last_ns = rd64(p + 32);
	g.marks = rd32(p + 40);
	g.crc = rd32(p + 44);
	g.skipped_before = rd64(p + 48);
	g.index = rd64(p + 56);
	if (g.marks & ~SRC_REC_MARKS_KNOWN)
		return -EINVAL;
	*f = g;
	return 0;
}

/* ---- the version 2 header ------------------------------------------------------------------ */

int src_rec_parse_v2(const uint8_t *buf, size_t len, uint64_t file_size, struct src_replay_info *h,
                     char *err, size_t errlen)
{
	uint64_t need, epoch_bytes, frame, complete;

	h->repeats = rd32(buf + 56);
	h->sections_len = rd32(buf + 60);
	if (h->flags & SRC_REPLAY_FLAG_OFFSETS)
		return vr_err(err, errlen, -EINVAL,
		              "flag 0x%x (offset table) is not used in version 2: each epoch's "
		              "frame carries its offset",
		              SRC_REPLAY_FLAG_OFFSETS);
	if (h->repeats < 1 || h->repeats > SRC_REPLAY_REPEATS_MAX)
		return vr_err(err, errlen, -EINVAL,
		              "repeats %u: each B-scan position is acquired 1..%u times",
		              h->repeats, SRC_REPLAY_REPEATS_MAX);
	if (h->sections_len > SRC_REC_SECTIONS_MAX)
		return vr_err(err, errlen, -EINVAL, "sections of %u bytes exceed the limit of %u",
		              h->sections_len, SRC_REC_SECTIONS_MAX);
	need = SRC_REPLAY_FIXED_SIZE + (uint64_t)h->metadata_len + h->sections_len;
	if (need > h->header_size)
		return vr_err(err, errlen, -EINVAL,
		              "metadata (%u bytes) and sections (%u bytes) need a header of %llu "
		              "bytes, header_size is %u",
		              h->metadata_len, h->sections_len, (unsigned long long)need,
		              h->header_size);
	if (len < need)
		return vr_err(err, errlen, -EINVAL,
		              "internal: header buffer of %zu bytes, need %llu", len,
		              (unsigned long long)need);
	epoch_bytes = src_replay_epoch_bytes(h);
	frame = src_rec_frame_size(epoch_bytes);
	complete = (file_size - h->header_size) / frame;
	if (h->epochs) {
		if (h->epochs > (UINT64_MAX - h->header_size) / frame)
			return vr_err(err, errlen, -EINVAL, "%llu epochs overflow a file size",
			              (unsigned long long)h->epochs);
		if (file_size > h->header_size + h->epochs * frame)
			return vr_err(
			        err, errlen, -EINVAL,
			        "%llu trailing bytes after the last of %llu epochs (file %llu "
			        "bytes, header %u + %llu frames of %llu)",
			        (unsigned long long)(file_size - h->header_size -
			                             h->epochs * frame),
			        (unsigned long long)h->epochs, (unsigned long long)file_size,
			        h->header_size, (unsigned long long)h->epochs,
			        (unsigned long long)frame);
		if (complete > h->epochs)
			complete = h->epochs;
	}
	if (complete == 0)
		return vr_err(err, errlen, -EINVAL,
		              "truncated data: the recording holds no complete epoch (file %llu "
		              "bytes, header %u, one epoch's frame %llu)",
		              (unsigned long long)file_size, h->header_size,
		              (unsigned long long)frame);
	h->complete = complete;
	return 0;
}

int src_rec_sections_parse(const uint8_t *buf, size_t len, const struct src_replay_info *info,
                           struct src_rec_section **out, size_t *n, char *err, size_t errlen)
{
	size_t off = SRC_REPLAY_FIXED_SIZE + info->metadata_len;
	size_t end = off + info->sections_len, cnt = 0;
	struct src_rec_section *s = NULL, *ns;

	if (info->version < SRC_REC_VERSION || end > len) {
		*out = NULL;
		*n = 0;
		return 0;
	}
	while (off < end) {
		uint32_t nl, tl;

		if (end - off < 8)
			goto bad;
		nl = rd32(buf + off);
		tl = rd32(buf + off + 4);
		off += 8;
		if (nl == 0 || nl >= SRC_REC_NAME_MAX || nl > end - off || tl > end - off - nl)
			goto bad;
		ns = realloc(s, (cnt + 1) * sizeof(*s));
		if (!ns) {
			src_rec_sections_free(s, cnt);
			return vr_err(err, errlen, -ENOMEM, "out of memory");
		}
		s = ns;
		memcpy(s[cnt].name, buf + off, nl);
		s[cnt].name[nl] = '\0';
		s[cnt].text = malloc((size_t)tl + 1);
		if (!s[cnt].text) {
			src_rec_sections_free(s, cnt);
			return vr_err(err, errlen, -ENOMEM, "out of memory");
		}
		memcpy(s[cnt].text, buf + off + nl, tl);
		s[cnt].text[tl] = '\0';
		s[cnt].len = tl;
		cnt++;
		if (memchr(s[cnt - 1].name, 0, nl) || memchr(s[cnt - 1].text, 0, tl) ||
		    !vr_utf8_valid(s[cnt - 1].text, tl)) {
			src_rec_sections_free(s, cnt);
			return vr_err(err, errlen, -EINVAL,
			              "section %zu holds a NUL byte or is not UTF-8 text", cnt - 1);
		}
		off += (size_t)nl + tl;
	}
	*out = s;
	*n = cnt;
	return 0;
bad:
	src_rec_sections_free(s, cnt);
	return vr_err(err, errlen, -EINVAL, "section %zu at header byte %zu is malformed", cnt,
	              off);
}

void src_rec_sections_free(struct src_rec_section *s, size_t n)
{
	for (size_t i = 0; s && i < n; i++)
		free(s[i].text);
	free(s);
}

/* Open path, read its header and parse it (src_replay_probe's rules): fd, buffer, info. */
static int open_header(const char *path, int *fd_out, uint8_t **buf_out,
                       struct src_replay_info *info, char *err, size_t errlen)
{
	char msg[CFG_ERR_MAX];
	struct stat st;
	uint8_t *buf;
	int fd, rc;

	rc = src_replay_probe(path, info, err, errlen);
	if (rc)
		return rc;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return vr_err(err, errlen, -errno, "replay %s: cannot open: %s", path,
		              strerror(errno));
	buf = malloc(info->header_size);
	if (!buf) {
		close(fd);
		return vr_err(err, errlen, -ENOMEM, "out of memory");
	}
	rc = vr_pread_full(fd, buf, info->header_size, 0);
	if (!rc && fstat(fd, &st) < 0)
		rc = -errno;
	if (rc) {
		snprintf(msg, sizeof(msg), "%s", strerror(rc == -ENODATA ? ESTALE : -rc));
		free(buf);
		close(fd);
		return vr_err(err, errlen, rc, "replay %s: reading the header: %s", path, msg);
	}
	*fd_out = fd;
	*buf_out = buf;
	return 0;
}

int src_rec_sections_read(const char *path, struct src_rec_section **out, size_t *n, char *err,
                          size_t errlen)
{
	struct src_replay_info info;
	char msg[CFG_ERR_MAX];
	uint8_t *buf;
	int fd, rc;

	rc = open_header(path, &fd, &buf, &info, err, errlen);
	if (rc)
		return rc;
	rc = src_rec_sections_parse(buf, info.header_size, &info, out, n, msg, sizeof(msg));
	if (rc)
		vr_err(err, errlen, rc, "replay %s: %s", path, msg);
	free(buf);
	close(fd);
	return rc;
}

int src_rec_index_load(int fd, const char *path, const struct src_replay_info *info,
                       struct src_rec_frame **frames, uint64_t *n, char *err, size_t errlen)
{
	uint64_t epoch_bytes = src_replay_epoch_bytes(info);
	uint64_t frame = src_rec_frame_size(epoch_bytes), i;
	struct src_rec_frame *f;
	uint8_t e[SRC_REC_ENTRY_SIZE];
	int rc = 0;

	f = calloc(info->complete, sizeof(*f));
	if (!f)
		return vr_err(err, errlen, -ENOMEM, "out of memory for an index of %llu epochs",
		              (unsigned long long)info->complete);
	for (i = 0; i < info->complete; i++) {
		uint64_t at = info->header_size + i * frame;
		uint32_t ex, ey;

		rc = vr_pread_full(fd, e, sizeof(e), at);
		if (rc) {
			rc = vr_err(err, errlen, rc == -ENODATA ? -ESTALE : rc,
			            "replay %s: reading the index entry of frame %llu: %s", path,
			            (unsigned long long)i,
			            rc == -ENODATA ? "the file shrank" : strerror(-rc));
			goto fail;
		}
		rc = src_rec_frame_decode(e, &f[i]);
		if (rc == -EBADMSG && i > 0 && !info->epochs)
			break; /* an unfinished recording: the frame was not written whole */
		if (rc) {
			rc = vr_err(err, errlen, -EINVAL,
			            "replay %s: the index entry of frame %llu at byte %llu is %s",
			            path, (unsigned long long)i, (unsigned long long)at,
			            rc == -EBADMSG ? "damaged (magic or CRC-32C wrong)"
			                           : "holds unknown drop marks");
			goto fail;
		}
		if (f[i].index != i || (i && f[i].epoch <= f[i - 1].epoch)) {
			rc = vr_err(
			        err, errlen, -EINVAL,
			        "replay %s: frame %llu says it is frame %llu of epoch %llu (epochs "
			        "must increase)",
			        path, (unsigned long long)i, (unsigned long long)f[i].index,
			        (unsigned long long)f[i].epoch);
			goto fail;
		}
		vr_scan_offset(f[i].epoch, info->stride_x, info->stride_y, &ex, &ey);
		if (f[i].ox != ex || f[i].oy != ey) {
			rc = vr_err(err, errlen, -EINVAL,
			            "replay %s: frame %llu: epoch %llu recorded at offset (%u, "
			            "%u), but "
			            "it is scanned at (%u, %u) (docs/algorithms.md §2.1)",
			            path, (unsigned long long)i, (unsigned long long)f[i].epoch,
			            f[i].ox, f[i].oy, ex, ey);
			goto fail;
		}
	}
	*frames = f;
	*n = i;
	return 0;
fail:
	free(f);
	return rc;
}

int src_rec_index_read(const char *path, struct src_replay_info *info,
                       struct src_rec_frame **frames, uint64_t *n, char *err, size_t errlen)
{
	uint8_t *buf;
	int fd, rc;

	rc = open_header(path, &fd, &buf, info, err, errlen);
	if (rc)
		return rc;
	free(buf);
	if (info->version < SRC_REC_VERSION)
		rc = vr_err(err, errlen, -EINVAL, "replay %s: version %u has no index", path,
		            info->version);
	else
		rc = src_rec_index_load(fd, path, info, frames, n, err, errlen);
	close(fd);
	return rc;
}

/* ---- the writer ---------------------------------------------------------------------------- */

struct src_rec_writer {
	int fd;
	char path[CFG_PATH_MAX];
	uint8_t *hdr; /* the header as written (aligned: rewritten at close) */
	uint32_t header_size;
	uint64_t epoch_bytes, frame_bytes;
	uint64_t frames, bytes;
	bool direct;
	uint64_t flushed; /* buffered: bytes handed to writeback and dropped from the cache */
};

static int write_all(int fd, const void *p, size_t n, uint64_t off)
{
	while (n) {
		ssize_t w = pwrite(fd, p, n, (off_t)off);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0)
			return -errno;
		if (w == 0)
			return -EIO;
		p = (const uint8_t *)p + w;
		n -= (size_t)w;
		off += (uint64_t)w;
	}
	return 0;
}

int src_rec_writer_open(const char *path, const struct src_replay_info *info, const char *metadata,
                        const struct src_rec_section *s, size_t ns, struct src_rec_writer **out,
                        char *err, size_t errlen)
{
	size_t meta_len = metadata ? strlen(metadata) : 0, sec_len = 0, off;
	struct src_rec_writer *w;
	uint64_t hsize;
	int rc;

	if (info->sample_type > VOLREC_SAMPLE_U12GV || !info->samples_per_ascan ||
	    (info->sample_type >= VOLREC_SAMPLE_U12P && info->samples_per_ascan % 2) ||
	    !info->ascans_per_bscan || !info->bscans_per_volume || !info->stride_x ||
	    !info->stride_y || info->repeats > SRC_REPLAY_REPEATS_MAX)
		return vr_err(err, errlen, -EINVAL, "recording %s: invalid header fields", path);
	if (meta_len > SRC_REPLAY_META_MAX)
		return vr_err(err, errlen, -EINVAL,
		              "recording %s: metadata of %zu bytes exceeds %u", path, meta_len,
		              SRC_REPLAY_META_MAX);
	for (size_t i = 0; i < ns; i++) {
		size_t nl = strlen(s[i].name);
		if (!nl || nl >= SRC_REC_NAME_MAX)
			return vr_err(err, errlen, -EINVAL, "recording %s: bad section name", path);
		sec_len += 8 + nl + s[i].len;
	}
	if (sec_len > SRC_REC_SECTIONS_MAX)
		return vr_err(err, errlen, -EFBIG, "recording %s: sections of %zu bytes exceed %u",
		              path, sec_len, SRC_REC_SECTIONS_MAX);
	hsize = SRC_REPLAY_FIXED_SIZE + meta_len + sec_len;
	hsize = (hsize + SRC_REPLAY_ALIGN - 1) / SRC_REPLAY_ALIGN * SRC_REPLAY_ALIGN;
	w = calloc(1, sizeof(*w));
	if (!w)
		return vr_err(err, errlen, -ENOMEM, "recording: out of memory");
	snprintf(w->path, sizeof(w->path), "%s", path);
	w->header_size = (uint32_t)hsize;
	w->epoch_bytes = src_replay_epoch_bytes(info);
	w->frame_bytes = src_rec_frame_size(w->epoch_bytes);
	if (posix_memalign((void **)&w->hdr, SRC_REPLAY_ALIGN, hsize)) {
		free(w);
		return vr_err(err, errlen, -ENOMEM, "recording: out of memory");
	}
	memset(w->hdr, 0, hsize);
	memcpy(w->hdr, SRC_REPLAY_MAGIC, 8);
	wr32(w->hdr + 8, SRC_REC_VERSION);
	wr32(w->hdr + 12, (uint32_t)hsize);
	wr32(w->hdr + 16, info->sample_type);
	wr32(w->hdr + 20, info->samples_per_ascan);
	wr32(w->hdr + 24, info->ascans_per_bscan);
	wr32(w->hdr + 28, info->bscans_per_volume);
	wr64(w->hdr + 32, 0); /* written at close: 0 says the recording was not finished */
	wr32(w->hdr + 40, info->stride_x);
	wr32(w->hdr + 44, info->stride_y);
	wr32(w->hdr + 48, info->flags & SRC_REPLAY_FLAG_BIDIR);
	wr32(w->hdr + 52, (uint32_t)meta_len);
	wr32(w->hdr + 56, info->repeats ? info->repeats : 1);
	wr32(w->hdr + 60, (uint32_t)sec_len);
	if (meta_len)
		memcpy(w->hdr + SRC_REPLAY_FIXED_SIZE, metadata, meta_len);
	off = SRC_REPLAY_FIXED_SIZE + meta_len;
	for (size_t i = 0; i < ns; i++) {
		size_t nl = strlen(s[i].name);
		wr32(w->hdr + off, (uint32_t)nl);
		wr32(w->hdr + off + 4, (uint32_t)s[i].len);
		memcpy(w->hdr + off + 8, s[i].name, nl);
		memcpy(w->hdr + off + 8 + nl, s[i].text, s[i].len);
		off += 8 + nl + s[i].len;
	}
	w->fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_DIRECT, 0644);
	w->direct = w->fd >= 0;
	if (w->fd < 0 && errno == EINVAL) /* no O_DIRECT here (tmpfs): buffered */
		w->fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	if (w->fd < 0) {
		rc = vr_err(err, errlen, -errno, "recording %s: cannot create: %s", path,
		            strerror(errno));
		goto out_free;
	}
	rc = write_all(w->fd, w->hdr, hsize, 0);
	if (rc == -EINVAL && w->direct) { /* O_DIRECT accepted at open, refused at write */
		int fl = fcntl(w->fd, F_GETFL);
		w->direct = false;
		rc = fl < 0 || fcntl(w->fd, F_SETFL, fl & ~O_DIRECT) < 0
		             ? -errno
		             : write_all(w->fd, w->hdr, hsize, 0);
	}
	if (rc) {
		rc = vr_err(err, errlen, rc, "recording %s: writing the header: %s", path,
		            strerror(-rc));
		goto out_unlink;
	}
	w->bytes = hsize;
	*out = w;
	return 0;

out_unlink:
	close(w->fd);
	unlink(path);
out_free:
	free(w->hdr);
	free(w);
	return rc;
}

/* Buffered writes: start writeback of what was just written, and wait for and drop from the
 * cache what was written a frame before, so that a recording never fills the page cache. */
static void writeback(struct src_rec_writer *w, uint64_t off, uint64_t len)
{
	sync_file_range(w->fd, (off_t)off, (off_t)len, SYNC_FILE_RANGE_WRITE);
	if (off > w->flushed) {
		sync_file_range(w->fd, (off_t)w->flushed, (off_t)(off - w->flushed),
		                SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE |
		                        SYNC_FILE_RANGE_WAIT_AFTER);
		posix_fadvise(w->fd, (off_t)w->flushed, (off_t)(off - w->flushed),
		              POSIX_FADV_DONTNEED);
		w->flushed = off;
	}
}

int src_rec_writer_frame(struct src_rec_writer *w, struct src_rec_frame *f, uint8_t *frame,
                         char *err, size_t errlen)
{
	uint64_t off = w->header_size + w->frames * w->frame_bytes;
	int rc;

	f->index = w->frames;
	f->crc = src_crc32c(0, frame + SRC_REC_FRAME_HDR, w->epoch_bytes);
	memset(frame, 0, SRC_REC_FRAME_HDR);
	memset(frame + SRC_REC_FRAME_HDR + w->epoch_bytes, 0,
	       w->frame_bytes - SRC_REC_FRAME_HDR - w->epoch_bytes);
	src_rec_frame_encode(frame, f);
	rc = write_all(w->fd, frame, w->frame_bytes, off);
	if (rc) {
		/* what was written of this frame is not a frame: the file ends before it */
		if (ftruncate(w->fd, (off_t)off) < 0)
			(void)0; /* a reader ignores a partial frame in any case */
		return vr_err(err, errlen, rc, "recording %s: writing epoch %llu: %s", w->path,
		              (unsigned long long)f->epoch,
		              rc == -ENOSPC ? "the disk is full" : strerror(-rc));
	}
	if (!w->direct)
		writeback(w, off, w->frame_bytes);
	w->frames++;
	w->bytes += w->frame_bytes;
	return 0;
}

void src_rec_writer_stats(const struct src_rec_writer *w, struct src_rec_writer_stats *st)
{
	st->frames = w->frames;
	st->bytes = w->bytes;
	st->direct = w->direct;
}

int src_rec_writer_fd(const struct src_rec_writer *w)
{
	return w->fd;
}

int src_rec_writer_close(struct src_rec_writer *w, char *err, size_t errlen)
{
	int rc = 0;

	if (!w)
		return 0;
	if (w->frames) {
		wr64(w->hdr + 32, w->frames);
		/* the first page holds the fixed header: rewrite it whole (aligned for O_DIRECT) */
		rc = write_all(w->fd, w->hdr, SRC_REPLAY_ALIGN, 0);
		if (!rc && fdatasync(w->fd) < 0)
			rc = -errno;
		if (rc)
			rc = vr_err(err, errlen, rc, "recording %s: finishing the header: %s",
			            w->path, strerror(-rc));
	}
	if (close(w->fd) < 0 && !rc)
		rc = vr_err(err, errlen, -errno, "recording %s: close: %s", w->path,
		            strerror(errno));
	if (!w->frames)
		unlink(w->path);
	free(w->hdr);
	free(w);
	return rc;
}
