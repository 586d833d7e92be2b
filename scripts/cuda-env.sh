#!/usr/bin/env bash
# cuda-env.sh: install what building the `cuda` tag needs on a Debian
# machine without a GPU, idempotently, and print the environment to use.
#
#   scripts/cuda-env.sh            install if missing (root), then print the exports
#   eval "$(scripts/cuda-env.sh)"  the same, and export them into this shell
#   scripts/cuda-env.sh -check     install nothing; exit 1 if the headers are missing
#
# What it installs (docs/cuda.md, "Building"):
#   - Debian's contrib and non-free components for this suite (a sources file
#     of its own, /etc/apt/sources.list.d/ringddp-cuda.sources);
#   - nvidia-cuda-dev, downloaded (apt-get download) and unpacked with dpkg -x
#     into $CUDA_DEV (default /opt/cuda-dev), not installed: cuda.h, nvrtc.h
#     and the driver stub usr/lib/x86_64-linux-gnu/stubs/libcuda.so, enough to
#     compile and link gorgonia.org/cu (the binary needs libcuda.so.1, which
#     only a machine with the NVIDIA driver has);
#   - with -nvcc (or RINGDDP_CUDA_NVCC=1): nvidia-cuda-toolkit
#     (--no-install-recommends, several GB) for nvcc, which `go generate
#     ./allreduce/cuda/` needs to turn kernels/*.cu into the committed PTX.
#     Building with the committed PTX does not need it.
#
# Everything goes to stderr except the final export lines on stdout.
set -euo pipefail

CUDA_DEV=${CUDA_DEV:-/opt/cuda-dev}
want_nvcc=${RINGDDP_CUDA_NVCC:-0}
check_only=0
for a in "$@"; do
	case $a in
	-nvcc) want_nvcc=1 ;;
	-check) check_only=1 ;;
	-h | -help | --help)
		sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'
		exit 0
		;;
	*)
		echo "cuda-env.sh: unknown argument $a" >&2
		exit 2
		;;
	esac
done

log() { echo "cuda-env.sh: $*" >&2; }

have_headers() {
	[[ -f $CUDA_DEV/usr/include/cuda.h && -f $CUDA_DEV/usr/lib/x86_64-linux-gnu/stubs/libcuda.so ]]
}

if ((check_only)); then
	have_headers || { log "no cuda.h under $CUDA_DEV"; exit 1; }
else
	sudo=
	if [[ $(id -u) != 0 ]]; then sudo=sudo; fi
	components_added=0
	ensure_components() {
		((components_added)) && return
		. /etc/os-release
		local suite=${VERSION_CODENAME:?no VERSION_CODENAME in /etc/os-release}
		local src=/etc/apt/sources.list.d/ringddp-cuda.sources
		if [[ ! -f $src ]]; then
			log "adding contrib non-free for $suite to $src"
			$sudo tee "$src" >/dev/null <<SRC
Types: deb
URIs: http://deb.debian.org/debian
Suites: $suite $suite-updates
Components: contrib non-free non-free-firmware
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
			$sudo apt-get update -qq >&2
		elif ! apt-cache show nvidia-cuda-dev >/dev/null 2>&1; then
			$sudo apt-get update -qq >&2
		fi
		components_added=1
	}
	if ! have_headers; then
		ensure_components
		tmp=$(mktemp -d)
		log "downloading nvidia-cuda-dev (about 800 MB) into $tmp"
		(cd "$tmp" && apt-get download -q nvidia-cuda-dev >&2)
		$sudo mkdir -p "$CUDA_DEV"
		log "unpacking into $CUDA_DEV"
		$sudo dpkg -x "$tmp"/nvidia-cuda-dev_*.deb "$CUDA_DEV"
		rm -rf "$tmp"
		have_headers || { log "cuda.h or the libcuda.so stub missing after unpacking"; exit 1; }
	fi
	if ((want_nvcc)) && ! command -v nvcc >/dev/null; then
		ensure_components
		log "installing nvidia-cuda-toolkit (several GB, a minute or two)"
		DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends nvidia-cuda-toolkit >&2
	fi
fi

log "headers: $CUDA_DEV/usr/include/cuda.h; nvcc: $(command -v nvcc || echo 'none (only go generate needs it)')"
echo "export CGO_ENABLED=1"
echo "export CGO_CFLAGS=\"-I$CUDA_DEV/usr/include -Wno-deprecated-declarations\""
echo "export CGO_LDFLAGS=\"-L$CUDA_DEV/usr/lib/x86_64-linux-gnu/stubs\""
