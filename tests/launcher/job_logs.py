"""What the process tests read of a job as it runs or once it ended: an agent's event log
(--event_log, one JSON object per line) and its metrics (--metrics_port)."""
import json
import os
import urllib.request


def events(path, name=None):
    """The events in the log at `path` (none where it does not exist yet), those named `name`
    where given. A line the agent is writing right now may be read in part: only ended lines
    count."""
    if not os.path.exists(path):
        return []
    with open(path) as f:
        text = f.read()
    every = [json.loads(line) for line in text.split("\n")[:-1]]
    return [e for e in every if name is None or e["event"] == name]


def node_events(out, i, name=None):
    """events() of host i's log, OUT/events.I.jsonl (the multi-node tests' layout)."""
    return events(os.path.join(out, f"events.{i}.jsonl"), name)


def metrics_text(port, path="/metrics"):
    """The text the agent or store serves at http://127.0.0.1:PORT/PATH (Prometheus' format)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as r:
        assert r.status == 200 and r.headers["Content-Type"].startswith("text/plain"), r.headers
        return r.read().decode()


def metrics(port, path="/metrics"):
    """metrics_text() as {sample with its labels: value}."""
    samples = {}
    for line in metrics_text(port, path).splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            samples[name] = float(value)
    return samples
