/* SPDX-License-Identifier: MIT */
/*
 * `volrec reprocess`: one chunk as a task (its markers, the `volrec process` run, its log), the
 * state of every chunk, the local workers and the finishing step (docs/cluster.md "The store").
 *
 * Markers under OUT/.volrec/state/, each written whole by rename: K.run while chunk K runs
 * (host, pid, Slurm job, start), K.done once every time point of it is written and flushed
 * (with its provenance), K.failed when `volrec process` failed. A task killed by Slurm leaves
 * K.run and nothing else: `--status` finds it (the job is gone) and `--resume` runs it again.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <json-c/json.h>

#include "sources/recording.h"
#include "tools/reprocess.h"

static double now_unix(void)
{
	return (double)vr_now_ns(CLOCK_REALTIME) * 1e-9;
}

static void marker_path(const struct rp_plan *p, char *buf, size_t len, size_t k, const char *what)
{
	rp_path(p, buf, len, "state/%zu.%s", k, what);
}

static struct json_object *marker(const struct rp_plan *p, size_t k, const char *what)
{
	char path[PATH_MAX];

	marker_path(p, path, sizeof(path), k, what);
	return access(path, F_OK) == 0 ? json_object_from_file(path) : NULL;
}

/* The Slurm job of this task ("ARRAYJOB_TASK"), "" outside Slurm. */
static void slurm_job(char *buf, size_t len)
{
	const char *a = getenv("SLURM_ARRAY_JOB_ID"), *t = getenv("SLURM_ARRAY_TASK_ID");
	const char *j = getenv("SLURM_JOB_ID");

	if (a && t)
		snprintf(buf, len, "%s_%s", a, t);
	else
		snprintf(buf, len, "%s", j ? j : "");
}

static bool config_unchanged(const struct rp_plan *p, FILE *log)
{
	FILE *f = fopen(p->config, "rb");
	char buf[65536];
	uint32_t crc = 0;
	size_t k;

	if (!f) {
		fprintf(log,
		        "volrec reprocess: %s: %s (the plan's configuration must be on a file "
		        "system every node reads)\n",
		        p->config, strerror(errno));
		return false;
	}
	while ((k = fread(buf, 1, sizeof(buf), f)) > 0)
		crc = src_crc32c(crc, buf, k);
	fclose(f);
	if (crc != p->config_crc)
		fprintf(log,
		        "volrec reprocess: %s changed since the plan was made (CRC-32C %08x, the "
		        "plan's %08x): start a new store\n",
		        p->config, crc, p->config_crc);
	return crc == p->config_crc;
}

int rp_task(struct rp_plan *p, size_t k)
{
	const struct rp_chunk *c = &p->chunks[k];
	const struct rp_rec *r = &p->recs[c->rec];
	char logp[PATH_MAX], runp[PATH_MAX], donep[PATH_MAX], failp[PATH_MAX], rep[PATH_MAX];
	char image[PATH_MAX], frames[64], warm[32], job[64], err[1024];
	struct json_object *m, *report = NULL;
	double t0 = now_unix(), t1;
	int fd, status = 0, ret = VR_EXIT_FAIL;
	FILE *log;
	pid_t pid;

	if (k >= p->nchunks) {
		fprintf(stderr, "volrec reprocess: --task %zu: the plan has chunks 0..%zu\n", k,
		        p->nchunks - 1);
		return VR_EXIT_USAGE;
	}
	rp_path(p, logp, sizeof(logp), "logs/%zu.log", k);
	marker_path(p, runp, sizeof(runp), k, "run");
	marker_path(p, donep, sizeof(donep), k, "done");
	marker_path(p, failp, sizeof(failp), k, "failed");
	rp_path(p, rep, sizeof(rep), "state/%zu.report-%ld", k, (long)getpid());
	snprintf(image, sizeof(image), "%s/%s", p->out, r->name);
	snprintf(frames, sizeof(frames), "%llu:%llu", (unsigned long long)c->a,
	         (unsigned long long)c->b);
	snprintf(warm, sizeof(warm), "%llu", (unsigned long long)c->w);
	slurm_job(job, sizeof(job));
	fd = open(logp, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0666);
	log = fd >= 0 ? fdopen(fd, "a") : NULL;
	if (!log) {
		fprintf(stderr, "volrec reprocess: %s: %s\n", logp, strerror(errno));
		return VR_EXIT_FAIL;
	}
	setvbuf(log, NULL, _IOLBF, 0);
	fprintf(log, "== chunk %zu: %s frames %s (warm-up %s) on %s, pid %ld%s%s\n", k, r->name,
	        frames, warm, rp_host(), (long)getpid(), job[0] ? ", Slurm job " : "", job);
	if (access(donep, F_OK) == 0) {
		fprintf(log, "volrec reprocess: chunk %zu is done already\n", k);
		fclose(log);
		return VR_EXIT_OK;
	}
	m = json_object_new_object();
	json_object_object_add(m, "host", json_object_new_string(rp_host()));
	json_object_object_add(m, "pid", json_object_new_int64(getpid()));
	json_object_object_add(m, "job", json_object_new_string(job));
	json_object_object_add(m, "start_unix_s", json_object_new_double(t0));
	unlink(failp);
	if (rp_json_write(runp, m, err, sizeof(err)) < 0) {
		fprintf(log, "volrec reprocess: %s\n", err);
		json_object_put(m);
		fclose(log);
		return VR_EXIT_FAIL;
	}
	if (!config_unchanged(p, log))
		goto failed;
	fprintf(log,
	        "volrec process -c %s --source %s --frames %s --warm-up %s --into %s --codec %s\n",
	        p->config, r->path, frames, warm, image, fmt_codec_name(p->codec));
	pid = fork();
	if (pid == 0) {
		dup2(fd, STDOUT_FILENO);
		dup2(fd, STDERR_FILENO);
		execl(rp_self_exe(), "volrec-process", "process", "-c", p->config, "--source",
		      r->path, "--frames", frames, "--warm-up", warm, "--into", image, "--codec",
		      fmt_codec_name(p->codec), "--report", rep, (char *)NULL);
		fprintf(stderr, "volrec reprocess: cannot run %s: %s\n", rp_self_exe(),
		        strerror(errno));
		_exit(127);
	}
	if (pid < 0 || waitpid(pid, &status, 0) < 0) {
		fprintf(log, "volrec reprocess: cannot run volrec process: %s\n", strerror(errno));
		goto failed;
	}
	t1 = now_unix();
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
		if (WIFSIGNALED(status))
			fprintf(log, "volrec reprocess: volrec process was killed by signal %d\n",
			        WTERMSIG(status));
		else
			fprintf(log, "volrec reprocess: volrec process exited with %d\n",
			        WEXITSTATUS(status));
		goto failed;
	}
	report = json_object_from_file(rep);
	unlink(rep);
	if (!report) {
		fprintf(log, "volrec reprocess: volrec process wrote no report\n");
		goto failed;
	}
	/* every time point is on the disk (process flushed the image): now it is done */
	json_object_object_add(m, "end_unix_s", json_object_new_double(t1));
	json_object_object_add(m, "duration_s", json_object_new_double(t1 - t0));
	json_object_object_foreach(report, key, val)
	        json_object_object_add(m, key, json_object_get(val));
	if (rp_json_write(donep, m, err, sizeof(err)) < 0) {
		fprintf(log, "volrec reprocess: %s\n", err);
		goto failed;
	}
	unlink(runp);
	fprintf(log, "volrec reprocess: chunk %zu done in %.3f s\n", k, t1 - t0);
	ret = VR_EXIT_OK;
	goto out;
failed:
	unlink(rep);
	json_object_object_add(m, "end_unix_s", json_object_new_double(now_unix()));
	json_object_object_add(m, "status", json_object_new_int(status));
	if (rp_json_write(failp, m, err, sizeof(err)) < 0)
		fprintf(log, "volrec reprocess: %s\n", err);
	unlink(runp);
	fprintf(log, "volrec reprocess: chunk %zu failed\n", k);
out:
	json_object_put(report);
	json_object_put(m);
	fclose(log);
	return ret;
}

/* ---- states -------------------------------------------------------------------------------- */

static const char *jstr(struct json_object *o, const char *key)
{
	struct json_object *v;

	return o && json_object_object_get_ex(o, key, &v) ? json_object_get_string(v) : NULL;
}

/* The Slurm job chunk k was submitted as last ("ARRAY_TASK"), "" when never. */
static void submitted_job(struct json_object *subs, size_t k, char *buf, size_t len)
{
	buf[0] = 0;
	for (size_t i = 0; subs && i < json_object_array_length(subs); i++) {
		struct json_object *s = json_object_array_get_idx(subs, i), *chunks;
		const char *job = jstr(s, "array_job");

		if (!job || !json_object_object_get_ex(s, "chunks", &chunks))
			continue;
		for (size_t t = 0; t < json_object_array_length(chunks); t++)
			if ((size_t)json_object_get_int64(json_object_array_get_idx(chunks, t)) ==
			    k)
				snprintf(buf, len, "%s_%zu", job, t);
	}
}

/* A marker of an attempt before the chunk's last submission (which has not begun yet). */
static bool stale(struct json_object *m, const char *sub_job)
{
	const char *job = jstr(m, "job");

	if (m && sub_job[0] && (!job || strcmp(job, sub_job))) {
		json_object_put(m);
		return true;
	}
	return false;
}

void rp_states(struct rp_plan *p, struct rp_status *st)
{
	struct json_object *subs = rp_submissions(p);
	struct json_object *queue = subs ? rp_slurm_queue(p) : NULL;

	for (size_t k = 0; k < p->nchunks; k++) {
		struct rp_status *s = &st[k];
		struct json_object *q;
		char sub_job[64];

		memset(s, 0, sizeof(*s));
		submitted_job(subs, k, sub_job, sizeof(sub_job));
		if ((s->marker = marker(p, k, "done"))) {
			s->state = RP_DONE;
			snprintf(s->job, sizeof(s->job), "%s", jstr(s->marker, "job") ?: "");
		} else if ((s->marker = marker(p, k, "run")) && !stale(s->marker, sub_job)) {
			const char *job = jstr(s->marker, "job"), *host = jstr(s->marker, "host");
			int64_t pid = json_object_get_int64(
			        json_object_object_get_ex(s->marker, "pid", &q) ? q : NULL);

			snprintf(s->job, sizeof(s->job), "%s", job ? job : "");
			if (job && job[0]) {
				/* squeue cannot tell (no Slurm here): as the marker says */
				s->state = !queue || json_object_object_get_ex(queue, job, &q)
				                   ? RP_RUNNING
				                   : RP_FAILED;
			} else {
				s->state =
				        host && !strcmp(host, rp_host()) && pid > 0 &&
				                        (kill((pid_t)pid, 0) == 0 || errno == EPERM)
				                ? RP_RUNNING
				                : RP_FAILED;
			}
			if (s->state == RP_FAILED)
				snprintf(s->why, sizeof(s->why),
				         "ended without a result (killed: cancelled, time limit, "
				         "preemption or node failure)");
		} else if ((s->marker = marker(p, k, "failed")) && !stale(s->marker, sub_job)) {
			s->state = RP_FAILED;
			snprintf(s->job, sizeof(s->job), "%s", jstr(s->marker, "job") ?: "");
			snprintf(s->why, sizeof(s->why), "volrec process failed");
		} else {
			s->marker = NULL;
			snprintf(s->job, sizeof(s->job), "%s", sub_job);
			s->state = RP_PENDING;
			if (s->job[0] && queue) {
				if (!json_object_object_get_ex(queue, s->job, &q)) {
					s->state = RP_FAILED;
					snprintf(s->why, sizeof(s->why),
					         "its job left the queue without running "
					         "(cancelled?)");
				} else if (strcmp(json_object_get_string(q), "PENDING")) {
					s->state =
					        RP_RUNNING; /* begun, its marker not yet written */
				}
			}
		}
	}
	json_object_put(queue);
	json_object_put(subs);
}

void rp_states_free(struct rp_plan *p, struct rp_status *st)
{
	for (size_t k = 0; k < p->nchunks; k++)
		json_object_put(st[k].marker);
}

/* ---- finishing ----------------------------------------------------------------------------- */

bool rp_finished(const struct rp_plan *p)
{
	char path[PATH_MAX];

	rp_path(p, path, sizeof(path), "finished");
	return access(path, F_OK) == 0;
}

int rp_finish(struct rp_plan *p)
{
	char path[PATH_MAX], err[1024];
	struct json_object *a, *rp, *prov, *chunks;
	double first = 0, last = 0, work = 0;
	uint64_t volumes = 0;
	int rc;

	snprintf(path, sizeof(path), "%s/.zattrs", p->out);
	a = json_object_from_file(path);
	if (!a || !json_object_object_get_ex(a, RP_KEY, &rp)) {
		fprintf(stderr, "volrec reprocess: %s: unreadable\n", path);
		json_object_put(a);
		return VR_EXIT_FAIL;
	}
	chunks = json_object_new_array();
	for (size_t k = 0; k < p->nchunks; k++) {
		struct json_object *m = marker(p, k, "done"), *v;

		if (!m) {
			fprintf(stderr,
			        "volrec reprocess: chunk %zu is not done: the store is not "
			        "finished (--status, --resume)\n",
			        k);
			json_object_put(chunks);
			json_object_put(a);
			return VR_EXIT_FAIL;
		}
		json_object_object_add(m, "chunk", json_object_new_int64((int64_t)k));
		json_object_object_del(m, "pid");
		if (json_object_object_get_ex(m, "start_unix_s", &v) &&
		    (first == 0 || json_object_get_double(v) < first))
			first = json_object_get_double(v);
		if (json_object_object_get_ex(m, "end_unix_s", &v) &&
		    json_object_get_double(v) > last)
			last = json_object_get_double(v);
		if (json_object_object_get_ex(m, "duration_s", &v))
			work += json_object_get_double(v);
		if (json_object_object_get_ex(m, "volumes", &v))
			volumes += (uint64_t)json_object_get_int64(v);
		json_object_array_add(chunks, m);
	}
	prov = json_object_new_object();
	json_object_object_add(prov, "volrec_version", json_object_new_string(VOLREC_VERSION));
	json_object_object_add(prov, "finished_unix_s", json_object_new_double(now_unix()));
	json_object_object_add(prov, "finished_on", json_object_new_string(rp_host()));
	json_object_object_add(prov, "volumes", json_object_new_int64((int64_t)volumes));
	json_object_object_add(prov, "first_start_unix_s", json_object_new_double(first));
	json_object_object_add(prov, "last_end_unix_s", json_object_new_double(last));
	json_object_object_add(prov, "work_s", json_object_new_double(work));
	json_object_object_add(prov, "chunks", chunks);
	json_object_object_add(rp, "provenance", prov);
	rc = rp_json_write(path, a, err, sizeof(err));
	json_object_put(a);
	if (rc == 0) {
		struct json_object *f = json_object_new_object();

		rp_path(p, path, sizeof(path), "finished");
		json_object_object_add(f, "unix_s", json_object_new_double(now_unix()));
		rc = rp_json_write(path, f, err, sizeof(err));
		json_object_put(f);
	}
	if (rc < 0) {
		fprintf(stderr, "volrec reprocess: %s\n", err);
		return VR_EXIT_FAIL;
	}
	printf("volrec reprocess: %s finished: %llu volumes of %zu chunks, %.1f s of work\n",
	       p->out, (unsigned long long)volumes, p->nchunks, work);
	return VR_EXIT_OK;
}

/* ---- local workers ------------------------------------------------------------------------- */

int rp_run_local(struct rp_plan *p, unsigned n)
{
	size_t next = 0, failed = 0;
	unsigned running = 0;
	int status;

	for (;;) {
		while (running < n && next < p->nchunks) {
			char done[PATH_MAX];
			pid_t pid;

			marker_path(p, done, sizeof(done), next, "done");
			if (access(done, F_OK) == 0) {
				next++;
				continue;
			}
			fflush(NULL);
			pid = fork();
			if (pid == 0)
				_exit(rp_task(p, next));
			if (pid < 0) {
				fprintf(stderr, "volrec reprocess: fork: %s\n", strerror(errno));
				failed++;
				break;
			}
			running++;
			next++;
		}
		if (running == 0)
			break;
		if (wait(&status) < 0)
			break;
		running--;
		if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
			failed++;
	}
	if (failed) {
		fprintf(stderr,
		        "volrec reprocess: %zu chunks failed (volrec reprocess --status %s names "
		        "them with their logs; --resume runs them again)\n",
		        failed, p->out);
		return VR_EXIT_FAIL;
	}
	return rp_finish(p);
}
