"""Where a process finds the job's TransferQueue when its controller does not run as a Ray actor of its own.

TransferQueue (verl's store for the batches that pass between the agent loop, the trainer loop and the trainer
workers) is found by name: every process's ``transfer_queue.init()`` looks up the Ray actor
``TransferQueueController`` in namespace ``transfer_queue`` and asks it ``get_config()``, which holds the ZMQ
addresses of the controller and the storage units; all data then goes over ZMQ. Under the lean process layout the
controller and the storage units run in the driver (:mod:`diffugrpo_plugin.integration.layout`), and this class,
under that name, answers the lookup. Like :mod:`.request_router` it imports neither torch, verl nor Ray, so its
actor's process stays near Ray's bare worker (about 70 MiB) where the controller's and a storage unit's each hold
about 285 MiB (``python benchmarks/processes.py``).
"""

from __future__ import annotations

import pickle
from typing import Any

from diffugrpo_plugin.serving.request_batcher import RequestBatcher


class TransferQueueDirectory:
    """The two methods of TransferQueue's controller that other processes call through Ray: ``store_config`` and
    ``get_config``. The config holds TransferQueue's own classes (its ZMQ addresses), whose module imports torch; it
    is stored pickled and handed out as :class:`PickledConfig`, so this process never loads them."""

    def __init__(self):
        self._pickled: bytes | None = None

    def store_config(self, pickled: bytes) -> None:
        self._pickled = pickled

    def get_config(self) -> PickledConfig | None:
        return None if self._pickled is None else PickledConfig(self._pickled)


class PickledConfig:
    """Pickled bytes that unpickle, in the process that receives them, to the object they hold."""

    def __init__(self, pickled: bytes):
        self.pickled = pickled

    def __reduce__(self) -> tuple[Any, tuple[bytes]]:
        return pickle.loads, (self.pickled,)


class RolloutServerAndDirectory(RequestBatcher, TransferQueueDirectory):
    """A rollout server (:class:`RequestBatcher`) that also answers TransferQueue's lookups: the lean layout starts it
    with TransferQueue, and the first rollout replica on its node takes it as its server
    (:func:`diffugrpo_plugin.integration.rollout.servers.start_directory_server`)."""

    def __init__(self):
        RequestBatcher.__init__(self)
        TransferQueueDirectory.__init__(self)
