"""OmegaConf resolvers our config uses for defaults that depend on the host.

* ``${diffugrpo.on_cpu:CPU_VALUE,ACCELERATOR_VALUE}``: the first value on a CPU-only host, the
  second where verl finds an accelerator (dtype, logical Ray resources). Nothing else in our
  code picks a device: verl's platform does.
* ``${diffugrpo.ray_cpus:TRAINERS,STORAGE_UNITS}``: Ray's CPU count for this machine (see :mod:`.platform`).
* ``${diffugrpo.default_model:}`` / ``${diffugrpo.default_data:train}``: the tiny built-in
  model (warm-started by a short masked SFT, see :mod:`diffugrpo_plugin.training.warm_start`)
  and the generated code-task parquet, built on first use into ``$DIFFUGRPO_HOME``.
"""

from __future__ import annotations

from omegaconf import OmegaConf

from diffugrpo_plugin.integration.platform import accelerator_present, physical_cores, ray_logical_cpus


def on_cpu(cpu_value, accelerator_value):
    return accelerator_value if accelerator_present() else cpu_value


def ray_cpus(trainer_processes, storage_units) -> int:
    return ray_logical_cpus(physical_cores(), int(trainer_processes), int(storage_units))


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


def register() -> None:
    for name, function in {
        "diffugrpo.on_cpu": on_cpu,
        "diffugrpo.default_model": default_model,
        "diffugrpo.default_data": default_data,
        "diffugrpo.ray_cpus": ray_cpus,
    }.items():
        if not OmegaConf.has_resolver(name):
            OmegaConf.register_new_resolver(name, function, use_cache=True)
