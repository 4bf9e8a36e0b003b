# SPDX-License-Identifier: MIT
# `make install` / `make uninstall`: the daemon, the volrec command, the client library with
# its headers and volrec.pc, the example shim, the Python package, man pages, the systemd unit,
# sysusers.d/tmpfiles.d snippets and the default configuration. Honours PREFIX and DESTDIR;
# every directory can be overridden (Debian: PREFIX=/usr LIBDIR=/usr/lib/<multiarch>).
# Only what this tree builds is installed: a component whose module is absent is reported
# as skipped, not faked.

BINDIR ?= $(PREFIX)/bin
SBINDIR ?= $(PREFIX)/sbin
# Programs run by other programs: volrec-process, which `volrec` runs for its processing
# subcommands (clients/volrec/helper.c looks in $(PREFIX)/libexec/volrec beside $(BINDIR)).
LIBEXECDIR ?= $(PREFIX)/libexec
LIBDIR ?= $(PREFIX)/lib
INCLUDEDIR ?= $(PREFIX)/include
DATADIR ?= $(PREFIX)/share
MANDIR ?= $(DATADIR)/man
PKGCONFIGDIR ?= $(LIBDIR)/pkgconfig
SHIMDIR ?= $(LIBDIR)/volrec
# /usr installs configuration into /etc (FHS); any other prefix keeps it under the prefix.
SYSCONFDIR ?= $(if $(filter /usr,$(PREFIX)),/etc,$(PREFIX)/etc)
# systemd's own directories for PREFIX=/usr (Debian 12: /lib/systemd/system), else under PREFIX
# (systemd searches /usr/local/lib/{systemd/system,sysusers.d,tmpfiles.d} too).
pkg_systemd_var = $(or $(if $(filter /usr,$(PREFIX)),$(shell pkg-config --variable=$(1) systemd 2>/dev/null)),$(2))
SYSTEMDUNITDIR ?= $(call pkg_systemd_var,systemdsystemunitdir,$(PREFIX)/lib/systemd/system)
SYSUSERSDIR ?= $(call pkg_systemd_var,sysusersdir,$(PREFIX)/lib/sysusers.d)
TMPFILESDIR ?= $(call pkg_systemd_var,tmpfilesdir,$(PREFIX)/lib/tmpfiles.d)
# Debian's python3 reads /usr/lib/python3/dist-packages and /usr/local/lib/python3.X/dist-packages.
PYTHONDIR ?= $(if $(filter /usr,$(PREFIX)),/usr/lib/python3/dist-packages,$(PREFIX)/lib/python$(shell $(PYTHON) -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null || echo 3)/dist-packages)

INSTALL ?= install
PKG_MAN_PAGES := $(sort $(wildcard packaging/man/*.[1-8]))
PKG_PC_IN := ipc/volrec.pc.in
# The example shim(s): sources/module.mk may set SHIM_FILES (built .so paths); by default every
# $(B)/lib/volrec/*.so present after the build. PKG_SHIM_NAMES is what install writes into
# SHIMDIR and all that uninstall removes there: the operator's own shims stay.
SHIM_FILES ?=
PKG_SHIM_FILES = $(or $(strip $(SHIM_FILES)),$(wildcard $(B)/lib/volrec/*.so))
PKG_SHIM_NAMES = $(notdir $(PKG_SHIM_FILES))
D := $(DESTDIR)

# $(1) source, $(2) destination file, $(3) mode
pkg_install_file = $(INSTALL) -D -m $(3) $(1) $(D)$(2)

.PHONY: install-bin install-lib install-dev install-shim install-python install-man \
	install-system install-config
# Other modules may append their own install targets to INSTALL_RULES (run after these).
install: install-bin install-lib install-dev install-shim install-python install-man \
	install-system install-config
	$(if $(strip $(INSTALL_RULES)),$(Q)$(MAKE) --no-print-directory $(INSTALL_RULES))

pkg_skip = echo "  SKIP    $(1): not built by this tree"

install-bin: all
	$(call msg,INSTALL,$(D)$(SBINDIR)/volrecd $(D)$(BINDIR)/volrec)
	$(Q)if [ -n "$(filter volrecd,$(PROGRAMS))" ]; then \
		$(call pkg_install_file,$(B)/bin/volrecd,$(SBINDIR)/volrecd,0755); \
	else $(call pkg_skip,volrecd); fi
	$(Q)if [ -n "$(filter volrec,$(PROGRAMS))" ]; then \
		$(call pkg_install_file,$(B)/bin/volrec,$(BINDIR)/volrec,0755); \
	else $(call pkg_skip,volrec); fi
	$(Q)if [ -n "$(filter volrec-process,$(PROGRAMS))" ]; then \
		$(call pkg_install_file,$(B)/bin/volrec-process,$(LIBEXECDIR)/volrec/volrec-process,0755); \
	else $(call pkg_skip,volrec-process); fi

install-lib: all
	$(call msg,INSTALL,$(D)$(LIBDIR)/libvolrec.so.$(volrec_SOVERSION))
	$(Q)if [ -n "$(LIBVOLREC_SO)" ]; then \
		$(call pkg_install_file,$(LIBVOLREC_SO),$(LIBDIR)/libvolrec.so.$(volrec_SOVERSION),0644); \
	else $(call pkg_skip,libvolrec); fi

install-dev: all
	$(call msg,INSTALL,$(D)$(INCLUDEDIR)/volrec $(D)$(PKGCONFIGDIR)/volrec.pc)
	$(Q)for h in include/volrec/*.h; do \
		$(call pkg_install_file,$$h,$(INCLUDEDIR)/volrec/$$(basename $$h),0644) || exit 1; \
	done
	$(Q)if [ -n "$(LIBVOLREC_SO)" ]; then \
		$(INSTALL) -d $(D)$(LIBDIR) && \
		ln -sfn libvolrec.so.$(volrec_SOVERSION) $(D)$(LIBDIR)/libvolrec.so && \
		$(INSTALL) -d $(D)$(PKGCONFIGDIR) && \
		sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@LIBDIR@|$(LIBDIR)|g' \
		    -e 's|@INCLUDEDIR@|$(INCLUDEDIR)|g' -e 's|@VERSION@|$(VERSION)|g' \
		    $(PKG_PC_IN) > $(D)$(PKGCONFIGDIR)/volrec.pc && \
		chmod 0644 $(D)$(PKGCONFIGDIR)/volrec.pc; \
	else $(call pkg_skip,libvolrec.so and volrec.pc); fi

install-shim: all $(SHIM_FILES)
	$(call msg,INSTALL,$(D)$(SHIMDIR))
	$(Q)shims="$(strip $(PKG_SHIM_FILES))"; \
	if [ -z "$$shims" ]; then $(call pkg_skip,example shim); fi; \
	for s in $$shims; do \
		$(call pkg_install_file,$$s,$(SHIMDIR)/$$(basename $$s),0644) || exit 1; \
	done

install-python:
	$(call msg,INSTALL,$(D)$(PYTHONDIR)/volrec)
	$(Q)if [ -d clients/python/volrec ]; then \
		for f in $$(cd clients/python && find volrec \( -name '*.py' -o -name py.typed \) | sort); do \
			$(call pkg_install_file,clients/python/$$f,$(PYTHONDIR)/$$f,0644) || exit 1; \
		done; \
	else $(call pkg_skip,Python package volrec); fi

install-man:
	$(call msg,INSTALL,$(D)$(MANDIR))
	$(Q)for m in $(PKG_MAN_PAGES); do \
		n=$$(basename $$m); \
		$(call pkg_install_file,$$m,$(MANDIR)/man$${n##*.}/$$n,0644) || exit 1; \
	done

install-system:
	$(call msg,INSTALL,$(D)$(SYSTEMDUNITDIR)/volrecd.service)
	$(Q)$(INSTALL) -d $(D)$(SYSTEMDUNITDIR)
	$(Q)sed -e 's|/usr/sbin/volrecd|$(SBINDIR)/volrecd|g' -e 's|/etc/volrec/|$(SYSCONFDIR)/volrec/|g' \
		packaging/systemd/volrecd.service > $(D)$(SYSTEMDUNITDIR)/volrecd.service
	$(Q)chmod 0644 $(D)$(SYSTEMDUNITDIR)/volrecd.service
	$(Q)$(call pkg_install_file,packaging/sysusers.d/volrec.conf,$(SYSUSERSDIR)/volrec.conf,0644)
	$(Q)$(call pkg_install_file,packaging/tmpfiles.d/volrec.conf,$(TMPFILESDIR)/volrec.conf,0644)

# An existing configuration is the operator's: never overwritten (the shipped one is then
# left next to it as volrecd.yaml.dist).
install-config:
	$(call msg,INSTALL,$(D)$(SYSCONFDIR)/volrec/volrecd.yaml)
	$(Q)if [ -e $(D)$(SYSCONFDIR)/volrec/volrecd.yaml ] && \
	    ! cmp -s packaging/volrecd.yaml $(D)$(SYSCONFDIR)/volrec/volrecd.yaml; then \
		$(call pkg_install_file,packaging/volrecd.yaml,$(SYSCONFDIR)/volrec/volrecd.yaml.dist,0644); \
		echo "  KEEP    $(D)$(SYSCONFDIR)/volrec/volrecd.yaml (local changes; new default: volrecd.yaml.dist)"; \
	else \
		$(call pkg_install_file,packaging/volrecd.yaml,$(SYSCONFDIR)/volrec/volrecd.yaml,0644); \
	fi

# Removes exactly what install writes (a locally modified configuration stays), then the
# directories volrec owns if they are empty.
uninstall:
	$(call msg,UNINSTALL,$(D)$(PREFIX))
	$(Q)rm -f $(D)$(SBINDIR)/volrecd $(D)$(BINDIR)/volrec $(D)$(LIBEXECDIR)/volrec/volrec-process \
		$(D)$(LIBDIR)/libvolrec.so.$(volrec_SOVERSION) $(D)$(LIBDIR)/libvolrec.so \
		$(D)$(PKGCONFIGDIR)/volrec.pc \
		$(addprefix $(D)$(INCLUDEDIR)/volrec/,$(notdir $(wildcard include/volrec/*.h))) \
		$(foreach m,$(PKG_MAN_PAGES),$(D)$(MANDIR)/man$(subst .,,$(suffix $(m)))/$(notdir $(m))) \
		$(D)$(SYSTEMDUNITDIR)/volrecd.service $(D)$(SYSUSERSDIR)/volrec.conf \
		$(D)$(TMPFILESDIR)/volrec.conf $(D)$(SYSCONFDIR)/volrec/volrecd.yaml.dist
	$(Q)rm -f $(addprefix $(D)$(SHIMDIR)/,$(PKG_SHIM_NAMES))
	$(Q)rm -rf $(D)$(PYTHONDIR)/volrec
	$(Q)if cmp -s packaging/volrecd.yaml $(D)$(SYSCONFDIR)/volrec/volrecd.yaml; then \
		rm -f $(D)$(SYSCONFDIR)/volrec/volrecd.yaml; \
	elif [ -e $(D)$(SYSCONFDIR)/volrec/volrecd.yaml ]; then \
		echo "  KEEP    $(D)$(SYSCONFDIR)/volrec/volrecd.yaml (local changes)"; \
	fi
	$(Q)rmdir $(D)$(INCLUDEDIR)/volrec $(D)$(SHIMDIR) $(D)$(SYSCONFDIR)/volrec \
		$(D)$(LIBEXECDIR)/volrec 2>/dev/null || true
