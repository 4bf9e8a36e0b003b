/* SPDX-License-Identifier: MIT */
/*
 * cfg_dump: the effective configuration as YAML, every key written out (defaults included),
 * in a form cfg_load reads back to an equal configuration.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

void cfg_put_quoted(FILE *out, const char *s)
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

static void put_doubles(FILE *out, const double *v, size_t n)
{
	fputc('[', out);
	for (size_t i = 0; i < n; i++) {
		if (i)
			fputs(", ", out);
		put_double(out, v[i]);
	}
	fputc(']', out);
}

static const char *b(bool v)
{
	return v ? "true" : "false";
}

static void put_path(FILE *out, const char *indent, const char *key, const char *path)
{
	if (!path[0])
		return;
	fprintf(out, "%s%s: ", indent, key);
	cfg_put_quoted(out, path);
	fputc('\n', out);
}

int cfg_dump(const struct vr_config *c, FILE *out)
{
	const char *args = c->source.shim.args_yaml ? c->source.shim.args_yaml : "{}";

	fputs("# volrecd effective configuration", out);
	if (c->source_file[0]) {
		fputs(" from ", out);
		for (const char *p = c->source_file; *p; p++)
			fputc((unsigned char)*p < 0x20 ? '?' : *p, out);
	}
	fputc('\n', out);
	fputs("instance: ", out);
	cfg_put_quoted(out, c->instance);
	fprintf(out, "\nbackend: %s\n", cfg_backend_name(c->backend));
	fprintf(out, "gpu:\n  device: %d\n  streams: %d\n", c->gpu.device, c->gpu.streams);
	fprintf(out, "cpu:\n  threads: %d\n", c->cpu.threads);

	fprintf(out, "source:\n  type: %s\n  rate: ", cfg_source_name(c->source.type));
	put_double(out, c->source.rate);
	fputs("\n  replay:\n", out);
	put_path(out, "    ", "path", c->source.replay.path);
	fprintf(out, "    format: %s\n    loop: %s\n",
	        cfg_replay_format_name(c->source.replay.format), b(c->source.replay.loop));
	fprintf(out, "  synth:\n    seed: %llu\n    phantom: %s\n    motion:\n      deg_per_s: ",
	        (unsigned long long)c->source.synth.seed, c->source.synth.phantom);
	put_double(out, c->source.synth.deg_per_s);
	fputs("\n    snr_db: ", out);
	put_double(out, c->source.synth.snr_db);
	fputs("\n  shim:\n", out);
	put_path(out, "    ", "library", c->source.shim.library);
	fprintf(out, "    args: %s\n    timeout_ms: %d\n", args, c->source.shim.timeout_ms);

	fprintf(out,
	        "geometry:\n  samples_per_ascan: %u\n  sample_type: %s\n  bit_shift: %u\n"
	        "  ascans_per_bscan: %u\n  bscans_per_volume: %u\n  stride: [%u, %u]\n"
	        "  depth_range: [%u, %u]\n  bidirectional: %s\n",
	        c->geometry.samples_per_ascan, cfg_sample_name(c->geometry.sample_type),
	        c->geometry.bit_shift, c->geometry.ascans_per_bscan, c->geometry.bscans_per_volume,
	        c->geometry.stride[0], c->geometry.stride[1], c->geometry.depth_range[0],
	        c->geometry.depth_range[1], b(c->geometry.bidirectional));

	fprintf(out, "preprocess:\n  background:\n    mode: %s\n",
	        cfg_background_name(c->preprocess.background.mode));
	if (c->preprocess.background.mode == CFG_BG_REFERENCE)
		put_path(out, "    ", "reference", c->preprocess.background.reference.path);
	fputs("    threshold: ", out);
	put_double(out, c->preprocess.background.threshold);
	fputc('\n', out);
	fprintf(out, "  resample:\n    method: %s\n",
	        cfg_resample_name(c->preprocess.resample.method));
	switch (c->preprocess.resample.positions) {
	case CFG_RSPOS_TABLE:
		put_path(out, "    ", "table", c->preprocess.resample.table.path);
		break;
	case CFG_RSPOS_POLY:
		fputs("    poly: ", out);
		put_doubles(out, c->preprocess.resample.poly, 4);
		fputc('\n', out);
		break;
	case CFG_RSPOS_WAVELENGTH:
		fputs("    wavelength_nm: ", out);
		put_doubles(out, c->preprocess.resample.wavelength_nm, 4);
		fputc('\n', out);
		break;
	case CFG_RSPOS_NONE:
		break;
	}
	fprintf(out,
	        "  window:\n    type: %s\n    param: ", cfg_window_name(c->preprocess.window.type));
	put_double(out, c->preprocess.window.param);
	fputc('\n', out);
	switch (c->preprocess.dispersion.kind) {
	case CFG_DISP_COEFFS:
		fputs("  dispersion:\n    coeffs: ", out);
		put_doubles(out, c->preprocess.dispersion.coeffs, 2);
		fputc('\n', out);
		break;
	case CFG_DISP_TABLE:
		fputs("  dispersion:\n", out);
		put_path(out, "    ", "table", c->preprocess.dispersion.table.path);
		break;
	case CFG_DISP_NONE:
		fputs("  dispersion: {}\n", out);
		break;
	}
	fprintf(out, "  zero_pad: %u\n  db_range: ", c->preprocess.zero_pad);
	put_doubles(out, c->preprocess.db_range, 2);
	fprintf(out, "\n  flip:\n    x: %s\n    z: %s\n", b(c->preprocess.flip.x),
	        b(c->preprocess.flip.z));

	fprintf(out, "reconstruct:\n  mode: %s\n  spatial_sigma: ",
	        cfg_recon_mode_name(c->reconstruct.mode));
	put_double(out, c->reconstruct.spatial_sigma);
	fprintf(out, "\n  temporal: %s\n  tau: ", cfg_temporal_name(c->reconstruct.temporal));
	put_double(out, c->reconstruct.tau);
	fprintf(out, "\n  combine: %s\n", cfg_combine_name(c->reconstruct.combine));

	fprintf(out, "output:\n  dtype: u8\n  slots: %u\n", c->output.slots);
	fprintf(out, "pipeline:\n  ring_bscans: %u\n  overflow: %s\n", c->pipeline.ring_bscans,
	        cfg_overflow_name(c->pipeline.overflow));

	fputs("ipc:\n", out);
	put_path(out, "  ", "run_dir", c->ipc.run_dir);
	fputs("  pub:", out);
	if (!c->ipc.npub)
		fputs(" []", out);
	for (uint32_t i = 0; i < c->ipc.npub && i < CFG_MAX_PUB; i++) {
		fputs("\n    - ", out);
		cfg_put_quoted(out, c->ipc.pub[i]);
	}
	fprintf(out, "\n  status_interval_ms: %u\n  hwm: %u\n  max_readers: %u\n  keep_shm: %s\n",
	        c->ipc.status_interval_ms, c->ipc.hwm, c->ipc.max_readers, b(c->ipc.keep_shm));
	put_path(out, "  ", "curve_secret_key", c->ipc.curve_secret_key);
	put_path(out, "  ", "curve_public_key", c->ipc.curve_public_key);
	fprintf(out, "log:\n  level: %s\n", cfg_log_level_name(c->log.level));

	if (fflush(out) == EOF || ferror(out))
		return -EIO;
	return 0;
}
