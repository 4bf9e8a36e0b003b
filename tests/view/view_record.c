/* SPDX-License-Identifier: MIT */
/*
 * Records the pictures of every volume a daemon (or view_testpub) publishes, read through
 * libvolrec's volrec_view_image, as DIR/<kind>-<picture volume id>.pgm (binary PGM; a comment
 * line "# slab za zb position y x z angles az el"), keeping the newest KEEP volumes. The
 * browser tests compare what a page drew with these files. Prints "ready" once subscribed.
 *
 *   view_record -i INSTANCE -r RUN_DIR -o DIR [-k KEEP]
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "volrec/client.h"
#include "volrec/protocol.h"

static volatile sig_atomic_t stop;

static void on_term(int sig)
{
	(void)sig;
	stop = 1;
}

static const char *const names[VOLREC_IMAGE_COUNT] = {"enface_mean", "enface_max", "bscan",
                                                      "slice",       "plane",      "render"};

static int write_pgm(const char *dir, const struct volrec_image *img)
{
	char path[4200], tmp[4300];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s-%" PRIu64 ".pgm", dir, names[img->kind],
	         img->volume_id);
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	f = fopen(tmp, "wb");
	if (!f)
		return -errno;
	fprintf(f, "P5\n# slab %u %u position %u %u %u angles %g %g\n%u %u\n255\n", img->slab[0],
	        img->slab[1], img->position[0], img->position[1], img->position[2],
	        img->angles_deg[0], img->angles_deg[1], img->cols, img->rows);
	fwrite(img->data, 1, (size_t)img->rows * img->cols, f);
	if (fclose(f))
		return -EIO;
	return rename(tmp, path) ? -errno : 0;
}

static void forget(const char *dir, uint64_t vid)
{
	char path[4200];

	for (int k = 0; k < VOLREC_IMAGE_COUNT; k++) {
		snprintf(path, sizeof(path), "%s/%s-%" PRIu64 ".pgm", dir, names[k], vid);
		unlink(path);
	}
}

int main(int argc, char **argv)
{
	const char *instance = NULL, *run_dir = NULL, *dir = NULL;
	unsigned long keep = 200;
	struct volrec_client *c = NULL;
	int opt, rc;

	while ((opt = getopt(argc, argv, "i:r:o:k:")) != -1) {
		switch (opt) {
		case 'i':
			instance = optarg;
			break;
		case 'r':
			run_dir = optarg;
			break;
		case 'o':
			dir = optarg;
			break;
		case 'k':
			keep = strtoul(optarg, NULL, 10);
			break;
		default:
			fprintf(stderr,
			        "usage: view_record -i INSTANCE -r RUN_DIR -o DIR [-k KEEP]\n");
			return 2;
		}
	}
	if (!instance || !run_dir || !dir || !keep) {
		fprintf(stderr, "usage: view_record -i INSTANCE -r RUN_DIR -o DIR [-k KEEP]\n");
		return 2;
	}
	signal(SIGTERM, on_term);
	signal(SIGINT, on_term);
	while (!stop && (rc = volrec_client_open(instance, run_dir, &c)) != 0)
		usleep(100000);
	if (stop)
		return 0;
	printf("ready\n");
	fflush(stdout);
	while (!stop) {
		struct volrec_view v;
		struct volrec_image img[VOLREC_IMAGE_COUNT];
		bool have[VOLREC_IMAGE_COUNT] = {0};

		rc = volrec_client_next(c, 200, &v);
		if (rc == -ETIMEDOUT || rc == -EPROTO || rc == -EINTR || rc == -EAGAIN)
			continue;
		if (rc) {
			fprintf(stderr, "view_record: %s\n", volrec_client_error(c));
			break;
		}
		for (int k = 0; k < VOLREC_IMAGE_COUNT; k++)
			have[k] = volrec_view_image(c, &v, (unsigned)k, &img[k]) == 0;
		/* write only what was intact: copy first, check, then write */
		{
			uint8_t *copy[VOLREC_IMAGE_COUNT] = {0};

			for (int k = 0; k < VOLREC_IMAGE_COUNT; k++)
				if (have[k]) {
					copy[k] = malloc((size_t)img[k].rows * img[k].cols);
					if (copy[k])
						memcpy(copy[k], img[k].data,
						       (size_t)img[k].rows * img[k].cols);
					img[k].data = copy[k];
				}
			if (volrec_view_release(c, &v) == 0)
				for (int k = 0; k < VOLREC_IMAGE_COUNT; k++)
					if (have[k] && copy[k] && write_pgm(dir, &img[k]))
						fprintf(stderr,
						        "view_record: cannot write into %s\n", dir);
			for (int k = 0; k < VOLREC_IMAGE_COUNT; k++)
				free(copy[k]);
		}
		if (v.volume_id > keep)
			forget(dir, v.volume_id - keep);
	}
	volrec_client_close(c);
	return 0;
}
