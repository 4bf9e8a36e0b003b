# The backend interface (be_): the wrappers that enforce the epoch rules for every backend and
# the numerical tables both backends use (archive be, below cpu and gpu), and the selection
# be_open (archive beopen, above cpu and gpu: it knows both). The daemon and tools link
# CORE_ARCHIVES.
ARCHIVES += be beopen
be_SRCS := backend/backend.c backend/motion.c backend/register.c backend/tables.c backend/views.c
beopen_SRCS := backend/open.c
UNIT_SRCS += tests/unit/test_tables.c
# The compensated mode's host estimator runs once per epoch on the critical path: vectorize it.
$(B)/obj/backend/motion.o: CFLAGS += -O3 -fno-math-errno
