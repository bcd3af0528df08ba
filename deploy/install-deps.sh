#!/usr/bin/env bash
# Installs KVStream's build and test dependencies from Debian 12 packages.
# Idempotent; skips apt when every package is already installed.
set -euo pipefail
PACKAGES=(
  build-essential cmake pkg-config clang
  liburing-dev libabsl-dev libspdlog-dev libfmt-dev libxxhash-dev libsodium-dev libssl-dev
  libcurl4-openssl-dev libexpat1-dev
  catch2 libyaml-cpp-dev libcli11-dev nlohmann-json3-dev gnuplot-nox
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler prometheus
  fio e2fsprogs util-linux iproute2 libfuse3-dev fuse3 glusterfs-server glusterfs-client strace
  podman runc mmdebstrap
  python3 python3-venv python3-wheel python3-grpcio python3-protobuf
)
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#PACKAGES[@]} packages present"
  exit 0
fi
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
echo "install-deps: installing ${missing[*]}"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
