# YAML configuration (cfg_).
ARCHIVES += cfg
cfg_SRCS := $(wildcard config/*.c)
cfg_LDLIBS := -lyaml
UNIT_SRCS += $(wildcard tests/unit/test_cfg*.c)
UNIT_ARCHIVES += cfg
