"""loom_torch: Loom's collectives as a torch.distributed backend named "loom".

Importing this package registers the backend; then

    import loom_torch
    import torch.distributed as dist
    dist.init_process_group("loom")          # torchrun, env://, tcp://, file:// as usual
    dist.all_reduce(tensor)                  # Loom's shm transport between the processes

Ranks on one host talk through Loom's shared-memory transport; across hosts, Loom's
gloo transport (TCP) between hosts and shm inside each. Every group made with
dist.new_group(backend="loom") connects the same way through its own store prefix.

Options (per group) come from `pg_options=loom_torch.Options(...)` given to
init_process_group or new_group, or else from these environment variables, read when
each group is created (see README.md):

    LOOM_TORCH_DETERMINISTIC=1     rank-order reductions: bitwise-reproducible results
    LOOM_TORCH_CHECK=full          every call's arguments compared before any data moves
    LOOM_TORCH_TRANSPORT=auto|shm|gloo|mpi
    LOOM_TORCH_HOST_ID=<id>        the host this rank counts as (default: hostname + boot id)
    LOOM_TORCH_GLOO_HOSTNAME=<addr>, LOOM_TORCH_GLOO_IFNAME=<iface>   across hosts
    LOOM_TORCH_HEARTBEAT_TIMEOUT=<seconds>   a stopped peer is named within this (default 10)
    LOOM_TORCH_CHUNK_BYTES=<bytes>  pipelining chunk of the ring and trees (default: Loom's)
    LOOM_TORCH_SHM_COPY=staged_or_mapped|auto|cma|staged   how shm moves large messages
    LOOM_TORCH_COST_MODEL=<file>   the cost model auto chooses by (default: measured across hosts)
"""

import atexit
import dataclasses
import gc
import os
import sys
import weakref
from datetime import timedelta
from typing import Optional

import torch.distributed as dist

from . import _C

__all__ = ["Options", "options_from_environment", "create", "layout", "describe", "empty",
           "BUILD_MODE"]

BUILD_MODE = _C.BUILD_MODE

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off", "")


@dataclasses.dataclass
class Options:
    """How a Loom process group connects and runs (pass as pg_options)."""

    # Fold every reduction in rank order, so two runs give bitwise the same results.
    deterministic: bool = False
    # "sequence": a mismatched call is named when its first message crosses;
    # "full": every call first compares its arguments across ranks (a round trip more).
    check: str = "sequence"
    # "auto": shm on one host; between hosts MPI (under mpirun) or gloo, shm inside;
    # "shm"; "gloo" (TCP among all ranks, no shm); "mpi" (as auto, MPI required).
    transport: str = "auto"
    # The host this rank counts as; ranks with one host id must share /dev/shm.
    host_id: str = ""
    # Across hosts: the address or the network interface Gloo's peers reach us at.
    gloo_hostname: str = ""
    gloo_interface: str = ""
    # Seconds within which a peer that stopped running (SIGSTOP, frozen host) is
    # named; 0 turns the check off.
    heartbeat_timeout: float = 10.0
    # Pipelining chunk of the ring and tree algorithms, in bytes; 0: Loom's default.
    chunk_bytes: int = 0
    # How shm moves large messages: "staged_or_mapped" (through a staging ring;
    # tensors from loom_torch.empty are mapped by the peers), "auto" (the kernel's
    # process_vm_readv where allowed), "cma", "staged".
    shm_copy: str = "staged_or_mapped"
    # The cost model `auto` chooses algorithms by: a file (collective_bench
    # --calibrate --save_cost_model). Empty: a group across hosts measures one on its
    # hosts the first time (about 2 s) and caches it ($LOOM_CACHE_DIR, or
    # ~/.cache/loom); a group on one host keeps the formulas. describe() says which.
    cost_model: str = ""
    # Without a file, across hosts: how many groups' calibrations the cache merges
    # (their median) before later groups on the same hosts only read it; 1 or more.
    cost_model_calibrations: int = 3


def _flag(name: str, value: str) -> bool:
    if value.lower() in _TRUE:
        return True
    if value.lower() in _FALSE:
        return False
    raise ValueError(f"loom: {name}={value!r} is not a boolean (1/0, true/false, yes/no, on/off)")


def _number(env, name: str, parse, what: str, default):
    """env[name] read by `parse` (int, float), or `default` where unset."""
    if name not in env:
        return default
    try:
        return parse(env[name])
    except ValueError:
        raise ValueError(f"loom: {name}={env[name]!r} is not {what}")


def options_from_environment(environ=None) -> Options:
    """Options from the LOOM_TORCH_* environment variables (the defaults where unset)."""
    env = os.environ if environ is None else environ
    options = Options()
    if "LOOM_TORCH_DETERMINISTIC" in env:
        options.deterministic = _flag("LOOM_TORCH_DETERMINISTIC", env["LOOM_TORCH_DETERMINISTIC"])
    options.check = env.get("LOOM_TORCH_CHECK", options.check)
    options.transport = env.get("LOOM_TORCH_TRANSPORT", options.transport)
    options.host_id = env.get("LOOM_TORCH_HOST_ID", options.host_id)
    options.gloo_hostname = env.get("LOOM_TORCH_GLOO_HOSTNAME", options.gloo_hostname)
    options.gloo_interface = env.get("LOOM_TORCH_GLOO_IFNAME", options.gloo_interface)
    options.shm_copy = env.get("LOOM_TORCH_SHM_COPY", options.shm_copy)
    options.cost_model = env.get("LOOM_TORCH_COST_MODEL", options.cost_model)
    options.cost_model_calibrations = _number(env, "LOOM_TORCH_COST_MODEL_CALIBRATIONS", int,
                                              "a whole number", options.cost_model_calibrations)
    options.chunk_bytes = _number(env, "LOOM_TORCH_CHUNK_BYTES", int, "a number of bytes",
                                  options.chunk_bytes)
    options.heartbeat_timeout = _number(env, "LOOM_TORCH_HEARTBEAT_TIMEOUT", float,
                                        "a number of seconds", options.heartbeat_timeout)
    return options


def create(store, rank: int, size: int, timeout: timedelta, options: Optional[Options] = None,
           world_rank: int = -1, group_name: str = ""):
    """Makes this rank's Loom process group over `store` (what torch's creator gets).

    Raises RuntimeError with Loom's message when the ranks cannot connect.
    """
    if options is None:
        options = options_from_environment()
    if not isinstance(options, Options):
        raise TypeError(f"loom: pg_options must be loom_torch.Options, got {type(options).__name__}")
    if int(options.cost_model_calibrations) > 2**31 - 1:  # below 1: Loom names it
        raise ValueError(f"loom: cost_model_calibrations {options.cost_model_calibrations} is above 2**31 - 1")
    group = _C.create_process_group(
        store, rank, size, timeout,
        world_rank=world_rank, group_name=group_name,
        deterministic=bool(options.deterministic), check=options.check,
        transport=options.transport, host_id=options.host_id,
        gloo_hostname=options.gloo_hostname, gloo_interface=options.gloo_interface,
        heartbeat_timeout=float(options.heartbeat_timeout), chunk_bytes=int(options.chunk_bytes),
        shm_copy=options.shm_copy, cost_model=options.cost_model,
        cost_model_calibrations=int(options.cost_model_calibrations))
    _groups.add(group)
    return group


def empty(*size, dtype=None):
    """A new CPU tensor (uninitialized as torch.empty's, zeroed in fact) in Loom's
    shared communication memory: over shm, peers map it and copy from it directly
    instead of through the kernel, so collectives on it are faster beyond the caches.
    For the buffers a program reuses; any tensor works with every call.

        grads = loom_torch.empty(4 << 20)            # float32, like torch.empty
        shard = loom_torch.empty(1024, 1024, dtype=torch.bfloat16)
    """
    import torch
    if len(size) == 1 and isinstance(size[0], (tuple, list, torch.Size)):
        size = tuple(size[0])
    dtype = torch.get_default_dtype() if dtype is None else dtype
    count = 1
    for d in size:
        count *= int(d)
    itemsize = torch.empty(0, dtype=dtype).element_size()
    return _C.shared_bytes(count * itemsize).view(dtype).view(size)


def layout(group=None) -> str:
    """How a Loom group is connected, e.g. "shm among 2 ranks on one host"."""
    if group is None:
        group = dist.distributed_c10d._get_default_group()
    return _C.layout(group)


def describe(group=None) -> str:
    """layout() and the options that change results or checks, e.g.
    "shm among 2 ranks on one host; deterministic"."""
    if group is None:
        group = dist.distributed_c10d._get_default_group()
    return _C.describe(group)


def explain(kind: str, nbytes: int, group=None) -> str:
    """The algorithm Loom's `auto` picks for a call of `kind` ("all_reduce",
    "all_gather", "reduce_scatter", "broadcast", ...) moving `nbytes` per rank, with
    every candidate's predicted time and whether it was measured or a formula."""
    if group is None:
        group = dist.distributed_c10d._get_default_group()
    return _C.explain(group, kind, int(nbytes))


def _create_extended(backend_options, pg_options):
    # torch's extended creator interface: the group's rank list and name come too,
    # so errors name peers by their world rank, and pg_options reaches us.
    ranks = list(backend_options.global_ranks_in_group)
    rank = backend_options.group_rank
    return create(backend_options.store, rank, backend_options.group_size,
                  backend_options.timeout, options=pg_options,
                  world_rank=ranks[rank] if ranks else rank,
                  group_name=backend_options.group_id)


# Every Loom group of this process, for _abort_on_uncaught_exception.
_groups = weakref.WeakSet()


def _abort_on_uncaught_exception(exc_type, exc, tb):
    # A rank that ends with an uncaught exception closes its groups as Python shuts
    # down, and a peer that waits on a closed rank waits until its timeout (30
    # minutes by default). Aborting them first fails the peers' calls at once,
    # naming this rank and the exception.
    reason = f"it ended with an uncaught {exc_type.__name__}: {exc}"
    if _groups:
        for group in list(_groups):
            try:
                _C.abort(group, reason)
            except Exception:  # noqa: BLE001 - reporting the original error matters more
                pass
    _previous_excepthook(exc_type, exc, tb)
    # Under mpirun, finalizing MPI at exit would wait for peers that may wait on
    # this rank: end the job instead, as Loom's MPI programs do (mpirun names us).
    if _C.mpi_started():
        sys.stderr.flush()
        _C.abort_mpi_job(reason)


_previous_excepthook = sys.excepthook


def _finalize_mpi_at_exit():
    # Under mpirun, a group between hosts initialized MPI, and mpirun counts a rank
    # that exits without MPI_Finalize as failed. Finalizing needs every transport
    # over MPI gone first: the groups are destroyed, then MPI finalized.
    if not _C.mpi_started():
        return
    if dist.is_initialized():
        dist.destroy_process_group()
    gc.collect()
    # Groups a program still references (a DDP module holds its group) are shut
    # down: their queued calls finish, their transports close.
    for group in list(_groups):
        _C.shutdown(group)
    _C.finalize_mpi()


def _register():
    if "LOOM" in dist.Backend._plugins:
        return
    try:
        dist.Backend.register_backend("loom", _create_extended, extended_api=True)
    except TypeError:
        # A torch without the extended interface calls create(store, rank, size, timeout).
        dist.Backend.register_backend("loom", create)


_register()
sys.excepthook = _abort_on_uncaught_exception
atexit.register(_finalize_mpi_at_exit)
