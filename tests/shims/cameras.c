/* SPDX-License-Identifier: MIT */
/*
 * A stand-in for the GenICam shim's camera list (drivers/genicam/cameras.h), without Aravis: two
 * cameras whose strings are not UTF-8 and hold control characters, one that cannot be opened.
 * tests/integration/test_genicam.py lists them with `volrec cameras --shim`.
 */
#include <volrec/shim.h>

#include "drivers/genicam/cameras.h"

int volrec_genicam_cameras_v2(bool fake,
                              int (*fn)(const struct volrec_genicam_camera *camera, void *ctx),
                              void *ctx, char *err, size_t errlen)
{
	static const struct volrec_genicam_format formats[] = {
	        {"Mono12p", VOLREC_SAMPLE_U12P}, {"Bayer\xff", -1}, {"Mono8", VOLREC_SAMPLE_U16}};
	const struct volrec_genicam_camera cams[] = {
	        {.id = "Acme-\xff\xfe\"1\\",
	         .vendor = "Acme\x01",
	         .model = "LS\xc3\x28",
	         .serial = "\xfe",
	         .protocol = "GigEVision",
	         .address = "192.0.2.7",
	         .opened = true,
	         .width = 2048,
	         .height = 64,
	         .pixel_format = "Mono12p",
	         .formats = formats,
	         .nformats = sizeof(formats) / sizeof(formats[0])},
	        {.id = "Acme-2", .protocol = "USB3Vision", .error = "busy \xff\n"},
	};
	int rc = 0;

	(void)fake, (void)err, (void)errlen;
	for (size_t i = 0; i < sizeof(cams) / sizeof(cams[0]) && !rc; i++)
		rc = fn(&cams[i], ctx);
	return rc;
}
