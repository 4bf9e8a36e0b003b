/* SPDX-License-Identifier: MIT */
/*
 * `volrec export IN -o OUT`: a processed HDF5 recording (`volrec record`, `volrec process -o`)
 * into OME-Zarr, NIfTI-2 or OME-TIFF, the format named by OUT's suffix (formats/fmt.h,
 * docs/formats.md). The output is written under a partial name and renamed when whole. A raw
 * recording (the replay format, volrecd's record.dir) is first processed with the
 * configuration inside it (`volrec process --source IN`, into a temporary HDF5 file beside
 * OUT), then exported the same way.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <hdf5.h>

#include "base/base.h"
#include "clients/volrec/helper.h"
#include "clients/volrec/tools.h"
#include "formats/fmt.h"

static void export_usage(FILE *f)
{
	fprintf(f,
	        "usage: volrec export IN -o OUT [--channels LIST] [--series] [-t THREADS]\n"
	        "       [--chunks Y,X,Z] [--codec zstd|lz4|none] [-f]\n\n"
	        "Copy the volumes of a processed recording (volrec record, volrec process -o)\n"
	        "into a format other tools open; OUT's suffix names it (IN a raw recording,\n"
	        "volrecd's record.dir: processed first with the configuration it holds):\n"
	        "  OUT.zarr, OUT.ome.zarr   OME-Zarr (NGFF 0.4): a folder with a multiscale\n"
	        "                           pyramid, blosc/zstd chunks (napari, Fiji, Python;\n"
	        "                           --codec: another)\n"
	        "  OUT.nii, OUT.nii.gz      NIfTI-2, one file per volume OUT_00000.nii.gz ...\n"
	        "                           (3D Slicer, ITK, nibabel); --series: one 4-D file\n"
	        "  OUT.ome.tif, .ome.tiff   OME-TIFF, B-scans as pages (Fiji); BigTIFF past 4 GiB\n"
	        "Values are those of /volumes, bit for bit; voxel sizes come from its\n"
	        "voxel_size_um attribute, and are written as unknown when it is absent.\n"
	        "Every channel of the file is exported (structure /volumes, angio /angio,\n"
	        "doppler /doppler), each with what its values mean: OME-Zarr and OME-TIFF\n"
	        "with a channel axis, NIfTI one file per channel (OUT_angio..., OUT_doppler...)\n"
	        "beside the structure's. A file of the structure alone exports as before.\n"
	        "The output is written as OUT.partial and renamed when complete; on any error\n"
	        "nothing is left under OUT. Progress on stderr when it is a terminal.\n\n"
	        "  -o, --output OUT     the output (required)\n"
	        "      --channels LIST  the channels to export, in this order, comma-separated\n"
	        "                       (structure, angio, doppler; default: every one in IN)\n"
	        "      --series         NIfTI: one 4-D file instead of one file per volume\n"
	        "  -t, --threads N      OME-Zarr compression threads (default: one per CPU)\n"
	        "      --chunks Y,X,Z   OME-Zarr chunk of one volume (default %u,%u,%u)\n"
	        "      --codec NAME     OME-Zarr chunks' codec: zstd (blosc/zstd, the default,\n"
	        "                       smallest), lz4 (blosc/lz4, several times faster,\n"
	        "                       larger), none (raw chunks, compressor null); the same\n"
	        "                       values with each\n"
	        "  -f, --force          replace an existing OUT\n"
	        "  -h, --help           this text\n\n"
	        "Exit status: 0 success, 1 failure (unreadable input, a channel it lacks, an\n"
	        "output that exists without -f, interrupted), 2 usage error (an unknown suffix\n"
	        "or channel name included), 7\n"
	        "permission denied, 8 disk full or file size limit (the partial output removed).\n",
	        FMT_ZARR_CHUNK_Y, FMT_ZARR_CHUNK_X, FMT_ZARR_CHUNK_Z);
}

struct export_progress {
	bool tty;
	double last;
};

static void export_progress(void *ctx, uint64_t done, uint64_t total, uint64_t bytes,
                            double seconds)
{
	struct export_progress *p = ctx;
	double rate = seconds > 0 ? (double)done / seconds : 0;
	double left = rate > 0 ? (double)(total - done) / rate : 0;

	if (!p->tty || (seconds - p->last < 0.2 && done < total))
		return;
	p->last = seconds;
	fprintf(stderr,
	        "\r  %3.0f%%  %llu/%llu volumes  %.1f volumes/s  %.0f MB  %d:%02d left\033[K",
	        100.0 * (double)done / (double)total, (unsigned long long)done,
	        (unsigned long long)total, rate, (double)bytes / 1e6, (int)(left / 60),
	        (int)left % 60);
	if (done == total)
		fputc('\n', stderr);
}

static int export_exit_for(int err)
{
	if (err == -ENOSPC || err == -EDQUOT || err == -EFBIG)
		return VR_EXIT_NOSPACE;
	if (err == -EACCES || err == -EPERM || err == -EROFS)
		return VR_EXIT_PERM;
	return VR_EXIT_FAIL;
}

static int parse_chunks(const char *s, uint32_t *c)
{
	char tail;
	unsigned y, x, z;

	if (sscanf(s, "%u,%u,%u%c", &y, &x, &z, &tail) != 3 || !y || !x || !z || y > 4096 ||
	    x > 4096 || z > 65536 || (uint64_t)y * x * z > (256u << 20))
		return -EINVAL;
	c[0] = y;
	c[1] = x;
	c[2] = z;
	return 0;
}

/* Whether path begins as a replay file or raw recording does (docs/replay-format.md). */
static bool is_raw_recording(const char *path)
{
	char magic[8];
	FILE *f = fopen(path, "rb");
	bool raw = f && fread(magic, 1, sizeof(magic), f) == sizeof(magic) &&
	           memcmp(magic, "VOLRECRP", sizeof(magic)) == 0;

	if (f)
		fclose(f);
	return raw;
}

/* A raw recording processed with its own configuration into the HDF5 file tmp: 0, or the exit
 * status to return (the helper said why on stderr). */
static int process_raw(const char *in, const char *tmp)
{
	const char *args[] = {"process", "--source", in, "-o", tmp, NULL};
	char err[PATH_MAX + 256];
	int rc;

	fprintf(stderr,
	        "volrec export: %s is a raw recording: processing it with the "
	        "configuration it holds (volrec process --source)\n",
	        in);
	rc = tool_helper_run(args, err, sizeof(err));
	if (rc < 0) {
		fprintf(stderr, "volrec export: %s (nothing written)\n", err);
		return VR_EXIT_FAIL;
	}
	if (rc != 0) {
		fprintf(stderr, "volrec export: processing %s failed (nothing written)\n", in);
		return rc == VR_EXIT_USAGE ? VR_EXIT_FAIL : rc;
	}
	return 0;
}

/* --channels: names of channels, comma-separated, each once (whether the file has them is
 * the reader's to say). 0, or -EINVAL with the message printed. */
static int parse_channels(const char *s)
{
	static const char *const names[] = {"structure", "angio", "doppler"};
	bool seen[3] = {false, false, false};

	for (const char *p = s;; p++) {
		size_t len = strcspn(p, ",");
		int k = 0;

		while (k < 3 && (strlen(names[k]) != len || strncmp(p, names[k], len) != 0))
			k++;
		if (k == 3 || seen[k]) {
			fprintf(stderr,
			        "volrec export: --channels %s: '%.*s' %s (structure, angio, "
			        "doppler, "
			        "comma-separated, each once)\n",
			        s, (int)len, p, k == 3 ? "is not a channel" : "is named twice");
			return -EINVAL;
		}
		seen[k] = true;
		p += len;
		if (!*p)
			return 0;
	}
}

VR_COMMAND(export, "copy a processed recording into OME-Zarr, NIfTI-2 or OME-TIFF")
{
	enum { OPT_SERIES = 0x200, OPT_CHUNKS, OPT_CHANNELS, OPT_CODEC };
	static const struct option longopts[] = {
	        {"output", required_argument, NULL, 'o'},
	        {"series", no_argument, NULL, OPT_SERIES},
	        {"threads", required_argument, NULL, 't'},
	        {"chunks", required_argument, NULL, OPT_CHUNKS},
	        {"channels", required_argument, NULL, OPT_CHANNELS},
	        {"codec", required_argument, NULL, OPT_CODEC},
	        {"force", no_argument, NULL, 'f'},
	        VR_CLI_LONGOPTS_END,
	};
	struct fmt_options o = {0};
	struct export_progress prog = {.tty = isatty(STDERR_FILENO), .last = -1};
	struct fmt_export_stats st;
	const char *out = NULL, *in;
	char err[1024];
	uint64_t threads;
	int opt, rc;

	H5Eset_auto2(H5E_DEFAULT, NULL, NULL); /* fmt_h5in's messages say what failed */
	optind = 1;
	while ((opt = getopt_long(argc, argv, "o:t:fh", longopts, NULL)) != -1) {
		switch (opt) {
		case 'o':
			out = optarg;
			break;
		case OPT_SERIES:
			o.series = true;
			break;
		case 't':
			if (vr_cli_u64("volrec export", "--threads", optarg, 1, 64, "1 to 64",
			               &threads) < 0)
				return VR_EXIT_USAGE;
			o.threads = (unsigned)threads;
			break;
		case OPT_CHUNKS:
			if (parse_chunks(optarg, o.chunk) < 0) {
				fprintf(stderr,
				        "volrec export: --chunks %s: need Y,X,Z, three positive "
				        "numbers of at most 256 Mi voxels in all\n",
				        optarg);
				return VR_EXIT_USAGE;
			}
			break;
		case OPT_CHANNELS:
			if (parse_channels(optarg) < 0)
				return VR_EXIT_USAGE;
			o.channels = optarg;
			break;
		case OPT_CODEC:
			if (fmt_codec_parse(optarg, &o.codec, err, sizeof(err)) < 0) {
				fprintf(stderr, "volrec export: %s\n", err);
				return VR_EXIT_USAGE;
			}
			break;
		case 'f':
			o.replace = true;
			break;
		default:
			return vr_cli_usage(export_usage, opt);
		}
	}
	if (optind + 1 != argc || !out || !*out) {
		fprintf(stderr, "volrec export: %s (see --help)\n",
		        optind >= argc      ? "the input IN.h5 is required"
		        : optind + 1 < argc ? "one input only"
		                            : "-o OUT is required");
		return VR_EXIT_USAGE;
	}
	in = argv[optind];
	if (fmt_kind_of(out) == FMT_NONE) {
		fprintf(stderr,
		        "volrec export: %s: unknown format (the suffix names it: .zarr or "
		        ".ome.zarr, "
		        ".nii or .nii.gz, .ome.tif or .ome.tiff)\n",
		        out);
		return VR_EXIT_USAGE;
	}
	if (o.series && fmt_kind_of(out) != FMT_NIFTI) {
		fprintf(stderr, "volrec export: --series is for NIfTI outputs (.nii, .nii.gz)\n");
		return VR_EXIT_USAGE;
	}
	if (o.codec && fmt_kind_of(out) != FMT_ZARR) {
		fprintf(stderr,
		        "volrec export: --codec is for OME-Zarr outputs (.zarr, .ome.zarr)\n");
		return VR_EXIT_USAGE;
	}
	char tmp[PATH_MAX];
	bool raw = is_raw_recording(in);
	tool_catch_signals(); /* Ctrl-C: the helper stops, and what it wrote is removed */
	if (raw) {
		if ((size_t)snprintf(tmp, sizeof(tmp), "%s.processing.h5", out) >= sizeof(tmp)) {
			fprintf(stderr, "volrec export: %s: name too long\n", out);
			return VR_EXIT_USAGE;
		}
		if (access(out, F_OK) == 0 && !o.replace) {
			fprintf(stderr, "volrec export: %s exists (-f replaces it)\n", out);
			return VR_EXIT_FAIL;
		}
		unlink(tmp); /* a left-over of an export interrupted hard */
		rc = process_raw(in, tmp);
		if (rc) {
			unlink(tmp);
			return rc;
		}
		in = tmp;
	}
	rc = fmt_export(in, out, &o, export_progress, &prog, tool_interrupted, &st, err,
	                sizeof(err));
	if (raw)
		unlink(tmp);
	if (rc < 0) {
		if (prog.tty && prog.last >= 0)
			fputc('\n', stderr);
		fprintf(stderr, "volrec export: %s (nothing written to %s)\n", err, out);
		return export_exit_for(rc);
	}
	printf("%s: %llu volumes, %.1f MB in %.2f s (%.1f MB/s of volumes)\n", out,
	       (unsigned long long)st.volumes, (double)st.bytes_out / 1e6, st.seconds,
	       st.seconds > 0 ? (double)st.bytes_in / 1e6 / st.seconds : 0);
	return VR_EXIT_OK;
}
