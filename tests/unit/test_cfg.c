/* SPDX-License-Identifier: MIT */
/*
 * Unit tests of the configuration: defaults, range and consistency checks with their
 * positions, tables, the dump/load round trip, deep copies and the structural-change rule.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config/config.h"
#include "tests/unit/vrtest.h"

/* Load yaml (named "t.yaml") and expect success. */
static void load_ok(struct vr_config *c, const char *yaml)
{
	char err[CFG_ERR_MAX] = "";
	int rc = cfg_load_string(c, yaml, "t.yaml", err, sizeof(err));
	if (rc)
		print_error("unexpected error: %s\nfor:\n%s\n", err, yaml);
	assert_int_equal(rc, 0);
}

/* Load yaml and expect failure whose message starts with "t.yaml:<where>: " and contains
 * fragment; the config must be left at its defaults. */
static void load_bad(const char *yaml, const char *where, const char *fragment)
{
	struct vr_config c, d;
	char err[CFG_ERR_MAX] = "", prefix[256];
	int rc = cfg_load_string(&c, yaml, "t.yaml", err, sizeof(err));

	snprintf(prefix, sizeof(prefix), "t.yaml:%s: ", where);
	if (rc >= 0 || strncmp(err, prefix, strlen(prefix)) || !strstr(err, fragment))
		print_error("for:\n%s\nexpected: %s...%s\ngot (rc %d): %s\n", yaml, prefix,
		            fragment, rc, err);
	assert_true(rc < 0);
	assert_memory_equal(err, prefix, strlen(prefix));
	assert_non_null(strstr(err, fragment));
	cfg_defaults(&d);
	assert_true(cfg_equal(&c, &d));
	cfg_free(&c);
}

/* A file under a fresh temporary directory; returns its path in buf. */
static const char *write_tmp(char *buf, size_t len, const char *name, const char *text)
{
	static char dir[64];
	if (!dir[0]) {
		snprintf(dir, sizeof(dir), "/tmp/volrec-test-cfg-XXXXXX");
		assert_non_null(mkdtemp(dir));
	}
	snprintf(buf, len, "%s/%s", dir, name);
	FILE *f = fopen(buf, "w");
	assert_non_null(f);
	fputs(text, f);
	assert_int_equal(fclose(f), 0);
	return buf;
}

/* Text of n numbers start, start + step, ... one per line. */
static char *numbers(size_t n, double start, double step)
{
	char *s = malloc(n * 32 + 1), *p = s;
	assert_non_null(s);
	*p = '\0';
	for (size_t i = 0; i < n; i++)
		p += sprintf(p, "%.17g\n", start + step * (double)i);
	return s;
}

/* ---- defaults ---------------------------------------------------------------------------- */

static void test_defaults_are_the_documented_ones(void **state)
{
	struct vr_config c;
	cfg_defaults(&c);
	assert_string_equal(c.instance, "default");
	assert_int_equal(c.backend, CFG_BACKEND_AUTO);
	assert_int_equal(c.gpu.device, 0);
	assert_int_equal(c.gpu.streams, 4);
	assert_int_equal(c.cpu.threads, 0);
	assert_int_equal(c.source.type, CFG_SOURCE_SYNTH);
	assert_true(c.source.rate == 25.0);
	assert_int_equal(c.source.replay.format, CFG_REPLAY_AUTO);
	assert_true(c.source.replay.loop);
	assert_int_equal(c.source.synth.seed, 1);
	assert_string_equal(c.source.synth.phantom, "retina");
	assert_true(c.source.synth.deg_per_s == 0.25);
	assert_true(c.source.synth.snr_db == 40.0);
	assert_string_equal(c.source.shim.args_yaml, "{}");
	assert_int_equal(c.source.shim.timeout_ms, 1000);
	assert_int_equal(c.geometry.samples_per_ascan, 2048);
	assert_int_equal(c.geometry.sample_type, CFG_SAMPLE_U16);
	assert_int_equal(c.geometry.bit_shift, 0);
	assert_int_equal(c.geometry.ascans_per_bscan, 60);
	assert_int_equal(c.geometry.bscans_per_volume, 60);
	assert_int_equal(c.geometry.stride[0], 5);
	assert_int_equal(c.geometry.stride[1], 5);
	assert_int_equal(c.geometry.depth_range[0], 0);
	assert_int_equal(c.geometry.depth_range[1], 1024);
	assert_false(c.geometry.bidirectional);
	assert_int_equal(c.preprocess.background.mode, CFG_BG_ASCAN_MEAN);
	assert_null(c.preprocess.background.reference.data);
	assert_int_equal(c.preprocess.resample.method, CFG_RS_NONE);
	assert_int_equal(c.preprocess.resample.positions, CFG_RSPOS_NONE);
	assert_int_equal(c.preprocess.window.type, CFG_WIN_HANN);
	assert_int_equal(c.preprocess.dispersion.kind, CFG_DISP_NONE);
	assert_int_equal(c.preprocess.zero_pad, 1);
	assert_true(c.preprocess.db_range[0] == 0.0 && c.preprocess.db_range[1] == 100.0);
	assert_false(c.preprocess.flip.x || c.preprocess.flip.z);
	assert_int_equal(c.reconstruct.mode, CFG_RECON_NONCUMULATIVE);
	assert_true(c.reconstruct.spatial_sigma == 1.0);
	assert_int_equal(c.reconstruct.temporal, CFG_TEMPORAL_LINEAR);
	assert_true(c.reconstruct.tau == 5.0);
	assert_int_equal(c.reconstruct.combine, CFG_COMBINE_SUM);
	assert_int_equal(c.output.slots, 4);
	assert_int_equal(c.pipeline.ring_bscans, 256);
	assert_int_equal(c.pipeline.overflow, CFG_OVERFLOW_DROP_EPOCH);
	assert_string_equal(c.ipc.run_dir, "/run/volrec");
	assert_int_equal(c.ipc.npub, 0);
	assert_int_equal(c.ipc.status_interval_ms, 1000);
	assert_int_equal(c.ipc.hwm, 16);
	assert_int_equal(c.ipc.max_readers, 64);
	assert_false(c.ipc.keep_shm);
	assert_string_equal(c.ipc.curve_secret_key, "");
	assert_int_equal(c.log.level, CFG_LOG_INFO);
	cfg_free(&c);
}

static void test_empty_document_means_defaults(void **state)
{
	static const char *const empties[] = {"", "# only a comment\n", "---\n", "~\n",
	                                      "--- \n...\n"};
	struct vr_config c, d;
	cfg_defaults(&d);
	for (size_t i = 0; i < sizeof(empties) / sizeof(empties[0]); i++) {
		load_ok(&c, empties[i]);
		assert_true(cfg_equal(&c, &d));
		cfg_free(&c);
	}
}

static void test_depth_range_default_follows_k_and_zero_pad(void **state)
{
	struct vr_config c;
	load_ok(&c, "geometry: {samples_per_ascan: 256}\npreprocess: {zero_pad: 4}\n");
	assert_int_equal(c.geometry.depth_range[0], 0);
	assert_int_equal(c.geometry.depth_range[1], 512);
	assert_int_equal(cfg_fft_len(&c), 1024);
	assert_int_equal(cfg_nz(&c), 512);
	cfg_free(&c);
}

static void test_window_param_default_depends_on_type(void **state)
{
	struct vr_config c;
	load_ok(&c, "preprocess: {window: {type: tukey}}\n");
	assert_true(c.preprocess.window.param == 0.5);
	cfg_free(&c);
	load_ok(&c, "preprocess: {window: {type: gauss}}\n");
	assert_true(c.preprocess.window.param == 0.4);
	cfg_free(&c);
	load_ok(&c, "preprocess: {window: {type: tukey, param: 0}}\n");
	assert_true(c.preprocess.window.param == 0.0);
	cfg_free(&c);
}

static void test_values_are_parsed(void **state)
{
	struct vr_config c;
	load_ok(&c,
	        "instance: a_B-9\nbackend: cpu\ngpu: {device: 3, streams: 32}\n"
	        "cpu: {threads: 2}\n"
	        "source: {rate: 0, synth: {seed: 18446744073709551615, snr_db: 12.5, "
	        "motion: {deg_per_s: -1.5}}}\n"
	        "geometry: {sample_type: i16, bit_shift: 15, stride: [1, 3], "
	        "depth_range: [10, 20], bidirectional: true}\n"
	        "preprocess: {background: {mode: bscan_median}, window: {type: blackman}, "
	        "dispersion: {coeffs: [1.5, -2e-1]}, db_range: [-10.5, 80], "
	        "flip: {x: true, z: TRUE}}\n"
	        "reconstruct: {mode: cumulative, spatial_sigma: 0.5, temporal: exp, tau: 2, "
	        "combine: product}\n"
	        "output: {dtype: u8, slots: 64}\npipeline: {ring_bscans: 120, overflow: block}\n"
	        "ipc: {run_dir: /tmp/x, pub: [\"ipc:///tmp/x/a\", \"tcp://[::1]:7000\"], "
	        "status_interval_ms: 50, hwm: 100000, max_readers: 1024, keep_shm: true}\n"
	        "log: {level: debug}\n");
	assert_string_equal(c.instance, "a_B-9");
	assert_int_equal(c.backend, CFG_BACKEND_CPU);
	assert_int_equal(c.gpu.device, 3);
	assert_int_equal(c.cpu.threads, 2);
	assert_true(c.source.rate == 0.0);
	assert_true(c.source.synth.seed == UINT64_MAX);
	assert_true(c.source.synth.deg_per_s == -1.5);
	assert_int_equal(c.geometry.sample_type, CFG_SAMPLE_I16);
	assert_int_equal(c.geometry.bit_shift, 15);
	assert_int_equal(c.geometry.stride[1], 3);
	assert_int_equal(c.geometry.depth_range[0], 10);
	assert_true(c.geometry.bidirectional);
	assert_int_equal(c.preprocess.background.mode, CFG_BG_BSCAN_MEDIAN);
	assert_int_equal(c.preprocess.dispersion.kind, CFG_DISP_COEFFS);
	assert_true(c.preprocess.dispersion.coeffs[1] == -0.2);
	assert_true(c.preprocess.db_range[0] == -10.5);
	assert_true(c.preprocess.flip.x && c.preprocess.flip.z);
	assert_int_equal(c.reconstruct.mode, CFG_RECON_CUMULATIVE);
	assert_int_equal(c.reconstruct.temporal, CFG_TEMPORAL_EXP);
	assert_int_equal(c.reconstruct.combine, CFG_COMBINE_PRODUCT);
	assert_int_equal(c.output.slots, 64);
	assert_int_equal(c.pipeline.ring_bscans, 120);
	assert_int_equal(c.pipeline.overflow, CFG_OVERFLOW_BLOCK);
	assert_int_equal(c.ipc.npub, 2);
	assert_string_equal(c.ipc.pub[1], "tcp://[::1]:7000");
	assert_true(c.ipc.keep_shm);
	assert_int_equal(c.log.level, CFG_LOG_DEBUG);
	cfg_free(&c);
}

/* ---- range and type checks --------------------------------------------------------------- */

static void test_integer_ranges_are_inclusive(void **state)
{
	struct vr_config c;
	load_ok(&c, "gpu: {streams: 1}\ngeometry: {samples_per_ascan: 16, ascans_per_bscan: 1, "
	            "bscans_per_volume: 1, stride: [1, 1]}\noutput: {slots: 2}\n"
	            "pipeline: {ring_bscans: 2}\n");
	assert_int_equal(cfg_nz(&c), 8);
	cfg_free(&c);
	load_ok(&c, "geometry: {samples_per_ascan: 65536, ascans_per_bscan: 1, "
	            "bscans_per_volume: 1}\n");
	cfg_free(&c);
	load_bad("gpu: {streams: 0}\n", "1:16",
	         "gpu.streams: 0 is out of range (an integer "
	         "from 1 to 32)");
	load_bad("gpu: {streams: 33}\n", "1:16", "33 is out of range");
	load_bad("gpu: {device: -1}\n", "1:15", "gpu.device: -1 is out of range");
	load_bad("cpu: {threads: 257}\n", "1:16", "(an integer from 0 to 256)");
	load_bad("geometry: {samples_per_ascan: 15}\n", "1:31", "15 is out of range");
	load_bad("geometry: {samples_per_ascan: 65537}\n", "1:31", "65537 is out of range");
	load_bad("geometry: {bscans_per_volume: 65537}\n", "1:31", "(an integer from 1 to 65536)");
	load_bad("output: {slots: 65}\n", "1:17", "output.slots: 65 is out of range");
	load_bad("ipc: {hwm: 0}\n", "1:12", "ipc.hwm: 0 is out of range");
	load_bad("ipc: {max_readers: 1025}\n", "1:20", "ipc.max_readers: 1025");
	load_bad("ipc: {status_interval_ms: 49}\n", "1:27", "(an integer from 50 to 60000)");
	load_bad("pipeline: {ring_bscans: 65537}\n", "1:25", "(an integer from 1 to 65536)");
	load_bad("source: {shim: {timeout_ms: 600001}}\n", "1:29", "source.shim.timeout_ms");
}

/* "x: " and n nested flow sequences */
static char *nested(int n)
{
	char *t = malloc(4 + 2 * (size_t)n + 2);

	assert_non_null(t);
	strcpy(t, "x: ");
	memset(t + 3, '[', (size_t)n);
	memset(t + 3 + n, ']', (size_t)n);
	strcpy(t + 3 + 2 * n, "\n");
	return t;
}

/* Nesting is bounded before the document is loaded (libyaml's time grows with its square: a
 * 1 MiB file of brackets took minutes); a value of a set the same. */
static void test_yaml_nesting_is_bounded_and_tags_refused(void **state)
{
	struct vr_config c;
	char err[CFG_ERR_MAX], *t;

	(void)state;
	t = nested(CFG_YAML_DEPTH_MAX); /* the root mapping and 63 more: the last one too many */
	load_bad(t, "1:67", "(syntax): nested more than 64 levels deep");
	free(t);
	t = nested(CFG_YAML_DEPTH_MAX - 1); /* deep enough, and refused for what it says */
	load_bad(t, "1:1", "x: unknown key");
	free(t);
	/* explicit tags: "!!str 4" was taken as 4, "!!str true" as true */
	load_bad("cpu: {threads: !!str 4}\n", "1:16",
	         "the tag tag:yaml.org,2002:str is not accepted");
	load_bad("source:\n  replay: {loop: !!bool true}\n", "2:18", "tag:yaml.org,2002:bool");
	load_bad("preprocess: !!map {zero_pad: 2}\n", "1:13", "is not accepted");
	load_bad("a: !local x\n", "1:4", "the tag !local is not accepted");
	t = nested(200000);
	load_bad(t, "1:67", "nested more than 64 levels deep");
	cfg_defaults(&c);
	const char *path = "preprocess.db_range", *value = t + 3;
	assert_int_equal(cfg_set_keys(&c, &path, &value, 1, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "preprocess.db_range: nested more than 64 levels deep"));
	free(t);
	cfg_free(&c);
}

static void test_float_ranges(void **state)
{
	load_bad("reconstruct: {spatial_sigma: 0}\n", "1:30",
	         "reconstruct.spatial_sigma: 0 is out of range (a number from 0.2 to 100");
	load_bad("reconstruct: {spatial_sigma: 0.05}\n", "1:30",
	         "reconstruct.spatial_sigma: 0.05 is out of range (a number from 0.2 to 100");
	load_bad("reconstruct: {tau: -0.5}\n", "1:20", "reconstruct.tau: -0.5 is out of range");
	load_bad("source: {rate: -1}\n", "1:16", "source.rate: -1 is out of range");
	/* a positive rate below the slowest pace used to run unpaced (its period overflowed) */
	load_bad("source: {rate: 1e-12}\n", "1:16",
	         "source.rate: 1e-12 epochs/s is below the slowest pace, 0.01");
	load_bad("source: {rate: nan}\n", "1:16", "not a finite number");
	load_bad("source: {rate: .inf}\n", "1:16", "expected a number");
	load_bad("source: {rate: 0x10}\n", "1:16", "expected a number");
	load_bad("source: {synth: {snr_db: 151}}\n", "1:26", "source.synth.snr_db");
	load_bad("preprocess: {db_range: [0, 1000]}\n", "1:28", "preprocess.db_range[1]: 1000");
	load_bad("preprocess: {db_range: [50, 50]}\n", "1:24", "[50, 50] is empty (lo < hi");
	load_bad("preprocess: {window: {type: tukey, param: 1.01}}\n", "1:43", "for tukey");
	load_bad("preprocess: {window: {type: gauss, param: 0}}\n", "1:43", "for gauss");
	load_bad("preprocess: {window: {type: hann, param: -1}}\n", "1:42", "out of range");
}

static void test_types_are_strict(void **state)
{
	load_bad("gpu: {streams: 2.0}\n", "1:16", "expected an integer from 1 to 32, got '2.0'");
	load_bad("gpu: {streams: '2'}\n", "1:16", "got the string '2'");
	load_bad("gpu: {streams: 02}\n", "1:16", "expected an integer");
	load_bad("gpu: {streams: }\n", "1:16", "got nothing (null)");
	load_bad("gpu: {streams: [2]}\n", "1:16", "got a sequence");
	load_bad("source: {rate: \"25\"}\n", "1:16", "expected a number");
	load_bad("ipc: {keep_shm: 1}\n", "1:17", "expected a boolean (true or false), got '1'");
	load_bad("ipc: {keep_shm: on}\n", "1:17", "(true or false)");
	load_bad("instance: [a]\n", "1:11", "instance: expected a string, got a sequence");
	load_bad("geometry: {stride: [1]}\n", "1:20", "has 1 element (exactly 2 integers");
	load_bad("geometry: {stride: [1, 1.5]}\n", "1:24",
	         "geometry.stride[1]: expected an integer");
	load_bad("preprocess: {resample: {method: linear, poly: [0, 1, 2]}}\n", "1:47",
	         "has 3 elements (exactly 4 numbers [c0, c1, c2, c3])");
	load_bad("ipc: {pub: tcp://127.0.0.1:1}\n", "1:12", "expected a sequence of at most 8");
	load_bad("ipc: {pub: [[a]]}\n", "1:13", "ipc.pub[0]: expected a string");
}

static void test_enums_list_the_allowed_values(void **state)
{
	load_bad("backend: CUDA\n", "1:10", "'CUDA' is not allowed (one of: auto, cuda, cpu)");
	load_bad("source: {type: file}\n", "1:16", "(one of: synth, replay, shim)");
	load_bad("source: {replay: {format: hdf5}}\n", "1:27", "(one of: auto, raw)");
	load_bad("geometry: {sample_type: u8}\n", "1:25", "(one of: u16, i16, f32, u12p, u12gv)");
	load_bad("preprocess: {background: {mode: median}}\n", "1:33",
	         "(one of: ascan_mean, bscan_mean, bscan_median, reference, none, partial_median)");
	load_bad("preprocess: {resample: {method: quintic}}\n", "1:33",
	         "(one of: none, linear, cubic, spline)");
	load_bad("reconstruct: {mode: fast}\n", "1:21",
	         "(one of: none, noncumulative, cumulative, adaptive, compensated, registered)");
	load_bad("reconstruct: {temporal: gauss}\n", "1:25", "(one of: linear, exp)");
	load_bad("reconstruct: {combine: max}\n", "1:24", "(one of: sum, product)");
	load_bad("pipeline: {overflow: wait}\n", "1:22", "(one of: drop_epoch, block)");
	load_bad("log: {level: warn}\n", "1:14", "(one of: error, warning, info, debug)");
}

static void test_unknown_and_duplicate_keys(void **state)
{
	load_bad("bakend: cpu\n", "1:1", "bakend: unknown key (allowed: instance, backend");
	load_bad("gpu:\n  device: 0\n  stream: 2\n", "3:3", "gpu.stream: unknown key");
	load_bad("source:\n  synth:\n    motion: {deg_per_s: 1, axis: x}\n", "3:28",
	         "source.synth.motion.axis: unknown key (allowed in source.synth.motion: "
	         "deg_per_s, shift_mm_per_s, jump, tilt_deg_per_s, tilt_max_deg, periodic, warp)");
	load_bad("log: {level: info}\nlog: {level: info}\n", "2:1",
	         "log: duplicate key (first given at line 1, column 1");
	load_bad("gpu: {device: 0, device: 1}\n", "1:18", "gpu.device: duplicate key");
	load_bad("1: 2\n", "1:1", "1: unknown key");
	/* messages stay on one line whatever the file holds */
	load_bad("\"a\\nb\": 1\n", "1:1", "a?b: unknown key");
	load_bad("- 1\n", "1:1", "(root): expected a mapping");
	load_bad("a: b\n---\nc: d\n", "1:1", "a: unknown key");
	load_bad("instance: a\n---\ninstance: b\n", "3:1", "(root): a second YAML document");
	load_bad("gpu: {device: 0\n", "2:1", "(syntax): ");
	load_bad("gpu: *nothing\n", "1:6", "(syntax): found undefined alias");
}

static void test_geometry_consistency(void **state)
{
	struct vr_config c;
	load_bad("geometry: {depth_range: [0, 1025]}\n", "1:29",
	         "geometry.depth_range[1]: 1025 is beyond N/2 = 1024");
	load_ok(&c, "geometry: {depth_range: [1023, 1024]}\n");
	assert_int_equal(cfg_nz(&c), 1);
	cfg_free(&c);
	load_ok(&c, "geometry: {depth_range: [0, 2048]}\npreprocess: {zero_pad: 2}\n");
	cfg_free(&c);
	load_bad("geometry: {depth_range: [10, 5]}\n", "1:25", "[10, 5] is empty (z0 < z1");
	load_bad("geometry: {stride: [0, 5]}\n", "1:21", "geometry.stride[0]: 0 is out of range");
	load_bad("geometry: {samples_per_ascan: 1001, sample_type: u12p, depth_range: [0, 500]}\n",
	         "1:31", "geometry.samples_per_ascan: 1001 is odd with sample_type u12p");
	load_bad("geometry: {sample_type: u12gv, bit_shift: 12}\n", "1:43",
	         "geometry.bit_shift: 12 with sample_type u12gv (0..11");
	load_ok(&c, "geometry: {samples_per_ascan: 1000, sample_type: u12p, bit_shift: 4, "
	            "ascans_per_bscan: 10, depth_range: [0, 500]}\n");
	assert_int_equal(cfg_bscan_bytes(&c), 10 * 1500);
	cfg_free(&c);
	load_bad("geometry: {stride: [12, 12]}\n", "1:20", "interlaces 144 epochs");
	load_ok(&c, "geometry: {stride: [64, 2]}\n");
	assert_int_equal(cfg_stride_area(&c), 128);
	cfg_free(&c);
	load_bad("geometry: {sample_type: f32, bit_shift: 1}\n", "1:41", "with sample_type f32");
	load_bad("preprocess: {zero_pad: 3}\n", "1:24", "(1, 2 or 4)");
	/* one epoch processed while the next is acquired */
	load_ok(&c, "geometry: {bscans_per_volume: 100}\npipeline: {ring_bscans: 200}\n");
	cfg_free(&c);
	load_bad("geometry: {bscans_per_volume: 100}\npipeline: {ring_bscans: 199}\n", "2:25",
	         "199 is too small (at least 2 x geometry.bscans_per_volume = 200");
	load_bad("geometry: {bscans_per_volume: 129}\n", "1:31", "256 (the default) is too small");
}

static void test_sizes_that_overflow_are_rejected(void **state)
{
	struct vr_config c;
	/* 65536 * 64 * 65536 * 2 * 32768 voxels overflows 64 bits */
	load_bad("geometry: {samples_per_ascan: 65536, ascans_per_bscan: 65536,\n"
	         "  bscans_per_volume: 30000, stride: [64, 2]}\npipeline: {ring_bscans: 60000}\n",
	         "1:11", "geometry: the output volume");
	/* 4 GiB of u8 output: accepted; 16 GiB is the bound */
	load_ok(&c, "geometry: {samples_per_ascan: 8192, ascans_per_bscan: 1024,\n"
	            "  bscans_per_volume: 256, stride: [2, 2]}\n"
	            "pipeline: {ring_bscans: 512}\noutput: {slots: 2}\n");
	assert_int_equal(cfg_out_voxels(&c), (size_t)4 << 30);
	cfg_free(&c);
	load_bad("geometry: {samples_per_ascan: 8192, ascans_per_bscan: 1024,\n"
	         "  bscans_per_volume: 1025, stride: [2, 2]}\npipeline: {ring_bscans: 2050}\n",
	         "1:11", "exceeds 16 GiB");
	load_bad("geometry: {samples_per_ascan: 8192, ascans_per_bscan: 1024,\n"
	         "  bscans_per_volume: 256, stride: [2, 2]}\npipeline: {ring_bscans: 512}\n"
	         "output: {slots: 32}\n",
	         "4:17", "output.slots: 32 slots of 4.00 GiB need 128.0 GiB");
	load_bad("geometry: {samples_per_ascan: 65536, ascans_per_bscan: 65536,\n"
	         "  bscans_per_volume: 1, stride: [1, 1], depth_range: [0, 1]}\n"
	         "reconstruct: {mode: none}\npipeline: {ring_bscans: 4}\n",
	         "4:25", "pipeline.ring_bscans: 4 B-scans of 8589934592 bytes need 32.0 GiB");
}

static void test_resample_positions(void **state)
{
	struct vr_config c;
	load_ok(&c, "geometry: {samples_per_ascan: 16}\n"
	            "preprocess: {resample: {method: spline, poly: [0, 15, 0, 0]}}\n");
	assert_int_equal(c.preprocess.resample.positions, CFG_RSPOS_POLY);
	assert_true(c.preprocess.resample.poly[1] == 15.0);
	cfg_free(&c);
	load_ok(&c, "preprocess: {resample: {method: cubic, wavelength_nm: [900, -0.03, 0, 0]}}\n");
	assert_int_equal(c.preprocess.resample.positions, CFG_RSPOS_WAVELENGTH);
	cfg_free(&c);
	load_bad("preprocess: {resample: {table: x.txt}}\n", "1:32",
	         "preprocess.resample.table: given but preprocess.resample.method is none");
	load_bad("preprocess: {resample: {method: linear}}\n", "1:24",
	         "preprocess.resample: method linear needs the sample positions");
	load_bad("preprocess:\n  resample:\n    method: linear\n    wavelength_nm: [800, 1, 0, 0]\n"
	         "    poly: [0, 1, 0, 0]\n",
	         "5:11",
	         "preprocess.resample.poly: given together with "
	         "preprocess.resample.wavelength_nm");
	load_bad("preprocess:\n  resample:\n    method: linear\n    poly: [0, 1, 0, 0]\n"
	         "    wavelength_nm: [800, 1, 0, 0]\n",
	         "5:20",
	         "preprocess.resample.wavelength_nm: given together with "
	         "preprocess.resample.poly");
	/* 800 + 0.1 i - 0.0001 i^2 turns at i = 500 */
	load_bad("geometry: {samples_per_ascan: 1024}\npreprocess: {resample: {method: linear, "
	         "wavelength_nm: [800, 0.1, -0.0001, 0]}}\n",
	         "2:56", "is not strictly monotone at pixel 501 (824.9999 nm after 825 nm");
	load_bad("preprocess: {resample: {method: linear, wavelength_nm: [800, 0, 0, 0]}}\n",
	         "1:56", "is not strictly monotone at pixel 1");
}

static void test_mutually_exclusive_and_required(void **state)
{
	char path[256];
	char *text = numbers(16, 0, 1);
	char yaml[1024];
	write_tmp(path, sizeof(path), "t16.txt", text);
	free(text);

	snprintf(yaml, sizeof(yaml),
	         "geometry: {samples_per_ascan: 16, ascans_per_bscan: 2, bscans_per_volume: 2}\n"
	         "preprocess:\n  dispersion:\n    table: %s\n    coeffs: [0, 1]\n",
	         path);
	load_bad(yaml, "5:13",
	         "preprocess.dispersion.coeffs: given together with "
	         "preprocess.dispersion.table");
	load_bad("preprocess: {background: {mode: reference}}\n", "1:26",
	         "preprocess.background.reference: missing (required when");
	load_bad("preprocess: {background: {reference: r.txt}}\n", "1:38",
	         "given but preprocess.background.mode is ascan_mean");
	load_bad("source: {type: replay}\n", "1:9",
	         "source.replay.path: missing (required when source.type is replay)");
	load_bad("source:\n  type: shim\n  shim: {timeout_ms: 5}\n", "3:9",
	         "source.shim.library: missing (required when source.type is shim)");
	snprintf(yaml, sizeof(yaml),
	         "source: {type: shim, shim: {library: %s}}\npipeline: {overflow: block}\n", path);
	load_bad(yaml, "2:22", "pipeline.overflow: block would stall");
	snprintf(yaml, sizeof(yaml),
	         "source: {type: replay, replay: {path: %s}}\n"
	         "pipeline: {overflow: block}\n",
	         path);
	struct vr_config c;
	load_ok(&c, yaml);
	assert_string_equal(c.source.replay.path, path);
	cfg_free(&c);
	load_bad("source: {type: replay, replay: {path: /nonexistent/r.raw}}\n", "1:39",
	         "replay file /nonexistent/r.raw: No such file or directory");
	load_bad("source: {type: replay, replay: {path: /tmp}}\n", "1:39", "not a regular file");
	load_bad("source: {type: replay, replay: {path: \"\"}}\n", "1:39", "is empty");
}

static void test_instance_and_endpoints(void **state)
{
	char path[256], yaml[1024];
	struct vr_config c;

	load_bad("instance: \"\"\n", "1:11", "'' has 0 characters (1 to 63");
	load_bad("instance: a.b\n", "1:11", "contains '.'");
	load_bad("instance: a/b\n", "1:11", "contains '/'");
	load_ok(&c,
	        "instance: Z_9-x\nipc:\n  pub: [\"tcp://127.0.0.1:5555\", \"tcp://localhost:1\","
	        " \"tcp://[::1]:65535\", \"ipc:///tmp/v.pub\"]\n");
	assert_int_equal(c.ipc.npub, 4);
	cfg_free(&c);
	load_bad("ipc: {pub: [\"tcp://127.0.0.1\"]}\n", "1:13", "has no HOST:PORT");
	load_bad("ipc: {pub: [\"tcp://127.0.0.1:0\"]}\n", "1:13", "bad port '0'");
	load_bad("ipc: {pub: [\"tcp://127.0.0.1:80x\"]}\n", "1:13", "bad port");
	load_bad("ipc: {pub: [\"ipc://\"]}\n", "1:13", "the path has 0 bytes");
	load_bad("ipc: {pub: [\"inproc://x\"]}\n", "1:13", "is not a supported endpoint");
	load_bad("ipc: {pub: [\"tcp://192.168.1.2:5555\"]}\n", "1:13", "needs CURVE");
	load_bad("ipc: {pub: [\"tcp://127.0.0.2:5555\"]}\n", "1:13", "needs CURVE");
	load_bad("ipc: {pub: [\"tcp://eth0:5555\"]}\n", "1:13", "needs CURVE");

	write_tmp(path, sizeof(path), "k.key", "0123456789012345678901234567890123456789\n");
	snprintf(yaml, sizeof(yaml),
	         "ipc:\n  pub: [\"tcp://*:5555\"]\n  curve_secret_key: %s\n"
	         "  curve_public_key: %s\n",
	         path, path);
	load_ok(&c, yaml);
	assert_string_equal(c.ipc.curve_public_key, path);
	cfg_free(&c);
	snprintf(yaml, sizeof(yaml), "ipc:\n  curve_public_key: %s\n", path);
	load_bad(yaml, "2:21", "ipc.curve_public_key: given alone");
	load_bad("ipc: {curve_secret_key: /nonexistent/s, curve_public_key: /nonexistent/p}\n",
	         "1:25",
	         "ipc.curve_secret_key: CURVE secret key file /nonexistent/s: No such file");
}

/* ---- tables ------------------------------------------------------------------------------ */

static void test_table_loads_with_comments_and_blank_lines(void **state)
{
	char path[256], yaml[1024];
	struct vr_config c;
	write_tmp(
	        path, sizeof(path), "tab.txt",
	        "# k-linearization\n\n  0.5\n1e-3\r\n-2\n\t3.25  \n# middle\n4\n5\n6\n7\n8\n9\n10\n"
	        "11\n12\n13\n14\n15\n\n");
	snprintf(yaml, sizeof(yaml),
	         "geometry: {samples_per_ascan: 16, ascans_per_bscan: 2, bscans_per_volume: 2}\n"
	         "preprocess: {resample: {method: cubic, table: %s}}\n",
	         path);
	load_ok(&c, yaml);
	const struct cfg_table *t = &c.preprocess.resample.table;
	assert_int_equal(c.preprocess.resample.positions, CFG_RSPOS_TABLE);
	assert_int_equal(t->len, 16);
	assert_non_null(t->data);
	assert_true(t->data[0] == 0.5 && t->data[1] == 1e-3 && t->data[2] == -2.0 &&
	            t->data[3] == 3.25 && t->data[15] == 15.0);
	assert_string_equal(t->path, path);
	cfg_free(&c);
	assert_null(c.preprocess.resample.table.data);
}

/* A live set never names a file (the daemon would open whatever the client names, and a
 * parse error would show its first line); the refusal comes before the file is opened. */
static void test_set_refuses_keys_that_name_files(void **state)
{
	char path[256], yaml[1024], err[CFG_ERR_MAX];
	struct vr_config c;
	char *text = numbers(2048, 0, 1);
	write_tmp(path, sizeof(path), "disp.txt", text);
	free(text);
	snprintf(yaml, sizeof(yaml), "preprocess: {dispersion: {table: %s}}\n", path);
	load_ok(&c, yaml);
	static const char *const cases[][2] = {
	        {"preprocess.dispersion.table", "/etc/shadow"},
	        {"preprocess.dispersion.table", "../../etc/passwd"},
	        {"preprocess.dispersion.table", "/proc/self/maps"},
	        {"preprocess.dispersion", "{table: /etc/passwd}"},
	        {"preprocess", "{dispersion: {table: /etc/passwd}}"},
	        {"preprocess.background.reference", "/etc/passwd"},
	        {"source.replay.path", "/etc/passwd"},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const char *p = cases[i][0], *v = cases[i][1];
		assert_int_equal(cfg_set_keys(&c, &p, &v, 1, err, sizeof(err)), -EPERM);
		assert_null(strstr(err, "root:"));
		assert_null(strstr(err, "not a number"));
	}
	const char *p = "preprocess.dispersion.table", *v = "/etc/passwd";
	assert_int_equal(cfg_set_keys(&c, &p, &v, 1, err, sizeof(err)), -EPERM);
	assert_non_null(strstr(err, "preprocess.dispersion.table: names a file"));
	assert_string_equal(c.preprocess.dispersion.table.path, path); /* unchanged */
	/* the section without its file key stays settable: coefficients replace the table */
	p = "preprocess.dispersion";
	v = "{coeffs: [1, 2]}";
	assert_int_equal(cfg_set_keys(&c, &p, &v, 1, err, sizeof(err)), 0);
	assert_true(c.preprocess.dispersion.coeffs[0] == 1 &&
	            c.preprocess.dispersion.coeffs[1] == 2);
	cfg_free(&c);
}

/* One render costs at most CFG_RENDER_SAMPLES_MAX samples: an explicit step beyond it is
 * refused, the automatic step grows to fit it (a legal geometry never fails for its views). */
static void test_render_cost_is_capped(void **state)
{
	struct vr_config c;

	load_ok(&c, "geometry: {samples_per_ascan: 65536, ascans_per_bscan: 1, "
	            "bscans_per_volume: 1}\n");
	double D = cfg_render_diagonal(&c), h = cfg_render_step(&c);
	assert_true(h > 0.5);
	assert_true(256.0 * 256.0 * ceil(D / h) <= (double)CFG_RENDER_SAMPLES_MAX);
	cfg_free(&c);
	load_ok(&c, "view: {render: {size: [64, 64]}}\n");
	assert_true(cfg_render_step(&c) == 0.5); /* small enough: half the smallest spacing */
	cfg_free(&c);
	load_bad(
	        "geometry: {samples_per_ascan: 4096, ascans_per_bscan: 60, bscans_per_volume: 60}\n"
	        "view: {render: {size: [1024, 1024], step: 0.5}}\n",
	        "2:23", "view.render.size: a render of 1024 x 1024 rays of");
	load_bad("view: {render: {step: 0.01}}\n", "1:23",
	         "view.render.step: a render of 256 x 256 rays of 110842 samples");
}

/* A window type set alone brings its own default parameter (as a file naming the type alone
 * does), unless the parameter was chosen. */
static void test_set_window_type_alone_brings_its_parameter(void **state)
{
	char err[CFG_ERR_MAX];
	struct vr_config c;
	const char *p = "preprocess.window.type", *v = "tukey";

	cfg_defaults(&c);
	assert_true(c.preprocess.window.param == 0.4); /* hann's */
	assert_int_equal(cfg_set_keys(&c, &p, &v, 1, err, sizeof(err)), 0);
	assert_int_equal(c.preprocess.window.type, CFG_WIN_TUKEY);
	assert_true(c.preprocess.window.param == 0.5);
	v = "gauss";
	assert_int_equal(cfg_set_keys(&c, &p, &v, 1, err, sizeof(err)), 0);
	assert_true(c.preprocess.window.param == 0.4);
	/* a chosen parameter stays (and is checked against the new type) */
	const char *pp[2] = {"preprocess.window.param", NULL}, *vv[2] = {"0.3", NULL};
	assert_int_equal(cfg_set_keys(&c, pp, vv, 1, err, sizeof(err)), 0);
	v = "tukey";
	assert_int_equal(cfg_set_keys(&c, &p, &v, 1, err, sizeof(err)), 0);
	assert_true(c.preprocess.window.param == 0.3);
	/* type and parameter together: as given */
	pp[1] = "preprocess.window.type";
	vv[0] = "0.2";
	vv[1] = "hann";
	assert_int_equal(cfg_set_keys(&c, pp, vv, 2, err, sizeof(err)), 0);
	assert_true(c.preprocess.window.param == 0.2);
	cfg_free(&c);
}

static void test_table_errors_name_file_and_line(void **state)
{
	char path[256], yaml[1024], frag[512];
	char *text = numbers(17, 0, 1);
	write_tmp(path, sizeof(path), "long.txt", text);
	free(text);
	snprintf(yaml, sizeof(yaml),
	         "geometry: {samples_per_ascan: 16, ascans_per_bscan: 2, bscans_per_volume: 2}\n"
	         "preprocess: {dispersion: {table: %s}}\n",
	         path);
	snprintf(frag, sizeof(frag),
	         "preprocess.dispersion.table: the table %s has 17 values "
	         "(exactly 16",
	         path);
	load_bad(yaml, "2:34", frag);

	write_tmp(path, sizeof(path), "bad.txt", "1\n2\n3 4\n");
	snprintf(yaml, sizeof(yaml), "preprocess: {dispersion: {table: %s}}\n", path);
	snprintf(frag, sizeof(frag), "%s:3: not a number (one number per line", path);
	load_bad(yaml, "1:34", frag);

	write_tmp(path, sizeof(path), "inf.txt", "1\ninf\n");
	snprintf(yaml, sizeof(yaml), "preprocess: {dispersion: {table: %s}}\n", path);
	snprintf(frag, sizeof(frag), "%s:2: not a finite number", path);
	load_bad(yaml, "1:34", frag);

	write_tmp(path, sizeof(path), "empty.txt", "# nothing\n");
	snprintf(yaml, sizeof(yaml), "preprocess: {dispersion: {table: %s}}\n", path);
	load_bad(yaml, "1:34", "has 0 values (exactly 2048");

	load_bad("preprocess: {dispersion: {table: /nonexistent/d.txt}}\n", "1:34",
	         "cannot open the table file /nonexistent/d.txt: No such file");

	/* not read without bound, not waited on (tests/fuzz/fuzz_cfg ran out of memory on
	 * /dev/zero): regular files of at most 16 MiB only */
	load_bad("preprocess: {dispersion: {table: /dev/zero}}\n", "1:34",
	         "the table file /dev/zero is not a regular file");
	write_tmp(path, sizeof(path), "fifo", "");
	assert_int_equal(unlink(path), 0);
	assert_int_equal(mkfifo(path, 0600), 0);
	snprintf(yaml, sizeof(yaml), "preprocess: {dispersion: {table: %s}}\n", path);
	snprintf(frag, sizeof(frag), "the table file %s is not a regular file", path);
	load_bad(yaml, "1:34", frag);
	assert_int_equal(unlink(path), 0);
	write_tmp(path, sizeof(path), "huge.txt", "1\n");
	assert_int_equal(truncate(path, (16 << 20) + 1), 0); /* sparse */
	snprintf(yaml, sizeof(yaml), "preprocess: {dispersion: {table: %s}}\n", path);
	snprintf(frag, sizeof(frag), "the table file %s is 16777217 bytes, larger than", path);
	load_bad(yaml, "1:34", frag);
	assert_int_equal(unlink(path), 0);
}

static void test_real_calibration_tables(void **state)
{
	char path[1024];
	struct vr_config c;
	char err[CFG_ERR_MAX];
	snprintf(path, sizeof(path), "%s/config/examples/oct-calibration-example.yaml",
	         vrtest_src_dir());
	int rc = cfg_load(&c, path, err, sizeof(err));
	if (rc)
		print_error("%s\n", err);
	assert_int_equal(rc, 0);
	assert_int_equal(c.preprocess.resample.table.len, 1024);
	assert_int_equal(c.preprocess.dispersion.table.len, 1024);
	assert_int_equal(c.preprocess.dispersion.kind, CFG_DISP_TABLE);
	/* the first k-linearization index is slightly negative: clamped later, fine here */
	assert_true(c.preprocess.resample.table.data[0] < 0 &&
	            c.preprocess.resample.table.data[0] > -0.1);
	assert_int_equal(c.source.type, CFG_SOURCE_REPLAY);
	assert_int_equal(c.geometry.sample_type, CFG_SAMPLE_F32);
	assert_non_null(strstr(c.source.replay.path, "/../../tests/data/"));
	assert_true(c.source.replay.path[0] == '/');
	assert_non_null(strstr(c.source_file, "oct-calibration-example.yaml"));
	cfg_free(&c);
}

/* ---- dump, copy, compare ------------------------------------------------------------------ */

static void round_trip(const struct vr_config *c)
{
	char *text = NULL, err[CFG_ERR_MAX];
	size_t len = 0;
	struct vr_config back;
	FILE *f = open_memstream(&text, &len);
	assert_non_null(f);
	assert_int_equal(cfg_dump(c, f), 0);
	assert_int_equal(fclose(f), 0);
	int rc = cfg_load_string(&back, text, "dump.yaml", err, sizeof(err));
	if (rc || !cfg_equal(c, &back))
		print_error("%s\n---\n%s\n", err, text);
	assert_int_equal(rc, 0);
	assert_true(cfg_equal(c, &back));
	cfg_free(&back);
	free(text);
}

static void test_dump_reads_back_equal(void **state)
{
	static const char *const examples[] = {"volrec-paper", "sd-oct-2048", "tiny",
	                                       "oct-calibration-example"};
	char path[1024], tab[256], yaml[2048], err[CFG_ERR_MAX];
	struct vr_config c;

	cfg_defaults(&c);
	round_trip(&c);
	for (size_t i = 0; i < 4; i++) {
		snprintf(path, sizeof(path), "%s/config/examples/%s.yaml", vrtest_src_dir(),
		         examples[i]);
		int rc = cfg_load(&c, path, err, sizeof(err));
		if (rc)
			print_error("%s\n", err);
		assert_int_equal(rc, 0);
		round_trip(&c);
		cfg_free(&c);
	}
	char *text = numbers(16, 100, 0.5);
	write_tmp(tab, sizeof(tab), "a \"quoted\" name: #1.txt", text);
	free(text);
	snprintf(yaml, sizeof(yaml),
	         "instance: \"007\"\n"
	         "source:\n  rate: 0.1\n  synth: {seed: 12345678901234, motion: {deg_per_s: "
	         "0.30000000000000004}}\n"
	         "  shim: {library: /lib/x.so, args: {board: 1, name: \"a: b\", list: [1, two, "
	         "\"3\"], deep: {x: ~, y: 'q'}}}\n"
	         "geometry: {samples_per_ascan: 16, ascans_per_bscan: 2, bscans_per_volume: 2, "
	         "stride: [2, 1], depth_range: [1, 7], bidirectional: true}\n"
	         "preprocess:\n  background: {mode: reference, reference: '%s'}\n"
	         "  resample: {method: linear, wavelength_nm: [1300.5, -0.125, 1e-7, -3e-12]}\n"
	         "  window: {type: gauss, param: 0.123456789}\n  dispersion: {coeffs: [1e-9, 7]}\n"
	         "  db_range: [-1.5, 99.25]\n"
	         "ipc: {pub: ['tcp://*:9999', 'ipc:///tmp/q.pub'], curve_secret_key: '%s', "
	         "curve_public_key: '%s'}\n",
	         tab, tab, tab);
	load_ok(&c, yaml);
	assert_string_equal(
	        c.source.shim.args_yaml,
	        "{board: 1, name: \"a: b\", list: [1, two, \"3\"], deep: {x: ~, y: 'q'}}");
	assert_string_equal(c.preprocess.background.reference.path, tab);
	round_trip(&c);

	struct vr_config d;
	assert_int_equal(cfg_copy(&d, &c), 0);
	assert_true(cfg_equal(&c, &d));
	assert_ptr_not_equal(d.preprocess.background.reference.data,
	                     c.preprocess.background.reference.data);
	assert_ptr_not_equal(d.source.shim.args_yaml, c.source.shim.args_yaml);
	d.preprocess.background.reference.data[3] += 1;
	assert_false(cfg_equal(&c, &d));
	cfg_free(&d);
	cfg_free(&c);
	cfg_free(NULL);
}

static void test_structural_change(void **state)
{
	static const struct {
		const char *yaml;
		bool structural;
	} cases[] = {
	        {"preprocess: {db_range: [10, 60]}\n", false},
	        {"preprocess: {window: {type: tukey, param: 0.25}}\n", false},
	        {"preprocess: {dispersion: {coeffs: [1, 2]}}\n", true}, /* none -> on: FFT plan */
	        {"reconstruct: {mode: cumulative, spatial_sigma: 2, temporal: exp, tau: 3, "
	         "combine: product}\n",
	         false},
	        {"reconstruct: {mode: none}\n", true}, /* stride 5: the output shrinks */
	        {"log: {level: debug}\n", false},
	        {"ipc: {status_interval_ms: 250}\n", false},
	        {"geometry: {samples_per_ascan: 1024}\n", true},
	        {"geometry: {depth_range: [0, 512]}\n", true},
	        {"geometry: {bidirectional: true}\n", true},
	        {"preprocess: {flip: {x: true}}\n", true},
	        {"preprocess: {zero_pad: 2}\n", true},
	        {"preprocess: {background: {mode: bscan_mean}}\n", false},
	        {"preprocess: {background: {mode: partial_median, threshold: 4}}\n", false},
	        {"output: {slots: 8}\n", true},
	        {"pipeline: {ring_bscans: 512}\n", true},
	        {"source: {type: replay, replay: {path: /dev/null}}\n", true},
	        {"source: {rate: 10}\n", true},
	        {"backend: cpu\n", true},
	        {"gpu: {streams: 2}\n", true},
	        {"cpu: {threads: 1}\n", true},
	        {"instance: other\n", true},
	        {"ipc: {pub: [\"ipc:///tmp/x.pub\"]}\n", true},
	        {"ipc: {hwm: 1000}\n", true},
	};
	struct vr_config a, b;
	cfg_defaults(&a);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char err[CFG_ERR_MAX];
		int rc = cfg_load_string(&b, cases[i].yaml, "t.yaml", err, sizeof(err));
		if (rc == -EINVAL && strstr(err, "/dev/null")) {
			/* /dev/null is not a regular file: build the case by hand */
			cfg_defaults(&b);
			b.source.type = CFG_SOURCE_REPLAY;
			rc = 0;
		}
		if (rc)
			print_error("%s: %s\n", cases[i].yaml, err);
		assert_int_equal(rc, 0);
		if (cfg_is_structural_change(&a, &b) != cases[i].structural)
			print_error("case %zu: %s", i, cases[i].yaml);
		assert_int_equal(cfg_is_structural_change(&a, &b), cases[i].structural);
		assert_int_equal(cfg_is_structural_change(&b, &a), cases[i].structural);
		cfg_free(&b);
	}
	assert_false(cfg_is_structural_change(&a, &a));

	/* mode none <-> noncumulative is live when stride 1 keeps the output size */
	struct vr_config c;
	load_ok(&b, "geometry: {stride: [1, 1]}\n");
	load_ok(&c, "geometry: {stride: [1, 1]}\nreconstruct: {mode: none}\n");
	assert_false(cfg_is_structural_change(&b, &c));
	cfg_free(&c);
	/* dispersion coeffs -> table: live; a different table content: live too */
	char path[256], yaml[512];
	char *text = numbers(2048, 0, 0.001);
	write_tmp(path, sizeof(path), "disp.txt", text);
	free(text);
	load_ok(&b, "preprocess: {dispersion: {coeffs: [1, 2]}}\n");
	snprintf(yaml, sizeof(yaml), "preprocess: {dispersion: {table: %s}}\n", path);
	load_ok(&c, yaml);
	assert_false(cfg_is_structural_change(&b, &c));
	cfg_free(&b);
	cfg_free(&c);
	/* a resample table with other values under the same name: structural */
	write_tmp(path, sizeof(path), "rs.txt",
	          "0\n1\n2\n3\n4\n5\n6\n7\n8\n9\n10\n11\n12\n13\n14\n15\n");
	snprintf(yaml, sizeof(yaml),
	         "geometry: {samples_per_ascan: 16, ascans_per_bscan: 2, bscans_per_volume: 2}\n"
	         "preprocess: {resample: {method: cubic, table: %s}}\n",
	         path);
	load_ok(&b, yaml);
	write_tmp(path, sizeof(path), "rs.txt",
	          "0\n1\n2\n3\n4\n5\n6\n7\n8\n9\n10\n11\n12\n13\n14\n14.5\n");
	load_ok(&c, yaml);
	assert_true(cfg_is_structural_change(&b, &c));
	cfg_free(&b);
	cfg_free(&c);
}

static void test_enum_names(void **state)
{
	assert_string_equal(cfg_backend_name(CFG_BACKEND_CUDA), "cuda");
	assert_string_equal(cfg_source_name(CFG_SOURCE_SHIM), "shim");
	assert_string_equal(cfg_sample_name(CFG_SAMPLE_F32), "f32");
	assert_string_equal(cfg_background_name(CFG_BG_BSCAN_MEDIAN), "bscan_median");
	assert_string_equal(cfg_background_name(CFG_BG_NONE), "none");
	assert_string_equal(cfg_resample_name(CFG_RS_SPLINE), "spline");
	assert_string_equal(cfg_window_name(CFG_WIN_TUKEY), "tukey");
	assert_string_equal(cfg_recon_mode_name(CFG_RECON_NONCUMULATIVE), "noncumulative");
	assert_string_equal(cfg_temporal_name(CFG_TEMPORAL_EXP), "exp");
	assert_string_equal(cfg_combine_name(CFG_COMBINE_PRODUCT), "product");
	assert_string_equal(cfg_replay_format_name(CFG_REPLAY_RAW), "raw");
	assert_string_equal(cfg_overflow_name(CFG_OVERFLOW_DROP_EPOCH), "drop_epoch");
	assert_string_equal(cfg_log_level_name(CFG_LOG_WARNING), "warning");
	assert_string_equal(cfg_window_name((enum cfg_window)99), "?");
}

static void test_load_reports_missing_file(void **state)
{
	struct vr_config c;
	char err[CFG_ERR_MAX];
	int rc = cfg_load(&c, "/nonexistent/volrecd.yaml", err, sizeof(err));
	assert_int_equal(rc, -ENOENT);
	assert_string_equal(err, "/nonexistent/volrecd.yaml: cannot open the configuration "
	                         "file: No such file or directory");
	cfg_free(&c);
	rc = cfg_load(&c, "/tmp", err, sizeof(err));
	assert_true(rc < 0);
	assert_non_null(strstr(err, "/tmp: "));
	cfg_free(&c);
}

static void test_relative_paths_resolve_against_the_file(void **state)
{
	char path[256], cfgpath[256];
	struct vr_config c;
	char err[CFG_ERR_MAX];
	char *text = numbers(2048, 1, 0);
	write_tmp(path, sizeof(path), "ref.txt", text);
	free(text);
	write_tmp(cfgpath, sizeof(cfgpath), "rel.yaml",
	          "preprocess: {background: {mode: reference, reference: ref.txt}}\n"
	          "ipc: {run_dir: run}\n");
	int rc = cfg_load(&c, cfgpath, err, sizeof(err));
	if (rc)
		print_error("%s\n", err);
	assert_int_equal(rc, 0);
	assert_string_equal(c.preprocess.background.reference.path, path);
	char *slash = strrchr(path, '/');
	snprintf(slash + 1, 8, "run");
	assert_string_equal(c.ipc.run_dir, path);
	cfg_free(&c);
}

/* ---- gpu.devices ------------------------------------------------------------------------- */

static void test_gpu_devices_default_to_gpu_device(void **state)
{
	struct vr_config c;
	int d[CFG_GPU_DEVICES_MAX];

	load_ok(&c, "gpu: {device: 3}\n");
	assert_int_equal(c.gpu.ndevices, 0); /* absent: the dump leaves it out */
	assert_int_equal(cfg_gpu_devices(&c, d), 1);
	assert_int_equal(d[0], 3);
	cfg_free(&c);
}

static void test_gpu_devices_keep_order_and_duplicates(void **state)
{
	struct vr_config c;
	int d[CFG_GPU_DEVICES_MAX];

	load_ok(&c, "gpu:\n  device: 5\n  devices: [2, 0, 0, 7, 1, 1, 255, 0]\n");
	assert_int_equal(cfg_gpu_devices(&c, d), 8);
	const int want[8] = {2, 0, 0, 7, 1, 1, 255, 0};
	for (int i = 0; i < 8; i++)
		assert_int_equal(d[i], want[i]);
	cfg_free(&c);
	load_ok(&c, "gpu: {devices: [0, 0]}\n");
	assert_int_equal(cfg_gpu_devices(&c, d), 2);
	assert_int_equal(d[0], 0);
	assert_int_equal(d[1], 0);
	cfg_free(&c);
}

static void test_gpu_devices_errors_are_precise(void **state)
{
	load_bad("gpu: {devices: []}\n", "1:16",
	         "gpu.devices: has 0 entries (1 to 8 integers [d0, d1, ...] of CUDA device "
	         "ordinals)");
	load_bad("gpu: {devices: [0, 1, 2, 3, 4, 5, 6, 7, 0]}\n", "1:16",
	         "gpu.devices: has 9 entries (1 to 8 integers");
	load_bad("gpu: {devices: [0, -1]}\n", "1:20",
	         "gpu.devices[1]: -1 is out of range (an integer from 0 to 255)");
	load_bad("gpu: {devices: [0, 256]}\n", "1:20", "gpu.devices[1]: 256 is out of range");
	load_bad("gpu: {devices: [0, 1.5]}\n", "1:20",
	         "gpu.devices[1]: expected an integer from 0 to 255, got '1.5'");
	load_bad("gpu: {devices: 0}\n", "1:16",
	         "gpu.devices: expected a sequence of 1 to 8 integers");
	load_bad("gpu: {devices: }\n", "1:16", "gpu.devices: expected a sequence");
}

static void test_gpu_devices_dump_reload_and_structural(void **state)
{
	struct vr_config a, b, c;
	char err[CFG_ERR_MAX] = "";
	char *text = NULL;
	size_t len = 0;

	load_ok(&a, "gpu: {devices: [0, 0, 1]}\n");
	FILE *f = open_memstream(&text, &len);
	assert_non_null(f);
	assert_int_equal(cfg_dump(&a, f), 0);
	assert_int_equal(fclose(f), 0);
	assert_non_null(strstr(text, "devices: [0, 0, 1]"));
	assert_int_equal(cfg_load_string(&b, text, "dump.yaml", err, sizeof(err)), 0);
	assert_true(cfg_equal(&a, &b));
	free(text);
	assert_int_equal(cfg_get_key(&a, "gpu.devices", &text, err, sizeof(err)), 0);
	assert_string_equal(text, "[0, 0, 1]");
	free(text);
	load_ok(&c, "gpu: {devices: [0, 0]}\n");
	assert_true(cfg_is_structural_change(&a, &c));
	const char *path = "gpu.devices", *value = "[0]";
	assert_int_equal(cfg_set_keys(&a, &path, &value, 1, err, sizeof(err)), -EPERM);
	assert_non_null(strstr(err, "gpu.devices"));
	assert_int_equal(cfg_override_keys(&a, &path, &value, 1, err, sizeof(err)), 0);
	assert_int_equal(a.gpu.ndevices, 1);
	cfg_free(&a);
	cfg_free(&b);
	cfg_free(&c);
	cfg_defaults(&a);
	assert_int_equal(cfg_get_key(&a, "gpu.devices", &text, err, sizeof(err)), 0);
	assert_string_equal(text, "~");
	free(text);
}

/* docs/algorithms.md §6: the voxel size from the field of view and the axial keys; unknown is 0,
 * never a guess. */
static void test_voxel_size_is_known_only_from_its_keys(void **state)
{
	struct vr_config c;
	double um[3];

	(void)state;
	cfg_defaults(&c);
	cfg_voxel_um(&c, um);
	assert_true(um[0] == 0 && um[1] == 0 && um[2] == 0); /* nothing given: all unknown */
	cfg_free(&c);
	/* 60 x 60 A-scans, stride [5, 5]: a 300 x 300 output over 3 x 1.5 mm */
	load_ok(&c, "geometry: {scan_size_um: [3000, 1500], axial_um_per_pixel: 3.1}\n");
	cfg_voxel_um(&c, um);
	assert_true(um[0] == 10 && um[1] == 5 && um[2] == 3.1);
	cfg_free(&c);
	/* mode none: the low-resolution 60 x 60 */
	load_ok(&c, "geometry: {scan_size_um: [3000, 0]}\nreconstruct: {mode: none}\n");
	cfg_voxel_um(&c, um);
	assert_true(um[0] == 50 && um[1] == 0 && um[2] == 0);
	cfg_free(&c);
	/* derived: 800..880 nm over K = 2048, n = 1.38: 840^2 / (2 1.38 80) nm; zero_pad 2 halves it */
	load_ok(&c, "geometry: {refractive_index: 1.38}\npreprocess: {resample: {method: linear, "
	            "wavelength_nm: [800, 0.0390815828041036, 0, 0]}}\n");
	cfg_voxel_um(&c, um);
	assert_true(fabs(um[2] - 840.0 * 840 / (2 * 1.38 * 80) / 1000) < 1e-9);
	cfg_free(&c);
	load_ok(&c, "geometry: {refractive_index: 1.38}\npreprocess: {zero_pad: 2, resample: "
	            "{method: linear, wavelength_nm: [880, -0.0390815828041036, 0, 0]}}\n");
	cfg_voxel_um(&c, um);
	assert_true(fabs(um[2] - 840.0 * 840 / (2 * 1.38 * 80) / 2000) < 1e-9);
	cfg_free(&c);
	/* the wavelengths without an index, or an index without wavelengths: unknown */
	load_ok(&c, "preprocess: {resample: {method: linear, wavelength_nm: [800, 0.04, 0, 0]}}\n");
	cfg_voxel_um(&c, um);
	assert_true(um[2] == 0);
	cfg_free(&c);
	load_ok(&c, "geometry: {refractive_index: 1.4}\n");
	cfg_voxel_um(&c, um);
	assert_true(um[2] == 0);
	cfg_free(&c);
	/* axial_um_per_pixel wins over the derivation */
	load_ok(&c, "geometry: {refractive_index: 1.38, axial_um_per_pixel: 2}\npreprocess: "
	            "{resample: {method: linear, wavelength_nm: [800, 0.04, 0, 0]}}\n");
	cfg_voxel_um(&c, um);
	assert_true(um[2] == 2);
	cfg_free(&c);
	load_bad("geometry: {refractive_index: 0.5}\n", "1:30",
	         "geometry.refractive_index: 0.5 is below 1 (0: unknown");
	load_bad("geometry: {scan_size_um: [-1, 3]}\n", "1:27", "geometry.scan_size_um[0]");
	load_bad("geometry: {scan_size_um: 3000}\n", "1:26", "geometry.scan_size_um");
	load_bad("geometry: {axial_um_per_pixel: -2}\n", "1:32", "geometry.axial_um_per_pixel");
}

/* cfg_check fails on c with a message that starts with the key and contains fragment, and
 * leaves c as it was. */
static void check_bad(struct vr_config *c, const char *key, const char *fragment)
{
	char err[CFG_ERR_MAX] = "";
	struct vr_config before;
	int rc;

	cfg_defaults(&before);
	assert_int_equal(cfg_copy(&before, c), 0);
	rc = cfg_check(c, err, sizeof(err));
	if (rc >= 0 || strncmp(err, key, strlen(key)) || !strstr(err, fragment))
		print_error("expected: %s...%s\ngot (rc %d): %s\n", key, fragment, rc, err);
	assert_true(rc < 0);
	assert_memory_equal(err, key, strlen(key));
	assert_non_null(strstr(err, fragment));
	assert_true(cfg_equal(c, &before));
	cfg_free(&before);
}

static void test_check_takes_the_schema_to_configurations_built_in_code(void **state)
{
	struct vr_config c;
	char err[CFG_ERR_MAX] = "";

	cfg_defaults(&c);
	assert_int_equal(cfg_check(&c, err, sizeof(err)), 0);
	c.preprocess.zero_pad = 3;
	check_bad(&c, "preprocess.zero_pad: ", "(1, 2 or 4)");
	cfg_defaults(&c);
	c.geometry.stride[0] = 0;
	check_bad(&c, "geometry.stride[0]: ", "0 is out of range");
	cfg_defaults(&c);
	c.gpu.streams = 0;
	check_bad(&c, "gpu.streams: ", "0 is out of range");
	cfg_defaults(&c);
	c.preprocess.db_range[0] = NAN;
	check_bad(&c, "preprocess.db_range", "");
	/* the cross-field rules too */
	cfg_defaults(&c);
	c.geometry.depth_range[0] = 10;
	c.geometry.depth_range[1] = 5;
	check_bad(&c, "geometry.depth_range: ", "[10, 5] is empty");
	cfg_defaults(&c);
	c.geometry.sample_type = CFG_SAMPLE_F32;
	c.geometry.bit_shift = 1;
	check_bad(&c, "geometry.bit_shift: ", "with sample_type f32");
}

/* A table set in code is checked as one read from its file: its length and finite values. */
static void test_check_takes_tables_set_in_code(void **state)
{
	struct vr_config c;
	char err[CFG_ERR_MAX] = "";
	const uint32_t K = 64;

	cfg_defaults(&c);
	c.geometry.samples_per_ascan = K;
	c.geometry.depth_range[1] = K / 2;
	c.preprocess.dispersion.kind = CFG_DISP_TABLE;
	snprintf(c.preprocess.dispersion.table.path, CFG_PATH_MAX, "phase.txt");
	c.preprocess.dispersion.table.data = calloc(K, sizeof(double));
	assert_non_null(c.preprocess.dispersion.table.data);
	c.preprocess.dispersion.table.len = K - 1;
	check_bad(&c, "preprocess.dispersion.table: ", "the table phase.txt has 63 values");
	c.preprocess.dispersion.table.len = K;
	if (cfg_check_backend(&c, err, sizeof(err)))
		print_error("unexpected error: %s\n", err);
	assert_int_equal(cfg_check_backend(&c, err, sizeof(err)), 0);
	c.preprocess.dispersion.table.data[5] = NAN;
	check_bad(&c, "preprocess.dispersion.table: ",
	          "value 6 of the table phase.txt is not a finite number");
	c.preprocess.dispersion.table.data[5] = INFINITY;
	assert_int_equal(cfg_check_backend(&c, err, sizeof(err)), -ERANGE);
	cfg_free(&c);
}

/* Wavelengths so close that 2 pi / lambda cannot tell them apart are refused: the resampling
 * inverts the wavenumber. */
static void test_wavelengths_need_distinct_wavenumbers(void **state)
{
	char err[CFG_ERR_MAX] = "";

	assert_int_equal(
	        cfg_wavelength_check((const double[4]){800, 0.05, 0, 0}, 64, err, sizeof(err)), 0);
	/* one unit in the last place a pixel: 1000 nm + i ulp, pixels 5 and 6 alike in 2 pi / l */
	assert_int_equal(
	        cfg_wavelength_check((const double[4]){1000, 0x1p-43, 0, 0}, 64, err, sizeof(err)),
	        -EINVAL);
	assert_non_null(strstr(err, "the same wavenumber 2*pi/lambda at pixels 5 and 6"));
}

/* cfg_check_backend leaves the acquisition's side (source, pipeline, the ring) out and checks
 * everything else as cfg_check does. */
static void test_check_backend_leaves_the_acquisition_out(void **state)
{
	struct vr_config c;
	char err[CFG_ERR_MAX] = "";

	(void)state;
	cfg_defaults(&c);
	c.pipeline.ring_bscans = c.geometry.bscans_per_volume; /* one epoch: offline processing */
	assert_int_equal(cfg_check(&c, err, sizeof(err)), -ERANGE);
	assert_non_null(strstr(err, "pipeline.ring_bscans: "));
	if (cfg_check_backend(&c, err, sizeof(err)))
		print_error("unexpected error: %s\n", err);
	assert_int_equal(cfg_check_backend(&c, err, sizeof(err)), 0);
	c.reconstruct.spatial_sigma = 0;
	assert_int_equal(cfg_check_backend(&c, err, sizeof(err)), -ERANGE);
	assert_non_null(strstr(err, "reconstruct.spatial_sigma: "));
	cfg_defaults(&c);
	c.geometry.depth_range[1] = cfg_fft_len(&c) / 2 + 1;
	assert_true(cfg_check_backend(&c, err, sizeof(err)) < 0);
	assert_non_null(strstr(err, "geometry.depth_range[1]: "));
}

static void test_check_accepts_what_a_file_loads(void **state)
{
	struct vr_config c;
	char err[CFG_ERR_MAX] = "";

	load_ok(&c, "geometry: {samples_per_ascan: 1000, sample_type: u12p, bit_shift: 4, "
	            "ascans_per_bscan: 10, stride: [3, 2], depth_range: [0, 500]}\n"
	            "preprocess: {zero_pad: 2, window: {type: tukey}, db_range: [20.5, 90.25], "
	            "dispersion: {coeffs: [1.5, -0.25]}}\n"
	            "reconstruct: {mode: adaptive, tau: 2.5}\n");
	if (cfg_check(&c, err, sizeof(err)))
		print_error("unexpected error: %s\n", err);
	assert_int_equal(cfg_check(&c, err, sizeof(err)), 0);
	cfg_free(&c);
}

VR_TEST_GROUP(cfg)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_defaults_are_the_documented_ones),
	        cmocka_unit_test(test_voxel_size_is_known_only_from_its_keys),
	        cmocka_unit_test(test_empty_document_means_defaults),
	        cmocka_unit_test(test_depth_range_default_follows_k_and_zero_pad),
	        cmocka_unit_test(test_window_param_default_depends_on_type),
	        cmocka_unit_test(test_values_are_parsed),
	        cmocka_unit_test(test_integer_ranges_are_inclusive),
	        cmocka_unit_test(test_float_ranges),
	        cmocka_unit_test(test_yaml_nesting_is_bounded_and_tags_refused),
	        cmocka_unit_test(test_types_are_strict),
	        cmocka_unit_test(test_enums_list_the_allowed_values),
	        cmocka_unit_test(test_unknown_and_duplicate_keys),
	        cmocka_unit_test(test_geometry_consistency),
	        cmocka_unit_test(test_sizes_that_overflow_are_rejected),
	        cmocka_unit_test(test_resample_positions),
	        cmocka_unit_test(test_mutually_exclusive_and_required),
	        cmocka_unit_test(test_instance_and_endpoints),
	        cmocka_unit_test(test_table_loads_with_comments_and_blank_lines),
	        cmocka_unit_test(test_table_errors_name_file_and_line),
	        cmocka_unit_test(test_set_refuses_keys_that_name_files),
	        cmocka_unit_test(test_render_cost_is_capped),
	        cmocka_unit_test(test_set_window_type_alone_brings_its_parameter),
	        cmocka_unit_test(test_real_calibration_tables),
	        cmocka_unit_test(test_dump_reads_back_equal),
	        cmocka_unit_test(test_structural_change),
	        cmocka_unit_test(test_enum_names),
	        cmocka_unit_test(test_load_reports_missing_file),
	        cmocka_unit_test(test_relative_paths_resolve_against_the_file),
	        cmocka_unit_test(test_gpu_devices_default_to_gpu_device),
	        cmocka_unit_test(test_gpu_devices_keep_order_and_duplicates),
	        cmocka_unit_test(test_gpu_devices_errors_are_precise),
	        cmocka_unit_test(test_gpu_devices_dump_reload_and_structural),
	        cmocka_unit_test(test_check_takes_the_schema_to_configurations_built_in_code),
	        cmocka_unit_test(test_check_accepts_what_a_file_loads),
	        cmocka_unit_test(test_check_backend_leaves_the_acquisition_out),
	        cmocka_unit_test(test_check_takes_tables_set_in_code),
	        cmocka_unit_test(test_wavelengths_need_distinct_wavenumbers),
	};
	return cmocka_run_group_tests_name("cfg", tests, NULL, NULL);
}
