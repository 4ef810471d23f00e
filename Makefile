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
DEPS    := libpmem2 libxxhash numa json-c libndctl libdaxctl libpci

ifeq ($(SANITIZE),1)
BUILD   ?= build/asan
SANFLAGS := -fsanitize=address -fsanitize=undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
else ifeq ($(TSAN),1)
BUILD   ?= build/tsan
SANFLAGS := -fsanitize=thread
else
BUILD   ?= build
endif

DEP_CFLAGS := $(shell $(PKG_CONFIG) --cflags $(DEPS) 2>/dev/null)
DEP_LIBS   := $(shell $(PKG_CONFIG) --libs $(DEPS) 2>/dev/null)

CFLAGS  ?= -O2 -g
CFLAGS  += -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -fPIC -pthread \
           -Iinclude $(DEP_CFLAGS) $(SANFLAGS)
LDFLAGS += -pthread $(SANFLAGS)
LDLIBS  += $(DEP_LIBS)

# CUDA: built when nvcc is found, CUDA=1 requires it, CUDA=0 leaves it out.
NVCC    ?= $(firstword $(wildcard /usr/local/cuda/bin/nvcc) $(shell command -v nvcc 2>/dev/null))
CUDA    ?= $(if $(NVCC),1,0)
CUDA_HOME ?= $(patsubst %/bin/nvcc,%,$(NVCC))
# sm_90 (Hopper) code plus PTX for later GPUs to compile at load time.
NVCCFLAGS ?= -O2 -g -std=c++17 -gencode arch=compute_90,code=sm_90 \
             -gencode arch=compute_90,code=compute_90
NVCCFLAGS += -Iinclude -Xcompiler -fPIC,-Wall,-Wextra,-Werror $(foreach f,$(SANFLAGS),-Xcompiler $(f))

# MPI: libpmckpt_mpi (collectives over MPI) when mpicc is found, MPI=1 requires it, MPI=0 leaves it out.
MPICC   ?= $(shell command -v mpicc 2>/dev/null)
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
ifeq ($(NVCC),)
$(error CUDA=1 but no nvcc found: set NVCC=/path/to/nvcc)
endif
RUNTIME_OBJ += $(BUILD)/runtime/gpu.o
LDLIBS  += -L$(CUDA_HOME)/lib64 -lcudart_static -ldl -lrt -lstdc++
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
ifeq ($(MPICC),)
$(error MPI=1 but no mpicc found: install libopenmpi-dev or set MPICC)
endif
MPI_LIB     := $(BUILD)/libpmckpt_mpi.a
MPI_TESTS   := $(patsubst tests/mpi/%.c,$(BUILD)/tests/mpi/%,$(wildcard tests/mpi/*.c))
MPI_TOOLS   := $(patsubst tools/mpi/%.c,$(BUILD)/%,$(wildcard tools/mpi/*.c))
endif

TRIALS ?= 10000

all: $(LIBS_A) $(LIBS_SO) $(TOOLS) $(PCS) $(MPI_LIB) $(MPI_TOOLS)

$(BUILD)/%.o: %.c $(wildcard include/*.h pmalloc/*.h runtime/*.h ddio/*.h tools/*.h tools/lib/*.h tests/*.h) | deps
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -c -o $@ $<

$(BUILD)/runtime/gpu.o: runtime/gpu.cu runtime/gpu.h include/pmckpt.h | deps
	@mkdir -p $(@D)
	$(NVCC) $(NVCCFLAGS) -c -o $@ $<

$(BUILD)/libpmalloc.a: $(PMALLOC_OBJ)
	$(AR) rcs $@ $^
$(BUILD)/libpmckpt.a: $(RUNTIME_OBJ)
	$(AR) rcs $@ $^
$(BUILD)/libddio.a: $(DDIO_OBJ)
	@mkdir -p $(@D)
	@rm -f $@
	$(AR) rcs $@ $^

$(BUILD)/libpmalloc.so.$(SOVER): $(PMALLOC_OBJ) pmalloc/pmalloc.sym
	$(CC) -shared -Wl,-soname,libpmalloc.so.$(SOVER) -Wl,--version-script=pmalloc/pmalloc.sym \
		$(LDFLAGS) -o $@ $(PMALLOC_OBJ) $(LDLIBS)
	ln -sf libpmalloc.so.$(SOVER) $(BUILD)/libpmalloc.so
$(BUILD)/libpmckpt.so.$(SOVER): $(RUNTIME_OBJ) runtime/pmckpt.sym $(BUILD)/libpmalloc.so.$(SOVER)
	$(CC) -shared -Wl,-soname,libpmckpt.so.$(SOVER) -Wl,--version-script=runtime/pmckpt.sym \
		-Wl,-rpath,'$$ORIGIN' $(LDFLAGS) -o $@ $(RUNTIME_OBJ) -L$(BUILD) -lpmalloc $(LDLIBS)
	ln -sf libpmckpt.so.$(SOVER) $(BUILD)/libpmckpt.so

# libpmckpt_mpi and its test programs: compiled by mpicc, so the core never links MPI.
$(BUILD)/mpi/%.o: mpi/%.c include/pmckpt.h include/pmckpt_mpi.h | deps
	@mkdir -p $(@D)
	$(MPICC) $(CFLAGS) -c -o $@ $<
$(BUILD)/libpmckpt_mpi.a: $(patsubst mpi/%.c,$(BUILD)/mpi/%.o,$(wildcard mpi/*.c))
	$(AR) rcs $@ $^
$(MPI_TOOLS): $(BUILD)/%: tools/mpi/%.c $(MPI_LIB) $(LIBS_A) $(TOOLLIB)
	$(MPICC) $(CFLAGS) -o $@ $< $(TOOLLIB) $(MPI_LIB) $(LIBS_A) $(LDFLAGS) $(LDLIBS) -lm
$(BUILD)/tests/mpi/%: tests/mpi/%.c $(MPI_LIB) $(LIBS_A) $(wildcard tests/*.h)
	@mkdir -p $(@D)
	$(MPICC) $(CFLAGS) -Itests -o $@ $< $(MPI_LIB) $(LIBS_A) $(LDFLAGS) $(LDLIBS) -lm

# Helpers shared by the tools (tools/lib): not installed, not an API.
$(TOOLLIB): $(patsubst %.c,$(BUILD)/%.o,$(wildcard tools/lib/*.c))
	$(AR) rcs $@ $^

# Tools and tests link the static libraries: they run from build/ without LD_LIBRARY_PATH.
$(BUILD)/%: $(BUILD)/tools/%.o $(LIBS_A) $(TOOLLIB)
	$(CC) $(LDFLAGS) -o $@ $< $(TOOLLIB) $(LIBS_A) $(LDLIBS) -lm
$(BUILD)/pmck-bench: LDLIBS += $(shell $(PKG_CONFIG) --libs libpmemobj)
$(BUILD)/tests/%: $(BUILD)/tests/%.o $(LIBS_A)
	$(CC) $(LDFLAGS) -o $@ $< $(LIBS_A) $(LDLIBS) -lm

$(BUILD)/pmalloc.pc: pmalloc/pmalloc.pc.in
$(BUILD)/pmckpt.pc: runtime/pmckpt.pc.in
$(PCS):
	@mkdir -p $(@D)
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@LIBDIR@|$(LIBDIR)|' -e 's|@INCDIR@|$(INCDIR)|' \
	    -e 's|@VERSION@|$(VERSION)|' $< > $@

# Installs the Debian packages when a dependency is missing (see tools/install-deps).
deps:
	@$(PKG_CONFIG) --exists $(DEPS) || tools/install-deps
.PHONY: deps

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

demo: all
	$(BUILD)/pmck-demo

bench: all
	$(BUILD)/pmck-bench
	$(BUILD)/pmck-pipebench
	$(if $(MPI_TOOLS),BUILD=$(BUILD) tools/mpi/mpibench.sh)
	BUILD=$(BUILD) bindings/python/bench/run.sh

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

.PHONY: all tests check soak soak-mpi soak-dist demo bench install clean
.PHONY: check-vm
.SECONDARY:
