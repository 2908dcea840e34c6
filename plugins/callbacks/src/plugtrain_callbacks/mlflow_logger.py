"""MLflowLogger: metrics into an MLflow run (the ``mlflow`` extra; mlflow-skinny suffices)."""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from plugtrain.protocols import TrainerView
from plugtrain.schema import validated_arguments
from plugtrain_callbacks._extras import require_extra
from plugtrain_callbacks.schemas import MLflowLoggerArgs

__all__ = ["MLflowLogger"]

log = logging.getLogger("plugtrain")


class MLflowLogger:
    """Logs every record into one MLflow run; a resumed fit continues the same run.

    Metrics are ``<split>/<name>`` at their step. Without ``tracking_uri`` the store is the
    local folder ``model_dir/mlruns`` (MLflow's file store, which this logger opts into by
    setting ``MLFLOW_ALLOW_FILE_STORE=true`` unless it is set, for any file store, on every
    fit, resumed ones too). The run id is the logger's checkpointed state; the store is always
    this run's own.

    :param tracking_uri: an MLflow tracking URI (``sqlite:///...``, ``http://...``, a folder).
    :param experiment_name: the experiment, created when missing.
    :param run_name: the run's name. :param tags: tags of the run.
    """

    def __init__(
        self,
        tracking_uri: str | None = None,
        experiment_name: str = "plugtrain",
        run_name: str | None = None,
        tags: dict[str, str] | None = None,
    ) -> None:
        arguments = {
            "tracking_uri": tracking_uri,
            "experiment_name": experiment_name,
            "run_name": run_name,
            "tags": tags,
        }
        self.settings = validated_arguments(MLflowLoggerArgs, arguments, owner="MLflowLogger")
        require_extra("MLflowLogger")
        self.run_id: str | None = None
        self.tracking_uri: str | None = tracking_uri
        self._client: Any = None

    def _open(self, trainer: TrainerView) -> None:
        if self._client is not None:
            return
        from mlflow.tracking import MlflowClient

        if self.tracking_uri is None:
            self.tracking_uri = (Path(trainer.model_dir).resolve() / "mlruns").as_uri()
        if self.tracking_uri.startswith("file:") or "://" not in self.tracking_uri:
            # MLflow 3 keeps its file store behind this switch ("maintenance mode" without it)
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        client = MlflowClient(self.tracking_uri)
        if self.run_id is not None:
            try:
                client.update_run(self.run_id, status="RUNNING")
            except Exception as exc:  # noqa: BLE001 - MlflowException or a store's own error
                log.warning(
                    "MLflowLogger: the checkpoint's run %s is not in %s (%s); starting a new run",
                    self.run_id,
                    self.tracking_uri,
                    str(exc).splitlines()[0] if str(exc) else type(exc).__name__,
                )
                self.run_id = None
        if self.run_id is None:
            name = self.settings["experiment_name"]
            experiment = client.get_experiment_by_name(name)
            experiment_id = (
                experiment.experiment_id if experiment else client.create_experiment(name)
            )
            run = client.create_run(
                experiment_id, run_name=self.settings["run_name"], tags=self.settings["tags"]
            )
            self.run_id = run.info.run_id
        self._client = client

    def on_fit_start(self, trainer: TrainerView) -> None:
        """Start the run (or continue the checkpointed one)."""
        self._open(trainer)

    def on_validate_start(self, trainer: TrainerView) -> None:
        """Start the run for a ``validate`` (unless open)."""
        self._open(trainer)

    def log_metrics(self, step: int, split: str, metrics: Mapping[str, float]) -> None:
        """Log the finite numeric metrics at ``step``."""
        if self._client is None:
            return
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        batch = [
            Metric(f"{split}/{name}", float(value), now, step)
            for name, value in metrics.items()
            if isinstance(value, int | float)
            and not isinstance(value, bool)
            and math.isfinite(value)
        ]
        if batch:
            self._client.log_batch(self.run_id, metrics=batch)

    def close(self) -> None:
        """Mark the run finished."""
        if self._client is not None and self.run_id is not None:
            self._client.set_terminated(self.run_id)
        self._client = None

    def state_dict(self) -> dict[str, Any]:
        """The run id and store, so that a resumed fit logs into the same run."""
        return {"run_id": self.run_id, "tracking_uri": self.tracking_uri}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue the saved run, in this run's store.

        The store is never taken from the checkpoint: a copied run folder (or another
        ``model_dir``) logs into its own ``mlruns``, continuing the run when the store holds it
        (a copy does), else starting a new one.
        """
        self.run_id = state.get("run_id")
        self.tracking_uri = self.settings["tracking_uri"]
