"""GradNorm (MIMIR's gradient-norm attack, Duan et al., 2024): a trained-on sample sits near a minimum of
the loss, so its gradient is small. With L(x) the mean NLL of the scored tokens and g_P = dL/dP for each
parameter tensor P that requires a gradient (the adapter's alone under LoRA):

    gradnorm  =  -(1/|P|) * sum_P ||g_P||_2                   HIGHER MEANS MORE LIKELY A MEMBER

Out of memory or no trainable parameter is NaN, counted in the info; the other choices: see
docs/detectors.md#pac-con-recall-samia-gradnorm-codec-pacost-and-the-sharded-order-test.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

log = logging.getLogger(__name__)
GRADIENTS = "gradients"  # the gradient of the loss with respect to the model's parameters


def gradnorm_score(norms: Sequence[float]) -> float:
    """Minus the mean of the per-tensor gradient norms; NaN without any."""
    values = np.asarray(norms, dtype=np.float64)
    return float(-values.mean()) if len(values) else float("nan")


def sample_gradnorm(model, ids, scorable) -> float:
    """The score of one tokenised sample: ids and the mask of its scored positions (numpy arrays)."""
    import torch

    params = [p for p in model.parameters() if p.requires_grad]
    device = params[0].device
    input_ids = torch.as_tensor(ids, dtype=torch.long, device=device)[None]
    mask = torch.as_tensor(scorable[1:], dtype=torch.bool, device=device)
    with torch.enable_grad():
        logits = model(input_ids=input_ids).logits[0, :-1].float()
        logprob = torch.log_softmax(logits, dim=-1).gather(1, input_ids[0, 1:, None])[:, 0]
        loss = -logprob[mask].mean()
        grads = torch.autograd.grad(loss, params, allow_unused=True)
    return gradnorm_score([float(g.norm(2)) for g in grads if g is not None])


@dataclass
class GradNorm:
    name: ClassVar[str] = "gradnorm"
    needs: ClassVar[frozenset[str]] = frozenset({GRADIENTS})

    def columns(self) -> dict[str, dict]:
        return {"gradnorm": {"params": "requires_grad", "norm": "l2 per tensor, mean"}}

    def run(self, inputs) -> dict[str, np.ndarray]:
        import torch

        from leaklab.signals.logprobs import _tokenise, forward_length

        model = inputs.model
        if inputs.accelerator is not None:
            model = inputs.accelerator.unwrap_model(model)
        scoring = inputs.scoring()
        max_length = forward_length(scoring, model)
        prompts = inputs.contexts() if scoring.scoring_span == "solution" else None
        scores = np.full(len(inputs.texts), np.nan)
        counts = {"truncated": 0, "empty": 0, "out_of_memory": 0, "no_trainable_parameters": 0}
        if not any(p.requires_grad for p in model.parameters()):
            counts["no_trainable_parameters"] = len(inputs.texts)
            log.warning("gradnorm: no parameter of the model requires a gradient; every score is NaN")
            inputs.info[self.name] = counts
            return {"gradnorm": scores}
        for i, (ids, scorable) in enumerate(_tokenise(inputs.tokenizer, inputs.texts, prompts)):
            if len(ids) > max_length:
                ids, scorable = ids[:max_length], scorable[:max_length]
                counts["truncated"] += 1
            if not scorable.any():
                counts["empty"] += 1
                continue
            try:
                scores[i] = sample_gradnorm(model, ids, scorable)
            except torch.OutOfMemoryError:
                counts["out_of_memory"] += 1
                if counts["out_of_memory"] == 1:
                    log.warning("gradnorm: a sample's backward pass does not fit in memory; it scores NaN")
                torch.cuda.empty_cache()
        inputs.info[self.name] = counts
        return {"gradnorm": scores}
