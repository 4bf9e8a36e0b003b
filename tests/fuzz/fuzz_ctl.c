/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer harness: volrecd's control requests (daemon/vrd_ctl.c, vrd_ctl_answer) on arbitrary
 * bytes, against a stand-in service as tests/unit/test_ctl.c has it (the default configuration,
 * apply copies the next configuration in). Every request gets a reply that is one JSON object
 * of valid UTF-8 whose "ok" says what *refused says; a set that is applied changes live keys
 * only, and the configuration it leaves dumps and loads back equal.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/vrd_ctl.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct service {
	struct vr_config cfg;
	int applied;
};

static struct service S;

static void fail(const char *msg, const char *reply)
{
	fprintf(stderr, "fuzz_ctl: %s\nreply: %s\n", msg, reply ? reply : "(none)");
	abort();
}

static const struct vr_config *s_config(void *ctx)
{
	return &((struct service *)ctx)->cfg;
}

static int s_apply(void *ctx, const struct vr_config *next, const char *const *paths, size_t n,
                   const struct vrd_ctl_peer *peer, char *err, size_t errlen)
{
	struct service *s = ctx;
	struct vr_config copy;

	if (!n)
		fail("apply without keys", NULL);
	if (cfg_is_structural_change(&s->cfg, next))
		fail("a set reached apply with a structural change", NULL);
	if (cfg_copy(&copy, next) < 0)
		return vr_err(err, errlen, -ENOMEM, "service: out of memory");
	cfg_free(&s->cfg);
	s->cfg = copy;
	s->applied++;
	return 0;
}

static int s_reset(void *ctx, const struct vrd_ctl_peer *peer, char *err, size_t errlen)
{
	return 0;
}

static struct json_object *s_status(void *ctx)
{
	struct json_object *o = json_object_new_object();

	json_object_object_add(o, "volumes_per_s", json_object_new_double(12.5));
	return o;
}

/* Generation 1 is kept, with a value of each JSON kind; any other is not. */
static const char *s_generation(void *ctx, uint32_t n, uint32_t *current, uint32_t *oldest)
{
	*current = *oldest = 1;
	return n == 1 ? "{\"preprocess.db_range\": [0, 100], \"preprocess.window.type\": \"hann\", "
	                "\"preprocess.dispersion.table\": null, \"reconstruct.compensated."
	                "estimate_pose\": true}"
	              : NULL;
}

/* What record_start hands the service: a name, one count or seconds or neither. */
static int s_record_start(void *ctx, bool raw, const char *name, uint64_t count, double seconds,
                          const struct vrd_ctl_peer *peer, char *err, size_t errlen)
{
	if (!name)
		fail("a record_start without its name", NULL);
	if (count && seconds != 0)
		fail("a record_start with a count and seconds", NULL);
	if (seconds < 0 || seconds > 1e9 || seconds != seconds)
		fail("a record_start with seconds out of range", NULL);
	return 0;
}

static int s_record_stop(void *ctx, bool raw, const struct vrd_ctl_peer *peer, char *err,
                         size_t errlen)
{
	return 0;
}

static const struct vrd_ctl_ops OPS = {.ctx = &S,
                                       .config = s_config,
                                       .apply = s_apply,
                                       .reset_history = s_reset,
                                       .status = s_status,
                                       .generation = s_generation,
                                       .record_start = s_record_start,
                                       .record_stop = s_record_stop};
static const struct vrd_ctl_peer PEER = {.have_uid = true, .uid = 1000, .pid = 42};

/* The applied configuration dumps to YAML that loads back to the same configuration. */
static void check_round_trip(const struct vr_config *c)
{
	struct vr_config back;
	char err[CFG_ERR_MAX], *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);

	if (!f)
		return;
	if (cfg_dump(c, f) < 0)
		fail("cfg_dump failed on an applied configuration", NULL);
	fclose(f);
	cfg_defaults(&back);
	if (cfg_load_string(&back, text, "ctl", err, sizeof(err)) < 0) {
		fprintf(stderr, "%s\n%s\n", err, text);
		fail("an applied configuration does not load back", NULL);
	}
	if (!cfg_equal(c, &back))
		fail("an applied configuration loads back different", NULL);
	cfg_free(&back);
	free(text);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct json_object *r, *ok;
	bool refused = false;
	char *reply;
	size_t rlen;

	cfg_defaults(&S.cfg);
	S.applied = 0;
	reply = vrd_ctl_answer(&OPS, (const char *)data, size, &PEER, &refused);
	if (!reply)
		fail("no reply (only out of memory may give none)", NULL);
	rlen = strlen(reply);
	if (!vr_utf8_valid(reply, rlen))
		fail("the reply is not valid UTF-8", reply);
	r = json_tokener_parse(reply);
	if (!r || !json_object_is_type(r, json_type_object) ||
	    !json_object_object_get_ex(r, "ok", &ok) || !json_object_is_type(ok, json_type_boolean))
		fail("the reply is not a JSON object with a boolean ok", reply);
	if (json_object_get_boolean(ok) == refused)
		fail("ok and refused disagree", reply);
	if (refused) {
		struct json_object *e;

		if (!json_object_object_get_ex(r, "error", &e) ||
		    !json_object_is_type(e, json_type_string) || !json_object_get_string_len(e))
			fail("an error reply without its message", reply);
		if (S.applied)
			fail("a refused request applied something", reply);
	}
	if (S.applied)
		check_round_trip(&S.cfg);
	json_object_put(r);
	free(reply);
	cfg_free(&S.cfg);
	return 0;
}
