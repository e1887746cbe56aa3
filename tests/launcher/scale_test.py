"""An agent that hosts the worker store keeps supervising while that store is stormed: the store runs
on a thread of its own (store_thread.hpp), so a worker's death is still seen at once and the agent's
heartbeat never lapses.

    scale_test.py DDPRUN DDPRUND STORE_LOAD
"""
import os
import signal
import subprocess
import sys
import tempfile
import time
from proc_util import wait_for
from agents import Processes, agent_command
from job_logs import events

DDPRUN = DDPRUND = LOAD = None
PROCS = Processes()  # killed at the end whatever happened
CONNECTIONS = 3000

# Rank 0 writes its pid and MASTER_PORT, then every worker waits for "$0/go". ("$$$$" is the shell's
# "$$": worker arguments go through torchrun's ${local_rank} macro, where "$$" stands for "$".)
WORKER = ('echo "$$$$ $MASTER_PORT" > "$0/w.$RANK.$TORCHELASTIC_RESTART_COUNT.tmp" && '
          'mv "$0/w.$RANK.$TORCHELASTIC_RESTART_COUNT.tmp" "$0/w.$RANK.$TORCHELASTIC_RESTART_COUNT"; '
          'while [ ! -e "$0/go" ]; do sleep 0.05; done')


def case_an_agent_serving_a_storm_still_supervises():
    _, port, _ = PROCS.ddprund(DDPRUND, "--log-level", "warn")
    endpoint = f"127.0.0.1:{port}"
    work = tempfile.mkdtemp()
    logs = [os.path.join(work, f"events.{i}") for i in range(2)]
    agents = [PROCS.start(agent_command(DDPRUN, nnodes=2, nproc=1, endpoint=endpoint,
                                        run_id="storm", conf="heartbeat_timeout=3",
                                        extra=["--max_restarts=1", f"--event_log={logs[i]}"],
                                        command=["--no_python", "/bin/sh", "-c", WORKER, work]),
                          stdout=subprocess.DEVNULL)
              for i in range(2)]
    wait_for(lambda: os.path.exists(f"{work}/w.0.0") and os.path.exists(f"{work}/w.1.0"),
             "both workers", timeout=30)
    pid, port = map(int, open(f"{work}/w.0.0").read().split())
    # Which agent hosts the worker store: node rank 0's, the one whose log shows rank 0 started (a
    # worker may write its file before its agent has logged the start).
    def rank0_agent():
        return next((i for i in range(2) if os.path.exists(logs[i]) and any(
            e["event"] == "workers_started" and e["workers"][0]["rank"] == 0
            for e in events(logs[i]))), None)
    wait_for(lambda: rank0_agent() is not None, "rank 0's start in an event log")
    host = rank0_agent()
    storm = PROCS.start([LOAD, "ops", "--port", str(port), "--dialect", "modern", "--connections",
                   str(CONNECTIONS), "--seconds", "10"], stdout=subprocess.DEVNULL,
                  stderr=subprocess.DEVNULL)
    # The storm is on: the store holds every connection (it shows in /proc as sockets of the agent).
    agent_pid = agents[host].pid
    wait_for(lambda: len([f for f in os.listdir(f"/proc/{agent_pid}/fd")]) > CONNECTIONS,
             "the storm's connections", timeout=30)
    time.sleep(4)  # the load itself: longer than the heartbeat timeout, under it
    killed_ms = int(time.time() * 1000)  # whole ms, as the event log writes them
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: any(e["event"] == "worker_exited" and e["rank"] == 0 and
                         e["time_ms"] >= killed_ms for e in events(logs[host])),
             "the worker's death seen", timeout=30)
    seen = next(e["time_ms"] for e in events(logs[host]) if e["event"] == "worker_exited" and
                e["rank"] == 0 and e["time_ms"] >= killed_ms)
    latency = seen - killed_ms
    storm_alive = storm.poll() is None
    wait_for(lambda: os.path.exists(f"{work}/w.0.1") and os.path.exists(f"{work}/w.1.1"),
             "the restarted workers", timeout=30)
    open(f"{work}/go", "w").close()
    for a in agents:
        assert a.wait(60) == 0, a.stderr.read()
    for log in logs:
        names = [e["event"] for e in events(log)]
        # The heartbeat held under the storm: no node ever left, nobody was expelled.
        assert "node_left" not in names[:names.index("restart")], names
        rounds = [e for e in events(log) if e["event"] == "round_formed"]
        assert [r["num_nodes"] for r in rounds] == [2, 2], rounds
    assert storm_alive, "the storm ended before the worker was killed"
    assert latency < 1000, f"the worker's death was seen {latency:.0f} ms late"
    print(f"worker store stormed by {CONNECTIONS} connections for 4 s, longer than the 3 s "
          f"heartbeat timeout: the worker's SIGKILL seen {latency:.0f} ms later, no node lost: passed")


def main():
    global DDPRUN, DDPRUND, LOAD
    DDPRUN, DDPRUND, LOAD = map(os.path.abspath, sys.argv[1:4])
    with PROCS:
        case_an_agent_serving_a_storm_still_supervises()


if __name__ == "__main__":
    main()
