"""The GPU backend: CUDA placement; data parallel with DDP, one process per GPU (torchrun)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from plugtrain.errors import BackendError
from plugtrain_backends._dataparallel import DataParallelBackend
from plugtrain_backends.schemas import GPUArgs

__all__ = ["GPUBackend"]


class GPUBackend(DataParallelBackend):
    """Runs on CUDA GPUs. Creating it claims the process's single backend type, ``GPU``.

    With ``enable_distributed``, ``plugtrain fit`` starts one process per visible GPU with
    torchrun and they train data parallel (DDP over ``dist_backend``, NCCL by default); a
    process started by an outside ``torchrun`` always joins that run. Each process uses the
    GPU of its local rank. Creating the backend needs no GPU; a Trainer refuses to start
    without one.

    The constructor's signature is derived from :class:`~plugtrain_backends.schemas.GPUArgs`.

    :param artifact_dir: where the backend writes its artifacts.
    :param enable_distributed: one process per visible GPU.
    :param main_process_id: the rank that writes checkpoints and logs.
    :param dist_backend: torch.distributed backend.
    :param init_method: torch.distributed init method (``None``: torchrun's environment).
    :param sync_batchnorm: convert BatchNorm layers to SyncBatchNorm in a distributed run.
    :param dist_timeout: seconds a collective waits for the other processes before failing.
    """

    backend_type = "GPU"
    schema = GPUArgs
    artifact_dir: str | None
    enable_distributed: bool
    main_process_id: int
    dist_backend: str
    init_method: str | None
    sync_batchnorm: bool
    dist_timeout: float

    def __repr__(self) -> str:
        return (
            f"GPUBackend(enable_distributed={self.enable_distributed!r}, "
            f"main_process_id={self.main_process_id!r}, dist_backend={self.dist_backend!r}, "
            f"sync_batchnorm={self.sync_batchnorm!r})"
        )

    @staticmethod
    def processes_per_node(arguments: Mapping[str, Any]) -> int:
        """One process per visible GPU with ``enable_distributed``, else one."""
        if not arguments.get("enable_distributed", False):
            return 1
        import torch

        return max(1, torch.cuda.device_count())

    def _make_group(self) -> Any:
        from plugtrain_backends._parallel import ProcessGroup

        return ProcessGroup("GPU", self.dist_backend, self.dist_timeout, self.init_method)

    @property
    def device(self) -> Any:
        """The GPU of this process's local rank."""
        import torch

        return torch.device("cuda", self.group.local_rank)

    def check_runnable(self) -> None:
        """Refuse to start without CUDA; join the process group of a launched run."""
        import torch

        if not torch.cuda.is_available():
            cuda = torch.version.cuda
            build = "a CPU-only build" if cuda is None else f"CUDA {cuda}"
            message = (
                "GPU backend: no CUDA device is available (torch "
                f"{torch.__version__}, {build}); run the same command with --set "
                "trainer.init.backend=null --set trainer.init.device=CPU, or run where a GPU and "
                "a CUDA build of torch are installed"
            )
            raise BackendError(message)
        if self.main_process_id >= self.world_size:
            message = (
                f"GPU backend: main_process_id={self.main_process_id} but the run has only "
                f"{self.world_size} process(es)"
            )
            raise BackendError(message)
        local = self.group.local_rank
        if local >= torch.cuda.device_count():
            message = (
                f"GPU backend: local rank {local} has no GPU of its own "
                f"({torch.cuda.device_count()} visible); start one process per GPU"
            )
            raise BackendError(message)
        torch.cuda.set_device(self.device)
        options = {"device_id": self.device} if self.dist_backend == "nccl" else {}
        self._join(**options)

    def prepare_model(self, model: Any) -> Any:
        """The model on this process's GPU; in a distributed run DDP, SyncBatchNorm if asked."""
        from torch import nn

        from plugtrain_backends._parallel import wrap_model

        self.check_runnable()
        if self.sync_batchnorm and self.world_size > 1:
            model = nn.SyncBatchNorm.convert_sync_batchnorm(model)
        return wrap_model(model, self.device, self.group)
