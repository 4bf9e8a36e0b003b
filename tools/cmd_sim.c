/* SPDX-License-Identifier: MIT */
/*
 * `volrec sim`: write a replay file (docs/replay-format.md) from the synthetic scanner at the
 * configuration's geometry and source.synth settings, optionally with the ground-truth
 * full-resolution volumes as HDF5.
 */
#include <errno.h>
#include <getopt.h>
#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/tables.h"
#include "base/base.h"
#include "config/config.h"
#include "formats/h5attr.h"
#include "formats/h5vol.h"
#include "sources/sim.h"
#include "sources/sim_scene.h"
#include "sources/source.h"

static const char sim_help[] =
        "usage: volrec sim -c FILE -o OUT [-n EPOCHS] [--truth TRUTH.h5]\n"
        "                  [--format volrec|raw] [--mirror-mm D]\n"
        "\n"
        "Scan the synthetic phantom (source.synth: seed, phantom, motion, snr_db, beam_um)\n"
        "at the configuration's geometry and write the raw spectra as a replay file. Epoch\n"
        "e is scanned at the interlacing offset of e, at time e / source.rate (25 when 0).\n"
        "Phantoms: retina, mirror, tilted, blocked, and the solid phantoms of the motion\n"
        "bench, curved, anterior and skin, and flow (vessels of flowing blood in static\n"
        "tissue, source.synth.flow), which also take the motions tilt_deg_per_s,\n"
        "jump.tilt_deg, periodic and warp (docs/configuration.md).\n"
        "\n"
        "  -c, --config FILE    configuration (YAML)\n"
        "  -o, --output FILE    replay file to write (written beside it, then renamed over\n"
        "                       it: a daemon replaying FILE keeps a whole file)\n"
        "  -n, --epochs N       epochs to write (default S = sx*sy, one interlacing cycle)\n"
        "      --format F       volrec (default: versioned header with the per-epoch offsets\n"
        "                       and YAML metadata naming the scanner's corrections) or raw\n"
        "                       (headerless samples, source.replay.format: raw)\n"
        "      --mirror-mm D    depth of the mirror phantom's reflector in mm, within\n"
        "                       (0, 2) (default 1.0: bin K/4); for k-linearization\n"
        "                       recordings at two depths (volrec calibrate --klin)\n"
        "      --truth FILE     also write HDF5 /truth f32 [n][Y][X][Z]: the image a\n"
        "                       noise-free full-resolution scan of each epoch gives\n"
        "                       through the ideal chain (preprocess.window, FFT with\n"
        "                       zero_pad, magnitude; a unit reflector reads 1, clipped\n"
        "                       to [0, 1]) at every position and output depth bin\n"
        "                       (depth_range), /epoch u64 [n], /offset u32 [n][2];\n"
        "                       the flow phantom adds /vessel u8 [n][Y][X][Z] (0 no\n"
        "                       sample, 1 static tissue, 2 blood) and /velocity f32\n"
        "                       (blood's axial velocity, mm/s, + deeper)\n"
        "  -h, --help           this text\n"
        "\n"
        "Exit status: 0 done, 1 failure while writing, 2 usage or configuration error.\n";

static void sim_usage(FILE *f)
{
	fputs(sim_help, f);
}

enum { T_TRUTH, T_EPOCH, T_OFFSET, T_VESSEL, T_VELOCITY, T_COUNT };

/* The truth file through h5vol (the writer of record and process): /truth f32 [n][Y][X][Z]
 * with the settings that shape it as attributes, /epoch, /offset; a row per epoch. */
static int truth_open(struct h5vol **w, const char *path, uint32_t Y, uint32_t X, uint32_t Z,
                      const struct vr_config *cfg, bool flow, char *err, size_t errlen)
{
	const struct h5vol_field f[T_COUNT] = {
	        [T_TRUTH] = {"truth", H5T_NATIVE_FLOAT, 3, {Y, X, Z}, false},
	        [T_EPOCH] = {"epoch", H5T_NATIVE_UINT64, 0, {0}, false},
	        [T_OFFSET] = {"offset", H5T_NATIVE_UINT32, 1, {2}, false},
	        [T_VESSEL] = {"vessel", H5T_NATIVE_UINT8, 3, {Y, X, Z}, false},
	        [T_VELOCITY] = {"velocity", H5T_NATIVE_FLOAT, 3, {Y, X, Z}, false},
	};
	const uint32_t geo[3] = {cfg->geometry.samples_per_ascan, cfg->geometry.ascans_per_bscan,
	                         cfg->geometry.bscans_per_volume};
	int rc = h5vol_create(path, true, f, flow ? T_COUNT : T_VESSEL, w, err, errlen);
	hid_t d;

	if (rc)
		return rc;
	d = H5Dopen2(h5vol_file(*w), "truth", H5P_DEFAULT);
	rc = d < 0 ? -EIO : vr_h5_attr_u32v(d, "samples_ascans_bscans", geo, 3);
	if (!rc)
		rc = vr_h5_attr_u32v(d, "stride", cfg->geometry.stride, 2);
	if (!rc)
		rc = vr_h5_attr_u32v(d, "depth_range", cfg->geometry.depth_range, 2);
	if (!rc)
		rc = vr_h5_attr_u32v(d, "zero_pad", &cfg->preprocess.zero_pad, 1);
	if (!rc)
		rc = vr_h5_attr_str(d, "window", cfg_window_name(cfg->preprocess.window.type));
	if (!rc)
		rc = vr_h5_attr(d, "window_param", H5T_NATIVE_DOUBLE, 0,
		                &cfg->preprocess.window.param);
	if (d >= 0)
		H5Dclose(d);
	if (!rc && flow) { /* the optics and times the velocities' phases were made with */
		const double n = cfg->geometry.refractive_index > 0 ? cfg->geometry.refractive_index
		                                                    : SIM_FLOW_N;
		const double tb =
		        cfg->geometry.bscan_period_us > 0
		                ? cfg->geometry.bscan_period_us
		                : cfg->geometry.ascan_period_us * cfg->geometry.ascans_per_bscan;
		d = H5Dopen2(h5vol_file(*w), "velocity", H5P_DEFAULT);
		rc = d < 0 ? -EIO : vr_h5_attr_str(d, "unit", "mm/s, positive away from the probe");
		if (!rc)
			rc = vr_h5_attr(d, "center_wavelength_nm", H5T_NATIVE_DOUBLE, 0,
			                &cfg->geometry.center_wavelength_nm);
		if (!rc)
			rc = vr_h5_attr(d, "refractive_index", H5T_NATIVE_DOUBLE, 0, &n);
		if (!rc)
			rc = vr_h5_attr(d, "ascan_period_us", H5T_NATIVE_DOUBLE, 0,
			                &cfg->geometry.ascan_period_us);
		if (!rc)
			rc = vr_h5_attr(d, "bscan_period_us", H5T_NATIVE_DOUBLE, 0, &tb);
		if (d >= 0)
			H5Dclose(d);
	}
	if (!rc)
		rc = h5vol_flush(*w, err, errlen);
	else
		rc = vr_err(err, errlen, rc, "%s: writing the truth's attributes failed", path);
	return rc;
}

/* What the command line asks for. */
struct sim_opts {
	const char *cfg_path, *out, *truth_path;
	uint64_t n_arg; /* -n, 0 = one interlacing cycle */
	bool raw;
	double mirror_mm; /* 0 = the phantom's default */
};

/* One run: the scanner, the replay writer, and the truth file when asked for. */
struct sim_run {
	const struct sim_opts *o;
	struct vr_config cfg;
	struct sim_params p;
	struct sim *sim;
	uint64_t n;             /* epochs to write */
	uint32_t (*offsets)[2]; /* [n] each epoch's interlacing offset */
	void *buf;              /* one B-scan */
	struct src_replay_writer *w;
	struct h5vol *truth;
	float *tvol, *twin; /* one truth volume; the spectral window */
	bool flow;          /* the flow phantom: also its vessels and velocities */
	uint8_t *tves;      /* [Y][X][Z] the flow phantom's labels */
	float *tvel;        /* [Y][X][Z] its axial velocities */
	uint32_t z0, z1;    /* the truth's depth range */
	char err[CFG_ERR_MAX];
};

/* -1 when the options are read into o, else the exit status. */
static int sim_parse_args(int argc, char **argv, struct sim_opts *o)
{
	static const struct option longopts[] = {
	        {"config", required_argument, NULL, 'c'},
	        {"output", required_argument, NULL, 'o'},
	        {"epochs", required_argument, NULL, 'n'},
	        {"truth", required_argument, NULL, 't'},
	        {"mirror-mm", required_argument, NULL, 'm'},
	        {"format", required_argument, NULL, 'f'},
	        VR_CLI_LONGOPTS_END,
	};
	const struct vr_cli_str strs[] = {
	        {'c', &o->cfg_path}, {'o', &o->out}, {'t', &o->truth_path}};
	int c;

	optind = 1;
	while ((c = VR_CLI_GETOPT(argc, argv, "c:o:n:h", longopts, strs)) != -1) {
		switch (c) {
		case 'n':
			if (vr_cli_u64("volrec sim", "-n", optarg, 1, 1000000, "1..1000000 epochs",
			               &o->n_arg))
				return VR_EXIT_USAGE;
			break;
		case 'm': {
			char *end;
			o->mirror_mm = strtod(optarg, &end);
			if (*end || end == optarg ||
			    !(o->mirror_mm > 0 && o->mirror_mm < SIM_DEPTH_MM)) {
				fprintf(stderr,
				        "volrec sim: --mirror-mm %s: expected a depth in mm within "
				        "(0, %g)\n",
				        optarg, SIM_DEPTH_MM);
				return VR_EXIT_USAGE;
			}
			break;
		}
		case 'f':
			if (!strcmp(optarg, "raw")) {
				o->raw = true;
			} else if (strcmp(optarg, "volrec") != 0) {
				fprintf(stderr, "volrec sim: --format %s: expected volrec or raw\n",
				        optarg);
				return VR_EXIT_USAGE;
			}
			break;
		default:
			return vr_cli_usage(sim_usage, c);
		}
	}
	if (vr_command_required("sim", o->cfg_path && o->out, "-c FILE and -o FILE are required",
	                        argc, sim_usage))
		return VR_EXIT_USAGE;
	return -1;
}

/* The replay file's YAML metadata: the scanner's settings and the corrections that undo it. */
static void sim_metadata(struct sim_run *r, char *meta, size_t len)
{
	const struct sim_params *p = &r->p;
	double poly[4], disp[2];
	char solid[1024] = "";

	/* the solid phantoms' motions (the 2.5-D phantoms' metadata stays as it was) */
	if (sim_solid_kind(p->phantom) != SIM_SOLID_NONE)
		snprintf(solid, sizeof(solid),
		         "motion_solid: {tilt_deg_per_s: [%.17g, %.17g], tilt_max_deg: %.17g, "
		         "jump_tilt_deg: [%.17g, %.17g], periodic: {hz: %.17g, shift_mm: [%.17g, "
		         "%.17g, %.17g], deg: [%.17g, %.17g, %.17g]}, warp: {mm: %.17g, radius_mm: "
		         "%.17g, hz: %.17g, centre_mm: [%.17g, %.17g]}}\n",
		         p->tilt_deg_per_s[0], p->tilt_deg_per_s[1], p->tilt_max_deg,
		         p->jump_tilt_deg[0], p->jump_tilt_deg[1], p->periodic_hz,
		         p->periodic_mm[0], p->periodic_mm[1], p->periodic_mm[2],
		         p->periodic_deg[0], p->periodic_deg[1], p->periodic_deg[2], p->warp_mm,
		         p->warp_radius_mm, p->warp_hz, p->warp_centre_mm[0], p->warp_centre_mm[1]);
	if (sim_solid_kind(p->phantom) == SIM_SOLID_FLOW) {
		size_t k = strlen(solid);
		snprintf(solid + k, sizeof(solid) - k,
		         "flow: {peak_mm_per_s: %.17g, direction: %d, bulk_um_per_repeat: %.17g, "
		         "decorrelation_um: %.17g, blood_tau_us: %.17g}\n",
		         p->flow_peak_mm_s, p->flow_direction, p->flow_bulk_um, p->flow_decor_um,
		         p->flow_tau_us);
	}
	sim_resample_poly(r->sim, poly);
	sim_dispersion_coeffs(r->sim, disp);
	snprintf(meta, len,
	         "generator: volrec sim %s\n"
	         "phantom: %s\n"
	         "seed: %llu\n"
	         "deg_per_s: %.17g\n"
	         "shift_mm_per_s: [%.17g, %.17g, %.17g]\n"
	         "jump: {epoch: %llu, shift_mm: [%.17g, %.17g, %.17g], deg: %.17g}\n"
	         "%s"
	         "snr_db: %.17g\n"
	         "beam_um: %.17g\n"
	         "rate: %.17g\n"
	         "bit_shift: %u\n"
	         "mirror_mm: %.17g\n"
	         "# corrections that undo the scanner's k non-linearity and dispersion exactly\n"
	         "resample_poly: [%.17g, %.17g, %.17g, %.17g]\n"
	         "dispersion_coeffs: [%.17g, %.17g]\n",
	         VOLREC_VERSION, p->phantom, (unsigned long long)p->seed, p->deg_per_s,
	         p->shift_mm_per_s[0], p->shift_mm_per_s[1], p->shift_mm_per_s[2],
	         (unsigned long long)p->jump_epoch, p->jump_mm[0], p->jump_mm[1], p->jump_mm[2],
	         p->jump_deg, solid, p->snr_db, p->beam_um, p->rate, p->bit_shift,
	         p->mirror_mm > 0 ? p->mirror_mm : SIM_MIRROR_MM, poly[0], poly[1], poly[2],
	         poly[3], disp[0], disp[1]);
}

/* The replay writer open on the output, with the offsets of every epoch in its header. */
static int sim_open_replay(struct sim_run *r)
{
	const struct sim_params *p = &r->p;
	struct src_replay_info info;
	char meta[4096];

	r->n = r->o->n_arg ? r->o->n_arg : (uint64_t)p->stride_x * p->stride_y;
	r->offsets = calloc(r->n, sizeof(*r->offsets));
	r->buf = malloc(sim_bscan_bytes(r->sim));
	if (!r->offsets || !r->buf) {
		fprintf(stderr, "volrec sim: out of memory\n");
		return -ENOMEM;
	}
	for (uint64_t e = 0; e < r->n; e++)
		vr_scan_offset(e, p->stride_x, p->stride_y, &r->offsets[e][0], &r->offsets[e][1]);
	sim_metadata(r, meta, sizeof(meta));
	memset(&info, 0, sizeof(info));
	info.sample_type = p->sample_type;
	info.samples_per_ascan = p->samples_per_ascan;
	info.ascans_per_bscan = p->ascans_per_bscan;
	info.bscans_per_volume = p->bscans_per_volume;
	info.repeats = r->cfg.geometry.repeats;
	info.epochs = r->n;
	info.stride_x = p->stride_x;
	info.stride_y = p->stride_y;
	info.flags = SRC_REPLAY_FLAG_OFFSETS | (p->bidirectional ? SRC_REPLAY_FLAG_BIDIR : 0);
	int rc = src_replay_writer_open(r->o->out, r->o->raw, &info,
	                                (const uint32_t(*)[2])r->offsets, meta, &r->w, r->err,
	                                sizeof(r->err));
	if (rc)
		fprintf(stderr, "volrec sim: %s\n", r->err);
	return rc;
}

/* The truth file and the buffers its volumes are imaged in, when --truth asks for them. */
static int sim_open_truth(struct sim_run *r)
{
	const struct sim_params *p = &r->p;
	const uint32_t Y = p->bscans_per_volume * p->stride_y,
	               X = p->ascans_per_bscan * p->stride_x;

	r->z0 = r->cfg.geometry.depth_range[0];
	r->z1 = r->cfg.geometry.depth_range[1];
	if (!r->o->truth_path)
		return 0;
	const size_t vox = (size_t)Y * X * (r->z1 - r->z0);
	r->flow = sim_solid_kind(p->phantom) == SIM_SOLID_FLOW;
	r->tvol = malloc(vox * sizeof(float));
	r->twin = malloc(p->samples_per_ascan * sizeof(float));
	if (r->flow) {
		r->tves = malloc(vox);
		r->tvel = malloc(vox * sizeof(float));
	}
	if (!r->tvol || !r->twin || (r->flow && (!r->tves || !r->tvel))) {
		fprintf(stderr, "volrec sim: out of memory for a %u x %u x %u truth volume\n", Y, X,
		        r->z1 - r->z0);
		return -ENOMEM;
	}
	/* the truth is imaged through the spectral window the processing applies */
	be_window_fill(r->cfg.preprocess.window.type, r->cfg.preprocess.window.param,
	               p->samples_per_ascan, r->twin);
	if (truth_open(&r->truth, r->o->truth_path, Y, X, r->z1 - r->z0, &r->cfg, r->flow, r->err,
	               sizeof(r->err))) {
		fprintf(stderr, "volrec sim: %s\n", r->err);
		return -EIO;
	}
	return 0;
}

/* Epoch e scanned into the replay file, and its truth imaged into the truth file. */
static int sim_write_epoch(struct sim_run *r, uint64_t e)
{
	int rc;

	/* each position's repeats in a row, [b][m] (docs/algorithms.md §5) */
	for (uint32_t i = 0; i < r->p.bscans_per_volume * r->cfg.geometry.repeats; i++) {
		uint32_t b = i / r->cfg.geometry.repeats, m = i % r->cfg.geometry.repeats;
		rc = sim_bscan_repeat(r->sim, e, r->offsets[e][0], r->offsets[e][1], b, m, r->buf,
		                      sim_bscan_bytes(r->sim));
		if (!rc)
			rc = src_replay_writer_bscan(r->w, r->buf, sim_bscan_bytes(r->sim), r->err,
			                             sizeof(r->err));
		else
			snprintf(r->err, sizeof(r->err), "B-scan %u of epoch %llu failed", b,
			         (unsigned long long)e);
		if (rc) {
			fprintf(stderr, "volrec sim: %s\n", r->err);
			return rc;
		}
	}
	if (!r->o->truth_path)
		return 0;
	const void *rows[T_COUNT] = {r->tvol, &e, r->offsets[e], r->tves, r->tvel};
	if (sim_truth(r->sim, e, r->cfg.preprocess.zero_pad, r->twin, r->z0, r->z1, r->tvol) ||
	    (r->flow && sim_flow_truth(r->sim, e, r->cfg.preprocess.zero_pad, r->z0, r->z1, r->tves,
	                               r->tvel))) {
		fprintf(stderr, "volrec sim: %s: imaging the truth of epoch %llu failed\n",
		        r->o->truth_path, (unsigned long long)e);
		return -EIO;
	}
	rc = h5vol_append(r->truth, rows, r->err, sizeof(r->err));
	if (rc)
		fprintf(stderr, "volrec sim: %s\n", r->err);
	return rc;
}

/* Both files closed: complete on disk, or an error said. */
static int sim_close_files(struct sim_run *r)
{
	int rc = src_replay_writer_close(r->w, r->err, sizeof(r->err));

	r->w = NULL;
	if (rc) {
		fprintf(stderr, "volrec sim: %s\n", r->err);
		return rc;
	}
	if (!r->o->truth_path)
		return 0;
	rc = h5vol_close(r->truth, r->err, sizeof(r->err));
	r->truth = NULL;
	if (rc) {
		fprintf(stderr, "volrec sim: %s\n", r->err);
		remove(r->o->truth_path);
	}
	return rc;
}

VR_COMMAND(sim, "write a replay file from the synthetic scanner")
{
	struct sim_opts o = {0};
	struct sim_run r = {.o = &o};
	int rc, ret = VR_EXIT_FAIL;

	h5vol_init();
	cfg_defaults(&r.cfg);
	rc = sim_parse_args(argc, argv, &o);
	if (rc >= 0)
		return rc;
	rc = cfg_load(&r.cfg, o.cfg_path, r.err, sizeof(r.err));
	if (rc) {
		fprintf(stderr, "volrec sim: %s\n", r.err);
		return VR_EXIT_USAGE;
	}
	sim_params_from_config(&r.p, &r.cfg);
	if (o.mirror_mm > 0) /* --mirror-mm over source.synth.mirror_mm */
		r.p.mirror_mm = o.mirror_mm;
	rc = sim_create(&r.p, &r.sim, r.err, sizeof(r.err));
	if (rc) {
		fprintf(stderr, "volrec sim: %s: %s\n", o.cfg_path, r.err);
		ret = VR_EXIT_USAGE;
		goto out;
	}
	if (sim_open_replay(&r) || sim_open_truth(&r))
		goto out;
	double t0 = vr_mono_s();
	for (uint64_t e = 0; e < r.n; e++)
		if (sim_write_epoch(&r, e))
			goto out;
	if (sim_close_files(&r))
		goto out;
	double dt = vr_mono_s() - t0;
	fprintf(stderr,
	        "volrec sim: wrote %llu epochs of %u x %u A-scans x %u samples to %s (%s) in %.2f "
	        "s%s%s\n",
	        (unsigned long long)r.n, r.p.bscans_per_volume, r.p.ascans_per_bscan,
	        r.p.samples_per_ascan, o.out, o.raw ? "raw" : "volrec format", dt,
	        o.truth_path ? ", truth in " : "", o.truth_path ? o.truth_path : "");
	ret = VR_EXIT_OK;
out:
	src_replay_writer_abort(r.w);
	if (r.truth) {
		h5vol_close(r.truth, NULL, 0);
		remove(o.truth_path); /* unfinished */
	}
	free(r.tvol);
	free(r.twin);
	free(r.tves);
	free(r.tvel);
	free(r.buf);
	free(r.offsets);
	sim_destroy(r.sim);
	cfg_free(&r.cfg);
	return ret;
}
