# SPDX-License-Identifier: MIT
# `volrec view` (vw_): the web viewer, the program volrec-view that `volrec view` runs
# (clients/volrec/cmd_view.c). An operator's tool: it links the client library, libwebsockets,
# zlib and json-c (and config/ for -c), not the processing stack. Its page (clients/view/www/)
# is copied to $(B)/share/volrec/view/ and installed into $(DATADIR)/volrec/view/; the program
# goes to $(VIEW_LIBEXECDIR) with its systemd unit packaging/systemd/volrec-view.service.
ARCHIVES += view
view_SRCS := clients/view/frame.c clients/view/feed.c clients/view/control.c clients/view/server.c \
	clients/view/access.c clients/view/msg.c clients/view/extract.c
view_LDLIBS := -lwebsockets -lz -ljson-c -lzmq

VIEW_LIBEXECDIR = $(or $(LIBEXECDIR),$(PREFIX)/libexec)/volrec
VIEW_DATADIR = $(or $(DATADIR),$(PREFIX)/share)/volrec/view

PROGRAMS += volrec-view
volrec-view_SRCS := clients/view/main.c
volrec-view_ARCHIVES = view $(CLIENT_ARCHIVES) cfg base
$(call obj,clients/view/main.c): CPPFLAGS += -DVOLREC_VIEW_ASSETS='"$(VIEW_DATADIR)"'
# `volrec view` looks for volrec-view beside itself, then in the installed libexec folder.
$(call obj,clients/volrec/cmd_view.c): CPPFLAGS += -DVOLREC_VIEW_DIR='"$(VIEW_LIBEXECDIR)"'

VIEW_ASSETS := $(shell find clients/view/www -type f -not -name '.*' | sort)
VIEW_ASSETS_OUT := $(patsubst clients/view/www/%,$(B)/share/volrec/view/%,$(VIEW_ASSETS))
$(B)/share/volrec/view/%: clients/view/www/%
	@mkdir -p $(@D)
	$(Q)cp $< $@
all: $(VIEW_ASSETS_OUT)

# Frame encoding (block maxima, raw/deflate, header layout) in the cmocka runner.
UNIT_SRCS += tests/unit/test_view_frame.c
UNIT_ARCHIVES += view

.PHONY: install-view uninstall-view
INSTALL_RULES += install-view
install-view: all
	$(call msg,INSTALL,$(D)$(VIEW_LIBEXECDIR)/volrec-view $(D)$(VIEW_DATADIR))
	$(Q)$(call pkg_install_file,$(B)/bin/volrec-view,$(VIEW_LIBEXECDIR)/volrec-view,0755)
	$(Q)for f in $(VIEW_ASSETS:clients/view/www/%=%); do \
		$(call pkg_install_file,clients/view/www/$$f,$(VIEW_DATADIR)/$$f,0644) || exit 1; \
	done
	$(Q)$(INSTALL) -d $(D)$(SYSTEMDUNITDIR)
	$(Q)sed -e 's|/usr/bin/volrec|$(BINDIR)/volrec|g' -e 's|/etc/volrec/|$(SYSCONFDIR)/volrec/|g' \
		packaging/systemd/volrec-view.service > $(D)$(SYSTEMDUNITDIR)/volrec-view.service
	$(Q)chmod 0644 $(D)$(SYSTEMDUNITDIR)/volrec-view.service
uninstall: uninstall-view
uninstall-view:
	$(Q)rm -f $(D)$(VIEW_LIBEXECDIR)/volrec-view $(D)$(SYSTEMDUNITDIR)/volrec-view.service
	$(Q)rm -rf $(D)$(VIEW_DATADIR)
	$(Q)rmdir $(D)$(VIEW_LIBEXECDIR) $(D)$(dir $(VIEW_DATADIR)) 2>/dev/null || true

# `make demo` also runs the viewer and prints its URL (scripts/demo.sh).
demo demo-real: $(B)/bin/volrec-view $(VIEW_ASSETS_OUT)
