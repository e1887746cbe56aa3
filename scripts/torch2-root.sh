#!/usr/bin/env bash
# Builds, once, the Debian forky root filesystem whose python3-torch (2.14, on Python 3.14) the tests
# and benchmarks run beside bookworm's own torch 1.13 (installing forky packages into the bookworm
# system would break it). About a minute and 1.8 GB, from this machine's Debian mirror; an existing
# complete root is kept, a half-built one is started again. Prints the root's path. It also holds
# auditwheel, which scripts/build-wheel.sh uses to check the wheel's platform tag, libdeflate,
# whose CRC-32 ddprun.checkpoint uses where it is installed, and g++ with Python's and torch's
# headers, which torch.compile's CPU backend (inductor) builds its kernels with.
#
#   DDPRUN_TORCH2_ROOT   where the root lives (default /var/cache/ddprun/torch2-forky)
#
# scripts/torch2/python runs a program with that root's python3.
set -euo pipefail
root=${DDPRUN_TORCH2_ROOT:-/var/cache/ddprun/torch2-forky}
marker=.ddprun-torch2-root
complete() {
  [[ -f $root/$marker && -e $root/usr/lib/x86_64-linux-gnu/libdeflate.so.0 &&
    -x $root/usr/bin/g++ && -e $root/usr/include/torch/csrc/inductor/cpp_prefix.h ]] &&
    compgen -G "$root/usr/include/python3*/Python.h" >/dev/null
}
# (A root built before libdeflate or g++ was in it is built again: the workers' CRC-32 uses the
# one, torch.compile the others; forky's python3-torch stopped bringing g++ along.)
if complete; then
  echo "$root"
  exit 0
fi
# One build at a time: a second run (the suite beside a benchmark) waits for the first and uses its
# root; two mmdebstraps into one ".partial" folder break both.
mkdir -p "$(dirname "$root")"
exec 9>"$root.lock"
flock -w 1800 9 || { echo "torch2-root: another build held $root.lock for 30 minutes" >&2; exit 1; }
if complete; then
  echo "$root"
  exit 0
fi

# The mirror this machine's apt uses for Debian itself (deb822 or one-line sources).
mirror=$(cat /etc/apt/sources.list.d/*.sources 2>/dev/null |
  awk '/^URIs:/ {u = $2} /^Suites:/ && / bookworm( |$)/ {print u; exit}')
if [[ -z $mirror ]]; then
  mirror=$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null |
    awk '$1 == "deb" && $3 == "bookworm" {print $2; exit}')
fi
[[ -n $mirror ]] || { echo "torch2-root: no Debian bookworm mirror in apt's sources" >&2; exit 1; }
if ! command -v mmdebstrap >/dev/null; then
  echo "torch2-root: mmdebstrap is missing (scripts/install-deps.sh installs it)" >&2
  exit 1
fi

echo "torch2-root: building $root (Debian forky with python3-torch, a minute or two)" >&2
rm -rf "$root.partial"
# A mirror's forky Release may be past its Valid-Until (a testing suite's is short); the archive's
# own keyring still checks its signature.
mmdebstrap --quiet --variant=apt --include=python3-torch,python3-auditwheel,libdeflate0,g++,python3-dev,libtorch-dev \
  --aptopt='Acquire::Check-Valid-Until "false"' forky "$root.partial" \
  "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $mirror forky main" >&2 9>&-
touch "$root.partial/$marker"
rm -rf "$root"
mv "$root.partial" "$root"
echo "$root"
