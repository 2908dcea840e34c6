"""WandbLogger: metrics into a Weights & Biases run (the ``wandb`` extra)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from plugtrain.errors import ConfigError, ConfigIssue
from plugtrain.protocols import TrainerView
from plugtrain.schema import validated_arguments
from plugtrain_callbacks._extras import require_extra
from plugtrain_callbacks.schemas import WandbLoggerArgs

__all__ = ["WandbLogger"]


def _previous_run_id(model_dir: Path) -> str | None:
    """The id of the newest run wandb left in ``model_dir/wandb`` (online or offline).

    The id is read from the run's log file ``run-<id>.wandb``, not from its folder's name: when a
    run with the same id starts again within the same second, wandb names the new folder
    ``offline-run-<time>-<id>-1``.
    """
    logs = list((model_dir / "wandb").glob("*run-*/run-*.wandb"))
    if not logs:
        return None
    newest = max(logs, key=lambda log: log.stat().st_mtime)
    return newest.name.removeprefix("run-").removesuffix(".wandb")


class WandbLogger:
    """Logs every record into one wandb run kept in ``model_dir/wandb`` (Model Zoo's arguments).

    Metrics are ``<split>/<name>`` against the step ``global_step``. A later fit in the same
    ``model_dir`` continues the run found there unless ``resume: never``. With
    ``WANDB_MODE=offline`` nothing leaves the machine (``wandb sync`` uploads later).

    :param project: the project. :param group: the group. :param run_id: the run's id.
    :param run_name: its display name. :param job_type: the type of job. :param tags: tags.
    :param resume: ``never``, ``allow``, ``auto`` or ``must`` (wandb's meanings).
    :param entity: the user or team.
    """

    def __init__(
        self,
        project: str | None = None,
        group: str | None = None,
        run_id: str | None = None,
        run_name: str | None = None,
        job_type: str | None = None,
        tags: list[str] | None = None,
        resume: str = "auto",
        entity: str | None = None,
    ) -> None:
        arguments = {
            "project": project,
            "group": group,
            "run_id": run_id,
            "run_name": run_name,
            "job_type": job_type,
            "tags": tags,
            "resume": resume,
            "entity": entity,
        }
        self.settings = validated_arguments(WandbLoggerArgs, arguments, owner="WandbLogger")
        require_extra("WandbLogger")
        self.run: Any = None

    def _run_id(self, model_dir: Path) -> str | None:
        wanted, resume = self.settings["run_id"], self.settings["resume"]
        previous = _previous_run_id(model_dir)
        if resume == "never" and previous is not None:
            message = (
                f"a wandb run already exists in {model_dir / 'wandb'} and resume is 'never'; "
                "use another model_dir or resume: allow"
            )
            raise ConfigError([ConfigIssue("WandbLogger.resume", message)])
        if resume == "must" and wanted is not None and previous not in (None, wanted):
            message = f"run_id {wanted!r} is not the run in {model_dir} ({previous!r})"
            raise ConfigError([ConfigIssue("WandbLogger.run_id", message)])
        return wanted if wanted is not None else previous

    def _open(self, trainer: TrainerView) -> None:
        if self.run is not None:
            return
        import wandb

        model_dir = Path(trainer.model_dir)
        model_dir.mkdir(parents=True, exist_ok=True)
        run_id = self._run_id(model_dir)
        self.run = wandb.init(
            dir=str(model_dir),
            project=self.settings["project"],
            group=self.settings["group"],
            job_type=self.settings["job_type"],
            tags=self.settings["tags"],
            name=self.settings["run_name"],
            id=run_id,
            resume=self.settings["resume"] if run_id is not None else None,
            entity=self.settings["entity"],
            reinit="create_new",
        )
        self.run.define_metric("global_step")
        self.run.define_metric("*", step_metric="global_step", step_sync=True)

    def on_fit_start(self, trainer: TrainerView) -> None:
        """Start (or continue) the run."""
        self._open(trainer)

    def on_validate_start(self, trainer: TrainerView) -> None:
        """Start (or continue) the run for a ``validate``."""
        self._open(trainer)

    def log_metrics(self, step: int, split: str, metrics: Mapping[str, float]) -> None:
        """Log the numeric metrics at ``global_step = step``."""
        if self.run is None:
            return
        record: dict[str, Any] = {"global_step": step}
        for name, value in metrics.items():
            if isinstance(value, int | float) and not isinstance(value, bool):
                record[f"{split}/{name}"] = value
        self.run.log(record)

    def close(self) -> None:
        """Finish the run."""
        if self.run is not None:
            self.run.finish()
            self.run = None
