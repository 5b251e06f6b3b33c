#!/usr/bin/env bash
# Builds tessera (Release) and installs it, so `tessera` is on PATH: the program into PREFIX/bin,
# the shipped configs into PREFIX/share/tessera/configs. PREFIX is /usr/local unless given:
#   scripts/install.sh [PREFIX]
set -euo pipefail
cd "$(dirname "$0")/.."
prefix="${1:-/usr/local}"

scripts/install-deps.sh
cmake --preset release -G Ninja > /dev/null
cmake --build --preset release --target tessera -j "$(nproc)"
sudo_cmd=()
if [ ! -w "$prefix" ] && [ "$(id -u)" -ne 0 ]; then
  sudo_cmd=(sudo)
fi
"${sudo_cmd[@]}" cmake --install build/release --prefix "$prefix" --component Unspecified > /dev/null
echo "installed $prefix/bin/tessera ($("$prefix/bin/tessera" --version))"
case ":$PATH:" in
  *":$prefix/bin:"*) ;;
  *) echo "note: $prefix/bin is not on PATH; add it: export PATH=\"$prefix/bin:\$PATH\"" ;;
esac
