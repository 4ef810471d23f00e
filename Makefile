# pmckpt -- checkpointing on persistent memory.  Plain GNU make.
#
#   make                  libraries and tools into build/
#   make check            build and run every test under prove (TAP)
#   make check SANITIZE=1 the same under ASan+UBSan (build/asan)
#   make check TSAN=1     the same under ThreadSanitizer (build/tsan)
#   make demo             the synthetic training loop with crash and recovery
#   make bench            throughput ratios against baselines measured in the same run
#   make soak TRIALS=N    N kill-and-recover trials (soak-mpi, soak-dist: multi-rank)
#   make install PREFIX=/usr/local DESTDIR=

PREFIX  ?= /usr/local
LIBDIR  ?= $(PREFIX)/lib
INCDIR  ?= $(PREFIX)/include
BINDIR  ?= $(PREFIX)/bin
PCDIR   ?= $(LIBDIR)/pkgconfig
VERSION := 0.1.0
SOVER   := 0

CC      ?= cc
PKG_CONFIG ?= pkg-config
# Packages of each library: its shared object links these alone.
PMALLOC_DEPS := libpmem2 libxxhash numa json-c libndctl libdaxctl
RUNTIME_DEPS := libpmem2 libxxhash numa json-c
DDIO_DEPS    := libpci json-c
DEPS    := $(sort $(PMALLOC_DEPS) $(RUNTIME_DEPS) $(DDIO_DEPS))

ifeq ($(SANITIZE),1)
BUILD   ?= build/asan
SANFLAGS := -fsanitize=address -fsanitize=undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
else ifeq ($(TSAN),1)
BUILD   ?= build/tsan
SANFLAGS := -fsanitize=thread
else
BUILD   ?= build
endif

# Configuration, before anything reads a package's flags: $(CONFIG) is
# remade on every run (tools/install-deps installs what is missing, then the
# flags are read) but rewritten only when it changes, and GNU make restarts
# with the new one.  A fresh machine thus links against the packages it has
# just installed.  Goals that need no package (clean, check-fresh) skip it;
# the test goals install the test packages (Open MPI, prove) too.
.DEFAULT_GOAL := all
CONFIG     := $(BUILD)/config.mk
GOALS      := $(or $(MAKECMDGOALS),all)
TEST_GOALS := check check-vm bench soak soak-mpi soak-dist tests python-env
NEED_CONFIG := $(filter-out clean check-fresh,$(GOALS))
ifneq ($(NEED_CONFIG),)
include $(CONFIG)
endif
$(CONFIG): FORCE
	@mkdir -p $(@D)
	@tools/install-deps $(if $(filter $(TEST_GOALS),$(GOALS)),--test)
	@{ echo "# written by the Makefile from pkg-config; do not edit"; \
	   echo "CONFIG_LOADED := 1"; \
	   echo "DEP_CFLAGS := $$($(PKG_CONFIG) --cflags $(DEPS))"; \
	   echo "DEP_LIBS := $$($(PKG_CONFIG) --libs $(DEPS))"; \
	   echo "PMALLOC_LIBS := $$($(PKG_CONFIG) --libs $(PMALLOC_DEPS))"; \
	   echo "RUNTIME_LIBS := $$($(PKG_CONFIG) --libs $(RUNTIME_DEPS))"; \
	   echo "DDIO_LIBS := $$($(PKG_CONFIG) --libs $(DDIO_DEPS))"; \
	   echo "PMEMOBJ_LIBS := $$($(PKG_CONFIG) --libs libpmemobj)"; \
	   echo "FOUND_MPICC := $$(command -v mpicc)"; \
	   echo "FOUND_NVCC := $$(ls /usr/local/cuda/bin/nvcc 2>/dev/null || command -v nvcc)"; \
	 } > $@.tmp
	@cmp -s $@.tmp $@ && rm -f $@.tmp || mv -f $@.tmp $@
FORCE:
.PHONY: FORCE

CFLAGS  ?= -O2 -g
CFLAGS  += -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -fPIC -pthread \
           -Iinclude $(DEP_CFLAGS) $(SANFLAGS)
LDFLAGS += -pthread $(SANFLAGS)
LDLIBS  += $(DEP_LIBS)

# CUDA: built when nvcc is found, CUDA=1 requires it, CUDA=0 leaves it out.
NVCC    ?= $(FOUND_NVCC)
CUDA    ?= $(if $(NVCC),1,0)
CUDA_HOME ?= $(patsubst %/bin/nvcc,%,$(NVCC))
# sm_90 (Hopper) code plus PTX for later GPUs to compile at load time.
NVCCFLAGS ?= -O2 -g -std=c++17 -gencode arch=compute_90,code=sm_90 \
             -gencode arch=compute_90,code=compute_90
NVCCFLAGS += -Iinclude -Xcompiler -fPIC,-Wall,-Wextra,-Werror $(foreach f,$(SANFLAGS),-Xcompiler $(f))

# MPI: libpmckpt_mpi (collectives over MPI) when mpicc is found, MPI=1 requires it, MPI=0 leaves it out.
MPICC   ?= $(FOUND_MPICC)
MPI     ?= $(if $(MPICC),1,0)

PMALLOC_SRC := $(wildcard pmalloc/*.c)
DDIO_SRC    := $(wildcard ddio/*.c)
RUNTIME_SRC := $(filter-out runtime/gpu_none.c,$(wildcard runtime/*.c))
TOOL_SRC    := $(wildcard tools/*.c)
TOOLLIB     := $(BUILD)/libtoolutil.a
TEST_SRC    := $(wildcard tests/*.c)

PMALLOC_OBJ := $(PMALLOC_SRC:%.c=$(BUILD)/%.o)
DDIO_OBJ    := $(DDIO_SRC:%.c=$(BUILD)/%.o)
RUNTIME_OBJ := $(RUNTIME_SRC:%.c=$(BUILD)/%.o)
ifeq ($(CUDA),1)
ifeq ($(CONFIG_LOADED)$(NVCC),1)
$(error CUDA=1 but no nvcc found: set NVCC=/path/to/nvcc)
endif
RUNTIME_OBJ += $(BUILD)/runtime/gpu.o
CUDA_LIBS := -L$(CUDA_HOME)/lib64 -lcudart_static -ldl -lrt -lstdc++
LDLIBS  += $(CUDA_LIBS)
CFLAGS  += -DPMCK_HAVE_CUDA -I$(CUDA_HOME)/include
else
RUNTIME_OBJ += $(BUILD)/runtime/gpu_none.o
endif
TOOLS       := $(TOOL_SRC:tools/%.c=$(BUILD)/%)
TESTS       := $(TEST_SRC:tests/%.c=$(BUILD)/tests/%)
LIBS_A      := $(BUILD)/libpmckpt.a $(BUILD)/libpmalloc.a $(BUILD)/libddio.a
LIBS_SO     := $(BUILD)/libpmalloc.so.$(SOVER) $(BUILD)/libpmckpt.so.$(SOVER)
PCS         := $(BUILD)/pmalloc.pc $(BUILD)/pmckpt.pc

ifeq ($(MPI),1)
ifeq ($(CONFIG_LOADED)$(MPICC),1)
$(error MPI=1 but no mpicc found: install libopenmpi-dev or set MPICC)
endif
MPI_LIB     := $(BUILD)/libpmckpt_mpi.a
MPI_TESTS   := $(patsubst tests/mpi/%.c,$(BUILD)/tests/mpi/%,$(wildcard tests/mpi/*.c))
MPI_TOOLS   := $(patsubst tools/mpi/%.c,$(BUILD)/%,$(wildcard tools/mpi/*.c))
endif

TRIALS ?= 10000

all: $(LIBS_A) $(LIBS_SO) $(TOOLS) $(PCS) $(MPI_LIB) $(MPI_TOOLS)

# The flags every object and link was made with: a change of compiler, flags,
# packages or toolchains rewrites this stamp, and everything depending on it is
# rebuilt (a library linked before its packages were there gets relinked).
FLAGS_STAMP := $(BUILD)/flags.stamp
FLAGS_NOW   := $(CC) $(CFLAGS) | $(LDFLAGS) $(LDLIBS) | $(CUDA) $(NVCC) $(NVCCFLAGS) | $(MPI) $(MPICC)
ifdef CONFIG_LOADED
ifneq ($(file < $(FLAGS_STAMP)),$(FLAGS_NOW))
$(shell mkdir -p $(BUILD))
$(file > $(FLAGS_STAMP),$(FLAGS_NOW))
endif
endif

# Header dependencies come from the compiler (-MMD -MP: $(BUILD)/.../*.d).
$(BUILD)/%.o: %.c $(FLAGS_STAMP)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -MMD -MP -c -o $@ $<

$(BUILD)/runtime/gpu.o: runtime/gpu.cu runtime/gpu.h include/pmckpt.h $(FLAGS_STAMP)
	@mkdir -p $(@D)
	$(NVCC) $(NVCCFLAGS) -c -o $@ $<

# Archives are rebuilt whole (rm first), so a removed source leaves no stale object.
$(BUILD)/libpmalloc.a: $(PMALLOC_OBJ)
	@rm -f $@
	$(AR) rcs $@ $^
$(BUILD)/libpmckpt.a: $(RUNTIME_OBJ)
	@rm -f $@
	$(AR) rcs $@ $^
$(BUILD)/libddio.a: $(DDIO_OBJ)
	@mkdir -p $(@D)
	@rm -f $@
	$(AR) rcs $@ $^

$(BUILD)/libpmalloc.so.$(SOVER): $(PMALLOC_OBJ) pmalloc/pmalloc.sym $(FLAGS_STAMP)
	$(CC) -shared -Wl,-soname,libpmalloc.so.$(SOVER) -Wl,--version-script=pmalloc/pmalloc.sym \
		-Wl,--no-undefined $(LDFLAGS) -o $@ $(PMALLOC_OBJ) $(PMALLOC_LIBS)
	ln -sf libpmalloc.so.$(SOVER) $(BUILD)/libpmalloc.so
$(BUILD)/libpmckpt.so.$(SOVER): $(RUNTIME_OBJ) runtime/pmckpt.sym $(BUILD)/libpmalloc.so.$(SOVER) $(FLAGS_STAMP)
	$(CC) -shared -Wl,-soname,libpmckpt.so.$(SOVER) -Wl,--version-script=runtime/pmckpt.sym \
		-Wl,-rpath,'$$ORIGIN' -Wl,--no-undefined $(LDFLAGS) -o $@ $(RUNTIME_OBJ) -L$(BUILD) -lpmalloc \
		$(RUNTIME_LIBS) $(CUDA_LIBS)
	ln -sf libpmckpt.so.$(SOVER) $(BUILD)/libpmckpt.so

# libpmckpt_mpi and its test programs: compiled by mpicc, so the core never links MPI.
$(BUILD)/mpi/%.o: mpi/%.c $(FLAGS_STAMP)
	@mkdir -p $(@D)
	$(MPICC) $(CFLAGS) -MMD -MP -c -o $@ $<
$(BUILD)/libpmckpt_mpi.a: $(patsubst mpi/%.c,$(BUILD)/mpi/%.o,$(wildcard mpi/*.c))
	$(AR) rcs $@ $^
$(MPI_TOOLS): $(BUILD)/%: tools/mpi/%.c $(MPI_LIB) $(LIBS_A) $(TOOLLIB) $(FLAGS_STAMP)
	@mkdir -p $(BUILD)/tools/mpi
	$(MPICC) $(CFLAGS) -MMD -MP -MF $(BUILD)/tools/mpi/$*.d -MT $@ -o $@ $< $(TOOLLIB) $(MPI_LIB) \
		$(LIBS_A) $(LDFLAGS) $(LDLIBS) -lm
$(BUILD)/tests/mpi/%: tests/mpi/%.c $(MPI_LIB) $(LIBS_A) $(FLAGS_STAMP)
	@mkdir -p $(@D)
	$(MPICC) $(CFLAGS) -Itests -MMD -MP -o $@ $< $(MPI_LIB) $(LIBS_A) $(LDFLAGS) $(LDLIBS) -lm

# Helpers shared by the tools (tools/lib): not installed, not an API.
$(TOOLLIB): $(patsubst %.c,$(BUILD)/%.o,$(wildcard tools/lib/*.c))
	@rm -f $@
	$(AR) rcs $@ $^

# Tools and tests link the static libraries: they run from build/ without LD_LIBRARY_PATH.
$(BUILD)/%: $(BUILD)/tools/%.o $(LIBS_A) $(TOOLLIB) $(FLAGS_STAMP)
	$(CC) $(LDFLAGS) -o $@ $< $(TOOLLIB) $(LIBS_A) $(LDLIBS) -lm
$(BUILD)/pmck-bench: LDLIBS += $(PMEMOBJ_LIBS)
$(BUILD)/tests/%: $(BUILD)/tests/%.o $(LIBS_A) $(FLAGS_STAMP)
	$(CC) $(LDFLAGS) -o $@ $< $(LIBS_A) $(LDLIBS) -lm

# The .pc files name the install directories: a change of PREFIX or LIBDIR rewrites them.
PC_STAMP := $(BUILD)/pc.stamp
PC_NOW   := $(PREFIX) $(LIBDIR) $(INCDIR) $(VERSION)
ifdef CONFIG_LOADED
ifneq ($(file < $(PC_STAMP)),$(PC_NOW))
$(shell mkdir -p $(BUILD))
$(file > $(PC_STAMP),$(PC_NOW))
endif
endif
$(BUILD)/pmalloc.pc: pmalloc/pmalloc.pc.in $(PC_STAMP)
$(BUILD)/pmckpt.pc: runtime/pmckpt.pc.in $(PC_STAMP)
$(PCS):
	@mkdir -p $(@D)
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@LIBDIR@|$(LIBDIR)|' -e 's|@INCDIR@|$(INCDIR)|' \
	    -e 's|@VERSION@|$(VERSION)|' $< > $@

tests: $(TESTS) $(TOOLS) $(MPI_TESTS)

# The PyTorch binding's interpreter (tools/python-env: a venv outside the clone, built once).
python-env:
	@tools/python-env >/dev/null
.PHONY: python-env

check: all tests python-env
	BUILD=$(BUILD) prove --exec '' $(TESTS) $(wildcard tests/*.sh)

# The emulated-NVDIMM VM test alone, verbose, with a longer budget (tests/vm/run.sh).
check-vm: all tests
	BUILD=$(BUILD) PMCKPT_VM_BUDGET=$${PMCKPT_VM_BUDGET:-600} prove -v --exec '' tests/vm_nvdimm.sh

soak: all tests
	BUILD=$(BUILD) $(BUILD)/tests/crash_kill --trials $(TRIALS) --soak

# Multi-rank kill trials under mpirun (about 2 s each).
soak-mpi: all tests
	MPI_TRIALS=$(TRIALS) BUILD=$(BUILD) tests/mpi_multirank.sh

# Multi-rank kill trials under torch.distributed (gloo, 3 processes; about 8 s each).
soak-dist: all python-env
	PMCK_DIST_TRIALS=$(TRIALS) BUILD=$(BUILD) tests/python_dist.sh

# The C demo needs the build packages alone: no Python environment, no MPI.
demo: all
	$(BUILD)/pmck-demo

# The README's two commands on a fresh Debian 12 chroot (../shared/tools/fresh-debian,
# beside the project): downloads the Debian packages and the torch wheels, so
# it is not part of make check.  Tests the committed tree (git archive HEAD).
FRESH_DEBIAN ?= ../shared/tools/fresh-debian
check-fresh:
	$(FRESH_DEBIAN) . 'make demo' 'make check' 'make demo'
.PHONY: check-fresh

bench: all
	$(BUILD)/pmck-bench
	$(BUILD)/pmck-pipebench
	$(if $(MPI_TOOLS),BUILD=$(BUILD) tools/mpi/mpibench.sh)
	BUILD=$(BUILD) bindings/python/bench/run.sh
	BENCH=bench_train.py BUILD=$(BUILD) bindings/python/bench/run.sh --quick

# Training throughput of a PyTorch loop checkpointing every step / every 10 (~10-15 min on 2 cores).
bench-train: all python-env
	BENCH=bench_train.py BUILD=$(BUILD) bindings/python/bench/run.sh
.PHONY: bench-train

install: all
	install -d $(DESTDIR)$(LIBDIR) $(DESTDIR)$(INCDIR) $(DESTDIR)$(BINDIR) $(DESTDIR)$(PCDIR)
	install -m 644 include/pmalloc.h include/pmckpt.h $(DESTDIR)$(INCDIR)
	install -m 644 include/pmctl.h $(DESTDIR)$(INCDIR)
	install -m 644 include/ddio.h $(DESTDIR)$(INCDIR)
	install -m 644 $(LIBS_A) $(DESTDIR)$(LIBDIR)
	install -m 755 $(LIBS_SO) $(DESTDIR)$(LIBDIR)
	ln -sf libpmalloc.so.$(SOVER) $(DESTDIR)$(LIBDIR)/libpmalloc.so
	ln -sf libpmckpt.so.$(SOVER) $(DESTDIR)$(LIBDIR)/libpmckpt.so
	install -m 644 $(PCS) $(DESTDIR)$(PCDIR)
	install -m 755 $(TOOLS) $(DESTDIR)$(BINDIR)
ifeq ($(MPI),1)
	install -m 644 include/pmckpt_mpi.h $(DESTDIR)$(INCDIR)
	install -m 644 $(MPI_LIB) $(DESTDIR)$(LIBDIR)
endif

clean:
	rm -rf build

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)

.PHONY: all tests check soak soak-mpi soak-dist demo bench install clean
.PHONY: check-vm
.SECONDARY:
