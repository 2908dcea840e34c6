"""``BigCodeEvalHarness``: accepted by name so that ``plugtrain check`` can say what it needs."""

from __future__ import annotations

from typing import Any

from plugtrain.errors import ConfigError, ConfigIssue
from plugtrain_models.evaluation.schemas import BigCodeEvalHarnessArgs

__all__ = ["BigCodeEvalHarness"]


class BigCodeEvalHarness:
    """Model Zoo's bigcode-evaluation-harness callback: refused with the reason ``check`` gives."""

    def __init__(
        self,
        *,
        bigcode_args: dict[str, Any],
        batch_size: int,
        data_dir: str,
        every_n_vals: int = 1,
        max_sequence_length: int | None = None,
        tokenizer_file_path: str | None = None,
        eos_id: int | None = None,
        pretrained_model_name_or_path: str | None = None,
        name_scope: str | None = None,
    ) -> None:
        reasons = list(BigCodeEvalHarnessArgs.cross_check({}))
        raise ConfigError([ConfigIssue("BigCodeEvalHarness", reason) for reason in reasons])
