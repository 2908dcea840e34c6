"""What a new plugin author hit (issue 17), each fixed: exit statuses, suggestions, --traceback,
a missing matplotlib, and the table of names plugtrain's own distributions ship."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
from support.paths import EXAMPLES
from support.plugtrain_cli import run_plugtrain

from plugtrain.cli import main
from plugtrain.discovery import loading as plugins
from plugtrain.errors import UnknownNameError
from plugtrain.registry.shipped import SHIPPED, shipped_by

RUN = """\
trainer:
  init:
    device: CPU
    model_dir: {model_dir}
    model: {{MLP: {{in_features: 4, out_features: 2}}}}
    optimizer: {{{optimizer}: {{lr: 0.1}}}}
    schedulers:
      - LinearLR: {{initial_learning_rate: 0.1, end_learning_rate: 0.0, total_iters: 4}}
    loop: {{max_steps: 4}}
  fit:
    train_dataloader: {{Synthetic: {{batch_size: 8, in_features: 4, num_classes: 2}}}}
"""


def _cli(*args: str, code: str = "") -> subprocess.CompletedProcess[str]:
    script = f"import sys\n{code}\nfrom plugtrain.cli import main\nsys.exit(main(sys.argv[1:]))"
    return subprocess.run(
        [sys.executable, "-c", script, *args],
        capture_output=True,
        text=True,
        check=False,
        env={k: v for k, v in os.environ.items() if not k.startswith("PLUGTRAIN_")},
        timeout=300,
    )


def test_the_shipped_table_is_what_the_distributions_register():
    registry = plugins.build_registry(plugins.PluginSettings(autoload=True))
    for distribution, kinds in SHIPPED.items():
        mine = [c for c in registry.components() if c.plugin.distribution == distribution]
        if not mine and distribution != "plugtrain":
            continue  # not installed here
        found: dict[str, set[str]] = {}
        for component in mine:
            found.setdefault(component.kind, set()).update([component.name, *component.aliases])
        assert found == {kind: set(names) for kind, names in kinds.items()}, distribution


def test_shipped_by_ignores_case():
    assert shipped_by("optimizer", "adamw") == ["plugtrain-optimizers"]
    assert shipped_by("optimizer", "Adan") == []


class _Adan:
    """A third party's optimizer plugin, in memory."""

    def __init__(self) -> None:
        import attrs

        from plugtrain import hookimpl

        @attrs.frozen
        class AdanArgs:
            """Adan."""

        class Hooks:
            @hookimpl
            def plugtrain_register_optimizers(self, registry):
                registry.register("Adan", "nowhere:Adan", schema=AdanArgs)

        self.hooks = Hooks()


def test_after_uninstalling_a_plugin_its_names_suggest_nothing_to_install(make_registry):
    registry = make_registry(builtin=True)  # no optimizer plugin at all
    with pytest.raises(UnknownNameError) as caught:
        registry.lookup("optimizer", "Adan")
    assert str(caught.value) == (
        "Unknown optimizer 'Adan'. No installed plugin provides optimizers."
    )
    with pytest.raises(UnknownNameError, match=r"install plugtrain-optimizers \(pip install"):
        registry.lookup("optimizer", "SGD")  # which plugtrain-optimizers would bring back


def test_beside_another_provider_a_shipped_name_names_its_distribution(make_registry):
    registry = make_registry(_Adan().hooks)
    with pytest.raises(UnknownNameError) as caught:
        registry.lookup("optimizer", "AdamW")
    message = str(caught.value)
    assert "Optimizers come from: Hooks (local)." in message
    assert "'AdamW' is an optimizer of plugtrain-optimizers, which is not installed" in message


def test_show_of_a_name_nothing_ships_suggests_no_install():
    # not Adan: pytorch-optimizer has one, which plugtrain-bridges names when it is not installed
    done = _cli("-p", "no:optimizers", "show", "Sophia")
    assert done.returncode == 2
    assert "No component named 'Sophia'." in done.stderr
    assert "pip install" not in done.stderr
    # with plugtrain-optimizers blocked, plugtrain-bridges' torch:SGD would answer: block it too
    shipped = _cli("-p", "no:optimizers", "-p", "no:torch", "show", "SGD")
    assert "'SGD' is an optimizer of plugtrain-optimizers, which is not installed" in shipped.stderr


@pytest.mark.parametrize(
    "command",
    [
        ["show", "Nope"],
        ["show", "Nope", "--kind", "optimizer"],
    ],
)
def test_every_unknown_name_exits_2(command, capsys):
    assert main(command) == 2
    assert "plugtrain: error:" in capsys.readouterr().err


def test_an_unknown_kind_exits_2_too():
    assert _cli("show", "SGD", "--kind", "optimiser").returncode == 2


def test_check_and_show_agree_on_an_unknown_name(tmp_path, capsys):
    run = tmp_path / "run.yaml"
    run.write_text(RUN.format(model_dir=tmp_path / "m", optimizer="Nope"), encoding="utf-8")
    assert main(["check", str(run)]) == 2
    assert main(["show", "Nope"]) == 2


@pytest.mark.parametrize(
    "command",
    [
        ["--traceback", "show", "Nope"],
        ["show", "Nope", "--traceback"],
        ["show", "--traceback", "Nope"],
    ],
)
def test_traceback_anywhere_on_the_command_line(command):
    done = _cli(*command)
    assert done.returncode != 0
    assert "Traceback (most recent call last)" in done.stderr
    assert "UnknownNameError" in done.stderr


def test_without_traceback_after_the_subcommand_there_is_none():
    done = _cli("show", "Nope")
    assert "Traceback" not in done.stderr


BLOCK_MATPLOTLIB = "sys.modules['matplotlib'] = None  # as if it were not installed"


def test_plot_without_matplotlib_names_the_extra(tmp_path):
    run = tmp_path / "run.yaml"
    run.write_text(RUN.format(model_dir=tmp_path / "m", optimizer="SGD"), encoding="utf-8")
    done = _cli("plot", str(run), "-o", str(tmp_path / "s.png"), code=BLOCK_MATPLOTLIB)
    assert done.returncode == 1
    assert "internal error" not in done.stderr
    assert "pip install 'plugtrain[plot]'" in done.stderr
    assert not (tmp_path / "s.png").exists()


def test_plot_with_matplotlib_draws(tmp_path):
    run = tmp_path / "run.yaml"
    run.write_text(RUN.format(model_dir=tmp_path / "m", optimizer="SGD"), encoding="utf-8")
    done = _cli("plot", str(run), "-o", str(tmp_path / "s.png"))
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "s.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.slow
def test_fit_without_matplotlib_says_why_there_is_no_schedule_png(tmp_path):
    run = tmp_path / "run.yaml"
    run.write_text(RUN.format(model_dir=tmp_path / "m", optimizer="SGD"), encoding="utf-8")
    done = _cli("fit", str(run), code=BLOCK_MATPLOTLIB)
    assert done.returncode == 0, done.stderr
    assert "schedule.png not written: drawing schedules needs matplotlib" in done.stderr
    assert not (tmp_path / "m" / "schedule.png").exists()


def test_the_train_extra_brings_matplotlib():
    import importlib.metadata

    requires = importlib.metadata.requires("plugtrain") or []
    train = [r for r in requires if 'extra == "train"' in r]
    assert any(r.startswith("matplotlib") for r in train), train


def test_the_template_packages_have_their_own_conftest():

    root = EXAMPLES
    for package in ("acme-plugtrain-adan", "acme-plugtrain-warmup"):
        text = (root / package / "conftest.py").read_text(encoding="utf-8")
        assert 'pytest_plugins = ["plugtrain.testing"]' in textwrap.dedent(text)


CROSS_CHECKED = '''
from collections.abc import Iterator, Mapping
from typing import Any

import attrs

from plugtrain import hookimpl
from plugtrain.schema import Problem, about, arg


@attrs.frozen
class NesterovSGDArgs:
    """SGD with optional Nesterov momentum."""

    lr: float = arg(help="learning rate", ge=0)
    momentum: float = arg(0.0, help="momentum factor", ge=0)
    nesterov: bool = arg(False, help="use Nesterov momentum")

    @staticmethod
    def cross_check(arguments: Mapping[str, Any]) -> Iterator[str | Problem]:
        if arguments["nesterov"] and arguments["momentum"] <= 0:
            yield about(("nesterov", "momentum"), "nesterov=True needs momentum > 0")


@hookimpl
def plugtrain_register_optimizers(registry):
    registry.register("NesterovSGD", "torch.optim:SGD", schema=NesterovSGDArgs)
'''

CROSS_RUN = """\
trainer:
  init:
    device: CPU
    model_dir: {model_dir}
    model: {{MLP: {{in_features: 4, out_features: 2}}}}
    optimizer:
      NesterovSGD:
{arguments}
    loop: {{max_steps: 4}}
  fit:
    train_dataloader: {{Synthetic: {{batch_size: 8, in_features: 4, num_classes: 2}}}}
"""


@pytest.mark.parametrize(
    ("arguments", "where"),
    [
        # the first of about()'s names that the file writes carries the message, in about()'s
        # order: nesterov, though momentum comes first in the file
        (["lr: 0.1", "nesterov: true"], "9:9: trainer.init.optimizer.NesterovSGD.nesterov"),
        (
            ["lr: 0.1", "momentum: 0", "nesterov: true"],
            "10:9: trainer.init.optimizer.NesterovSGD.nesterov",
        ),
        (["nesterov: true", "lr: 0.1"], "8:9: trainer.init.optimizer.NesterovSGD.nesterov"),
    ],
)
def test_a_cross_check_is_placed_at_the_arguments_it_names(tmp_path, arguments, where):
    (tmp_path / "nestplug.py").write_text(CROSS_CHECKED, encoding="utf-8")
    run = tmp_path / "run.yaml"
    body = "\n".join(f"        {line}" for line in arguments)
    run.write_text(CROSS_RUN.format(model_dir=tmp_path / "m", arguments=body), encoding="utf-8")
    done = run_plugtrain(
        "-p",
        "nestplug",
        "check",
        str(run),
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
        timeout=300,
    )
    assert done.returncode == 2
    assert f"run.yaml:{where}: nesterov=True needs momentum > 0" in done.stderr
