"""How precision settings reach a backend: CSX hands them to cstorch; others say they are inert.

The Cerebras stack cannot run here, so the CSX tests use a test double of ``cerebras.pytorch``
(named so in each test) that records what it is handed.
"""

from __future__ import annotations

import logging
import sys
import types

import pytest
import torch

import plugtrain
from plugtrain.errors import ConfigError
from plugtrain.train.trainer import Trainer

pytestmark = pytest.mark.usefixtures("fresh_backend")


def _mlp():
    from plugtrain.builtin.models import MLP

    return MLP(in_features=4, hidden=8, out_features=2)


class FakeCstorchWithAmp(types.ModuleType):
    """Test double of ``cerebras.pytorch``: a backend, compile, and the precision knobs."""

    def __init__(self) -> None:
        super().__init__("cerebras.pytorch")
        self.half_dtypes: list[str] = []
        precision = types.SimpleNamespace(optimization_level=None)
        self.backends = types.SimpleNamespace(csx=types.SimpleNamespace(precision=precision))
        self.amp = types.SimpleNamespace(set_half_dtype=self.half_dtypes.append)
        self.distributed = types.SimpleNamespace(ClusterConfig=lambda **fields: fields)

    def backend(self, backend_type, **arguments):
        return types.SimpleNamespace(torch_device=torch.device("cpu"))

    def compile(self, model, backend):
        return model


@pytest.fixture
def fake_cstorch(monkeypatch):
    fake = FakeCstorchWithAmp()
    monkeypatch.setitem(sys.modules, "cerebras", types.ModuleType("cerebras"))
    monkeypatch.setitem(sys.modules, "cerebras.pytorch", fake)
    return fake


def test_csx_hands_fp16_type_and_precision_opt_level_to_a_fake_cstorch(fake_cstorch, tmp_path):
    settings = {
        "fp16_type": "cbfloat16",
        "loss_scaling_factor": "dynamic",
        "precision_opt_level": 1,
        "max_gradient_norm": 1.0,
    }
    trainer = Trainer(device="CSX", model=_mlp, model_dir=tmp_path, precision=settings)
    assert fake_cstorch.half_dtypes == ["cbfloat16"]
    assert fake_cstorch.backends.csx.precision.optimization_level == 1
    assert trainer.backend.precision.fp16_type == "cbfloat16"
    # The CSX compiler casts and scales: no torch autocast and no torch GradScaler here.
    assert trainer.precision.dtype is None
    assert trainer.precision.scaler is None


def test_csx_refuses_cbfloat16_without_dynamic_loss_scaling_with_a_fake_cstorch(
    fake_cstorch, tmp_path
):
    with pytest.raises(ConfigError, match="cbfloat16 needs dynamic loss scaling on CSX"):
        Trainer(
            device="CSX",
            model=_mlp,
            model_dir=tmp_path,
            precision={"fp16_type": "cbfloat16", "loss_scaling_factor": 1.0},
        )
    assert fake_cstorch.half_dtypes == []


def test_the_default_backend_says_once_that_precision_opt_level_is_inert(tmp_path, caplog):
    backend = plugtrain.backend("CPU")
    with caplog.at_level(logging.INFO, logger="plugtrain"):
        for _ in range(2):
            Trainer(
                backend=backend,
                model=_mlp,
                model_dir=tmp_path,
                precision={"fp16_type": "bfloat16", "precision_opt_level": 2},
            )
    assert caplog.text.count("precision_opt_level 2 is handed to the CSX compiler") == 1
    assert "no effect on the CPU backend" in caplog.text


def test_csx_keeps_mixed_precision_on_when_disabled_with_a_fake_cstorch(
    fake_cstorch, tmp_path, caplog
):
    with caplog.at_level(logging.WARNING, logger="plugtrain"):
        Trainer(device="CSX", model=_mlp, model_dir=tmp_path, precision={"enabled": False})
    assert "mixed precision is always on on CSX; enabled: false ignored" in caplog.text
    assert fake_cstorch.half_dtypes == ["bfloat16"]
