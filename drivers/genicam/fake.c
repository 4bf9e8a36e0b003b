/* SPDX-License-Identifier: MIT */
/*
 * Aravis's in-process Fake camera as a test and demonstration camera: its GenICam description
 * extended with the pixel formats volrec takes (the Fake camera itself offers Mono8 and
 * Mono16 only), and a fill pattern that writes the synthetic scanner's spectra, frame n being
 * B-scan n % ny of epoch n / ny at that epoch's offset, as an external scanner counting frames
 * scans it (docs/cameras.md). The same spectra go through replay files (`volrec sim`).
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "base/base.h"
#include "drivers/genicam/internal.h"

struct gc_fake {
	struct sim *sim;
	struct volrec_shim_geometry g;
	const struct gc_format *f;
	uint16_t *tmp;            /* one B-scan as the scanner's 16-bit samples */
	atomic_uint_fast64_t pos; /* position of the next frame filled */
	atomic_bool failed;
};

/* Entries added to the Fake camera's PixelFormat enumeration (PFNC values, decimal). */
static const char extra_formats[] = "\t\t<EnumEntry Name=\"Mono10\" "
                                    "NameSpace=\"Standard\"><Value>17825795</Value></EnumEntry>\n"
                                    "\t\t<EnumEntry Name=\"Mono12\" "
                                    "NameSpace=\"Standard\"><Value>17825797</Value></EnumEntry>\n"
                                    "\t\t<EnumEntry Name=\"Mono14\" "
                                    "NameSpace=\"Standard\"><Value>17825829</Value></EnumEntry>\n"
                                    "\t\t<EnumEntry Name=\"Mono12p\" "
                                    "NameSpace=\"Standard\"><Value>17563719</Value></EnumEntry>\n"
                                    "\t\t<EnumEntry Name=\"Mono12Packed\" "
                                    "NameSpace=\"Standard\"><Value>17563654</Value></EnumEntry>\n";

static pthread_mutex_t enable_mu = PTHREAD_MUTEX_INITIALIZER;
static int enabled; /* 0 not yet, 1 done, < 0 the error */
static char enable_err[256];

int gc_fake_enable(char *err, size_t errlen)
{
	int rc;

	pthread_mutex_lock(&enable_mu);
	if (!enabled) {
		GBytes *xml = g_resources_lookup_data("/org/aravis/arv-fake-camera.xml",
		                                      G_RESOURCE_LOOKUP_FLAGS_NONE, NULL);
		gsize n = 0;
		const char *x = xml ? g_bytes_get_data(xml, &n) : NULL;
		const char *pf =
		        x ? g_strstr_len(x, (gssize)n, "<Enumeration Name=\"PixelFormat\"") : NULL;
		const char *pv = pf ? g_strstr_len(pf, (gssize)(n - (size_t)(pf - x)),
		                                   "<pValue>PixelFormatRegister</pValue>")
		                    : NULL;
		if (!pv) {
			enabled = -EIO;
			snprintf(enable_err, sizeof(enable_err),
			         "Aravis's Fake camera description has no PixelFormat enumeration "
			         "to extend (Aravis %u.%u.%u)",
			         arv_get_major_version(), arv_get_minor_version(),
			         arv_get_micro_version());
		} else {
			/* the extended description in an anonymous file, named by /proc/self/fd */
			int fd = memfd_create("volrec-fake-camera.xml", MFD_CLOEXEC);
			size_t head = (size_t)(pv - x);
			if (fd < 0 || write(fd, x, head) != (ssize_t)head ||
			    write(fd, extra_formats, sizeof(extra_formats) - 1) !=
			            (ssize_t)(sizeof(extra_formats) - 1) ||
			    write(fd, pv, n - head) != (ssize_t)(n - head)) {
				enabled = -errno;
				snprintf(enable_err, sizeof(enable_err),
				         "writing the Fake camera's description: %s",
				         strerror(errno));
				if (fd >= 0)
					close(fd);
			} else {
				char path[64];
				snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
				arv_set_fake_camera_genicam_filename(path);
				arv_enable_interface("Fake");
				enabled = 1; /* fd stays open for the life of the process */
			}
		}
		if (xml)
			g_bytes_unref(xml);
	}
	rc = enabled < 0 ? enabled : 0;
	if (rc)
		snprintf(err, errlen, "%s", enable_err);
	pthread_mutex_unlock(&enable_mu);
	return rc;
}

/* The top 12 bits of n (even) 16-bit samples, two in three bytes as include/volrec/shim.h
 * lays out Mono12p (gv false) and Mono12Packed (gv true). */
static void pack12(const uint16_t *in, size_t n, bool gv, uint8_t *o)
{
	for (size_t k = 0; k < n; k += 2, o += 3) {
		const unsigned s0 = in[k] >> 4, s1 = in[k + 1] >> 4;

		if (gv) {
			o[0] = (uint8_t)(s0 >> 4);
			o[1] = (uint8_t)((s0 & 0xf) | (s1 & 0xf) << 4);
		} else {
			o[0] = (uint8_t)s0;
			o[1] = (uint8_t)((s0 >> 8) | (s1 & 0xf) << 4);
		}
		o[2] = (uint8_t)(s1 >> 4);
	}
}

static void fill(ArvBuffer *buffer, void *data, guint32 exposure_us, guint32 gain,
                 ArvPixelFormat pixel_format)
{
	struct gc_fake *fk = data;
	const struct volrec_shim_geometry *g = &fk->g;
	uint8_t *dst = (uint8_t *)arv_buffer_get_data(buffer, NULL);
	size_t n = (size_t)g->samples_per_ascan * g->ascans_per_bscan;
	/* frame n: raw B-scan n of the scan, ny x M of them an epoch (M repeats of each) */
	const uint32_t m_n = shim_repeats(g);
	const uint64_t raw = (uint64_t)g->bscans_per_volume * m_n;
	uint64_t pos = atomic_fetch_add(&fk->pos, 1), e = pos / raw;
	uint32_t b = (uint32_t)(pos % raw / m_n), m = (uint32_t)(pos % m_n), ox, oy;

	if (pixel_format != fk->f->code ||
	    (uint32_t)arv_buffer_get_image_width(buffer) != g->samples_per_ascan ||
	    (uint32_t)arv_buffer_get_image_height(buffer) != g->ascans_per_bscan)
		return; /* reconfigured under us: the frame is refused as incomplete */
	vr_scan_offset(e, g->stride_x, g->stride_y, &ox, &oy);
	if (sim_bscan_repeat(fk->sim, e, ox, oy, b, m, fk->tmp, n * 2)) {
		atomic_store(&fk->failed, true);
		return;
	}
	/* every format is the top N bits of the scanner's 16-bit samples (truncated, as an
	 * N-bit read-out of the same signal): Mono12 and Mono12p are Mono16 >> 4 exactly */
	const unsigned sh = 16 - fk->f->bits;
	if (fk->f->widen) {
		for (size_t k = 0; k < n; k++)
			dst[k] = (uint8_t)(fk->tmp[k] >> sh);
	} else if (fk->f->sample_type == VOLREC_SAMPLE_U16) {
		uint16_t *o = (uint16_t *)dst;
		for (size_t k = 0; k < n; k++)
			o[k] = (uint16_t)(fk->tmp[k] >> sh);
	} else {
		pack12(fk->tmp, n, fk->f->sample_type == VOLREC_SAMPLE_U12GV, dst);
	}
}

int gc_fake_attach(ArvCamera *camera, const struct gc_fake_params *p,
                   const struct volrec_shim_geometry *g, const struct gc_format *f,
                   struct gc_fake **out, char *err, size_t errlen)
{
	ArvDevice *dev = arv_camera_get_device(camera);
	struct sim_params sp;
	struct gc_fake *fk;
	int rc;

	if (!ARV_IS_FAKE_DEVICE(dev)) {
		snprintf(err, errlen, "simulate: synth needs the in-process Fake camera");
		return -EINVAL;
	}
	fk = calloc(1, sizeof(*fk));
	if (!fk) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	sim_params_from_args(&sp, g, &p->sim);
	/* the scanner digitizes at 16 bits; fill() takes each format's top bits */
	sp.sample_type = VOLREC_SAMPLE_U16;
	sp.bit_shift = 0;
	rc = sim_create(&sp, &fk->sim, err, errlen);
	if (rc) {
		free(fk);
		return rc;
	}
	fk->g = *g;
	fk->f = f;
	fk->tmp = malloc((size_t)g->samples_per_ascan * g->ascans_per_bscan * 2);
	if (!fk->tmp) {
		sim_destroy(fk->sim);
		free(fk);
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	arv_fake_camera_set_fill_pattern(arv_fake_device_get_fake_camera(ARV_FAKE_DEVICE(dev)),
	                                 fill, fk);
	*out = fk;
	return 0;
}

void gc_fake_restart(struct gc_fake *fk, uint64_t pos)
{
	atomic_store(&fk->pos, pos);
}

void gc_fake_free(ArvCamera *camera, struct gc_fake *fk)
{
	if (!fk)
		return;
	ArvDevice *dev = arv_camera_get_device(camera);
	if (ARV_IS_FAKE_DEVICE(dev))
		arv_fake_camera_set_fill_pattern(
		        arv_fake_device_get_fake_camera(ARV_FAKE_DEVICE(dev)), NULL, NULL);
	sim_destroy(fk->sim);
	free(fk->tmp);
	free(fk);
}
