"""The ``verl.plugins`` entry point: registers diffugrpo with verl on ``import verl``.

verl imports this module in the driver and in every Ray worker, and swallows any
exception at DEBUG level. So a failure here is reported loudly (stderr and the logging
error channel) before it propagates, and remembered so ``diffugrpo_plugin.main`` can stop
with the real cause instead of an obscure "unknown advantage estimator" later.
"""

from __future__ import annotations

import logging
import sys
import traceback

logger = logging.getLogger("diffugrpo")

registration_error: BaseException | None = None


def _register_all() -> None:
    pass


try:
    _register_all()
except Exception as exc:  # noqa: BLE001 - reported loudly, then re-raised for verl
    registration_error = exc
    message = (
        "diffugrpo failed to register with verl; coupled_grpo will not be available.\n"
        + "".join(traceback.format_exception(exc))
    )
    logger.error(message)
    print(f"[diffugrpo] ERROR: {message}", file=sys.stderr, flush=True)
    raise
