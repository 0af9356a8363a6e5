"""A neighbourhood attack (Mattern et al., 2023) with leaklab's own variants as the neighbours.

Mattern et al. compare a sample's loss with the losses of neighbours (slightly changed copies that
mean the same): a trained-on sample sits in a dip of the loss that its neighbours do not share.
leaklab already builds such neighbours for SrDetection: semantics-preserving variants (renamed
identifiers, replaced examples), verified by the benchmark's tests in the sandbox
(`leaklab.perturb.variants`, cached per benchmark). With NLL the mean negative log-likelihood of the
scored tokens and v_1..v_m the sample's first m = min(n, verified) variants:

    neighbourhood  =  (1/m) * sum_i NLL(v_i)  -  NLL(x)        HIGHER MEANS MORE LIKELY A MEMBER

(Mattern's L(x) - mean L(neighbour), negated to leaklab's sign.) NaN when the sample has no verified
variant or no scored token. The losses come from `srdetection.gray_scores`: one signal-engine call over
originals and variants with the same cache, so next to `srdetection_gray` it costs nothing.

Unlike SrDetection's rule this is a score, thresholded by cross-validation: variants that are less
likely than their originals by the same amount for every task (the bias the untrained model shows) shift all
scores alike and are not read as leaks; a bias that differs from task to task is noise in the score.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from leaklab.detectors.inputs import ModelInputs
from leaklab.detectors.likelihood import neighbour_gap
from leaklab.detectors.srdetection import VARIANTS, first_n_scores


@dataclass
class Neighbourhood:
    name: ClassVar[str] = "neighbourhood"
    needs: ClassVar[frozenset[str]] = frozenset({VARIANTS})
    n: int = 10  # neighbours compared (at most evaluate.srdetection.n_variants)

    def __post_init__(self) -> None:
        if self.n < 1:
            raise ValueError(f"neighbourhood: n must be positive, got {self.n}")

    def columns(self) -> dict[str, dict]:
        return {"neighbourhood": {"n": self.n}}

    def check(self, settings) -> list[str]:
        built = settings.srdetection.n_variants
        if self.n > built:
            return [
                f"'neighbourhood' averages n={self.n} variants but evaluate.srdetection.n_variants is {built}"
            ]
        return []

    def run(self, inputs: ModelInputs) -> dict[str, np.ndarray]:
        original, variants = inputs.variant_nlls("neighbourhood")
        scores = neighbour_gap(original, first_n_scores(variants, self.n))
        inputs.info[self.name] = {"undefined": int(np.isnan(scores).sum())}
        return {"neighbourhood": scores}
