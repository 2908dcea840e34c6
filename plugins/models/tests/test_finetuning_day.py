"""docs/fine-tuning.md's "The whole day, start to end", run exactly as the page shows it.

The page marks what the test does with each block: ``<!-- day: write FILE -->`` writes the
block to FILE, ``<!-- day: run -->`` runs its commands (``plugtrain ...`` in this process,
``python FILE`` as a script), ``<!-- day: python -->`` runs the block as Python and
``<!-- day: says -->`` holds lines the previous command prints. The fit marked ``interrupted``
gets SIGTERM during step 3, as a scheduler would send it; the one marked ``resumed``
must be the command its message says to run.

Then each result is compared with the reference tools, in float32:

- the resumed fit's adapters and optimizer state equal, bit for bit, those of an uninterrupted
  run of the same file writing whole checkpoints (``adapter_only_checkpoints: false``);
- ``generate --chat`` from the adapter-only and from the whole checkpoint gives the ids of
  transformers' greedy ``generate`` on the base with the PEFT adapter (``PeftModel``), on the
  prompts rendered by the tokenizer's chat template;
- ``lm_eval``'s results equal lm-eval's own ``hf`` model with ``peft=`` the exported adapter
  (``acc``, ``acc_norm``; perplexities within float32 round-off);
- the exports: the PEFT adapter loads on the base (the page's block does it) and
  ``AutoPeftModelForCausalLM`` finds the base it records; the folded model is bfloat16, its
  weights PEFT's ``merge_and_unload()`` to within one bfloat16 step, with the base's tokenizer
  files and generation config.
"""

from __future__ import annotations

import json
import re
import runpy
import shlex
import shutil
import signal
import warnings
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
import yaml

from plugtrain.cli import main
from plugtrain.train.loop.callbacks import Callbacks
from plugtrain_models.generation.prompts import checkpoint_eos_ids, read_prompts
from plugtrain_models.generation.run import resolve_tokenizer

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::FutureWarning")

PAGE = Path(__file__).resolve().parents[3] / "docs" / "fine-tuning.md"
TINY_TOKENIZER = Path(__file__).parent / "data" / "tiny_tokenizer"
SECTION = "## The whole day, start to end"
BLOCK = re.compile(r"<!-- day: (?P<what>[^>]+?) -->\n```[^\n]*\n(?P<text>.*?)\n```", re.S)
STOP_AT = 3
"""The step during which the interrupted fit gets SIGTERM (it saves that step and stops)."""


def day_steps() -> list[tuple[str, str]]:
    """The marked blocks of the page's section, in order: (what to do, the block's text).

    Every block of the section is marked: none is shown without being run or checked.
    """
    page = PAGE.read_text(encoding="utf-8")
    start = page.index(SECTION)
    end = page.find("\n## ", start + len(SECTION))
    section = page[start : end if end != -1 else len(page)]
    steps = [(m["what"].strip(), m["text"]) for m in BLOCK.finditer(section)]
    fences = sum(1 for line in section.splitlines() if line.startswith("```"))
    assert fences == 2 * len(steps), "a block of the section is not marked <!-- day: ... -->"
    return steps


class Ran:
    """What one ``plugtrain`` command did: its arguments, exit status and output."""

    def __init__(self, argv: list[str], status: int, out: str, err: str) -> None:
        self.argv, self.status, self.out, self.err = argv, status, out, err


@pytest.fixture
def stop_signals_default() -> Iterator[None]:
    """SIGTERM at its default disposition while the test runs (``fit`` installs its own)."""
    previous = signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _plugtrain(argv: list[str], capsys: pytest.CaptureFixture[str]) -> Ran:
    status = main(argv)
    captured = capsys.readouterr()
    return Ran(argv, status, captured.out, captured.err)


def _sigterm_at(step: int) -> Any:
    """``on_train_step_start`` that sends this process SIGTERM as ``step`` starts."""
    original = Callbacks.on_train_step_start

    def hook(self: Callbacks, trainer: Any, starting: int) -> None:
        original(self, trainer, starting)
        if starting == step:
            signal.raise_signal(signal.SIGTERM)

    return hook


def walk_the_day(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> dict:
    """Do every marked step in the current folder; what the commands did, by marker."""
    done: dict[str, Any] = {"ran": [], "namespace": {}}
    for what, text in day_steps():
        verb, _, rest = what.partition(" ")
        if verb == "write":
            Path(rest).parent.mkdir(parents=True, exist_ok=True)
            Path(rest).write_text(text + "\n", encoding="utf-8")
        elif verb == "python":
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                exec(compile(text, "<day: python>", "exec"), done["namespace"])
        elif verb == "says":
            assert text in done["ran"][-1].err, (text, done["ran"][-1].err)
        else:
            assert verb == "run", what
            for line in text.splitlines():
                words = shlex.split(line)
                if words[0] == "python":
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        runpy.run_path(words[1], run_name="__main__")
                    continue
                assert words[0] == "plugtrain", line
                with monkeypatch.context() as patch:
                    if rest == "interrupted":
                        patch.setattr(Callbacks, "on_train_step_start", _sigterm_at(STOP_AT))
                    ran = _plugtrain(words[1:], capsys)
                done["ran"].append(ran)
                if rest:
                    done[rest] = ran
                expected = 143 if rest == "interrupted" else 0
                assert ran.status == expected, (line, ran.err[-3000:])
    return done


def _whole_run_options(run_file: Path) -> list[str]:
    """``--set`` options making the page's run file write whole checkpoints to runs/whole."""
    callbacks = yaml.safe_load(run_file.read_text())["trainer"]["init"]["callbacks"]
    callbacks[0]["Lora"]["adapter_only_checkpoints"] = False
    return [
        "--set", "trainer.init.model_dir=runs/whole",
        "--set", f"trainer.init.callbacks={json.dumps(callbacks)}",
    ]  # fmt: skip


def _lora_tensors(checkpoint: Path) -> dict[str, torch.Tensor]:
    state = torch.load(checkpoint, map_location="cpu", weights_only=True)
    return {n: t for n, t in state["model"].items() if ".lora_" in n}


def _optimizer_tensors(checkpoint: Path) -> list[torch.Tensor]:
    state = torch.load(checkpoint, map_location="cpu", weights_only=True)["optimizer"]
    return [t for entry in state["state"].values() for t in entry.values()]


def _generated(ran: Ran) -> list[list[int]]:
    return [json.loads(line)["token_ids"] for line in ran.out.splitlines()]


def _chats(argv: list[str]) -> list[list[dict[str, str]]]:
    """The chats a ``generate`` command line renders: ``--chat`` prompts as user turns, or
    the ``messages`` of its ``--prompts-file``."""
    if "--prompts-file" in argv:
        prompts = read_prompts(None, argv[argv.index("--prompts-file") + 1])
    else:
        following = argv[argv.index("--prompt") + 1 :]
        ends = [i for i, word in enumerate(following) if word.startswith("--")]
        prompts = list(following[: ends[0] if ends else len(following)])
    assert all(isinstance(p, list) for p in prompts) or "--chat" in argv
    return [[{"role": "user", "content": p}] if isinstance(p, str) else p for p in prompts]


def _peft_ids(
    namespace: dict[str, Any], chats: list[list[dict[str, str]]], max_tokens: int
) -> list[list[int]]:
    """Greedy ids of transformers + PEFT (the page's ``adapted``), one chat at a time."""
    tokenizer, adapted = namespace["tokenizer"], namespace["adapted"].eval()
    found = []
    for chat in chats:
        prompt = tokenizer.apply_chat_template(
            chat, add_generation_prompt=True, return_tensors="pt"
        )
        with torch.no_grad():
            ids = adapted.generate(**prompt, max_new_tokens=max_tokens, do_sample=False)
        found.append(ids[0, prompt["input_ids"].shape[1] :].tolist())
    return found


def _lm_eval_reference(adapter: Path, tasks: str) -> dict[str, Any]:
    from lm_eval.evaluator import simple_evaluate

    from plugtrain_models.evaluation.harness import flat_metrics
    from plugtrain_models.evaluation.tasks import resolve_tasks

    specs, manager = resolve_tasks(tasks)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reference = simple_evaluate(
            model="hf",
            model_args={"pretrained": "llama3_hf", "peft": str(adapter), "dtype": "float32"},
            tasks=specs, task_manager=manager, batch_size=4, device="cpu",
        )  # fmt: skip
    return flat_metrics(reference["results"])


def _check_the_base() -> None:
    """What the page's first block wrote: a bfloat16 Llama sharded with an index, an EOS list."""
    from safetensors import safe_open

    base = Path("llama3_hf")
    index = json.loads((base / "model.safetensors.index.json").read_text())
    shards = sorted(set(index["weight_map"].values()))
    assert len(shards) == 3
    for shard in shards:
        with safe_open(str(base / shard), "pt") as file:
            assert {file.get_slice(k).get_dtype() for k in file.keys()} == {"BF16"}  # noqa: SIM118
    generation = json.loads((base / "generation_config.json").read_text())
    assert generation["eos_token_id"] == [1, 4]  # <|end_of_text|>, <|eot_id|>, as the page says


def _check_the_resume(
    done: dict[str, Any], steps: int, whole_options: list[str], capsys: Any
) -> None:
    """The printed command resumes; its end equals an uninterrupted run's, bit for bit."""
    interrupted, resumed = done["interrupted"], done["resumed"]
    assert "run the same command again to resume" in interrupted.err
    assert resumed.argv == interrupted.argv
    assert f"resumed from runs/lora_chat/checkpoint_{STOP_AT}.mdl at step {STOP_AT}" in resumed.err
    adapter_only = Path(f"runs/lora_chat/checkpoint_{steps}.mdl")
    saved = torch.load(adapter_only, weights_only=True)["model"]
    assert not any(n.endswith(".weight") for n in saved)  # adapters only
    straight = _plugtrain([*interrupted.argv, *whole_options], capsys)
    assert straight.status == 0, straight.err[-3000:]
    whole = Path(f"runs/whole/checkpoint_{steps}.mdl")
    expected, got = _lora_tensors(whole), _lora_tensors(adapter_only)
    assert expected
    assert expected.keys() == got.keys()
    for name, tensor in expected.items():
        assert torch.equal(got[name], tensor), name
    theirs, ours = _optimizer_tensors(whole), _optimizer_tensors(adapter_only)
    for their_tensor, our_tensor in zip(theirs, ours, strict=True):
        assert torch.equal(our_tensor, their_tensor)


def _check_generation(done: dict[str, Any], whole_options: list[str], capsys: Any) -> None:
    """Each chat ``generate`` of the page, from its adapter-only checkpoint and from the whole
    one of the uninterrupted run: transformers + PEFT's greedy ids."""
    generated = [r for r in done["ran"] if r.argv[0] == "generate"]
    assert generated
    eot = done["namespace"]["tokenizer"].convert_tokens_to_ids("<|eot_id|>")
    ended = 0
    for generate in generated:
        argv = generate.argv
        max_tokens = int(argv[argv.index("--max-tokens") + 1])
        reference = _peft_ids(done["namespace"], _chats(argv), max_tokens)
        assert _generated(generate) == reference, argv
        from_whole = _plugtrain([*argv[:2], *whole_options, *argv[2:]], capsys)
        assert from_whole.status == 0, from_whole.err[-3000:]
        assert _generated(from_whole) == reference, argv
        ended += sum(ids[-1] == eot and len(ids) < max_tokens for ids in reference)
    assert ended  # a turn stopped at <|eot_id|>, an id of the base's eos_token_id list


def _check_lm_eval(done: dict[str, Any], steps: int) -> None:
    """``plugtrain lm_eval``'s results: lm-eval's ``hf`` model with the PEFT adapter's."""
    from plugtrain_models.evaluation.harness import flat_metrics

    argv = next(r for r in done["ran"] if r.argv[0] == "lm_eval").argv
    output = Path(argv[argv.index("--output_path") + 1])
    ours = flat_metrics(json.loads((output / f"results_{steps}.json").read_text())["results"])
    adapter = Path(f"runs/lora_chat/checkpoint_{steps}_to_hf-peft")
    theirs = _lm_eval_reference(adapter, argv[argv.index("--tasks") + 1])
    assert set(ours) == set(theirs)
    for name, value in theirs.items():
        if name.endswith(("/acc", "/acc_norm")):
            assert ours[name] == value, name
        elif name.endswith(("perplexity", "bits_per_byte")):
            assert ours[name] == pytest.approx(value, rel=1e-5), name
    assert any(name.endswith("/acc") for name in ours)
    assert any(name.endswith("perplexity") for name in ours)


def _check_exports(done: dict[str, Any], steps: int) -> None:
    """The base's tokenizer and generation config; PEFT finds the base; the fold is PEFT's."""
    import peft
    import transformers

    merged_folder = Path(f"runs/lora_chat/checkpoint_{steps}_to_hf")
    template = "chat_template.jinja"
    assert (merged_folder / template).read_text() == (Path("llama3_hf") / template).read_text()
    for name in ("tokenizer.json", "tokenizer_config.json", "generation_config.json"):
        written = json.loads((merged_folder / name).read_text())
        base = json.loads((Path("llama3_hf") / name).read_text())
        written.pop("transformers_version", None)
        base.pop("transformers_version", None)
        assert written == base, name
    eos = transformers.GenerationConfig.from_pretrained(merged_folder).eos_token_id
    assert eos == transformers.GenerationConfig.from_pretrained("llama3_hf").eos_token_id
    assert isinstance(eos, list)
    assert len(eos) == 2
    adapter = Path(f"runs/lora_chat/checkpoint_{steps}_to_hf-peft")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        recorded = peft.AutoPeftModelForCausalLM.from_pretrained(adapter, dtype=torch.float32)
    adapted, merged = done["namespace"]["adapted"], done["namespace"]["merged"]
    recorded_state = recorded.state_dict()
    for name, tensor in adapted.state_dict().items():
        assert torch.equal(recorded_state[name], tensor), name
    assert merged.dtype == torch.bfloat16
    reference = adapted.merge_and_unload().state_dict()
    for name, tensor in merged.state_dict().items():
        expected = reference[name].to(torch.bfloat16)
        torch.testing.assert_close(tensor, expected, rtol=2**-8, atol=0, msg=name)


@pytest.mark.slow  # trains three times, generates, evaluates and exports, in this process
def test_the_fine_tuning_day_runs_as_the_docs_walk_it_and_equals_the_reference_tools(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    stop_signals_default: None,
) -> None:
    for needed in ("transformers", "peft", "lm_eval", "tokenizers", "safetensors"):
        pytest.importorskip(needed)
    monkeypatch.chdir(tmp_path)
    done = walk_the_day(monkeypatch, capsys)
    run_file = Path("lora_chat.yaml")
    steps = yaml.safe_load(run_file.read_text())["trainer"]["init"]["loop"]["max_steps"]
    whole_options = _whole_run_options(run_file)
    _check_the_base()
    _check_the_resume(done, steps, whole_options, capsys)
    _check_generation(done, whole_options, capsys)
    _check_lm_eval(done, steps)
    _check_exports(done, steps)  # last: PEFT's merge_and_unload changes the page's model


def _started_from(tmp_path: Path, base: Path | None) -> Path:
    """A plugtrain checkpoint file whose run started from ``base`` (``None``: records none)."""
    run = tmp_path / "run"
    run.mkdir(exist_ok=True)
    checkpoint = run / "checkpoint_8.mdl"
    metadata = {} if base is None else {"started_from": str(base)}
    torch.save({"model": {"w": torch.zeros(1)}, "metadata": metadata}, checkpoint)
    return checkpoint


def _base_folder(tmp_path: Path) -> Path:
    base = tmp_path / "llama3_hf"
    base.mkdir()
    (base / "config.json").write_text(json.dumps({"eos_token_id": 1}))
    (base / "generation_config.json").write_text(json.dumps({"eos_token_id": [1, 4]}))
    return base


def test_a_plugtrain_checkpoint_stops_at_the_eos_ids_of_the_folder_its_run_started_from(
    tmp_path: Path,
) -> None:
    base = _base_folder(tmp_path)
    checkpoint = _started_from(tmp_path, base)
    assert checkpoint_eos_ids(str(checkpoint)) == [1, 4]
    _started_from(tmp_path, None)
    assert checkpoint_eos_ids(str(checkpoint)) == []  # no starting folder: its own folder's
    (checkpoint.parent / "generation_config.json").write_text(json.dumps({"eos_token_id": 7}))
    assert checkpoint_eos_ids(str(checkpoint)) == [7]


def test_a_plugtrain_checkpoint_takes_the_tokenizer_of_the_folder_its_run_started_from(
    tmp_path: Path,
) -> None:
    base = _base_folder(tmp_path)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(TINY_TOKENIZER / name, base / name)
    checkpoint = _started_from(tmp_path, base)
    no_data = SimpleNamespace(fit=None, validate=None, validate_all=None)
    loaded: Any = SimpleNamespace(source=str(checkpoint), plan=no_data, model=None)
    tokenizer = resolve_tokenizer(None, loaded)
    tokenizers = pytest.importorskip("tokenizers")
    own = tokenizers.Tokenizer.from_file(str(base / "tokenizer.json"))
    text = "The cat sat on the mat."
    expected = own.encode(text, add_special_tokens=False).ids
    assert expected != list(text.encode())  # not the byte tokenizer's
    assert tokenizer.encode(text, add_special_tokens=False) == expected
