"""Rank-dependent state saved with checkpoint.save every step (torch 1.13 or 2): each rank holds a
tensor, its RNG's state and a data position that no other rank has, all a function of its global
rank and the step. Arguments: STEPS OUT_DIR. After its load each rank writes
OUT_DIR/loaded.<rank>@<world size>:
"own STEP" where what it got is exactly what it saved at STEP, "fresh" where it got nothing, or
what was wrong. $HOLD_AT=STEP: after saving STEP the first time, each rank writes
OUT_DIR/held.<STEP>.<rank> and waits (bounded) for the test to take a node away.
$KILL_AT=RANK:STEP: in the first attempt, that rank SIGKILLs itself once every rank saved STEP.
$RESAVE=1: in the second attempt, rank 0 trains the step it restored again, saves it under the same
number (a loop off by one) and SIGKILLs itself before rank 1 saves it: that step then names two
states."""
import os
import signal
import sys
import time

import torch
import torch.distributed as dist

from ddprun import checkpoint


def advance(state, rank, step):
    """The state after `step`, from the state before it."""
    state["mine"] = state["mine"] * 0.5 + rank + step
    torch.manual_seed(0)
    torch.set_rng_state(state["rng"])
    torch.rand(rank + 3)  # each rank draws its own amount
    state["rng"] = torch.get_rng_state()
    state["position"] += 17 * (rank + 1)
    return state


def initial(rank):
    torch.manual_seed(rank)
    return {"mine": torch.full((4, 8), float(rank)), "rng": torch.get_rng_state(), "position": 0,
            "rank": rank}


def expected(rank, upto):
    state = initial(rank)
    for s in range(upto + 1):
        state = advance(state, rank, s)
    return state


def main():
    steps, out = int(sys.argv[1]), sys.argv[2]
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    step, state = checkpoint.load()
    if state is None:
        verdict = "fresh"
        state, first = initial(rank), 0
    else:
        want = expected(rank, step)
        same = (state["rank"] == rank and torch.equal(state["mine"], want["mine"])
                and torch.equal(state["rng"], want["rng"]) and state["position"] == want["position"])
        verdict = f"own {step}" if same else f"wrong: got rank {state['rank']}'s state of step {step}"
        first = step + 1
    with open(os.path.join(out, f"loaded.{rank}@{dist.get_world_size()}"), "w") as f:
        f.write(verdict)
    if os.environ.get("RESAVE") == "1" and os.environ.get("TORCHELASTIC_RESTART_COUNT") == "1":
        if rank == 0:
            checkpoint.save(step, advance(state, rank, step))
            os.kill(os.getpid(), signal.SIGKILL)
        dist.barrier()  # fails once rank 0 is gone
    hold = os.environ.get("HOLD_AT")
    for s in range(first, steps):
        state = advance(state, rank, s)
        checkpoint.save(s, state)
        dist.barrier()
        if os.environ.get("KILL_AT") == f"{rank}:{s}" and \
                os.environ.get("TORCHELASTIC_RESTART_COUNT") == "0":
            os.kill(os.getpid(), signal.SIGKILL)
        marker = os.path.join(out, f"held.{s}.{rank}")
        if hold == str(s) and not os.path.exists(marker):
            open(marker, "w").close()
            time.sleep(120)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
