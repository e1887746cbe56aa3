"""--numa-binding's CPUs, ddprun's against torch 2.14's torch.numa.binding, on every recorded or
modelled machine in tests/unit/sysfs, for every mode and accelerator and two affinity masks.

    numa_binding_test.py NUMA_BINDING_PROBE SYSFS_DIR TORCH2_PYTHON

torch reads /sys and asks torch.accelerator for each device's PCI address; here its file reads
under /sys go to the recording, and the address and count come from the recording's list. torch's
side runs as `TORCH2_PYTHON numa_binding_test.py --torch RECORDING MODE ALLOWED` (the probe, built
on this system, cannot run inside the torch 2.14 root).
"""
import builtins
import glob
import json
import os
import subprocess
import sys



def load(path):
    files, pci = {}, []
    for line in open(path):
        if line.startswith("#") or not line.strip():
            continue
        name, _, content = line.rstrip("\n").partition(" ")
        files["/sys/" + name] = content + "\n"
        if name.startswith("bus/pci/devices/"):
            pci.append(name.split("/")[3])
    return files, pci


def torch_binding(files, pci, mode, allowed):
    import torch.numa.binding as nb

    real_open, real_listdir = builtins.open, os.listdir

    def fake_open(path, *a, **k):
        if isinstance(path, str) and path.startswith("/sys/"):
            if path not in files:
                raise FileNotFoundError(path)
            import io
            return io.StringIO(files[path])
        return real_open(path, *a, **k)

    def fake_listdir(path):
        if isinstance(path, str) and path.startswith("/sys/"):
            prefix = path.rstrip("/") + "/"
            return sorted({p[len(prefix):].split("/")[0] for p in files if p.startswith(prefix)})
        return real_listdir(path)

    def numa_node(*, device_index):
        with fake_open(f"/sys/bus/pci/devices/{pci[device_index]}/numa_node") as f:
            return max(int(f.read().strip()), 0)

    saved = (nb._get_numa_node_index_for_device_index, nb._get_device_count,
             nb._get_allowed_cpu_indices_for_current_thread)
    nb._get_numa_node_index_for_device_index = numa_node
    nb._get_device_count = lambda: len(pci)
    nb._get_allowed_cpu_indices_for_current_thread = lambda: set(allowed)
    builtins.open, os.listdir = fake_open, fake_listdir
    try:
        out = []
        for d in range(len(pci)):
            try:
                cpus = nb._get_logical_cpus_to_bind_to(
                    device_index=d, numa_options=nb.NumaOptions(affinity_mode=nb.AffinityMode(mode)))
                out.append(f"{d} {nb._get_ranges_str_from_ints(cpus)}" if cpus else f"{d} error")
            except Exception:  # noqa: BLE001 - any failure is compared as a failure
                out.append(f"{d} error")
        return out
    finally:
        builtins.open, os.listdir = real_open, real_listdir
        (nb._get_numa_node_index_for_device_index, nb._get_device_count,
         nb._get_allowed_cpu_indices_for_current_thread) = saved


MODES = ("node", "socket", "exclusive", "core-complex")


def compare(probe, sysfs, torch2):
    compared = 0
    for recording in sorted(glob.glob(os.path.join(sysfs, "*.sysfs"))):
        files, pci = load(recording)
        every = sorted({int(p.split("/")[5][3:]) for p in files
                        if p.startswith("/sys/devices/system/cpu/cpu")})
        masks = [",".join(map(str, m)) for m in (every, every[1::2] + every[:2])]
        # torch's answers for every mask and mode from one interpreter (importing torch is slow).
        theirs = json.loads(subprocess.run([torch2, __file__, "--torch", recording, *masks],
                                           capture_output=True, text=True, check=True).stdout)
        for cpus in masks:  # all CPUs, and a mask that splits cores
            for mode in MODES:
                ours = subprocess.run([probe, recording, mode, cpus, *pci], capture_output=True,
                                      text=True, check=True).stdout.splitlines()
                ours = [line.split(" error:")[0] + " error" if " error:" in line else line
                        for line in ours]
                expected = theirs[f"{mode} {cpus}"]
                assert ours == expected, (os.path.basename(recording), mode, cpus, ours, expected)
                compared += len(pci)
    print(f"numa binding: {compared} bindings identical to torch 2.14's")


if sys.argv[1] == "--torch":
    files, pci = load(sys.argv[2])
    print(json.dumps({f"{mode} {cpus}": torch_binding(files, pci, mode,
                                                      [int(c) for c in cpus.split(",")])
                      for cpus in sys.argv[3:] for mode in MODES}))
else:
    compare(*sys.argv[1:4])
