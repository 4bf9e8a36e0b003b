/* SPDX-License-Identifier: MIT */
/*
 * The file driver of h5vol (h5vol.c only): HDF5's sec2 driver (pread/pwrite on one descriptor)
 * with an undo journal. HDF5 rewrites its metadata in place when it flushes (the superblock
 * with its end of allocation, object headers, chunk indexes), so a flush that fails half way
 * leaves a file whose metadata points at blocks that were never written, or past its end
 * (h5py: "addr overflow"); cutting the file back cannot undo what was overwritten. The driver
 * therefore keeps the old bytes of every write below the commit mark (the end of the file as of
 * the last flush that succeeded) until the next commit; restoring writes them back and cuts the
 * file to the mark: the file is then exactly as it was after that flush. Restoring only
 * overwrites bytes the file already holds, so it needs no new space on the disk.
 *
 * A process that is killed (SIGKILL, the OOM killer) restores nothing, and HDF5 writes its
 * metadata in address order: the object headers (a dataset's extent) before the chunk indexes
 * past them, so a kill inside a flush could leave an extent that counts a row whose chunk is not
 * indexed (a row of zeros), or a superblock whose end of allocation does not cover what the
 * headers point at ("addr overflow"). The driver therefore holds every write below the mark in
 * memory (reads see it) and makes them at the commit, after the new blocks past the mark, which
 * nothing on the file references yet: the superblock first (the file is already as long as its
 * new end of allocation), then the rest from the end of the file down (chunk indexes), then all
 * object headers in one write over the range they span (the datasets' headers lie together at
 * the file's start). A kill during the commit leaves chunks that are indexed but not yet
 * counted: the file holds every row of the last commit, or every row of this one, in every
 * dataset alike.
 *
 * At the close the recorder rewrites the root group's attributes; HDF5 removes the old ones and
 * condenses the group's object header, moving messages (its symbol table among them) into the
 * space freed in earlier chunks of that header, which lie more than 256 KiB apart (the chunk of
 * the attributes written after the first volume, one added at the end or in space freed long
 * before). Those chunks cannot go in one write, and one by one from the end of the file down a
 * kill between them left a message in neither chunk (h5py: "message type not found" opening any
 * dataset). They go in an order in which every step is a header HDF5 reads: the chunks new since
 * the last commit first (nothing on the file points at them), then the others in the order HDF5
 * created them (a message moves only into an earlier chunk: a kill in between leaves it twice,
 * never nowhere); the driver notes when it first saw each header chunk written.
 */
#ifndef VOLREC_CLIENTS_H5VOL_VFD_H
#define VOLREC_CLIENTS_H5VOL_VFD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <hdf5.h>

#include "base/base.h"

struct h5vol_span;
struct h5vol_header;

struct h5vol_journal {
	uint64_t mark;           /* [0, mark) is the file as of the last commit */
	struct h5vol_span *undo; /* old bytes of the writes below the mark since, oldest first */
	size_t n, cap;
	size_t bytes;            /* held in undo */
	struct h5vol_span *held; /* the writes below the mark not yet made, disjoint */
	uint64_t cut; /* the close's new end of file, cut at the commit after the held writes */
	size_t nheld, capheld;
	struct h5vol_header *hdr; /* the object header chunks written so far, when first */
	size_t nhdr, caphdr;
	uint64_t born;      /* chunks noted in hdr */
	uint64_t born_mark; /* born as of the last commit: the chunks the file may point at */
	int fd;      /* a descriptor of the file of our own (restore works after HDF5 closed its) */
	int error;   /* a write below the mark whose old bytes could not be kept (-errno) */
	bool frozen; /* restored: every later write is refused (EIO) and reaches nothing */
	uint64_t writes; /* writes that reached the file (for tests and messages) */
};

/* A file access property list for path: the journaling driver writing through j (which must
 * outlive the file: the caller's) and HDF5's strong close. H5I_INVALID_HID on failure. */
hid_t h5vol_vfd_fapl(struct h5vol_journal *j);

/*
 * Everything written so far is the file now: the held writes reach the file (in the order above,
 * their old bytes kept), then the mark moves to end (HDF5's end of allocation after a successful
 * flush) and the old bytes are forgotten. 0, or a negative errno when a held write failed (the
 * mark stays: h5vol_journal_restore puts the file back).
 */
int h5vol_journal_commit(struct h5vol_journal *j, uint64_t end) VR_MUST_CHECK;

/*
 * Put the file back as of the last commit: the old bytes written back, newest first, and the
 * file cut to the mark; later writes are refused. 0, or a negative errno when that could not be
 * done (the journal lost a write: j->error; or a write back failed).
 */
int h5vol_journal_restore(struct h5vol_journal *j) VR_MUST_CHECK;

/* Free the old bytes and the held writes, and close j->fd (when >= 0). */
void h5vol_journal_free(struct h5vol_journal *j);

#endif
