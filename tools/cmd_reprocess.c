/* SPDX-License-Identifier: MIT */
/*
 * `volrec reprocess`: a study's raw recordings processed again with a new configuration into
 * one OME-Zarr store, in chunks of epochs run here (--local N) or as one Slurm job array
 * (--slurm); --status and --resume on the store (docs/cluster.md).
 */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <json-c/json.h>

#include "base/base.h"
#include "tools/reprocess.h"

#define RP_CHUNK_EPOCHS 200 /* default: minutes of work a chunk on a CPU, seconds on a GPU */

static void reprocess_usage(FILE *f)
{
	fprintf(f,
	        "usage: volrec reprocess -c NEW.yaml REC.vrr... -o OUT.zarr [--chunk-epochs E]\n"
	        "                        [--codec zstd|lz4|none]\n"
	        "                        [--local N | --slurm [--array-max N] [-- SBATCH "
	        "OPTIONS...]]\n"
	        "       volrec reprocess --resume OUT.zarr [--codec C] [--local N | --slurm ...]\n"
	        "       volrec reprocess --status OUT.zarr\n\n"
	        "Process raw recordings again with the configuration NEW.yaml into the OME-Zarr\n"
	        "store OUT.zarr: one image per recording (OUT.zarr/<name>/, the file name\n"
	        "without .vrr), the plan and the provenance in the root's .zattrs\n"
	        "(man volrec). Each recording is split into chunks of frames; a chunk\n"
	        "begins with the warm-up frames that make its volumes those of one `volrec\n"
	        "process` over the whole recording (none for reconstruct.mode none, the last\n"
	        "interlacing cycle for noncumulative; other modes: --chunk-epochs 0). Every\n"
	        "input is checked (each epoch's CRC-32C, the geometry) before anything runs.\n\n"
	        "  -c, --config FILE     the configuration (on a file system the nodes read)\n"
	        "  -o, --output OUT      the store (a new directory, or one with the same plan)\n"
	        "      --chunk-epochs E  frames of a chunk (default %d; 0: one chunk per\n"
	        "                        recording)\n"
	        "      --codec NAME      the images' chunks: zstd (blosc/zstd, the default,\n"
	        "                        smallest), lz4 (blosc/lz4, several times faster,\n"
	        "                        larger) or none (raw); in the plan, for every task;\n"
	        "                        --resume keeps the store's (another is refused)\n"
	        "      --local N         run N chunks at a time here, then finish (default 1)\n"
	        "      --slurm           submit one job array of the chunks (sbatch; the\n"
	        "                        options after -- go to sbatch: --partition,\n"
	        "                        --gres=gpu:1, --time, --account, ...) and a job after\n"
	        "                        it (--dependency=afterok) that finishes the store\n"
	        "      --array-max N     at most N tasks of the array at a time (sbatch's %%N)\n"
	        "      --resume          run what is not done of the store OUT.zarr\n"
	        "      --status          one line per chunk (pending, running with its Slurm\n"
	        "                        job, done, failed with the end of its log) and the\n"
	        "                        whole (volumes/s, time left)\n"
	        "  -h, --help            this text\n\n"
	        "Exit status: 0 done (--status: every chunk done and the store finished; --slurm:\n"
	        "submitted), 1 failure (--status: a chunk pending or running), 2 usage or bad\n"
	        "input (--status: a chunk failed).\n",
	        RP_CHUNK_EPOCHS);
}

struct rp_opts {
	const char *config, *output, *codec_name;
	enum fmt_codec codec; /* --codec: FMT_CODEC_DEFAULT when not given */
	uint64_t chunk_epochs, local, array_max, task;
	bool chunk_given, local_given, slurm, resume, status, task_given, finish;
	char **recs;
	size_t nrecs;
	char **sbatch;
	size_t nsbatch;
};

/* The options of o that go together and those that exclude each other; the store as the
 * operand of --status, --resume, --task and --finish. 0, or VR_EXIT_USAGE with a message. */
static int check_opts(struct rp_opts *o)
{
	const char *P = "volrec reprocess";

	if (o->slurm && o->local_given) {
		fprintf(stderr, "%s: --local and --slurm exclude each other\n", P);
		return VR_EXIT_USAGE;
	}
	if ((o->nsbatch || o->array_max) && !o->slurm) {
		fprintf(stderr, "%s: sbatch options (after --) and --array-max go with --slurm\n",
		        P);
		return VR_EXIT_USAGE;
	}
	if (o->codec_name) {
		char err[256];

		if (fmt_codec_parse(o->codec_name, &o->codec, err, sizeof(err)) < 0) {
			fprintf(stderr, "%s: %s\n", P, err);
			return VR_EXIT_USAGE;
		}
		if (o->status || o->task_given || o->finish) {
			fprintf(stderr, "%s: --codec goes with a new store or --resume\n", P);
			return VR_EXIT_USAGE;
		}
	}
	if (o->status + o->resume + o->task_given + o->finish > 1) {
		fprintf(stderr, "%s: --status, --resume, --task and --finish exclude each other\n",
		        P);
		return VR_EXIT_USAGE;
	}
	if (o->status || o->resume || o->task_given || o->finish) {
		/* the store is the operand (or -o) */
		if (!o->output && o->nrecs == 1) {
			o->output = o->recs[0];
			o->nrecs = 0;
		}
		if (!o->output || o->nrecs || o->config || o->chunk_given) {
			fprintf(stderr,
			        "%s: --status, --resume: one store (OUT.zarr) and no -c, "
			        "recordings or --chunk-epochs (the plan in the store says them)\n",
			        P);
			return VR_EXIT_USAGE;
		}
		if (o->status && (o->slurm || o->local_given)) {
			fprintf(stderr, "%s: --status runs nothing (no --local, --slurm)\n", P);
			return VR_EXIT_USAGE;
		}
		return 0;
	}
	if (!o->config || !o->output || !o->nrecs) {
		fprintf(stderr,
		        "%s: -c NEW.yaml, one or more recordings and -o OUT.zarr are "
		        "required\n",
		        P);
		reprocess_usage(stderr);
		return VR_EXIT_USAGE;
	}
	return 0;
}

static int parse_opts(int argc, char **argv, struct rp_opts *o)
{
	static const struct option longopts[] = {
	        {"config", required_argument, NULL, 'c'},
	        {"output", required_argument, NULL, 'o'},
	        {"chunk-epochs", required_argument, NULL, 'E'},
	        {"local", required_argument, NULL, 'L'},
	        {"slurm", no_argument, NULL, 'S'},
	        {"array-max", required_argument, NULL, 'M'},
	        {"resume", no_argument, NULL, 'R'},
	        {"status", no_argument, NULL, 'T'},
	        {"task", required_argument, NULL, 'K'},
	        {"finish", no_argument, NULL, 'F'},
	        {"codec", required_argument, NULL, 'Z'},
	        VR_CLI_LONGOPTS_END,
	};
	const struct vr_cli_str strs[] = {
	        {'c', &o->config}, {'o', &o->output}, {'Z', &o->codec_name}};
	const char *P = "volrec reprocess";
	int c, n = argc;

	/* what follows "--" goes to sbatch */
	for (int i = 1; i < argc; i++)
		if (!strcmp(argv[i], "--")) {
			n = i;
			o->sbatch = argv + i + 1;
			o->nsbatch = (size_t)(argc - i - 1);
			break;
		}
	o->local = 1;
	o->chunk_epochs = RP_CHUNK_EPOCHS;
	optind = 1;
	while ((c = VR_CLI_GETOPT(n, argv, "c:o:h", longopts, strs)) != -1) {
		switch (c) {
		case 'E':
			if (vr_cli_u64(P, "--chunk-epochs", optarg, 0, UINT32_MAX,
			               "a whole number of frames (0: one chunk per recording)",
			               &o->chunk_epochs))
				return VR_EXIT_USAGE;
			o->chunk_given = true;
			break;
		case 'L':
			if (vr_cli_u64(P, "--local", optarg, 1, 1024, "workers from 1 to 1024",
			               &o->local))
				return VR_EXIT_USAGE;
			o->local_given = true;
			break;
		case 'M':
			if (vr_cli_u64(P, "--array-max", optarg, 1, 1000000, "tasks at a time >= 1",
			               &o->array_max))
				return VR_EXIT_USAGE;
			break;
		case 'K':
			if (vr_cli_u64(P, "--task", optarg, 0, UINT32_MAX, "a chunk number",
			               &o->task))
				return VR_EXIT_USAGE;
			o->task_given = true;
			break;
		case 'S':
			o->slurm = true;
			break;
		case 'R':
			o->resume = true;
			break;
		case 'T':
			o->status = true;
			break;
		case 'F':
			o->finish = true;
			break;
		default:
			return vr_cli_usage(reprocess_usage, c) ? VR_EXIT_USAGE : -1;
		}
	}
	o->recs = argv + optind;
	o->nrecs = (size_t)(n - optind);
	return check_opts(o);
}

/* ---- --status ------------------------------------------------------------------------------ */

static const char *const state_names[] = {"pending", "running", "done", "failed"};

static double jdouble(struct json_object *o, const char *key)
{
	struct json_object *v;

	return o && json_object_object_get_ex(o, key, &v) ? json_object_get_double(v) : 0;
}

static void print_tail(const struct rp_plan *p, size_t k, const char *job)
{
	char path[PATH_MAX], *tail;

	rp_path(p, path, sizeof(path), "logs/%zu.log", k);
	tail = rp_tail(path, 600);
	if ((!tail || !tail[0]) && job[0]) {
		/* the task never wrote its log: Slurm's output of the job */
		free(tail);
		rp_path(p, path, sizeof(path), "logs/slurm-%s.out", job);
		tail = rp_tail(path, 600);
	}
	if (!tail || !tail[0]) {
		printf("      (no log: %s)\n", path);
	} else {
		for (char *line = strtok(tail, "\n"); line; line = strtok(NULL, "\n"))
			printf("      | %s\n", line);
	}
	free(tail);
}

/* Every chunk done, the store not finished: whether the finishing job of the last submission
 * is still in Slurm's queue (true also when Slurm cannot tell, or nothing was submitted). */
static bool finish_pending(struct rp_plan *p)
{
	struct json_object *subs = rp_submissions(p), *queue, *v;
	const char *job = NULL;
	bool pending = true;

	for (size_t i = subs ? json_object_array_length(subs) : 0; i > 0 && !job; i--)
		if (json_object_object_get_ex(json_object_array_get_idx(subs, i - 1), "finish_job",
		                              &v))
			job = json_object_get_string(v);
	if (job && (queue = rp_slurm_queue(p))) {
		pending = json_object_object_get_ex(queue, job, &v);
		json_object_put(queue);
	}
	json_object_put(subs);
	return pending;
}

static int run_status(struct rp_plan *p)
{
	struct rp_status *st = calloc(p->nchunks, sizeof(*st));
	size_t count[4] = {0};
	uint64_t vol_total = 0, vol_done = 0;
	double first = 0, now = (double)vr_now_ns(CLOCK_REALTIME) * 1e-9, last = 0;
	bool finished = rp_finished(p);
	int rc;

	if (!st) {
		fprintf(stderr, "volrec reprocess: out of memory\n");
		return VR_EXIT_FAIL;
	}
	rp_states(p, st);
	for (size_t k = 0; k < p->nchunks; k++) {
		const struct rp_chunk *c = &p->chunks[k];
		const struct rp_status *s = &st[k];
		double start = jdouble(s->marker, "start_unix_s");

		count[s->state]++;
		vol_total += c->b - c->a;
		if (start > 0 && (first == 0 || start < first))
			first = start;
		printf("chunk %zu  %s frames %llu..%llu (+%llu warm-up)  %s", k,
		       p->recs[c->rec].name, (unsigned long long)c->a,
		       (unsigned long long)(c->b - 1), (unsigned long long)c->w,
		       state_names[s->state]);
		if (s->state == RP_DONE) {
			vol_done += c->b - c->a;
			last = jdouble(s->marker, "end_unix_s") > last
			               ? jdouble(s->marker, "end_unix_s")
			               : last;
			printf(" on %s in %.2f s",
			       json_object_get_string(json_object_object_get(s->marker, "host")),
			       jdouble(s->marker, "duration_s"));
		}
		if (s->job[0])
			printf(" (Slurm job %s)", s->job);
		if (s->state == RP_RUNNING && start > 0)
			printf(" for %.0f s", now - start);
		if (s->state == RP_FAILED)
			printf(": %s", s->why);
		printf("\n");
		if (s->state == RP_FAILED)
			print_tail(p, k, s->job);
	}
	if (finished || !count[RP_RUNNING])
		now = last > 0 ? last : now;
	double rate = first > 0 && now > first && vol_done ? (double)vol_done / (now - first) : 0;
	printf("whole: %zu of %zu chunks done, %zu running, %zu pending, %zu failed; %llu of %llu "
	       "volumes",
	       count[RP_DONE], p->nchunks, count[RP_RUNNING], count[RP_PENDING], count[RP_FAILED],
	       (unsigned long long)vol_done, (unsigned long long)vol_total);
	if (rate > 0)
		printf(", %.2f volumes/s", rate);
	if (rate > 0 && vol_done < vol_total)
		printf(", about %.0f s left", (double)(vol_total - vol_done) / rate);
	bool all = count[RP_DONE] == p->nchunks, stuck = false;

	if (all && !finished) {
		/* the queue first, the mark after it: a finishing job that left the queue has
		 * written its mark by then (read before the queue, it may have finished since) */
		bool pending = finish_pending(p);

		finished = rp_finished(p);
		stuck = !finished && !pending;
	}
	printf("; %s\n", finished ? "finished (provenance written)"
	                 : stuck  ? "not finished: the finishing job ended without finishing "
	                            "(its log: .volrec/logs/slurm-finish-*.out; --resume finishes)"
	                 : all    ? "not finished yet (the finishing job)"
	                          : "not finished");
	rc = count[RP_FAILED] || stuck ? VR_EXIT_USAGE
	     : all && finished         ? VR_EXIT_OK
	                               : VR_EXIT_FAIL;
	rp_states_free(p, st);
	free(st);
	return rc;
}

/* ---- running ------------------------------------------------------------------------------- */

/* The chunks not done; refuses (VR_EXIT_USAGE) while any is pending or running in Slurm. */
static int chunks_todo(struct rp_plan *p, size_t **todo, size_t *n)
{
	struct rp_status *st = calloc(p->nchunks, sizeof(*st));
	int rc = 0;

	*todo = calloc(p->nchunks, sizeof(**todo));
	*n = 0;
	if (!st || !*todo) {
		free(st);
		fprintf(stderr, "volrec reprocess: out of memory\n");
		return VR_EXIT_FAIL;
	}
	rp_states(p, st);
	for (size_t k = 0; k < p->nchunks; k++) {
		if (st[k].state == RP_RUNNING || (st[k].state == RP_PENDING && st[k].job[0])) {
			fprintf(stderr,
			        "volrec reprocess: chunk %zu is %s%s%s: wait for it (or scancel "
			        "it) "
			        "before --resume\n",
			        k, state_names[st[k].state], st[k].job[0] ? " as Slurm job " : "",
			        st[k].job);
			rc = VR_EXIT_USAGE;
		}
		if (st[k].state != RP_DONE)
			(*todo)[(*n)++] = k;
	}
	rp_states_free(p, st);
	free(st);
	return rc;
}

/* Chunks are to run again: the store is not finished until they are. Always true. */
static bool unlink_finished(const struct rp_plan *p)
{
	char path[PATH_MAX];

	rp_path(p, path, sizeof(path), "finished");
	unlink(path);
	return true;
}

static int run(struct rp_plan *p, const struct rp_opts *o)
{
	size_t *todo = NULL, n;
	int rc = chunks_todo(p, &todo, &n);

	if (rc == 0 && n == 0) {
		printf("volrec reprocess: every chunk of %s is done\n", p->out);
		rc = rp_finished(p) ? VR_EXIT_OK : rp_finish(p);
	} else if (rc == 0 && unlink_finished(p) && o->slurm) {
		rc = rp_submit(p, todo, n, o->sbatch, o->nsbatch, (unsigned)o->array_max);
	} else if (rc == 0) {
		unlink_finished(p);
		rc = rp_run_local(p, (unsigned)o->local);
	}
	free(todo);
	return rc;
}

VR_COMMAND(reprocess, "process raw recordings again into one OME-Zarr store (Slurm or local)")
{
	struct rp_opts o = {0};
	struct rp_plan p;
	char err[2048];
	bool existed;
	int rc;

	rc = parse_opts(argc, argv, &o);
	if (rc)
		return rc < 0 ? VR_EXIT_OK : rc;
	if (o.slurm && !rp_on_path("sbatch")) {
		fprintf(stderr, "volrec reprocess: --slurm: sbatch is not on PATH (Slurm's client "
		                "commands: Debian's slurm-client, or the site's `module load "
		                "slurm`); nothing was submitted\n");
		return VR_EXIT_USAGE;
	}
	if (o.status || o.resume || o.task_given || o.finish) {
		rc = rp_plan_load(&p, o.output, err, sizeof(err));
		if (rc < 0) {
			fprintf(stderr, "volrec reprocess: %s\n", err);
			return VR_EXIT_USAGE;
		}
		if (o.codec && o.codec != p.codec) {
			fprintf(stderr,
			        "volrec reprocess: %s: its images are written with codec %s (the "
			        "plan's); --codec %s would mix two codecs in one store: resume "
			        "without --codec (or with --codec %s), or start a new store; "
			        "nothing was %s\n",
			        p.out, fmt_codec_name(p.codec), fmt_codec_name(o.codec),
			        fmt_codec_name(p.codec), o.slurm ? "submitted" : "run");
			rp_plan_free(&p);
			return VR_EXIT_USAGE;
		}
		rc = o.status       ? run_status(&p)
		     : o.task_given ? rp_task(&p, (size_t)o.task)
		     : o.finish     ? rp_finish(&p)
		                    : run(&p, &o);
		rp_plan_free(&p);
		return rc;
	}
	rc = rp_plan_make(&p, o.config, o.recs, o.nrecs, o.output, o.chunk_epochs, o.chunk_given,
	                  o.codec, err, sizeof(err));
	if (rc < 0) {
		fprintf(stderr, "volrec reprocess: %s; nothing was %s\n", err,
		        o.slurm ? "submitted" : "written");
		return VR_EXIT_USAGE;
	}
	rc = rp_store_create(&p, &existed, err, sizeof(err));
	if (rc == 0 && existed) {
		fprintf(stderr,
		        "volrec reprocess: %s exists with this plan: --resume %s runs what "
		        "is not done, --status shows it\n",
		        p.out, p.out);
		rc = -EEXIST;
	} else if (rc < 0) {
		fprintf(stderr, "volrec reprocess: %s; nothing was %s\n", err,
		        o.slurm ? "submitted" : "run");
	}
	if (rc < 0) {
		rp_plan_free(&p);
		return VR_EXIT_USAGE;
	}
	printf("volrec reprocess: %s: %zu recordings in %zu chunks\n", p.out, p.nrecs, p.nchunks);
	rc = run(&p, &o);
	rp_plan_free(&p);
	return rc;
}
