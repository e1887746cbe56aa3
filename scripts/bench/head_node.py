"""Head-node launch: `ddprun -H` against Open MPI's `mpirun -H`, both over the same real ssh to the
same 3 hosts (network namespaces with their own sshd, tests/launcher/ssh_hosts.py), each running
/bin/true once per host. Median of RUNS wall-clock launches each, in one run; the last line states
the ratio. A plain `ssh host true` is timed too: the floor every launch of this kind pays.

    python3 scripts/bench/head_node.py DDPRUN      (root; RUNS=7 by default)
"""
import os
import shutil
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "launcher"))
from ssh_hosts import SshHosts, available  # noqa: E402

RUNS = int(os.environ.get("RUNS", "7"))


def timed(hosts, cmd):
    times = []
    for _ in range(RUNS):
        start = time.monotonic()
        p = hosts.head(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        _, err = p.communicate(timeout=120)
        if p.returncode != 0:
            raise SystemExit(f"{cmd[0]} failed ({p.returncode}): {err[-2000:]}")
        times.append((time.monotonic() - start) * 1000)
    return statistics.median(times)


def main():
    ddprun = os.path.abspath(sys.argv[1])
    why = available()
    if why or not shutil.which("mpirun"):
        raise SystemExit(f"head_node.py: {why or 'needs mpirun (openmpi-bin)'}")
    with SshHosts(3) as hosts:
        ssh = ["-i", hosts.key, "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
               "-o", "LogLevel=ERROR", "-o", "BatchMode=yes"]
        floor = timed(hosts, ["ssh", *ssh, hosts.addrs[0], "true"])
        ours = timed(hosts, [ddprun, "-H", ",".join(hosts.addrs), *hosts.ssh_flags(),
                             "--no_python", "/bin/true"])
        mpi = timed(hosts, ["mpirun", "--allow-run-as-root", "-H", ",".join(hosts.addrs),
                            "-np", "3", "--mca", "plm_rsh_agent", "ssh", "--mca", "plm_rsh_args",
                            " ".join(ssh), "/bin/true"])
        print(f"# head-node launch of /bin/true on 3 ssh hosts, median of {RUNS} (ms)")
        print(f"one plain ssh round trip   {floor:8.0f}")
        print(f"ddprun -H (check + launch) {ours:8.0f}")
        print(f"mpirun -H                  {mpi:8.0f}")
        print(f"head node: ddprun -H took {ours / mpi:.2f}x mpirun's time ({ours:.0f} ms against "
              f"{mpi:.0f} ms; one ssh round trip {floor:.0f} ms)")


if __name__ == "__main__":
    main()
