/* SPDX-License-Identifier: MIT */
/*
 * `volrec process --source REC`: the configuration a raw recording carries (its "config"
 * section, with its tables written beside it where its table paths point), and a check of
 * each recorded epoch's CRC-32C that names the damaged ones.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sources/recording.h"
#include "tools/process.h"

static int write_text(const char *dir, const char *name, const char *text, size_t len)
{
	char path[PATH_MAX];
	FILE *f;
	int rc = 0;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "w");
	if (!f)
		return -errno;
	if (fwrite(text, 1, len, f) != len)
		rc = -EIO;
	if (fclose(f) && !rc)
		rc = -EIO;
	return rc;
}

int proc_recording_config(const char *rec, struct vr_config *cfg, char *err, size_t errlen)
{
	char dir[] = "/tmp/volrec-rec-XXXXXX", name[SRC_REC_NAME_MAX + 16], path[PATH_MAX];
	struct src_rec_section *s = NULL;
	size_t n = 0, i;
	bool have = false;
	int rc;

	rc = src_rec_sections_read(rec, &s, &n, err, errlen);
	if (rc)
		return rc;
	if (!mkdtemp(dir)) {
		rc = vr_err(err, errlen, -errno, "cannot create a temporary directory: %s",
		            strerror(errno));
		goto out;
	}
	for (i = 0; i < n && !rc; i++) {
		if (!strcmp(s[i].name, "config")) {
			have = true;
			snprintf(name, sizeof(name), "config.yaml");
		} else {
			snprintf(name, sizeof(name), "%s.txt", s[i].name);
		}
		if (strchr(s[i].name, '/'))
			rc = vr_err(err, errlen, -EINVAL, "%s: section name '%s' is not allowed",
			            rec, s[i].name);
		else if (write_text(dir, name, s[i].text, s[i].len) < 0)
			rc = vr_err(err, errlen, -EIO, "cannot write %s/%s", dir, name);
	}
	if (!rc && !have)
		rc = vr_err(err, errlen, -EINVAL,
		            "%s carries no configuration (a replay file, not a recording): give "
		            "one with -c",
		            rec);
	if (!rc) {
		snprintf(path, sizeof(path), "%s/config.yaml", dir);
		rc = cfg_load(cfg, path, err, errlen);
	}
	for (i = 0; i < n; i++) {
		snprintf(name, sizeof(name), "%s/%s%s", dir,
		         strcmp(s[i].name, "config") ? s[i].name : "config",
		         strcmp(s[i].name, "config") ? ".txt" : ".yaml");
		unlink(name);
	}
	rmdir(dir);
out:
	src_rec_sections_free(s, n);
	return rc;
}

int proc_recording_verify(const char *rec, FILE *report, uint64_t *bad, char *err, size_t errlen)
{
	struct src_replay_info info;
	struct src_rec_frame *f = NULL;
	uint64_t n = 0, epoch_bytes, frame, nbad = 0;
	uint8_t *buf;
	int fd, rc;

	rc = src_rec_index_read(rec, &info, &f, &n, err, errlen);
	if (rc)
		return rc;
	epoch_bytes = src_replay_epoch_bytes(&info);
	frame = src_rec_frame_size(epoch_bytes);
	buf = malloc(1u << 20);
	fd = open(rec, O_RDONLY | O_CLOEXEC);
	if (!buf || fd < 0) {
		rc = vr_err(err, errlen, buf ? -errno : -ENOMEM, "%s: cannot read it", rec);
		goto out;
	}
	for (uint64_t i = 0; i < n && !rc; i++) {
		uint64_t at = info.header_size + i * frame + SRC_REC_FRAME_HDR;
		uint32_t crc = 0;

		for (uint64_t done = 0; done < epoch_bytes && !rc; done += 1u << 20) {
			size_t k = epoch_bytes - done < (1u << 20) ? (size_t)(epoch_bytes - done)
			                                           : (1u << 20);
			rc = vr_pread_full(fd, buf, k, at + done);
			crc = src_crc32c(crc, buf, k);
		}
		if (rc)
			rc = vr_err(err, errlen, rc, "%s: reading epoch %llu failed", rec,
			            (unsigned long long)f[i].epoch);
		else if (crc != f[i].crc) {
			nbad++;
			fprintf(report,
			        "volrec process: %s: CRC-32C mismatch in epoch %llu (0x%08x, "
			        "recorded 0x%08x): skipped\n",
			        rec, (unsigned long long)f[i].epoch, crc, f[i].crc);
		}
	}
	*bad = nbad;
out:
	if (fd >= 0)
		close(fd);
	free(buf);
	free(f);
	return rc;
}
