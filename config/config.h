/* SPDX-License-Identifier: MIT */
/*
 * The effective volrecd configuration: one struct holding every key of the YAML schema
 * (docs/configuration.md; the keys are one table in config/schema.c), filled with defaults,
 * validated, with its tables loaded. cfg_load() is the only way a struct vr_config gets its
 * values from a file; cfg_set_keys() changes live keys of a loaded one.
 */
#ifndef VOLREC_CONFIG_H
#define VOLREC_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "base/base.h"
#include <volrec/shim.h>

#define CFG_PATH_MAX        4096
#define CFG_NAME_MAX        64
#define CFG_MAX_PUB         8
#define CFG_ERR_MAX         1024
#define CFG_GPU_DEVICES_MAX 8 /* entries of gpu.devices */
/* The smallest reconstruct.spatial_sigma: the 3x3x3 kernel's weights stay normal floats (a
 * smaller sigma weighs the neighbours below 4e-6 of the centre anyway; below about 0.07 they
 * underflowed to 0 and a column without a sample of its own had no weight: NaN) */
#define CFG_SPATIAL_SIGMA_MIN 0.2
/* The slowest paced source.rate (epochs/s; 0 is unpaced): one epoch every 100 s. Slower, a
 * B-scan's wait and the acquisition's timeout outgrow any stop or stall detection */
#define CFG_RATE_MIN 0.01
/* Levels of YAML collections a file or a set's value may nest: the schema's sections, and
 * source.shim.args' own 32 */
#define CFG_YAML_DEPTH_MAX 64

/* The ranges of geometry.samples_per_ascan (K) and geometry.ascans_per_bscan (nx, from 1). */
#define CFG_K_MIN       16
#define CFG_K_MAX       65536
#define CFG_NX_MAX      65536
#define CFG_REPEATS_MAX 16 /* geometry.repeats: M at most (docs/algorithms.md §5) */
/* Samples of one render at most: rays (view.render.size) x samples along the volume's
 * diagonal (docs/configuration.md "Render cost"); 2^30 allows the default 256 x 256 render of the
 * paper's 300 x 300 x 4096 volume (5.4e8). */
#define CFG_RENDER_SAMPLES_MAX (1ull << 30)

enum cfg_backend { CFG_BACKEND_AUTO, CFG_BACKEND_CUDA, CFG_BACKEND_CPU };
enum cfg_source { CFG_SOURCE_SYNTH, CFG_SOURCE_REPLAY, CFG_SOURCE_SHIM };
enum cfg_replay_format { CFG_REPLAY_AUTO, CFG_REPLAY_RAW };
/* What a replayed recording does with an epoch whose CRC-32C is wrong. */
enum cfg_crc_error { CFG_CRC_STOP, CFG_CRC_SKIP };
/* Raw sample types (docs/algorithms.md §0); u12p and u12gv pack two 12-bit samples in 3 bytes. */
enum cfg_sample {
	CFG_SAMPLE_U16,
	CFG_SAMPLE_I16,
	CFG_SAMPLE_F32,
	CFG_SAMPLE_U12P,
	CFG_SAMPLE_U12GV
};
enum cfg_background {
	CFG_BG_ASCAN_MEAN,
	CFG_BG_BSCAN_MEAN,
	CFG_BG_BSCAN_MEDIAN,
	CFG_BG_REFERENCE,
	CFG_BG_NONE,
	CFG_BG_PARTIAL_MEDIAN, /* Fourier-domain median where a depth's spread is large (§1b) */
};
enum cfg_resample { CFG_RS_NONE, CFG_RS_LINEAR, CFG_RS_CUBIC, CFG_RS_SPLINE };
enum cfg_rs_pos { CFG_RSPOS_NONE, CFG_RSPOS_TABLE, CFG_RSPOS_POLY, CFG_RSPOS_WAVELENGTH };
enum cfg_window {
	CFG_WIN_NONE,
	CFG_WIN_HANN,
	CFG_WIN_HAMMING,
	CFG_WIN_BLACKMAN,
	CFG_WIN_GAUSS,
	CFG_WIN_TUKEY,
};
enum cfg_disp { CFG_DISP_NONE, CFG_DISP_COEFFS, CFG_DISP_TABLE };
enum cfg_recon_mode {
	CFG_RECON_NONE,
	CFG_RECON_NONCUMULATIVE,
	CFG_RECON_CUMULATIVE,
	CFG_RECON_ADAPTIVE,    /* docs/algorithms.md §2b */
	CFG_RECON_COMPENSATED, /* docs/algorithms.md §2c */
	CFG_RECON_REGISTERED,  /* docs/algorithms.md §2d */
};
enum cfg_temporal { CFG_TEMPORAL_LINEAR, CFG_TEMPORAL_EXP };
enum cfg_combine { CFG_COMBINE_SUM, CFG_COMBINE_PRODUCT };
/* view.volume.reduce, in the order of protocol.h's enum volrec_reduce */
enum cfg_volume_reduce { CFG_VOLUME_MAX, CFG_VOLUME_MEAN };
enum cfg_dtype { CFG_DTYPE_U8 };
/* output.channels entries (docs/algorithms.md §5 step 6), in their required order */
enum cfg_channel { CFG_CH_STRUCTURE, CFG_CH_ANGIO, CFG_CH_DOPPLER, CFG_CH_COUNT };
#define CFG_CHANNELS_MAX CFG_CH_COUNT
enum cfg_angio_method { CFG_ANGIO_CDV, CFG_ANGIO_SVAR };
enum cfg_doppler_axis { CFG_DOPPLER_BSCAN, CFG_DOPPLER_ASCAN };
enum cfg_overflow { CFG_OVERFLOW_DROP_EPOCH, CFG_OVERFLOW_BLOCK };
enum cfg_log_level { CFG_LOG_ERROR, CFG_LOG_WARNING, CFG_LOG_INFO, CFG_LOG_DEBUG };

/* One loaded table file (one float per line); data is owned by the config. */
struct cfg_table {
	char path[CFG_PATH_MAX]; /* as given in the file, resolved relative to it */
	double *data;            /* NULL when the key is absent */
	size_t len;              /* number of values; equals K once validated */
};

struct vr_config {
	char source_file[CFG_PATH_MAX]; /* the YAML file this came from ("" for defaults) */

	char instance[CFG_NAME_MAX]; /* [A-Za-z0-9_-]{1,63}, names the shm segments */
	enum cfg_backend backend;

	struct {
		int device;  /* CUDA device ordinal, >= 0 */
		int streams; /* 1..32 */
		/* gpu.devices: the devices that share the work (duplicates allowed); ndevices 0
		 * when the key is absent, which means [device] (cfg_gpu_devices) */
		int devices[CFG_GPU_DEVICES_MAX];
		uint32_t ndevices;
	} gpu;

	struct {
		int threads; /* 0 = all cores, else 1..256 */
	} cpu;

	struct {
		enum cfg_source type;
		double rate; /* epochs per second, 0 = as fast as possible */
		struct {
			char path[CFG_PATH_MAX];
			enum cfg_replay_format format;
			bool loop;
			enum cfg_crc_error on_crc_error;
		} replay;
		struct {
			uint64_t seed;
			char phantom[CFG_NAME_MAX]; /* "retina", ... (phantom_names) */
			double deg_per_s;           /* motion.deg_per_s */
			double shift_mm_per_s[3];   /* motion.shift_mm_per_s: x, y, depth */
			uint64_t jump_epoch;        /* motion.jump.epoch, 0 = no jump */
			double jump_mm[3];          /* motion.jump.shift_mm: x, y, depth */
			double jump_deg;            /* motion.jump.deg */
			double jump_tilt_deg[2];    /* motion.jump.tilt_deg: about x, about y */
			/* the solid phantoms' motions (docs/configuration.md, sim_scene.c) */
			double tilt_deg_per_s[2]; /* motion.tilt_deg_per_s: about x, about y */
			double tilt_max_deg;    /* motion.tilt_max_deg: tilts rock within +-this */
			double periodic_hz;     /* motion.periodic.hz */
			double periodic_mm[3];  /* motion.periodic.shift_mm: x, y, depth */
			double periodic_deg[3]; /* motion.periodic.deg: about x, y, depth */
			double warp_mm;         /* motion.warp.mm: peak displacement */
			double warp_radius_mm;  /* motion.warp.radius_mm */
			double warp_hz;         /* motion.warp.hz */
			double warp_centre_mm[2]; /* motion.warp.centre_mm: x, y */
			/* the "flow" phantom's blood (docs/configuration.md, sim_scene.c) */
			struct {
				double peak_mm_per_s;      /* speed on each vessel's axis */
				int direction;             /* 1: along the vessels, -1: against */
				double bulk_um_per_repeat; /* axial bulk motion of the sample */
				double decorrelation_um;   /* travel that renews blood's speckle */
				double blood_tau_us; /* renewal time of resting blood; 0: never */
			} flow;
			double mirror_mm; /* the "mirror" phantom's depth, mm; 0: 1 mm */
			double snr_db;
			double beam_um; /* lateral resolution (FWHM, um); 0 = pencil beam */
		} synth;
		struct {
			char library[CFG_PATH_MAX];
			char *args_yaml; /* the args mapping re-emitted as YAML text, owned */
			int timeout_ms;  /* 1..600000 */
		} shim;
	} source;

	struct {
		uint32_t samples_per_ascan; /* K */
		enum cfg_sample sample_type;
		uint32_t bit_shift;         /* 0..15, integer samples only */
		uint32_t ascans_per_bscan;  /* nx */
		uint32_t bscans_per_volume; /* ny */
		uint32_t stride[2];         /* sx, sy */
		uint32_t depth_range[2];    /* [z0, z1) within [0, N/2) */
		bool bidirectional;
		uint32_t repeats; /* M: acquisitions of each B-scan position in a row (BM-scan) */
		/* Times and optics of functional OCT (docs/algorithms.md §5); 0 is unknown. */
		double ascan_period_us;      /* A-scan to A-scan, us */
		double bscan_period_us;      /* repeat to repeat of one position, us */
		double center_wavelength_nm; /* the source's centre wavelength, nm */
		/* Physical units (docs/algorithms.md §6); 0 is unknown throughout. */
		double scan_size_um[2];    /* lateral field of view [width_x, height_y], um */
		double axial_um_per_pixel; /* um per output depth bin in tissue; 0: derived */
		double refractive_index;   /* group index n of the tissue (0 or >= 1) */
	} geometry;

	struct {
		struct {
			enum cfg_background mode;
			struct cfg_table reference;
			double threshold; /* partial_median: t of sigma[z] > t sigma_bg, >= 0 */
		} background;
		struct {
			enum cfg_resample method;
			enum cfg_rs_pos positions; /* which of the three below was given */
			struct cfg_table table;
			double poly[4];
			double wavelength_nm[4];
		} resample;
		struct {
			enum cfg_window type;
			double param; /* gauss sigma (default 0.4), tukey alpha (default 0.5) */
		} window;
		struct {
			enum cfg_disp kind;
			double coeffs[2]; /* a2, a3 */
			struct cfg_table table;
		} dispersion;
		uint32_t zero_pad;  /* 1, 2 or 4 */
		double db_range[2]; /* lo < hi */
		struct {
			bool x, z;
		} flip;
	} preprocess;

	struct {
		enum cfg_recon_mode mode;
		double spatial_sigma; /* >= CFG_SPATIAL_SIGMA_MIN */
		enum cfg_temporal temporal;
		double tau; /* > 0 */
		enum cfg_combine combine;
		struct {
			double tolerance; /* kappa: change scale, normalized units (> 0) */
			uint32_t depth_half_window; /* h: 2h + 1 z bins averaged before comparing */
			double speckle_tolerance;   /* kappa_s: bin-wise change scale (0: off) */
			bool jump_recovery; /* trust what was rescanned since a detected move */
		} adaptive;
		struct {
			bool estimate_pose; /* false: every pose 0 (no compensation) */
		} compensated;
	} reconstruct;

	struct {
		enum cfg_dtype dtype; /* u8 only */
		uint32_t slots;       /* 2..64 */
		/* channel names in order (structure, angio, doppler); default [structure] */
		char channels[CFG_CHANNELS_MAX][CFG_PATH_MAX];
		uint32_t nchannels;
	} output;

	/* Functional OCT (docs/algorithms.md §5), all live. A *_given field is 1 when its key was
	 * given (the key is present); otherwise the value follows from other keys (cfg_mask_db,
	 * cfg_angio_range, cfg_doppler_axis). */
	struct {
		struct {
			enum cfg_angio_method method;
			int range_given;
			double range[2]; /* [lo, hi] of A */
		} angio;
		uint32_t axial_half_window; /* h: the window [z - h, z + h] of cdv and Doppler */
		int mask_given;
		double mask_db; /* structure below this (dB): angiography and Doppler 0 */
		struct {
			int axis_given;
			enum cfg_doppler_axis axis;
			bool bulk; /* remove the bulk phase of each pair */
		} doppler;
	} functional;

	struct {
		uint32_t ring_bscans; /* >= bscans_per_volume */
		enum cfg_overflow overflow;
	} pipeline;

	struct {
		char run_dir[CFG_PATH_MAX];
		char pub[CFG_MAX_PUB]
		        [CFG_PATH_MAX]; /* endpoints; npub == 0: the default ipc:// one */
		uint32_t npub;
		uint32_t status_interval_ms;         /* 50..60000 */
		uint32_t hwm;                        /* ZeroMQ send high-water mark, 1..100000 */
		uint32_t max_readers;                /* lease table size, 1..1024 */
		bool keep_shm;                       /* leave the segments on shutdown */
		char curve_secret_key[CFG_PATH_MAX]; /* file with the server's secret key (z85) */
		char curve_public_key[CFG_PATH_MAX]; /* file with the server's public key (z85) */
	} ipc;

	struct {
		enum cfg_log_level level;
	} log;

	/* Views of each volume (docs/algorithms.md §4); all live but enabled. */
	struct {
		bool enabled;         /* false: no views area, nothing computed (structural) */
		uint32_t slab[2];     /* en-face depth slab [za, zb), default the whole depth */
		uint32_t position[3]; /* [y0, x0, z0] of bscan/slice/plane, default the centre */
		struct {
			uint32_t size[2];     /* [H, W] pixels, 1..VOLREC_RENDER_MAX each */
			double angles_deg[2]; /* azimuth, elevation */
			double spacing[3];    /* voxel spacing dx, dy, dz > 0 */
			double step;          /* ray sampling step; 0: half the smallest spacing */
			uint32_t every;       /* render every Nth volume; 0: auto (GPU 1, CPU 5) */
		} render;
		struct {
			uint32_t max_side; /* reduced volume: voxels a side at most; 0 off */
			enum cfg_volume_reduce reduce; /* maximum or mean of each block */
		} volume;
	} view;

	struct {
		char dir[CFG_PATH_MAX];  /* where raw recordings go: <dir>/<NAME>.vrr */
		double min_free_gb;      /* recordings never leave less free space (GB) */
		uint32_t queue_mb;       /* memory for the copies each recorder queues (MiB) */
		char name[CFG_NAME_MAX]; /* headless: record raw into NAME at start ("": no) */
		uint64_t epochs;         /* headless: that many epochs (0: until stopped) */
		double seconds;          /* headless: or that long (0: until stopped) */
	} record;
};

/* Derived sizes; valid only on a validated config. */
static inline uint32_t cfg_fft_len(const struct vr_config *c)
{
	return c->geometry.samples_per_ascan * c->preprocess.zero_pad;
}
static inline uint32_t cfg_nz(const struct vr_config *c)
{
	return c->geometry.depth_range[1] - c->geometry.depth_range[0];
}
static inline uint32_t cfg_stride_area(const struct vr_config *c)
{
	return c->geometry.stride[0] * c->geometry.stride[1];
}
/* Whether t packs two samples in three bytes (u12p, u12gv: K must be even). */
static inline bool cfg_sample_packed(enum cfg_sample t)
{
	return t == CFG_SAMPLE_U12P || t == CFG_SAMPLE_U12GV;
}
/* Bytes of n samples of type t (n even for the packed types). */
static inline size_t cfg_sample_bytes(enum cfg_sample t, size_t n)
{
	return cfg_sample_packed(t) ? n / 2 * 3 : t == CFG_SAMPLE_F32 ? n * 4 : n * 2;
}
/* Bytes of one raw A-scan: K samples. */
static inline size_t cfg_ascan_bytes(const struct vr_config *c)
{
	return cfg_sample_bytes(c->geometry.sample_type, c->geometry.samples_per_ascan);
}
/* Bytes of one raw B-scan: nx * K samples. */
static inline size_t cfg_bscan_bytes(const struct vr_config *c)
{
	return (size_t)c->geometry.ascans_per_bscan * cfg_ascan_bytes(c);
}
/* Raw B-scans of one epoch: ny positions x M repeats (docs/algorithms.md §5). */
static inline uint32_t cfg_raw_bscans(const struct vr_config *c)
{
	return c->geometry.bscans_per_volume * c->geometry.repeats;
}
/* The channels of output.channels, in order, into ch. \return their number (1..3). */
static inline uint32_t cfg_channels(const struct vr_config *c, enum cfg_channel ch[CFG_CH_COUNT])
{
	static const char *const names[CFG_CH_COUNT] = {"structure", "angio", "doppler"};
	uint32_t n = 0;

	for (uint32_t i = 0; i < c->output.nchannels && i < CFG_CHANNELS_MAX; i++)
		for (int k = 0; k < CFG_CH_COUNT; k++)
			if (!strcmp(c->output.channels[i], names[k]))
				ch[n++] = (enum cfg_channel)k;
	if (!n)
		ch[n++] = CFG_CH_STRUCTURE;
	return n;
}
/* Whether output.channels is more than [structure]. */
static inline bool cfg_functional(const struct vr_config *c)
{
	enum cfg_channel ch[CFG_CH_COUNT];
	return cfg_channels(c, ch) > 1 || ch[0] != CFG_CH_STRUCTURE;
}
/* functional.mask_db, or its default lo + 0.3 (hi - lo) of preprocess.db_range. */
static inline double cfg_mask_db(const struct vr_config *c)
{
	const double *r = c->preprocess.db_range;
	return c->functional.mask_given ? c->functional.mask_db : r[0] + 0.3 * (r[1] - r[0]);
}
/* functional.angio.range, or the method's default (svar [0, 100] dB^2, cdv [0, 1]). */
static inline void cfg_angio_range(const struct vr_config *c, double r[2])
{
	r[0] = c->functional.angio.range_given ? c->functional.angio.range[0] : 0.0;
	r[1] = c->functional.angio.range_given                ? c->functional.angio.range[1]
	       : c->functional.angio.method == CFG_ANGIO_SVAR ? 100.0
	                                                      : 1.0;
}
/* functional.doppler.axis, or its default: bscan with repeats, ascan without. */
static inline enum cfg_doppler_axis cfg_doppler_axis(const struct vr_config *c)
{
	if (c->functional.doppler.axis_given)
		return c->functional.doppler.axis;
	return c->geometry.repeats > 1 ? CFG_DOPPLER_BSCAN : CFG_DOPPLER_ASCAN;
}
/* The CUDA devices cfg uses, in order, into devs: gpu.devices, or [gpu.device] when that key is
 * absent. \return their number (1..CFG_GPU_DEVICES_MAX). */
static inline uint32_t cfg_gpu_devices(const struct vr_config *c, int devs[CFG_GPU_DEVICES_MAX])
{
	if (!c->gpu.ndevices) {
		devs[0] = c->gpu.device;
		return 1;
	}
	for (uint32_t i = 0; i < c->gpu.ndevices; i++)
		devs[i] = c->gpu.devices[i];
	return c->gpu.ndevices;
}
/* Output volume size [Y, X, Z] (the low-resolution one when mode is none). */
static inline void cfg_out_dims(const struct vr_config *c, uint32_t dims[3])
{
	bool none = c->reconstruct.mode == CFG_RECON_NONE;

	dims[0] = c->geometry.bscans_per_volume * (none ? 1 : c->geometry.stride[1]);
	dims[1] = c->geometry.ascans_per_bscan * (none ? 1 : c->geometry.stride[0]);
	dims[2] = c->geometry.depth_range[1] - c->geometry.depth_range[0];
}
/* The views' defaults for the current output size: the whole depth as slab, the centre as
 * position (what validation fills in when the file gives none; for configurations built in
 * code, after their geometry and mode are set). */
static inline void cfg_view_defaults(struct vr_config *c)
{
	uint32_t d[3];

	cfg_out_dims(c, d);
	c->view.slab[0] = 0;
	c->view.slab[1] = d[2];
	for (int a = 0; a < 3; a++)
		c->view.position[a] = d[a] / 2;
}
/* The render's diagonal D in spacing units, and its sampling step: view.render.step, or for 0
 * (auto) half the smallest spacing, made coarser where that would exceed
 * CFG_RENDER_SAMPLES_MAX samples in one render (docs/configuration.md "Render cost"). */
double cfg_render_diagonal(const struct vr_config *c);
double cfg_render_step(const struct vr_config *c);
/* Voxels of one output volume: Y * X * Z (the low-resolution one when mode is none). */
static inline size_t cfg_out_voxels(const struct vr_config *c)
{
	if (c->reconstruct.mode == CFG_RECON_NONE)
		return (size_t)c->geometry.bscans_per_volume * c->geometry.ascans_per_bscan *
		       cfg_nz(c);
	return (size_t)c->geometry.bscans_per_volume * c->geometry.stride[1] *
	       c->geometry.ascans_per_bscan * c->geometry.stride[0] * cfg_nz(c);
}

/*
 * The voxel size of the output volume in um, [dx, dy, dz] (docs/algorithms.md §6): the field
 * of view over the output's X and Y, and geometry.axial_um_per_pixel or, where that is 0, the
 * one derived from preprocess.resample.wavelength_nm and geometry.refractive_index. An
 * element is 0 where it is unknown (never a guess). Valid only on a validated config.
 */
void cfg_voxel_um(const struct vr_config *c, double um[3]);

/* Fill every field with its default (no file involved). Never fails. */
void cfg_defaults(struct vr_config *cfg);

/*
 * Load, validate and resolve the YAML file at path into *cfg (defaults for absent keys,
 * tables loaded and checked against K). On failure returns a negative errno, writes
 * "FILE:LINE:COLUMN: key.path: what is wrong (what is allowed)" into err, and leaves *cfg
 * holding defaults only (nothing to free beyond cfg_free). The caller owns *cfg and frees it
 * with cfg_free().
 */
VR_MUST_CHECK int cfg_load(struct vr_config *cfg, const char *path, char *err, size_t errlen);

/* Same as cfg_load, from a YAML string; name is used in messages instead of a file name and
 * relative paths resolve against the current directory. */
VR_MUST_CHECK int cfg_load_string(struct vr_config *cfg, const char *yaml, const char *name,
                                  char *err, size_t errlen);

/*
 * Check a configuration built in code (cfg_defaults, then fields set) as a loaded one is
 * checked: each key's value against the schema (type, range, names, shape), then the
 * cross-field rules of validation; tables must hold their data already and files named are not
 * read. Nothing in *cfg changes. Returns 0, or a negative errno with "key.path: what is wrong
 * (what is allowed)" in err. view.slab and view.position are left to the views (a backend
 * checks them when it renders). The benchmark cases pass it (tests/unit/test_bench_cases.c).
 */
VR_MUST_CHECK int cfg_check(const struct vr_config *cfg, char *err, size_t errlen);

/*
 * cfg_check of what a backend computes from: every key and rule but the acquisition's side
 * (source.*, pipeline.* and the B-scan ring's size rules), which says how B-scans reach a
 * backend, not what it computes. Backend creation and live updates pass their configuration
 * through it (backend/backend.c), so that a configuration built in code for a backend alone
 * (offline processing with one epoch of B-scans, tests feeding a backend from scripted
 * sources) is checked against the same schema as a loaded one.
 */
VR_MUST_CHECK int cfg_check_backend(const struct vr_config *cfg, char *err, size_t errlen);

/* Free what cfg_load allocated (tables, shim args); leaves defaults behind. NULL is fine. */
void cfg_free(struct vr_config *cfg);

/* Deep copy (tables and strings duplicated). Returns 0 or -ENOMEM (dst then holds defaults). */
VR_MUST_CHECK int cfg_copy(struct vr_config *dst, const struct vr_config *src);

/* Write the effective configuration as YAML that cfg_load accepts back. */
VR_MUST_CHECK int cfg_dump(const struct vr_config *cfg, FILE *out);

/*
 * True when going from a to b needs a rebuild (geometry, slots, source, backend, devices,
 * endpoints, ...); false when only live parameters differ (dB range, window, dispersion,
 * background mode and threshold, reconstruction weights and mode, log level, status interval).
 */
bool cfg_is_structural_change(const struct vr_config *a, const struct vr_config *b);

/* The enums with names as written in YAML: X(stem, type) for each; cfg_<stem>_name(v) gives
 * the name of a value, for messages and dumps. */
#define CFG_NAMED_ENUMS(X)                                                                         \
	X(backend, enum cfg_backend)                                                               \
	X(source, enum cfg_source)                                                                 \
	X(replay_format, enum cfg_replay_format)                                                   \
	X(crc_error, enum cfg_crc_error)                                                           \
	X(sample, enum cfg_sample)                                                                 \
	X(background, enum cfg_background)                                                         \
	X(resample, enum cfg_resample)                                                             \
	X(window, enum cfg_window)                                                                 \
	X(recon_mode, enum cfg_recon_mode)                                                         \
	X(temporal, enum cfg_temporal)                                                             \
	X(combine, enum cfg_combine)                                                               \
	X(overflow, enum cfg_overflow)                                                             \
	X(channel, enum cfg_channel)                                                               \
	X(angio_method, enum cfg_angio_method)                                                     \
	X(doppler_axis, enum cfg_doppler_axis)                                                     \
	X(log_level, enum cfg_log_level)
#define CFG_NAME_DECL(stem, type) const char *cfg_##stem##_name(type v);
CFG_NAMED_ENUMS(CFG_NAME_DECL)
#undef CFG_NAME_DECL

/* The shim ABI's sample type of a configured one (inline: the simulator and the example shims
 * use it without linking the configuration). */
static inline uint32_t cfg_sample_abi(enum cfg_sample v)
{
	switch (v) {
	case CFG_SAMPLE_U16:
		return VOLREC_SAMPLE_U16;
	case CFG_SAMPLE_I16:
		return VOLREC_SAMPLE_I16;
	case CFG_SAMPLE_U12P:
		return VOLREC_SAMPLE_U12P;
	case CFG_SAMPLE_U12GV:
		return VOLREC_SAMPLE_U12GV;
	default:
		return VOLREC_SAMPLE_F32;
	}
}

/*
 * The rule for preprocess.resample.wavelength_nm: the cubic l[0] + l[1] i + l[2] i^2 + l[3] i^3
 * gives positive, finite wavelengths, strictly monotone over the pixels i = 0..k-1. Returns 0,
 * or -ERANGE / -EINVAL with what is wrong in err ("gives a wavelength of -5 nm at pixel 0
 * (...)", without the key).
 */
VR_MUST_CHECK int cfg_wavelength_check(const double l[4], uint32_t k, char *err, size_t errlen);

/* Whether a and b hold the same configuration (tables and shim args compared by content;
 * source_file ignored). */
bool cfg_equal(const struct vr_config *a, const struct vr_config *b);

/*
 * Change the live keys paths[0..n) of a loaded configuration at run time (the control socket,
 * `volrec set KEY=VALUE`). Each value is YAML text, a scalar or flow value as in the file
 * ("[20, 90]", "tukey", "{type: gauss, param: 0.3}"); a path naming a section replaces the
 * whole section (keys it leaves out return to their defaults). Values are checked exactly as
 * in the file, then the whole configuration is validated on a copy (cross-field rules); files
 * that keys already named are not read again. All or nothing: on failure *cfg is unchanged, a
 * negative errno is returned and err holds "key.path: what is wrong (what is allowed)"; a
 * structural key, or a live one whose change is structural (dispersion on or off, a mode
 * that resizes the output), is refused with -EPERM: it needs the configuration file and a
 * reload. Relative file names resolve against the directory of cfg->source_file.
 */
VR_MUST_CHECK int cfg_set_keys(struct vr_config *cfg, const char *const *paths,
                               const char *const *yaml_values, size_t n, char *err, size_t errlen);

/* The same for any key, structural ones included (command-line overrides of a configuration
 * that is not running yet); files named are checked again. */
VR_MUST_CHECK int cfg_override_keys(struct vr_config *cfg, const char *const *paths,
                                    const char *const *yaml_values, size_t n, char *err,
                                    size_t errlen);

/*
 * One key's value as YAML flow text ("[0, 100]", "hann", "\"/run/volrec\""), or a whole section
 * when path names one ("{type: hann, param: 0.4}"; "" is the whole configuration); an optional
 * key that is not set reads "~". The text, of any length, into *text (malloc'ed: the caller
 * frees it). Returns 0, or -ENOENT for an unknown path ("key.path: unknown key (allowed ...:
 * ...)" in err) or -ENOMEM, *text then untouched.
 */
VR_MUST_CHECK int cfg_get_key(const struct vr_config *cfg, const char *path, char **text, char *err,
                              size_t errlen);

/*
 * Every live key of cfg and its value as one JSON object, flat and in schema order:
 * {"preprocess.background.mode": "ascan_mean", "preprocess.db_range": [0, 100], ...}; an
 * optional key that is not set is null, a table is its file name. The text into *text
 * (malloc'ed: the caller frees it). 0 or -ENOMEM.
 */
VR_MUST_CHECK int cfg_live_json(const struct vr_config *cfg, char **text);

/* Whether path names a live key, or a section of live keys only. */
bool cfg_key_is_live(const char *path);

#endif
