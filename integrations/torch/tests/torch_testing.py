"""Helpers of loom_torch's tests: run a test file's worker in N real processes.

A test file is both the driver (unittest cases, in the test process) and the worker
(`python3 <file> worker <case> ...`, one process per rank). run_ranks starts the
ranks with the environment torchrun gives (RANK, WORLD_SIZE, LOCAL_RANK,
MASTER_ADDR, MASTER_PORT), each in a session of its own, waits for them with a
deadline (killing every rank's session past it), and returns what each printed and
how it ended. check_nothing_left asserts that none of the ranks' processes is alive
and that no shared-memory segment of theirs is left in /dev/shm.

Example (in a driver):
    result = run_ranks(__file__, 3, ["all_reduce", str(seed)], timeout=60)
    result.check_ok(self)                       # every rank exited 0
    check_nothing_left(self, result)
"""

import dataclasses
import os
import random
import re
import signal
import socket
import subprocess
import sys
import time
from typing import Dict, List, Optional


def test_seed() -> int:
    """The seed of this run (LOOM_TORCH_TEST_SEED, or a fresh one), printed."""
    seed = int(os.environ.get("LOOM_TORCH_TEST_SEED", random.randrange(1 << 31)))
    print(f"seed {seed} (rerun with LOOM_TORCH_TEST_SEED={seed})", flush=True)
    return seed


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclasses.dataclass
class RankResult:
    rank: int
    pid: int
    returncode: Optional[int]
    stdout: str
    stderr: str


@dataclasses.dataclass
class RunResult:
    ranks: List[RankResult]
    seconds: float
    timed_out: bool
    # Processes still alive in a rank's session once the rank itself had ended
    # (killed afterwards): by session, their pids.
    leftovers: Dict[int, List[int]]

    def describe(self) -> str:
        lines = [f"ranks ran {self.seconds:.1f} s" + (" and TIMED OUT" if self.timed_out else "")]
        for r in self.ranks:
            lines.append(f"--- rank {r.rank} (pid {r.pid}) returncode {r.returncode}")
            lines.append("stdout:\n" + r.stdout[-6000:])
            lines.append("stderr:\n" + r.stderr[-6000:])
        return "\n".join(lines)

    def check_ok(self, case) -> None:
        bad = [r.rank for r in self.ranks if r.returncode != 0]
        case.assertFalse(self.timed_out or bad, f"ranks {bad} failed:\n{self.describe()}")


def run_ranks(script: str, world_size: int, args: List[str], timeout: float,
              env: Optional[Dict[str, str]] = None, launcher: Optional[List[str]] = None,
              launcher_takes_port: bool = True) -> RunResult:
    """Runs `script worker <args>` as `world_size` ranks (or, with `launcher`, one
    launcher process such as torchrun or mpirun that starts them itself; torchrun is
    given --master_port, mpirun's ranks find MASTER_PORT in the environment)."""
    port = free_port()
    base = dict(os.environ)
    base.update({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
                 "WORLD_SIZE": str(world_size), "LOCAL_WORLD_SIZE": str(world_size),
                 "PYTHONUNBUFFERED": "1"})
    base.update(env or {})
    commands = []
    if launcher is not None:
        port_flag = [f"--master_port={port}"] if launcher_takes_port else []
        commands.append((0, launcher + port_flag + [script, "worker"] + args, base))
    else:
        for rank in range(world_size):
            rank_env = dict(base, RANK=str(rank), LOCAL_RANK=str(rank))
            commands.append((rank, [sys.executable, script, "worker"] + args, rank_env))
    start = time.monotonic()
    procs = []
    for rank, argv, rank_env in commands:
        procs.append((rank, subprocess.Popen(argv, env=rank_env, stdout=subprocess.PIPE,
                                             stderr=subprocess.PIPE, text=True,
                                             start_new_session=True)))
    deadline = start + timeout
    timed_out = False
    results = []
    for rank, proc in procs:
        try:
            out, err = proc.communicate(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            timed_out = True
            for _, p in procs:
                kill_session(p.pid)
            out, err = proc.communicate()
        results.append(RankResult(rank, proc.pid, proc.returncode, out, err))
    # Whatever a rank started lives in its session (a launcher's ranks too): once
    # the rank has ended, nothing may remain there. What does is noted, then killed.
    leftovers = {}
    for _, proc in procs:
        members = session_members(proc.pid)
        if members:
            leftovers[proc.pid] = members
        kill_session(proc.pid)
    return RunResult(results, time.monotonic() - start, timed_out, leftovers)


def kill_session(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def session_members(sid: int) -> List[int]:
    """Live processes (not zombies) of session `sid`."""
    members = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        state, session = fields[0], int(fields[3])
        if session == sid and state != "Z":
            members.append(int(entry))
    return members


def loom_segments_of(pids: List[int]) -> List[str]:
    """Shared-memory segments in /dev/shm of the jobs these processes created.

    A Loom group's job id is made by its rank 0 as pt<pid in hex>-...; its segments
    are /dev/shm/loom.<job id>.*.
    """
    prefixes = tuple(f"loom.pt{pid:x}-" for pid in pids)
    return sorted(name for name in os.listdir("/dev/shm") if name.startswith(prefixes))


def check_nothing_left(case, result: RunResult) -> None:
    pids = [r.pid for r in result.ranks]
    case.assertFalse(result.leftovers,
                     f"processes left behind (session: pids): {result.leftovers}")
    segments = loom_segments_of(pids + [pid for r in result.ranks for pid in reported_pids(r)])
    case.assertFalse(segments, f"shared-memory segments left in /dev/shm: {segments}")


def reported_pids(rank: RankResult) -> List[int]:
    """Pids a rank printed as "pid <n>" lines (the ranks a launcher started)."""
    # torchrun --tee prefixes each line with "[<role><local rank>]:".
    return [int(m.group(1)) for m in re.finditer(r"(?:^|\]:)pid (\d+)$", rank.stdout, re.M)]
