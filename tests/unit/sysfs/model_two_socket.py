#!/usr/bin/env python3
"""Writes two_socket_four_node.sysfs, in record.sh's format: a model (not a recording) of a
two-socket machine laid out like an AMD EPYC server in NPS2 mode, small enough to read: per socket two
NUMA nodes, per node four SMT-2 cores in two core complexes (a shared L3 each), Linux's numbering
(thread 0 of core c is CPU c, thread 1 is CPU c + 16), and two accelerators per node."""
CORES, NODES_PER_SOCKET, CORES_PER_NODE, CORES_PER_CCX = 16, 2, 4, 2
GPUS = ["0000:01:00.0", "0000:02:00.0", "0000:41:00.0", "0000:42:00.0",
        "0000:81:00.0", "0000:82:00.0", "0000:c1:00.0", "0000:c2:00.0"]


def cpus(cores):
    return ",".join(f"{c0}-{c1}" for c0, c1 in
                    [(cores[0], cores[-1]), (cores[0] + CORES, cores[-1] + CORES)])


lines = ["# A model of a two-socket, four-NUMA-node machine: see model_two_socket.py.",
         "devices/system/node/possible 0-3"]
for node in range(CORES // CORES_PER_NODE):
    lines.append(f"devices/system/node/node{node}/cpulist "
                 f"{cpus(list(range(node * CORES_PER_NODE, (node + 1) * CORES_PER_NODE)))}")
for cpu in range(2 * CORES):
    core = cpu % CORES
    ccx = core // CORES_PER_CCX * CORES_PER_CCX
    d = f"devices/system/cpu/cpu{cpu}"
    lines += [f"{d}/topology/thread_siblings_list {core},{core + CORES}",
              f"{d}/topology/physical_package_id {core // (CORES_PER_NODE * NODES_PER_SOCKET)}"]
    for index, (kind, level, shared) in enumerate(
            [("Data", 1, f"{core},{core + CORES}"), ("Instruction", 1, f"{core},{core + CORES}"),
             ("Unified", 2, f"{core},{core + CORES}"),
             ("Unified", 3, cpus(list(range(ccx, ccx + CORES_PER_CCX))))]):
        lines += [f"{d}/cache/index{index}/type {kind}", f"{d}/cache/index{index}/level {level}",
                  f"{d}/cache/index{index}/shared_cpu_list {shared}"]
for i, pci in enumerate(GPUS):
    lines.append(f"bus/pci/devices/{pci}/numa_node {i // 2}")
with open("two_socket_four_node.sysfs", "w") as f:
    f.write("\n".join(lines) + "\n")
