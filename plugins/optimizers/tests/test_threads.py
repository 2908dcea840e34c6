"""A step on one intra-op thread (blocked) gives the numbers of a step on all of them."""

from __future__ import annotations

import pytest
import torch

from plugtrain_optimizers import _threads


@pytest.fixture
def two_threads():
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


def test_stepping_threads_restores_the_thread_count(two_threads, monkeypatch):
    monkeypatch.setitem(_threads._verdicts, 2, True)
    inside = []

    def fail() -> None:
        with _threads.stepping_threads():
            inside.append(torch.get_num_threads())
            raise RuntimeError

    with pytest.raises(RuntimeError):
        fail()
    assert inside == [1]
    assert torch.get_num_threads() == 2
    monkeypatch.setitem(_threads._verdicts, 2, False)
    with _threads.stepping_threads():
        assert torch.get_num_threads() == 2


def test_the_probe_is_taken_once_per_thread_count(two_threads, monkeypatch):
    monkeypatch.setattr(_threads, "_verdicts", {})
    monkeypatch.setattr(_threads, "PROBE_ELEMENTS", 1 << 12)
    verdict = _threads.one_thread_suffices()
    assert _threads._verdicts == {2: verdict}
    assert torch.get_num_threads() == 2
    assert _threads.one_thread_suffices(1)


@pytest.mark.parametrize("name", ["Lamb", "Lion", "Rprop", "Adadelta", "Adafactor", "NAdam"])
def test_one_thread_and_all_threads_give_the_same_numbers(train, two_threads, monkeypatch, name):
    kwargs = {"lr": 0.05} if name == "Adafactor" else {}
    monkeypatch.setitem(_threads._verdicts, 2, True)
    one, _ = train(name, kwargs)
    monkeypatch.setitem(_threads._verdicts, 2, False)
    both, _ = train(name, kwargs)
    for key in one:
        # float64: only the order of the norms' sums may differ.
        torch.testing.assert_close(one[key], both[key], rtol=1e-12, atol=1e-14, msg=key)
