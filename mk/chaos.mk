# chaos.mk - `make chaos`: randomized failure-and-recovery trials of ftrain
# on this machine under mpirun (chaos/chaos.sh, docs/chaos.md).  Not part of
# `make check`: 100 trials take 20 to 40 minutes on 2 cores.
#
#   make chaos                              100 trials from a random seed
#   make chaos CHAOS_TRIALS=20              fewer trials
#   make chaos CHAOS_SEED=S CHAOS_TRIALS=1  replay the trial of seed S
#   make chaos BUILD=build-x                the binaries of another build
#
# Also read from the environment by chaos/chaos.sh: CHAOS_DIR (where the
# trials run and failing ones are kept), CHAOS_LAUNCH_TIMEOUT,
# CHAOS_HANG_TIMEOUT, CHAOS_KEEP.  The full-disk fault mounts a tmpfs and
# needs root; without it that fault is left out.
#
# Included by the Makefile after BUILD is set.

CHAOS_TRIALS ?= 100
CHAOS_SEED   ?=

chaos:
	$(MAKE) all
	BUILD=$(BUILD) CHAOS_TRIALS=$(CHAOS_TRIALS) CHAOS_SEED=$(CHAOS_SEED) bash chaos/chaos.sh

.PHONY: chaos
