"""The Debian package: built with cpack from the build folder, checked, installed on this machine,
its ddprund service started as systemd would start it (the unit's EnvironmentFile and ExecStart,
read from the installed unit: systemd itself does not run here), a 2-node job run against it with
the installed ddprun, `ddprun status` and the metrics read, the SDK built from the installed
headers and ddp.pc, and the package purged again.

    deb_package_test.py BUILD_DIR
Exits 77 (skipped) without root or dpkg, or where a ddprun package is installed already.
"""
import glob
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "launcher"))
from proc_util import free_port, wait_for  # noqa: E402

UNIT = "/usr/lib/systemd/system/ddprund.service"


def run(*cmd, **kw):
    return subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=300, **kw)


def unit_command(unit_path):
    """ExecStart of the unit, expanded as systemd does: the EnvironmentFile's assignments, ${VAR}
    as one word, $VAR split at whitespace."""
    env, exec_start = {}, None
    with open(unit_path) as f:
        for line in f:
            key, _, value = line.strip().partition("=")
            if key == "EnvironmentFile":
                path = value.lstrip("-")
                if os.path.exists(path):
                    for assignment in shlex.split(open(path).read(), comments=True):
                        k, _, v = assignment.partition("=")
                        env[k] = v
            elif key == "ExecStart":
                exec_start = value
    words = []
    for word in exec_start.split():
        whole = re.fullmatch(r"\$\{(\w+)\}", word)
        split = re.fullmatch(r"\$(\w+)", word)
        if whole:
            words.append(env.get(whole.group(1), ""))
        elif split:
            words.extend(env.get(split.group(1), "").split())
        else:
            words.append(word)
    return words


def main():
    build = os.path.abspath(sys.argv[1])
    if os.geteuid() != 0 or not shutil.which("dpkg"):
        print("skipped: needs root and dpkg")
        sys.exit(77)
    if subprocess.run(["dpkg", "-s", "ddprun"], capture_output=True).returncode == 0:
        print("skipped: a ddprun package is installed here already")
        sys.exit(77)
    out = tempfile.mkdtemp()
    run("cpack", "-G", "DEB", "-B", out, "--config", os.path.join(build, "CPackConfig.cmake"))
    deb = glob.glob(os.path.join(out, "ddprun_*.deb"))[0]
    files = run("dpkg-deb", "-c", deb).stdout
    for path in ("./usr/bin/ddprun", "./usr/bin/ddprund", "./usr/lib/libddp.so.0",
                 "./usr/include/ddp/gradient_sync.hpp", "./usr/lib/cmake/ddprun/ddprunConfig.cmake",
                 "./usr/lib/pkgconfig/ddp.pc", "./usr/share/man/man1/ddprun.1.gz",
                 "./usr/share/man/man1/ddprund.1.gz", "." + UNIT, "./etc/default/ddprund"):
        assert re.search(rf" {re.escape(path)}( -> .*)?$", files, re.M), f"{path} is missing"
    info = run("dpkg-deb", "-I", deb).stdout
    assert "Depends: libc6" in info and "libgloo0" in info and "libspdlog" not in info, info
    assert run("dpkg-deb", "--ctrl-tarfile", deb).stdout is not None
    conffiles = subprocess.run(f"dpkg-deb -e {shlex.quote(deb)} {out}/ctrl && cat {out}/ctrl/conffiles",
                               shell=True, capture_output=True, text=True).stdout
    assert conffiles.strip() == "/etc/default/ddprund", conffiles

    service = None
    try:
        run("dpkg", "-i", deb)
        assert run("/usr/bin/ddprun", "--help").stdout.startswith("usage: ddprun")
        # The programs carry everything but glibc.
        for program in ("/usr/bin/ddprun", "/usr/bin/ddprund"):
            needed = re.findall(r"^\s*(\S+\.so[.\d]*)", run("ldd", program).stdout, re.M)
            assert set(needed) <= {"linux-vdso.so.1", "libc.so.6", "libm.so.6",
                                   "/lib64/ld-linux-x86-64.so.2"}, (program, needed)
        # The man pages render, with the options from --help.
        page = run("man", "-l", "/usr/share/man/man1/ddprun.1.gz", env={**os.environ,
                   "MANPAGER": "cat", "MANWIDTH": "100"}).stdout
        assert "--nproc_per_node" in page and "--hostfile" in page, page[:500]
        page = run("man", "-l", "/usr/share/man/man1/ddprund.1.gz", env={**os.environ,
                   "MANPAGER": "cat"}).stdout
        assert "--metrics-port" in page, page[:500]
        if shutil.which("systemd-analyze"):
            verify = subprocess.run(["systemd-analyze", "verify", UNIT], capture_output=True,
                                    text=True, timeout=60)
            assert verify.returncode == 0, f"systemd-analyze verify: {verify.stderr}"

        # The service, configured through its /etc/default file as an operator would.
        port, mport = free_port(), free_port()
        with open("/etc/default/ddprund", "w") as f:
            f.write(f'DDPRUND_PORT={port}\nDDPRUND_OPTS="--metrics-port {mport} --log-level warn"\n')
        command = unit_command(UNIT)
        assert command[:3] == ["/usr/bin/ddprund", "--port", str(port)], command
        service = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
        assert int(service.stdout.readline()) == port

        work = tempfile.mkdtemp()
        agents = [subprocess.Popen(
            ["/usr/bin/ddprun", "--nnodes=2", "--nproc_per_node=1", "--rdzv_backend=c10d",
             f"--rdzv_endpoint=127.0.0.1:{port}", "--rdzv_id=pkg", "--no_python", "/bin/sh", "-c",
             'touch "$0/ran.$RANK"; while [ ! -e "$0/go" ]; do sleep 0.05; done', work],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
        wait_for(lambda: all(os.path.exists(f"{work}/ran.{r}") for r in range(2)), "both ranks")
        status = json.loads(run("/usr/bin/ddprun", "status", f"--rdzv_endpoint=127.0.0.1:{port}",
                                "--rdzv_id=pkg", "--json").stdout)
        assert status["world_size"] == 2 and len(status["nodes"]) == 2, status
        with urllib.request.urlopen(f"http://127.0.0.1:{mport}/metrics", timeout=10) as r:
            metrics = r.read().decode()
        # Owned: 2 presence keys and the rendezvous leader's claim.
        assert re.search(r"^ddprund_owned_keys 3$", metrics, re.M), metrics
        open(f"{work}/go", "w").close()
        for a in agents:
            assert a.wait(60) == 0, a.communicate()

        # The SDK from the package: headers, ddp.pc and libddp where the system finds them.
        flags = run("pkg-config", "--cflags", "--libs", "ddp").stdout.split()
        exe = os.path.join(out, "consumer")
        run("g++", "-o", exe, os.path.join(HERE, "consumer", "main.cpp"), *flags)
        run("/usr/bin/ddprun", "--standalone", "--nproc_per_node=2", "--no_python", exe)
    finally:
        if service and service.poll() is None:
            service.terminate()
            assert service.wait(30) == 0, "ddprund did not exit 0 on SIGTERM"
        subprocess.run(["dpkg", "--purge", "ddprun"], capture_output=True)
    assert not os.path.exists("/usr/bin/ddprun") and not os.path.exists("/etc/default/ddprund")
    print("the .deb: built, installed, its service run from the unit, a job, status, metrics and "
          "an SDK consumer against it, purged: passed")


if __name__ == "__main__":
    main()
