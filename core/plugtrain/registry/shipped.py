"""The names each of plugtrain's own distributions ships, readable without installing them.

An unknown-name error suggests installing a distribution only when that distribution ships the
name asked for: after a third party's plugin is uninstalled, its names are not offered as
``pip install plugtrain-optimizers``. ``tests/core/test_author_gaps.py`` keeps this table equal to
what the distributions register. Torch-free; imports nothing.
"""

from __future__ import annotations

__all__ = ["SHIPPED", "shipped_by"]

SHIPPED: dict[str, dict[str, tuple[str, ...]]] = {
    "plugtrain": {
        "model": ("MLP",),
        "dataloader": ("Digits", "StdlibText", "Synthetic"),
        "logger": ("MetricsFilesLogger", "ProgressLogger"),
        "callback": ("Throughput",),
    },
    "plugtrain-optimizers": {
        "optimizer": (
            "ASGD", "Adadelta", "Adafactor", "Adagrad", "Adam", "AdamW", "Adamax", "Lamb",
            "Lion", "Muon", "NAdam", "RAdam", "RMSprop", "Rprop", "SGD",
            "AdamWScheduleFree", "SGDScheduleFree",
        ),
    },
    "plugtrain-schedulers": {
        "scheduler": (
            "ChainedLR", "ChainedScheduler", "ChainedWD", "ConstantLR", "ConstantWD",
            "CosineAnnealingLR", "CosineAnnealingWD", "CosineAnnealingWarmRestarts",
            "CosineAnnealingWarmRestartsWD", "CosineDecayLR", "CosineDecayWD", "CyclicLR",
            "CyclicWD", "ExponentialLR", "ExponentialWD", "InverseExponentialTimeDecayLR",
            "InverseExponentialTimeDecayWD", "InverseSquareRootDecayLR",
            "InverseSquareRootDecayWD", "LambdaLR", "LambdaWD", "LinearLR", "LinearWD",
            "MultiStepLR", "MultiStepWD", "MultiplicativeLR", "MultiplicativeWD", "OneCycleLR",
            "OneCycleWD", "PiecewiseConstantLR", "PiecewiseConstantWD", "PolynomialLR",
            "PolynomialWD", "ScalePerParamLR", "ScalePerParamWD", "SequentialLR", "SequentialWD",
            "StepLR", "StepWD",
        ),
    },
    "plugtrain-backends": {
        "backend": ("CPU", "CSX", "GPU"),
    },
    "plugtrain-callbacks": {
        "callback": (
            "CheckLoss", "ComputeNorm", "GlobalFlags", "KeepNCheckpoints", "LoadCheckpointStates",
            "LogOptimizerParamGroup", "RateProfiler", "ScopedTrainFlags", "ScopedValidateFlags",
        ),
        "logger": ("MLflowLogger", "TensorBoardLogger", "WandbLogger"),
    },
    "plugtrain-sparsity": {
        "sparsity": ("GMP", "RigL", "SET", "Static"),
        "callback": ("LogSparsity",),
    },
    "plugtrain-models": {
        "dataloader": (
            "BertCSVDataProcessor", "BertCSVDynamicMaskDataProcessor", "BertHDF5DataProcessor",
            "BertSumCSVDataProcessor", "BertTokenClassifierDataProcessor", "DPRHDF5DataProcessor",
            "DpoHDF5DataProcessor",
            "GptHDF5DataProcessor", "GptHDF5MapDataProcessor", "MNLIDataProcessor",
            "SST2DataProcessor", "T5DynamicDataProcessor", "TransformerDynamicDataProcessor",
        ),
        "model": (
            "GPT", "bloom", "btlm", "falcon", "gemma2", "gpt-neox", "gpt2", "gpt3", "gptj",
            "jais", "llama", "mistral", "mixtral", "santacoder", "starcoder",
            "T5ForConditionalGeneration", "bert", "bert/classifier",
            "bert/extractive_summarization", "bert/token_classifier", "dpo", "dpr", "esm2", "t5",
            "transformer",
        ),
        "callback": ("BigCodeEvalHarness", "EleutherEvalHarness", "Lora"),
        "checkpoint_converter": (
            *(
                f"{family}{variant}"
                for family in (
                    "bloom", "btlm", "code-llama", "falcon", "gemma2", "gpt-neox", "gpt2", "gpt3",
                    "gptj", "jais", "llama", "llamaV2", "mistral", "mixtral", "octocoder",
                    "santacoder", "sqlcoder", "starcoder", "wizardcoder", "wizardlm",
                )
                for variant in ("", "-headless")
                if (family, variant) != ("gemma2", "-headless")
            ),
            "bert", "bert-sequence-classifier", "bert-token-classifier", "dpo", "dpr", "esm-2",
            "roberta", "t5", "transformer",
        ),
    },
}  # fmt: skip
"""distribution -> kind -> every name and alias it registers."""


def shipped_by(kind: str, name: str) -> list[str]:
    """The distributions of plugtrain that ship ``name`` (any case) as a ``kind``."""
    wanted = name.lower() if isinstance(name, str) else name
    return [
        distribution
        for distribution, kinds in SHIPPED.items()
        if any(n.lower() == wanted for n in kinds.get(kind, ()))
    ]
