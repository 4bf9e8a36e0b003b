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
#include "sources/source.h"

static const char sim_help[] =
        "usage: volrec sim -c FILE -o OUT [-n EPOCHS] [--truth TRUTH.h5]\n"
        "                  [--format volrec|raw] [--mirror-mm D]\n"
        "\n"
        "Scan the synthetic retina phantom (source.synth: seed, phantom, motion, snr_db) at\n"
        "the configuration's geometry and write the raw spectra as a replay file. Epoch e is\n"
        "scanned at the interlacing offset of e, at time e / source.rate (25 when 0).\n"
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
        "                       (depth_range), /epoch u64 [n], /offset u32 [n][2]\n"
        "  -h, --help           this text\n"
        "\n"
        "Exit status: 0 done, 1 failure while writing, 2 usage or configuration error.\n";

static void sim_usage(FILE *f)
{
	fputs(sim_help, f);
}

enum { T_TRUTH, T_EPOCH, T_OFFSET, T_COUNT };

/* The truth file through h5vol (the writer of record and process): /truth f32 [n][Y][X][Z]
 * with the settings that shape it as attributes, /epoch, /offset; a row per epoch. */
static int truth_open(struct h5vol **w, const char *path, uint32_t Y, uint32_t X, uint32_t Z,
                      const struct vr_config *cfg, char *err, size_t errlen)
{
	const struct h5vol_field f[T_COUNT] = {
	        [T_TRUTH] = {"truth", H5T_NATIVE_FLOAT, 3, {Y, X, Z}, false},
	        [T_EPOCH] = {"epoch", H5T_NATIVE_UINT64, 0, {0}, false},
	        [T_OFFSET] = {"offset", H5T_NATIVE_UINT32, 1, {2}, false},
	};
	const uint32_t geo[3] = {cfg->geometry.samples_per_ascan, cfg->geometry.ascans_per_bscan,
	                         cfg->geometry.bscans_per_volume};
	int rc = h5vol_create(path, true, f, T_COUNT, w, err, errlen);
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
	if (!rc)
		rc = h5vol_flush(*w, err, errlen);
	else
		rc = vr_err(err, errlen, rc, "%s: writing the truth's attributes failed", path);
	return rc;
}

VR_COMMAND(sim, "write a replay file from the synthetic scanner")
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
	const char *cfg_path = NULL, *out = NULL, *truth_path = NULL;
	struct h5vol *truth = NULL;
	struct src_replay_writer *w = NULL;
	struct src_replay_info info;
	struct sim_params p;
	struct vr_config cfg;
	struct sim *sim = NULL;
	uint32_t(*offsets)[2] = NULL;
	float *tvol = NULL, *twin = NULL;
	void *buf = NULL;
	char err[CFG_ERR_MAX], meta[2048];
	uint64_t n_arg = 0;
	bool raw = false;
	double mirror_mm = 0;
	int c, rc, ret = VR_EXIT_FAIL;

	h5vol_init();
	cfg_defaults(&cfg);
	const struct vr_cli_str strs[] = {{'c', &cfg_path}, {'o', &out}, {'t', &truth_path}};
	optind = 1;
	while ((c = VR_CLI_GETOPT(argc, argv, "c:o:n:h", longopts, strs)) != -1) {
		switch (c) {
		case 'n':
			if (vr_cli_u64("volrec sim", "-n", optarg, 1, 1000000, "1..1000000 epochs",
			               &n_arg))
				return VR_EXIT_USAGE;
			break;
		case 'm': {
			char *end;
			mirror_mm = strtod(optarg, &end);
			if (*end || end == optarg || !(mirror_mm > 0 && mirror_mm < SIM_DEPTH_MM)) {
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
				raw = true;
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
	if (vr_command_required("sim", cfg_path && out, "-c FILE and -o FILE are required", argc,
	                        sim_usage))
		return VR_EXIT_USAGE;
	rc = cfg_load(&cfg, cfg_path, err, sizeof(err));
	if (rc) {
		fprintf(stderr, "volrec sim: %s\n", err);
		return VR_EXIT_USAGE;
	}
	sim_params_from_config(&p, &cfg);
	if (mirror_mm > 0) /* --mirror-mm over source.synth.mirror_mm */
		p.mirror_mm = mirror_mm;
	rc = sim_create(&p, &sim, err, sizeof(err));
	if (rc) {
		fprintf(stderr, "volrec sim: %s: %s\n", cfg_path, err);
		ret = VR_EXIT_USAGE;
		goto out;
	}
	const uint32_t sx = p.stride_x, sy = p.stride_y, ny = p.bscans_per_volume;
	const uint64_t n = n_arg ? n_arg : (uint64_t)sx * sy;
	offsets = calloc(n, sizeof(*offsets));
	buf = malloc(sim_bscan_bytes(sim));
	if (!offsets || !buf) {
		fprintf(stderr, "volrec sim: out of memory\n");
		goto out;
	}
	for (uint64_t e = 0; e < n; e++)
		vr_scan_offset(e, sx, sy, &offsets[e][0], &offsets[e][1]);

	double poly[4], disp[2];
	sim_resample_poly(sim, poly);
	sim_dispersion_coeffs(sim, disp);
	snprintf(meta, sizeof(meta),
	         "generator: volrec sim %s\n"
	         "phantom: %s\n"
	         "seed: %llu\n"
	         "deg_per_s: %.17g\n"
	         "shift_mm_per_s: [%.17g, %.17g, %.17g]\n"
	         "jump: {epoch: %llu, shift_mm: [%.17g, %.17g, %.17g], deg: %.17g}\n"
	         "snr_db: %.17g\n"
	         "beam_um: %.17g\n"
	         "rate: %.17g\n"
	         "bit_shift: %u\n"
	         "mirror_mm: %.17g\n"
	         "# corrections that undo the scanner's k non-linearity and dispersion exactly\n"
	         "resample_poly: [%.17g, %.17g, %.17g, %.17g]\n"
	         "dispersion_coeffs: [%.17g, %.17g]\n",
	         VOLREC_VERSION, p.phantom, (unsigned long long)p.seed, p.deg_per_s,
	         p.shift_mm_per_s[0], p.shift_mm_per_s[1], p.shift_mm_per_s[2],
	         (unsigned long long)p.jump_epoch, p.jump_mm[0], p.jump_mm[1], p.jump_mm[2],
	         p.jump_deg, p.snr_db, p.beam_um, p.rate, p.bit_shift,
	         p.mirror_mm > 0 ? p.mirror_mm : SIM_MIRROR_MM, poly[0], poly[1], poly[2], poly[3],
	         disp[0], disp[1]);

	memset(&info, 0, sizeof(info));
	info.sample_type = p.sample_type;
	info.samples_per_ascan = p.samples_per_ascan;
	info.ascans_per_bscan = p.ascans_per_bscan;
	info.bscans_per_volume = ny;
	info.epochs = n;
	info.stride_x = sx;
	info.stride_y = sy;
	info.flags = SRC_REPLAY_FLAG_OFFSETS | (p.bidirectional ? SRC_REPLAY_FLAG_BIDIR : 0);
	rc = src_replay_writer_open(out, raw, &info, (const uint32_t(*)[2])offsets, meta, &w, err,
	                            sizeof(err));
	if (rc) {
		fprintf(stderr, "volrec sim: %s\n", err);
		goto out;
	}

	const uint32_t Y = ny * sy, X = p.ascans_per_bscan * sx;
	const uint32_t z0 = cfg.geometry.depth_range[0], z1 = cfg.geometry.depth_range[1];
	if (truth_path) {
		tvol = malloc((size_t)Y * X * (z1 - z0) * sizeof(float));
		twin = malloc(p.samples_per_ascan * sizeof(float));
		if (!tvol || !twin) {
			fprintf(stderr,
			        "volrec sim: out of memory for a %u x %u x %u truth volume\n", Y, X,
			        z1 - z0);
			goto out;
		}
		/* the truth is imaged through the spectral window the processing applies */
		be_window_fill(cfg.preprocess.window.type, cfg.preprocess.window.param,
		               p.samples_per_ascan, twin);
		if (truth_open(&truth, truth_path, Y, X, z1 - z0, &cfg, err, sizeof(err))) {
			fprintf(stderr, "volrec sim: %s\n", err);
			goto out;
		}
	}

	double t0 = vr_mono_s();
	for (uint64_t e = 0; e < n; e++) {
		for (uint32_t b = 0; b < ny; b++) {
			rc = sim_bscan(sim, e, offsets[e][0], offsets[e][1], b, buf,
			               sim_bscan_bytes(sim));
			if (!rc)
				rc = src_replay_writer_bscan(w, buf, sim_bscan_bytes(sim), err,
				                             sizeof(err));
			else
				snprintf(err, sizeof(err), "B-scan %u of epoch %llu failed", b,
				         (unsigned long long)e);
			if (rc) {
				fprintf(stderr, "volrec sim: %s\n", err);
				goto out;
			}
		}
		if (truth_path) {
			const void *rows[T_COUNT] = {tvol, &e, offsets[e]};
			if (sim_truth(sim, e, cfg.preprocess.zero_pad, twin, z0, z1, tvol)) {
				fprintf(stderr,
				        "volrec sim: %s: imaging the truth of epoch %llu failed\n",
				        truth_path, (unsigned long long)e);
				goto out;
			}
			if (h5vol_append(truth, rows, err, sizeof(err))) {
				fprintf(stderr, "volrec sim: %s\n", err);
				goto out;
			}
		}
	}
	rc = src_replay_writer_close(w, err, sizeof(err));
	w = NULL;
	if (rc) {
		fprintf(stderr, "volrec sim: %s\n", err);
		goto out;
	}
	if (truth_path) {
		rc = h5vol_close(truth, err, sizeof(err));
		truth = NULL;
		if (rc) {
			fprintf(stderr, "volrec sim: %s\n", err);
			remove(truth_path);
			goto out;
		}
	}
	double dt = vr_mono_s() - t0;
	fprintf(stderr,
	        "volrec sim: wrote %llu epochs of %u x %u A-scans x %u samples to %s (%s) in %.2f "
	        "s%s%s\n",
	        (unsigned long long)n, ny, p.ascans_per_bscan, p.samples_per_ascan, out,
	        raw ? "raw" : "volrec format", dt, truth_path ? ", truth in " : "",
	        truth_path ? truth_path : "");
	ret = VR_EXIT_OK;
out:
	src_replay_writer_abort(w);
	if (truth) {
		h5vol_close(truth, NULL, 0);
		remove(truth_path); /* unfinished */
	}
	free(tvol);
	free(twin);
	free(buf);
	free(offsets);
	sim_destroy(sim);
	cfg_free(&cfg);
	return ret;
}
