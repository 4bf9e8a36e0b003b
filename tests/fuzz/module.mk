# SPDX-License-Identifier: MIT
# Fuzz harnesses (libFuzzer, clang): the parsers of untrusted input (docs/fuzzing.md).
#   make fuzz           build $(B)/fuzz/fuzz_* and run each for FUZZ_SECONDS (or FUZZ_RUNS
#                       executions), one after the other in one process, fail on a finding
#   make fuzz-regress   run each harness once over its seed corpus only (part of `make test`;
#                       skipped with a message where clang cannot link libFuzzer)
# The harnesses compile the parsing code themselves with clang (coverage, ASan, UBSan); they
# do not use the archives, which the configured CC builds.
FUZZ_CC ?= clang
FUZZ_SECONDS ?= 60
FUZZ_RUNS ?=
FUZZ_ARGS ?=
FUZZ_HARNESSES := cfg replay ipc ctl text views shim_args viewmsg viewhttp viewtokens
FUZZ_SAN := -fsanitize=address,undefined -fno-sanitize-recover=all
FUZZ_CFLAGS := -std=c11 -g -O1 -fno-omit-frame-pointer -Wall -Wextra -Werror -Wno-unused-parameter \
	-pthread -MMD -MP $(FUZZ_SAN) -fsanitize=fuzzer-no-link

fuzz_cfg_SRCS = tests/fuzz/fuzz_cfg.c $(cfg_SRCS) base/err.c
fuzz_cfg_LIBS = -lyaml -lm
fuzz_replay_SRCS = tests/fuzz/fuzz_replay.c $(src_SRCS) $(sim_SRCS) $(cfg_SRCS) $(base_SRCS)
fuzz_replay_LIBS = -lyaml -ldl -lfftw3f_threads -lfftw3f -ljson-c -lm
fuzz_ipc_SRCS = tests/fuzz/fuzz_ipc.c ipc/proto.c base/err.c base/clock.c
fuzz_ipc_LIBS =
fuzz_ctl_SRCS = tests/fuzz/fuzz_ctl.c daemon/vrd_ctl.c $(cfg_SRCS) $(base_SRCS)
fuzz_ctl_LIBS = -lzmq -ljson-c -lyaml -lm
fuzz_text_SRCS = tests/fuzz/fuzz_text.c $(src_SRCS) $(sim_SRCS) $(cfg_SRCS) $(base_SRCS)
fuzz_text_LIBS = $(fuzz_replay_LIBS)
fuzz_views_SRCS = tests/fuzz/fuzz_views.c ipc/proto.c base/err.c base/clock.c
fuzz_views_LIBS = -lzmq
fuzz_shim_args_SRCS = tests/fuzz/fuzz_shim_args.c sources/shim_args.c base/err.c
fuzz_shim_args_LIBS = -lyaml -lm
fuzz_viewmsg_SRCS = tests/fuzz/fuzz_viewmsg.c clients/view/msg.c clients/view/frame.c $(base_SRCS)
fuzz_viewmsg_LIBS = -ljson-c -lz -lm
fuzz_viewhttp_SRCS = tests/fuzz/fuzz_viewhttp.c clients/view/access.c $(base_SRCS)
fuzz_viewhttp_LIBS = -ljson-c -lm
fuzz_viewtokens_SRCS = tests/fuzz/fuzz_viewtokens.c clients/view/access.c $(base_SRCS)
fuzz_viewtokens_LIBS = -ljson-c -lm
# Seed corpora (read only): the committed seeds of each harness, then existing examples.
fuzz_cfg_SEEDS = tests/fuzz/seeds/cfg config/examples tests/config/bad
fuzz_replay_SEEDS = tests/fuzz/seeds/replay tests/replay/bad
fuzz_ipc_SEEDS = tests/fuzz/seeds/ipc
fuzz_ctl_SEEDS = tests/fuzz/seeds/ctl
fuzz_text_SEEDS = tests/fuzz/seeds/text
fuzz_views_SEEDS = tests/fuzz/seeds/views
fuzz_shim_args_SEEDS = tests/fuzz/seeds/shim_args
fuzz_viewmsg_SEEDS = tests/fuzz/seeds/viewmsg
fuzz_viewhttp_SEEDS = tests/fuzz/seeds/viewhttp
fuzz_viewtokens_SEEDS = tests/fuzz/seeds/viewtokens
# libFuzzer options per harness (-max_len: a replay seed holds a 4 KiB header and data).
fuzz_cfg_OPTS = -dict=tests/fuzz/cfg.dict
fuzz_replay_OPTS = -max_len=16384
fuzz_ipc_OPTS = -max_len=4096
fuzz_ctl_OPTS = -dict=tests/fuzz/ctl.dict -max_len=4096
fuzz_text_OPTS = -max_len=1024
fuzz_views_OPTS = -max_len=4096
fuzz_shim_args_OPTS = -dict=tests/fuzz/shim_args.dict -max_len=8192
fuzz_viewmsg_OPTS = -dict=tests/fuzz/viewmsg.dict -max_len=4096
fuzz_viewhttp_OPTS = -dict=tests/fuzz/viewhttp.dict -max_len=2048
fuzz_viewtokens_OPTS = -max_len=2048
# The shell case that sets opts and seeds for harness $$h in the recipes below.
fuzz_rparen := )
fuzz_case = case $$h in $(foreach h,$(FUZZ_HARNESSES),$(h)$(fuzz_rparen) \
	opts='$(fuzz_$(h)_OPTS)'; seeds='$(fuzz_$(h)_SEEDS)';;) esac

fuzz_obj = $(patsubst %.c,$(B)/fuzz/obj/%.o,$(1))

$(B)/fuzz/obj/%.o: %.c
	$(call msg,FUZZCC,$<)
	@mkdir -p $(@D)
	$(Q)$(FUZZ_CC) $(CPPFLAGS) $(FUZZ_CFLAGS) -c -o $@ $<

define fuzz_link_rule
$(B)/fuzz/fuzz_$(1): $(call fuzz_obj,$(fuzz_$(1)_SRCS))
	$$(call msg,FUZZLD,$$@)
	$(Q)$(FUZZ_CC) -pthread $(FUZZ_SAN) -fsanitize=fuzzer -o $$@ $$^ $(fuzz_$(1)_LIBS)
FUZZ_OBJS += $(call fuzz_obj,$(fuzz_$(1)_SRCS))
endef
$(foreach h,$(FUZZ_HARNESSES),$(eval $(call fuzz_link_rule,$(h))))
-include $(FUZZ_OBJS:.o=.d)

# Whether FUZZ_CC links a libFuzzer program (Debian: clang and libclang-rt-<version>-dev).
fuzz_probe = { mkdir -p $(B)/fuzz && \
	printf 'int LLVMFuzzerTestOneInput(const char *d, unsigned long n) { return 0; }\n' | \
	$(FUZZ_CC) -x c -fsanitize=fuzzer,address,undefined -o $(B)/fuzz/.probe - >/dev/null 2>&1; }

.PHONY: fuzz fuzz-build fuzz-regress
fuzz-build: $(FUZZ_HARNESSES:%=$(B)/fuzz/fuzz_%)

# -timeout=1: an input taking more than a second is a finding (a hang), as is any crash,
# leak or UBSan report; the reproducer lands in $(B)/fuzz/artifacts/.
fuzz:
	$(Q)$(fuzz_probe) || { echo "fuzz: $(FUZZ_CC) cannot link libFuzzer (install clang and libclang-rt-dev)" >&2; exit 1; }
	$(Q)$(MAKE) --no-print-directory fuzz-build
	$(Q)set -e; for h in $(FUZZ_HARNESSES); do \
		printf '  %-7s %s\n' FUZZ "fuzz_$$h for $(if $(FUZZ_RUNS),$(FUZZ_RUNS) executions,$(FUZZ_SECONDS) s)"; \
		mkdir -p $(B)/fuzz/corpus/$$h $(B)/fuzz/artifacts; \
		$(fuzz_case); \
		$(B)/fuzz/fuzz_$$h $$opts $(if $(FUZZ_RUNS),-runs=$(FUZZ_RUNS),-max_total_time=$(FUZZ_SECONDS)) -timeout=1 \
			-rss_limit_mb=2048 -print_final_stats=1 \
			-artifact_prefix=$(B)/fuzz/artifacts/$$h- $(FUZZ_ARGS) \
			$(B)/fuzz/corpus/$$h $$seeds > $(B)/fuzz/$$h.log 2>&1 || \
			{ tail -40 $(B)/fuzz/$$h.log; echo "fuzz_$$h: a finding, see $(B)/fuzz/$$h.log and $(B)/fuzz/artifacts/" >&2; exit 1; }; \
		grep -E '^stat::number_of_executed_units|^stat::average_exec_per_sec' $(B)/fuzz/$$h.log | sed 's/^/          /'; \
	done

# No mutation: each seed once (-runs=0), with a generous per-input limit for a loaded machine.
fuzz-regress:
	$(Q)if ! $(fuzz_probe); then \
		echo "  SKIP    fuzz-regress: $(FUZZ_CC) cannot link libFuzzer (clang, libclang-rt-dev)"; \
	else \
		$(MAKE) --no-print-directory fuzz-build && \
		for h in $(FUZZ_HARNESSES); do \
			$(fuzz_case); \
			printf '  %-7s %s\n' FUZZ "fuzz_$$h over its seeds"; \
			$(B)/fuzz/fuzz_$$h $$opts -runs=0 -timeout=30 \
				-artifact_prefix=$(B)/fuzz/regress-$$h- $$seeds > $(B)/fuzz/regress-$$h.log 2>&1 || \
				{ tail -40 $(B)/fuzz/regress-$$h.log; echo "fuzz_$$h: a seed fails" >&2; exit 1; }; \
		done; \
	fi

test check: fuzz-regress
