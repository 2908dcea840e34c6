"""Session set-up shared by the core's tests."""

from __future__ import annotations

import json
import signal
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from support.tiny_models import TINY_LLAMA_CONFIG

STDLIB_GPT = "runs/data/stdlib_gpt"
"""Where the Model Zoo-shaped examples read the HDF5 files ``plugtrain preprocess`` writes."""

ENCODERS = "runs/data/encoders"
"""Where the encoder examples read the sample data ``plugtrain_models.encoder_data.samples``
writes."""

DPO = "runs/data/dpo"
"""Where the DPO example reads the preference samples ``plugtrain_models.dpo.samples`` writes."""


@pytest.fixture(scope="session", autouse=True)
def _sigint_delivered() -> Iterator[None]:
    """Let SIGINT act, even when pytest was started as a background job of a script.

    A shell without job control starts ``cmd &`` with SIGINT ignored, and every child inherits
    that, so the Ctrl-C tests (in process, and of ``plugtrain`` subprocesses) would see a signal
    that a person at a terminal can never send to such a job. plugtrain itself keeps an ignored
    signal ignored (tested with SIGHUP in ``tests/reliability/test_signals.py``).
    """
    previous = signal.getsignal(signal.SIGINT)
    if previous is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    if previous is signal.SIG_IGN:
        signal.signal(signal.SIGINT, previous)


@pytest.fixture(scope="session")
def stdlib_gpt_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding ``runs/data/stdlib_gpt``: a small stdlib corpus, preprocessed once;
    ``runs/data/encoders``, the encoder examples' sample data; and ``runs/data/dpo``, the DPO
    example's preference samples; and ``llama3_hf/config.json``, a tiny Llama's config, whose
    shape the fine-tuning examples take (``from_config``)."""
    from plugtrain.cli import main
    from plugtrain_models.dpo.samples import write_dpo_samples
    from plugtrain_models.encoder_data.samples import write_examples

    root = tmp_path_factory.mktemp("examples_cwd")
    arguments = ["preprocess", "stdlib", "-o", str(root / STDLIB_GPT), "--max-seq-length", "128"]
    assert main([*arguments, "--stdlib-corpus", "300000", "--no-progress"]) == 0
    write_examples(root / ENCODERS)
    write_dpo_samples(root / DPO)
    (root / "llama3_hf").mkdir()
    (root / "llama3_hf/config.json").write_text(json.dumps(TINY_LLAMA_CONFIG), encoding="utf-8")
    return root


@pytest.fixture
def example_cwd(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> Callable[[Path], None]:
    """``example_cwd(path)`` moves into a folder holding the data that example reads, if any.

    A data_dir must exist when a run file is checked, relative to the working directory.
    """

    def enter(example: Path) -> None:
        text = example.read_text(encoding="utf-8")
        if any(folder in text for folder in (STDLIB_GPT, ENCODERS, DPO)):
            monkeypatch.chdir(request.getfixturevalue("stdlib_gpt_root"))

    return enter


@pytest.fixture
def one_process_group(tmp_path: Path) -> Iterator[None]:
    """A gloo process group of one process (DTensors and meshes without launching anything)."""
    import torch.distributed as dist

    store = dist.FileStore(str(tmp_path / "store"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()
