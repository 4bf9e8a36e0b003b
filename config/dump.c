/* SPDX-License-Identifier: MIT */
/*
 * The configuration as YAML, walked from the schema: cfg_dump writes every key (defaults
 * included) in block style, in a form cfg_load reads back to an equal configuration;
 * cfg_get_key writes one key or section in flow style, as cfg_set_keys takes it.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "config/internal.h"

static void put_quoted(FILE *out, const char *s)
{
	fputc('"', out);
	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		if (*p == '"' || *p == '\\')
			fprintf(out, "\\%c", *p);
		else if (*p < 0x20 || *p == 0x7f)
			fprintf(out, "\\x%02x", *p);
		else
			fputc(*p, out);
	}
	fputc('"', out);
}

/* The shortest decimal that reads back to exactly v. */
static void put_double(FILE *out, double v)
{
	char buf[40];
	for (int prec = 6; prec <= 17; prec++) {
		snprintf(buf, sizeof(buf), "%.*g", prec, v);
		if (strtod(buf, NULL) == v)
			break;
	}
	fputs(buf, out);
}

/* The value of k in c, in flow style or (the list of strings) in block style at indent. */
static void put_value(FILE *out, const struct cfg_key *k, const struct vr_config *c, bool flow,
                      int indent)
{
	const void *p = cfg_at(c, k);

	switch (k->type) {
	case CFG_T_BOOL:
		fputs(*(const bool *)p ? "true" : "false", out);
		break;
	case CFG_T_INT:
		fprintf(out, "%d", *(const int *)p);
		break;
	case CFG_T_U32:
		fprintf(out, "%u", *(const uint32_t *)p);
		break;
	case CFG_T_U64:
		fprintf(out, "%llu", (unsigned long long)*(const uint64_t *)p);
		break;
	case CFG_T_F64:
		put_double(out, *(const double *)p);
		break;
	case CFG_T_ENUM: {
		int v = *(const int *)p, i = 0;
		while (k->names[i] && i < v)
			i++;
		fputs(k->names[i] && v >= 0 ? k->names[i] : "?", out);
		break;
	}
	case CFG_T_NAME:
		fputs(p, out);
		break;
	case CFG_T_STR:
	case CFG_T_PATH:
		put_quoted(out, p);
		break;
	case CFG_T_TABLE:
		put_quoted(out, ((const struct cfg_table *)p)->path);
		break;
	case CFG_T_ARGS:
		fputs(*(char *const *)p ? *(char *const *)p : "{}", out);
		break;
	case CFG_T_U32S:
	case CFG_T_F64S:
		for (size_t i = 0; i < k->n; i++) {
			fputs(i ? ", " : "[", out);
			if (k->type == CFG_T_U32S)
				fprintf(out, "%u", ((const uint32_t *)p)[i]);
			else
				put_double(out, ((const double *)p)[i]);
		}
		fputc(']', out);
		break;
	case CFG_T_INTS: {
		uint32_t n = *(const uint32_t *)((const char *)c + k->count);
		fputc('[', out);
		for (uint32_t i = 0; i < n && i < k->n; i++)
			fprintf(out, "%s%d", i ? ", " : "", ((const int *)p)[i]);
		fputc(']', out);
		break;
	}
	case CFG_T_LIST: {
		uint32_t n = *(const uint32_t *)((const char *)c + k->count);
		if (flow || !n)
			fputc('[', out);
		for (uint32_t i = 0; i < n && i < k->n; i++) {
			if (flow)
				fputs(i ? ", " : "", out);
			else
				fprintf(out, "\n%*s- ", indent + 2, "");
			put_quoted(out, (const char *)p + (size_t)i * CFG_PATH_MAX);
		}
		if (flow || !n)
			fputc(']', out);
		break;
	}
	}
}

/* Whether any key of the section at path holds a value. */
static bool section_present(const struct vr_config *c, const char *path)
{
	for (size_t i = 0; i < cfg_nkeys; i++)
		if (cfg_path_under(cfg_keys[i].path, path) && cfg_key_present(&cfg_keys[i], c))
			return true;
	return false;
}

/* The section at path: in block style at indent, or (indent < 0) as a flow mapping. */
static void put_section(FILE *out, const struct vr_config *c, const char *path, int indent)
{
	struct cfg_child ch[CFG_KEYS_MAX];
	size_t n = cfg_children(path, ch);
	bool first = true;

	if (indent < 0)
		fputc('{', out);
	for (size_t i = 0; i < n; i++) {
		char sub[CFG_KEY_MAX];
		snprintf(sub, sizeof(sub), "%s%s%.*s", path, *path ? "." : "", (int)ch[i].len,
		         ch[i].name);
		if (ch[i].key && !cfg_key_present(ch[i].key, c))
			continue;
		if (indent < 0)
			fprintf(out, "%s%.*s: ", first ? "" : ", ", (int)ch[i].len, ch[i].name);
		else
			fprintf(out, "%*s%.*s:", indent, "", (int)ch[i].len, ch[i].name);
		first = false;
		if (ch[i].key) {
			bool block_list = indent >= 0 && ch[i].key->type == CFG_T_LIST &&
			                  *(const uint32_t *)((const char *)c + ch[i].key->count);
			if (indent >= 0 && !block_list)
				fputc(' ', out);
			put_value(out, ch[i].key, c, indent < 0, indent);
		} else if (indent < 0) {
			put_section(out, c, sub, -1);
		} else if (!section_present(c, sub)) {
			fputs(" {}", out);
		} else {
			fputc('\n', out);
			put_section(out, c, sub, indent + 2);
			continue;
		}
		if (indent >= 0)
			fputc('\n', out);
	}
	if (indent < 0)
		fputc('}', out);
}

int cfg_dump(const struct vr_config *c, FILE *out)
{
	fputs("# volrecd effective configuration", out);
	if (c->source_file[0]) {
		fputs(" from ", out);
		for (const char *p = c->source_file; *p; p++)
			fputc((unsigned char)*p < 0x20 ? '?' : *p, out);
	}
	fputc('\n', out);
	put_section(out, c, "", 0);
	if (fflush(out) == EOF || ferror(out))
		return -EIO;
	return 0;
}

int cfg_get_key(const struct vr_config *cfg, const char *path, char **text, char *err,
                size_t errlen)
{
	const struct cfg_key *k = cfg_key_find(path);
	char *buf = NULL;
	size_t len = 0;
	FILE *f;

	if (!k && !cfg_is_section(path)) {
		cfg_unknown_key(path, err, errlen);
		return -ENOENT;
	}
	f = open_memstream(&buf, &len);
	if (!f)
		goto out_nomem;
	if (!k)
		put_section(f, cfg, path, -1);
	else if (cfg_key_present(k, cfg))
		put_value(f, k, cfg, true, 0);
	else
		fputc('~', f);
	if (fclose(f)) {
		free(buf);
		goto out_nomem;
	}
	*text = buf;
	return 0;
out_nomem:
	return vr_err(err, errlen, -ENOMEM, "%s: out of memory for its value",
	              *path ? path : "configuration");
}
