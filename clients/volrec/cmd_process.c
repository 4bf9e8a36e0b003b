/* SPDX-License-Identifier: MIT */
/*
 * `volrec process`: run the acquisition and processing pipeline offline on the configured
 * source (replay file, synthetic scanner or shim) with the configured backend, and write the
 * volumes into an HDF5 file (docs/algorithms.md; layout in `volrec process --help`).
 */
#include <errno.h>
#include <getopt.h>
#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "backend/backend.h"
#include "commands.h"
#include "h5attr.h"
#include "config/config.h"
#include "src/source.h"

static void process_usage(FILE *f)
{
	fprintf(f,
	        "usage: volrec process -c FILE -o OUT.h5 [-n EPOCHS] [--lowres] [--full]\n"
	        "                      [--backend cpu|cuda|auto]\n\n"
	        "Process the configured source offline and write HDF5:\n"
	        "  /volumes  u8 [n][Y][X][Z]  output volumes (Y = ny*sy, X = nx*sx; ny, nx with\n"
	        "                             reconstruct.mode none)\n"
	        "  /lowres   f32 [n][ny][nx][nz]  with --lowres: L_e, normalized, before "
	        "quantization\n"
	        "  /full     f32 [n][Y][X][Z]     with --full: the output before quantization\n"
	        "  /epoch    u64 [n], /offset u32 [n][2] (ox, oy) of each volume\n"
	        "  /median_depths u32 [n][ny]  with background.mode partial_median: the depths\n"
	        "                             that took the median, per B-scan\n"
	        "  attributes: geometry, stride, depth_range, zero_pad, epochs, backend, device,\n"
	        "  config (the effective configuration as YAML)\n\n"
	        "  -c, --config FILE   configuration (YAML)\n"
	        "  -o, --output FILE   HDF5 file to write (replaced)\n"
	        "  -n, --epochs N      epochs to process: default all epochs of a replay file,\n"
	        "                      S = sx*sy (one interlacing cycle) for synth and shim "
	        "sources\n"
	        "      --lowres        also write /lowres\n"
	        "      --full          also write /full\n"
	        "      --backend NAME  override the configuration's backend (cpu, cuda, auto)\n"
	        "  -h, --help          this text\n\n"
	        "Exit status: 0 done, 1 failure while running, 2 usage or configuration error.\n");
}

static double now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* ---- HDF5 helpers ------------------------------------------------------------------------ */

/* A dataset [n][d1][d2][d3] of type, chunked one volume per chunk, growable in n. */
static hid_t h5_volumes(hid_t f, const char *name, hid_t type, uint64_t n, const hsize_t d[3])
{
	hsize_t dims[4] = {n, d[0], d[1], d[2]}, maxd[4] = {H5S_UNLIMITED, d[0], d[1], d[2]};
	hsize_t chunk[4] = {1, d[0], d[1], d[2]};
	hid_t sp = H5Screate_simple(4, dims, maxd), pl = H5Pcreate(H5P_DATASET_CREATE), ds = -1;

	if (sp >= 0 && pl >= 0 && H5Pset_chunk(pl, 4, chunk) >= 0)
		ds = H5Dcreate2(f, name, type, sp, H5P_DEFAULT, pl, H5P_DEFAULT);
	if (pl >= 0)
		H5Pclose(pl);
	if (sp >= 0)
		H5Sclose(sp);
	return ds;
}

static int h5_write_volume(hid_t ds, hid_t type, uint64_t e, const hsize_t d[3], const void *buf)
{
	hsize_t start[4] = {e, 0, 0, 0}, count[4] = {1, d[0], d[1], d[2]};
	hid_t fs = H5Dget_space(ds), ms = H5Screate_simple(4, count, NULL);
	int rc = -EIO;

	if (fs >= 0 && ms >= 0 &&
	    H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, NULL, count, NULL) >= 0 &&
	    H5Dwrite(ds, type, ms, fs, H5P_DEFAULT, buf) >= 0)
		rc = 0;
	if (ms >= 0)
		H5Sclose(ms);
	if (fs >= 0)
		H5Sclose(fs);
	return rc;
}

static int h5_shrink(hid_t ds, uint64_t n, const hsize_t d[3])
{
	hsize_t dims[4] = {n, d[0], d[1], d[2]};
	return H5Dset_extent(ds, dims) >= 0 ? 0 : -EIO;
}

static char *config_yaml(const struct vr_config *cfg)
{
	char *text = NULL;
	size_t len = 0;
	FILE *m = open_memstream(&text, &len);

	if (!m)
		return NULL;
	if (cfg_dump(cfg, m) < 0) {
		fclose(m);
		free(text);
		return NULL;
	}
	if (fclose(m)) {
		free(text);
		return NULL;
	}
	return text;
}

/* ---- the command ------------------------------------------------------------------------- */

struct proc_opts {
	const char *config, *output, *backend;
	uint64_t epochs; /* 0: default */
	bool lowres, full;
};

static int parse_opts(int argc, char **argv, struct proc_opts *o)
{
	static const struct option longopts[] = {
	        {"config", required_argument, NULL, 'c'}, {"output", required_argument, NULL, 'o'},
	        {"epochs", required_argument, NULL, 'n'}, {"lowres", no_argument, NULL, 'L'},
	        {"full", no_argument, NULL, 'F'},         {"backend", required_argument, NULL, 'B'},
	        {"help", no_argument, NULL, 'h'},         {NULL, 0, NULL, 0},
	};
	int c;

	optind = 1;
	while ((c = getopt_long(argc, argv, "c:o:n:h", longopts, NULL)) != -1) {
		switch (c) {
		case 'c':
			o->config = optarg;
			break;
		case 'o':
			o->output = optarg;
			break;
		case 'n': {
			char *end;
			errno = 0;
			unsigned long long v = strtoull(optarg, &end, 10);
			if (errno || *end || !*optarg || optarg[0] == '-' || v == 0) {
				fprintf(stderr,
				        "volrec process: -n %s: need a whole number of epochs >= "
				        "1\n",
				        optarg);
				return VR_EXIT_USAGE;
			}
			o->epochs = v;
			break;
		}
		case 'L':
			o->lowres = true;
			break;
		case 'F':
			o->full = true;
			break;
		case 'B':
			o->backend = optarg;
			break;
		case 'h':
			process_usage(stdout);
			return -1;
		default:
			process_usage(stderr);
			return VR_EXIT_USAGE;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "volrec process: unexpected argument '%s'\n", argv[optind]);
		return VR_EXIT_USAGE;
	}
	if (!o->config || !o->output) {
		fprintf(stderr, "volrec process: -c FILE and -o OUT.h5 are required\n");
		process_usage(stderr);
		return VR_EXIT_USAGE;
	}
	return 0;
}

VR_COMMAND(process, "process a source offline into an HDF5 file")
{
	struct proc_opts o = {0};
	struct vr_config cfg;
	struct src_source src;
	struct be_backend *be = NULL;
	char err[CFG_ERR_MAX] = "", note[CFG_ERR_MAX] = "";
	void **raw = NULL;
	uint8_t *vol = NULL;
	float *low = NULL, *full = NULL;
	uint64_t *epochs = NULL;
	uint32_t *offsets = NULL, *medians = NULL;
	uint64_t med_sum = 0;
	uint32_t med_max = 0;
	hid_t f = -1, ds_vol = -1, ds_low = -1, ds_full = -1;
	char *yaml = NULL;
	uint64_t n, done = 0;
	int ret = VR_EXIT_FAIL, rc;
	bool tty = isatty(STDERR_FILENO);

	memset(&src, 0, sizeof(src));
	cfg_defaults(&cfg);
	rc = parse_opts(argc, argv, &o);
	if (rc)
		return rc < 0 ? VR_EXIT_OK : rc;

	if (cfg_load(&cfg, o.config, err, sizeof(err)) < 0) {
		fprintf(stderr, "volrec process: %s\n", err);
		return VR_EXIT_USAGE;
	}
	if (o.backend) {
		if (!strcmp(o.backend, "cpu"))
			cfg.backend = CFG_BACKEND_CPU;
		else if (!strcmp(o.backend, "cuda"))
			cfg.backend = CFG_BACKEND_CUDA;
		else if (!strcmp(o.backend, "auto"))
			cfg.backend = CFG_BACKEND_AUTO;
		else {
			fprintf(stderr, "volrec process: --backend %s: allowed cpu, cuda, auto\n",
			        o.backend);
			ret = VR_EXIT_USAGE;
			goto out_cfg;
		}
	}

	const uint32_t nx = cfg.geometry.ascans_per_bscan, ny = cfg.geometry.bscans_per_volume;
	const uint32_t sx = cfg.geometry.stride[0], sy = cfg.geometry.stride[1], nz = cfg_nz(&cfg);
	const bool none = cfg.reconstruct.mode == CFG_RECON_NONE;
	const hsize_t dvol[3] = {none ? ny : (hsize_t)ny * sy, none ? nx : (hsize_t)nx * sx, nz};
	const hsize_t dlow[3] = {ny, nx, nz};
	const size_t bscan_bytes = cfg_bscan_bytes(&cfg), nvox = cfg_out_voxels(&cfg);
	const size_t nlow = (size_t)ny * nx * nz;

	rc = src_open(&cfg, SRC_UNPACED | SRC_NO_LOOP, &src, err, sizeof(err));
	if (rc < 0) {
		fprintf(stderr, "volrec process: %s\n", err);
		goto out_cfg;
	}
	n = o.epochs ? o.epochs : src.epochs ? src.epochs : cfg_stride_area(&cfg);
	if (src.epochs && n > src.epochs) {
		fprintf(stderr, "volrec process: -n %llu: the replay file holds %llu epochs\n",
		        (unsigned long long)n, (unsigned long long)src.epochs);
		ret = VR_EXIT_USAGE;
		goto out_src;
	}

	rc = be_open(&cfg, &be, note, sizeof(note), err, sizeof(err));
	if (rc < 0) {
		fprintf(stderr, "volrec process: %s\n", err);
		goto out_src;
	}
	if (note[0])
		fprintf(stderr, "volrec process: %s\n", note);

	raw = calloc(ny, sizeof(*raw));
	epochs = calloc(n, sizeof(*epochs));
	offsets = calloc(2 * n, sizeof(*offsets));
	const bool pm = cfg.preprocess.background.mode == CFG_BG_PARTIAL_MEDIAN;
	medians = pm ? calloc((size_t)n * ny, sizeof(*medians)) : NULL;
	if (!raw || !epochs || !offsets || (pm && !medians))
		goto out_nomem;
	for (uint32_t b = 0; b < ny; b++)
		if (be_host_alloc(be, bscan_bytes, &raw[b]) < 0)
			goto out_nomem;
	if (be_host_alloc(be, nvox, (void **)&vol) < 0)
		goto out_nomem;
	if (o.lowres && be_host_alloc(be, nlow * sizeof(float), (void **)&low) < 0)
		goto out_nomem;
	if (o.full && be_host_alloc(be, nvox * sizeof(float), (void **)&full) < 0)
		goto out_nomem;

	f = H5Fcreate(o.output, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
	if (f < 0) {
		fprintf(stderr, "volrec process: %s: cannot create the HDF5 file\n", o.output);
		goto out_free;
	}
	ds_vol = h5_volumes(f, "volumes", H5T_NATIVE_UINT8, n, dvol);
	if (o.lowres)
		ds_low = h5_volumes(f, "lowres", H5T_NATIVE_FLOAT, n, dlow);
	if (o.full)
		ds_full = h5_volumes(f, "full", H5T_NATIVE_FLOAT, n, dvol);
	if (ds_vol < 0 || (o.lowres && ds_low < 0) || (o.full && ds_full < 0)) {
		fprintf(stderr, "volrec process: %s: cannot create the datasets\n", o.output);
		goto out_h5;
	}

	double t0 = now_s(), tshow = 0;
	for (uint64_t e = 0; e < n; e++) {
		uint32_t q = (uint32_t)(e % cfg_stride_area(&cfg)), ox = q % sx, oy = q / sx;
		struct be_output out = {.volume = vol,
		                        .lowres = low,
		                        .full = full,
		                        .median_depths = medians ? medians + (size_t)e * ny : NULL};
		bool end = false;

		rc = src.ops->set_scan_offset(src.handle, e, ox, oy);
		if (rc == 0 && e == 0)
			rc = src.ops->start(src.handle);
		if (rc < 0) {
			fprintf(stderr, "volrec process: source: %s\n", src_strerror(&src, rc));
			goto out_h5;
		}
		for (uint32_t b = 0; b < ny; b++) {
			struct volrec_shim_meta meta;
			int tmo = cfg.source.type == CFG_SOURCE_SHIM ? cfg.source.shim.timeout_ms
			                                             : 60000;
			rc = src.ops->acquire(src.handle, raw[b], bscan_bytes, tmo, &meta);
			if (rc == -ENODATA) {
				end = true;
				break;
			}
			if (rc < 0) {
				fprintf(stderr,
				        "volrec process: source: epoch %llu B-scan %u: %s\n",
				        (unsigned long long)e, b, src_strerror(&src, rc));
				goto out_h5;
			}
			if (meta.epoch != e || meta.bscan != b) {
				fprintf(stderr,
				        "volrec process: source delivered epoch %llu B-scan %u "
				        "where "
				        "epoch %llu B-scan %u was due\n",
				        (unsigned long long)meta.epoch, meta.bscan,
				        (unsigned long long)e, b);
				goto out_h5;
			}
			rc = be_bscan_submit(be, e, b, raw[b]);
			if (rc < 0) {
				fprintf(stderr, "volrec process: backend: B-scan %u: %s\n", b,
				        strerror(-rc));
				goto out_h5;
			}
		}
		if (end) {
			fprintf(stderr, "volrec process: the source ended after %llu epochs\n",
			        (unsigned long long)e);
			break;
		}
		rc = be_epoch_finish(be, e, &out, err, sizeof(err));
		if (rc < 0) {
			fprintf(stderr, "volrec process: backend: %s\n", err);
			goto out_h5;
		}
		if (h5_write_volume(ds_vol, H5T_NATIVE_UINT8, e, dvol, vol) < 0 ||
		    (low && h5_write_volume(ds_low, H5T_NATIVE_FLOAT, e, dlow, low) < 0) ||
		    (full && h5_write_volume(ds_full, H5T_NATIVE_FLOAT, e, dvol, full) < 0)) {
			fprintf(stderr, "volrec process: %s: writing volume %llu failed\n",
			        o.output, (unsigned long long)e);
			goto out_h5;
		}
		for (uint32_t b = 0; medians && b < ny; b++) {
			uint32_t m = medians[(size_t)e * ny + b];
			med_sum += m;
			med_max = m > med_max ? m : med_max;
		}
		epochs[e] = e;
		offsets[2 * e] = ox;
		offsets[2 * e + 1] = oy;
		done = e + 1;
		double t = now_s();
		if (tty && (t - tshow > 0.1 || done == n)) {
			double dt = t - t0 > 1e-9 ? t - t0 : 1e-9;
			fprintf(stderr,
			        "\rprocess: epoch %llu/%llu  %.2f epochs/s  %.0f A-scans/s  ",
			        (unsigned long long)done, (unsigned long long)n, done / dt,
			        (double)done * nx * ny / dt);
			tshow = t;
		}
	}
	double elapsed = now_s() - t0;
	if (tty && done)
		fputc('\n', stderr);

	if (done < n &&
	    (h5_shrink(ds_vol, done, dvol) < 0 || (low && h5_shrink(ds_low, done, dlow) < 0) ||
	     (full && h5_shrink(ds_full, done, dvol) < 0))) {
		fprintf(stderr, "volrec process: %s: cannot resize the datasets\n", o.output);
		goto out_h5;
	}
	{
		hsize_t dn = done, d2[2] = {done, 2};
		uint32_t geo[3] = {cfg.geometry.samples_per_ascan, nx, ny};
		uint32_t stride[2] = {sx, sy};
		uint32_t depth[2] = {cfg.geometry.depth_range[0], cfg.geometry.depth_range[1]};
		uint32_t shape[3] = {(uint32_t)dvol[0], (uint32_t)dvol[1], (uint32_t)dvol[2]};
		hid_t sp1 = H5Screate_simple(1, &dn, NULL), sp2 = H5Screate_simple(2, d2, NULL);
		hid_t de = H5Dcreate2(f, "epoch", H5T_NATIVE_UINT64, sp1, H5P_DEFAULT, H5P_DEFAULT,
		                      H5P_DEFAULT);
		hid_t dof = H5Dcreate2(f, "offset", H5T_NATIVE_UINT32, sp2, H5P_DEFAULT,
		                       H5P_DEFAULT, H5P_DEFAULT);
		bool ok = de >= 0 && dof >= 0 &&
		          (done == 0 || (H5Dwrite(de, H5T_NATIVE_UINT64, H5S_ALL, H5S_ALL,
		                                  H5P_DEFAULT, epochs) >= 0 &&
		                         H5Dwrite(dof, H5T_NATIVE_UINT32, H5S_ALL, H5S_ALL,
		                                  H5P_DEFAULT, offsets) >= 0));
		if (de >= 0)
			H5Dclose(de);
		if (dof >= 0)
			H5Dclose(dof);
		if (ok && medians && done) {
			hsize_t dm[2] = {done, ny};
			hid_t spm = H5Screate_simple(2, dm, NULL);
			hid_t dmed =
			        spm < 0 ? -1
			                : H5Dcreate2(f, "median_depths", H5T_NATIVE_UINT32, spm,
			                             H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
			ok = dmed >= 0 && H5Dwrite(dmed, H5T_NATIVE_UINT32, H5S_ALL, H5S_ALL,
			                           H5P_DEFAULT, medians) >= 0;
			if (dmed >= 0)
				H5Dclose(dmed);
			if (spm >= 0)
				H5Sclose(spm);
		}
		H5Sclose(sp1);
		H5Sclose(sp2);
		yaml = config_yaml(&cfg);
		ok = ok && yaml && vr_h5_attr_u32v(f, "geometry", geo, 3) == 0 &&
		     vr_h5_attr_u32v(f, "stride", stride, 2) == 0 &&
		     vr_h5_attr_u32v(f, "depth_range", depth, 2) == 0 &&
		     vr_h5_attr_u32v(f, "volume_shape", shape, 3) == 0 &&
		     vr_h5_attr_u32(f, "zero_pad", cfg.preprocess.zero_pad) == 0 &&
		     vr_h5_attr_u32(f, "epochs", (uint32_t)done) == 0 &&
		     vr_h5_attr_str(f, "reconstruct_mode",
		                    cfg_recon_mode_name(cfg.reconstruct.mode)) == 0 &&
		     vr_h5_attr_str(f, "backend", be_name(be)) == 0 &&
		     vr_h5_attr_str(f, "device", be_device(be)) == 0 &&
		     vr_h5_attr_str(f, "volrec_version", VOLREC_VERSION) == 0 &&
		     vr_h5_attr_str(f, "config", yaml) == 0;
		if (!ok) {
			fprintf(stderr, "volrec process: %s: writing the metadata failed\n",
			        o.output);
			goto out_h5;
		}
	}
	if (H5Fflush(f, H5F_SCOPE_GLOBAL) < 0) {
		fprintf(stderr, "volrec process: %s: flush failed\n", o.output);
		goto out_h5;
	}
	printf("volrec process: %llu epochs, %llu A-scans in %.3f s (%.0f A-scans/s, %.2f "
	       "epochs/s) on %s -> %s\n",
	       (unsigned long long)done, (unsigned long long)done * nx * ny, elapsed,
	       elapsed > 0 ? (double)done * nx * ny / elapsed : 0.0,
	       elapsed > 0 ? done / elapsed : 0.0, be_device(be), o.output);
	if (pm && done)
		printf("volrec process: partial_median (threshold %g): %.2f median depths per "
		       "B-scan on average, at most %u, of %u\n",
		       cfg.preprocess.background.threshold, (double)med_sum / ((double)done * ny),
		       med_max, cfg_fft_len(&cfg) / 2);
	ret = VR_EXIT_OK;
	goto out_h5;

out_nomem:
	fprintf(stderr, "volrec process: out of memory for the buffers\n");
	goto out_free;
out_h5:
	if (ds_full >= 0)
		H5Dclose(ds_full);
	if (ds_low >= 0)
		H5Dclose(ds_low);
	if (ds_vol >= 0)
		H5Dclose(ds_vol);
	if (f >= 0 && H5Fclose(f) < 0 && ret == VR_EXIT_OK) {
		fprintf(stderr, "volrec process: %s: closing failed\n", o.output);
		ret = VR_EXIT_FAIL;
	}
out_free:
	free(yaml);
	if (be) {
		for (uint32_t b = 0; raw && b < ny; b++)
			be_host_free(be, raw[b]);
		be_host_free(be, vol);
		be_host_free(be, low);
		be_host_free(be, full);
	}
	free(raw);
	free(epochs);
	free(offsets);
	free(medians);
	be_close(be);
out_src:
	src_close(&src);
out_cfg:
	cfg_free(&cfg);
	return ret;
}
