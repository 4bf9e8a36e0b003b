/* SPDX-License-Identifier: MIT */
/*
 * `volrec process`: a blocking run of N epochs of the pipeline engine (pipeline/) on the
 * configured source (replay file, synthetic scanner or shim) with the configured backend, into
 * the HDF5 sink of process_h5.c (docs/algorithms.md; layout in `volrec process --help`). The
 * same engine as volrecd: zero-copy where the source allows it, two epochs in flight on a
 * device; offline it never drops and the first fault ends the run.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/base.h"
#include "config/config.h"
#include "formats/fmt.h"
#include "formats/h5vol.h"
#include "pipeline/pipeline.h"
#include "tools/process.h"

static void process_usage(FILE *f)
{
	fprintf(f,
	        "usage: volrec process -c FILE -o OUT.h5 [-n EPOCHS] [--lowres] [--full]\n"
	        "                      [--backend cpu|cuda|auto]\n"
	        "       volrec process [-c FILE] --source REC.vrr -o OUT.h5 [--on-crc-error "
	        "stop|skip] ...\n\n"
	        "Process the configured source offline and write HDF5:\n"
	        "  /volumes  u8 [n][Y][X][Z]  output volumes (Y = ny*sy, X = nx*sx; ny, nx with\n"
	        "                             reconstruct.mode none)\n"
	        "  /lowres   f32 [n][ny][nx][nz]  with --lowres: L_e, normalized, before "
	        "quantization\n"
	        "  /full     f32 [n][Y][X][Z]     with --full: the output before quantization\n"
	        "  /epoch    u64 [n], /offset u32 [n][2] (ox, oy) of each volume\n"
	        "  /median_depths u32 [n][ny]  with background.mode partial_median: the depths\n"
	        "                             that took the median, per B-scan\n"
	        "  attributes: geometry, stride, depth_range, zero_pad, epochs, backend, device,\n"
	        "  config (the effective configuration as YAML)\n\n"
	        "  -c, --config FILE   configuration (YAML); with --source, instead of the one\n"
	        "                      the recording carries\n"
	        "      --source REC    process the raw recording REC (volrecd's record_start),\n"
	        "                      with its own configuration unless -c is given; /epoch\n"
	        "                      holds the recorded epoch numbers\n"
	        "      --on-crc-error stop|skip  an epoch whose CRC-32C is wrong ends the run\n"
	        "                      (stop, the default) or is left out (skip); each is named\n"
	        "  -o, --output FILE   file to write (replaced): HDF5, or by its suffix OME-Zarr\n"
	        "                      (.zarr, .ome.zarr), NIfTI-2 (.nii, .nii.gz) or OME-TIFF\n"
	        "                      (.ome.tif, .ome.tiff), as `volrec export` writes them\n"
	        "                      from the HDF5 (/volumes only: not with --lowres, --full)\n"
	        "  -n, --epochs N      epochs to process: default all epochs of a replay file,\n"
	        "                      S = sx*sy (one interlacing cycle) for synth and shim "
	        "sources\n"
	        "      --lowres        also write /lowres\n"
	        "      --full          also write /full\n"
	        "      --backend NAME  override the configuration's backend (cpu, cuda, auto)\n"
	        "  -h, --help          this text\n\n"
	        "Exit status: 0 done, 1 failure while running (OUT.h5 then holds the epochs\n"
	        "processed before it; the message says so; another format: nothing is written),\n"
	        "2 usage or configuration error.\n");
}

/* ---- the command ------------------------------------------------------------------------- */

struct proc_opts {
	const char *config, *output, *backend, *source, *on_crc;
	uint64_t epochs; /* 0: default */
	bool lowres, full;
};

static int parse_opts(int argc, char **argv, struct proc_opts *o)
{
	static const struct option longopts[] = {
	        {"config", required_argument, NULL, 'c'},
	        {"output", required_argument, NULL, 'o'},
	        {"epochs", required_argument, NULL, 'n'},
	        {"lowres", no_argument, NULL, 'L'},
	        {"full", no_argument, NULL, 'F'},
	        {"backend", required_argument, NULL, 'B'},
	        {"help", no_argument, NULL, 'h'},
	        {"source", required_argument, NULL, 'S'},
	        {"on-crc-error", required_argument, NULL, 'C'},
	        {NULL, 0, NULL, 0},
	};
	int c;
	const struct vr_cli_str strs[] = {{'c', &o->config},
	                                  {'o', &o->output},
	                                  {'B', &o->backend},
	                                  {'S', &o->source},
	                                  {'C', &o->on_crc}};

	optind = 1;
	while ((c = VR_CLI_GETOPT(argc, argv, "c:o:n:h", longopts, strs)) != -1) {
		switch (c) {
		case 'n':
			if (vr_cli_u64("volrec process", "-n", optarg, 1, UINT64_MAX,
			               "a whole number of epochs >= 1", &o->epochs))
				return VR_EXIT_USAGE;
			break;
		case 'L':
			o->lowres = true;
			break;
		case 'F':
			o->full = true;
			break;
		default:
			return vr_command_usage(process_usage, c);
		}
	}
	if (vr_cli_args_done("volrec process", argc, argv))
		return VR_EXIT_USAGE;
	if (o->on_crc && strcmp(o->on_crc, "stop") && strcmp(o->on_crc, "skip")) {
		fprintf(stderr, "volrec process: --on-crc-error %s: stop or skip\n", o->on_crc);
		return VR_EXIT_USAGE;
	}
	if ((!o->config && !o->source) || !o->output) {
		fprintf(stderr, "volrec process: -c FILE (or --source REC) and -o OUT.h5 are "
		                "required\n");
		process_usage(stderr);
		return VR_EXIT_USAGE;
	}
	if (fmt_kind_of(o->output) != FMT_NONE && (o->lowres || o->full)) {
		fprintf(stderr, "volrec process: --lowres and --full are written to HDF5 only (-o "
		                "OUT.h5)\n");
		return VR_EXIT_USAGE;
	}
	return 0;
}

/* Engine events worth telling a user of the command: notices and worse (a backend fallback, a
 * refused zero-copy path, a source that ended early). */
static void print_event(void *ctx, const struct pl_event *ev)
{
	if (ev->level >= PL_NOTICE && (!ev->name || strcmp(ev->name, "source_ended")))
		fprintf(stderr, "volrec process: %s\n", ev->message);
}

/*
 * -o in another format than HDF5: the volumes go into a processed recording beside it
 * (OUT.partial.h5) that the export engine then copies into OUT, as `volrec export` does; the
 * recording is removed either way. 0 or VR_EXIT_FAIL with the message printed.
 */
static int export_output(const char *h5, const char *out, const char *config)
{
	struct fmt_options fo = {.replace = true, .source = config};
	struct fmt_export_stats st;
	char err[1024];
	int rc = fmt_export(h5, out, &fo, NULL, NULL, NULL, &st, err, sizeof(err));

	unlink(h5);
	if (rc < 0) {
		fprintf(stderr, "volrec process: %s (nothing written to %s)\n", err, out);
		return VR_EXIT_FAIL;
	}
	return 0;
}

VR_COMMAND(process, "process a source offline into an HDF5 file")
{
	struct proc_opts o = {0};
	struct vr_config cfg;
	struct pl_options po = {.src_flags = SRC_UNPACED | SRC_NO_LOOP,
	                        .block = true,
	                        .stop_on_fault = true,
	                        .zero_copy = -1,
	                        .on_event = print_event};
	struct pl_pipeline *pl = NULL;
	struct proc_h5 *h5 = NULL;
	struct pl_sink sink;
	char err[CFG_ERR_MAX] = "";
	uint64_t n, done;
	double t0, elapsed, med_mean;
	uint32_t med_max;
	bool failed, med_ok;
	int ret = VR_EXIT_FAIL, rc;
	char *h5path = NULL; /* where the HDF5 goes: OUT, or OUT.partial.h5 for another format */

	cfg_defaults(&cfg);
	rc = parse_opts(argc, argv, &o);
	if (rc)
		return rc < 0 ? VR_EXIT_OK : rc;
	if (fmt_kind_of(o.output) == FMT_NONE)
		h5path = strdup(o.output);
	else if (asprintf(&h5path, "%s.partial.h5", o.output) < 0)
		h5path = NULL;
	if (!h5path) {
		fprintf(stderr, "volrec process: out of memory\n");
		return VR_EXIT_FAIL;
	}
	/* no exit handler: a file HDF5 failed to write or close would crash the process in it */
	h5vol_init();

	if (o.config ? cfg_load(&cfg, o.config, err, sizeof(err)) < 0
	             : proc_recording_config(o.source, &cfg, err, sizeof(err)) < 0) {
		fprintf(stderr, "volrec process: %s\n", err);
		free(h5path);
		return VR_EXIT_USAGE;
	}
	if (o.source) {
		/* the recording, read once through, whatever source the configuration names */
		cfg.source.type = CFG_SOURCE_REPLAY;
		snprintf(cfg.source.replay.path, sizeof(cfg.source.replay.path), "%s", o.source);
		cfg.source.replay.format = CFG_REPLAY_AUTO;
		cfg.source.replay.loop = false;
		if (o.on_crc)
			cfg.source.replay.on_crc_error =
			        strcmp(o.on_crc, "skip") ? CFG_CRC_STOP : CFG_CRC_SKIP;
		po.src_flags |= SRC_DROP_MARKS; /* epochs left out of the recording are lost */
		if (cfg.source.replay.on_crc_error == CFG_CRC_SKIP) {
			uint64_t bad;
			if (proc_recording_verify(o.source, stderr, &bad, err, sizeof(err)) < 0) {
				fprintf(stderr, "volrec process: %s\n", err);
				goto out_cfg;
			}
		}
	}
	if (o.backend) {
		int b = proc_backend_arg("process", o.backend);
		if (b < 0) {
			ret = VR_EXIT_USAGE;
			goto out_cfg;
		}
		cfg.backend = (enum cfg_backend)b;
	}
	/* the engine's diagnostics switches (docs/operations.md) apply here too */
	po.cfg = &cfg;
	if (pl_options_from_env(&po, err, sizeof(err)) < 0) {
		fprintf(stderr, "volrec process: %s\n", err);
		ret = VR_EXIT_USAGE;
		goto out_cfg;
	}
	rc = pl_open(&po, &pl, err, sizeof(err));
	if (rc < 0) {
		fprintf(stderr, "volrec process: %s\n", err);
		goto out_cfg;
	}
	n = o.epochs               ? o.epochs
	    : pl_source_epochs(pl) ? pl_source_epochs(pl)
	                           : cfg_stride_area(&cfg);
	if (pl_source_epochs(pl) && n > pl_source_epochs(pl)) {
		fprintf(stderr, "volrec process: -n %llu: the replay file holds %llu epochs\n",
		        (unsigned long long)n, (unsigned long long)pl_source_epochs(pl));
		ret = VR_EXIT_USAGE;
		goto out_pl;
	}
	rc = proc_h5_create(h5path, &cfg, pl_backend(pl), n, o.lowres, o.full,
	                    isatty(STDERR_FILENO), &h5, err, sizeof(err));
	if (rc < 0) {
		fprintf(stderr, "volrec process: %s\n", err);
		goto out_pl;
	}
	proc_h5_sink(h5, &sink);
	t0 = vr_mono_s();
	rc = pl_run(pl, &sink, n, err, sizeof(err));
	elapsed = vr_mono_s() - t0;
	done = proc_h5_done(h5);
	failed = rc < 0;
	if (failed)
		fprintf(stderr, "volrec process: %s\n", err);
	else if (done < n)
		fprintf(stderr, "volrec process: the source ended after %llu epochs\n",
		        (unsigned long long)done);
	/* after a failure too: the file then holds the epochs processed before it */
	med_ok = proc_h5_median_depths(h5, &med_mean, &med_max);
	rc = proc_h5_close(h5, err, sizeof(err));
	if (rc < 0) {
		fprintf(stderr, "volrec process: %s\n", err);
		if (strcmp(h5path, o.output))
			unlink(h5path);
		goto out_pl;
	}
	if (strcmp(h5path, o.output)) {
		if (failed || !done) {
			unlink(h5path);
			fprintf(stderr, "volrec process: nothing written to %s\n", o.output);
			goto out_pl;
		}
		if (export_output(h5path, o.output, o.config ? o.config : o.source))
			goto out_pl;
	}
	H5close(); /* every HDF5 object is closed: the library may go */
	if (failed) {
		fprintf(stderr,
		        "volrec process: %s holds the %llu epochs processed before the failure\n",
		        o.output, (unsigned long long)done);
		goto out_pl;
	}
	printf("volrec process: %llu epochs, %llu A-scans in %.3f s (%.0f A-scans/s, %.2f "
	       "epochs/s) on %s -> %s\n",
	       (unsigned long long)done,
	       (unsigned long long)done * cfg.geometry.ascans_per_bscan *
	               cfg.geometry.bscans_per_volume,
	       elapsed,
	       elapsed > 0 ? (double)done * cfg.geometry.ascans_per_bscan *
	                             cfg.geometry.bscans_per_volume / elapsed
	                   : 0.0,
	       elapsed > 0 ? done / elapsed : 0.0, be_device(pl_backend(pl)), o.output);
	if (med_ok)
		printf("volrec process: partial_median (threshold %g): %.2f median depths per "
		       "B-scan on average, at most %u, of %u\n",
		       cfg.preprocess.background.threshold, med_mean, med_max,
		       cfg_fft_len(&cfg) / 2);
	ret = VR_EXIT_OK;
out_pl:
	pl_close(pl);
out_cfg:
	cfg_free(&cfg);
	free(h5path);
	return ret;
}
