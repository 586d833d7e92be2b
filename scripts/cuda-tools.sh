#!/usr/bin/env bash
# cuda-tools.sh DIR: unpack, without installing, Debian's CUDA 11.8 tools
# (nvidia-cuda-toolkit: ptxas, nvdisasm, 84 MB) and the driver's library
# (libcuda1 535 and libnvidia-ptxjitcompiler1, 10 MB) into DIR, for the
# checks that need no GPU: ptxas and the SASS (allreduce/cuda's
# TestPTXAssembles, RINGDDP_CUDA_BIN=DIR/usr/bin) and the ringddp_cuda
# build's run-time binding of libcuda (LD_LIBRARY_PATH=DIR/usr/lib/
# x86_64-linux-gnu/nvidia/current: cuInit then fails with
# CUDA_ERROR_NO_DEVICE, after every entry point was found).
# Needs root and apt (it adds Debian's contrib and non-free components in
# a sources file of its own); exits non-zero, saying why, otherwise.
set -euo pipefail
dir=${1:?usage: cuda-tools.sh DIR}
if [[ -x $dir/usr/bin/ptxas && -e $dir/usr/lib/x86_64-linux-gnu/nvidia/current/libcuda.so.1 ]]; then
	exit 0
fi
[[ $(id -u) == 0 ]] && command -v apt-get >/dev/null || { echo "cuda-tools.sh: needs root and apt-get" >&2; exit 1; }
. /etc/os-release
src=/etc/apt/sources.list.d/ringddp-cuda.sources
if [[ ! -f $src ]]; then
	cat >"$src" <<SRC
Types: deb
URIs: http://deb.debian.org/debian
Suites: ${VERSION_CODENAME:?} ${VERSION_CODENAME}-updates
Components: contrib non-free non-free-firmware
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
fi
if ! apt-cache show nvidia-cuda-toolkit >/dev/null 2>&1; then
	apt-get update -qq >&2
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && apt-get download -q nvidia-cuda-toolkit libcuda1 libnvidia-ptxjitcompiler1 >&2) 2>&1 | grep -v '^W: Download is performed unsandboxed' >&2 || true
ls "$tmp"/nvidia-cuda-toolkit_*.deb "$tmp"/libcuda1_*.deb >/dev/null
mkdir -p "$dir"
for f in "$tmp"/*.deb; do dpkg -x "$f" "$dir"; done
