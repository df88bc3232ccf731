# ftrain - build, test, demo, bench.  See README.md.
#
#   make            build build/ftrain and build/ckptctl
#   make check      install missing packages, build, run every test under prove
#   make check-quick   the quick tier: every subsystem in a few minutes
#   make demo       install missing packages, build, run the main job
#   make bench      print speed figures beside the peers
#   make SANITIZE=1 check   the suite under ASan + UBSan
#   make SANITIZE=thread check   the suite under ThreadSanitizer
#   make fuzz       coverage-guided fuzzing of the checkpoint readers (clang)
#   make chaos      randomized failure-and-recovery trials
#   make install    install the programs, libftrain-ckpt, headers, man pages
#                   and the batch script (PREFIX, DESTDIR: mk/install.mk)
#   make clean      remove build, build-san and build-tsan, or only the BUILD directory
#                   when BUILD is given

CC       ?= cc
BUILD    ?= build
CSTD     := -std=c11 -D_GNU_SOURCE
WARN     := -Wall -Wextra -Wshadow
OPT      ?= -O2 -g
# -fno-math-errno lets llrint() compile to one instruction; nothing reads errno
# after a math call.
CFLAGS   += $(CSTD) $(WARN) $(OPT) -fno-math-errno -Iinclude -MMD -MP
LDLIBS_CKPT := -lzstd -lxxhash -ljansson -larchive -lpthread
MPI_CFLAGS  := $(shell mpicc --showme:compile 2>/dev/null)
MPI_LIBS    := $(shell mpicc --showme:link 2>/dev/null)
BLAS_CFLAGS := $(shell pkg-config --cflags openblas 2>/dev/null)
BLAS_LIBS   := $(shell pkg-config --libs openblas 2>/dev/null || echo -lopenblas)
LDLIBS_FTRAIN := $(MPI_LIBS) $(BLAS_LIBS) -lz -lm

ifeq ($(SANITIZE),1)
  CFLAGS  += -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
  LDFLAGS += -fsanitize=address,undefined
  BUILD   := build-san
  # Open MPI keeps allocations for the life of the process and unloads its
  # components at exit; keep them loaded so the leak stacks resolve, and
  # suppress only Open MPI's own (tests/lsan.supp).
  export OMPI_MCA_mca_base_component_disable_dlclose := 1
  export LSAN_OPTIONS := suppressions=$(CURDIR)/tests/lsan.supp:print_suppressions=0:fast_unwind_on_malloc=0:malloc_context_size=20
  export ASAN_OPTIONS := abort_on_error=0:detect_leaks=1
endif
# SANITIZE=thread: ThreadSanitizer, the data races and lock-order problems
# between our threads (save, local tier, watchdog, readers).  As with
# SANITIZE=1 the shared library and the LD_PRELOAD shims stay unsanitized;
# tests/tsan.supp silences only what lies in Open MPI (not instrumented).
ifeq ($(SANITIZE),thread)
  OPT     := -O1 -g
  CFLAGS  += -fsanitize=thread -fno-omit-frame-pointer
  LDFLAGS += -fsanitize=thread
  BUILD   := build-tsan
  export TSAN_OPTIONS ?= suppressions=$(CURDIR)/tests/tsan.supp:halt_on_error=0:second_deadlock_stack=1:history_size=7
endif

# The layers of the house, bottom up.  A file may include headers of its
# own folder and of the folders before it, never of one after it
# (tests/house/layers.sh checks every #include against this list):
#   include/ftrain  the installed API: libftrain-ckpt (ckpt.h, ckpt_local.h,
#                   ckpt_stop.h) and the exit codes ftrain and its callers share
#   ckpt/           the checkpoint library (no MPI, no model), libckpt.a and
#                   libftrain-ckpt.so
#   ckptctl/        the CLI over the public API
#   src/util        error text, mkdir -p, names      (ftrain from here up)
#   src/nn          model, optimizers, data, sampler
#   src/config      the options: one table, parsing, checks, --help
#   src/parallel    world, communicators (MPI, NCCL), device choice, the
#                   liveness ring
#   src/gpu         the CUDA model and kernels, the cuBLAS loader, the stub
#                   without CUDA
#   src/fault       signals and the stop agreement, the watchdog
#   src/state       what a checkpoint holds for ftrain, which one to resume
#   src/tier        the node-local tier: placement, save phases, partners
#   src/train       the loop, one step, setup, save paths, GPU mirror, metrics
#   src/app         main, the launch lock
SRC_LAYERS := util nn config parallel gpu fault state tier train app
CKPT_SRC   := $(wildcard ckpt/*.c)
CKPTCTL_SRC := $(wildcard ckptctl/*.c)
FTRAIN_SRC := $(filter-out src/app/main.c,$(foreach l,$(SRC_LAYERS),$(wildcard src/$(l)/*.c)))
# Tests live in tests/SUBJECT/ (one folder per subsystem, docs/testing.md);
# tests/tools and tests/preload hold helpers the tests run, not tests.
TEST_SRC   := $(filter-out tests/tools/% tests/preload/%,$(wildcard tests/*/*.c))
CKPT_OBJ   := $(CKPT_SRC:%.c=$(BUILD)/%.o)
CKPTCTL_OBJ := $(CKPTCTL_SRC:ckptctl/%.c=$(BUILD)/ckptctl-obj/%.o)
FTRAIN_OBJ := $(FTRAIN_SRC:%.c=$(BUILD)/%.o)
TESTS      := $(TEST_SRC:tests/%.c=$(BUILD)/tests/%.t)
TOOLS      := $(patsubst tests/tools/%.c,$(BUILD)/tests/tools/%,$(wildcard tests/tools/*.c))
PRELOADS   := $(patsubst tests/preload/%.c,$(BUILD)/tests/preload/%.so,$(wildcard tests/preload/*.c))

# The GPU path (CUDA, cuBLAS, NCCL) when nvcc is found; CUDA=0 builds
# without it.  See mk/cuda.mk and docs/gpu.md.
include mk/cuda.mk
CFLAGS        += $(CUDA_CFLAGS)
FTRAIN_OBJ    += $(CUDA_OBJ)
LDLIBS_FTRAIN += $(CUDA_LDLIBS)

# The checkpoint library as a shared library for other trainers (README,
# "Using the library from another trainer"): libftrain-ckpt.so.2.0.0 with
# the SONAME libftrain-ckpt.so.2, and the .so.2 and .so links beside it.
# ("libckpt", the static archive's name, is taken by other checkpoint
# libraries, BLCR's among them.)  Its objects are compiled apart from the
# archive's: -fPIC, and -fvisibility=hidden so that only the functions the
# public headers mark CKPT_API are exported (tests/ckpt/shared_lib.sh checks).
CKPT_SO_MAJOR   := 2
CKPT_SO_VERSION := 2.0.0
CKPT_SONAME     := libftrain-ckpt.so.$(CKPT_SO_MAJOR)
CKPT_SO         := $(BUILD)/libftrain-ckpt.so.$(CKPT_SO_VERSION)
CKPT_SO_LINKS   := $(BUILD)/$(CKPT_SONAME) $(BUILD)/libftrain-ckpt.so
CKPT_PIC_OBJ    := $(CKPT_SRC:%.c=$(BUILD)/pic/%.o)

all: $(BUILD)/ftrain $(BUILD)/ckptctl $(CKPT_SO) $(CKPT_SO_LINKS) $(TESTS) $(TOOLS) $(PRELOADS)

$(BUILD)/src/%.o: src/%.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -Isrc $(MPI_CFLAGS) $(BLAS_CFLAGS) -c $< -o $@

# The stubs of the GPU API (built without CUDA) ignore their arguments.
$(BUILD)/src/gpu/gpu_stub.o: CFLAGS += -Wno-unused-parameter

$(BUILD)/ckpt/%.o: ckpt/%.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -c $< -o $@

# (Objects in ckptctl-obj/: $(BUILD)/ckptctl is the program.)
$(BUILD)/ckptctl-obj/%.o: ckptctl/%.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -c $< -o $@

# The shared library's objects (see CKPT_SO).  Never sanitized, even with
# SANITIZE=1: the programs that load it (a Python interpreter) are not, and
# the sanitizers' runtime must come first in a process.
CKPT_SO_CFLAGS  = $(filter-out -fsanitize=% -fno-sanitize-recover=%,$(CFLAGS))
CKPT_SO_LDFLAGS = $(filter-out -fsanitize=%,$(LDFLAGS))
$(BUILD)/pic/ckpt/%.o: ckpt/%.c
	@mkdir -p $(@D)
	$(CC) $(CKPT_SO_CFLAGS) -fPIC -fvisibility=hidden -c $< -o $@

# The byte (un)shuffle loops of the shard codec vectorize with gcc's dynamic
# cost model (about 2-4x faster than the -O2 default's "very cheap" model).
$(BUILD)/ckpt/shard.o $(BUILD)/pic/ckpt/shard.o: CFLAGS += -ftree-vectorize -fvect-cost-model=dynamic

$(BUILD)/tests/%.o: tests/%.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -Isrc $(MPI_CFLAGS) $(BLAS_CFLAGS) -Itests -c $< -o $@

# An archive is written anew (rm first), and also when its member list
# changes (LIB.members, rewritten only then): `ar r` into an old archive
# keeps the members of sources removed or renamed since, whose stale
# symbols then clash with the new ones.
$(BUILD)/%.members: FORCE
	@mkdir -p $(@D)
	@echo '$(MEMBERS_$*)' | cmp -s - $@ 2>/dev/null || echo '$(MEMBERS_$*)' >$@
MEMBERS_libckpt   = $(CKPT_OBJ)
MEMBERS_libftrain = $(FTRAIN_OBJ)

$(BUILD)/libckpt.a: $(CKPT_OBJ) $(BUILD)/libckpt.members
	rm -f $@
	ar rcs $@ $(filter %.o,$^)

# -z defs: every symbol the library uses comes from the libraries named
# here; --as-needed: only those it uses are recorded as needed.
$(CKPT_SO): $(CKPT_PIC_OBJ)
	$(CC) $(CKPT_SO_LDFLAGS) -shared -Wl,-soname,$(CKPT_SONAME) -Wl,-z,defs -Wl,--as-needed \
	    $^ -o $@ $(LDLIBS_CKPT)

$(BUILD)/$(CKPT_SONAME): $(CKPT_SO)
	ln -sf $(notdir $<) $@

$(BUILD)/libftrain-ckpt.so: $(BUILD)/$(CKPT_SONAME)
	ln -sf $(notdir $<) $@

$(BUILD)/libftrain.a: $(FTRAIN_OBJ) $(BUILD)/libftrain.members
	rm -f $@
	ar rcs $@ $(filter %.o,$^)

$(BUILD)/ftrain: $(BUILD)/src/app/main.o $(BUILD)/libftrain.a $(BUILD)/libckpt.a
	$(CC) $(LDFLAGS) $^ -o $@ $(LDLIBS_FTRAIN) $(LDLIBS_CKPT)

$(BUILD)/ckptctl: $(CKPTCTL_OBJ) $(BUILD)/libckpt.a
	$(CC) $(LDFLAGS) $^ -o $@ $(LDLIBS_CKPT) -lm

# The checkpoint library's tests (tests/ckpt/) use only it (no MPI, no BLAS).
$(BUILD)/tests/ckpt/%.t: $(BUILD)/tests/ckpt/%.o $(BUILD)/libckpt.a
	$(CC) $(LDFLAGS) $^ -o $@ $(LDLIBS_CKPT) -lm

$(BUILD)/tests/%.t: $(BUILD)/tests/%.o $(BUILD)/libftrain.a $(BUILD)/libckpt.a
	$(CC) $(LDFLAGS) $^ -o $@ $(LDLIBS_FTRAIN) $(LDLIBS_CKPT)

# ftrain-supervise (supervise/, the top layer beside src/app): its objects
# in libsupervise.a, and its tests (tests/supervise/) linked with it.  It
# may include headers of the SRC layers SUPERVISE_USES only (tests/house/layers.sh
# checks), written "supervise/x.h" and "layer/x.h" (-I. -Isrc).
SUPERVISE_USES := util fault
SUPERVISE_SRC  := $(filter-out supervise/main.c,$(wildcard supervise/*.c))
SUPERVISE_OBJ  := $(SUPERVISE_SRC:%.c=$(BUILD)/%.o)
MEMBERS_libsupervise = $(SUPERVISE_OBJ)
all: $(BUILD)/libsupervise.a $(BUILD)/ftrain-supervise
$(BUILD)/supervise/%.o: supervise/%.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -I. -Isrc -c $< -o $@
$(BUILD)/libsupervise.a: $(SUPERVISE_OBJ) $(BUILD)/libsupervise.members
	rm -f $@
	ar rcs $@ $(filter %.o,$^)
$(BUILD)/tests/supervise/%.o: CFLAGS += -I.
# The program: main.c and libsupervise.a; the failure records' reader and
# the helpers of src/fault and src/util come from libftrain.a.
$(BUILD)/ftrain-supervise: $(BUILD)/supervise/main.o $(BUILD)/libsupervise.a $(BUILD)/libftrain.a $(BUILD)/libckpt.a
	$(CC) $(LDFLAGS) $^ -o $@ $(LDLIBS_FTRAIN) $(LDLIBS_CKPT)
$(BUILD)/tests/supervise/%.t: $(BUILD)/tests/supervise/%.o $(BUILD)/libsupervise.a $(BUILD)/libftrain.a $(BUILD)/libckpt.a
	$(CC) $(LDFLAGS) $^ -o $@ $(LDLIBS_FTRAIN) $(LDLIBS_CKPT)

# Helper programs the tests run (fixture makers), not tests themselves.
$(BUILD)/tests/tools/%: tests/tools/%.c $(BUILD)/libckpt.a
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -Itests $(filter %.c %.a,$^) -o $@ $(LDLIBS_CKPT) -lm
# run_facts reads a run directory with ftrain's own readers (heartbeats,
# failure records): it links the supervisor's and src/fault's.
$(BUILD)/tests/tools/run_facts: tests/tools/run_facts.c $(BUILD)/libsupervise.a $(BUILD)/libftrain.a $(BUILD)/libckpt.a
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -I. -Isrc -Itests $(filter %.c %.a,$^) -o $@ $(LDLIBS_FTRAIN) $(LDLIBS_CKPT) -lm

# LD_PRELOAD shims the tests use for fault injection (never sanitized:
# they replace the allocator).
$(BUILD)/tests/preload/%.so: tests/preload/%.c
	@mkdir -p $(@D)
	$(CC) -std=c11 -O2 -Wall -Wextra -fPIC -shared $< -o $@

deps:
	@sh scripts/deps.sh

# The suite: tests/run.sh runs it under prove, in parallel where that is
# safe, with each file's time and a guard that fails on a skip whose reason
# is not in tests/skips-allowed.txt (docs/testing.md).  check-quick is the
# inner loop's tier (tests/tiers.txt): a few minutes, every subsystem.
check: deps
	$(MAKE) all
	BUILD=$(BUILD) sh tests/run.sh full

check-quick: deps
	$(MAKE) all
	BUILD=$(BUILD) sh tests/run.sh quick

demo: deps
	$(MAKE) all
	BUILD=$(BUILD) sh scripts/demo.sh

BENCHES := $(patsubst bench/%.c,$(BUILD)/bench/%,$(wildcard bench/*.c))

bench: deps
	$(MAKE) all $(BENCHES)
	BUILD=$(BUILD) sh bench/run.sh

# Benchmark programs: bench/NAME.c -> build/bench/NAME (MPI, BLAS, ckpt).
# Compiled and linked in one step: -MMD lists headers among the
# prerequisites, so only the sources and libraries of $^ are passed.
$(BUILD)/bench/%: bench/%.c $(BUILD)/libftrain.a $(BUILD)/libckpt.a
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -Isrc $(MPI_CFLAGS) $(BLAS_CFLAGS) $(filter %.c %.a,$^) -o $@ $(LDLIBS_FTRAIN) $(LDLIBS_CKPT)

# Without BUILD given (command line or environment), the default build
# directories; with it, only that one.  A BUILD that would name the source
# tree or the root is refused.
CLEAN_DIRS := $(if $(filter command line environment,$(origin BUILD)),$(BUILD),build build-san build-tsan)

clean:
	@for d in $(CLEAN_DIRS); do \
	    case $$d in .|./|..|../|/|'') echo "clean: refusing to remove '$$d' (BUILD)" >&2; exit 1 ;; esac; \
	done
	rm -rf $(CLEAN_DIRS)

FORCE:

# Fault-finding runs outside `make check`: `make fuzz` (libFuzzer targets,
# mk/fuzz.mk) and `make chaos` (randomized failure trials, mk/chaos.mk).
-include mk/fuzz.mk mk/chaos.mk
# The fuzz targets' replay drivers (gcc) run the seed corpus in make check.
all: $(FUZZ_REPLAYS)
# make install / make uninstall (PREFIX, DESTDIR): mk/install.mk.
include mk/install.mk

.PHONY: all deps check check-quick demo bench clean FORCE
-include $(shell find $(BUILD) -name '*.d' -type f 2>/dev/null)
