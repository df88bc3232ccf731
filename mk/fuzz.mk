# fuzz.mk - coverage-guided fuzzing of the checkpoint readers with clang's
# libFuzzer, and gcc-built replays of the seed corpus.  See docs/fuzz.md.
#
#   make fuzz                     build the targets (clang, ASan + UBSan) in
#                                 build-fuzz/, fuzz each for FUZZ_SECONDS
#                                 (default 60), print a table; fails when a
#                                 target crashed, naming the artifact
#   make fuzz FUZZ_SECONDS=300    longer runs
#   make fuzz-build               only build the targets
#   make fuzz-replays             $(BUILD)/fuzz/replay-<target> (gcc, no
#                                 libFuzzer): each target's properties over
#                                 the files given, for tests/ckpt/fuzz_corpus.sh
#   make fuzz-clean               remove build-fuzz/
#
# Targets (fuzz/<target>.c, each names its properties at its top):
# manifest (ckpt/manifest.c), shard (ckpt/shard_read.c, ckpt/shard.c through
# the reading API), archive (ckpt/archive_import.c).
#
# build-fuzz/ is its own directory whatever BUILD is: every ckpt/*.c of the
# library is compiled there again by clang with the fuzzer's coverage
# instrumentation.  The seed corpus fuzz/corpus/<target>/ is copied to
# build-fuzz/corpus/<target>/, which the fuzzer grows (the tree's copy is
# never written); crashes are kept in build-fuzz/artifacts/<target>/.
#
# Included by the Makefile after BUILD, CSTD, WARN, CFLAGS, CKPT_SRC and
# LDLIBS_CKPT are set.

FUZZ_TARGETS := manifest shard archive
FUZZ_DIR     := build-fuzz
FUZZ_CC      ?= clang
FUZZ_SECONDS ?= 60
FUZZ_SAN     := address,undefined
FUZZ_CFLAGS  := $(CSTD) $(WARN) -O1 -g -fno-omit-frame-pointer \
                -fno-sanitize-recover=undefined -Iinclude -Ickpt -MMD -MP
# The largest input each target gets (-max_len): room for its seeds to grow
# (manifests and multi-frame shards are a few KiB, tars 6 KiB) while each
# run stays short.
FUZZ_MAXLEN_manifest := 16384
FUZZ_MAXLEN_shard    := 16384
FUZZ_MAXLEN_archive  := 32768

FUZZ_CKPT_OBJ := $(CKPT_SRC:%.c=$(FUZZ_DIR)/obj/%.o)
FUZZ_UTIL_OBJ := $(FUZZ_DIR)/obj/fuzz/fuzz_util.o
FUZZ_BINS     := $(FUZZ_TARGETS:%=$(FUZZ_DIR)/%)
FUZZ_REPLAYS  := $(FUZZ_TARGETS:%=$(BUILD)/fuzz/replay-%)

# One step after another: the toolchain check before any compile, every
# target built before the first one runs.
fuzz:
	@$(MAKE) --no-print-directory fuzz-toolchain
	@$(MAKE) --no-print-directory fuzz-build
	@sh fuzz/run.sh $(FUZZ_DIR) '$(FUZZ_SECONDS)' \
	    $(foreach t,$(FUZZ_TARGETS),$(t):$(FUZZ_MAXLEN_$(t)))

fuzz-build: $(FUZZ_BINS)

# clang, and libFuzzer with the sanitizers: a program that links with
# -fsanitize=fuzzer,address,undefined.
fuzz-toolchain:
	@command -v $(FUZZ_CC) >/dev/null 2>&1 || { \
	    echo "make fuzz: $(FUZZ_CC) not found: libFuzzer needs clang (Debian: apt-get install clang; or FUZZ_CC=clang-NN)" >&2; \
	    exit 1; }
	@mkdir -p $(FUZZ_DIR)/probe
	@printf '%s\n' '#include <stddef.h>' '#include <stdint.h>' \
	    'int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n);' \
	    'int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { (void)d; (void)n; return 0; }' \
	    >$(FUZZ_DIR)/probe/probe.c
	@$(FUZZ_CC) -fsanitize=fuzzer,$(FUZZ_SAN) $(FUZZ_DIR)/probe/probe.c \
	    -o $(FUZZ_DIR)/probe/probe >$(FUZZ_DIR)/probe/log 2>&1 || { \
	    echo "make fuzz: $(FUZZ_CC) cannot link -fsanitize=fuzzer,$(FUZZ_SAN): libFuzzer or the sanitizer runtimes are missing (Debian: the clang package's libclang-rt-*-dev / libclang-common-*-dev):" >&2; \
	    sed 's/^/  /' $(FUZZ_DIR)/probe/log >&2; exit 1; }

$(FUZZ_DIR)/obj/ckpt/%.o: ckpt/%.c
	@mkdir -p $(@D)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link,$(FUZZ_SAN) -c $< -o $@

$(FUZZ_DIR)/obj/fuzz/%.o: fuzz/%.c
	@mkdir -p $(@D)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link,$(FUZZ_SAN) -c $< -o $@

$(FUZZ_BINS): $(FUZZ_DIR)/%: $(FUZZ_DIR)/obj/fuzz/%.o $(FUZZ_UTIL_OBJ) $(FUZZ_CKPT_OBJ)
	$(FUZZ_CC) -fsanitize=fuzzer,$(FUZZ_SAN) $^ -o $@ $(LDLIBS_CKPT) -lm

# The replays: the same targets with a main() of their own (fuzz/replay.c),
# built like the tests with $(CC) and linked with $(BUILD)/libckpt.a.
# Compiled and linked in one step, as the benchmarks are.
fuzz-replays: $(FUZZ_REPLAYS)

$(FUZZ_REPLAYS): $(BUILD)/fuzz/replay-%: fuzz/replay.c fuzz/%.c fuzz/fuzz_util.c \
                 $(BUILD)/libckpt.a
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -Ickpt $(filter %.c %.a,$^) -o $@ $(LDLIBS_CKPT) -lm

fuzz-clean:
	rm -rf $(FUZZ_DIR)

.PHONY: fuzz fuzz-build fuzz-toolchain fuzz-replays fuzz-clean
-include $(wildcard $(FUZZ_DIR)/obj/*/*.d)
