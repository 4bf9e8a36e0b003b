/* SPDX-License-Identifier: MIT */
/*
 * OME-TIFF writer through libtiff: one page per B-scan (x across, depth z down), pages in the
 * order y, channel, t (OME DimensionOrder XYZCT: OME X = x, OME Y = depth z, OME Z = y, C the
 * channels), OME-XML with the physical sizes, channel names and what their values mean in the
 * first page's ImageDescription; BigTIFF when the file would pass 4 GiB.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <json-c/json.h>
#include <tiffio.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include "formats/fmt.h"

struct tiff {
	char *tmp;
	TIFF *tif;
	uint8_t *page; /* one transposed B-scan */
	char *xml;     /* the OME-XML */
};

/* libtiff's messages are kept for the error that follows, never printed. */
static _Thread_local char tiff_msg[256];

static void tiff_handler(const char *module, const char *fmt, va_list ap)
{
	int k = snprintf(tiff_msg, sizeof(tiff_msg), "%s: ", module ? module : "libtiff");

	if (k > 0 && (size_t)k < sizeof(tiff_msg))
		vsnprintf(tiff_msg + k, sizeof(tiff_msg) - (size_t)k, fmt, ap);
}

static void tiff_quiet(const char *module, const char *fmt, va_list ap)
{
	(void)module;
	(void)fmt;
	(void)ap;
}

/* Append s to the XML text, escaped for an attribute or element. */
static void xml_escape(FILE *f, const char *s)
{
	for (; *s; s++) {
		switch (*s) {
		case '<':
			fputs("&lt;", f);
			break;
		case '>':
			fputs("&gt;", f);
			break;
		case '&':
			fputs("&amp;", f);
			break;
		case '"':
			fputs("&quot;", f);
			break;
		default:
			fputc(*s, f);
		}
	}
}

/* One MapAnnotation per channel (ID Annotation:1 + c): what its values mean, as key-value
 * pairs (the attributes of its dataset, numbers and lists as JSON text). */
static void tiff_channel_maps(FILE *f, const struct fmt_info *in)
{
	for (uint32_t c = 0; c < in->nch; c++) {
		struct json_object *o = fmt_channel_json(&in->ch[c]), *attrs = NULL;

		fprintf(f,
		        "<MapAnnotation ID=\"Annotation:%u\" Namespace=\"volrec/channel\">"
		        "<Value>",
		        c + 1);
		json_object_object_get_ex(o, "attributes", &attrs);
		json_object_object_foreach(o, key, val)
		{
			if (!strcmp(key, "attributes"))
				continue;
			fprintf(f, "<M K=\"%s\">", key);
			xml_escape(f, json_object_is_type(val, json_type_string)
			                      ? json_object_get_string(val)
			                      : json_object_to_json_string_ext(
			                                val, JSON_C_TO_STRING_PLAIN));
			fprintf(f, "</M>");
		}
		if (attrs) {
			json_object_object_foreach(attrs, akey, aval)
			{
				fprintf(f, "<M K=\"");
				xml_escape(f, akey);
				fprintf(f, "\">");
				xml_escape(f, json_object_is_type(aval, json_type_string)
				                      ? json_object_get_string(aval)
				                      : json_object_to_json_string_ext(
				                                aval, JSON_C_TO_STRING_PLAIN));
				fprintf(f, "</M>");
			}
		}
		fprintf(f, "</Value></MapAnnotation>");
		json_object_put(o);
	}
}

/* The Channel elements: one without a name (no channel axis), or one per channel with its
 * name and a reference to its MapAnnotation. */
static void tiff_channels(FILE *f, const struct fmt_info *in)
{
	if (!fmt_channel_axis(in)) {
		fprintf(f, "<Channel ID=\"Channel:0:0\" "
		           "SamplesPerPixel=\"1\"><LightPath/></Channel>\n");
		return;
	}
	for (uint32_t c = 0; c < in->nch; c++) {
		fprintf(f, "<Channel ID=\"Channel:0:%u\" Name=\"", c);
		xml_escape(f, in->ch[c].name);
		fprintf(f,
		        "\" SamplesPerPixel=\"1\"><AnnotationRef ID=\"Annotation:%u\"/><LightPath/>"
		        "</Channel>\n",
		        c + 1);
	}
}

static char *tiff_ome_xml(const struct fmt_writer *w)
{
	const struct fmt_info *in = &w->info;
	bool known = fmt_voxel_known(in), tknown = in->interval_s == in->interval_s;
	bool caxis = fmt_channel_axis(in);
	const char *base = strrchr(w->path, '/') ? strrchr(w->path, '/') + 1 : w->path;
	struct json_object *o = json_object_new_object();
	char *xml = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&xml, &len);

	if (!f) {
		json_object_put(o);
		return NULL;
	}
	json_object_object_add(o, "volrec_version", json_object_new_string(VOLREC_VERSION));
	if (w->opt.source)
		json_object_object_add(o, "source", json_object_new_string(w->opt.source));
	json_object_object_add(o, "axes",
	                       json_object_new_string("OME X = x, OME Y = z (depth), OME Z = y"));
	json_object_object_add(o, "voxel_size_known", json_object_new_boolean(known));
	if (caxis) {
		struct json_object *chs = json_object_new_array();

		for (uint32_t c = 0; c < in->nch; c++)
			json_object_array_add(chs, fmt_channel_json(&in->ch[c]));
		json_object_object_add(o, "channels", chs);
	}
	if (in->attrs)
		json_object_object_add(o, "attributes", json_object_get(in->attrs));
	if (in->columns)
		json_object_object_add(o, "volumes", json_object_get(in->columns));

	fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
	           "<OME xmlns=\"http://www.openmicroscopy.org/Schemas/OME/2016-06\" "
	           "xmlns:xsi=\"http://www.w3.org/2001/XMLSchema-instance\" "
	           "xsi:schemaLocation=\"http://www.openmicroscopy.org/Schemas/OME/2016-06 "
	           "http://www.openmicroscopy.org/Schemas/OME/2016-06/ome.xsd\" "
	           "Creator=\"volrec " VOLREC_VERSION "\">\n");
	fprintf(f, "<Image ID=\"Image:0\" Name=\"");
	xml_escape(f, base);
	fprintf(f,
	        "\"><Description>OCT volumes: B-scans (x across, depth z down) stacked along y%s",
	        known ? "" : "; voxel size unknown");
	for (uint32_t c = 0; caxis && c < in->nch; c++)
		fprintf(f, "%s%s", c ? ", " : "; channels (C): ", in->ch[c].name);
	fprintf(f, "</Description>\n");
	fprintf(f,
	        "<Pixels ID=\"Pixels:0\" DimensionOrder=\"XYZCT\" Type=\"uint8\" "
	        "SignificantBits=\"8\" BigEndian=\"false\" Interleaved=\"false\" SizeX=\"%u\" "
	        "SizeY=\"%u\" SizeZ=\"%u\" SizeC=\"%u\" SizeT=\"%llu\"",
	        in->shape[1], in->shape[2], in->shape[0], fmt_nch(in), (unsigned long long)in->nt);
	if (known)
		fprintf(f,
		        " PhysicalSizeX=\"%.9g\" PhysicalSizeXUnit=\"\xc2\xb5m\" "
		        "PhysicalSizeY=\"%.9g\" PhysicalSizeYUnit=\"\xc2\xb5m\" "
		        "PhysicalSizeZ=\"%.9g\" PhysicalSizeZUnit=\"\xc2\xb5m\"",
		        in->voxel_um[1], in->voxel_um[2], in->voxel_um[0]);
	if (tknown)
		fprintf(f, " TimeIncrement=\"%.9g\" TimeIncrementUnit=\"s\"", in->interval_s);
	fprintf(f, ">\n");
	tiff_channels(f, in);
	fprintf(f,
	        "<TiffData IFD=\"0\" PlaneCount=\"%llu\"/>\n</Pixels>\n"
	        "<AnnotationRef ID=\"Annotation:0\"/>\n</Image>\n"
	        "<StructuredAnnotations><CommentAnnotation ID=\"Annotation:0\" "
	        "Namespace=\"volrec/provenance\"><Value>",
	        (unsigned long long)in->nt * fmt_nch(in) * in->shape[0]);
	xml_escape(f, json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN |
	                                                        JSON_C_TO_STRING_NOSLASHESCAPE));
	fprintf(f, "</Value></CommentAnnotation>");
	if (caxis)
		tiff_channel_maps(f, in);
	fprintf(f, "</StructuredAnnotations>\n</OME>\n");
	json_object_put(o);
	if (fclose(f) != 0) {
		free(xml);
		return NULL;
	}
	return xml;
}

static int tiff_open(struct fmt_writer *w, char *err, size_t errlen)
{
	const struct fmt_info *in = &w->info;
	struct tiff *t = calloc(1, sizeof(*t));
	uint64_t pages = in->nt * fmt_nch(in) * in->shape[0];
	uint64_t bytes = pages * in->shape[1] * in->shape[2];
	/* data, a directory of about 200 bytes per page, and the XML */
	bool big = bytes + pages * 256 + (64u << 20) > UINT32_MAX;

	if (!t)
		return vr_err(err, errlen, -ENOMEM, "out of memory");
	w->priv = t;
	TIFFSetErrorHandler(tiff_handler);
	TIFFSetWarningHandler(tiff_quiet);
	if (!w->opt.replace && access(w->path, F_OK) == 0)
		return vr_err(err, errlen, -EEXIST, "%s: exists (--force replaces it)", w->path);
	t->tmp = fmt_partial_name(w->path);
	t->page = malloc((size_t)in->shape[1] * in->shape[2]);
	t->xml = tiff_ome_xml(w);
	if (!t->tmp || !t->page || !t->xml)
		return vr_err(err, errlen, -ENOMEM, "out of memory");
	errno = 0;
	tiff_msg[0] = 0;
	t->tif = TIFFOpen(t->tmp, big ? "w8" : "w");
	if (!t->tif)
		return vr_err(err, errlen, errno ? -errno : -EIO, "%s: %s", t->tmp,
		              errno ? strerror(errno) : tiff_msg);
	return 0;
}

#ifdef __SSE2__
/* 16 rows of 16 bytes (row i at in + i * is) into 16 rows of 16 (row j at out + j * os). */
static inline void tiff_transpose16(uint8_t *out, size_t os, const uint8_t *in, size_t is)
{
	__m128i a[16], b[16];

	for (int i = 0; i < 16; i += 2) {
		__m128i r0 = _mm_loadu_si128((const __m128i *)(in + (size_t)i * is));
		__m128i r1 = _mm_loadu_si128((const __m128i *)(in + (size_t)(i + 1) * is));

		a[i] = _mm_unpacklo_epi8(r0, r1);
		a[i + 1] = _mm_unpackhi_epi8(r0, r1);
	}
	/* b[4k + m]: rows 4k..4k+3 of columns 4m..4m+3 */
	for (int k = 0; k < 4; k++) {
		b[4 * k + 0] = _mm_unpacklo_epi16(a[4 * k], a[4 * k + 2]);
		b[4 * k + 1] = _mm_unpackhi_epi16(a[4 * k], a[4 * k + 2]);
		b[4 * k + 2] = _mm_unpacklo_epi16(a[4 * k + 1], a[4 * k + 3]);
		b[4 * k + 3] = _mm_unpackhi_epi16(a[4 * k + 1], a[4 * k + 3]);
	}
	for (int m = 0; m < 4; m++) {
		__m128i clo = _mm_unpacklo_epi32(b[m], b[4 + m]);
		__m128i chi = _mm_unpackhi_epi32(b[m], b[4 + m]);
		__m128i dlo = _mm_unpacklo_epi32(b[8 + m], b[12 + m]);
		__m128i dhi = _mm_unpackhi_epi32(b[8 + m], b[12 + m]);

		_mm_storeu_si128((__m128i *)(out + (size_t)(4 * m) * os),
		                 _mm_unpacklo_epi64(clo, dlo));
		_mm_storeu_si128((__m128i *)(out + (size_t)(4 * m + 1) * os),
		                 _mm_unpackhi_epi64(clo, dlo));
		_mm_storeu_si128((__m128i *)(out + (size_t)(4 * m + 2) * os),
		                 _mm_unpacklo_epi64(chi, dhi));
		_mm_storeu_si128((__m128i *)(out + (size_t)(4 * m + 3) * os),
		                 _mm_unpackhi_epi64(chi, dhi));
	}
}
#endif

/* The B-scan [x][z] of plane y as a page of rows z, columns x: 16x16 tiles through SSE2
 * registers, the edges byte by byte. */
static void tiff_transpose(uint8_t *out, const uint8_t *in, uint32_t X, uint32_t Z)
{
	uint32_t x16 = 0, z16 = 0;

#ifdef __SSE2__
	x16 = X & ~15u;
	z16 = Z & ~15u;
	for (uint32_t x0 = 0; x0 < x16; x0 += 16)
		for (uint32_t z0 = 0; z0 < z16; z0 += 16)
			tiff_transpose16(out + (size_t)z0 * X + x0, X, in + (size_t)x0 * Z + z0, Z);
#endif
	for (uint32_t x = 0; x < x16; x++) /* the depths past the last tile */
		for (uint32_t z = z16; z < Z; z++)
			out[(size_t)z * X + x] = in[(size_t)x * Z + z];
	for (uint32_t x = x16; x < X; x++) /* the columns past the last tile */
		for (uint32_t z = 0; z < Z; z++)
			out[(size_t)z * X + x] = in[(size_t)x * Z + z];
}

static int tiff_put(struct fmt_writer *w, uint64_t ti, const uint8_t *vol, char *err, size_t errlen)
{
	struct tiff *t = w->priv;
	const uint32_t Y = w->info.shape[0], X = w->info.shape[1], Z = w->info.shape[2];
	const uint32_t nch = fmt_nch(&w->info);
	const size_t n = (size_t)X * Z;

	/* the pages of volume ti: channel by channel (C), y (OME Z) within each */
	for (uint32_t p = 0; p < nch * Y; p++) {
		TIFF *tif = t->tif;

		tiff_transpose(t->page, vol + (size_t)p * n, X, Z);
		TIFFSetField(tif, TIFFTAG_IMAGEWIDTH, X);
		TIFFSetField(tif, TIFFTAG_IMAGELENGTH, Z);
		TIFFSetField(tif, TIFFTAG_BITSPERSAMPLE, 8);
		TIFFSetField(tif, TIFFTAG_SAMPLESPERPIXEL, 1);
		TIFFSetField(tif, TIFFTAG_SAMPLEFORMAT, SAMPLEFORMAT_UINT);
		TIFFSetField(tif, TIFFTAG_PHOTOMETRIC, PHOTOMETRIC_MINISBLACK);
		TIFFSetField(tif, TIFFTAG_PLANARCONFIG, PLANARCONFIG_CONTIG);
		TIFFSetField(tif, TIFFTAG_COMPRESSION, COMPRESSION_NONE);
		TIFFSetField(tif, TIFFTAG_ROWSPERSTRIP, Z);
		TIFFSetField(tif, TIFFTAG_SOFTWARE, "volrec " VOLREC_VERSION);
		if (ti == 0 && p == 0)
			TIFFSetField(tif, TIFFTAG_IMAGEDESCRIPTION, t->xml);
		errno = 0;
		tiff_msg[0] = 0;
		if (TIFFWriteEncodedStrip(tif, 0, t->page, (tmsize_t)n) < 0 ||
		    !TIFFWriteDirectory(tif))
			return vr_err(err, errlen, errno ? -errno : -EIO, "%s: %s", t->tmp,
			              errno ? strerror(errno) : tiff_msg);
	}
	w->written += (uint64_t)nch * Y * n;
	return 0;
}

static int tiff_finish(struct fmt_writer *w, char *err, size_t errlen)
{
	struct tiff *t = w->priv;
	int rc;

	errno = 0;
	tiff_msg[0] = 0;
	if (!TIFFFlush(t->tif)) {
		rc = errno ? -errno : -EIO;
		return vr_err(err, errlen, rc, "%s: %s", t->tmp,
		              errno ? strerror(errno) : tiff_msg);
	}
	TIFFClose(t->tif);
	t->tif = NULL;
	rc = fmt_sync_path(t->tmp);
	return rc < 0 ? vr_err_errno(err, errlen, rc, "%s", t->tmp) : 0;
}

static int tiff_commit(struct fmt_writer *w, char *err, size_t errlen)
{
	struct tiff *t = w->priv;

	return fmt_commit_rename(t->tmp, w->path, w->opt.replace, err, errlen);
}

static void tiff_abort(struct fmt_writer *w)
{
	struct tiff *t = w->priv;

	if (!t)
		return;
	if (t->tif)
		TIFFClose(t->tif);
	t->tif = NULL;
	if (t->tmp)
		unlink(t->tmp);
}

static void tiff_free(struct fmt_writer *w)
{
	struct tiff *t = w->priv;

	if (!t)
		return;
	free(t->tmp);
	free(t->page);
	free(t->xml);
	free(t);
}

const struct fmt_ops fmt_tiff_ops = {
        .version = FMT_OPS_VERSION,
        .name = "ome-tiff",
        .open = tiff_open,
        .put = tiff_put,
        .finish = tiff_finish,
        .commit = tiff_commit,
        .abort = tiff_abort,
        .free = tiff_free,
};
