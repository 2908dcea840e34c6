"""The CPU backend: one process, or data parallel over gloo on several (started by torchrun)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from plugtrain.errors import BackendError
from plugtrain_backends._dataparallel import DataParallelBackend
from plugtrain_backends.schemas import CPUArgs

__all__ = ["CPUBackend"]

log = logging.getLogger("plugtrain")


class CPUBackend(DataParallelBackend):
    """Runs on the host CPU. Creating it claims the process's single backend type, ``CPU``.

    With ``num_processes`` above 1, ``plugtrain fit`` starts that many processes with torchrun
    and they train data parallel (DDP over gloo). A process started by an outside ``torchrun``
    joins the run torchrun describes, whatever ``num_processes`` says.

    The constructor's signature is derived from :class:`~plugtrain_backends.schemas.CPUArgs`.

    :param artifact_dir: where the backend writes its artifacts.
    :param num_processes: processes on this machine.
    :param dist_timeout: seconds a collective waits for the other processes before failing.
    """

    backend_type = "CPU"
    schema = CPUArgs
    artifact_dir: str | None
    num_processes: int
    dist_timeout: float

    @staticmethod
    def processes_per_node(arguments: Mapping[str, Any]) -> int:
        """How many processes ``plugtrain fit`` starts on this machine for these arguments."""
        return int(arguments.get("num_processes", 1))

    def _make_group(self) -> Any:
        from plugtrain_backends._parallel import ProcessGroup

        return ProcessGroup("CPU", "gloo", self.dist_timeout)

    @property
    def device(self) -> Any:
        """The torch device models and batches are moved to."""
        import torch

        return torch.device("cpu")

    def check_runnable(self) -> None:
        """Join the process group of a launched run; refuse several processes nobody started."""
        launched = self.group.launched
        if self.num_processes > 1 and launched is None:
            message = (
                f"CPU backend: num_processes={self.num_processes} needs processes started by "
                "torchrun: run the file with `plugtrain fit RUN.yaml`, or start this program "
                f"with `torchrun --nproc-per-node {self.num_processes} PROGRAM`"
            )
            raise BackendError(message)
        if launched is not None and launched.world_size != self.num_processes:
            log.debug(
                "CPU backend: the launcher started %d processes (num_processes is %d)",
                launched.world_size,
                self.num_processes,
            )
        self._join()

    def prepare_model(self, model: Any) -> Any:
        """The model on the CPU, wrapped in DDP in a data-parallel run."""
        from plugtrain_backends._parallel import wrap_model

        self._join()
        return wrap_model(model, self.device, self.group)
