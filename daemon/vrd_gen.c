/* SPDX-License-Identifier: MIT */
/*
 * The history of live-parameter generations (vrd_gen.h): a ring of the last VRD_GEN_HISTORY
 * numbers and their values as JSON, indexed by number modulo its size.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/vrd_gen.h"

int vrd_gen_init(struct vrd_gens *g, const struct vr_config *cfg)
{
	uint32_t n;
	int rc;

	memset(g, 0, sizeof(*g));
	pthread_mutex_init(&g->lock, NULL);
	rc = vrd_gen_propose(g, cfg, &n);
	if (rc == 0)
		vrd_gen_commit(g, n);
	return rc;
}

int vrd_gen_propose(struct vrd_gens *g, const struct vr_config *cfg, uint32_t *n)
{
	const char *cur = vrd_gen_values(g, g->current);
	char *json;
	uint32_t next;

	if (cfg_live_json(cfg, &json) < 0)
		return -ENOMEM;
	if (cur && !strcmp(cur, json)) {
		free(json);
		*n = g->current;
		return 0;
	}
	next = g->last + 1 ? g->last + 1 : 1; /* 0 means "not told": never given */
	pthread_mutex_lock(&g->lock);
	free(g->e[next % VRD_GEN_HISTORY].json);
	g->e[next % VRD_GEN_HISTORY].n = next;
	g->e[next % VRD_GEN_HISTORY].json = json;
	pthread_mutex_unlock(&g->lock);
	g->last = next;
	*n = next;
	return 0;
}

void vrd_gen_commit(struct vrd_gens *g, uint32_t n)
{
	g->current = n;
}

void vrd_gen_drop(struct vrd_gens *g, uint32_t n)
{
	if (n == g->current || g->e[n % VRD_GEN_HISTORY].n != n)
		return;
	pthread_mutex_lock(&g->lock);
	free(g->e[n % VRD_GEN_HISTORY].json);
	g->e[n % VRD_GEN_HISTORY].json = NULL;
	g->e[n % VRD_GEN_HISTORY].n = 0;
	pthread_mutex_unlock(&g->lock);
}

char *vrd_gen_dup(struct vrd_gens *g, uint32_t n)
{
	char *text = NULL;

	pthread_mutex_lock(&g->lock);
	if (n && g->e[n % VRD_GEN_HISTORY].n == n && g->e[n % VRD_GEN_HISTORY].json)
		text = strdup(g->e[n % VRD_GEN_HISTORY].json);
	pthread_mutex_unlock(&g->lock);
	return text;
}

const char *vrd_gen_values(const struct vrd_gens *g, uint32_t n)
{
	if (!n || g->e[n % VRD_GEN_HISTORY].n != n)
		return NULL;
	return g->e[n % VRD_GEN_HISTORY].json;
}

uint32_t vrd_gen_oldest(const struct vrd_gens *g)
{
	return g->last > VRD_GEN_HISTORY ? g->last - VRD_GEN_HISTORY + 1 : 1;
}

void vrd_gen_free(struct vrd_gens *g)
{
	for (size_t i = 0; i < VRD_GEN_HISTORY; i++)
		free(g->e[i].json);
	pthread_mutex_destroy(&g->lock);
	memset(g, 0, sizeof(*g));
}
