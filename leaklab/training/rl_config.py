"""The `train.rl` section of a recipe (stage `rl`); imports nothing heavy, so the recipe can read it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

ALGORITHMS = ("grpo", "rloo", "ppo")  # grpo / rloo: TRL in process; ppo: veRL (training/verl.py)
REWARD_MODES = ("binary", "fraction")
PROMPT_FORMATS = ("auto", "completion", "chat")  # as data/prompting.py (the sft stage)
SWITCHES = ("auto", "true", "false")


@dataclass
class VerlConfig:
    """PPO on veRL: what leaklab writes into veRL's config; anything else keeps veRL's default."""

    launch: str = "auto"  # auto: run veRL when it is importable, else print the command; print: only print
    n_gpus_per_node: int = 1  # trainer.n_gpus_per_node
    nnodes: int = 1  # trainer.nnodes
    rollout: str = "vllm"  # actor_rollout_ref.rollout.name
    rollout_n: int = 1  # samples per prompt (PPO: 1; >1 only with a group estimator)
    gpu_memory_utilization: float = 0.5  # share of GPU memory vLLM may take for rollouts
    actor_learning_rate: float = 1e-6  # actor_rollout_ref.actor.optim.lr
    critic_learning_rate: float = 1e-5  # critic.optim.lr
    ppo_mini_batch_size: int = 16  # prompts per PPO update (actor and critic)
    ppo_micro_batch_size_per_gpu: int = 2  # sequences per forward pass on one GPU
    kl_coef: float = 0.001  # algorithm.kl_ctrl.kl_coef
    max_prompt_length: int = 1024  # data.max_prompt_length: longer prompts are filtered out
    extra: list[str] = field(default_factory=list)  # more veRL key=value overrides, passed through


@dataclass
class RLConfig:
    """`train.rl`: the reward (all tests pass in the sandbox) and the policy-gradient algorithm."""

    choices: ClassVar[dict[str, tuple[str, ...]]] = {
        "algorithm": ALGORITHMS,
        "reward": REWARD_MODES,
        "prompt_format": PROMPT_FORMATS,
        "use_vllm": SWITCHES,
        "verl.launch": ("auto", "print"),
    }

    algorithm: str = "grpo"  # grpo | rloo (TRL, in process) | ppo (veRL)
    # Start from this model instead of model.name_or_path: a checkpoint or model directory, a run
    # directory (its last checkpoint), or recipe:NAME (the last checkpoint of that recipe's run).
    init_from: str | None = None
    reward: str = "binary"  # binary: 1 when all tests pass; fraction: share of test cases passed
    # Train on the first this many members (manifest order, as accuracy evaluates them; None: all). Each
    # of N prompts is then drawn about steps x prompts-per-step / N times, so the policy can improve on
    # the prompts it is rewarded on.
    max_prompts: int | None = None
    num_generations: int = 8  # completions per prompt (the group GRPO / RLOO compare)
    max_completion_length: int = 128  # tokens generated per completion at most
    temperature: float = 1.0  # sampling temperature of the completions
    top_p: float = 1.0  # nucleus sampling of the completions (1: off)
    beta: float = 0.0  # KL penalty against the starting model (0: no reference model is kept)
    prompt_format: str = "auto"  # auto: chat when the tokenizer has a chat template, else completion
    use_vllm: str = "auto"  # auto: vLLM generation when installed and a GPU is present
    sandbox_workers: int = 0  # 0: twice the cores
    sandbox_timeout_s: float = 3.0  # per completion
    log_completions: bool = False  # print sampled completions with their rewards (TRL)
    verl: VerlConfig = field(default_factory=VerlConfig)  # settings of algorithm=ppo on veRL

    def check(self, train) -> list[str]:
        """Checked only when the recipe trains the rl stage (other stages ignore this section)."""
        if train is None or train.stage != "rl":
            return []
        problems = []
        if self.num_generations < 2 and self.algorithm in ("grpo", "rloo"):
            problems.append("train.rl.num_generations: GRPO and RLOO compare a group, need at least 2")
        if self.algorithm in ("grpo", "rloo") and train.batch_size % self.num_generations:
            problems.append(
                f"train.batch_size: {train.batch_size} completions per step is not a multiple of "
                f"train.rl.num_generations {self.num_generations}"
            )
        if self.max_prompts is not None and self.max_prompts < 1:
            problems.append("train.rl.max_prompts: at least 1 (or null for every member)")
        if self.max_completion_length < 1 or self.sandbox_timeout_s <= 0 or self.sandbox_workers < 0:
            problems.append("train.rl: max_completion_length and sandbox_timeout_s must be positive")
        if not 0 < self.top_p <= 1 or self.temperature <= 0:
            problems.append("train.rl: need 0 < top_p <= 1 and temperature > 0")
        return problems
