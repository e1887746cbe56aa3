"""`ddprun timeline`: the event logs of a real 2-node job (a failure, a hang, then success; one node's
clock 5 s ahead through the test hook DDPRUN_TEST_CLOCK_SKEW_MS) become a Chrome trace that keeps to
the trace-event format with each node's attempts in order, placed on one clock; the HTML view renders
in a real headless Chromium without errors and shows the rows; bad input is named by file and line
and the rest is drawn.

    timeline_test.py DDPRUN CASE    (CASE: one of the functions named case_*)
"""
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import zlib

from proc_util import free_port

HERE = os.path.dirname(os.path.abspath(__file__))
JOB = os.path.join(HERE, "workloads", "timeline_job.py")
SKEW_MS = 5000
DDPRUN = None


def two_node_job(out):
    """Runs the job; returns the two event logs (the second node's clock SKEW_MS ahead)."""
    port = free_port()
    logs = [os.path.join(out, f"node{i}.jsonl") for i in (0, 1)]
    common = ["--nnodes=2", "--nproc_per_node=2", "--rdzv_backend=c10d",
              f"--rdzv_endpoint=127.0.0.1:{port}", "--rdzv_id=timeline", "--max_restarts=2",
              "--hang_timeout=2", JOB]
    procs = []
    for i, log in enumerate(logs):
        env = {**os.environ, "PYTHON_EXEC": "/usr/bin/python3"}
        if i == 1:
            env["DDPRUN_TEST_CLOCK_SKEW_MS"] = str(SKEW_MS)
        procs.append(subprocess.Popen([DDPRUN, f"--event_log={log}", *common], env=env,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True))
    for p in procs:
        _, err = p.communicate(timeout=180)
        assert p.returncode == 0, err
    return logs


def timeline(*args):
    return subprocess.run([DDPRUN, "timeline", *args], capture_output=True, text=True, timeout=60)


def check_trace_format(trace):
    """The trace-event format's rules for what the writer emits: metadata, complete and instant
    events with their required fields, µs timestamps, and spans that nest on each thread."""
    assert isinstance(trace["traceEvents"], list) and trace["displayTimeUnit"] == "ms"
    per_thread = {}
    for e in trace["traceEvents"]:
        assert {"name", "ph", "pid", "tid"} <= e.keys(), e
        assert isinstance(e["pid"], int) and isinstance(e["tid"], int), e
        if e["ph"] == "M":
            assert e["name"] in ("process_name", "process_sort_index", "thread_name"), e
            assert isinstance(e["args"], dict), e
            continue
        assert e["ph"] in ("X", "i"), e
        assert isinstance(e["ts"], (int, float)) and e["ts"] >= 0, e
        if e["ph"] == "X":
            assert isinstance(e["dur"], (int, float)) and e["dur"] >= 0, e
            per_thread.setdefault((e["pid"], e["tid"]), []).append((e["ts"], e["ts"] + e["dur"]))
        else:
            assert e["s"] in ("t", "p", "g"), e
    for spans in per_thread.values():  # each pair either nests or is disjoint
        spans.sort(key=lambda s: (s[0], -s[1]))
        open_ends = []
        for start, end in spans:
            while open_ends and open_ends[-1] <= start:
                open_ends.pop()
            assert not open_ends or end <= open_ends[-1], (start, end, open_ends)
            open_ends.append(end)
    names = {e["pid"]: e["args"]["name"] for e in trace["traceEvents"]
             if e["ph"] == "M" and e["name"] == "process_name"}
    return names


def case_a_real_two_node_job_becomes_a_trace_on_one_clock():
    out = tempfile.mkdtemp()
    logs = two_node_job(out)
    trace_file = os.path.join(out, "trace.json")
    r = timeline(*logs, "-o", trace_file)
    assert r.returncode == 0, r.stderr
    trace = json.load(open(trace_file))
    names = check_trace_format(trace)
    assert sorted(names.values())[0].startswith("node 0 · ") and len(names) == 2, names
    events = trace["traceEvents"]
    # Each node's attempts, in order, ended as they did: node 0 holds ranks 0 and 1 (rank 1 failed,
    # then rank 0 hung); node 1's workers were stopped by ddprun twice.
    ended = {}
    for pid, name in names.items():
        attempts = sorted((e for e in events if e["pid"] == pid and e["ph"] == "X" and e["tid"] == 0
                           and e["cat"] != "round"), key=lambda e: e["ts"])
        assert [a["name"] for a in attempts] == ["attempt 0", "attempt 1", "attempt 2"], attempts
        ended[name.split(" · ")[0]] = [a["cat"] for a in attempts]
    assert ended == {"node 0": ["failed", "hung", "succeeded"],
                     "node 1": ["stopped", "stopped", "succeeded"]}, ended
    assert any(e["name"] == "hang" and e["ph"] == "i" for e in events), "no hang mark"
    phases = {e["cat"] for e in events if e["ph"] == "X" and e["tid"] == 1}
    assert phases == {"stopping", "rendezvous", "starting"}, phases
    # Microseconds: the trace spans the job's few seconds.
    end = max(e["ts"] + e.get("dur", 0) for e in events if e["ph"] != "M")
    assert 1e6 < end < 120e6, end
    # One clock: both nodes' rounds formed together (raw times 5 s apart), and the correction is
    # shown, the skewed node's 5 s from the other's.
    formed = {}
    for pid in names:
        formed[pid] = sorted(e["ts"] for e in events if e["pid"] == pid and e.get("cat") == "round")
    first, second = formed.values()
    assert len(first) == len(second) == 3, formed
    assert all(abs(a - b) < 300e3 for a, b in zip(first, second)), formed
    raw = [json.loads(open(log).readline())["time_ms"] for log in logs]
    assert abs(raw[1] - raw[0] - SKEW_MS) < 2000, raw
    offsets = trace["otherData"]["clock_offsets_ms"]
    skewed = [v for k, v in offsets.items() if "node" in k]
    assert abs(abs(skewed[0] - skewed[1]) - SKEW_MS) < 50, offsets
    assert "clocks corrected to the store's" in r.stderr, r.stderr
    print(f"a 2-node job with a failure and a hang: a valid trace, attempts {ended}, restart phases "
          f"{sorted(phases)}; one node's clock {SKEW_MS} ms ahead, corrected ({offsets}): passed")


def png_pixels(path):
    """(width, height, rows of RGB(A) tuples) of an 8-bit, non-interlaced RGB or RGBA PNG."""
    data = open(path, "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    at, idat = 8, b""
    while at < len(data):
        size, kind = struct.unpack(">I4s", data[at:at + 8])
        body = data[at + 8:at + 8 + size]
        if kind == b"IHDR":
            width, height, depth, color, _, _, interlace = struct.unpack(">IIBBBBB", body)
            assert depth == 8 and color in (2, 6) and interlace == 0, (depth, color, interlace)
        elif kind == b"IDAT":
            idat += body
        at += 12 + size
    step = 3 if color == 2 else 4
    raw, stride, rows, prev = zlib.decompress(idat), width * step, [], bytearray(width * step)
    for y in range(height):
        f, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - step] if i >= step else 0
            b, c = prev[i], prev[i - step] if i >= step else 0
            if f == 1:
                line[i] = (line[i] + a) & 255
            elif f == 2:
                line[i] = (line[i] + b) & 255
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append([tuple(line[x:x + 3]) for x in range(0, stride, step)])
        prev = line
    return width, height, rows


def chromium(*args):
    profile = tempfile.mkdtemp()
    try:
        return subprocess.run(
            ["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
             "--no-first-run", "--disable-background-networking", "--disable-component-update",
             "--disable-sync", f"--user-data-dir={profile}", "--enable-logging=stderr", "--v=0",
             *args], capture_output=True, text=True, timeout=120)
    finally:
        shutil.rmtree(profile, ignore_errors=True)


def case_the_html_view_renders_in_a_real_browser():
    out = tempfile.mkdtemp()
    logs = two_node_job(out)
    page = os.path.join(out, "timeline.html")
    r = timeline("--html", *logs, "-o", page)
    assert r.returncode == 0, r.stderr
    html = open(page).read()
    assert "http://" not in html.replace("http://www.w3.org/2000/svg", "") and \
        "https://" not in html and "<script src" not in html, "the page reaches outside itself"
    url = "file://" + page
    dom = chromium("--dump-dom", url)
    assert dom.returncode == 0, dom.stderr
    assert 'data-drawn-rows="2"' in dom.stdout, dom.stdout[-2000:]
    assert dom.stdout.count("data-item=") >= 6, dom.stdout[-2000:]
    console = [line for line in dom.stderr.splitlines() if "CONSOLE" in line or "Uncaught" in line]
    assert not console, console
    shot = os.path.join(out, "timeline.png")
    s = chromium("--window-size=1200,400", f"--screenshot={shot}", url)
    assert s.returncode == 0 and os.path.exists(shot), s.stderr
    _, _, rows = png_pixels(shot)
    colors = {"succeeded": (0x2e, 0x7d, 0x32), "failed": (0xc6, 0x28, 0x28),
              "hung": (0xef, 0x6c, 0x00), "stopped": (0x9e, 0x9e, 0x9e)}
    seen = {k: sum(row.count(c) for row in rows) for k, c in colors.items()}
    assert all(n > 50 for n in seen.values()), seen  # every kind of attempt drawn, not a blank page
    # A job of 64 nodes and 100 restarts: every row drawn, in one page load.
    big = os.path.join(out, "big")
    os.makedirs(big)
    synthetic_logs(big, 64, 100)
    big_page = os.path.join(out, "big.html")
    r = timeline("--html", big, "-o", big_page)
    assert r.returncode == 0, r.stderr
    started = time.monotonic()
    dom = chromium("--window-size=1400,2200", f"--screenshot={os.path.join(out, 'big.png')}",
                   "file://" + big_page)
    drawn_in = time.monotonic() - started
    assert dom.returncode == 0, dom.stderr
    assert not [line for line in dom.stderr.splitlines() if "CONSOLE" in line], dom.stderr
    dom = chromium("--dump-dom", "file://" + big_page)
    assert 'data-drawn-rows="64"' in dom.stdout, dom.stdout[-2000:]
    keep = os.environ.get("DDPRUN_TIMELINE_SCREENSHOT")
    if keep:
        shutil.copy(shot, keep)
    print(f"the HTML view in headless Chromium: 2 rows drawn, no console error, the screenshot "
          f"shows the attempts (pixels per colour {seen}); 64 nodes and 100 restarts drawn, a "
          f"screenshot in {drawn_in:.1f} s: passed")


def synthetic_logs(folder, nodes, restarts):
    """Event logs of a job of `nodes` nodes whose attempts each fail on one node after 60 s, written
    as the agents write them: for drawing a large job without running one."""
    t0 = int(time.time() * 1000)
    for n in range(nodes):
        with open(os.path.join(folder, f"n{n}.jsonl"), "w") as f:
            def event(t, name, **fields):
                f.write(json.dumps({"time_ms": t, "node": f"host{n}", "agent_pid": 1000 + n,
                                    "run_id": "big", "event": name, **fields}) + "\n")
            t = t0
            for a in range(restarts + 1):
                event(t, "round_formed", round=a, restart_count=a, node_rank=n, world_size=nodes,
                      clock_offset_ms=0.0, clock_round_trip_ms=0.1)
                event(t + 5, "workers_started", workers=[{"local_rank": 0, "rank": n, "pid": 1}])
                fails = a < restarts and n == a % nodes
                event(t + 60000, "worker_exited", local_rank=0, rank=n, pid=1,
                      exitcode=1 if fails else 0, stopped_by_ddprun=not fails and a < restarts)
                t += 62000
            event(t, "job_end", state="succeeded")


def case_bad_input_is_named_and_the_rest_drawn():
    out = tempfile.mkdtemp()
    logs = two_node_job(out)
    lines = open(logs[1]).read().splitlines()
    bad = os.path.join(out, "bad")
    os.makedirs(bad)
    # Node 1's log, its 3rd line cut in half and its 5th line two lines run together; an empty
    # file; another job's events.
    lines[2] = lines[2][:len(lines[2]) // 2]
    lines[4] = lines[4] + lines[5]
    with open(os.path.join(bad, "node1.jsonl"), "w") as f:
        f.write("\n".join(lines) + "\n")
    open(os.path.join(bad, "empty.jsonl"), "w").close()
    other = [json.loads(line) for line in open(logs[0]).read().splitlines()[:4]]
    with open(os.path.join(bad, "other.jsonl"), "w") as f:
        for e in other:
            f.write(json.dumps({**e, "run_id": "another"}) + "\n")
    trace_file = os.path.join(out, "trace.json")
    r = timeline(logs[0], bad, "-o", trace_file)
    assert r.returncode == 0, r.stderr
    node1 = os.path.join(bad, "node1.jsonl")
    for want in (f"{node1}:3: not one JSON object", f"{node1}:5: not one JSON object",
                 f"{os.path.join(bad, 'empty.jsonl')}: no events",
                 f"{os.path.join(bad, 'other.jsonl')}:1: events of job another (4 in all), "
                 f"not of job timeline"):
        assert want in r.stderr, (want, r.stderr)
    names = check_trace_format(json.load(open(trace_file)))
    assert len(names) == 2, names  # both nodes still drawn
    r = timeline(os.path.join(bad, "empty.jsonl"), "-o", trace_file)
    assert r.returncode == 1 and "no event to draw" in r.stderr, r.stderr
    r = timeline("-o", trace_file)
    assert r.returncode == 2, r.stderr
    r = timeline(os.path.join(out, "missing.jsonl"), logs[0], "-o", trace_file)
    assert r.returncode == 0 and "missing.jsonl: cannot be read" in r.stderr, r.stderr
    print("a truncated line, two lines run together, an empty file, another job's events and a "
          "missing file: each named by file and line, the rest drawn: passed")


def main():
    global DDPRUN
    DDPRUN = sys.argv[1]
    globals()["case_" + sys.argv[2]]()


if __name__ == "__main__":
    main()
