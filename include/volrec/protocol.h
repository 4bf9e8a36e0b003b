/* SPDX-License-Identifier: MIT */
/*
 * volrec publishing protocol: the shared-memory data segment, the reader-lease segment and the
 * ZeroMQ `vol` message, all little-endian with fixed offsets (docs/protocol.md says it in words).
 * Plain integer fields only; the atomic fields are accessed with 8/4-byte aligned atomic ops.
 */
#ifndef VOLREC_PROTOCOL_H
#define VOLREC_PROTOCOL_H

#include <stddef.h>
#include <stdint.h>

/* Versioning: a reader rejects any other major (naming both versions); a higher minor only
 * appends fields. 2.0: the views area holds the reduced volume (VOLREC_IMAGE_VOLUME), its
 * descriptors give a third dimension and block factors, and its pictures start at 704.
 * 2.1: a slot holds the channels of output.channels one after another, each described by a
 * struct volrec_channel_desc (docs/protocol.md §2.7). */
#define VOLREC_PROTO_MAJOR 2
#define VOLREC_PROTO_MINOR 1

#define VOLREC_SHM_PREFIX      "/volrec." /* data segment: "/volrec.<instance>" */
#define VOLREC_SHM_LEASE_SUFX  ".readers" /* lease segment: "/volrec.<instance>.readers" */
#define VOLREC_DEFAULT_RUN_DIR "/run/volrec"
#define VOLREC_INSTANCE_MAX    63 /* [A-Za-z0-9_-]{1,63} */

#define VOLREC_SLOT_ALIGN    ((uint64_t)2 << 20) /* slot data offsets are multiples of 2 MiB */
#define VOLREC_MAX_SLOTS     64
#define VOLREC_MAX_READERS   1024
#define VOLREC_SLOT_NONE     0xFFFFFFFFu
#define VOLREC_ENDPOINTS_MAX 2048 /* bytes of the endpoint list in the data segment */

/* Bytes "VRSHMSEG", "VRLEASES", "VRVM" read as little-endian integers. */
#define VOLREC_SHM_MAGIC   UINT64_C(0x4745534D48535256)
#define VOLREC_LEASE_MAGIC UINT64_C(0x53455341454C5256)
#define VOLREC_VOL_MAGIC   UINT32_C(0x4D565256)

enum volrec_dtype {
	VOLREC_DTYPE_U8 = 1,
	VOLREC_DTYPE_U16 = 2,
	VOLREC_DTYPE_F32 = 3,
};

static inline size_t volrec_dtype_size(uint32_t dtype)
{
	return dtype == VOLREC_DTYPE_U8    ? 1
	       : dtype == VOLREC_DTYPE_U16 ? 2
	       : dtype == VOLREC_DTYPE_F32 ? 4
	                                   : 0;
}

enum volrec_seg_state {
	VOLREC_STATE_INIT = 0, /* being created: readers wait and retry */
	VOLREC_STATE_LIVE = 1, /* a writer publishes into it */
	VOLREC_STATE_CLOSED =
	        2, /* the writer stopped cleanly; the segment stays only with keep_shm */
};

/*
 * Slot flags (struct volrec_slot_header.flags, struct volrec_vol_msg.flags). Bit 0 is reserved
 * and never set (1.0 documented it as "partial", which no writer produced: only complete epochs
 * are published). Unknown bits are to be ignored.
 */
#define VOLREC_FLAG_RESET 0x2u /* first volume after a reconstruction-history reset */
/* Epochs were dropped between the previous volume published in this session and this one (or
 * before this one, if it is the session's first): its history has a gap. Since protocol 1.1;
 * a 1.0 writer never sets it, whatever it dropped. */
#define VOLREC_FLAG_DROPPED_BEFORE 0x4u
#define VOLREC_FLAG_VIEWS          0x8u /* the slot holds views of the volume (struct volrec_views_header) */
/* The slot's channel views area holds the pictures of channels 1.. (2.1, docs/protocol.md §2.8) */
#define VOLREC_FLAG_CHANNEL_VIEWS 0x10u

/*
 * Data segment, offset 0: 256 bytes. The header region [0, data_offset) also holds the slot
 * header table (slot_table_offset) and the NUL-separated endpoint list (endpoints_offset).
 */
struct volrec_shm_header {
	uint64_t magic;             /*   0 VOLREC_SHM_MAGIC */
	uint16_t major;             /*   8 VOLREC_PROTO_MAJOR */
	uint16_t minor;             /*  10 VOLREC_PROTO_MINOR */
	uint32_t header_size;       /*  12 sizeof(struct volrec_shm_header) = 256 */
	uint64_t session_id;        /*  16 random, non-zero, new at every (re)build */
	uint32_t ny;                /*  24 volume shape [Y][X][Z], Z fastest */
	uint32_t nx;                /*  28 */
	uint32_t nz;                /*  32 */
	uint32_t dtype;             /*  36 enum volrec_dtype */
	uint32_t slot_count;        /*  40 number of slots */
	uint32_t slot_header_size;  /*  44 bytes per slot header entry (128) */
	uint64_t slot_table_offset; /*  48 offset of slot header 0 */
	uint64_t data_offset;       /*  56 offset of slot 0 data, a multiple of 2 MiB */
	uint64_t slot_stride;       /*  64 distance between slot data, a multiple of 2 MiB */
	uint64_t volume_bytes;      /*  72 ny * nx * nz * dtype size */
	uint64_t segment_size;      /*  80 total bytes of the segment */
	uint64_t latest_sequence;  /*  88 atomic: sequence of the newest published volume, 0 none */
	uint32_t latest_slot;      /*  96 atomic: its slot (a hint: check the slot's sequence) */
	int32_t writer_pid;        /* 100 pid of the writer */
	uint64_t created_ns;       /* 104 CLOCK_REALTIME ns when the segment was created */
	uint32_t state;            /* 112 atomic: enum volrec_seg_state */
	uint32_t max_readers;      /* 116 entries in the lease table */
	uint64_t endpoints_offset; /* 120 offset of the endpoint list */
	uint32_t endpoints_size;   /* 128 bytes reserved for it (NUL-separated, ends with "\0\0") */
	uint32_t reserved0;        /* 132 zero */
	uint64_t views_offset; /* 136 offset of the views area within each slot, 0: none (1.2) */
	uint64_t views_bytes;  /* 144 bytes of the views area (1.2) */
	/* 2.1: channels (docs/protocol.md §2.7); 0 from an older writer: one, the structure */
	uint32_t channels;             /* 152 channels each slot holds, 1..VOLREC_CHANNELS_MAX */
	uint32_t channel_desc_size;    /* 156 bytes per channel descriptor (128) */
	uint64_t channel_table_offset; /* 160 of slot 0's first descriptor (§2.7) */
	uint64_t channel_views_offset; /* 168 of the channels' pictures in each slot, 0: none */
	uint64_t channel_views_bytes;  /* 176 bytes of them (volrec_channel_views_bytes) */
	uint64_t reserved[9];          /* 184..255 zero */
};

/*
 * Slot header, slot_header_size bytes at slot_table_offset + i * slot_header_size.
 * sequence is a seqlock and also names the volume: 0 = empty, 2n-1 = volume n being written,
 * 2n = volume n complete. Volume sequence numbers n start at 1 in each session.
 */
struct volrec_slot_header {
	uint64_t sequence;     /*   0 atomic seqlock (see above) */
	uint64_t volume_id;    /*   8 daemon's volume counter (continues across reloads) */
	uint64_t epoch;        /*  16 epoch of the last low-resolution volume interlaced */
	int32_t offset_x;      /*  24 scan offset ox of that epoch */
	int32_t offset_y;      /*  28 scan offset oy */
	uint64_t t_first_ns;   /*  32 CLOCK_REALTIME ns: first B-scan of the volume acquired */
	uint64_t t_last_ns;    /*  40 last B-scan acquired */
	uint64_t t_publish_ns; /*  48 published (sequence closed) */
	uint64_t latency_ns;   /*  56 processing latency: last B-scan acquired -> published */
	uint32_t flags;        /*  64 VOLREC_FLAG_* */
	uint32_t generation;   /*  68 live parameters that made it (1.3); 0: not told */
	double voxel_dx_um;    /*  72 voxel size in um along x (1.3); 0: unknown */
	double voxel_dy_um;    /*  80 along y (1.3); 0: unknown */
	double voxel_dz_um;    /*  88 along z, in depth (1.3); 0: unknown */
	uint32_t channels;     /*  96 channels of the volume (2.1); 0: one, the structure */
	uint32_t reserved0;    /* 100 zero */
	uint64_t reserved[3];  /* 104..127 zero */
};

/*
 * Channels (2.1, docs/protocol.md §2.7, docs/algorithms.md §5): what each u8 of a channel means.
 * A voxel q (0..255) stands for value_lo + (value_hi - value_lo) * q / 255 in units; the
 * descriptors of a slot are written under its sequence with the volume (the mapping follows the
 * live keys of the volume's generation).
 */
enum volrec_channel_kind {
	VOLREC_CHANNEL_STRUCTURE = 0, /* reflectivity, dB (preprocess.db_range) */
	VOLREC_CHANNEL_ANGIO = 1,     /* angiography: speckle variance (dB^2) or cdv (1) */
	VOLREC_CHANNEL_DOPPLER = 2,   /* phase step of the Kasai autocorrelation, rad */
	VOLREC_CHANNEL_KINDS = 3,
};
#define VOLREC_CHANNELS_MAX 3
/* struct volrec_channel_desc.method of an angiography channel (functional.angio.method) */
enum volrec_angio_method { VOLREC_ANGIO_SVAR = 0, VOLREC_ANGIO_CDV = 1 };
/* of a Doppler channel (functional.doppler.axis): the pairs between repeats or A-scans */
enum volrec_doppler_axis { VOLREC_DOPPLER_BSCAN = 0, VOLREC_DOPPLER_ASCAN = 1 };

struct volrec_channel_desc {
	uint32_t kind;     /*  0 enum volrec_channel_kind */
	uint32_t method;   /*  4 angio: enum volrec_angio_method; Doppler: its axis; else 0 */
	uint64_t offset;   /*  8 of the channel's volume_bytes from the slot data's start */
	double value_lo;   /* 16 the value of u8 0 */
	double value_hi;   /* 24 the value of u8 255 */
	uint8_t units[16]; /* 32 of the values, UTF-8, NUL-terminated: "dB", "dB^2", "1", "rad" */
	double velocity_lo_mm_s; /* 48 Doppler: axial velocity of u8 0 (value_lo); 0 with */
	double velocity_hi_mm_s; /* 56 velocity_hi_mm_s 0: unknown (no period or wavelength) */
	double period_us;        /* 64 Doppler: time between the two A-scans of a pair; 0 unknown */
	double mask_db;          /* 72 angio, Doppler: structure (dB) under which a voxel is 0 */
	uint32_t half_window;    /* 80 angio (cdv), Doppler: the axial half window h */
	uint32_t flags; /* 84 Doppler: VOLREC_CHANNEL_BULK when the bulk phase is removed */
	double center_wavelength_nm; /* 88 Doppler: lambda0 of the velocities; 0 unknown */
	double refractive_index;     /* 96 Doppler: n of the velocities (1.38 when not given) */
	uint64_t reserved[3];        /* 104..127 zero */
};
#define VOLREC_CHANNEL_BULK 0x1u

/* Lease segment "/volrec.<instance>.readers", offset 0: 64 bytes. */
/*
 * Views (docs/algorithms.md §4, docs/protocol.md §2.5): small pictures of each volume written into
 * its slot beside it, at views_offset from the slot data, under the slot's sequence like the
 * volume. The area starts with struct volrec_views_header, whose descriptors give each
 * picture's place (offset from the area's start), size and the parameters it was computed
 * with. A picture may show an earlier volume than its slot's (a CPU daemon renders every Nth
 * volume): its volume_id says which. Pictures are u8, row-major [rows][cols].
 */
enum volrec_image_kind {
	VOLREC_IMAGE_ENFACE_MEAN = 0, /* [Y][X] mean over the slab */
	VOLREC_IMAGE_ENFACE_MAX = 1,  /* [Y][X] maximum over the slab */
	VOLREC_IMAGE_BSCAN = 2,       /* [X][Z] at y0 */
	VOLREC_IMAGE_SLICE = 3,       /* [Y][Z] at x0 */
	VOLREC_IMAGE_PLANE = 4,       /* [Y][X] at z0 */
	VOLREC_IMAGE_RENDER = 5,      /* [H][W] maximum-intensity render */
	VOLREC_IMAGE_VOLUME = 6,      /* [Yr][Xr][Zr] the volume reduced by blocks (2.0) */
	VOLREC_IMAGE_COUNT = 7,
};

/* How the reduced volume combines the voxels of a block (struct volrec_image_desc.reduce). */
enum volrec_reduce {
	VOLREC_REDUCE_MAX = 0,  /* their maximum */
	VOLREC_REDUCE_MEAN = 1, /* their mean, rounded half up */
};
#define VOLREC_VIEWS_MAGIC UINT32_C(0x57454956) /* "VIEW" */
#define VOLREC_RENDER_MAX  1024                 /* render pixels per side, at most */
#define VOLREC_VOLUME_MAX  256 /* reduced volume voxels per side, at most (view.volume.max_side) */

struct volrec_image_desc {
	uint32_t kind;       /*  0 enum volrec_image_kind */
	uint32_t present;    /*  4 1: the picture is there; 0: not computed */
	uint32_t rows;       /*  8 */
	uint32_t cols;       /* 12 */
	uint64_t offset;     /* 16 bytes from the start of the views area */
	uint64_t volume_id;  /* 24 the volume the picture shows */
	uint32_t slab_za;    /* 32 depth slab [za, zb) of the en-face pictures */
	uint32_t slab_zb;    /* 36 */
	uint32_t position_y; /* 40 y0 of the bscan */
	uint32_t position_x; /* 44 x0 of the slice */
	uint32_t position_z; /* 48 z0 of the plane */
	uint32_t planes;     /* 52 third dimension: Zr of the volume, 1 for a picture (2.0) */
	float azimuth_deg;   /* 56 render camera */
	float elevation_deg; /* 60 */
	float spacing_x;     /* 64 render voxel spacing */
	float spacing_y;     /* 68 */
	float spacing_z;     /* 72 */
	float step;          /* 76 render sampling step */
	uint32_t block_y;    /* 80 voxels per element along rows; 1 but for the volume (2.0) */
	uint32_t block_x;    /* 84 along cols */
	uint32_t block_z;    /* 88 along planes */
	uint32_t reduce;     /* 92 enum volrec_reduce of the volume; 0 for a picture (2.0) */
};

/* The views area starts with this header; VOLREC_IMAGE_COUNT descriptors (struct
 * volrec_image_desc, desc_size bytes each, in the order of enum volrec_image_kind) follow it at
 * offset 32, then the pictures from VOLREC_VIEWS_DATA_OFFSET on. */
struct volrec_views_header {
	uint32_t magic;     /*  0 VOLREC_VIEWS_MAGIC */
	uint32_t count;     /*  4 VOLREC_IMAGE_COUNT */
	uint32_t desc_size; /*  8 sizeof(struct volrec_image_desc) */
	uint32_t reserved0; /* 12 zero */
	uint64_t reserved1; /* 16 zero */
	uint64_t reserved2; /* 24 zero */
};
#define VOLREC_VIEWS_DATA_OFFSET 704 /* first picture's offset in the area (64-aligned) */

/* Bytes of the views area of a Y x X x Z volume: the header, the five slices and projections,
 * a render of up to VOLREC_RENDER_MAX^2 and the reduced volume of up to VOLREC_VOLUME_MAX a
 * side (never more than the volume's own sides), each 64-byte aligned. */
static inline uint64_t volrec_views_bytes(uint32_t Y, uint32_t X, uint32_t Z)
{
	const uint64_t a = 63, m = VOLREC_VOLUME_MAX;
	uint64_t yx = ((uint64_t)Y * X + a) & ~a, xz = ((uint64_t)X * Z + a) & ~a;
	uint64_t yz = ((uint64_t)Y * Z + a) & ~a;
	uint64_t vol = (Y < m ? Y : m) * (X < m ? X : m) * (Z < m ? Z : m);

	return VOLREC_VIEWS_DATA_OFFSET + 3 * yx + xz + yz +
	       (uint64_t)VOLREC_RENDER_MAX * VOLREC_RENDER_MAX + ((vol + a) & ~a);
}

/*
 * Channel views (2.1, docs/protocol.md §2.8): for each channel c >= 1 (channel 0's pictures are
 * the views area's), its en-face mean and maximum over the views' slab and its B-scan at the
 * views' y0, computed as the views area's pictures of the same kinds (whose descriptors give
 * the parameters). Channel c's pictures start at channel_views_offset + (c - 1) *
 * volrec_channel_views_step(Y, X, Z) from the slot's data; within them, picture kind k
 * (VOLREC_IMAGE_ENFACE_MEAN, _ENFACE_MAX, _BSCAN) lies at volrec_channel_view_offset(k).
 */
static inline uint64_t volrec_channel_views_step(uint32_t Y, uint32_t X, uint32_t Z)
{
	const uint64_t a = 63;
	return 2 * (((uint64_t)Y * X + a) & ~a) + (((uint64_t)X * Z + a) & ~a);
}

static inline uint64_t volrec_channel_view_offset(uint32_t Y, uint32_t X, unsigned kind)
{
	const uint64_t yx = ((uint64_t)Y * X + 63) & ~(uint64_t)63;
	return kind == VOLREC_IMAGE_ENFACE_MEAN ? 0 : kind == VOLREC_IMAGE_ENFACE_MAX ? yx : 2 * yx;
}

/* Bytes of the channel views of a slot of channels channels. */
static inline uint64_t volrec_channel_views_bytes(uint32_t Y, uint32_t X, uint32_t Z,
                                                  uint32_t channels)
{
	return channels > 1 ? (channels - 1) * volrec_channel_views_step(Y, X, Z) : 0;
}

struct volrec_lease_header {
	uint64_t magic;       /*  0 VOLREC_LEASE_MAGIC */
	uint16_t major;       /*  8 */
	uint16_t minor;       /* 10 */
	uint32_t header_size; /* 12 64 */
	uint64_t session_id;  /* 16 equals the data segment's */
	uint32_t entry_count; /* 24 = max_readers */
	uint32_t entry_size;  /* 28 64 */
	uint64_t reserved[4]; /* 32..63 zero */
};

/*
 * Reader entry at header_size + i * entry_size. A reader owns an entry while it holds an
 * open-file-description lock (F_OFD_SETLK, F_WRLCK) on the entry's byte range of the lease
 * segment file; only the owner writes the entry. The writer only reads entries.
 */
struct volrec_lease_entry {
	uint32_t pid;          /*  0 atomic: owner pid, 0 = never used */
	uint32_t slot;         /*  4 atomic: slot leased, VOLREC_SLOT_NONE = none */
	uint64_t sequence;     /*  8 atomic: volume sequence n the lease is for */
	uint64_t session_id;   /* 16 atomic: session the lease refers to */
	uint64_t heartbeat_ns; /* 24 CLOCK_MONOTONIC ns of the owner's last call */
	uint64_t reserved[4];  /* 32..63 zero */
};

/* ZeroMQ topics: each message is two frames, [topic][body]. */
#define VOLREC_TOPIC_VOL    "vol"    /* body: struct volrec_vol_msg */
#define VOLREC_TOPIC_STATUS "status" /* body: JSON object, UTF-8, no NUL */
#define VOLREC_TOPIC_EVENT  "event"  /* body: JSON object, UTF-8, no NUL */
#define VOLREC_TEXT_MAX     65536    /* bound on status/event bodies */

/* `vol` body: 160 bytes (128 before 1.3), little-endian, no padding. Readers accept
 * size >= 112; fields past size read as zero. */
struct volrec_vol_msg {
	uint32_t magic;        /*   0 VOLREC_VOL_MAGIC */
	uint16_t major;        /*   4 */
	uint16_t minor;        /*   6 */
	uint32_t size;         /*   8 bytes of this body (128) */
	uint32_t slot;         /*  12 slot holding the volume */
	uint64_t session_id;   /*  16 */
	uint64_t sequence;     /*  24 volume sequence n (slot sequence reads 2n while intact) */
	uint64_t volume_id;    /*  32 */
	uint64_t epoch;        /*  40 */
	uint32_t ny;           /*  48 */
	uint32_t nx;           /*  52 */
	uint32_t nz;           /*  56 */
	uint32_t dtype;        /*  60 */
	int32_t offset_x;      /*  64 */
	int32_t offset_y;      /*  68 */
	uint64_t t_first_ns;   /*  72 */
	uint64_t t_last_ns;    /*  80 */
	uint64_t t_publish_ns; /*  88 */
	uint64_t latency_ns;   /*  96 */
	uint32_t flags;        /* 104 */
	uint32_t generation;   /* 108 as in the slot header (1.3) */
	double voxel_dx_um;    /* 112 as in the slot header (1.3) */
	double voxel_dy_um;    /* 120 */
	double voxel_dz_um;    /* 128 */
	uint32_t channels;     /* 136 as in the slot header (2.1) */
	uint32_t reserved0;    /* 140 zero */
	uint64_t reserved[2];  /* 144..159 zero */
};
#define VOLREC_VOL_MSG_MIN 112

/* checked by every C compilation (C++, nvcc among them, includes the layout alone) */
#ifndef __cplusplus
_Static_assert(sizeof(struct volrec_shm_header) == 256, "shm header layout");
_Static_assert(offsetof(struct volrec_shm_header, latest_sequence) == 88, "shm header layout");
_Static_assert(offsetof(struct volrec_shm_header, state) == 112, "shm header layout");
_Static_assert(offsetof(struct volrec_shm_header, endpoints_size) == 128, "shm header layout");
_Static_assert(sizeof(struct volrec_slot_header) == 128, "slot header layout");
_Static_assert(offsetof(struct volrec_shm_header, views_offset) == 136, "shm header layout");
_Static_assert(sizeof(struct volrec_image_desc) == 96, "image descriptor layout");
_Static_assert(sizeof(struct volrec_views_header) == 32, "views header layout");
_Static_assert(offsetof(struct volrec_image_desc, block_y) == 80, "image descriptor layout");
_Static_assert(VOLREC_VIEWS_DATA_OFFSET >=
                       sizeof(struct volrec_views_header) +
                               VOLREC_IMAGE_COUNT * sizeof(struct volrec_image_desc),
               "views data offset");
_Static_assert(offsetof(struct volrec_slot_header, flags) == 64, "slot header layout");
_Static_assert(sizeof(struct volrec_lease_header) == 64, "lease header layout");
_Static_assert(sizeof(struct volrec_lease_entry) == 64, "lease entry layout");
_Static_assert(offsetof(struct volrec_slot_header, voxel_dx_um) == 72, "slot header layout");
_Static_assert(sizeof(struct volrec_vol_msg) == 160, "vol message layout");
_Static_assert(offsetof(struct volrec_vol_msg, voxel_dx_um) == 112, "vol message layout");
_Static_assert(offsetof(struct volrec_vol_msg, flags) == 104, "vol message layout");
_Static_assert(offsetof(struct volrec_vol_msg, channels) == 136, "vol message layout");
_Static_assert(offsetof(struct volrec_shm_header, channels) == 152, "shm header layout");
_Static_assert(offsetof(struct volrec_shm_header, channel_table_offset) == 160,
               "shm header layout");
_Static_assert(offsetof(struct volrec_slot_header, channels) == 96, "slot header layout");
_Static_assert(sizeof(struct volrec_channel_desc) == 128, "channel descriptor layout");
_Static_assert(offsetof(struct volrec_channel_desc, velocity_lo_mm_s) == 48, "channel layout");

#endif

#endif
