/* SPDX-License-Identifier: MIT */
/*
 * The `shim` source: check the file source.shim.library names (an ELF shared object for this
 * machine, whole), dlopen it, check its volrec_shim_entry() table (ABI version, size, every
 * function present), open it with source.shim.args and configure it. The shim's table is
 * copied into the source (struct_size bytes of it: an older, shorter table gets NULL for the
 * optional zero-copy calls). src_shim_check() does the loading in a child for --check.
 */
#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sources/internal.h"

/* The ELF machine and class of this build: what a shim must be to load here. */
#if defined(__x86_64__)
#define HOST_MACHINE EM_X86_64
#elif defined(__aarch64__)
#define HOST_MACHINE EM_AARCH64
#elif defined(__i386__)
#define HOST_MACHINE EM_386
#elif defined(__arm__)
#define HOST_MACHINE EM_ARM
#elif defined(__riscv)
#define HOST_MACHINE EM_RISCV
#elif defined(__powerpc64__)
#define HOST_MACHINE EM_PPC64
#elif defined(__s390x__)
#define HOST_MACHINE EM_S390
#endif
#if UINTPTR_MAX > 0xffffffffu
#define HOST_CLASS ELFCLASS64
typedef Elf64_Ehdr ehdr_t;
typedef Elf64_Phdr phdr_t;
#else
#define HOST_CLASS ELFCLASS32
typedef Elf32_Ehdr ehdr_t;
typedef Elf32_Phdr phdr_t;
#endif
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define HOST_DATA ELFDATA2LSB
#else
#define HOST_DATA ELFDATA2MSB
#endif

#define PHDRS_MAX 4096u /* most program headers accepted */

static const char *class_name(unsigned c)
{
	return c == ELFCLASS64 ? "64-bit" : c == ELFCLASS32 ? "32-bit" : "unknown class";
}

/* The ELF header eh of a file of size bytes: a shared object for this machine whose program and
 * section headers lie inside the file. */
static int check_ehdr(const char *path, const ehdr_t *eh, uint64_t size, char *err, size_t errlen)
{
	if (eh->e_type != ET_DYN)
		return vr_err(err, errlen, -ENOEXEC,
		              "shim %s: ELF type %u is not a shared object (ET_DYN, %u)", path,
		              (unsigned)eh->e_type, (unsigned)ET_DYN);
#ifdef HOST_MACHINE
	if (eh->e_machine != HOST_MACHINE)
		return vr_err(err, errlen, -ENOEXEC,
		              "shim %s: built for ELF machine %u, this volrec runs on machine %u "
		              "(another architecture)",
		              path, (unsigned)eh->e_machine, (unsigned)HOST_MACHINE);
#endif
	if (eh->e_phentsize != sizeof(phdr_t) || eh->e_phnum == 0 || eh->e_phnum > PHDRS_MAX)
		return vr_err(err, errlen, -ENOEXEC,
		              "shim %s: %u program headers of %u bytes (1..%u of %zu expected)",
		              path, (unsigned)eh->e_phnum, (unsigned)eh->e_phentsize, PHDRS_MAX,
		              sizeof(phdr_t));
	if (eh->e_phoff > size || (uint64_t)eh->e_phnum * sizeof(phdr_t) > size - eh->e_phoff)
		return vr_err(
		        err, errlen, -ENOEXEC,
		        "shim %s: truncated: program headers at %llu..%llu, the file is %llu "
		        "bytes",
		        path, (unsigned long long)eh->e_phoff,
		        (unsigned long long)(eh->e_phoff + (uint64_t)eh->e_phnum * sizeof(phdr_t)),
		        (unsigned long long)size);
	if (eh->e_shoff &&
	    (eh->e_shoff > size || (uint64_t)eh->e_shnum * eh->e_shentsize > size - eh->e_shoff))
		return vr_err(
		        err, errlen, -ENOEXEC,
		        "shim %s: truncated: section headers at %llu..%llu, the file is %llu "
		        "bytes",
		        path, (unsigned long long)eh->e_shoff,
		        (unsigned long long)(eh->e_shoff + (uint64_t)eh->e_shnum * eh->e_shentsize),
		        (unsigned long long)size);
	return 0;
}

/* The segments the loader maps (PT_LOAD, PT_DYNAMIC) lie inside the file of size bytes: a part
 * past its end would be a SIGBUS. */
static int check_segments(int fd, const char *path, const ehdr_t *eh, uint64_t size, char *err,
                          size_t errlen)
{
	phdr_t *ph = calloc(eh->e_phnum, sizeof(*ph));
	int rc;

	if (!ph)
		return vr_err(err, errlen, -ENOMEM, "shim %s: out of memory", path);
	rc = vr_pread_full(fd, ph, eh->e_phnum * sizeof(*ph), eh->e_phoff);
	if (rc) {
		rc = vr_err_errno(err, errlen, rc, "shim %s: reading the program headers", path);
		goto out;
	}
	for (unsigned i = 0; i < eh->e_phnum; i++) {
		if (ph[i].p_type != PT_LOAD && ph[i].p_type != PT_DYNAMIC)
			continue;
		if (ph[i].p_offset > size || ph[i].p_filesz > size - ph[i].p_offset) {
			rc = vr_err(
			        err, errlen, -ENOEXEC,
			        "shim %s: truncated: segment %u (%s) needs bytes %llu..%llu, the "
			        "file is %llu bytes",
			        path, i, ph[i].p_type == PT_LOAD ? "PT_LOAD" : "PT_DYNAMIC",
			        (unsigned long long)ph[i].p_offset,
			        (unsigned long long)(ph[i].p_offset + ph[i].p_filesz),
			        (unsigned long long)size);
			goto out;
		}
	}
	rc = 0;
out:
	free(ph);
	return rc;
}

/* The file checks of src_shim_check (messages name path). */
static int check_file(const char *path, char *err, size_t errlen)
{
	unsigned char ident[EI_NIDENT];
	struct stat st;
	ehdr_t eh;
	uint64_t size;
	int fd, rc;

	/* O_NONBLOCK: a FIFO named .so must not hang the check */
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0)
		return vr_err_errno(err, errlen, -errno, "shim %s: cannot open", path);
	if (fstat(fd, &st) < 0) {
		rc = vr_err_errno(err, errlen, -errno, "shim %s: fstat", path);
		goto out;
	}
	if (!S_ISREG(st.st_mode)) {
		rc = vr_err(err, errlen, -EINVAL, "shim %s: not a regular file", path);
		goto out;
	}
	size = (uint64_t)st.st_size;
	rc = size >= EI_NIDENT ? vr_pread_full(fd, ident, EI_NIDENT, 0) : -ENODATA;
	if (rc == -ENODATA || (rc == 0 && memcmp(ident, ELFMAG, SELFMAG) != 0)) {
		rc = vr_err(err, errlen, -ENOEXEC,
		            "shim %s: not an ELF shared object (%llu bytes, no ELF magic)", path,
		            (unsigned long long)size);
		goto out;
	}
	if (rc) {
		rc = vr_err_errno(err, errlen, rc, "shim %s: reading the ELF header", path);
		goto out;
	}
	if (ident[EI_CLASS] != HOST_CLASS || ident[EI_DATA] != HOST_DATA) {
		rc = vr_err(err, errlen, -ENOEXEC,
		            "shim %s: a %s %s-endian ELF file, this volrec is %s %s-endian", path,
		            class_name(ident[EI_CLASS]),
		            ident[EI_DATA] == ELFDATA2LSB ? "little" : "big",
		            class_name(HOST_CLASS), HOST_DATA == ELFDATA2LSB ? "little" : "big");
		goto out;
	}
	if (size < sizeof(eh)) {
		rc = vr_err(err, errlen, -ENOEXEC,
		            "shim %s: truncated: %llu bytes, the ELF header alone is %zu", path,
		            (unsigned long long)size, sizeof(eh));
		goto out;
	}
	rc = vr_pread_full(fd, &eh, sizeof(eh), 0);
	if (rc) {
		rc = vr_err_errno(err, errlen, rc, "shim %s: reading the ELF header", path);
		goto out;
	}
	rc = check_ehdr(path, &eh, size, err, errlen);
	if (!rc)
		rc = check_segments(fd, path, &eh, size, err, errlen);
out:
	close(fd);
	return rc;
}

/* Name of the first NULL function pointer of a table, or NULL when all are set. */
static const char *missing_function(const struct volrec_shim_ops *t)
{
	/* the name returned is the member's own */
#define REQUIRED(f)                                                                                \
	do {                                                                                       \
		if (!t->f)                                                                         \
			return #f;                                                                 \
	} while (0)
	REQUIRED(open);
	REQUIRED(configure);
	REQUIRED(set_scan_offset);
	REQUIRED(start);
	REQUIRED(acquire);
	REQUIRED(stop);
	REQUIRED(close);
	REQUIRED(strerror);
#undef REQUIRED
	return NULL;
}

#ifndef VOLREC_SHIMDIR /* set by sources/module.mk from SHIMDIR; builds without it (fuzzing) */
#define VOLREC_SHIMDIR "/usr/local/lib/volrec"
#endif

/* source.shim.library: a path, or the short name of a shipped shim (`genicam`, `synth`):
 * NAME-shim.so in VOLREC_SHIM_DIR, else in the installed shim directory. */
static void shim_path(const char *lib, char *out, size_t n)
{
	const char *dir = getenv("VOLREC_SHIM_DIR");

	if (strchr(lib, '/') || !lib[0])
		snprintf(out, n, "%s", lib);
	else
		snprintf(out, n, "%s/%s-shim.so", dir && dir[0] ? dir : VOLREC_SHIMDIR, lib);
}

/* dlopen lib, find its table and check it: *table is the copy (zero past its struct_size). */
static int load(const char *lib, void **dl_out, struct volrec_shim_ops *table, char *err,
                size_t errlen)
{
	const struct volrec_shim_ops *(*entry)(void);
	const struct volrec_shim_ops *t;
	const char *miss;
	void *dl;
	int rc, n;

	dlerror();
	/* never unloaded (RTLD_NODELETE): a thread a shim started and did not end in close()
	 * would run on in unmapped code; a reopen finds the library as it was */
	dl = dlopen(lib, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
	if (!dl)
		return vr_err(err, errlen, -ENOENT, "shim %s: dlopen failed: %s", lib, dlerror());
	*(void **)&entry = dlsym(dl, VOLREC_SHIM_ENTRY);
	if (!entry) {
		const char *e = dlerror();
		rc = vr_err(err, errlen, -ENOSYS, "shim %s: no symbol %s: %s", lib,
		            VOLREC_SHIM_ENTRY, e ? e : "symbol is NULL");
		goto out_dlclose;
	}
	t = entry();
	if (!t) {
		rc = vr_err(err, errlen, -EINVAL, "shim %s: %s() returned NULL", lib,
		            VOLREC_SHIM_ENTRY);
		goto out_dlclose;
	}
	if (t->abi_version != VOLREC_SHIM_ABI_VERSION) {
		rc = vr_err(err, errlen, -EPROTONOSUPPORT,
		            "shim %s: ABI version %u, this volrec speaks version %u (rebuild the "
		            "shim against this volrec/shim.h)",
		            lib, t->abi_version, VOLREC_SHIM_ABI_VERSION);
		goto out_dlclose;
	}
	if (t->struct_size < VOLREC_SHIM_OPS_SIZE_BASE) {
		rc = vr_err(
		        err, errlen, -EPROTONOSUPPORT,
		        "shim %s: function table is %u bytes, ABI version %u needs at least %zu",
		        lib, t->struct_size, VOLREC_SHIM_ABI_VERSION,
		        (size_t)VOLREC_SHIM_OPS_SIZE_BASE);
		goto out_dlclose;
	}
	/* read no further than the shim's struct_size: fields a shorter (older) table lacks
	 * are NULL; a longer (newer) one's extra fields are ignored */
	memset(table, 0, sizeof(*table));
	memcpy(table, t, t->struct_size < sizeof(*table) ? t->struct_size : sizeof(*table));
	miss = missing_function(table);
	if (miss) {
		rc = vr_err(err, errlen, -EINVAL, "shim %s: function table has no %s() (NULL)", lib,
		            miss);
		goto out_dlclose;
	}
	n = !!table->ref_regions + !!table->acquire_ref + !!table->release_ref;
	if (n != 0 && n != 3) {
		rc = vr_err(err, errlen, -EINVAL,
		            "shim %s: the zero-copy calls come together, but ref_regions is %s, "
		            "acquire_ref %s, release_ref %s",
		            lib, table->ref_regions ? "set" : "NULL",
		            table->acquire_ref ? "set" : "NULL",
		            table->release_ref ? "set" : "NULL");
		goto out_dlclose;
	}
	*dl_out = dl;
	return 0;

out_dlclose:
	dlclose(dl);
	return rc;
}

/*
 * A shim's message for code (handle may be NULL after a failed open), after "PATH: CALL failed":
 * the shim's own text names the shim (docs/shim.md), so it follows as it is; without one, the
 * word "shim" before the path says what the file is, and strerror's text follows.
 */
static void shim_call_err(const struct volrec_shim_ops *t, void *h, int code, const char *lib,
                          const char *call, char *err, size_t errlen)
{
	const char *s = code < 0 ? t->strerror(h, code) : NULL;

	if (code > 0)
		vr_err(err, errlen, -EPROTO,
		       "shim %s: %s returned %d: positive values are not allowed (0 or a negative "
		       "errno)",
		       lib, call, code);
	else if (s)
		vr_err(err, errlen, code, "%s: %s failed: %s (%d)", lib, call, s, code);
	else
		vr_err(err, errlen, code, "shim %s: %s failed: %s (%d)", lib, call, strerror(-code),
		       code);
}

int src_shim_open(const struct vr_config *cfg, unsigned flags, struct src_source *src, char *err,
                  size_t errlen)
{
	char path[CFG_PATH_MAX + 64];
	const char *lib = path;
	struct volrec_shim_ops table;
	struct volrec_shim_geometry g;
	struct volrec_shim_info info;
	void *dl, *h = NULL;
	int rc;

	shim_path(cfg->source.shim.library, path, sizeof(path));
	if (!lib[0])
		return vr_err(err, errlen, -EINVAL, "source.shim.library is not set");
	rc = check_file(lib, err, errlen);
	if (rc)
		return rc;
	rc = load(lib, &dl, &table, err, errlen);
	if (rc)
		return rc;
	memset(&info, 0, sizeof(info));
	rc = table.open(cfg->source.shim.args_yaml ? cfg->source.shim.args_yaml : "{}", &info, &h);
	if (rc) {
		/* no handle: the shim's strerror gets NULL, as the ABI allows after a failure */
		shim_call_err(&table, h, rc, lib, "open(args)", err, errlen);
		if (h)
			table.close(h);
		rc = rc < 0 ? rc : -EPROTO;
		goto out_dlclose;
	}
	src_geometry_from_config(&g, cfg, flags);
	if (g.repeats > 1 && !(info.flags & VOLREC_SHIM_INFO_REPEATS)) {
		rc = vr_err(err, errlen, -EINVAL,
		            "shim %s: geometry.repeats is %u, but the shim does not deliver "
		            "repeated B-scans (its info.flags 0x%x lack VOLREC_SHIM_INFO_REPEATS, "
		            "docs/shim.md): set geometry.repeats: 1 or use a shim that repeats",
		            lib, g.repeats, info.flags);
		goto out_close;
	}
	rc = table.configure(h, &g);
	if (rc) {
		char call[200];

		snprintf(call, sizeof(call),
		         "configure(K %u, nx %u, ny %u, %s, stride [%u, %u]%s, rate %g)",
		         g.samples_per_ascan, g.ascans_per_bscan, g.bscans_per_volume,
		         src_sample_name(g.sample_type), g.stride_x, g.stride_y,
		         g.bidirectional ? ", bidirectional" : "", g.rate);
		shim_call_err(&table, h, rc, lib, call, err, errlen);
		rc = rc < 0 ? rc : -EPROTO;
		goto out_close;
	}
	src->impl = table;
	src->handle = h;
	src->dl = dl;
	src->kind = "shim";
	src->info = info;
	src->epochs = 0;
	return 0;

out_close:
	table.close(h);
out_dlclose:
	dlclose(dl);
	return rc;
}

int src_shim_check(const char *library, bool in_child, char *err, size_t errlen)
{
	char msg[CFG_ERR_MAX] = "", path[CFG_PATH_MAX + 64];
	struct volrec_shim_ops table;
	int fds[2], status, rc;
	ssize_t n = 0;
	pid_t pid;
	void *dl;

	shim_path(library, path, sizeof(path));
	rc = check_file(path, err, errlen);
	if (rc || !in_child)
		return rc;
	if (pipe2(fds, O_CLOEXEC) < 0)
		return vr_err_errno(err, errlen, -errno, "shim %s: pipe", path);
	fflush(NULL);
	pid = fork();
	if (pid < 0) {
		rc = vr_err_errno(err, errlen, -errno, "shim %s: fork", path);
		close(fds[0]);
		close(fds[1]);
		return rc;
	}
	if (pid == 0) {
		/* the child: load, report the message (if any) through the pipe, exit 0 or the
		 * errno; a crash while loading kills it with the signal, whatever the parent's
		 * handlers were */
		static const int fatal[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT};
		for (size_t i = 0; i < VR_ARRAY_SIZE(fatal); i++)
			signal(fatal[i], SIG_DFL);
		close(fds[0]);
		rc = load(path, &dl, &table, msg, sizeof(msg));
		if (rc && write(fds[1], msg, strlen(msg)) < 0)
			_exit(2);
		_exit(rc == 0 ? 0 : -rc < 256 ? -rc : 255);
	}
	close(fds[1]);
	for (size_t got = 0; got < sizeof(msg) - 1; got += (size_t)n) {
		n = read(fds[0], msg + got, sizeof(msg) - 1 - got);
		if (n < 0 && errno == EINTR) {
			n = 0;
			continue;
		}
		if (n <= 0)
			break;
		msg[got + (size_t)n] = 0;
	}
	close(fds[0]);
	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR)
			return vr_err_errno(err, errlen, -errno, "shim %s: waitpid", path);
	if (WIFSIGNALED(status))
		return vr_err(err, errlen, -ENOEXEC,
		              "shim %s: loading it killed the loading process with signal %d (%s)",
		              path, WTERMSIG(status), strsignal(WTERMSIG(status)));
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
		return vr_err(err, errlen, WIFEXITED(status) ? -WEXITSTATUS(status) : -EINVAL, "%s",
		              msg[0] ? msg : "shim: the loading process failed without a message");
	return 0;
}
