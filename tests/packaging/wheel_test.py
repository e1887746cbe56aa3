"""The wheel, as a pip user gets it: scripts/build-wheel.sh builds it; it is installed with pip into a
virtual environment that sees Debian's torch; with a PATH whose first python3 has no torch, a DDP job
runs under the environment's `ddprun` and under `python -m ddprun`, every worker on the
environment's interpreter; PYTHON_EXEC still wins; the wheel's `ddprund` serves a 2-node c10d job;
the wheel's programs run a torch 2.14 job inside the forky root (a newer glibc); `pip uninstall`
leaves nothing of ddprun behind.

    wheel_test.py BUILD_DIR
"""
import glob
import json
import os
import re
import subprocess
import sys
import tempfile
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(HERE, "..", "launcher"))
from proc_util import finish, free_port  # noqa: E402

TORCH2_PYTHON = os.path.join(REPO, "scripts", "torch2", "python")
WORKER = os.path.join(HERE, "report_interpreter.py")


def run(*cmd, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, **kw)
    assert r.returncode == 0, (cmd, r.returncode, r.stdout[-3000:], r.stderr[-3000:])
    return r


def reports(folder, n):
    found = sorted(glob.glob(os.path.join(folder, "*.json")))
    assert len(found) == n, (folder, found)
    return [json.load(open(p)) for p in found]


def main():
    build = os.path.abspath(sys.argv[1])
    work = tempfile.mkdtemp(prefix="ddprun-wheel-")
    # The suite's own programs, as built: building them again here (a new commit changes their
    # version stamp) would relink them while other tests run them.
    built = run("bash", os.path.join(REPO, "scripts", "build-wheel.sh"),
                env={**os.environ, "DDPRUN_BUILD_DIR": build, "DDPRUN_WHEEL_DIR": work,
                     "DDPRUN_WHEEL_PREBUILT": "1"})
    wheel, size = built.stdout.split()[-3:-1]
    assert re.fullmatch(r"ddprun-[\d.]+-py3-none-manylinux_2_\d+_x86_64\.whl",
                        os.path.basename(wheel)), wheel
    names = zipfile.ZipFile(wheel).namelist()
    assert {"ddprun/bin/ddprun", "ddprun/bin/ddprund", "ddprun/__main__.py",
            "ddprun/heartbeat.py", "ddprun/checkpoint.py", "ddprun/_dcp_storage.py",
            "ddprun/_replica.py", "ddprun/_dcp_node_items.py"} <= set(names), \
        names

    venv = os.path.join(work, "venv")
    run("/usr/bin/python3", "-m", "venv", "--system-site-packages", venv)
    before = set(os.path.relpath(os.path.join(d, f), venv)
                 for d, _, fs in os.walk(venv) for f in fs)
    run(f"{venv}/bin/pip", "install", "--no-index", "--no-cache-dir", wheel)
    python = f"{venv}/bin/python"

    # The first python3 on PATH has no torch: without the wheel's choice every worker would fail.
    bare = os.path.join(work, "bare")
    os.mkdir(bare)
    with open(f"{bare}/python3", "w") as f:
        f.write('#!/bin/sh\nexec /usr/bin/python3 -S "$@"\n')
    os.chmod(f"{bare}/python3", 0o755)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHON_EXEC", "VIRTUAL_ENV")}
    env["PATH"] = f"{bare}:/usr/bin:/bin"
    for name, command in (("entry point", [f"{venv}/bin/ddprun"]),
                          ("python -m", [python, "-m", "ddprun"])):
        out = os.path.join(work, name.replace(" ", "-"))
        os.mkdir(out)
        run(*command, "--standalone", "--nproc_per_node=2", WORKER,
            env={**env, "REPORT_DIR": out}, cwd=work)
        for r in reports(out, 2):
            assert r["prefix"] == venv and r["executable"].startswith(venv + "/bin/"), (name, r)
            assert r["private"] == [], (name, r)  # DDPRUN_INTERPRETER is not a worker's
    # PYTHON_EXEC wins over the environment's interpreter (the bare one runs without site).
    out = os.path.join(work, "python-exec")
    os.mkdir(out)
    probe = os.path.join(work, "probe.py")
    with open(probe, "w") as f:
        f.write("import os, sys\nopen(os.environ['REPORT_DIR'] + '/0.json', 'w')"
                ".write('{\"no_site\": %d}' % sys.flags.no_site)\n")
    run(f"{venv}/bin/ddprun", "--standalone", "--nproc_per_node=1", probe,
        env={**env, "PYTHON_EXEC": f"{bare}/python3", "REPORT_DIR": out}, cwd=work)
    assert reports(out, 1) == [{"no_site": 1}]

    # The heartbeat helper for hang detection: importable, and beating into the worker's file.
    out = os.path.join(work, "heartbeat")
    os.mkdir(out)
    beats = ("import os, struct; from ddprun import heartbeat\n"
             "for _ in range(3): heartbeat.beat()\n"
             "data = open(os.environ['DDPRUN_HEARTBEAT_FILE'], 'rb').read()\n"
             "open(os.environ['REPORT_DIR'] + '/0.json', 'w').write(str(struct.unpack('<Q', data)[0]))\n")
    with open(os.path.join(work, "beats.py"), "w") as f:
        f.write(beats)
    run(f"{venv}/bin/ddprun", "--standalone", "--nproc_per_node=1", "--hang_timeout=30",
        os.path.join(work, "beats.py"), env={**env, "REPORT_DIR": out}, cwd=work)
    assert reports(out, 1) == [3]

    # The wheel's ddprund serving two agents of the wheel's ddprun.
    port = free_port()
    daemon = subprocess.Popen([f"{venv}/bin/ddprund", "--port", str(port)],
                              stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert int(daemon.stdout.readline()) == port
        ranks = os.path.join(work, "ranks")
        os.mkdir(ranks)
        agents = [subprocess.Popen(
            [f"{venv}/bin/ddprun", "--nnodes=2", "--nproc_per_node=1", "--rdzv_backend=c10d",
             f"--rdzv_endpoint=127.0.0.1:{port}", "--rdzv_id=wheel", "--no_python", "/bin/sh",
             "-c", 'echo "$WORLD_SIZE" > "$0/$RANK"', ranks],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env) for _ in range(2)]
        for status, _, err in finish(agents):
            assert status == 0, err
        assert sorted(os.listdir(ranks)) == ["0", "1"], os.listdir(ranks)
        assert all(open(os.path.join(ranks, r)).read() == "2\n" for r in ("0", "1"))
    finally:
        daemon.terminate()
        assert daemon.wait(30) == 0, "the wheel's ddprund did not exit 0 on SIGTERM"

    # In Debian forky's root (glibc newer than the build's), the same programs run torch 2.14.
    program = glob.glob(f"{venv}/lib/python3*/site-packages/ddprun/bin/ddprun")[0]
    out = os.path.join(work, "forky")
    os.mkdir(out)
    run(TORCH2_PYTHON, "-c", "import os, sys; os.execv(sys.argv[1], sys.argv[1:])", program,
        "--standalone", "--nproc_per_node=2", WORKER,
        env={**os.environ, "REPORT_DIR": out, "PYTHON_EXEC": "python3"}, cwd=work)
    for r in reports(out, 2):
        assert r["torch"].startswith("2."), r

    run(f"{venv}/bin/pip", "uninstall", "-y", "ddprun")
    after = set(os.path.relpath(os.path.join(d, f), venv) for d, _, fs in os.walk(venv) for f in fs)
    left = sorted(p for p in after - before if "ddprun" in p)
    assert not left and not os.path.exists(f"{venv}/bin/ddprun"), left
    print(f"the wheel ({os.path.basename(wheel)}, {int(size) // 1024} KiB): installed in a venv, "
          "DDP jobs on the environment's python through ddprun and python -m ddprun, PYTHON_EXEC "
          "wins, ddprun.heartbeat beats, its ddprund serves a 2-node job, its programs run torch "
          "2.14 in forky, uninstalled without a trace: passed")


if __name__ == "__main__":
    main()
