#!/usr/bin/env bash
# Records what --numa-binding reads of this machine's sysfs, for the unit tests: one line per file,
# "<path under /sys> <content>", for the accelerators at the given PCI addresses (as
# /sys/bus/pci/devices names them, e.g. 0000:1b:00.0; `nvidia-smi --query-gpu=pci.bus_id
# --format=csv,noheader` lists them, upper-case and with 8 digits of domain).
#   tests/unit/sysfs/record.sh 0000:1b:00.0 0000:43:00.0 > tests/unit/sysfs/NAME.sysfs
set -euo pipefail
line() { printf '%s %s\n' "${1#/sys/}" "$(tr -d '\n' <"$1")"; }
line /sys/devices/system/node/possible
for n in /sys/devices/system/node/node[0-9]*; do line "$n/cpulist"; done
for c in /sys/devices/system/cpu/cpu[0-9]*; do
  line "$c/topology/thread_siblings_list"
  line "$c/topology/physical_package_id"
  for i in "$c"/cache/index[0-9]*; do
    for f in type level shared_cpu_list; do line "$i/$f"; done
  done
done
for pci in "$@"; do line "/sys/bus/pci/devices/$pci/numa_node"; done
