"""The language-model head and its loss in one pass over blocks of rows, gradients included.

A training step needs the head's logits only for the loss and its metrics. Then
:func:`head_loss` computes, a block of rows at a time, the block's logits (``h W^T + b``, the
logits' scale and soft cap), their cross-entropy (and, when asked, each row's prediction), and
at once the gradient of the loss with respect to them (``softmax - one_hot``, times each row's
weight in the loss), which it multiplies into the gradients of the hidden states, the head's
weight and its bias. The whole
``[tokens, vocab]`` logits are never held: in float32 that tensor is the step's largest, a
fresh mapping of pages the kernel zero-fills every step, and reading it again in the backward
is a pass of its own. The backward only scales the stored gradients by the loss's upstream
gradient (none when that is 1, the usual case).

The loss and its per-token values are those of :func:`plugtrain_models.loss.lm_loss` over the
logits the unfused head gives (the same kernels on the same rows); the gradients are theirs
up to float32 round-off (the softmax is the exponential of the log-softmax, and the weight's
gradient is summed a block at a time). Float32 only
(:func:`fusable`): under autocast the head's matmuls are bfloat16 and fast, its logits half as
large, and the unfused path measured as fast or faster.
"""

from __future__ import annotations

import threading
from typing import Any

import torch

__all__ = ["fusable", "head_loss"]

_BLOCK_ELEMENTS = 1 << 21
"""Logits per block (8 MiB in float32): the weight's gradient, summed block by block, then
takes few passes over its own ``[vocab, hidden]`` memory (256 rows a block at a vocabulary of
8192 measured faster than 128 or 512)."""

_LOG_SOFTMAX = torch.ops.aten._log_softmax.out


def _row_weights(mask: torch.Tensor, batch: int, scaling: str, weight: float) -> torch.Tensor:
    """Each token's weight in the loss: ``d loss / d ce`` (float32, flat)."""
    m = mask.reshape(-1).to(torch.float32)
    if scaling == "batch_size":
        return m * (weight / batch)
    return m / m.sum().clamp_min(1.0)


def _reduce(ce: torch.Tensor, mask: torch.Tensor, batch: int, scaling: str, weight: float) -> Any:
    """:func:`~plugtrain_models.loss.lm_loss`'s reduction of the per-token losses ``ce``."""
    m = mask.reshape(-1).to(ce.dtype)
    total = (ce * m).sum()
    if scaling == "batch_size":
        return total / batch * weight
    return total / m.sum().clamp_min(1.0)


_SCRATCH = threading.local()
"""Per thread, the CPU blocks of the last call: a block is 8 MiB, which the C allocator maps
afresh (and the kernel zero-fills, page by page) on every call once it has trimmed its heap."""


def _scratch(
    h: torch.Tensor, rows: int, vocab: int, capped: bool
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """``[rows, vocab]`` blocks for the logits, the log-softmax and (``capped``) the tanh.

    On the CPU they are the previous call's memory when it fits (nothing returned aliases
    it); elsewhere new tensors (the device allocator caches them).
    """
    count = 3 if capped else 2
    if h.device.type != "cpu":
        blocks = h.new_empty((count, rows, vocab)).unbind(0)
    else:
        held = getattr(_SCRATCH, "blocks", None)
        fits = held is not None and held.dtype == h.dtype and held.shape[0] >= count
        if not (fits and held.shape[1] >= rows and held.shape[2] == vocab):
            held = h.new_empty((count, rows, vocab))
            _SCRATCH.blocks = held
        blocks = tuple(block[:rows] for block in held[:count].unbind(0))
    return blocks[0], blocks[1], blocks[2] if capped else None


class _HeadLoss(torch.autograd.Function):
    """The fused head and loss (see the module), in float32; once differentiable."""

    @staticmethod
    def forward(
        ctx: Any,
        hidden: torch.Tensor,
        weight: torch.Tensor,
        bias: torch.Tensor | None,
        labels: torch.Tensor,
        mask: torch.Tensor,
        options: tuple[str, float, float | None, float | None, bool],
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The loss, the per-token losses and the predictions (when asked).

        The inputs' gradients for an upstream gradient of 1 are kept for backward.
        """
        scaling, loss_weight, logits_scale, cap, metrics = options
        batch = labels.shape[0]
        h = hidden.reshape(-1, hidden.shape[-1])
        flat_labels = labels.reshape(-1, 1)
        row_weights = _row_weights(mask, batch, scaling, loss_weight).unsqueeze(-1)
        rows = min(len(h), max(1, _BLOCK_ELEMENTS // weight.shape[0]))
        logits, work, tanh = _scratch(h, rows, weight.shape[0], cap is not None)
        grads = _Gradients(h, ctx.needs_input_grad[:3])
        if logits_scale is not None:  # the scale's own step of the backward, folded in as well
            row_weights = row_weights * logits_scale
        minus_one = h.new_full((), -1.0).expand(rows, 1)
        picked, predicted = [], []
        for start in range(0, len(h), rows):
            h_rows, targets = h[start : start + rows], flat_labels[start : start + rows]
            block = logits[: len(h_rows)]
            torch.mm(h_rows, weight.t(), out=block) if bias is None else torch.addmm(
                bias, h_rows, weight.t(), out=block
            )
            if logits_scale is not None:
                block.mul_(logits_scale)
            if tanh is not None and cap is not None:  # Gemma 2's final cap: soft_cap's roundings
                squashed = torch.div(block, cap, out=tanh[: len(h_rows)]).tanh_()
                torch.mul(squashed, cap, out=block)
            if metrics:  # the first largest logit, as masked_accuracy's max
                predicted.append(block.max(-1).indices)
            log_softmax = _LOG_SOFTMAX(block, -1, False, out=work[: len(h_rows)])
            picked.append(log_softmax.gather(-1, targets))
            if not grads.wanted:
                continue
            # the unfused backward's steps: the cross-entropy's (the softmax as exp(log-softmax),
            # one pass over the block instead of the kernel's three), the cap's; each row's
            # weight in the loss (and the logits' scale) multiplies the block's small products
            gradient = log_softmax.exp_().scatter_add_(-1, targets, minus_one[: len(h_rows)])
            if tanh is not None:
                gradient.mul_(tanh[: len(h_rows)].square_().neg_().add_(1.0))
            grads.add(start, gradient, h_rows, weight, row_weights[start : start + rows])
        ce = torch.cat(picked).squeeze(-1).neg_()
        ctx.grads = grads.result(hidden.shape)
        loss: torch.Tensor = _reduce(ce, mask, batch, scaling, loss_weight)
        guesses = torch.cat(predicted) if predicted else labels.new_empty(0)
        ctx.mark_non_differentiable(ce, guesses)
        return loss, ce, guesses.view_as(labels) if predicted else guesses

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor, *_: Any) -> tuple[torch.Tensor | None, ...]:
        """The kept gradients, times ``grad`` unless it is 1; given once.

        Only the returned tensors hold them then, so autograd may add a tied embedding's
        gradient into the weight's in place.
        """
        kept = getattr(ctx, "grads", None)
        if kept is None:
            message = "the fused head and loss computes its gradients once; its backward ran"
            raise RuntimeError(message)
        del ctx.grads
        unit = bool(grad == 1)
        grads = tuple(None if g is None else (g if unit else g * grad) for g in kept)
        del kept
        return (*grads, None, None, None)


class _Gradients:
    """The hidden states', weight's and bias's gradients, summed a block of rows at a time."""

    def __init__(self, h: torch.Tensor, wanted: tuple[bool, ...]) -> None:
        self.wanted = any(wanted)
        self.hidden = torch.empty_like(h) if wanted[0] else None
        self.weight_wanted, self.bias_wanted = wanted[1], wanted[2]
        self.weight: torch.Tensor | None = None
        self.bias: torch.Tensor | None = None

    def add(
        self,
        start: int,
        gradient: torch.Tensor,
        h_rows: torch.Tensor,
        weight: torch.Tensor,
        row_weights: torch.Tensor,
    ) -> None:
        """Take the rows from ``start`` on: the logits' gradient is ``row_weights * gradient``.

        The rows' weights scale the small factors (the rows' hidden states, the hidden
        gradient's rows) instead of the ``[rows, vocab]`` gradient: one pass over it fewer.
        """
        if self.hidden is not None:
            rows = self.hidden[start : start + len(gradient)]
            torch.mm(gradient, weight, out=rows).mul_(row_weights)
        if self.weight_wanted:
            weighted = h_rows * row_weights
            if self.weight is None:
                self.weight = torch.mm(gradient.t(), weighted)
            else:
                self.weight.addmm_(gradient.t(), weighted)
        if self.bias_wanted:
            summed = torch.mm(row_weights.t(), gradient).squeeze(0)
            self.bias = summed if self.bias is None else self.bias.add_(summed)

    def result(self, shape: torch.Size) -> tuple[torch.Tensor | None, ...]:
        """``(hidden [shape], weight, bias)``; ``None`` for those not wanted."""
        hidden = None if self.hidden is None else self.hidden.view(shape)
        return hidden, self.weight, self.bias


def head_loss(
    hidden: torch.Tensor,
    head: torch.nn.Linear,
    labels: torch.Tensor,
    mask: torch.Tensor,
    *,
    scaling: str,
    weight: float,
    logits_scale: float | None = None,
    cap: float | None = None,
    metrics: bool = False,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """``lm_loss(soft_cap(head(hidden) * logits_scale, cap), labels, mask)`` without its logits.

    Returns the loss, each token's cross-entropy (float32, flat) and, with ``metrics``, each
    token's prediction ``[B, S]`` (the index of its first largest logit), else ``None``.

    :param hidden: ``[B, S, H]``, the final norm's output.
    :param head: the vocabulary projection (its weight may be tied to the embeddings).
    :param labels: ``[B, S]``, every id within the vocabulary.
    :param mask: ``[B, S]``, the loss mask.
    :param scaling: ``num_tokens`` or ``batch_size``, with ``weight`` (see ``lm_loss``).
    :param logits_scale: multiplies the logits (muP's output scale); ``None``: 1.
    :param cap: Gemma 2's final soft cap; ``None``: none.
    """
    options = (scaling, weight, logits_scale, cap, metrics)
    loss, ce, predicted = _HeadLoss.apply(
        hidden, head.weight, head.bias, labels.long(), mask, options
    )
    return loss, ce, predicted if metrics else None


def fusable(hidden: torch.Tensor, head: torch.nn.Linear) -> bool:
    """Whether :func:`head_loss` computes this head: float32 throughout, autocast off."""
    device = hidden.device.type
    return (
        not torch.is_autocast_enabled(device)
        and hidden.dtype == head.weight.dtype == torch.float32
        and (head.bias is None or head.bias.dtype == torch.float32)
    )
