/* SPDX-License-Identifier: MIT */
/*
 * `volrec reprocess --slurm`: one job array of the chunks to run (`sbatch --array=0-N[%M]`,
 * the user's options passed through) and a job after it (`--dependency=afterok`) that finishes
 * the store; `squeue` for --status. Slurm is driven through its commands only.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <json-c/json.h>

#include "tools/reprocess.h"

bool rp_on_path(const char *cmd)
{
	const char *path = getenv("PATH");
	char buf[PATH_MAX];

	if (strchr(cmd, '/'))
		return access(cmd, X_OK) == 0;
	while (path && *path) {
		const char *end = strchr(path, ':');
		size_t n = end ? (size_t)(end - path) : strlen(path);

		snprintf(buf, sizeof(buf), "%.*s/%s", (int)n, n ? path : ".", cmd);
		if (access(buf, X_OK) == 0)
			return true;
		path = end ? end + 1 : NULL;
	}
	return false;
}

/* Run argv (a command on PATH); its standard output and error into out (NUL-terminated,
 * cut at len). The exit status, or -1 when it could not run. */
static int run_capture(char *const *argv, char *out, size_t len)
{
	int fds[2], status;
	size_t n = 0;
	ssize_t k;
	pid_t pid;

	out[0] = 0;
	if (pipe2(fds, O_CLOEXEC) < 0)
		return -1;
	pid = fork();
	if (pid == 0) {
		dup2(fds[1], STDOUT_FILENO);
		dup2(fds[1], STDERR_FILENO);
		execvp(argv[0], argv);
		fprintf(stderr, "cannot run %s: %s\n", argv[0], strerror(errno));
		_exit(127);
	}
	close(fds[1]);
	if (pid < 0) {
		close(fds[0]);
		return -1;
	}
	while ((k = read(fds[0], out + n, len - 1 - n)) > 0 || (k < 0 && errno == EINTR))
		if (k > 0 && (n += (size_t)k) == len - 1)
			break;
	out[n] = 0;
	/* drain what did not fit */
	for (char sink[4096]; read(fds[0], sink, sizeof(sink)) > 0;)
		;
	close(fds[0]);
	if (waitpid(pid, &status, 0) < 0)
		return -1;
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* Single-quoted for a shell script. */
static void sh_quote(FILE *f, const char *s)
{
	fputc('\'', f);
	for (; *s; s++)
		if (*s == '\'')
			fputs("'\\''", f);
		else
			fputc(*s, f);
	fputc('\'', f);
}

/* The job script of submission s: the array's (chunks todo) or the finishing job's. */
static int write_script(const struct rp_plan *p, const char *path, unsigned s, const size_t *todo,
                        size_t n)
{
	FILE *f = fopen(path, "w");

	if (!f)
		return -errno;
	fprintf(f, "#!/bin/sh\n# volrec reprocess, submission %u (man volrec)\n", s);
	if (todo) {
		fprintf(f, "set -- ");
		for (size_t i = 0; i < n; i++)
			fprintf(f, "%zu ", todo[i]);
		fprintf(f, "\nshift \"$SLURM_ARRAY_TASK_ID\"\nexec ");
		sh_quote(f, rp_self_exe());
		fprintf(f, " reprocess --task \"$1\" ");
	} else {
		fprintf(f, "exec ");
		sh_quote(f, rp_self_exe());
		fprintf(f, " reprocess --finish ");
	}
	sh_quote(f, p->out);
	fputc('\n', f);
	if (fchmod(fileno(f), 0755) < 0 || fclose(f) != 0)
		return -EIO;
	return 0;
}

/* sbatch --parsable ... script: the job id, or NULL with the message printed. */
static char *sbatch(char *const *pre, size_t npre, char *const *opts, size_t nopts,
                    const char *script)
{
	char **argv = calloc(npre + nopts + 4, sizeof(*argv)), out[4096];
	size_t n = 0;
	int rc;

	if (!argv)
		return NULL;
	argv[n++] = "sbatch";
	argv[n++] = "--parsable";
	for (size_t i = 0; i < npre; i++)
		argv[n++] = pre[i];
	for (size_t i = 0; i < nopts; i++)
		argv[n++] = opts[i];
	argv[n++] = (char *)script;
	rc = run_capture(argv, out, sizeof(out));
	free(argv);
	out[strcspn(out, "\n")] = rc == 0 ? 0 : out[strcspn(out, "\n")];
	if (rc != 0 || !out[0] || out[0] < '0' || out[0] > '9') {
		fprintf(stderr, "volrec reprocess: sbatch failed (%d): %s\n", rc, out);
		return NULL;
	}
	out[strcspn(out, ";")] = 0; /* "ID;CLUSTER" on a federation */
	return strdup(out);
}

struct json_object *rp_submissions(const struct rp_plan *p)
{
	char path[PATH_MAX];

	rp_path(p, path, sizeof(path), "slurm/submissions.json");
	return access(path, F_OK) == 0 ? json_object_from_file(path) : NULL;
}

/* Slurm's MaxArraySize (an array's indices are below it): from `scontrol show config`, else
 * its default, 1001. */
static size_t max_array_size(void)
{
	char *argv[] = {"scontrol", "show", "config", NULL}, *out = malloc(1 << 18), *at;
	size_t n = 1001;

	if (out && rp_on_path("scontrol") && run_capture(argv, out, 1 << 18) == 0 &&
	    (at = strstr(out, "MaxArraySize")) && (at = strchr(at, '=')))
		n = strtoul(at + 1, NULL, 10);
	free(out);
	return n > 1 ? n : 1001;
}

/* The finishing job of the last submission, cancelled: it waits for an array whose failed
 * task will never let it run. */
static void cancel_old_finish(struct json_object *subs)
{
	for (size_t i = json_object_array_length(subs); i > 0; i--) {
		const char *old = json_object_get_string(json_object_object_get(
		        json_object_array_get_idx(subs, i - 1), "finish_job"));
		if (old) {
			char *argv[] = {"scancel", (char *)old, NULL}, out[1024];
			if (rp_on_path("scancel"))
				run_capture(argv, out, sizeof(out));
			return;
		}
	}
}

/* One array of the chunks todo[0..n) as submission sub: its job id or NULL. */
static char *submit_array(struct rp_plan *p, unsigned sub, const size_t *todo, size_t n,
                          char *const *opts, size_t nopts, unsigned array_max)
{
	char script[PATH_MAX], logs[PATH_MAX], array[64], name[] = "--job-name=volrec-reprocess";
	char out_opt[PATH_MAX + 16];
	char *pre[] = {array, name, out_opt};

	rp_path(p, script, sizeof(script), "slurm/array-%u.sh", sub);
	if (write_script(p, script, sub, todo, n) < 0) {
		fprintf(stderr, "volrec reprocess: cannot write %s: %s\n", script, strerror(errno));
		return NULL;
	}
	if (array_max)
		snprintf(array, sizeof(array), "--array=0-%zu%%%u", n - 1, array_max);
	else
		snprintf(array, sizeof(array), "--array=0-%zu", n - 1);
	rp_path(p, logs, sizeof(logs), "logs/slurm-%%A_%%a.out");
	snprintf(out_opt, sizeof(out_opt), "--output=%s", logs);
	return sbatch(pre, 3, opts, nopts, script);
}

int rp_submit(struct rp_plan *p, const size_t *todo, size_t n, char *const *opts, size_t nopts,
              unsigned array_max)
{
	struct json_object *subs = rp_submissions(p), *s = NULL, *chunks;
	char fscript[PATH_MAX], flogs[PATH_MAX], path[PATH_MAX], err[1024];
	char fname[] = "--job-name=volrec-reprocess-finish";
	const size_t per = max_array_size();
	size_t arrays = 0, deplen = 64;
	char *fjob = NULL, *dep = NULL;
	unsigned sub;
	int rc = VR_EXIT_FAIL;

	if (!subs)
		subs = json_object_new_array();
	cancel_old_finish(subs);
	dep = malloc(deplen);
	if (!dep)
		goto out;
	snprintf(dep, deplen, "--dependency=afterok");
	/* arrays of at most MaxArraySize tasks, the finishing job after all of them */
	for (size_t off = 0; off < n; off += per) {
		size_t m = n - off < per ? n - off : per;
		char *job;

		sub = (unsigned)json_object_array_length(subs);
		job = submit_array(p, sub, todo + off, m, opts, nopts, array_max);
		if (!job)
			break;
		s = json_object_new_object();
		json_object_object_add(s, "array_job", json_object_new_string(job));
		json_object_object_add(
		        s, "submitted_unix_s",
		        json_object_new_double((double)vr_now_ns(CLOCK_REALTIME) * 1e-9));
		chunks = json_object_new_array();
		for (size_t i = 0; i < m; i++)
			json_object_array_add(chunks,
			                      json_object_new_int64((int64_t)todo[off + i]));
		json_object_object_add(s, "chunks", chunks);
		json_object_array_add(subs, s);
		arrays++;
		char *d = realloc(dep, deplen += strlen(job) + 1);
		if (d) {
			dep = d;
			strcat(strcat(dep, ":"), job);
		}
		free(job);
		if (!d)
			break;
	}
	if (arrays * per >= n) {
		char out_opt[PATH_MAX + 16];
		char *pre[] = {dep, fname, out_opt};

		sub = (unsigned)json_object_array_length(subs) - 1;
		rp_path(p, fscript, sizeof(fscript), "slurm/finish-%u.sh", sub);
		rp_path(p, flogs, sizeof(flogs), "logs/slurm-finish-%%j.out");
		snprintf(out_opt, sizeof(out_opt), "--output=%s", flogs);
		if (write_script(p, fscript, sub, NULL, 0) == 0)
			fjob = sbatch(pre, 3, opts, nopts, fscript);
		else
			fprintf(stderr, "volrec reprocess: cannot write %s: %s\n", fscript,
			        strerror(errno));
		json_object_object_add(s, "finish_job", fjob ? json_object_new_string(fjob) : NULL);
	}
	rp_path(p, path, sizeof(path), "slurm/submissions.json");
	if (arrays && rp_json_write(path, subs, err, sizeof(err)) < 0) {
		fprintf(stderr, "volrec reprocess: %s (%s)\n", err, dep);
		goto out;
	}
	if (arrays * per < n) {
		fprintf(stderr,
		        "volrec reprocess: %zu of the %zu chunks are submitted; once their "
		        "tasks ended, volrec reprocess --resume submits the others\n",
		        arrays * per, n);
		goto out;
	}
	if (!fjob) {
		fprintf(stderr, "volrec reprocess: the finishing job could not be submitted: once "
		                "the array is done, run volrec reprocess --resume on the store\n");
		goto out;
	}
	printf("volrec reprocess: submitted %zu chunks as %zu job array%s (%s) and job %s "
	       "after %s; volrec reprocess --status %s\n",
	       n, arrays, arrays > 1 ? "s" : "", dep + strlen("--dependency=afterok:"), fjob,
	       arrays > 1 ? "them" : "it", p->out);
	rc = VR_EXIT_OK;
out:
	free(dep);
	free(fjob);
	json_object_put(subs);
	return rc;
}

struct json_object *rp_slurm_queue(struct rp_plan *p)
{
	struct json_object *subs = rp_submissions(p), *q;
	char ids[4096] = "", *out = malloc(1 << 20);
	size_t n = 0;
	int rc;

	if (!subs || !out || !rp_on_path("squeue")) {
		json_object_put(subs);
		free(out);
		return NULL;
	}
	for (size_t i = 0; i < json_object_array_length(subs); i++) {
		struct json_object *s = json_object_array_get_idx(subs, i), *v;
		for (int j = 0; j < 2; j++)
			if (json_object_object_get_ex(s, j ? "finish_job" : "array_job", &v) &&
			    json_object_get_string(v) && n < sizeof(ids))
				n += (size_t)snprintf(ids + n, sizeof(ids) - n, "%s%s",
				                      n ? "," : "", json_object_get_string(v));
	}
	json_object_put(subs);
	{
		char *argv[] = {"squeue", "-h", "-r", "-o", "%i %T", "-j", ids, NULL};
		rc = run_capture(argv, out, 1 << 20);
	}
	q = json_object_new_object();
	if (rc != 0 && !strstr(out, "Invalid job id")) {
		/* Slurm did not answer: nothing can be said */
		json_object_put(q);
		free(out);
		return NULL;
	}
	for (char *line = strtok(out, "\n"); rc == 0 && line; line = strtok(NULL, "\n")) {
		char *sp = strchr(line, ' ');
		if (sp) {
			*sp = 0;
			json_object_object_add(q, line, json_object_new_string(sp + 1));
		}
	}
	free(out);
	return q;
}
