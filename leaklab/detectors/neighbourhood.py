"""A neighbourhood attack (Mattern et al., 2023) with SrDetection's verified variants as the neighbours:
a trained-on sample sits in a dip of the loss its neighbours do not share. With v_1..v_m the sample's
first m = min(n, verified) variants:

    neighbourhood  =  (1/m) * sum_i NLL(v_i)  -  NLL(x)        HIGHER MEANS MORE LIKELY A MEMBER

NaN without a verified variant or a scored token. The NLLs are `srdetection.gray_scores`' (a cache hit
next to `srdetection_gray`). A score thresholded by cross-validation, so a bias shared by every task's
variants shifts all scores alike and is not read as a leak.
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
