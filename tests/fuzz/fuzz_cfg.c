/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer harness: cfg_load_string on arbitrary bytes (the YAML configuration), then the
 * operations the daemon applies to a loaded configuration (dump, copy, compare).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct vr_config cfg, copy;
	char err[CFG_ERR_MAX];
	char *text = malloc(size + 1);

	if (!text)
		return 0;
	memcpy(text, data, size);
	text[size] = '\0'; /* cfg_load_string takes a C string: a NUL ends the text */
	if (cfg_load_string(&cfg, text, "fuzz.yaml", err, sizeof(err)) == 0) {
		/* what a loaded configuration goes through: dumped (the published effective
		 * configuration), read back, copied and compared (reload) */
		char *dump = NULL;
		size_t dlen = 0;
		FILE *f = open_memstream(&dump, &dlen);
		if (f) {
			int rc = cfg_dump(&cfg, f);
			if (fclose(f) == 0 && rc == 0) {
				struct vr_config back;
				if (cfg_load_string(&back, dump, "dump.yaml", err, sizeof(err)) !=
				    0) {
					fprintf(stderr,
					        "a dumped configuration is rejected: %s\n--\n%s",
					        err, dump);
					abort();
				}
				if (!cfg_equal(&cfg, &back)) {
					fprintf(stderr,
					        "a dumped configuration reads back different\n");
					abort();
				}
				cfg_free(&back);
			}
			free(dump);
		}
		cfg_defaults(&copy);
		if (cfg_copy(&copy, &cfg) == 0) {
			if (!cfg_equal(&cfg, &copy) || cfg_is_structural_change(&cfg, &copy)) {
				fprintf(stderr,
				        "a copied configuration differs from its original\n");
				abort();
			}
		}
		cfg_free(&copy);
	} else if (!memchr(err, '\0', sizeof(err)) || !err[0]) {
		fprintf(stderr, "cfg_load_string failed without a message\n");
		abort();
	}
	cfg_free(&cfg);
	free(text);
	return 0;
}
