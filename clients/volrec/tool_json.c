/* SPDX-License-Identifier: MIT */
/*
 * A small JSON reader for the daemon's `status` and `event` messages: the text is tokenized once
 * into a flat array (each token knows the size of its subtree) and values are looked up by a
 * dotted path. Strict RFC 8259 syntax; depth bounded.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "tools.h"

#define JSON_DEPTH_MAX 64

struct parser {
	struct tool_json *j;
	const char *s;
	size_t len, pos;
	int depth;
};

static void skip_ws(struct parser *p)
{
	while (p->pos < p->len && (p->s[p->pos] == ' ' || p->s[p->pos] == '\t' ||
	                           p->s[p->pos] == '\n' || p->s[p->pos] == '\r'))
		p->pos++;
}

static int new_tok(struct parser *p, enum tool_json_type type, size_t start)
{
	struct tool_json *j = p->j;

	if (j->n == j->cap) {
		uint32_t cap = j->cap ? j->cap * 2 : 64;
		struct tool_json_tok *t = realloc(j->tok, cap * sizeof(*t));

		if (!t)
			return -ENOMEM;
		j->tok = t;
		j->cap = cap;
	}
	j->tok[j->n] = (struct tool_json_tok){.type = type, .start = (uint32_t)start, .size = 1};
	return (int)j->n++;
}

static int parse_value(struct parser *p);

static int parse_string(struct parser *p, enum tool_json_type type)
{
	size_t start = ++p->pos; /* after the quote */
	int t;

	while (p->pos < p->len && p->s[p->pos] != '"') {
		unsigned char ch = (unsigned char)p->s[p->pos];

		if (ch < 0x20)
			return -EINVAL;
		if (ch == '\\') {
			p->pos++;
			if (p->pos >= p->len)
				return -EINVAL;
			ch = (unsigned char)p->s[p->pos];
			if (ch == 'u') {
				for (int i = 1; i <= 4; i++)
					if (p->pos + (size_t)i >= p->len ||
					    !strchr("0123456789abcdefABCDEF", p->s[p->pos + i]) ||
					    !p->s[p->pos + i])
						return -EINVAL;
				p->pos += 4;
			} else if (!strchr("\"\\/bfnrt", ch) || !ch) {
				return -EINVAL;
			}
		}
		p->pos++;
	}
	if (p->pos >= p->len)
		return -EINVAL;
	t = new_tok(p, type, start);
	if (t < 0)
		return t;
	p->j->tok[t].end = (uint32_t)p->pos;
	p->pos++; /* closing quote */
	return t;
}

static int parse_number(struct parser *p)
{
	size_t start = p->pos;
	int t;

	if (p->s[p->pos] == '-')
		p->pos++;
	if (p->pos >= p->len || p->s[p->pos] < '0' || p->s[p->pos] > '9')
		return -EINVAL;
	if (p->s[p->pos] == '0')
		p->pos++;
	else
		while (p->pos < p->len && p->s[p->pos] >= '0' && p->s[p->pos] <= '9')
			p->pos++;
	if (p->pos < p->len && p->s[p->pos] == '.') {
		p->pos++;
		if (p->pos >= p->len || p->s[p->pos] < '0' || p->s[p->pos] > '9')
			return -EINVAL;
		while (p->pos < p->len && p->s[p->pos] >= '0' && p->s[p->pos] <= '9')
			p->pos++;
	}
	if (p->pos < p->len && (p->s[p->pos] == 'e' || p->s[p->pos] == 'E')) {
		p->pos++;
		if (p->pos < p->len && (p->s[p->pos] == '+' || p->s[p->pos] == '-'))
			p->pos++;
		if (p->pos >= p->len || p->s[p->pos] < '0' || p->s[p->pos] > '9')
			return -EINVAL;
		while (p->pos < p->len && p->s[p->pos] >= '0' && p->s[p->pos] <= '9')
			p->pos++;
	}
	t = new_tok(p, TJ_NUMBER, start);
	if (t >= 0)
		p->j->tok[t].end = (uint32_t)p->pos;
	return t;
}

static int parse_word(struct parser *p, const char *word, enum tool_json_type type)
{
	size_t n = strlen(word);
	int t;

	if (p->len - p->pos < n || memcmp(p->s + p->pos, word, n))
		return -EINVAL;
	t = new_tok(p, type, p->pos);
	p->pos += n;
	if (t >= 0)
		p->j->tok[t].end = (uint32_t)p->pos;
	return t;
}

/* Object or array: members are parsed in place after the container's token. */
static int parse_container(struct parser *p, bool object)
{
	char close = object ? '}' : ']';
	int t, rc;

	if (++p->depth > JSON_DEPTH_MAX)
		return -EINVAL;
	t = new_tok(p, object ? TJ_OBJECT : TJ_ARRAY, p->pos);
	if (t < 0)
		return t;
	p->pos++;
	skip_ws(p);
	if (p->pos < p->len && p->s[p->pos] == close) {
		p->pos++;
		goto done;
	}
	for (;;) {
		skip_ws(p);
		if (object) {
			if (p->pos >= p->len || p->s[p->pos] != '"')
				return -EINVAL;
			rc = parse_string(p, TJ_STRING);
			if (rc < 0)
				return rc;
			skip_ws(p);
			if (p->pos >= p->len || p->s[p->pos] != ':')
				return -EINVAL;
			p->pos++;
		}
		rc = parse_value(p);
		if (rc < 0)
			return rc;
		p->j->tok[t].count++;
		skip_ws(p);
		if (p->pos >= p->len)
			return -EINVAL;
		if (p->s[p->pos] == ',') {
			p->pos++;
			continue;
		}
		if (p->s[p->pos] != close)
			return -EINVAL;
		p->pos++;
		break;
	}
done:
	p->j->tok[t].end = (uint32_t)p->pos;
	p->j->tok[t].size = p->j->n - (uint32_t)t;
	p->depth--;
	return t;
}

static int parse_value(struct parser *p)
{
	skip_ws(p);
	if (p->pos >= p->len)
		return -EINVAL;
	switch (p->s[p->pos]) {
	case '{':
		return parse_container(p, true);
	case '[':
		return parse_container(p, false);
	case '"':
		return parse_string(p, TJ_STRING);
	case 't':
		return parse_word(p, "true", TJ_BOOL);
	case 'f':
		return parse_word(p, "false", TJ_BOOL);
	case 'n':
		return parse_word(p, "null", TJ_NULL);
	default:
		return parse_number(p);
	}
}

int tool_json_parse(struct tool_json *j, const char *text, size_t len, size_t *err_at)
{
	struct parser p = {.j = j, .s = text, .len = len};
	int rc;

	memset(j, 0, sizeof(*j));
	j->text = text;
	if (len > UINT32_MAX)
		return -EINVAL;
	rc = parse_value(&p);
	if (rc >= 0) {
		skip_ws(&p);
		if (p.pos != p.len)
			rc = -EINVAL;
	}
	if (rc < 0) {
		if (err_at)
			*err_at = p.pos;
		tool_json_free(j);
		return rc;
	}
	return 0;
}

void tool_json_free(struct tool_json *j)
{
	if (!j)
		return;
	free(j->tok);
	j->tok = NULL;
	j->n = j->cap = 0;
}

/* The token after tok's subtree within the same container (for object members: tok is a key,
 * the result is the next key). */
static int skip(const struct tool_json *j, int tok)
{
	return tok + (int)j->tok[tok].size;
}

static bool key_is(const struct tool_json *j, int tok, const char *key, size_t klen)
{
	const struct tool_json_tok *t = &j->tok[tok];

	return t->type == TJ_STRING && t->end - t->start == klen &&
	       !memcmp(j->text + t->start, key, klen);
}

int tool_json_find(const struct tool_json *j, int from, const char *path)
{
	int tok = from < 0 ? 0 : from;

	if (!j->n)
		return -1;
	while (*path) {
		const char *dot = strchr(path, '.');
		size_t klen = dot ? (size_t)(dot - path) : strlen(path);
		const struct tool_json_tok *c = &j->tok[tok];
		int m = tok + 1, found = -1;

		if (c->type == TJ_OBJECT) {
			for (uint32_t i = 0; i < c->count; i++) {
				int val = m + 1;

				if (key_is(j, m, path, klen)) {
					found = val;
					break;
				}
				m = skip(j, val);
			}
		} else if (c->type == TJ_ARRAY) {
			char *end;
			unsigned long idx = strtoul(path, &end, 10);

			if (end != path + klen || idx >= c->count)
				return -1;
			for (unsigned long i = 0; i < idx; i++)
				m = skip(j, m);
			found = m;
		}
		if (found < 0)
			return -1;
		tok = found;
		path += klen;
		if (*path == '.')
			path++;
	}
	return tok;
}

double tool_json_num(const struct tool_json *j, const char *path, double def)
{
	int t = tool_json_find(j, 0, path);

	if (t < 0 || j->tok[t].type != TJ_NUMBER)
		return def;
	return strtod(j->text + j->tok[t].start, NULL);
}

uint64_t tool_json_u64(const struct tool_json *j, const char *path, uint64_t def)
{
	int t = tool_json_find(j, 0, path);

	if (t < 0 || j->tok[t].type != TJ_NUMBER || j->text[j->tok[t].start] == '-')
		return def;
	return strtoull(j->text + j->tok[t].start, NULL, 10);
}

bool tool_json_bool(const struct tool_json *j, const char *path, bool def)
{
	int t = tool_json_find(j, 0, path);

	if (t < 0 || j->tok[t].type != TJ_BOOL)
		return def;
	return j->text[j->tok[t].start] == 't';
}

static void put_utf8(char *buf, size_t len, size_t *o, unsigned cp)
{
	char tmp[4];
	size_t n;

	if (cp < 0x80) {
		tmp[0] = (char)cp;
		n = 1;
	} else if (cp < 0x800) {
		tmp[0] = (char)(0xC0 | (cp >> 6));
		tmp[1] = (char)(0x80 | (cp & 0x3F));
		n = 2;
	} else {
		tmp[0] = (char)(0xE0 | (cp >> 12));
		tmp[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
		tmp[2] = (char)(0x80 | (cp & 0x3F));
		n = 3;
	}
	if (*o + n < len) {
		memcpy(buf + *o, tmp, n);
		*o += n;
	}
}

bool tool_json_str(const struct tool_json *j, const char *path, char *buf, size_t len)
{
	int t = tool_json_find(j, 0, path);
	size_t o = 0;

	if (len)
		buf[0] = '\0';
	if (t < 0 || j->tok[t].type != TJ_STRING || !len)
		return false;
	for (uint32_t i = j->tok[t].start; i < j->tok[t].end; i++) {
		char ch = j->text[i];

		if (ch == '\\') {
			ch = j->text[++i];
			switch (ch) {
			case 'b':
				ch = '\b';
				break;
			case 'f':
				ch = '\f';
				break;
			case 'n':
				ch = '\n';
				break;
			case 'r':
				ch = '\r';
				break;
			case 't':
				ch = '\t';
				break;
			case 'u': {
				char hex[5];

				memcpy(hex, j->text + i + 1, 4);
				hex[4] = '\0';
				put_utf8(buf, len, &o, (unsigned)strtoul(hex, NULL, 16));
				i += 4;
				continue;
			}
			default:
				break; /* " \ / stand for themselves */
			}
		}
		if (o + 1 < len)
			buf[o++] = ch;
	}
	buf[o] = '\0';
	return true;
}

void tool_json_write_str(FILE *f, const char *s)
{
	fputc('"', f);
	for (; *s; s++) {
		unsigned char ch = (unsigned char)*s;

		if (ch == '"' || ch == '\\')
			fprintf(f, "\\%c", ch);
		else if (ch == '\n')
			fputs("\\n", f);
		else if (ch == '\t')
			fputs("\\t", f);
		else if (ch < 0x20)
			fprintf(f, "\\u%04x", ch);
		else
			fputc(ch, f);
	}
	fputc('"', f);
}
