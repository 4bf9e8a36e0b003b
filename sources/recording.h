/* SPDX-License-Identifier: MIT */
/*
 * Raw recordings (src_rec_): version 2 of the replay format (docs/replay-format.md), written
 * epoch by epoch as framed records, each with its index entry (epoch, scan offset, timestamps,
 * drop marks) and a CRC-32C of its bytes, so that a file cut short stays readable up to its
 * last complete epoch. The header carries the configuration and its tables as sections.
 */
#ifndef VOLREC_SRC_RECORDING_H
#define VOLREC_SRC_RECORDING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/base.h"
#include "sources/source.h"

#define SRC_REC_VERSION      2u          /* the replay format version of recordings */
#define SRC_REC_FRAME_HDR    4096u       /* bytes before an epoch's data in its frame */
#define SRC_REC_FRAME_MAGIC  "VOLRECEP"  /* 8 bytes, no NUL */
#define SRC_REC_ENTRY_SIZE   72u         /* bytes of a frame's index entry, CRC included */
#define SRC_REC_SECTIONS_MAX (48u << 20) /* bytes of sections at most */
#define SRC_REC_NAME_MAX     128u        /* bytes of a section's name, NUL included */

/* Drop marks of an epoch (the index entry's flags). */
#define SRC_REC_MARK_GAP       0x1u /* the source lost data before one of its B-scans */
#define SRC_REC_MARK_RING_FULL 0x2u /* live processing had no ring room and dropped it */
#define SRC_REC_MARKS_KNOWN    0x3u

/* One epoch's index entry (the head of its frame). */
struct src_rec_frame {
	uint64_t epoch;          /* the pipeline's epoch number */
	uint32_t ox, oy;         /* its scan offset */
	uint64_t t_first_ns;     /* CLOCK_REALTIME: first B-scan acquired (source timestamp) */
	uint64_t t_last_ns;      /* CLOCK_REALTIME: last B-scan acquired */
	uint32_t marks;          /* SRC_REC_MARK_* */
	uint32_t crc;            /* CRC-32C of the epoch's data bytes */
	uint64_t skipped_before; /* epochs left out of the recording since the frame before */
	uint64_t index;          /* the frame's position in the file, from 0 */
};

/* A named section of the header: "config" (the effective configuration, YAML), or a table
 * ("preprocess.background.reference" ...: text, one number per line). */
struct src_rec_section {
	char name[SRC_REC_NAME_MAX];
	char *text; /* NUL-terminated, len bytes */
	size_t len;
};

/*
 * CRC-32C (Castagnoli, reflected, as iSCSI: RFC 3720 B.4) of n bytes, continuing crc (0 to
 * start): src_crc32c(src_crc32c(0, a, na), b, nb) is the CRC of a then b.
 */
uint32_t src_crc32c(uint32_t crc, const void *data, size_t n);

/* Bytes of one frame of an epoch of epoch_bytes: its head and data, padded to 4096. */
uint64_t src_rec_frame_size(uint64_t epoch_bytes);
/* Write f as the SRC_REC_ENTRY_SIZE bytes at p (the entry's own CRC included). */
void src_rec_frame_encode(uint8_t *p, const struct src_rec_frame *f);
/* Read an entry: 0, or -EBADMSG when its magic or CRC is wrong (nothing was written there,
 * or it is damaged), -EINVAL when its marks are unknown. */
VR_MUST_CHECK int src_rec_frame_decode(const uint8_t *p, struct src_rec_frame *f);

/*
 * The sections of a version 2 header (buf: the header_size bytes read; info as parsed): a
 * malloc'ed array in *out (free with src_rec_sections_free), *n entries. -EINVAL with a
 * message when they are malformed.
 */
VR_MUST_CHECK int src_rec_sections_parse(const uint8_t *buf, size_t len,
                                         const struct src_replay_info *info,
                                         struct src_rec_section **out, size_t *n, char *err,
                                         size_t errlen);
/* Read the sections of the recording at path (src_replay_probe's checks first). */
VR_MUST_CHECK int src_rec_sections_read(const char *path, struct src_rec_section **out, size_t *n,
                                        char *err, size_t errlen);
void src_rec_sections_free(struct src_rec_section *s, size_t n);

/*
 * The index of the recording at path: each complete frame's entry, in file order (a
 * malloc'ed array the caller frees), after the checks of src_replay_probe. A file cut short
 * gives its complete frames. 0, or a negative errno and a message.
 */
VR_MUST_CHECK int src_rec_index_read(const char *path, struct src_replay_info *info,
                                     struct src_rec_frame **frames, uint64_t *n, char *err,
                                     size_t errlen);

/* ---- the writer ---------------------------------------------------------------------------- */

struct src_rec_writer;

/* What a writer says about itself. */
struct src_rec_writer_stats {
	uint64_t frames; /* epochs written */
	uint64_t bytes;  /* bytes written, header included */
	bool direct;     /* O_DIRECT writes (else buffered, flushed as it goes) */
};

/*
 * Create the recording path (O_EXCL: an existing file is refused with -EEXIST) for info's
 * geometry (info->version, header_size, epochs and flags are the writer's), with metadata
 * (YAML text, may be NULL) and the sections s[0..ns), and write its header. Writes go
 * straight to path so that what was written survives a crash. On failure a negative errno and
 * a message naming the file; nothing is left behind.
 */
VR_MUST_CHECK int src_rec_writer_open(const char *path, const struct src_replay_info *info,
                                      const char *metadata, const struct src_rec_section *s,
                                      size_t ns, struct src_rec_writer **out, char *err,
                                      size_t errlen);
/*
 * Append one epoch: frame is src_rec_frame_size() bytes aligned to 4096 whose data starts at
 * SRC_REC_FRAME_HDR; the writer computes the CRC, fills f->crc, f->index and the head, and
 * writes the whole frame in one write. -ENOSPC when the disk is full (the file then ends with
 * the frame before).
 */
VR_MUST_CHECK int src_rec_writer_frame(struct src_rec_writer *w, struct src_rec_frame *f,
                                       uint8_t *frame, char *err, size_t errlen);
void src_rec_writer_stats(const struct src_rec_writer *w, struct src_rec_writer_stats *st);
/* The file descriptor (free-space checks). */
int src_rec_writer_fd(const struct src_rec_writer *w);
/* Write the epoch count into the header, flush to disk and close; frees w (NULL is fine). A
 * recording with no frame is removed. */
VR_MUST_CHECK int src_rec_writer_close(struct src_rec_writer *w, char *err, size_t errlen);

/* ---- inside the sources module (replay.c) ---------------------------------------------------- */

/* The checks of a version 2 header after the fixed fields common to every version were read
 * into *h (buf: len bytes of it, file_size the file's length): fills repeats, sections_len and
 * complete. */
VR_MUST_CHECK int src_rec_parse_v2(const uint8_t *buf, size_t len, uint64_t file_size,
                                   struct src_replay_info *h, char *err, size_t errlen);
/* The index of the open recording fd (info parsed): entries of its complete frames, checked
 * (increasing epochs, offsets in the scan sequence); *n may be less than info->complete when a
 * frame of an unfinished recording was not written whole. */
VR_MUST_CHECK int src_rec_index_load(int fd, const char *path, const struct src_replay_info *info,
                                     struct src_rec_frame **frames, uint64_t *n, char *err,
                                     size_t errlen);
/* CRC-32C by the tables alone (tests compare it with src_crc32c's instruction path). */
uint32_t src_crc32c_tables(uint32_t crc, const void *data, size_t n);

#endif
