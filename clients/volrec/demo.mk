# SPDX-License-Identifier: MIT
# `make demo`: build volrecd and volrec, run the daemon on the synthetic scanner in a temporary
# run_dir, watch it, write pictures and a recording into $(B)/demo/, stop it (scripts/demo.sh).
# `make demo-real`: the same on the real calibration data in tests/data/.
# `make demo DEMO_FUNCTIONAL=1`: the flow phantom with repeats, structure + angiography + Doppler.
.PHONY: demo demo-real
demo: $(B)/bin/volrecd $(B)/bin/volrec $(B)/bin/volrec-process
	$(Q)DEMO_FUNCTIONAL=$(DEMO_FUNCTIONAL) scripts/demo.sh $(B) synth
demo-real: $(B)/bin/volrecd $(B)/bin/volrec $(B)/bin/volrec-process
	$(Q)scripts/demo.sh $(B) real
