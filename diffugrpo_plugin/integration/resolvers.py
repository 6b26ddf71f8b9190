"""OmegaConf resolvers our config uses for defaults that depend on the host.

* ``${diffugrpo.on_cpu:CPU_VALUE,ACCELERATOR_VALUE}``: the first value on a CPU-only host, the
  second where verl finds an accelerator (dtype, logical Ray resources). Nothing else in our
  code picks a device: verl's platform does.
* ``${diffugrpo.ray_cpus:TRAINERS,STORAGE_UNITS}``: Ray's CPU count for this machine (see :mod:`.platform`).
* ``${diffugrpo.new_ray_cluster:VALUE}``: VALUE where ``ray.init`` starts a Ray cluster, null where it joins a running
  one (``ray_kwargs.ray_init.address``, ``RAY_ADDRESS``; Ray then refuses ``num_cpus``/``num_gpus``).
* ``${diffugrpo.default_model:}`` / ``${diffugrpo.default_data:train}``: the tiny built-in
  model (warm-started by a short masked SFT, see :mod:`diffugrpo_plugin.training.warm_start`)
  and the generated code-task parquet, built on first use into ``$DIFFUGRPO_HOME``.
* ``${diffugrpo.required:KEY}``: a key a run must set (the model, the data), which the algorithm's config cannot
  choose; resolving it stops with the override to add. (A ``???`` would not do: merged over verl's defaults it
  leaves verl's value, ``~/data/rlhf/gsm8k/train.parquet``, in place.)
* ``${diffugrpo.default:KEY}``: the default of ``actor_rollout_ref.model.diffusion.KEY``
  (:mod:`diffugrpo_plugin.config.defaults`).
"""

from __future__ import annotations

from omegaconf import OmegaConf

from diffugrpo_plugin.config.defaults import register_resolver as register_default_resolver
from diffugrpo_plugin.integration.platform import (
    accelerator_present,
    joins_running_ray_cluster,
    physical_cores,
    ray_logical_cpus,
)


def on_cpu(cpu_value, accelerator_value):
    return accelerator_value if accelerator_present() else cpu_value


def ray_cpus(trainer_processes, storage_units) -> int:
    return ray_logical_cpus(physical_cores(), int(trainer_processes), int(storage_units))


def new_ray_cluster(value, *, _root_):
    """``value`` where verl's ``ray.init(**ray_kwargs.ray_init)`` starts a cluster, else null. Read when verl reads the
    key, just before ``ray.init``, so a ``RAY_ADDRESS`` set after composing counts too."""
    ray_init = OmegaConf.select(_root_, "ray_kwargs.ray_init", default=None) or {}
    joining = joins_running_ray_cluster(ray_init.get("address"), ray_init.get("_temp_dir"))
    return None if joining else value


def default_model() -> str:
    """The default model's cache directory; built where the model is first loaded, not here: OmegaConf
    evaluates a resolver even when a config merely overrides the key (a user's own model path)."""
    from diffugrpo_plugin.training.warm_start import warm_model_dir

    return str(warm_model_dir())


def default_data(split: str) -> str:
    from diffugrpo_plugin.data import default_data_paths

    train, validation = default_data_paths()
    if split not in ("train", "validation"):
        raise ValueError(f"diffugrpo.default_data takes 'train' or 'validation', got {split!r}")
    return train if split == "train" else validation


def required(key: str):
    raise ValueError(f"{key} is not set: add {key}=... (the algorithm config carries its recipe, not a model or data)")


def register() -> None:
    register_default_resolver()
    for name, function in {
        "diffugrpo.on_cpu": on_cpu,
        "diffugrpo.default_model": default_model,
        "diffugrpo.default_data": default_data,
        "diffugrpo.ray_cpus": ray_cpus,
        "diffugrpo.required": required,
    }.items():
        if not OmegaConf.has_resolver(name):
            OmegaConf.register_new_resolver(name, function, use_cache=True)
    if not OmegaConf.has_resolver("diffugrpo.new_ray_cluster"):
        # not cached: the answer depends on the environment and the cluster at the time verl reads the key
        OmegaConf.register_new_resolver("diffugrpo.new_ray_cluster", new_ray_cluster)
