#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Package CI, as root on a Debian 12 machine with the build dependencies (make deps): build the
# .debs without CUDA, lint them, install them, run the installed daemon by hand as user volrec,
# read a volume with the installed Python client and a pkg-config-built C client, then purge and
# show what is left. Usage: tests/packaging/ci-packages.sh [--build-only] [WORKDIR]
# (default: a temp dir); --build-only stops after building and linting the .debs in WORKDIR
# (tests/packaging/systemd-container.sh installs them in a booted container).
set -euo pipefail

SRC=$(cd "$(dirname "$0")/../.." && pwd)
BUILD_ONLY=0
if [ "${1:-}" = --build-only ]; then
	BUILD_ONLY=1
	shift
fi
WORK=${1:-$(mktemp -d /tmp/volrec-pkg.XXXXXX)}
PKGS=(volrecd libvolrec0 libvolrec-dev python3-volrec)
INSTANCE=ci-pkg-$$
DAEMON_PID=

section() { printf '\n==== %s ====\n' "$*"; }
fail() {
	printf 'ci-packages: FAILED: %s\n' "$*" >&2
	exit 1
}
cleanup() {
	if [ -n "$DAEMON_PID" ] && kill -0 "$DAEMON_PID" 2>/dev/null; then
		kill -TERM "$DAEMON_PID" 2>/dev/null || true
		wait "$DAEMON_PID" 2>/dev/null || true
	fi
}
trap cleanup EXIT

for tool in dpkg-buildpackage dh lintian fakeroot apt-get runuser setpriv pkg-config cc; do
	command -v "$tool" >/dev/null || fail "$tool is missing: run 'make deps' first"
done
[ "$BUILD_ONLY" = 1 ] || [ "$(id -u)" = 0 ] || fail "run as root (it installs and purges packages)"
for p in "${PKGS[@]}"; do
	[ "$BUILD_ONLY" = 0 ] || break
	if dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed'; then
		fail "$p is already installed: this test purges it; remove it first"
	fi
done
echo "source: $SRC"
echo "work:   $WORK"

section "copy the source tree"
# The tracked and the untracked-but-not-ignored files: what a clean checkout would hold.
mkdir -p "$WORK/volrec"
(cd "$SRC" && git ls-files -z --cached --others --exclude-standard |
	while IFS= read -r -d '' f; do [ -e "$f" ] && printf '%s\0' "$f"; done |
	tar --null -T - -cf -) | tar -xf - -C "$WORK/volrec"
echo "$(find "$WORK/volrec" -type f | wc -l) files"

section "dpkg-buildpackage -us -uc -b (CUDA off)"
start=$SECONDS
if ! (cd "$WORK/volrec" && DEB_BUILD_OPTIONS="parallel=$(nproc) ${DEB_BUILD_OPTIONS:-}" \
	dpkg-buildpackage -us -uc -b) >"$WORK/build.log" 2>&1; then
	tail -60 "$WORK/build.log"
	fail "dpkg-buildpackage (full log: $WORK/build.log)"
fi
echo "built in $((SECONDS - start)) s:"
ls -l "$WORK"/*.deb
for deb in "$WORK"/*.deb; do
	echo "--- $(basename "$deb")"
	dpkg-deb -c "$deb" | awk '{print $6 ($7 ? " " $7 " " $8 : "")}'
done

section "lintian"
lintian --fail-on error --tag-display-limit 0 "$WORK"/*.changes | tee "$WORK/lintian.txt" ||
	fail "lintian reported errors"
echo "lintian: $(grep -c '^E:' "$WORK/lintian.txt" || true) errors, $(grep -c '^W:' "$WORK/lintian.txt" || true) warnings"
if [ "$BUILD_ONLY" = 1 ]; then
	section "packages built in $WORK (--build-only)"
	exit 0
fi

section "apt-get install ./*.deb"
DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$WORK"/*.deb |
	tail -5
getent passwd volrec || fail "the system user volrec was not created"
getent group volrec || fail "the group volrec was not created"
ls -ld /run/volrec

section "installed files"
for p in "${PKGS[@]}"; do dpkg -L "$p"; done | sort -u >"$WORK/installed.txt"
grep -v '^/\.$' "$WORK/installed.txt" | while read -r f; do [ -d "$f" ] || echo "$f"; done |
	tee "$WORK/installed-files.txt"

section "systemd-analyze verify (installed unit)"
unit=$(grep '/volrecd.service$' "$WORK/installed-files.txt")
systemd-analyze verify "$unit"
systemd-analyze security --offline=yes "$unit" | tail -1

section "volrecd --check -c /etc/volrec/volrecd.yaml"
/usr/sbin/volrecd --check -c /etc/volrec/volrecd.yaml >"$WORK/check.txt"
head -5 "$WORK/check.txt"

section "installed volrecd as user volrec"
run="$WORK/run"
chmod 0755 "$WORK" # user volrec reaches its run_dir and the client below
install -d -o volrec -g volrec -m 0750 "$run"
sed -e "s|^instance: .*|instance: $INSTANCE|" -e "s|run_dir: /run/volrec|run_dir: $run|" \
	/etc/volrec/volrecd.yaml >"$run/volrecd.yaml"
chmod 0644 "$run/volrecd.yaml"
grep -q "instance: $INSTANCE" "$run/volrecd.yaml" || fail "could not set the instance"
# setpriv execs the daemon itself (runuser would stay in between and turn SIGTERM into 143)
setpriv --reuid=volrec --regid=volrec --init-groups /usr/sbin/volrecd -c "$run/volrecd.yaml" >"$WORK/volrecd.log" 2>&1 &
DAEMON_PID=$!
for _ in $(seq 1 100); do
	[ -e "/dev/shm/volrec.$INSTANCE" ] && break
	kill -0 "$DAEMON_PID" 2>/dev/null || { cat "$WORK/volrecd.log"; fail "volrecd exited early"; }
	sleep 0.1
done
[ -e "/dev/shm/volrec.$INSTANCE" ] || { cat "$WORK/volrecd.log"; fail "no shared memory after 10 s"; }
ls -l /dev/shm/volrec."$INSTANCE"*
stat -c '%U:%G %a %n' /dev/shm/volrec."$INSTANCE"*

section "one volume with the installed Python client (as user volrec)"
cd /
runuser -u volrec -- env -u PYTHONPATH VOLREC_RUN_DIR="$run" /usr/bin/python3 -c "
import sys, volrec
assert volrec.__file__.startswith('/usr/lib/python3/dist-packages/'), volrec.__file__
with volrec.Client('$INSTANCE', run_dir='$run') as client:
    with client.next_volume(timeout=20.0) as vol:
        print('volume', vol.sequence, 'shape', vol.shape, vol.dtype, 'max', int(vol.max()))
        assert vol.ndim == 3 and vol.size > 0
"

section "three-line C client built with pkg-config"
cat >"$WORK/client.c" <<EOF
#include <stdio.h>
#include <volrec/client.h>
int main(void)
{
	struct volrec_client *c = NULL;
	struct volrec_view v;
	int rc = volrec_client_open("$INSTANCE", "$run", &c);
	if (rc == 0 && (rc = volrec_client_next(c, 20000, &v)) == 0) {
		printf("volume %llu: %u x %u x %u\n", (unsigned long long)v.sequence, v.ny, v.nx, v.nz);
		rc = volrec_view_release(c, &v);
	}
	if (rc)
		fprintf(stderr, "client: %s\n", c ? volrec_client_error(c) : volrec_strerror(rc));
	volrec_client_close(c);
	return rc != 0;
}
EOF
echo "pkg-config --cflags --libs volrec: $(pkg-config --cflags --libs volrec)"
# shellcheck disable=SC2046
cc -std=c11 -Wall -Werror -o "$WORK/client" "$WORK/client.c" $(pkg-config --cflags --libs volrec)
ldd "$WORK/client" | grep libvolrec
chmod 0755 "$WORK/client"
runuser -u volrec -- "$WORK/client"

section "stop the daemon (SIGTERM)"
kill -TERM "$DAEMON_PID"
rc=0
wait "$DAEMON_PID" || rc=$?
DAEMON_PID=
tail -5 "$WORK/volrecd.log"
[ "$rc" = 0 ] || fail "volrecd exited with $rc after SIGTERM"
if ls /dev/shm/volrec."$INSTANCE"* 2>/dev/null; then fail "shared memory left after a graceful stop"; fi

section "apt-get purge"
DEBIAN_FRONTEND=noninteractive apt-get purge -y -q "${PKGS[@]}" | tail -3
left=0
while read -r f; do
	if [ -e "$f" ] || [ -L "$f" ]; then
		echo "LEFT: $f"
		left=1
	fi
done <"$WORK/installed-files.txt"
for d in /etc/volrec /var/cache/volrec /run/volrec /usr/include/volrec \
	/usr/lib/python3/dist-packages/volrec; do
	if [ -e "$d" ]; then
		echo "LEFT: $d"
		left=1
	fi
done
find /usr/lib -path '*/volrec' -print | grep . && left=1
[ "$left" = 0 ] || fail "files left after purge"
echo "no file left behind"
echo "kept on purge (Debian policy: system users are never removed, their uid may still own"
echo "files): $(getent passwd volrec)"

section "package CI passed"
