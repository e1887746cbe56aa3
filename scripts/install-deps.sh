#!/usr/bin/env bash
# Installs every Debian package that building ddprun and running its tests and benchmarks need.
# Idempotent: when everything is present it does nothing (no apt-get update, no network).
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config
  libboost1.81-dev libboost-filesystem1.81-dev
  libcli11-dev libspdlog-dev libfmt-dev nlohmann-json3-dev catch2
  libgloo-dev
  clang-14 libclang-rt-14-dev
  python3 python3-torch python3-numpy python3-pyflakes
  hyperfine iproute2 procps gdb
  mmdebstrap
  etcd-server etcd-client libssl-dev openssl zlib1g-dev libdeflate-dev libdeflate0 libxxhash-dev
  openssh-server openssh-client slurmctld slurmd slurm-client munge util-linux
  openmpi-bin man-db
  python3-build python3-setuptools python3-wheel python3-venv python3-pip
  zsh tcsh
  chromium
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$p")
  fi
done

if ((${#missing[@]} == 0)); then
  exit 0
fi

echo "install-deps: installing ${missing[*]}" >&2
sudo_cmd=()
if [[ $(id -u) -ne 0 ]]; then sudo_cmd=(sudo); fi
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
