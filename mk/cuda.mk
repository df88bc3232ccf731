# mk/cuda.mk - the optional CUDA / cuBLAS / NCCL path of ftrain (docs/gpu.md).
#
# Switches:
#   CUDA ?= auto    build the GPU path when $(NVCC) exists, else without it
#   CUDA=0          build without it: gpu_*() return GPU_ENOTBUILT,
#                   comm_open_nccl() fails with "built without NCCL"
#   CUDA=1          require it: stop with an error when nvcc is missing
#   CUDA_HOME ?= /usr/local/cuda       nvcc, headers, lib64/ (cudart; cublas, loaded
#                                      by gpu_init with dlopen, not linked)
#   NCCL_HOME       nccl.h and libnccl when they are not in CUDA_HOME
#                   (include/, lib/); NCCL=0 builds CUDA without NCCL
#   CUDA_GENCODE    device code to build (default sm_80 and sm_90 machine
#                   code plus compute_90 PTX that newer GPUs JIT-compile)
#
# Provides, for the Makefile to hook in (include this after BUILD is final,
# i.e. after the SANITIZE block):
#   CUDA_ENABLED    1 when the GPU path is built, else empty
#   CUDA_CFLAGS     add to CFLAGS: -DFTRAIN_CUDA=1 [-DFTRAIN_NCCL=1] -isystem ...
#   CUDA_OBJ        add to FTRAIN_OBJ: $(BUILD)/src/gpu/*.o from src/gpu/*.cu
#   CUDA_LDLIBS     add to LDLIBS_FTRAIN: -L... -rpath ... -lcudart
#                   [-lnccl] -lstdc++
# and the rule $(BUILD)/src/%.o: src/%.cu.  With the GPU path off all four
# variables are empty and no .cu file is compiled.

CUDA      ?= auto
CUDA_HOME ?= /usr/local/cuda
NVCC      ?= $(CUDA_HOME)/bin/nvcc
NCCL      ?= auto
NCCL_HOME ?=

ifeq ($(CUDA),auto)
  CUDA_ENABLED := $(if $(wildcard $(NVCC)),1,)
else ifeq ($(CUDA),1)
  ifeq ($(wildcard $(NVCC)),)
    $(error CUDA=1 but $(NVCC) does not exist: set CUDA_HOME, or build with CUDA=0)
  endif
  CUDA_ENABLED := 1
else ifeq ($(CUDA),0)
  CUDA_ENABLED :=
else
  $(error CUDA must be auto, 0 or 1, not '$(CUDA)')
endif

CUDA_CFLAGS :=
CUDA_OBJ    :=
CUDA_LDLIBS :=

ifneq ($(CUDA_ENABLED),)
  CUDA_LIBDIR  := $(CUDA_HOME)/lib64
  CUDA_CFLAGS  := -DFTRAIN_CUDA=1 -isystem $(CUDA_HOME)/include
  # cuBLAS is not linked: gpu_init() dlopens it (0.6 s of CPU saved in
  # every process that uses no GPU); its build-time folder is the fallback.
  CUDA_LDLIBS  := -L$(CUDA_LIBDIR) -Wl,-rpath,$(CUDA_LIBDIR) -lcudart

  # NCCL: NCCL_HOME first, then CUDA_HOME; missing NCCL only drops the
  # NCCL backend (CUDA=1 does not require it, NCCL=1 does).
  ifneq ($(NCCL),0)
    NCCL_INCDIR := $(firstword $(foreach d,$(NCCL_HOME) $(CUDA_HOME),\
                     $(if $(wildcard $(d)/include/nccl.h),$(d)/include,)))
    ifneq ($(NCCL_INCDIR),)
      NCCL_LIBDIR := $(firstword $(foreach d,$(NCCL_HOME) $(CUDA_HOME),\
                       $(if $(wildcard $(d)/lib64/libnccl.so $(d)/lib/libnccl.so),\
                         $(dir $(firstword $(wildcard $(d)/lib64/libnccl.so $(d)/lib/libnccl.so))),)))
      CUDA_CFLAGS += -DFTRAIN_NCCL=1
      ifneq ($(NCCL_INCDIR),$(CUDA_HOME)/include)
        CUDA_CFLAGS += -isystem $(NCCL_INCDIR)
      endif
      ifneq ($(NCCL_LIBDIR),)
        ifneq ($(NCCL_LIBDIR),$(CUDA_LIBDIR)/)
          CUDA_LDLIBS += -L$(NCCL_LIBDIR) -Wl,-rpath,$(NCCL_LIBDIR)
        endif
      endif
      CUDA_LDLIBS += -lnccl
    else ifeq ($(NCCL),1)
      $(error NCCL=1 but nccl.h is in neither NCCL_HOME nor CUDA_HOME/include)
    endif
  endif
  CUDA_LDLIBS += -lstdc++

  # Device code: machine code for A100 (sm_80) and H100 (sm_90), plus
  # compute_90 PTX for anything newer.  Two machine-code targets keep the
  # build short on small machines.
  CUDA_GENCODE ?= -gencode arch=compute_80,code=sm_80 \
                  -gencode arch=compute_90,code=[sm_90,compute_90]
  # -fmad=false: no contraction of a*b+c into an FMA, so the optimizer and
  # fixed-point kernels round every operation as the host does (the kernels
  # also use the _rn intrinsics); IEEE division and sqrt are nvcc's default.
  NVCCFLAGS ?= -O2 -std=c++17 -fmad=false -Xcompiler -fPIC \
               -Xcompiler -Wall,-Wextra,-Wshadow,-Wno-unused-parameter
  CUDA_NVCC_ALL = $(NVCCFLAGS) $(CUDA_GENCODE) $(CUDA_CFLAGS) -Iinclude -Isrc \
                  -DFTRAIN_CUDA_LIBDIR='"$(CUDA_LIBDIR)"' -MMD -MP

  CUDA_OBJ := $(patsubst src/%.cu,$(BUILD)/src/%.o,$(wildcard src/gpu/*.cu))

$(BUILD)/src/%.o: src/%.cu
	@mkdir -p $(@D)
	$(NVCC) $(CUDA_NVCC_ALL) -c $< -o $@
endif
