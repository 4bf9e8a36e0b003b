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
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/base.h"
#include "config/config.h"
#include "formats/fmt.h"
#include "formats/h5vol.h"
#include "pipeline/pipeline.h"
#include "sources/recording.h"
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
	        "  /angio, /doppler  u8 [n][Y][X][Z]  the channels of output.channels other than\n"
	        "            the structure (/volumes only when structure is one of them); with\n"
	        "            --lowres also /lowres_angio (v) and /lowres_doppler (phase, rad),\n"
	        "            with --full /full_angio and /full_doppler\n"
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
	        "      --frames A:B    with --source: only the recording's frames A..B-1 (its\n"
	        "                      recorded epochs, from 0), as volumes A..B-1 of a whole run\n"
	        "      --warm-up W     with --frames: process the W frames before A first, for\n"
	        "                      the reconstruction history, without writing them\n"
	        "      --into IMAGE    with --frames, instead of -o: write the volumes as time\n"
	        "                      points A..B-1 of IMAGE, an OME-Zarr image of the whole\n"
	        "                      recording made by `volrec reprocess` (man volrec)\n"
	        "      --codec NAME    OME-Zarr chunks' codec (-o OUT.zarr, --into): zstd (the\n"
	        "                      default), lz4 or none (raw), as `volrec export --codec`;\n"
	        "                      with --into it must be the image's (its .zarray)\n"
	        "      --report FILE   write what was done as JSON (backend, device, volumes,\n"
	        "                      warm_up, seconds, missing_ascans) into FILE\n"
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
	const char *config, *output, *backend, *source, *on_crc, *frames, *into, *report;
	const char *codec_name;
	enum fmt_codec codec; /* --codec: FMT_CODEC_DEFAULT when not given */
	uint64_t epochs;      /* 0: default */
	uint64_t warm_up;
	bool have_warm_up;
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
	        {"frames", required_argument, NULL, 'R'},
	        {"warm-up", required_argument, NULL, 'W'},
	        {"into", required_argument, NULL, 'I'},
	        {"report", required_argument, NULL, 'P'},
	        {"codec", required_argument, NULL, 'Z'},
	        {NULL, 0, NULL, 0},
	};
	int c;
	const struct vr_cli_str strs[] = {
	        {'c', &o->config}, {'o', &o->output}, {'B', &o->backend},
	        {'S', &o->source}, {'C', &o->on_crc}, {'R', &o->frames},
	        {'I', &o->into},   {'P', &o->report}, {'Z', &o->codec_name}};

	optind = 1;
	while ((c = VR_CLI_GETOPT(argc, argv, "c:o:n:h", longopts, strs)) != -1) {
		switch (c) {
		case 'n':
			if (vr_cli_u64("volrec process", "-n", optarg, 1, UINT64_MAX,
			               "a whole number of epochs >= 1", &o->epochs))
				return VR_EXIT_USAGE;
			break;
		case 'W':
			if (vr_cli_u64("volrec process", "--warm-up", optarg, 0, UINT64_MAX,
			               "a whole number of frames", &o->warm_up))
				return VR_EXIT_USAGE;
			o->have_warm_up = true;
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
	if (o->codec_name) {
		char err[256];

		if (fmt_codec_parse(o->codec_name, &o->codec, err, sizeof(err)) < 0) {
			fprintf(stderr, "volrec process: %s\n", err);
			return VR_EXIT_USAGE;
		}
		if (!o->into && (!o->output || fmt_kind_of(o->output) != FMT_ZARR)) {
			fprintf(stderr,
			        "volrec process: --codec is for OME-Zarr outputs (-o OUT.zarr, "
			        "-o OUT.ome.zarr, --into)\n");
			return VR_EXIT_USAGE;
		}
	}
	if ((o->frames || o->into) && !o->source) {
		fprintf(stderr, "volrec process: --frames and --into are for a recording (--source "
		                "REC)\n");
		return VR_EXIT_USAGE;
	}
	if ((o->into || o->have_warm_up) && !o->frames) {
		fprintf(stderr, "volrec process: --into and --warm-up need --frames A:B\n");
		return VR_EXIT_USAGE;
	}
	if (o->frames && o->epochs) {
		fprintf(stderr, "volrec process: -n and --frames exclude each other\n");
		return VR_EXIT_USAGE;
	}
	if (o->into && (o->output || o->lowres || o->full)) {
		fprintf(stderr,
		        "volrec process: --into writes the OME-Zarr image only (not with -o, "
		        "--lowres, --full)\n");
		return VR_EXIT_USAGE;
	}
	if (o->into)
		return 0;
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

/* ---- a part of a recording: --frames A:B [--warm-up W] [--into IMAGE] ------------------------ */

struct part {
	uint64_t a, b, w;        /* frames a..b-1, after w frames of warm-up */
	struct src_rec_frame *f; /* the recording's index */
	uint64_t nf;             /* its frames */
	uint64_t epochs;         /* pipeline epochs from the warm-up's first to frame b-1's */
	uint64_t start_epoch;    /* frame a's epoch: the first volume written */
};

/* Read the recording's index and check --frames and --warm-up against it; the pipeline then
 * starts at the warm-up's first epoch. 0 or VR_EXIT_USAGE / VR_EXIT_FAIL with the message
 * printed. */
static int part_setup(const struct proc_opts *o, struct part *p, struct pl_options *po)
{
	struct src_replay_info info;
	char err[1024], *end;
	unsigned long long a, b;

	errno = 0;
	a = strtoull(o->frames, &end, 10);
	if (errno || end == o->frames || *end != ':' || o->frames[0] == '-') {
		fprintf(stderr, "volrec process: --frames %s: A:B, frames A to B-1\n", o->frames);
		return VR_EXIT_USAGE;
	}
	b = strtoull(end + 1, &end, 10);
	if (errno || *end || b <= a) {
		fprintf(stderr, "volrec process: --frames %s: A:B with A < B\n", o->frames);
		return VR_EXIT_USAGE;
	}
	if (src_rec_index_read(o->source, &info, &p->f, &p->nf, err, sizeof(err)) < 0) {
		fprintf(stderr, "volrec process: %s\n", err);
		return VR_EXIT_FAIL;
	}
	if (b > p->nf || o->warm_up > a) {
		fprintf(stderr,
		        "volrec process: --frames %s --warm-up %llu: %s holds frames 0..%llu%s\n",
		        o->frames, (unsigned long long)o->warm_up, o->source,
		        (unsigned long long)(p->nf - 1),
		        o->warm_up > a ? " (the warm-up cannot begin before frame 0)" : "");
		return VR_EXIT_USAGE;
	}
	p->a = a;
	p->b = b;
	p->w = o->warm_up;
	p->start_epoch = p->f[a].epoch;
	p->epochs = p->f[b - 1].epoch - p->f[a - p->w].epoch + 1;
	po->skip_epochs = p->f[a - p->w].epoch - p->f[0].epoch;
	return 0;
}

/* A-scans of the volumes processed (warm-up included) that held a non-finite sample. */
static uint64_t missing_ascans(struct pl_pipeline *pl)
{
	struct pl_stats st;

	pl_stats(pl, &st);
	return st.c.missing_ascans;
}

/* Say how many A-scans were missing (docs/algorithms.md §1.0), when any were. */
static void print_missing(struct pl_pipeline *pl)
{
	uint64_t n = missing_ascans(pl);

	if (n)
		printf("volrec process: %llu A-scans held a NaN or an infinity: each was "
		       "reconstructed from its neighbours\n",
		       (unsigned long long)n);
}

/* --report FILE: what was done, as JSON. 0 or VR_EXIT_FAIL with the message printed. */
static int write_report(const char *path, struct pl_pipeline *pl, uint64_t volumes, uint64_t warm,
                        double seconds)
{
	struct json_object *o = json_object_new_object();
	struct be_backend *be = pl_backend(pl);
	int rc;

	json_object_object_add(o, "backend", json_object_new_string(be_name(be)));
	json_object_object_add(o, "device", json_object_new_string(be_device(be)));
	json_object_object_add(o, "volumes", json_object_new_int64((int64_t)volumes));
	json_object_object_add(o, "warm_up", json_object_new_int64((int64_t)warm));
	json_object_object_add(o, "seconds", json_object_new_double(seconds));
	json_object_object_add(o, "missing_ascans",
	                       json_object_new_int64((int64_t)missing_ascans(pl)));
	json_object_object_add(o, "volrec_version", json_object_new_string(VOLREC_VERSION));
	rc = json_object_to_file_ext(path, o, JSON_C_TO_STRING_PLAIN);
	json_object_put(o);
	if (rc < 0) {
		fprintf(stderr, "volrec process: --report %s: cannot write it\n", path);
		return VR_EXIT_FAIL;
	}
	return 0;
}

/* --into IMAGE: the part's volumes into the image's time points. An exit status. */
static int run_into(const struct proc_opts *o, const struct vr_config *cfg, struct pl_pipeline *pl,
                    const struct part *p)
{
	struct proc_into *into = NULL;
	struct proc_warm warm = {.start_epoch = p->start_epoch};
	struct pl_sink sink;
	char err[CFG_ERR_MAX] = "";
	double t0, elapsed;
	uint64_t done;
	int rc;

	rc = proc_into_open(o->into, cfg, pl_backend(pl), p->f, p->nf, p->a, p->b, o->codec, &into,
	                    err, sizeof(err));
	if (rc < 0) {
		fprintf(stderr, "volrec process: %s\n", err);
		return VR_EXIT_FAIL;
	}
	proc_into_sink(into, &warm.inner);
	proc_warm_sink(&warm, &sink);
	t0 = vr_mono_s();
	rc = pl_run(pl, &sink, p->epochs, err, sizeof(err));
	done = proc_into_next(into) - p->a;
	if (rc < 0) {
		fprintf(stderr, "volrec process: %s\n", err);
		proc_into_close(into, NULL, 0);
		return VR_EXIT_FAIL;
	}
	rc = proc_into_close(into, err, sizeof(err));
	elapsed = vr_mono_s() - t0;
	if (rc < 0) {
		fprintf(stderr, "volrec process: %s\n", err);
		return VR_EXIT_FAIL;
	}
	if (done != p->b - p->a) {
		fprintf(stderr,
		        "volrec process: %s: %llu of the %llu volumes of frames %llu..%llu came "
		        "(the source ended early)\n",
		        o->into, (unsigned long long)done, (unsigned long long)(p->b - p->a),
		        (unsigned long long)p->a, (unsigned long long)(p->b - 1));
		return VR_EXIT_FAIL;
	}
	printf("volrec process: frames %llu..%llu (after %llu of warm-up) in %.3f s (%.2f "
	       "volumes/s) on %s -> %s\n",
	       (unsigned long long)p->a, (unsigned long long)(p->b - 1),
	       (unsigned long long)warm.warm, elapsed, elapsed > 0 ? done / elapsed : 0.0,
	       be_device(pl_backend(pl)), o->into);
	print_missing(pl);
	if (o->report)
		return write_report(o->report, pl, done, warm.warm, elapsed);
	return VR_EXIT_OK;
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
static int export_output(const char *h5, const char *out, const char *config, enum fmt_codec codec)
{
	struct fmt_options fo = {.replace = true, .source = config, .codec = codec};
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

/* Where the HDF5 goes: OUT, or OUT.partial.h5 for another format (with --into unused: a part
 * goes into the image). NULL when out of memory. */
static char *h5_path(const struct proc_opts *o)
{
	char *path = NULL;

	if (o->into)
		path = strdup(o->into);
	else if (fmt_kind_of(o->output) == FMT_NONE)
		path = strdup(o->output);
	else if (asprintf(&path, "%s.partial.h5", o->output) < 0)
		path = NULL;
	return path;
}

/* The configuration (-c FILE, else the recording's) and what the options change in it and in
 * the engine's options: the recording as the source, the backend, the diagnostics switches,
 * the part of the recording. 0 or an exit status with the message printed. */
static int configure_run(const struct proc_opts *o, struct vr_config *cfg, struct pl_options *po,
                         struct part *part)
{
	char err[CFG_ERR_MAX] = "";

	if (o->source) {
		/* the recording, read once through, whatever source the configuration names */
		cfg->source.type = CFG_SOURCE_REPLAY;
		snprintf(cfg->source.replay.path, sizeof(cfg->source.replay.path), "%s", o->source);
		cfg->source.replay.format = CFG_REPLAY_AUTO;
		cfg->source.replay.loop = false;
		if (o->on_crc)
			cfg->source.replay.on_crc_error =
			        strcmp(o->on_crc, "skip") ? CFG_CRC_STOP : CFG_CRC_SKIP;
		po->src_flags |= SRC_DROP_MARKS; /* epochs left out of the recording are lost */
		if (cfg->source.replay.on_crc_error == CFG_CRC_SKIP) {
			uint64_t bad;
			if (proc_recording_verify(o->source, stderr, &bad, err, sizeof(err)) < 0) {
				fprintf(stderr, "volrec process: %s\n", err);
				return VR_EXIT_FAIL;
			}
		}
	}
	if (o->backend) {
		int b = proc_backend_arg("process", o->backend);
		if (b < 0)
			return VR_EXIT_USAGE;
		cfg->backend = (enum cfg_backend)b;
	}
	/* the engine's diagnostics switches (docs/operations.md) apply here too */
	po->cfg = cfg;
	if (pl_options_from_env(po, err, sizeof(err)) < 0) {
		fprintf(stderr, "volrec process: %s\n", err);
		return VR_EXIT_USAGE;
	}
	if (o->frames)
		return part_setup(o, part, po);
	return 0;
}

/* What a run into HDF5 did. */
struct h5_run {
	uint64_t n;            /* epochs asked of the engine */
	uint64_t done;         /* volumes written */
	double elapsed;        /* seconds of pl_run */
	bool failed;           /* pl_run failed */
	bool med_ok;           /* median depths were taken: */
	double med_mean;       /* their mean per B-scan */
	uint32_t med_max;      /* and their most */
	struct proc_warm warm; /* with --frames: the warm-up's volumes, processed, not written */
};

/* Run the engine into the HDF5 file h5path and close it. 0, or VR_EXIT_FAIL when the file
 * could not be made or closed (a partial file is then removed), with the message printed. */
static int run_into_h5(const struct proc_opts *o, const struct vr_config *cfg,
                       struct pl_pipeline *pl, const struct part *part, const char *h5path,
                       struct h5_run *r)
{
	const uint64_t volumes = o->frames ? part->b - part->a : r->n;
	struct proc_h5 *h5 = NULL;
	struct pl_sink sink;
	char err[CFG_ERR_MAX] = "";
	double t0;
	int rc;

	rc = proc_h5_create(h5path, cfg, pl_backend(pl), volumes, o->lowres, o->full,
	                    isatty(STDERR_FILENO), &h5, err, sizeof(err));
	if (rc < 0) {
		fprintf(stderr, "volrec process: %s\n", err);
		return VR_EXIT_FAIL;
	}
	proc_h5_sink(h5, &sink);
	if (o->frames) {
		/* the warm-up's volumes are processed, not written */
		r->warm.inner = sink;
		r->warm.start_epoch = part->start_epoch;
		proc_warm_sink(&r->warm, &sink);
	}
	t0 = vr_mono_s();
	rc = pl_run(pl, &sink, r->n, err, sizeof(err));
	r->elapsed = vr_mono_s() - t0;
	r->done = proc_h5_done(h5);
	r->failed = rc < 0;
	if (r->failed)
		fprintf(stderr, "volrec process: %s\n", err);
	else if (r->done < volumes)
		fprintf(stderr, "volrec process: the source ended after %llu epochs\n",
		        (unsigned long long)r->done);
	/* after a failure too: the file then holds the epochs processed before it */
	r->med_ok = proc_h5_median_depths(h5, &r->med_mean, &r->med_max);
	rc = proc_h5_close(h5, err, sizeof(err));
	if (rc < 0) {
		fprintf(stderr, "volrec process: %s\n", err);
		if (strcmp(h5path, o->output))
			unlink(h5path);
		return VR_EXIT_FAIL;
	}
	return 0;
}

/* What a run that wrote every volume did, on stdout. */
static void print_summary(const struct vr_config *cfg, struct pl_pipeline *pl, const char *output,
                          const struct h5_run *r)
{
	const uint64_t ascans = (uint64_t)cfg->geometry.ascans_per_bscan * cfg_raw_bscans(cfg);

	printf("volrec process: %llu epochs, %llu A-scans in %.3f s (%.0f A-scans/s, %.2f "
	       "epochs/s) on %s -> %s\n",
	       (unsigned long long)r->done, (unsigned long long)r->done * ascans, r->elapsed,
	       r->elapsed > 0 ? (double)r->done * ascans / r->elapsed : 0.0,
	       r->elapsed > 0 ? r->done / r->elapsed : 0.0, be_device(pl_backend(pl)), output);
	if (r->med_ok)
		printf("volrec process: partial_median (threshold %g): %.2f median depths per "
		       "B-scan on average, at most %u, of %u\n",
		       cfg->preprocess.background.threshold, r->med_mean, r->med_max,
		       cfg_fft_len(cfg) / 2);
	print_missing(pl);
}

/* -o OUT: the epochs into HDF5 (h5path), then into OUT's format when it is another. An exit
 * status. */
static int run_output(const struct proc_opts *o, const struct vr_config *cfg,
                      struct pl_pipeline *pl, const struct part *part, const char *h5path)
{
	struct h5_run r = {0};

	r.n = o->frames              ? part->epochs
	      : o->epochs            ? o->epochs
	      : pl_source_epochs(pl) ? pl_source_epochs(pl)
	                             : cfg_stride_area(cfg);
	if (pl_source_epochs(pl) && r.n > pl_source_epochs(pl)) {
		fprintf(stderr, "volrec process: -n %llu: the replay file holds %llu epochs\n",
		        (unsigned long long)r.n, (unsigned long long)pl_source_epochs(pl));
		return VR_EXIT_USAGE;
	}
	if (run_into_h5(o, cfg, pl, part, h5path, &r))
		return VR_EXIT_FAIL;
	if (strcmp(h5path, o->output)) {
		if (r.failed || !r.done) {
			unlink(h5path);
			fprintf(stderr, "volrec process: nothing written to %s\n", o->output);
			return VR_EXIT_FAIL;
		}
		if (export_output(h5path, o->output, o->config ? o->config : o->source, o->codec))
			return VR_EXIT_FAIL;
	}
	H5close(); /* every HDF5 object is closed: the library may go */
	if (r.failed) {
		fprintf(stderr,
		        "volrec process: %s holds the %llu epochs processed before the failure\n",
		        o->output, (unsigned long long)r.done);
		return VR_EXIT_FAIL;
	}
	print_summary(cfg, pl, o->output, &r);
	return o->report ? write_report(o->report, pl, r.done, r.warm.warm, r.elapsed) : VR_EXIT_OK;
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
	struct part part = {0};
	char err[CFG_ERR_MAX] = "";
	int ret, rc;
	char *h5path; /* where the HDF5 goes: OUT, or OUT.partial.h5 for another format */

	cfg_defaults(&cfg);
	rc = parse_opts(argc, argv, &o);
	if (rc)
		return rc < 0 ? VR_EXIT_OK : rc;
	h5path = h5_path(&o);
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
	ret = configure_run(&o, &cfg, &po, &part);
	if (ret)
		goto out_cfg;
	if (cfg_functional(&cfg) && o.into) {
		fprintf(stderr,
		        "volrec process: output.channels other than [structure] are not written "
		        "into an OME-Zarr image part by part (--into); -o OUT writes them\n");
		ret = VR_EXIT_USAGE;
		goto out_cfg;
	}
	rc = pl_open(&po, &pl, err, sizeof(err));
	if (rc < 0) {
		fprintf(stderr, "volrec process: %s\n", err);
		ret = VR_EXIT_FAIL;
		goto out_cfg;
	}
	if (o.into)
		ret = run_into(&o, &cfg, pl, &part);
	else
		ret = run_output(&o, &cfg, pl, &part, h5path);
	pl_close(pl);
out_cfg:
	free(part.f);
	cfg_free(&cfg);
	free(h5path);
	return ret;
}
