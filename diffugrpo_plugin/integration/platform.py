"""A CPU platform for verl, chosen automatically on hosts without an accelerator.

verl 0.9.1 ships no CPU platform: on a CPU-only host it falls back to "nvidia" and fails in
``init_device_mesh`` / NCCL. This platform makes verl's own FSDP2 engine, Ray worker groups
and checkpointing run on CPU with gloo. It is probed after verl's built-in platforms, so
any host where CUDA, ROCm or an NPU is detected keeps verl's platform untouched.

Ray still schedules trainer workers on a resource called "GPU" (verl hard-codes
``use_gpu=True`` in its resource pools); on CPU those are *logical* GPUs that our config
declares to ``ray.init`` (see ``diffugrpo_plugin/config``), one per trainer process.

The machine's size: :func:`ray_logical_cpus` and :func:`torch_threads_per_trainer` size Ray and
torch from the physical cores (the config's ``ray_kwargs.ray_init`` keys use them).
"""

from __future__ import annotations

import ctypes
import functools
import os
import shutil
from types import ModuleType
from typing import Any, Optional

import torch

from verl.plugin.platform.platform_base import PlatformBase
from verl.plugin.platform.platform_manager import PlatformRegistry


def accelerator_present() -> bool:
    """True when CUDA/ROCm/an NPU is usable here or its management tool is installed."""
    if torch.cuda.is_available() or shutil.which("nvidia-smi") or shutil.which("rocm-smi"):
        return True
    npu = getattr(torch, "npu", None)
    return bool(npu is not None and npu.is_available())


# TransferQueue's thread count for tensor copies when TQ_NUM_THREADS is unset; it warns on every
# copy where that exceeds the physical cores
TRANSFER_QUEUE_DEFAULT_THREADS = 8
# CPUs verl's TransferQueue reserves in Ray besides its storage units: its controller actor
TRANSFER_QUEUE_CONTROLLER_CPUS = 1
# one free CPU lets Ray place the actors that reserve none while running (task runner, agent
# loop, reward and rollout-server actors): Ray asks one CPU of each to schedule it
SCHEDULING_HEADROOM_CPUS = 1


def physical_cores() -> int:
    import psutil

    return psutil.cpu_count(logical=False) or os.cpu_count() or 1


def ray_logical_cpus(cores: int, trainer_processes: int, storage_units: int) -> int:
    """Ray's CPU count on a CPU-only host: the physical cores, unless verl's reservations need more.

    Ray's CPUs are scheduling tokens, not threads. Each trainer process holds one in its placement
    group bundle, each TransferQueue storage unit and the controller hold one; less than that and
    verl's placement groups wait forever. Nothing else reserves a CPU while it runs."""
    reserved = trainer_processes + storage_units + TRANSFER_QUEUE_CONTROLLER_CPUS + SCHEDULING_HEADROOM_CPUS
    return max(cores, reserved)


def joins_running_ray_cluster(address: Optional[str], temp_dir: Optional[str]) -> bool:
    """Whether ``ray.init(address=address, _temp_dir=temp_dir)`` joins a running Ray cluster rather than starting one.

    Ray's own answer, from the function ``ray.init`` asks: ``RAY_ADDRESS``, else the address, else (none or ``auto``)
    the cluster a ``ray start`` on this machine last started, found in the temp dir. Joining, ``ray.init`` refuses
    ``num_cpus`` and ``num_gpus``: each node declared its own to ``ray start``."""
    from ray._private import services

    try:
        return services.canonicalize_bootstrap_address(address, temp_dir) is not None
    except ConnectionError:  # "auto" with no cluster to join: ray.init raises Ray's own message, starting nothing
        return True


def torch_threads_per_trainer(cores: int, trainer_processes: int) -> int:
    """Threads for each trainer process's torch: the physical cores shared out, at least one each
    (Ray would start every actor with one thread, leaving the other cores of a CPU host idle)."""
    return max(1, cores // max(1, trainer_processes))


def worker_thread_env(cores: int, trainer_processes: int, on_cpu: bool) -> dict[str, str]:
    """Thread counts for every Ray worker's environment: TransferQueue's copy threads never above the
    physical cores (it warns on every copy otherwise) and, on a CPU host, torch's threads
    (:func:`torch_threads_per_trainer`; where an accelerator trains, Ray's one per process stays)."""
    env = {"TQ_NUM_THREADS": str(min(TRANSFER_QUEUE_DEFAULT_THREADS, cores))}
    if on_cpu:
        env["OMP_NUM_THREADS"] = str(torch_threads_per_trainer(cores, trainer_processes))
    return env


# OpenMP's omp_pause_resource_t: a soft pause frees resources that the runtime recreates on next use
OMP_PAUSE_SOFT = 1


@functools.cache
def _gnu_openmp_pauses() -> tuple:
    """``omp_pause_resource_all`` of every GNU OpenMP library loaded here (torch's among them); empty with another
    runtime or without /proc. GNU's pause ends the calling thread's helpers only (``gomp_pause_host``) and does nothing
    inside a parallel region; LLVM's and Intel's pause their whole runtime, so a library exporting their
    ``kmp_get_stacksize`` under GNU's name is left alone."""
    try:
        with open("/proc/self/maps") as maps:
            fields = [line.rstrip("\n").split(maxsplit=5) for line in maps]
    except OSError:
        return ()
    paths = {f[5].removesuffix(" (deleted)") for f in fields if len(f) == 6 and "/libgomp" in f[5]}
    pauses = []
    for path in sorted(paths):
        try:
            library = ctypes.CDLL(path)
        except OSError:
            continue
        pause = getattr(library, "omp_pause_resource_all", None)
        if pause is None or hasattr(library, "kmp_get_stacksize"):
            continue
        pause.argtypes, pause.restype = [ctypes.c_int], ctypes.c_int
        pauses.append(pause)
    return tuple(pauses)


def release_openmp_threads() -> None:
    """End the OpenMP helper threads of this thread's torch; its next parallel op starts them again.

    The trainer worker runs its passes on two threads, the sampler's and the one verl's training calls run on, and
    each keeps a team of OpenMP threads. Once the teams hold more threads than the process may use cores, GNU OpenMP
    spins 100 rounds instead of 300,000 before parking a waiting thread, so each op of a small model waits for its
    helpers to wake: on 2 cores the tiny model's forward and backward took 1.4x as long while the other thread's
    idle team existed (``benchmarks/openmp_teams.py``), and the worker used 1.3 of its 2 cores. Each thread
    therefore ends its team when it hands over to the other (docs/concepts/step-cost.md). verl's transfer-queue
    thread in the worker is a third that can hold a team, on batches above ATen's 32,768-element grain; the tiny
    job's stay below it."""
    for pause in _gnu_openmp_pauses():
        pause(OMP_PAUSE_SOFT)


def ray_worker_env_vars(config):
    """``ray_kwargs.ray_init.runtime_env.env_vars``, created if missing: every Ray worker's environment."""
    from omegaconf import open_dict

    with open_dict(config):
        ray_init = config.ray_kwargs.ray_init
        if ray_init.get("runtime_env") is None:
            ray_init.runtime_env = {}
        if ray_init.runtime_env.get("env_vars") is None:
            ray_init.runtime_env.env_vars = {}
    return ray_init.runtime_env.env_vars


def size_ray_workers(config) -> None:
    """Adds :func:`worker_thread_env` to the Ray workers' environment where the config does not set them.
    In code, not in the config: verl passes that node to Ray without resolving interpolations. Values the user set
    become strings, as Ray requires (Hydra reads ``env_vars.OMP_NUM_THREADS=1`` as an integer)."""
    from omegaconf import open_dict

    from diffugrpo_plugin.integration.preflight import ConfigError

    env_vars = ray_worker_env_vars(config)
    sized = worker_thread_env(physical_cores(), int(config.trainer.n_gpus_per_node), not accelerator_present())
    with open_dict(env_vars):
        for name, value in list(env_vars.items()):
            if value is None:
                raise ConfigError(
                    f"ray_kwargs.ray_init.runtime_env.env_vars.{name} is null: give it a value or leave it out"
                )
            env_vars[name] = str(value).lower() if isinstance(value, bool) else str(value)
        for name, value in sized.items():
            if name not in env_vars:
                env_vars[name] = value


class CPUDeviceModule(ModuleType):
    """The subset of the ``torch.cuda`` API verl calls, answered for host memory.

    Memory statistics are reported as 0 (host memory is tracked by verl's
    ``perf/cpu_memory_used_gb`` metric instead); synchronisation and cache calls are no-ops.
    """

    def __init__(self):
        super().__init__("diffugrpo_cpu_device")

    @staticmethod
    def is_available() -> bool:
        return True

    @staticmethod
    def device_count() -> int:
        return 1

    @staticmethod
    def current_device() -> str:
        return "cpu"

    @staticmethod
    def set_device(_device: Any) -> None:
        return None

    @staticmethod
    def get_device_name(_device: Any = None) -> str:
        return "CPU"

    @staticmethod
    def synchronize(_device: Any = None) -> None:
        return None

    @staticmethod
    def empty_cache() -> None:
        return None

    @staticmethod
    def ipc_collect() -> None:
        return None

    @staticmethod
    def memory_allocated(_device: Any = None) -> int:
        return 0

    memory_reserved = max_memory_allocated = max_memory_reserved = memory_allocated

    @staticmethod
    def mem_get_info(_device: Any = None) -> tuple[int, int]:
        import psutil

        memory = psutil.virtual_memory()
        return memory.available, memory.total

    @staticmethod
    def set_per_process_memory_fraction(_fraction: float, _device: Any = None) -> None:
        return None

    @staticmethod
    def get_rng_state(_device: Any = None) -> torch.Tensor:
        return torch.get_rng_state()

    @staticmethod
    def set_rng_state(state: torch.Tensor, _device: Any = None) -> None:
        torch.set_rng_state(state)

    @staticmethod
    def manual_seed(seed: int) -> None:
        torch.manual_seed(seed)

    manual_seed_all = manual_seed

    def __getattr__(self, name: str):
        # streams, events and anything else torch.cpu models (no-op stream objects)
        return getattr(torch.cpu, name)


@PlatformRegistry.register(platform="cpu")
class PlatformCPU(PlatformBase):
    """Host CPU with gloo collectives; selected only when no accelerator is present."""

    _device_module = CPUDeviceModule()

    @property
    def device_name(self) -> str:
        return "cpu"

    @property
    def vendor_name(self) -> str:
        return "cpu"

    @property
    def device_module(self) -> ModuleType:
        return self._device_module

    def is_available(self) -> bool:
        return True

    def is_platform_available(self, use_smi_check: bool = False) -> bool:
        return not accelerator_present()

    def current_device(self) -> str:
        return "cpu"

    def device_count(self) -> int:
        return 1

    def set_device(self, device_index: int) -> None:
        return None

    def synchronize(self, device_index: Optional[int] = None) -> None:
        return None

    def manual_seed(self, seed: int) -> None:
        torch.manual_seed(seed)

    def manual_seed_all(self, seed: int) -> None:
        torch.manual_seed(seed)

    def set_allocator_settings(self, settings: str) -> None:
        return None

    def empty_cache(self) -> None:
        return None

    def get_device_capability(self, device_index: int = 0) -> tuple[Optional[int], Optional[int]]:
        return None, None

    def communication_backend_name(self) -> str:
        return "gloo"

    def visible_devices_envvar(self) -> str:
        # Ray sets this for its logical "GPU" resource; it has no effect on CPU work.
        return "CUDA_VISIBLE_DEVICES"

    def ray_resource_name(self) -> str:
        return "GPU"

    def ray_resource_options(self, num_gpus: float) -> dict[str, Any]:
        return {"num_gpus": num_gpus}

    def ray_noset_envvars(self) -> list[str]:
        return []

    def is_ipc_supported(self) -> bool:
        return False

    def nvtx_range(self, msg: str):
        from contextlib import nullcontext

        return nullcontext()

    def profiler_start(self) -> None:
        return None

    def profiler_stop(self) -> None:
        return None

    def cudart(self) -> Any:
        return None
