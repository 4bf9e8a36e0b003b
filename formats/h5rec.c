/* SPDX-License-Identifier: MIT */
/*
 * The processed recording's HDF5 file (h5rec.h): the datasets of the published volumes, their
 * channels and per-volume columns, /missed and /generations, written through h5vol.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "formats/h5attr.h"
#include "formats/h5rec.h"
#include "formats/h5vol.h"

/* The datasets, in the order of h5vol's fields (those of absent channels left out). F_VOLUMES,
 * F_CH1 and F_CH2 are the channels' volumes, named by their kind as `volrec process` names
 * them (/volumes, /angio, /doppler; docs/protocol.md §2.7). */
enum {
	F_VOLUMES,
	F_CH1,
	F_CH2,
	F_CHANNEL_RANGE,
	F_SEQUENCE,
	F_SESSION,
	F_VOLUME_ID,
	F_EPOCH,
	F_OFFSET,
	F_T_FIRST,
	F_T_LAST,
	F_T_PUBLISH,
	F_LATENCY,
	F_FLAGS,
	F_GENERATION,
	F_GENERATION_INDEX,
	F_MISSED,
	F_GENERATIONS,
	F_GENERATION_NUMBERS,
	F_COUNT
};

struct h5rec_missed_row {
	uint64_t session, first, last;
	uint8_t reason;
};

/* The dataset of each channel kind (enum volrec_channel_kind), as `volrec process` writes. */
static const char *const channel_dsets[VOLREC_CHANNEL_KINDS] = {"volumes", "angio", "doppler"};
static const char *const channel_names[VOLREC_CHANNEL_KINDS] = {"structure", "angio", "doppler"};

struct h5rec {
	struct h5vol *w;
	struct h5rec_layout l;
	struct h5rec_origin o;
	uint64_t nmissed; /* volumes missing */
	struct {
		uint32_t number; /* the daemon's generation number */
		char *text;      /* its values (JSON), owned */
	} * gens;                /* the rows of /generations */
	uint32_t ngens;
	bool have_gen; /* the last volume's generation, read in session gen_session: */
	uint64_t gen_session;
	uint32_t gen_number, gen_index;
};

const char *h5rec_channel_dataset(uint32_t kind)
{
	return kind < VOLREC_CHANNEL_KINDS ? channel_dsets[kind] : "?";
}

const char *h5rec_channel_name(uint32_t kind)
{
	return kind < VOLREC_CHANNEL_KINDS ? channel_names[kind] : "?";
}

/* Whether field i is in the file: the channels it has, and their ranges with more than the
 * structure. */
static bool field_used(const struct h5rec_layout *l, unsigned i)
{
	if (i == F_CH1 || i == F_CH2)
		return i - F_VOLUMES < l->nch;
	if (i == F_CHANNEL_RANGE)
		return l->nch > 1 || l->kind[0] != VOLREC_CHANNEL_STRUCTURE;
	return true;
}

/* The file's index of field i (which is used): the used fields before it. */
static size_t field_index(const struct h5rec_layout *l, unsigned i)
{
	size_t n = 0;

	for (unsigned k = 0; k < i; k++)
		n += field_used(l, k);
	return n;
}

static int create_file(struct h5rec *r, const char *path, bool replace, unsigned deflate, char *err,
                       size_t errlen)
{
	const struct h5rec_layout *l = &r->l;
	struct h5vol_field f[F_COUNT] = {
	        [F_VOLUMES] =
	                {channel_dsets[l->kind[0]], H5T_NATIVE_UINT8, 3, {l->Y, l->X, l->Z}, false},
	        [F_CH1] =
	                {channel_dsets[l->kind[1]], H5T_NATIVE_UINT8, 3, {l->Y, l->X, l->Z}, false},
	        [F_CH2] =
	                {channel_dsets[l->kind[2]], H5T_NATIVE_UINT8, 3, {l->Y, l->X, l->Z}, false},
	        [F_CHANNEL_RANGE] = {"channel_range", H5T_NATIVE_DOUBLE, 2, {l->nch, 2}, false},
	        [F_SEQUENCE] = {"sequence", H5T_NATIVE_UINT64, 0, {0}, false},
	        [F_SESSION] = {"session", H5T_NATIVE_UINT64, 0, {0}, false},
	        [F_VOLUME_ID] = {"volume_id", H5T_NATIVE_UINT64, 0, {0}, false},
	        [F_EPOCH] = {"epoch", H5T_NATIVE_UINT64, 0, {0}, false},
	        [F_OFFSET] = {"offset", H5T_NATIVE_INT32, 1, {2}, false},
	        [F_T_FIRST] = {"t_first_ns", H5T_NATIVE_UINT64, 0, {0}, false},
	        [F_T_LAST] = {"t_last_ns", H5T_NATIVE_UINT64, 0, {0}, false},
	        [F_T_PUBLISH] = {"t_publish_ns", H5T_NATIVE_UINT64, 0, {0}, false},
	        [F_LATENCY] = {"latency_ns", H5T_NATIVE_UINT64, 0, {0}, false},
	        [F_FLAGS] = {"flags", H5T_NATIVE_UINT32, 0, {0}, false},
	        [F_GENERATION] = {"generation", H5T_NATIVE_UINT32, 0, {0}, false},
	        [F_GENERATION_INDEX] = {"generation_index", H5T_NATIVE_UINT32, 0, {0}, false},
	        [F_MISSED] = {"missed", -1, 0, {0}, true},
	        [F_GENERATIONS] = {"generations", -1, 0, {0}, true},
	        [F_GENERATION_NUMBERS] = {"generation_numbers", H5T_NATIVE_UINT32, 0, {0}, true},
	};
	hid_t t = H5Tcreate(H5T_COMPOUND, sizeof(struct h5rec_missed_row)),
	      text = vr_h5_text_type();
	struct h5vol_field used[F_COUNT];
	size_t n = 0;
	int rc;

	if (text < 0) {
		if (t >= 0)
			H5Tclose(t);
		return vr_err(err, errlen, -EIO, "cannot make the /generations type");
	}
	f[F_GENERATIONS].type = text;
	if (t < 0 ||
	    H5Tinsert(t, "session", HOFFSET(struct h5rec_missed_row, session), H5T_NATIVE_UINT64) <
	            0 ||
	    H5Tinsert(t, "first", HOFFSET(struct h5rec_missed_row, first), H5T_NATIVE_UINT64) < 0 ||
	    H5Tinsert(t, "last", HOFFSET(struct h5rec_missed_row, last), H5T_NATIVE_UINT64) < 0 ||
	    H5Tinsert(t, "reason", HOFFSET(struct h5rec_missed_row, reason), H5T_NATIVE_UINT8) <
	            0) {
		if (t >= 0)
			H5Tclose(t);
		H5Tclose(text);
		return vr_err(err, errlen, -EIO, "cannot make the /missed type");
	}
	f[F_MISSED].type = t;
	for (unsigned i = 0; i < F_COUNT; i++)
		if (field_used(l, i))
			used[n++] = f[i];
	rc = h5vol_create_opt(path, replace, used, n, &(struct h5vol_options){.deflate = deflate},
	                      &r->w, err, errlen);
	H5Tclose(t);
	H5Tclose(text);
	return rc;
}

void h5rec_attr_text(hid_t f, const char *name, const char *text)
{
	size_t len = strlen(text) * 3 + 1;
	char *safe = malloc(len);

	if (!safe)
		return;
	vr_utf8_sanitize(text, safe, len);
	vr_h5_attr_str(f, name, safe);
	free(safe);
}

int h5rec_describe(struct h5rec *r, char *err, size_t errlen)
{
	hid_t f = h5vol_file(r->w);
	uint32_t shape[3] = {r->l.Y, r->l.X, r->l.Z};
	char chans[64] = "";

	vr_h5_attr(f, "shape", H5T_NATIVE_UINT32, 3, shape);
	for (uint32_t k = 0; k < r->l.nch; k++)
		snprintf(chans + strlen(chans), sizeof(chans) - strlen(chans), "%s%s", k ? "," : "",
		         channel_names[r->l.kind[k]]);
	vr_h5_attr_str(f, "channels", chans);
	vr_h5_attr_str(f, "layout",
	               "volumes [n][Y][X][Z] u8, Z (depth) fastest; the channels "
	               "angio, doppler likewise");
	vr_h5_attr_str(f, "instance", r->o.instance ? r->o.instance : "");
	vr_h5_attr_str(f, "missed_reasons",
	               "1 never received (overwritten before the recorder got it), 2 torn "
	               "(overwritten while being copied), 3 left out (volrecd's recorder fell "
	               "behind the disk)");
	vr_h5_attr_str(f, "volrec_version", VOLREC_VERSION);
	vr_h5_attr_str(f, "end", "recording");
	vr_h5_attr_u64(f, "complete", 0);
	if (r->o.config_yaml) {
		h5rec_attr_text(f, "config_yaml", r->o.config_yaml);
		vr_h5_attr_str(f, "config_yaml_source",
		               r->o.config_from ? r->o.config_from : "daemon");
	}
	return h5vol_flush(r->w, err, errlen);
}

int h5rec_create(const char *path, bool replace, unsigned deflate, const struct h5rec_layout *l,
                 const struct h5rec_origin *o, struct h5rec **out, char *err, size_t errlen)
{
	struct h5rec *r;
	int rc;

	if (!l->nch || l->nch > VOLREC_CHANNELS_MAX || !l->Y || !l->X || !l->Z)
		return vr_err(err, errlen, -EINVAL, "%s: %u channels of %u x %u x %u volumes", path,
		              l->nch, l->Y, l->X, l->Z);
	for (uint32_t k = 0; k < l->nch; k++)
		if (l->kind[k] >= VOLREC_CHANNEL_KINDS)
			return vr_err(err, errlen, -EINVAL,
			              "%s: channel %u has the unknown kind %u", path, k,
			              l->kind[k]);
	r = calloc(1, sizeof(*r));
	if (!r)
		return vr_err(err, errlen, -ENOMEM, "out of memory");
	r->l = *l;
	r->o = *o;
	rc = create_file(r, path, replace, deflate, err, errlen);
	if (rc) {
		free(r);
		return rc;
	}
	*out = r;
	return 0;
}

struct h5vol *h5rec_vol(struct h5rec *r)
{
	return r->w;
}

hid_t h5rec_file(struct h5rec *r)
{
	return h5vol_file(r->w);
}

uint64_t h5rec_count(const struct h5rec *r)
{
	return h5vol_count(r->w);
}

uint64_t h5rec_missed(const struct h5rec *r)
{
	return r->nmissed;
}

int h5rec_miss(struct h5rec *r, uint64_t session, uint64_t first, uint64_t last,
               enum h5rec_reason why, char *err, size_t errlen)
{
	struct h5rec_missed_row m = {session, first, last, (uint8_t)why};

	r->nmissed += last - first + 1;
	return h5vol_log(r->w, field_index(&r->l, F_MISSED), &m, err, errlen);
}

/* The row of /generations of the values of generation n (read in session): the last volume's,
 * else one already written with the same number and values, else a new row. 0 or as h5vol. */
static int generation_row(struct h5rec *r, uint64_t session, uint32_t n, uint32_t *index, char *err,
                          size_t errlen)
{
	char *text;
	const char *row;
	int rc;

	if (r->have_gen && r->gen_session == session && r->gen_number == n) {
		*index = r->gen_index;
		return 0;
	}
	text = n && r->o.gen_values ? r->o.gen_values(r->o.ctx, n) : NULL;
	row = text ? text : "null";
	for (uint32_t i = r->ngens; i-- > 0;)
		if (r->gens[i].number == n && !strcmp(r->gens[i].text, row)) {
			free(text);
			*index = i;
			goto out;
		}
	{
		void *g = realloc(r->gens, (r->ngens + 1) * sizeof(*r->gens));

		if (!g || (!text && !(text = strdup(row)))) {
			if (g)
				r->gens = g;
			free(text);
			return vr_err(err, errlen, -ENOMEM, "out of memory");
		}
		r->gens = g;
	}
	/* the text first: a number always has its values, even in a file cut short */
	rc = h5vol_log(r->w, field_index(&r->l, F_GENERATIONS), &text, err, errlen);
	if (!rc)
		rc = h5vol_log(r->w, field_index(&r->l, F_GENERATION_NUMBERS), &n, err, errlen);
	if (rc) {
		free(text);
		return rc;
	}
	r->gens[r->ngens].number = n;
	r->gens[r->ngens].text = text;
	*index = r->ngens++;
out:
	r->have_gen = true;
	r->gen_session = session;
	r->gen_number = n;
	r->gen_index = *index;
	return 0;
}

/* What channel k's values mean, as attributes of its dataset, the first volume's (the live
 * ranges of every volume are in /channel_range): those `volrec process -o` writes
 * (formats/h5attr.h, docs/formats.md "Channels"), from the channel's descriptor. 0 or -EIO. */
static int channel_attrs(struct h5rec *r, uint32_t k, const struct volrec_channel *ch)
{
	const hid_t f = h5vol_file(r->w);
	const char *name = channel_dsets[r->l.kind[k]];
	const double range[2] = {ch->value_lo, ch->value_hi};

	switch (r->l.kind[k]) {
	case VOLREC_CHANNEL_STRUCTURE:
		return vr_h5_structure_meaning(f, name, range) ? -EIO : 0;
	case VOLREC_CHANNEL_ANGIO:
		return vr_h5_angio_meaning(f, name, true,
		                           ch->method == VOLREC_ANGIO_SVAR ? "svar" : "cdv", range)
		               ? -EIO
		               : 0;
	default:
		return vr_h5_doppler_meaning(f, name, true,
		                             ch->method == VOLREC_DOPPLER_BSCAN ? "bscan" : "ascan",
		                             ch->period_us, ch->center_wavelength_nm,
		                             ch->refractive_index)
		               ? -EIO
		               : 0;
	}
}

int h5rec_append(struct h5rec *r, const struct volrec_view *v, const uint8_t *data,
                 const struct volrec_channel *ch, const double um[3], uint32_t gen, char *err,
                 size_t errlen)
{
	int32_t off[2] = {v->offset_x, v->offset_y};
	uint32_t gen_index = 0;
	const size_t bytes = (size_t)r->l.Y * r->l.X * r->l.Z;
	double range[VOLREC_CHANNELS_MAX][2];
	int rc;

	if (!h5vol_count(r->w)) /* the units and the channels' meaning, from the first volume */
		for (uint32_t k = 0; k < r->l.nch; k++)
			if (vr_h5_dataset_units(h5vol_file(r->w), channel_dsets[r->l.kind[k]], um) <
			            0 ||
			    channel_attrs(r, k, &ch[k]) < 0)
				return vr_err(err, errlen, -EIO, "cannot write the units");
	for (uint32_t k = 0; k < r->l.nch; k++) {
		range[k][0] = ch[k].value_lo;
		range[k][1] = ch[k].value_hi;
	}
	rc = generation_row(r, v->session_id, gen, &gen_index, err, errlen);
	if (rc)
		return rc;
	const void *all[F_COUNT] = {
	        [F_VOLUMES] = data,
	        [F_CH1] = data + bytes,
	        [F_CH2] = data + 2 * bytes,
	        [F_CHANNEL_RANGE] = range,
	        [F_SEQUENCE] = &v->sequence,
	        [F_SESSION] = &v->session_id,
	        [F_VOLUME_ID] = &v->volume_id,
	        [F_EPOCH] = &v->epoch,
	        [F_OFFSET] = off,
	        [F_T_FIRST] = &v->t_first_ns,
	        [F_T_LAST] = &v->t_last_ns,
	        [F_T_PUBLISH] = &v->t_publish_ns,
	        [F_LATENCY] = &v->latency_ns,
	        [F_FLAGS] = &v->flags,
	        [F_GENERATION] = &gen,
	        [F_GENERATION_INDEX] = &gen_index,
	};
	const void *rows[F_COUNT];
	size_t n = 0;

	for (unsigned i = 0; i < F_COUNT; i++)
		if (field_used(&r->l, i))
			rows[n++] = all[i];
	rc = h5vol_append(r->w, rows, err, errlen);
	if (rc && !h5vol_is_nospace(rc))
		vr_err_prefix(err, errlen, "volume #%" PRIu64, v->sequence);
	return rc;
}

int h5rec_close(struct h5rec *r, const char *end, bool complete, uint64_t sessions,
                uint64_t *volumes, char *err, size_t errlen)
{
	int rc = 0;

	if (!r)
		return 0;
	if (r->w) {
		if (volumes)
			*volumes = h5vol_count(r->w);
		if (!h5vol_broken(r->w)) { /* a broken file stays as it was at its last flush */
			hid_t f = h5vol_file(r->w);

			vr_h5_attr_u64(f, "volumes", h5vol_count(r->w));
			vr_h5_attr_u64(f, "missed_volumes", r->nmissed);
			vr_h5_attr_u64(f, "sessions", sessions);
			vr_h5_attr_str(f, "end", end);
			vr_h5_attr_u64(f, "complete", complete ? 1 : 0);
		}
		rc = h5vol_close(r->w, err, errlen);
	}
	for (uint32_t i = 0; i < r->ngens; i++)
		free(r->gens[i].text);
	free(r->gens);
	free(r);
	return rc;
}
