"""Every place diffugrpo patches, reaches into or copies verl's internals (and TransferQueue's, which verl 0.9.1's V1
trainer runs on), in one module, with a fingerprint of each as of verl 0.9.1 / TransferQueue 0.1.11.

The rest of the package uses verl through its public extension points (registries, subclasses of its engine, trainer,
workers and rollout classes) and calls the functions below for the rest. :data:`VERL_DEPENDENCIES` lists every verl
object we depend on beyond that public surface: what we patch, the private names we reach, the methods of verl's
classes we override and the code we copied, each with its signature and the sha256 of its source.
``tests/test_verl_internals.py`` compares them with the installed verl and fails naming the object and our code that
depends on it; docs/guides/verl.md#verl-internals-we-depend-on says what each is for and what verl 0.10 would do to it.

After upgrading verl: read each object the test names against what our code assumes, adapt our code, then
``python -m diffugrpo_plugin.integration.verl_internals`` prints the new fingerprints to paste into the table.

verl is imported inside the functions: this module is imported by every Ray process's plugin registration, and most
of them never build an engine or a TransferQueue.
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
import os
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass

import torch

from verl.utils.device import get_device_name

DOC = "docs/guides/verl.md#verl-internals-we-depend-on"


@dataclass(frozen=True)
class Dependency:
    """How diffugrpo depends on one verl object (the table's key: ``module:qualified.name``), and its fingerprint.

    ``uses``: what of ours depends on it, each ``"<patches|reaches|overrides|copies> in <our name>"``. A callable or
    class has its ``signature`` (``str(inspect.signature)``) and/or ``source_sha256`` (of ``inspect.getsource``); a
    private attribute or module constant its ``attribute_type`` (the type's name); ``assigns`` names the instance
    attributes we read that the object's source must set (``self.<name> = ...``)."""

    uses: tuple[str, ...]
    signature: str | None = None
    source_sha256: str | None = None
    attribute_type: str | None = None
    assigns: tuple[str, ...] = ()


def resolve(target: str):
    """The object ``module:qualified.name`` names (attribute by attribute from the module)."""
    module_name, _, qualified = target.partition(":")
    found = importlib.import_module(module_name)
    for name in qualified.split("."):
        found = getattr(found, name)
    return found


def signature_of(found) -> str:
    """A callable's or class's parameters as ``str(inspect.signature)`` writes them: names, kinds and defaults, with the
    annotations left out (they name other libraries' classes, which move without verl changing) and so is the
    ``_ray_trace_ctx`` Ray adds to a class's methods once some actor class built from it exists (import order)."""
    signature = inspect.signature(found)
    parameters = [
        parameter.replace(annotation=inspect.Parameter.empty)
        for name, parameter in signature.parameters.items()
        if name != "_ray_trace_ctx"
    ]
    return str(signature.replace(parameters=parameters, return_annotation=inspect.Signature.empty))


def source_sha256(found) -> str:
    """The sha256 of a function's, method's or class's source (``inspect.getsource``, under its decorators)."""
    return hashlib.sha256(inspect.getsource(found).encode()).hexdigest()


# ---- the FSDP engine (engine.DiffusionLMEngine) ---------------------------------------------------------------------


@contextmanager
def fsdp2_offload_unpinned_on_cpu():
    """verl's ``FSDPEngine._build_fsdp_module`` gives forward-only (reference) FSDP2 modules
    ``CPUOffloadPolicy(pin_memory=True)``, through the module name ``transformer_impl.CPUOffloadPolicy`` (torch's
    class); pinning needs an accelerator. On a CPU host the parameters already live in host memory, so for the block
    that name builds the policy unpinned."""
    if get_device_name() != "cpu":
        yield
        return
    from verl.workers.engine.fsdp import transformer_impl

    original = transformer_impl.CPUOffloadPolicy
    transformer_impl.CPUOffloadPolicy = lambda **kwargs: original(**{**kwargs, "pin_memory": False})
    try:
        yield
    finally:
        transformer_impl.CPUOffloadPolicy = original


@contextmanager
def fsdp2_sharding_around_quantized(quantized: set):
    """verl's FSDP2 wrapping (``FSDPEngine._build_fsdp_module`` calls ``transformer_impl.apply_fsdp2`` then
    ``transformer_impl.fsdp2_load_full_state_dict``) with 4-bit weights (QLoRA) left out of the sharding: FSDP2 would
    turn them into plain sharded tensors without their quantization state. Each rank keeps the whole frozen 4-bit base
    (as d1 does under DDP); adapters and full-precision weights are sharded as before. Every rank loaded the real
    weights itself, so verl's rank-0 broadcast, which starts the other ranks from empty storage, is left out; only the
    trainable parameters (new adapters start random) are broadcast from rank 0, so every world size starts from one
    draw. Both names are replaced for the block."""
    if not quantized:
        yield
        return
    from verl.workers.engine.fsdp import transformer_impl

    from diffugrpo_plugin.models.quantization import leave_out_of_state_dict

    shard, broadcast = transformer_impl.apply_fsdp2, transformer_impl.fsdp2_load_full_state_dict

    def shard_around_quantized(model, kwargs, config):
        for parameter in model.parameters():
            if parameter.requires_grad:
                torch.distributed.broadcast(parameter.data, src=0)
        return shard(leave_out_of_state_dict(model), {**kwargs, "ignored_params": quantized}, config)

    transformer_impl.apply_fsdp2 = shard_around_quantized
    transformer_impl.fsdp2_load_full_state_dict = lambda *args, **kwargs: None
    try:
        yield
    finally:
        transformer_impl.apply_fsdp2, transformer_impl.fsdp2_load_full_state_dict = shard, broadcast


def set_frozen_field(config, name: str, value) -> None:
    """Sets a field of a verl config dataclass that verl's ``BaseConfig.__setattr__`` refuses to change (every field
    not in its private ``_mutable_fields``), by going around it."""
    object.__setattr__(config, name, value)


@contextmanager
def building_as_language_model(model_config, trust_remote_code: bool):
    """verl's ``FSDPEngine._build_module`` loads through transformers' auto classes only when
    ``model_config.model_type == "language_model"``; ours is ``diffusion_lm`` (the name verl picks our engine by). For
    the block the config says ``language_model``, with ``trust_remote_code`` as our loading plan decided; both are
    restored after."""
    replaced = {"model_type": "language_model", "trust_remote_code": trust_remote_code}
    original = {key: getattr(model_config, key) for key in replaced}
    for key, value in replaced.items():
        set_frozen_field(model_config, key, value)
    try:
        yield
    finally:
        for key, value in original.items():
            set_frozen_field(model_config, key, value)


def apply_verl_model_patches(engine, module: torch.nn.Module) -> None:
    """What verl's ``FSDPEngine._build_module`` does to a model after loading it (copied, for a model we load
    ourselves): verl's monkey patches (remove-padding, Ulysses, fused kernels) and gradient checkpointing."""
    from verl.workers.engine.fsdp import transformer_impl

    transformer_impl.apply_monkey_patch(
        model=module,
        use_remove_padding=engine.use_remove_padding,
        ulysses_sp_size=engine.ulysses_sequence_parallel_size,
        use_fused_kernels=engine.model_config.use_fused_kernels,
    )
    if engine.model_config.enable_gradient_checkpointing:
        module.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})


def lora_enabled(engine) -> bool:
    """verl's FSDP engine's private ``_is_lora`` (``FSDPEngine.__init__``: ``lora_rank > 0``)."""
    return engine._is_lora


def parameters_offloaded(engine) -> bool:
    """verl's FSDP engine's private ``_is_offload_param``: the parameters live on the host between passes."""
    return engine._is_offload_param


def verl_autocast(engine):
    """The autocast verl's ``FSDPEngineWithLMHead.forward_step`` runs the model under (copied): the FSDP param dtype
    ``_build_fsdp_module`` kept in the engine's private ``_autocast_dtype`` (bf16 where unset), none for fp32."""
    autocast_dtype = getattr(engine, "_autocast_dtype", torch.bfloat16)
    if autocast_dtype == torch.float32:
        return nullcontext()
    return torch.autocast(device_type=get_device_name(), dtype=autocast_dtype)


def verl_step_loss(engine, loss_function, model_output: dict, micro_batch, forward_only: bool):
    """(loss, metrics) as verl's ``FSDPEngineWithLMHead.forward_step`` computes them (copied): ``loss_function`` on
    the model output, or verl's placeholder loss for a forward-only pass without one."""
    if loss_function is not None:
        return loss_function(model_output=model_output, data=micro_batch, dp_group=engine.get_data_parallel_group())
    assert forward_only, "forward_only must be True when loss_function is None"
    return torch.tensor(1.0, device=get_device_name()), {}


def verl_step_output(loss: torch.Tensor, model_output: dict, metrics: dict):
    """What verl's ``FSDPEngineWithLMHead.forward_step`` returns (copied): the loss and the detached outputs in the
    layout its ``forward_backward_batch`` collects."""
    from verl.workers.engine.utils import detach_tree

    return loss, {"model_output": detach_tree(model_output), "loss": loss.detach().item(), "metrics": metrics}


# ---- the rollout (rollout/) ------------------------------------------------------------------------------------------


def register_rollout_adapter(name: str, class_path: str) -> None:
    """Registers a per-worker rollout class (a ``BaseRollout``) for ``rollout.name=name`` in verl's private
    ``verl.workers.rollout.base._ROLLOUT_REGISTRY``, which ``get_rollout_class`` reads; verl 0.9.1 has no public
    ``register`` for it (its other rollout registry, ``RolloutReplicaRegistry``, has one)."""
    from verl.workers.rollout.base import _ROLLOUT_REGISTRY

    _ROLLOUT_REGISTRY[(name, "async")] = class_path


def set_replica_server(replica, server, address: str) -> None:
    """What a ``RolloutReplica.launch_servers`` must leave behind: ``servers`` and the private ``_server_handle`` and
    ``_server_address`` that the replica's ``server_handle`` / ``server_address`` properties return."""
    replica.servers = [server]
    replica._server_handle = server
    replica._server_address = address


# ---- the trainer (trainer.py) ---------------------------------------------------------------------------------------


def same_data_split(group, mesh: str, other: str) -> bool:
    """Whether verl's worker ``group`` sends every rank the same shard of a batch, and collects the same ranks'
    outputs, for ``mesh`` as for ``other``: the private ``Worker._query_dispatch_info`` / ``_query_collect_info``."""
    return all(query(mesh) == query(other) for query in (group._query_dispatch_info, group._query_collect_info))


# ---- the driver and the process layout (layout.py, in_process.py, cluster.py) ----------------------------------------


def run_main_ppo(config) -> None:
    """verl's ``main_ppo.main`` on a composed config: the function under its ``@hydra.main`` (``__wrapped__``)."""
    from verl.trainer import main_ppo

    main_ppo.main.__wrapped__(config)


def validate_as_main_ppo(config) -> None:
    """The config check verl's ``main_ppo.main`` runs before ``run_ppo`` (copied; its ``auto_set_device`` comes
    first, in the caller)."""
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    validate_config(config=config, use_reference_policy=need_reference_policy(config), use_critic=need_critic(config))


def task_runner_v1_class() -> type:
    """The class inside verl's ``main_ppo.TaskRunnerV1`` Ray actor (``__ray_actor_class__``), to subclass: the verl
    layout's task runner on a CPU host (cluster.task_runner_on_cpu)."""
    from verl.trainer.main_ppo import TaskRunnerV1

    return TaskRunnerV1.__ray_actor_class__


def run_task_runner_here(config) -> None:
    """verl's ``main_ppo.TaskRunnerV1`` (a Ray actor class: its class under ``__ray_actor_class__``), run in this
    process."""
    from verl.trainer.main_ppo import TaskRunnerV1

    TaskRunnerV1.__ray_actor_class__().run(config)


@contextmanager
def router_handles_from(make):
    """verl's ``verl.workers.rollout.router.get_router_handle`` (how the agent loop gets its request router) replaced by
    ``make(verl's)`` for the block."""
    from verl.workers.rollout import router

    build = router.get_router_handle
    router.get_router_handle = make(build)
    try:
        yield
    finally:
        router.get_router_handle = build


def load_router_yaml(path: str) -> dict:
    """verl's private ``router._load_router_yaml``: a router config file as verl's own router reads it."""
    from verl.workers.rollout import router

    return router._load_router_yaml(path)


# ---- TransferQueue, which verl 0.9.1's V1 trainer stores every batch in (in_process.py, cluster.py) ------------------


def refresh_transfer_queue_threads() -> None:
    """TransferQueue's client and storage units read ``TQ_NUM_THREADS`` (a module constant each) when imported; set
    them from this process's environment as it is now."""
    from transfer_queue import client
    from transfer_queue.storage import simple_storage

    for module in (client, simple_storage):
        module.TQ_NUM_THREADS = int(os.environ.get("TQ_NUM_THREADS", module.TQ_NUM_THREADS))


@contextmanager
def transfer_queue_actor_classes(controller, storage):
    """``transfer_queue.init`` builds its controller from ``transfer_queue.interface.TransferQueueController`` and its
    storage units from ``simple_storage_bootstrap.SimpleStorageUnit`` (Ray actor classes); for the block
    ``controller(that class)`` and ``storage(that class)`` stand in for them."""
    from transfer_queue import interface
    from transfer_queue.storage.bootstrap import simple_storage_bootstrap

    controller_class, storage_class = interface.TransferQueueController, simple_storage_bootstrap.SimpleStorageUnit
    interface.TransferQueueController = controller(controller_class)
    simple_storage_bootstrap.SimpleStorageUnit = storage(storage_class)
    try:
        yield
    finally:
        interface.TransferQueueController, simple_storage_bootstrap.SimpleStorageUnit = controller_class, storage_class


_TRANSFER_QUEUE_STATE = {"controller": "_TQ_CONTROLLER", "storage": "_TQ_STORAGE", "client": "_TQ_CLIENT"}


def transfer_queue_state(part: str):
    """One of TransferQueue's private process globals (``transfer_queue.interface._TQ_CONTROLLER`` / ``_TQ_STORAGE``
    / ``_TQ_CLIENT``), named ``controller``, ``storage`` or ``client``: what its ``init`` started and ``close``
    stops."""
    from transfer_queue import interface

    return getattr(interface, _TRANSFER_QUEUE_STATE[part])


def set_transfer_queue_state(**parts) -> None:
    """Sets TransferQueue's process globals by the names of :func:`transfer_queue_state`."""
    from transfer_queue import interface

    for part, value in parts.items():
        setattr(interface, _TRANSFER_QUEUE_STATE[part], value)


@contextmanager
def transfer_queue_close_replaced(close):
    """``close`` in place of ``transfer_queue.close`` (the package attribute verl's trainer loop calls) for the
    block."""
    import transfer_queue

    original = transfer_queue.close
    transfer_queue.close = close
    try:
        yield
    finally:
        transfer_queue.close = original


# ---- the fingerprints -----------------------------------------------------------------------------------------------

_TI = "verl.workers.engine.fsdp.transformer_impl"
_TB = "verl.trainer.ppo.v1.trainer_base:PPOTrainer"
_EW = "verl.workers.engine_workers"

VERL_DEPENDENCIES: dict[str, Dependency] = {
    _TI + ":CPUOffloadPolicy": Dependency(
        uses=("patches in fsdp2_offload_unpinned_on_cpu",), signature="(pin_memory=True)"
    ),
    _TI + ":apply_fsdp2": Dependency(
        uses=("patches in fsdp2_sharding_around_quantized",),
        signature="(model, fsdp_kwargs, config)",
        source_sha256="bd9d609b3414e015b9cee51c97226ff34a8419adb9e4ccda1619d5bf617f6fcc",
    ),
    _TI + ":fsdp2_load_full_state_dict": Dependency(
        uses=("patches in fsdp2_sharding_around_quantized",),
        signature="(model, full_state, device_mesh=None, cpu_offload=None)",
        source_sha256="1ffc0186941cb6de95d46c27c493b30212dd4e9fd49c2d07aab1fcacbb9a7189",
    ),
    _TI + ":apply_monkey_patch": Dependency(
        uses=("copies in apply_verl_model_patches",),
        signature="(model, ulysses_sp_size=1, use_remove_padding=True, use_fused_kernels=False, fused_kernels_backend=None, use_prefix_grouper=False, use_tiled_mlp=False, tiled_mlp_shards=4)",
    ),
    _TI + ":FSDPEngine.__init__": Dependency(
        uses=("reaches in lora_enabled", "reaches in parameters_offloaded"),
        signature="(self, model_config, engine_config, optimizer_config, checkpoint_config)",
        source_sha256="2d70a9f5f54883c210912fef0568908f090e6236b411b0ce46ff39756ae66691",
        assigns=("_is_lora", "_is_offload_param"),
    ),
    _TI + ":FSDPEngine._build_module": Dependency(
        uses=(
            "overrides in DiffusionLMEngine._build_module",
            "patches in building_as_language_model",
            "copies in apply_verl_model_patches",
        ),
        signature="(self)",
        source_sha256="3935df3e22bb9ad00ebe0818a3454ebf8e85035882857d57f7476fe3bc1dad3f",
    ),
    _TI + ":FSDPEngine._build_lora_module": Dependency(
        uses=("overrides in DiffusionLMEngine._build_lora_module",),
        signature="(self, module)",
        source_sha256="31ad1f73ed3cb76436401459b1a4fd3a31f83cff08c02c45214e1d119b37dedc",
    ),
    _TI + ":FSDPEngine._build_fsdp_module": Dependency(
        uses=(
            "overrides in DiffusionLMEngine._build_fsdp_module",
            "patches in fsdp2_offload_unpinned_on_cpu",
            "patches in fsdp2_sharding_around_quantized",
            "reaches in verl_autocast",
        ),
        signature="(self, module)",
        source_sha256="35b7b539858443e45894da2d9675fb5a1d7b2bbb7c7c8b35605b0746d3179213",
        assigns=("_autocast_dtype", "_is_offload_param"),
    ),
    _TI + ":FSDPEngine.save_checkpoint": Dependency(
        uses=("overrides in DiffusionLMEngine.save_checkpoint",),
        signature="(self, local_path, hdfs_path=None, global_step=0, max_ckpt_to_keep=None, **kwargs)",
        source_sha256="33610c18a6a2c1c86efd1dd1404dd840ee78a683420fa0d44a6876f6d2abad35",
    ),
    _TI + ":FSDPEngineWithLMHead.forward_step": Dependency(
        uses=(
            "overrides in DiffusionLMEngine.forward_step",
            "copies in verl_autocast",
            "copies in verl_step_loss",
            "copies in verl_step_output",
        ),
        signature="(self, micro_batch, loss_function, forward_only)",
        source_sha256="ec2681395b00c6549e17003cc3eb93703a537ab6689c69195e7ce983fedc60b7",
    ),
    "verl.base_config:BaseConfig.__setattr__": Dependency(
        uses=("reaches in set_frozen_field",),
        signature="(self, name, value)",
        source_sha256="a05893ea56cb488c7d6e4f001b60428f3469e30e46d500b3b47cc2e6db3785ce",
    ),
    "verl.workers.config.model:HFModelConfig.__post_init__": Dependency(
        uses=("overrides in DiffusionModelConfig.__post_init__",),
        signature="(self)",
        source_sha256="a18620cfff22adebd4fbd8858cdc54f196cab856cd99608bdc8b0e23dccce1d7",
    ),
    "verl.workers.rollout.base:_ROLLOUT_REGISTRY": Dependency(
        uses=("reaches in register_rollout_adapter",), attribute_type="dict"
    ),
    "verl.workers.rollout.base:get_rollout_class": Dependency(
        uses=("reaches in register_rollout_adapter",),
        signature="(rollout_name, mode='async')",
        source_sha256="d0be5827f1214f04fa25ce71c8df8b6297540e8dd714bec35245ec63f932fb74",
    ),
    "verl.workers.rollout.replica:RolloutReplica.__init__": Dependency(
        uses=("reaches in set_replica_server",),
        signature="(self, replica_rank, config, model_config, gpus_per_node=8, is_reward_model=False, is_teacher_model=False, name_suffix='')",
        source_sha256="2fabbc138e468d1fe32c51f4ba8f8a2cd79aa731846c500dd5c922d97a5bfee4",
        assigns=("servers", "_server_handle", "_server_address"),
    ),
    # overrides of abstract methods: verl's interface, whose signature our classes must keep matching
    "verl.workers.rollout.base:BaseRollout.resume": Dependency(
        uses=("overrides in DiffusionRollout.resume",),
        signature="(self, tags)",
        source_sha256="8e2cc7e41a6ae7f8929fdf561eb25199e23c0883d0288027b36803f89a2e3cd5",
    ),
    "verl.workers.rollout.base:BaseRollout.update_weights": Dependency(
        uses=("overrides in DiffusionRollout.update_weights",),
        signature="(self, weights, wire_format='named_tensors', **kwargs)",
        source_sha256="6e053f2de05ee76acac475c587c9e791a65c8809bb23e2a57c6a77f1c9a3a695",
    ),
    "verl.workers.rollout.base:BaseRollout.release": Dependency(
        uses=("overrides in DiffusionRollout.release",),
        signature="(self)",
        source_sha256="2490737ef523f14df2ce08e004c169b167de3473c7be5148483fc8bd746cab7c",
    ),
    "verl.workers.rollout.replica:RolloutReplica.launch_servers": Dependency(
        uses=("overrides in DiffusionReplica.launch_servers",),
        signature="(self)",
        source_sha256="7299aabf433fc4114e9c66856aec8e5e11f62b7984136691f1468871b27095d8",
    ),
    "verl.experimental.reward_loop.reward_manager.base:RewardManagerBase.run_single": Dependency(
        uses=("overrides in DiffugrpoRewardManager.run_single",),
        signature="(self, data)",
        source_sha256="06eb307d94c70d86ace0f7e571398c5a274dbeef3d1aabb50f7b15de90d3b4ad",
    ),
    "verl.workers.rollout.base:BaseRollout.__init__": Dependency(
        uses=("overrides in DiffusionRollout.__init__",),
        signature="(self, config, model_config, device_mesh, *args, **kwargs)",
        source_sha256="1d439e8b54347e63446f64b3e5d1e6b4bb1f5f361ce80c3cd64b0ea1f55356db",
    ),
    "verl.experimental.agent_loop.single_turn_agent_loop:SingleTurnAgentLoop.run": Dependency(
        uses=("overrides in DiffusionAgentLoop.run",),
        signature="(self, sampling_params, priority=0, **kwargs)",
        source_sha256="1baec41cee2de25f2e48b522671d11196619aa08736250e883365c9be6c6a7e0",
    ),
    "verl.experimental.reward_loop.reward_manager.base:RewardManagerBase.__init__": Dependency(
        uses=("overrides in DiffugrpoRewardManager.__init__",),
        signature="(self, config, tokenizer, compute_score)",
        source_sha256="cf87becd7dcf08cf2011c7a7c53660ec705b2748c5f9e9a1c90fd049535e023f",
    ),
    "verl.plugin.platform.platform_base:PlatformBase.is_platform_available": Dependency(
        uses=("overrides in PlatformCPU.is_platform_available",),
        signature="(self, use_smi_check=False)",
        source_sha256="6bd97995cf2093620bd553d5ebd90c09f8d486dc553bb471c6c02f9d7fd1a4f9",
    ),
    "verl.plugin.platform.platform_base:PlatformBase.ray_resource_options": Dependency(
        uses=("overrides in PlatformCPU.ray_resource_options",),
        signature="(self, num_gpus)",
        source_sha256="29f55f238e8810adee04a6ec6f5dc66698c6d6613f742a4a8a4fe47a168f0558",
    ),
    "verl.single_controller.base.worker:Worker._query_dispatch_info": Dependency(
        uses=("reaches in same_data_split",),
        signature="(self, mesh_name)",
        source_sha256="da9bb658831aef7eb16e3f3776e462542ae589cb584dc7989467f0021eabd4c9",
    ),
    "verl.single_controller.base.worker:Worker._query_collect_info": Dependency(
        uses=("reaches in same_data_split",),
        signature="(self, mesh_name)",
        source_sha256="396a2c00b4612e32c605f7dee21b7e4695aae30aca6ffe4567ab29d34da84a97",
    ),
    _TB + ".__init__": Dependency(
        uses=("overrides in DiffuGRPOTrainer.__init__",),
        signature="(self, config)",
        source_sha256="6f938d77859b66aeeceb03a39bc9a7b5e7b6f50004aa8b1e2508f6e289fa1b93",
    ),
    _TB + ".fit": Dependency(
        uses=("overrides in DiffuGRPOTrainer.fit",),
        signature="(self, agent_loop_manager)",
        source_sha256="7d83a81c2e62979ffec22f90dc8f2e44bf98dd59d6b50809c359727090cb4a56",
    ),
    _TB + ".get_reward_handles": Dependency(
        uses=("overrides in DiffuGRPOTrainer.get_reward_handles",),
        signature="(self)",
        source_sha256="ebdbf7038f5efe82466d3a9c5526f1bd9edc61709fec2c99c90f9ef2889b702d",
    ),
    _TB + "._init_dataloader": Dependency(
        uses=("overrides in DiffuGRPOTrainer._init_dataloader",),
        signature="(self)",
        source_sha256="86cf3749e087b883b1ddfd5b153f1e8c0d1bc83aaa0c66bf43ce63c04602d3c4",
    ),
    _TB + "._fetch_one_gen_batch": Dependency(
        uses=("overrides in DiffuGRPOTrainer._fetch_one_gen_batch",),
        signature="(self)",
        source_sha256="d62e586d520574133029d1362d2355d811d516987578a3b0e1076b8728a81232",
    ),
    _TB + "._build_replay_buffer": Dependency(
        uses=("overrides in DiffuGRPOTrainer._build_replay_buffer",),
        signature="(self)",
        source_sha256="c6c5bd0783311ea3ed37f2f5054eb1d23533deb76b181643419b2f37897f38be",
    ),
    _TB + "._init_resource_pool_mgr": Dependency(
        uses=("overrides in DiffuGRPOTrainer._init_resource_pool_mgr",),
        signature="(self)",
        source_sha256="9eaa3bab711e4deb4280bda7b256eb868c7b8eeae18b06b3b87c9a79466bb6f2",
    ),
    _TB + ".on_train_begin": Dependency(
        uses=("overrides in DiffuGRPOTrainer.on_train_begin",),
        signature="(self)",
        source_sha256="975efb02e89f630a8bfab5734654317841081d3593e51aab972e3ca916c42cdc",
    ),
    _TB + "._validate": Dependency(
        uses=("overrides in DiffuGRPOTrainer._validate",),
        signature="(self)",
        source_sha256="f1d58a70e91d7883d78f827c5fb583094ae307c85f6e50ec7a6b4e44092f5bfa",
    ),
    _TB + "._balance_batch": Dependency(
        uses=("overrides in DiffuGRPOTrainer._balance_batch",),
        signature="(self, batch, metrics, logging_prefix='global_seqlen', keep_minibatch=False)",
        source_sha256="f9b6e887d7504a65d89832af96dc590554ae1b234f84052c067980fba1cd5bb3",
    ),
    _TB + "._compute_old_log_prob": Dependency(
        uses=("overrides in DiffuGRPOTrainer._compute_old_log_prob",),
        signature="(self, batch, metrics)",
        source_sha256="b2630e6178ed99f7b55b8e342911e746d7d48e148e87a3da090b0be8d5b8f70f",
    ),
    _TB + "._compute_ref_log_prob": Dependency(
        uses=("overrides in DiffuGRPOTrainer._compute_ref_log_prob",),
        signature="(self, batch, metrics)",
        source_sha256="f4d69ef51b12c284ab0f9961cd06a36b05b9cc662d9a8cec988701a86a6bf4f1",
    ),
    _TB + "._compute_advantage": Dependency(
        uses=("overrides in DiffuGRPOTrainer._compute_advantage",),
        signature="(self, batch, metrics)",
        source_sha256="2a4a2aa4a475b228d401959818e0b9019276ce27961c133961de217baa387da7",
    ),
    _TB + "._save_checkpoint": Dependency(
        uses=("overrides in DiffuGRPOTrainer._save_checkpoint",),
        signature="(self)",
        source_sha256="8c2435b577e54f19ab6012e1eb5f44f01e6c8f4dd6380467914cb6afb9ab9d23",
    ),
    _TB + "._load_checkpoint": Dependency(
        uses=("overrides in DiffuGRPOTrainer._load_checkpoint",),
        signature="(self)",
        source_sha256="bb446d77c48ac6cc633e86c83b7195b78d899ece10d1b5e7150908acddb17265",
    ),
    _TB + "._compute_metrics": Dependency(
        uses=("overrides in DiffuGRPOTrainer._compute_metrics",),
        signature="(self, batch, metrics, timing_raw, global_steps, epoch)",
        source_sha256="9c5c555787889555c5bd77e59f57b87d03a08e0449903a63e26186d6f511fcec",
    ),
    _TB + ".step": Dependency(
        uses=("overrides in DiffuGRPOTrainer.step",),
        signature="(self, metrics, timing_raw)",
        source_sha256="e22f53aadb7805d2d15d16ba6528b6ef8628dfab5949ef00abbc339f5a35ec80",
    ),
    _EW + ":ActorRolloutRefWorker.save_checkpoint": Dependency(
        uses=("overrides in DiffusionActorRolloutRefWorker.save_checkpoint",),
        signature="(self, local_path, hdfs_path=None, global_step=0, max_ckpt_to_keep=None)",
        source_sha256="eb8ae7e09251a0878ae3cd10e05c70e9c621d44c82f36c15e8ab153928a195d5",
    ),
    _EW + ":ActorRolloutRefWorker.load_checkpoint": Dependency(
        uses=("overrides in DiffusionActorRolloutRefWorker.load_checkpoint",),
        signature="(self, local_path, hdfs_path=None, del_local_after_load=False)",
        source_sha256="a280f4c73b41039079b6cc05ea668d2571081f939b22ae43663b37ed14174cec",
    ),
    _EW + ":ActorRolloutRefWorker.actor_worker_cls": Dependency(
        uses=("overrides in DiffusionActorRolloutRefWorker.actor_worker_cls",), attribute_type="type"
    ),
    _EW + ":ActorRolloutRefWorker.ref_worker_cls": Dependency(
        uses=("overrides in DiffusionActorRolloutRefWorker.ref_worker_cls",), attribute_type="type"
    ),
    _EW + ":ActorRolloutRefWorker.init_model": Dependency(
        uses=("overrides in DiffusionActorRolloutRefWorker.init_model",),
        signature="(self)",
        source_sha256="d1598903d82449f22a1cfabf223dba915d51634b8b76dadac8e12c8bcc87d8f6",
    ),
    _EW + ":ActorRolloutRefWorker.compute_log_prob": Dependency(
        uses=("overrides in DiffusionActorRolloutRefWorker.compute_log_prob",),
        signature="(self, data)",
        source_sha256="bea185dbc78934e6063a8e23ddc1c565251881cd0e2026dbfd534d19ddbef9ec",
    ),
    _EW + ":ActorRolloutRefWorker.update_actor": Dependency(
        uses=(
            "overrides in DiffusionActorRolloutRefWorker.update_actor",
            "copies in DiffusionActorRolloutRefWorker.update_actor",
        ),
        signature="(self, data)",
        source_sha256="c33d5103077466664a5a44a8936e739e510c28857c0a4295317590c1a90c3e6e",
    ),
    _EW + ":TrainingWorker.infer_batch": Dependency(
        uses=("overrides in IterationMasksTrainingWorker.infer_batch",),
        signature="(self, data)",
        source_sha256="57bba17563c30d87f2ef4475fc5382a69f379f231276c5dc0c3012cd9826c6e5",
    ),
    "verl.trainer.main_ppo:main": Dependency(
        uses=("reaches in run_main_ppo", "copies in validate_as_main_ppo"),
        signature="(config)",
        source_sha256="eb706c4f6622ed04d498881b96ebb0fd4c82167060382fbfa54b496231891275",
    ),
    "verl.trainer.main_ppo:run_ppo": Dependency(
        uses=("reaches in InProcessTaskRunner",),
        signature="(config, task_runner_class)",
        source_sha256="a65eddb189e56ae10d1e521cd19af26e063d046f7637f46ae67177bfe51da4f4",
    ),
    "verl.trainer.main_ppo:TaskRunnerV1.__ray_actor_class__.run": Dependency(
        uses=("reaches in run_task_runner_here", "reaches in task_runner_v1_class"),
        signature="(self, config)",
        source_sha256="26be986901db888bb7ccbec7a7b8eb90365de42a426e6fbf119e6e8d445dde7c",
    ),
    "verl.workers.rollout.router:get_router_handle": Dependency(
        uses=("patches in router_handles_from",),
        signature="(servers, router_config_path=None, full_determinism=False, load_balancer_cls=None)",
        source_sha256="ac63b08d6f879c45db9f789ca6504030ea6492813f3d656e9b0fa20991fcc8ca",
    ),
    "verl.workers.rollout.router:_load_router_yaml": Dependency(
        uses=("reaches in load_router_yaml",),
        signature="(router_config_path)",
        source_sha256="aefa0cbc3888b2ccf1fc178ff8b20de52eb1f8a7d141e8a832212985c405934b",
    ),
    "verl.experimental.agent_loop.agent_loop:AgentLoopManager._init_agent_loop_workers": Dependency(
        uses=(
            "overrides in InProcessAgentLoopManager._init_agent_loop_workers",
            "copies in InProcessAgentLoopManager._init_agent_loop_workers",
        ),
        signature="(self)",
        source_sha256="7c577f83ba5d9f44213267fbdbe1883afb3ddf3fe0fb55e2e1686d3ec1320fb1",
    ),
    "transfer_queue.client:TQ_NUM_THREADS": Dependency(
        uses=("patches in refresh_transfer_queue_threads",), attribute_type="int"
    ),
    "transfer_queue.storage.simple_storage:TQ_NUM_THREADS": Dependency(
        uses=("patches in refresh_transfer_queue_threads",), attribute_type="int"
    ),
    "transfer_queue.interface:init": Dependency(
        uses=("patches in transfer_queue_actor_classes", "reaches in transfer_queue_state"),
        signature="(conf=None)",
        source_sha256="4a75f86c544eea7e23fcc14d9acad0e84c461984a4ad5474b309b85ad1368942",
    ),
    "transfer_queue.interface:TransferQueueController": Dependency(
        uses=("patches in transfer_queue_actor_classes",), attribute_type="ActorClass(TransferQueueController)"
    ),
    "transfer_queue.storage.bootstrap.simple_storage_bootstrap:initialize_simple_storage": Dependency(
        uses=("patches in transfer_queue_actor_classes",),
        signature="(conf)",
        source_sha256="9b21fbcd403341e4f61398faff5eeccde63663e9a7001be5c404ef5b1ec4ed1c",
    ),
    "transfer_queue.storage.bootstrap.simple_storage_bootstrap:SimpleStorageUnit": Dependency(
        uses=("patches in transfer_queue_actor_classes",), attribute_type="ActorClass(SimpleStorageUnit)"
    ),
    "transfer_queue.interface:_TQ_CONTROLLER": Dependency(uses=("reaches in transfer_queue_state",)),
    "transfer_queue.interface:_TQ_STORAGE": Dependency(uses=("reaches in transfer_queue_state",)),
    "transfer_queue.interface:_TQ_CLIENT": Dependency(uses=("reaches in transfer_queue_state",)),
    "transfer_queue:close": Dependency(
        uses=("patches in transfer_queue_close_replaced",),
        signature="()",
        source_sha256="476c50fda67c740b0b5b7ef6b8a1ed17de25c4fd67dd6cd97be31386115798ce",
    ),
}


def _print_table() -> None:
    """The installed verl's fingerprints of the table's entries (see the module docstring)."""
    for target, dependency in VERL_DEPENDENCIES.items():
        found = resolve(target)
        if dependency.attribute_type is not None:
            print(f"{target}: attribute_type={type(found).__name__!r}")
        if dependency.signature is not None:
            print(f"{target}: signature={signature_of(found)!r}")
        if dependency.source_sha256 is not None:
            print(f"{target}: source_sha256={source_sha256(found)!r}")


if __name__ == "__main__":
    _print_table()
