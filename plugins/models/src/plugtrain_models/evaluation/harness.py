"""The ``EleutherEvalHarness`` callback: lm-eval on plugtrain's own model, during fit and after.

It runs lm-eval's ``simple_evaluate`` with :class:`~.lm.PlugtrainLM` (the model being trained,
in this process): in ``fit`` at every ``every_n_vals``-th evaluation and after the last step; in
``validate`` and ``validate_all`` once per checkpoint. Each run's numbers are logged as
``<task>/<metric>`` (``<task>/<filter>/<metric>`` for a filter other than ``none``) with the
evaluation's metrics, and with ``eeh_args.output_path`` written as lm-eval's results JSON,
``results_<step>.json`` (a relative ``output_path`` is under ``model_dir``).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from torch import nn

from plugtrain.errors import ConfigError, ConfigIssue, MissingDependencyError
from plugtrain.protocols import TrainerView
from plugtrain.schema import validated_arguments
from plugtrain_models.evaluation.schemas import EleutherCLIArgs, lm_eval_missing
from plugtrain_models.generation.text import TextTokenizer, has_tokenizer_files, load_text_tokenizer

__all__ = ["EleutherEvalHarness", "flat_metrics"]

log = logging.getLogger("plugtrain")


def flat_metrics(results: Mapping[str, Any]) -> dict[str, float]:
    """lm-eval's ``results`` section as ``<task>/<metric>`` numbers (stderr included)."""
    flat: dict[str, float] = {}
    for task, values in results.items():
        for key, value in values.items():
            if "," not in key or isinstance(value, bool) or not isinstance(value, int | float):
                continue
            metric, kind = key.split(",", 1)
            name = f"{task}/{metric}" if kind == "none" else f"{task}/{kind}/{metric}"
            flat[name] = float(value)
    return flat


def _seeds(seed: Any) -> list[int | None]:
    """``"0,1234,1234,1234"`` (or one int) as python, numpy, torch and few-shot seeds."""
    if isinstance(seed, int):
        return [seed] * 4
    parts = seed.split(",") if isinstance(seed, str) else list(seed)
    values = [None if str(p).strip() in ("None", "") else int(p) for p in parts]
    if len(values) == 1:
        return values * 4
    return (values + [values[-1]] * 4)[:4]


class EleutherEvalHarness:
    """Model Zoo's ``EleutherEvalHarness`` (see :mod:`plugtrain_models.evaluation.schemas`)."""

    def __init__(
        self,
        *,
        eeh_args: Mapping[str, Any],
        batch_size: int,
        data_dir: str | None = None,
        every_n_vals: int = 1,
        max_sequence_length: int | None = None,
        tokenizer_file_path: str | None = None,
        eos_id: int | None = None,
        pretrained_model_name_or_path: str | None = None,
        name_scope: str | None = None,
    ) -> None:
        missing = lm_eval_missing()
        if missing is not None:
            raise MissingDependencyError(missing)
        self.eeh = validated_arguments(EleutherCLIArgs, dict(eeh_args), owner="eeh_args")
        self.batch_size = batch_size
        self.data_dir = data_dir
        self.every_n_vals = every_n_vals
        self.max_sequence_length = max_sequence_length
        self.tokenizer_file_path = tokenizer_file_path
        self.eos_id = eos_id
        self.pretrained_model_name_or_path = pretrained_model_name_or_path
        self.name_scope = name_scope or "eleuther"
        self.tokenizer_dir: str | None = None
        """A tokenizer folder that replaces the keys above (``plugtrain lm_eval --tokenizer``)."""
        self.last_results: dict[str, Any] | None = None
        """lm-eval's whole result of the last run (``None`` before one)."""
        self._in_fit = False
        self._evaluations = 0
        self._evaluated_step: int | None = None
        self._pending = True

    # -- running lm-eval -----------------------------------------------------------------------

    def tokenizer(self) -> TextTokenizer:
        """The tokenizer the keys name (a local folder or tokenizer.json)."""
        if self.tokenizer_dir is not None:
            return load_text_tokenizer(self.tokenizer_dir)
        if self.tokenizer_file_path is not None:
            return load_text_tokenizer(self.tokenizer_file_path, self.eos_id)
        name = self.pretrained_model_name_or_path
        if name is not None and has_tokenizer_files(name):
            return load_text_tokenizer(name)  # its EOS replaces eos_id, as in Model Zoo
        where = "EleutherEvalHarness.pretrained_model_name_or_path"
        if name is None:
            message = "give pretrained_model_name_or_path (a local folder) or tokenizer_file_path"
        else:
            message = (
                f"{name!r} is not a local tokenizer folder (nothing is downloaded here): save "
                "its tokenizer files to a folder and give that folder (or --tokenizer DIR)"
            )
        raise ConfigError([ConfigIssue(where, message)])

    def evaluate(self, model: nn.Module, step: int, output_dir: Path | None) -> dict[str, float]:
        """Run lm-eval on ``model``; its ``<task>/<metric>`` numbers (results JSON written)."""
        from lm_eval.evaluator import simple_evaluate

        from plugtrain_models.evaluation.lm import PlugtrainLM
        from plugtrain_models.evaluation.tasks import resolve_tasks

        e = self.eeh
        specs, manager = resolve_tasks(e["tasks"], e["include_path"])
        overrides = {key: e[key] for key in ("max_tokens", "temperature", "top_k", "top_p")}
        python_seed, numpy_seed, torch_seed, fewshot_seed = _seeds(e["seed"])
        lm = PlugtrainLM(
            model, self.tokenizer(), batch_size=self.batch_size,
            max_length=self.max_sequence_length, overrides=overrides,
            seed=torch_seed if torch_seed is not None else 0,
        )  # fmt: skip
        cache = e["cache_requests"]
        was_training = model.training
        model.eval()
        try:
            results = simple_evaluate(
                model=lm, tasks=specs, task_manager=manager, num_fewshot=e["num_fewshot"],
                limit=e["limit"], cache_requests=cache == "true",
                rewrite_requests_cache=cache == "refresh", delete_requests_cache=cache == "delete",
                check_integrity=e["check_integrity"], write_out=e["write_out"],
                log_samples=e["log_samples"], system_instruction=e["system_instruction"],
                apply_chat_template=e["apply_chat_template"],
                fewshot_as_multiturn=e["fewshot_as_multiturn"], predict_only=e["predict_only"],
                random_seed=python_seed, numpy_random_seed=numpy_seed,
                torch_random_seed=torch_seed, fewshot_random_seed=fewshot_seed,
            )  # fmt: skip
        finally:
            model.train(was_training)
        self.last_results = results
        metrics = flat_metrics(results["results"]) if results else {}
        if output_dir is not None and results:
            self._write(results, step, output_dir)
        shown = ", ".join(f"{name} {value:.4f}" for name, value in metrics.items())
        log.info("EleutherEvalHarness at step %d: %s", step, shown or "no metrics")
        return metrics

    def output_dir(self, model_dir: Path) -> Path | None:
        """Where results go: ``eeh_args.output_path`` (relative: under ``model_dir``)."""
        written = self.eeh["output_path"]
        if written is None:
            return None
        path = Path(written)
        return path if path.is_absolute() else Path(model_dir) / path

    def _write(self, results: dict[str, Any], step: int, folder: Path) -> None:
        from lm_eval.utils import handle_non_serializable

        folder.mkdir(parents=True, exist_ok=True)
        samples = results.pop("samples", None)
        text = json.dumps(results, indent=2, default=handle_non_serializable, ensure_ascii=False)
        (folder / f"results_{step}.json").write_text(text, encoding="utf-8")
        if samples:
            for task, rows in samples.items():
                lines = (json.dumps(r, default=handle_non_serializable) for r in rows)
                (folder / f"samples_{task}_{step}.jsonl").write_text("\n".join(lines) + "\n")
            results["samples"] = samples

    def run(self, trainer: TrainerView) -> dict[str, float]:
        """Evaluate the trainer's model now (its results written on the main process)."""
        step = int(trainer.global_step)
        main = bool(trainer.is_main_process)
        folder = self.output_dir(trainer.model_dir) if main else None
        metrics = self.evaluate(trainer.unwrapped_model, step, folder)
        self._evaluated_step = step
        return metrics

    # -- callback hooks ------------------------------------------------------------------------

    def on_fit_start(self, trainer: TrainerView) -> None:
        """Count this fit's evaluations from zero."""
        self._in_fit, self._evaluations = True, 0

    def on_load_checkpoint(self, trainer: TrainerView, path: Any) -> None:
        """A new checkpoint: ``validate``/``validate_all`` evaluate it once."""
        self._pending = True

    def on_validate_end(self, trainer: TrainerView, metrics: dict[str, float]) -> None:
        """In fit, every ``every_n_vals``-th evaluation; else once per checkpoint."""
        if self._in_fit:
            self._evaluations += 1
            if self._evaluations % self.every_n_vals:
                return
        elif not self._pending:
            return
        self._pending = False
        metrics.update(self.run(trainer))

    def on_fit_end(self, trainer: TrainerView) -> None:
        """After the last step, unless its evaluation already ran lm-eval."""
        self._in_fit = False
        if self._evaluated_step == int(trainer.global_step):
            return
        metrics = self.run(trainer)
        if trainer.is_main_process:
            for logger in trainer.loggers:
                logger.log_metrics(int(trainer.global_step), "val", metrics)
