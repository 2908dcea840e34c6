"""Objects a plugin builds are checked where they cross into the core; 1.0 curves are adapted."""

from __future__ import annotations

import attrs
import pytest
import torch

from plugtrain import hookimpl
from plugtrain.curve import Curve, as_curve
from plugtrain.errors import PluginContractError
from plugtrain.schema import arg
from plugtrain.train.components.building import build_component


@attrs.frozen
class NoArgs:
    """Nothing to set (for the test)."""

    lr: float = arg(0.1, ge=0)


class NoZeroGrad:
    """An 'optimizer' that forgot most of torch.optim.Optimizer."""

    def __init__(self, params, lr=0.1):
        self.param_groups = [{"params": list(params), "lr": lr}]

    def step(self, closure=None):
        return None


class OnlyEval(torch.optim.SGD):
    def eval(self):
        pass


class Toy:
    @hookimpl
    def plugtrain_register_optimizers(self, registry):
        registry.register("NoZeroGrad", f"{__name__}:NoZeroGrad", schema=NoArgs)
        registry.register("OnlyEval", f"{__name__}:OnlyEval", schema=NoArgs)


@pytest.mark.parametrize(
    ("name", "says"),
    [
        ("NoZeroGrad", "without zero_grad, state_dict, load_state_dict, which plugtrain.protocols"),
        ("OnlyEval", "defines eval() but not train()"),
    ],
)
def test_a_built_component_missing_its_protocol_is_blamed_on_its_provider(
    make_registry, name, says
):
    registry = make_registry(Toy(), builtin=False)
    params = [torch.nn.Parameter(torch.zeros(2))]
    with pytest.raises(PluginContractError, match="optimizer") as caught:
        build_component(registry, "optimizer", {name: {}}, params)
    message = str(caught.value)
    assert f"optimizer {name!r} from Toy (local)" in message
    assert says in message


def test_curves_of_api_1_0_are_adapted_and_others_refused():
    class CallableCurve:
        length = 4

        def __call__(self, step):
            return 0.5 * step

    adapted = as_curve(CallableCurve(), "scheduler 'X' from acme 0.1")
    assert isinstance(adapted, Curve)
    assert (adapted.at(3), adapted.length) == (1.5, 4)
    ready = Curve(lambda e: 1.0, 2)
    assert as_curve(ready, "unused") is ready
    with pytest.raises(PluginContractError, match=r"scheduler 'X' from acme 0.1: its curve is a"):
        as_curve(0.5, "scheduler 'X' from acme 0.1")
