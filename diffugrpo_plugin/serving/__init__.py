"""The rollout's light Ray actors, which hold no model: the server that batches verl's generate requests
(:mod:`.request_batcher`), the one-node layout's request router (:mod:`.request_router`) and the server that also
tells processes where TransferQueue is (:mod:`.transfer_queue_directory`).

Nothing here imports torch, verl or Ray at module level, so each actor's process stays near Ray's own footprint; the
verl side of the rollout, which starts them, is :mod:`diffugrpo_plugin.integration.rollout`.
"""
