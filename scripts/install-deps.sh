#!/usr/bin/env bash
# Installs the Debian packages tessera needs, only those missing. Safe to run repeatedly.
# clang with its sanitizer and libFuzzer runtimes (libclang-rt-14-dev) and OpenMP (libomp-14-dev)
# build the fuzz targets of tests/fuzz; everything else is built with GCC. iproute2 (ip, tc) makes
# the test cluster of scripts/cluster.sh.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config
  libopenblas-openmp-dev libdnnl-dev libfmt-dev libcli11-dev libtomlplusplus-dev nlohmann-json3-dev
  libgtest-dev libgmock-dev libxxhash-dev libsentencepiece-dev sentencepiece
  openmpi-bin libopenmpi-dev bible-kjv
  iproute2
  coinor-libcbc-dev
  python3-torch python3-numpy
  clang libclang-rt-14-dev libomp-14-dev
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

echo "tessera: installing missing packages: ${missing[*]}"
sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then
  sudo_cmd=(sudo)
fi
"${sudo_cmd[@]}" apt-get update -qq
DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
