# CUDA backend (gpu_): built only when nvcc is found.
ifeq ($(HAVE_CUDA),1)
ARCHIVES += gpu
gpu_SRCS := $(wildcard gpu/*.cu gpu/*.c)
gpu_LDLIBS = $(CUDA_LDLIBS)
endif
