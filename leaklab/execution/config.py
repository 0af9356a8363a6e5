"""The recipe's `execution:` section, and `require_layers`: whatever a program can fake or read in a
reward, training finds, so an RL reward refuses a sandbox without every layer. See docs/sandbox.md#layers.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)


@dataclass
class ExecutionConfig:
    """`execution:` in a recipe."""

    # Compute rewards even where the sandbox lacks a layer that REWARD_LAYERS names (said in the log).
    allow_weaker_sandbox: bool = False


# (key of Sandbox.isolation, the value it must have, what is missing without it)
REWARD_LAYERS: tuple[tuple[str, str, str], ...] = (
    ("uid", "separate", "a uid of its own per run (needs root)"),
    ("network", "namespace", "no network (a network namespace)"),
    ("mounts", "minimal-root", "a minimal read-only filesystem view without checkout or answer keys (root)"),
    ("proc", "own-processes-only", "a /proc that shows a run only its own processes (root)"),
    ("pid", "namespace", "a PID namespace without the host's processes (root)"),
    ("scratch", "per-run", "a fresh /tmp and IPC state per run (root)"),
    ("seccomp", "filter", "a seccomp filter (pyseccomp and the system's libseccomp)"),
)


class WeakerSandboxError(RuntimeError):
    """The sandbox lacks layers a reward needs, and the recipe does not allow that."""


def require_layers(isolation: Mapping[str, Any], allow_weaker: bool = False) -> list[str]:
    """The layers of REWARD_LAYERS missing from `isolation` (`Sandbox.isolation`); WeakerSandboxError
    when there are any, unless `allow_weaker` (then they are logged)."""
    missing = [why for key, wanted, why in REWARD_LAYERS if isolation.get(key) != wanted]
    if missing and not allow_weaker:
        raise WeakerSandboxError(
            "the sandbox lacks what an RL reward needs: "
            + "; ".join(missing)
            + ". Run as root on Linux with libseccomp installed, or set"
            " execution.allow_weaker_sandbox=true to accept a reward a policy may learn to fake."
        )
    if missing:
        log.warning("computing rewards on a weaker sandbox, without: %s", "; ".join(missing))
    return missing
