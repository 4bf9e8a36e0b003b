#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The Debian packages under a real systemd: boots a Debian 12 container (systemd-nspawn -b over
# a debootstrap --variant=minbase tree, no network) as root, installs the .debs of DEBDIR and
# checks what only a real service manager shows: start reaches READY with the STATUS= line,
# reload of a good file, reload of a bad file fails while the service keeps running, a
# configuration error at start is not restarted, SIGSTOP -> watchdog kill -> restart, a crash
# (SIGSEGV) -> its signal in the journal and a clean restart, the descriptor limit, the journal
# fields (VOLREC_*, CODE_* of the caller), the viewer unit serving TLS with root-only key and
# token files (credentials), stop, and purge leaves nothing.
#
# Usage: tests/packaging/systemd-container.sh DEBDIR   (DEBDIR: the .debs, e.g. from
#        tests/packaging/ci-packages.sh --build-only DEBDIR)
# Exit status: 0 passed, 1 failed, 77 skipped (systemd-nspawn cannot boot a container here).
#
# The tree is cached in $VOLREC_CI_CACHE (default /var/cache/volrec-ci), keyed by ISO week and
# by the packages it holds (systemd plus every run-time dependency of the .debs, installed
# from the mirror of this machine's apt sources, or $VOLREC_CI_MIRROR); the .debs are then
# installed offline. Each run boots an overlay (or a copy) of it, so the cache stays clean.
#
# Commands run inside the container through nsenter into the namespaces of its PID 1: with
# --register=no there is no machined registration, so `systemd-run -M`/`machinectl shell`
# cannot reach it, while nsenter gives systemctl and journalctl the container's /run and
# journal directly (the commands stay in the host's cgroup, which they do not care about).
# wait_for evaluates its single-quoted conditions later (the variables they name are read there)
# shellcheck disable=SC2016,SC2034
set -euo pipefail

SRC=$(cd "$(dirname "$0")/../.." && pwd)
DEBDIR=${1:-}
CACHE=${VOLREC_CI_CACHE:-/var/cache/volrec-ci}
SUITE=bookworm
PKGS=(volrecd libvolrec0 libvolrec-dev python3-volrec)
MACHINE=volrec-ci-$$
WORK=
NSPAWN_PID=
LEADER=
OVERLAY=0
STEP=setup

section() {
	STEP=$*
	printf '\n==== %s ====\n' "$*"
}
fail() {
	printf 'systemd-container: FAILED (%s): %s\n' "$STEP" "$*" >&2
	if [ -n "$LEADER" ]; then
		echo "--- journal of volrecd.service in the container (last 40 lines)" >&2
		in_ct journalctl -u volrecd --no-pager -n 40 >&2 || true
	fi
	exit 1
}
skip() {
	printf 'systemd-container: SKIPPED: %s\n' "$*" >&2
	exit 77
}

cleanup() {
	if [ -n "$NSPAWN_PID" ] && kill -0 "$NSPAWN_PID" 2>/dev/null; then
		kill -TERM "$NSPAWN_PID" 2>/dev/null || true # nspawn -b: an orderly poweroff
		for _ in $(seq 1 150); do
			kill -0 "$NSPAWN_PID" 2>/dev/null || break
			sleep 0.2
		done
		kill -KILL "$NSPAWN_PID" 2>/dev/null || true
		wait "$NSPAWN_PID" 2>/dev/null || true
	fi
	if [ "$OVERLAY" = 1 ]; then
		umount "$WORK/root" 2>/dev/null || umount -l "$WORK/root" 2>/dev/null || true
	fi
	if [ -n "$WORK" ] && [ -z "${VOLREC_CI_KEEP:-}" ]; then
		rm -rf "$WORK"
	fi
}
trap cleanup EXIT

# A command in the booted container (its mount, UTS, IPC, network, PID and cgroup namespaces),
# bounded: no step may hang the test.
in_ct() {
	timeout 180 nsenter -t "$LEADER" -m -u -i -n -p -C -r -w -- /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin \
		LANG=C.UTF-8 SYSTEMD_PAGER=cat SYSTEMD_COLORS=0 DEBIAN_FRONTEND=noninteractive "$@"
}
prop() { in_ct systemctl show -P "$1" volrecd.service; }
vprop() { in_ct systemctl show -P "$1" volrec-view.service; }
# Wait up to $1 seconds for the shell condition $2 (evaluated here).
wait_for() {
	local end=$((SECONDS + $1))
	until eval "$2"; do
		[ "$SECONDS" -lt "$end" ] || return 1
		sleep 0.2
	done
}
cursor() { in_ct journalctl -q -n 0 --show-cursor | sed -n 's/^-- cursor: //p'; }
# journal_after CURSOR cat|verbose [FIELD=VALUE ...]: the entries after CURSOR that carry every
# FIELD=VALUE (unit=U matches U's own entries and systemd's about U, like journalctl -u), as
# MESSAGE lines (cat) or as "    FIELD=VALUE" blocks (verbose). Filtered here, because
# journalctl 252 returns nothing for --after-cursor combined with a match.
journal_after() {
	in_ct journalctl -q --no-pager --after-cursor="$1" -o json | python3 -c '
import json, sys
mode, want = sys.argv[1], dict(a.split("=", 1) for a in sys.argv[2:])
def has(e, k, v):
    if k == "unit":
        return v in (e.get("_SYSTEMD_UNIT"), e.get("UNIT"))
    return str(e.get(k)) == v
for line in sys.stdin:
    e = json.loads(line)
    if all(has(e, k, v) for k, v in want.items()):
        if mode == "cat":
            print(e.get("MESSAGE"))
        else:
            print("--")
            for k, v in e.items():
                print(f"    {k}={v}")
' "${@:2}"
}
# journal_has PATTERN CURSOR ...: whether journal_after CURSOR ... prints a line matching
# PATTERN (read whole: grep -q closing the pipe early would fail it under pipefail)
journal_has() {
	local pat=$1
	shift
	grep -q -- "$pat" <<<"$(journal_after "$@")"
}

# ---- preconditions -------------------------------------------------------------------------
[ -n "$DEBDIR" ] || {
	echo "usage: $0 DEBDIR (build the .debs with tests/packaging/ci-packages.sh --build-only DEBDIR)" >&2
	exit 2
}
[ "$(id -u)" = 0 ] || skip "needs root (debootstrap, systemd-nspawn, nsenter)"
for tool in debootstrap systemd-nspawn nsenter dpkg-deb chroot sha256sum python3; do
	command -v "$tool" >/dev/null || fail "$tool is missing: run 'make deps' first"
done
shopt -s nullglob
DEBS=("$DEBDIR"/*.deb)
shopt -u nullglob
[ "${#DEBS[@]}" -gt 0 ] || fail "no .deb in $DEBDIR (tests/packaging/ci-packages.sh --build-only $DEBDIR)"
echo "source: $SRC"
echo "debs:   ${DEBS[*]}"

# ---- the cached tree -----------------------------------------------------------------------
# The first Debian mirror of this machine's apt sources that carries the suite (one-line
# .list and deb822 .sources formats).
apt_mirror() {
	local f
	for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
		[ -r "$f" ] || continue
		awk -v s="$SUITE" '$1 == "deb" { i = 2; if ($2 ~ /^\[/) while ($i !~ /\]$/) i++;
			if ($2 ~ /^\[/) i++; if ($(i + 1) == s) { print $i; exit } }' "$f"
	done
	for f in /etc/apt/sources.list.d/*.sources; do
		[ -r "$f" ] || continue
		awk -v s="$SUITE" 'BEGIN { RS = ""; FS = "\n" } {
			uri = ""; ok = 0; deb = 0
			for (i = 1; i <= NF; i++) {
				if ($i ~ /^Types:.*(^|[ \t])deb([ \t]|$)/) deb = 1
				if ($i ~ /^URIs:/) { split($i, u, /[ \t]+/); uri = u[2] }
				if ($i ~ /^Suites:/) { n = split($i, w, /[ \t]+/); for (j = 2; j <= n; j++) if (w[j] == s) ok = 1 }
			}
			if (deb && ok && uri != "") { print uri; exit } }' "$f"
	done
}
MIRROR=${VOLREC_CI_MIRROR:-$(apt_mirror | head -1)}
[ -n "$MIRROR" ] || fail "no apt source for $SUITE in /etc/apt/sources.list*; set VOLREC_CI_MIRROR"

# Run-time dependencies of the .debs (first alternative, no versions), without the .debs.
deps_of_debs() {
	local deb
	for deb in "${DEBS[@]}"; do
		dpkg-deb -f "$deb" Depends Pre-Depends
	done | sed -e 's/^[A-Za-z-]*: //' | tr ',' '\n' | sed -e 's/|.*//' -e 's/(.*)//' \
		-e 's/:any//' -e 's/[[:space:]]//g' | grep -v '^$' | sort -u |
		grep -vxF -f <(printf '%s\n' "${PKGS[@]}") || true
}
DEPS=$(deps_of_debs | tr '\n' ' ')
BASE="systemd systemd-sysv"
KEY=$(printf '%s\n' "$SUITE" "$MIRROR" "$BASE" "$DEPS" | sha256sum | cut -c1-12)
TREE="$CACHE/$SUITE-$(date +%G-W%V)-$KEY"

section "container tree $TREE"
echo "mirror: $MIRROR"
echo "packages: $BASE $DEPS"
if [ -d "$TREE" ]; then
	echo "cached"
else
	mkdir -p "$CACHE/debs"
	rm -rf "$TREE.tmp"
	start=$SECONDS
	if ! debootstrap --variant=minbase --include="${BASE// /,}" --cache-dir="$CACHE/debs" \
		"$SUITE" "$TREE.tmp" "$MIRROR" >"$CACHE/debootstrap.log" 2>&1; then
		tail -20 "$CACHE/debootstrap.log"
		fail "debootstrap (log: $CACHE/debootstrap.log)"
	fi
	# debootstrap resolves no virtual packages (python3-zmq needs python3-cffi-backend-api-*):
	# apt installs the dependencies, from the same mirror
	mount --bind /proc "$TREE.tmp/proc"
	rc=0
	read -r -a deps <<<"$DEPS"
	{
		chroot "$TREE.tmp" apt-get update -q &&
			DEBIAN_FRONTEND=noninteractive chroot "$TREE.tmp" apt-get install -y -q \
				--no-install-recommends "${deps[@]}" &&
			chroot "$TREE.tmp" apt-get clean
	} >>"$CACHE/debootstrap.log" 2>&1 || rc=$?
	umount "$TREE.tmp/proc"
	[ "$rc" = 0 ] || {
		tail -20 "$CACHE/debootstrap.log"
		fail "apt-get install in the tree (log: $CACHE/debootstrap.log)"
	}
	rm -f "$TREE.tmp/etc/hostname" # nspawn then names the container after --machine
	# older trees (last week's, other package sets) go
	find "$CACHE" -maxdepth 1 -name "$SUITE-*" ! -name "$(basename "$TREE").tmp" -exec rm -rf {} +
	mv "$TREE.tmp" "$TREE"
	echo "made in $((SECONDS - start)) s"
fi
du -sh "$TREE" | cut -f1

# ---- boot ----------------------------------------------------------------------------------
section "boot systemd-nspawn -b --register=no --keep-unit --private-network"
WORK=$(mktemp -d /var/tmp/volrec-ct.XXXXXX)
mkdir -p "$WORK/root" "$WORK/upper" "$WORK/ovl"
if mount -t overlay overlay -o "lowerdir=$TREE,upperdir=$WORK/upper,workdir=$WORK/ovl" \
	"$WORK/root" 2>/dev/null; then
	OVERLAY=1
	echo "root: overlay over the cached tree"
else
	cp -a "$TREE/." "$WORK/root/"
	echo "root: a copy of the cached tree (overlayfs unavailable)"
fi
mkdir -p "$WORK/root/root/debs"
cp "${DEBS[@]}" "$WORK/root/root/debs/"
systemd-nspawn -q -D "$WORK/root" -b --register=no --keep-unit --private-network \
	--machine="$MACHINE" --console=read-only >"$WORK/console.log" 2>&1 &
NSPAWN_PID=$!
# PID 1 of the container: the child of systemd-nspawn that runs systemd
find_leader() {
	local p
	for p in $(ps -o pid= --ppid "$NSPAWN_PID" 2>/dev/null); do
		if [ "$(cat "/proc/$p/comm" 2>/dev/null)" = systemd ]; then
			LEADER=$p
			return 0
		fi
	done
	return 1
}
booted() {
	local st
	kill -0 "$NSPAWN_PID" 2>/dev/null || return 2
	[ -n "$LEADER" ] || find_leader || return 1
	st=$(in_ct systemctl is-system-running 2>/dev/null) || true
	[ "$st" = running ] || [ "$st" = degraded ]
}
end=$((SECONDS + 90))
while :; do
	rc=0
	booted || rc=$?
	[ "$rc" = 0 ] && break
	if [ "$rc" = 2 ] || [ "$SECONDS" -ge "$end" ]; then
		tail -15 "$WORK/console.log" >&2
		LEADER=
		skip "systemd-nspawn cannot boot a container on this machine (console above)"
	fi
	sleep 0.3
done
echo "booted: container PID 1 is $LEADER on the host; $(in_ct systemctl is-system-running)"
in_ct systemctl --failed --no-legend || true

# ---- install -------------------------------------------------------------------------------
section "apt-get install the .debs (offline)"
ct_debs=()
for d in "${DEBS[@]}"; do ct_debs+=("/root/debs/$(basename "$d")"); done
in_ct apt-get install -y -q --no-install-recommends "${ct_debs[@]}" | tail -4 ||
	fail "apt-get install"
in_ct getent passwd volrec || fail "the system user volrec was not created"
for p in "${PKGS[@]}"; do in_ct dpkg -L "$p"; done | sort -u >"$WORK/installed.txt"
echo "$(wc -l <"$WORK/installed.txt") paths installed"
in_ct systemd-analyze verify --man=no volrecd.service || fail "systemd-analyze verify volrecd.service"
in_ct systemd-analyze verify --man=no volrec-view.service ||
	fail "systemd-analyze verify volrec-view.service"
[ "$(prop UnitFileState)" = disabled ] || fail "the package enabled the service: $(prop UnitFileState)"
cp "$WORK/root/etc/volrec/volrecd.yaml" "$WORK/volrecd.yaml.orig"
set_config() { cat >"$WORK/root/etc/volrec/volrecd.yaml"; }

# ---- start ---------------------------------------------------------------------------------
section "systemctl start: READY and the STATUS= line"
C0=$(cursor)
in_ct systemctl start volrecd ||
	fail "systemctl start volrecd"
[ "$(prop ActiveState)/$(prop SubState)" = active/running ] ||
	fail "after start: $(prop ActiveState)/$(prop SubState)"
wait_for 30 '[[ "$(prop StatusText)" == *volumes/s* ]]' ||
	fail "no status line in STATUS= after 30 s: '$(prop StatusText)'"
PID1=$(prop MainPID)
echo "MainPID $PID1, STATUS=$(prop StatusText)"
journal_has "started: instance default" "$C0" cat unit=volrecd.service ||
	fail "no 'started' message in the journal"
if journal_after "$C0" cat unit=volrecd.service | grep -Ei 'nvidia-modprobe|203/EXEC'; then
	fail "nvidia-modprobe noise on a host without NVIDIA devices"
fi

section "journal fields (journalctl -o verbose)"
journal_after "$C0" verbose VOLREC_EVENT=started >"$WORK/started.txt"
cat "$WORK/started.txt"
started_line=$(grep -n 'vrd_event("started"' "$SRC/daemon/vrd_service.c" | cut -d: -f1)
for field in "SYSLOG_IDENTIFIER=volrecd" "VOLREC_INSTANCE=default" "VOLREC_EVENT=started" \
	"PRIORITY=5" "CODE_FILE=daemon/vrd_service.c" "CODE_LINE=$started_line" \
	"CODE_FUNC=service_start" "_SYSTEMD_UNIT=volrecd.service"; do
	grep -qx "    $field" "$WORK/started.txt" || fail "the started entry lacks $field"
done
if journal_after "$C0" verbose _SYSTEMD_UNIT=volrecd.service | grep -E 'CODE_(FILE|FUNC)=.*vrd_log'; then
	fail "an entry names the logging function instead of its caller"
fi

# ---- reload --------------------------------------------------------------------------------
section "systemctl reload of a good file"
sed -e 's/^log: {level: info}/log: {level: debug}/' "$WORK/volrecd.yaml.orig" | set_config
grep -q 'level: debug' "$WORK/root/etc/volrec/volrecd.yaml" || fail "could not edit the configuration"
C1=$(cursor)
in_ct systemctl reload volrecd || fail "systemctl reload of a good file failed"
wait_for 30 'journal_has reloaded "$C1" cat VOLREC_EVENT=reloaded' ||
	fail "no 'reloaded' event after a good reload"
journal_after "$C1" cat VOLREC_EVENT=reloaded
[ "$(prop MainPID)" = "$PID1" ] || fail "the main pid changed on reload"

section "systemctl reload of a bad file fails, the service keeps running"
sed -e 's/overflow: drop_epoch/overflow: sometimes/' "$WORK/volrecd.yaml.orig" | set_config
C2=$(cursor)
if in_ct systemctl reload volrecd; then
	fail "systemctl reload of a bad file returned 0"
fi
echo "systemctl reload: failed, as it should"
sleep 1
[ "$(prop ActiveState)/$(prop SubState)" = active/running ] ||
	fail "after a rejected reload: $(prop ActiveState)/$(prop SubState)"
[ "$(prop MainPID)" = "$PID1" ] || fail "the main pid changed on a rejected reload"
journal_after "$C2" cat unit=volrecd.service | tee "$WORK/bad-reload.txt"
grep -q "overflow" "$WORK/bad-reload.txt" || fail "the reason (pipeline.overflow) is not in the journal"
if journal_has . "$C2" cat VOLREC_EVENT=reloading; then
	fail "the daemon was signalled although the file is bad"
fi
set_config <"$WORK/volrecd.yaml.orig"
in_ct systemctl reload volrecd || fail "reload of the restored file"

# ---- watchdog --------------------------------------------------------------------------------
section "SIGSTOP -> watchdog kill -> restart"
C3=$(cursor)
restarts=$(prop NRestarts)
in_ct sh -c "kill -s STOP $PID1" # the shell's kill: no procps in the container
echo "volrecd (pid $PID1 in the container) stopped; WatchdogSec=$(prop WatchdogUSec)"
wait_for 60 '[ "$(prop NRestarts)" -gt "$restarts" ] && [ "$(prop SubState)" = running ]' ||
	fail "no watchdog restart within 60 s: $(prop ActiveState)/$(prop SubState), NRestarts $(prop NRestarts)"
journal_after "$C3" cat unit=volrecd.service | grep -E 'Watchdog timeout|watchdog|Main process exited|Scheduled restart' || true
journal_has 'Watchdog timeout' "$C3" cat unit=volrecd.service || fail "no 'Watchdog timeout' in the journal"
PID2=$(prop MainPID)
[ "$PID2" != "$PID1" ] || fail "the main pid did not change"
wait_for 30 '[[ "$(prop StatusText)" == *volumes/s* ]]' || fail "not running again: '$(prop StatusText)'"
echo "restarted: MainPID $PID2, NRestarts $(prop NRestarts), STATUS=$(prop StatusText)"

# ---- a crash ----------------------------------------------------------------------------------
section "SIGSEGV (a shim crashing in-process) -> the signal in the journal, a clean restart"
# LimitNOFILE=65536, or as close as the container allows: systemd cannot raise a hard limit
# above its own (a CI host's may be lower), and sets soft and hard alike
nofile_of() { in_ct sh -c "grep '^Max open files' /proc/$1/limits" | awk '{print $4 "/" $5}'; }
[ "$(prop LimitNOFILE)" = 65536 ] || fail "LimitNOFILE of the unit: $(prop LimitNOFILE)"
cap=$(nofile_of 1)
cap=${cap#*/}
want=$((cap < 65536 ? cap : 65536))
nofile=$(nofile_of "$PID2")
echo "volrecd's open files limit (soft/hard): $nofile (the container's PID 1 hard limit: $cap)"
[ "$nofile" = "$want/$want" ] || fail "LimitNOFILE=65536 not in force: $nofile, expected $want/$want"
C4=$(cursor)
restarts=$(prop NRestarts)
in_ct sh -c "kill -s SEGV $PID2"
wait_for 60 '[ "$(prop NRestarts)" -gt "$restarts" ] && [ "$(prop SubState)" = running ]' ||
	fail "no restart after SIGSEGV within 60 s: $(prop ActiveState)/$(prop SubState)"
journal_after "$C4" cat unit=volrecd.service | grep -E 'Main process exited|Failed with result|Scheduled restart|started' || true
journal_has 'status=11/SEGV' "$C4" cat unit=volrecd.service ||
	fail "the journal does not say the daemon died of SIGSEGV"
PID3=$(prop MainPID)
[ "$PID3" != "$PID2" ] || fail "the main pid did not change after SIGSEGV"
wait_for 30 '[[ "$(prop StatusText)" == *volumes/s* ]]' || fail "not running after SIGSEGV: '$(prop StatusText)'"
# what the new daemon holds is its own: the pid file names it, one data and one lease segment
[ "$(in_ct cat /run/volrec/default.pid)" = "$PID3" ] ||
	fail "/run/volrec/default.pid is '$(in_ct cat /run/volrec/default.pid)', the daemon is $PID3"
in_ct sh -c 'ls /dev/shm/' | grep '^volrec\.' | tee "$WORK/shm-after-crash.txt"
[ "$(wc -l <"$WORK/shm-after-crash.txt")" = 2 ] || fail "shared memory after the crash: $(cat "$WORK/shm-after-crash.txt")"
echo "restarted after SIGSEGV: MainPID $PID3, NRestarts $(prop NRestarts)"

# ---- the viewer unit ---------------------------------------------------------------------------
section "volrec-view with root-only TLS key and token file (LoadCredential=)"
# the files as an operator installs them: owned by root, mode 0600 (the certificate 0644)
openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=volrec-ct \
	-keyout "$WORK/root/etc/volrec/view.key" -out "$WORK/root/etc/volrec/view.crt" >/dev/null 2>&1 ||
	fail "openssl req"
printf 'view: viewtoken-0123456789abcdef\ncontrol: controltoken-0123456789abcdef\n' \
	>"$WORK/root/etc/volrec/view.tokens"
chown 0:0 "$WORK/root/etc/volrec/view".*
chmod 0600 "$WORK/root/etc/volrec/view.key" "$WORK/root/etc/volrec/view.tokens"
chmod 0644 "$WORK/root/etc/volrec/view.crt"
echo 'VOLREC_VIEW_OPTS=--listen 0.0.0.0:8443' >"$WORK/root/etc/default/volrec-view"
https_get() { # PATH [TOKEN]: the status of an https request to the viewer in the container
	in_ct python3 -c '
import http.client, ssl, sys
ctx = ssl.create_default_context()
ctx.check_hostname = False
ctx.verify_mode = ssl.CERT_NONE
c = http.client.HTTPSConnection("127.0.0.1", 8443, context=ctx, timeout=10)
h = {"Authorization": "Bearer " + sys.argv[2]} if len(sys.argv) > 2 else {}
c.request("GET", sys.argv[1], headers=h)
print(c.getresponse().status)
' "$@" 2>/dev/null
}
# the control: the same files named directly are out of the service user's reach
in_ct mkdir -p /run/systemd/system/volrec-view.service.d
in_ct sh -c 'printf "[Service]\nExecStart=\nExecStart=/usr/bin/volrec view -c /etc/volrec/volrecd.yaml --listen 0.0.0.0:8443 --cert /etc/volrec/view.crt --key /etc/volrec/view.key --token-file /etc/volrec/view.tokens\n" >/run/systemd/system/volrec-view.service.d/paths.conf'
in_ct systemctl daemon-reload
C5=$(cursor)
in_ct systemctl start volrec-view || true
wait_for 20 '[ "$(vprop ActiveState)" = failed ]' ||
	fail "the viewer read the root-only key by its path: $(vprop ActiveState)/$(vprop SubState)"
[ "$(vprop ExecMainStatus)" = 2 ] || fail "control: exit status $(vprop ExecMainStatus), expected 2"
journal_has 'Permission denied' "$C5" cat unit=volrec-view.service ||
	fail "control: no 'Permission denied' in the viewer's journal"
echo "control: naming the files directly fails ($(journal_after "$C5" cat unit=volrec-view.service | grep -m1 'Permission denied'))"
in_ct rm -r /run/systemd/system/volrec-view.service.d
in_ct systemctl daemon-reload
in_ct systemctl reset-failed volrec-view
# the shipped unit: systemd hands the files over as credentials
C6=$(cursor)
in_ct systemctl start volrec-view || fail "systemctl start volrec-view"
wait_for 30 '[ "$(https_get / viewtoken-0123456789abcdef)" = 200 ]' || {
	journal_after "$C6" cat unit=volrec-view.service >&2
	fail "volrec-view does not serve https with its token: $(vprop ActiveState)/$(vprop SubState)"
}
[ "$(https_get /)" = 401 ] || fail "volrec-view served a request without a token"
[ "$(vprop ActiveState)/$(vprop SubState)" = active/running ] ||
	fail "volrec-view: $(vprop ActiveState)/$(vprop SubState)"
vpid=$(vprop MainPID)
in_ct sh -c "tr '\\0' ' ' </proc/$vpid/cmdline; echo"
in_ct sh -c "tr '\\0' ' ' </proc/$vpid/cmdline" | grep -q -- '--key /run/credentials/volrec-view.service/view.key' ||
	fail "the viewer was not given its key from the credentials directory"
echo "volrec-view serves https on 8443: 200 with the view token, 401 without"
in_ct systemctl stop volrec-view || fail "systemctl stop volrec-view"
rm -f "$WORK/root/etc/volrec/view".* "$WORK/root/etc/default/volrec-view"

# ---- a configuration error at start ----------------------------------------------------------
section "a configuration error at start is not restarted"
printf 'instance: default\nbogus_key: 1\n' | set_config
if in_ct systemctl restart volrecd; then
	fail "systemctl restart with a bad file succeeded"
fi
sleep 6 # three times RestartSec=2s: a restart loop would show
[ "$(prop ActiveState)" = failed ] || fail "after a configuration error: $(prop ActiveState)/$(prop SubState)"
[ "$(prop ExecMainStatus)" = 2 ] || fail "exit status $(prop ExecMainStatus), expected 2"
echo "failed with exit status 2, Result=$(prop Result), NRestarts $(prop NRestarts): not restarted"
set_config <"$WORK/volrecd.yaml.orig"
in_ct systemctl reset-failed volrecd
in_ct systemctl start volrecd ||
	fail "start after the configuration was fixed"

# ---- stop, purge -----------------------------------------------------------------------------
section "systemctl stop"
in_ct systemctl stop volrecd || fail "systemctl stop"
[ "$(prop ActiveState)" = inactive ] || fail "after stop: $(prop ActiveState)"
[ "$(prop Result)" = success ] || fail "stop result $(prop Result)"
if in_ct sh -c 'ls /dev/shm/volrec.* /run/volrec 2>/dev/null'; then fail "left after stop"; fi

section "apt-get purge"
in_ct apt-get purge -y -q "${PKGS[@]}" | tail -3 || fail "apt-get purge"
left=$(while read -r f; do
	[ "$f" = /. ] && continue
	in_ct sh -c '[ ! -d "$1" ] && { [ -e "$1" ] || [ -L "$1" ]; }' sh "$f" && echo "$f"
done <"$WORK/installed.txt") || true
for d in /etc/volrec /var/cache/volrec /run/volrec /usr/include/volrec \
	/usr/lib/python3/dist-packages/volrec; do
	in_ct test -e "$d" && left="$left $d"
done
shm=$(in_ct sh -c 'ls /dev/shm/ | grep "^volrec\." || true')
[ -z "$left$shm" ] || fail "left after purge: $left $shm"
if in_ct systemctl cat volrecd.service >/dev/null 2>&1; then fail "the unit is still known after purge"; fi
echo "nothing left"

section "systemd container test passed"
