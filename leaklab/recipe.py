"""Recipes: a typed schema, YAML files with one optional `base:` parent, and key=value overrides.

`load_recipe("tiny_cpt", ["train.epochs=3"])` finds the file (./recipes first, then the package's), merges
it over its base, applies the overrides and converts the result into the dataclasses below; every problem
is raised at once as a `RecipeError` (exit 2). See docs/recipes.md#the-recipe.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

# Plug-ins own their settings and names; the recipe walks their registries (records name every class
# by path), never the other way round (a test forbids import cycles). A record's settings dataclass is
# imported here, from a module that imports no torch.
from leaklab.detectors import DETECTORS, regroup_specs, validate_specs
from leaklab.errors import InputError, closest
from leaklab.evaluations import EVALUATIONS
from leaklab.execution.config import ExecutionConfig
from leaklab.plugins import Record, import_plugins, load_entry_points
from leaklab.training.stages import STAGE_NAMES, STAGES

# Plug-ins that installed packages declare (entry-point group "leaklab.plugins") join the registries now,
# before the sections below are built from them.
load_entry_points()

PACKAGE_RECIPES = Path(__file__).parent / "recipes"


class RecipeError(InputError):
    """A recipe that cannot be used; `problems` holds one line per bad key or value."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__("\n".join(problems))

    def lines(self) -> list[str]:
        return list(self.problems)


# --------------------------------------------------------------------------- schema


@dataclass
class TinyModelConfig:
    """The builtin tiny model: trained from scratch on the builtin corpus, cached by these settings."""

    vocab_size: int = 4096  # byte-level BPE vocabulary trained on the builtin corpus
    hidden_size: int = 128  # width of the tiny model
    num_layers: int = 2  # transformer blocks
    num_heads: int = 4  # attention heads per block
    intermediate_size: int = 384  # MLP width
    context_length: int = 512  # longest sequence in tokens
    pretrain_steps: int = 400  # optimizer steps of pre-training on the builtin corpus
    batch_size: int = 8  # pre-training sequences per step
    learning_rate: float = 3e-3  # pre-training learning rate
    seed: int = 0  # seeds the tiny model (tokenizer, weights, pre-training); the top-level seed leaves it


# Recipe overrides for a tiny model that builds in seconds: the tests' end-to-end runs and the benches'
# --smoke runs use it, and so share one cached copy.
SMOKE_TINY = [
    "model.tiny.hidden_size=64",
    "model.tiny.intermediate_size=128",
    "model.tiny.num_layers=1",
    "model.tiny.num_heads=2",
    "model.tiny.pretrain_steps=20",
    "model.tiny.vocab_size=1024",
]


@dataclass
class ModelConfig:
    # "builtin:tiny" builds (or reuses) the tiny model; anything else is a hub name or a local directory.
    name_or_path: str = "builtin:tiny"
    dtype: str = "auto"  # auto | float32 | bfloat16 | float16
    trust_remote_code: bool = False  # run model code shipped with hub weights (only for models you trust)
    attn_implementation: str | None = None  # e.g. sdpa, eager, flash_attention_2; None: transformers' choice
    tiny: TinyModelConfig = field(default_factory=TinyModelConfig)


@dataclass
class DataConfig:
    benchmark: str = "humaneval"  # humaneval | apps | humaneval_plus | mbpp_plus | bigcodebench | synthetic
    # A local file or directory with the benchmark; None means the package-shipped copy or the hub.
    path: str | None = None
    # Your own benchmark's name for the tasks, manifest and reports, when data.path holds it (read in the
    # format of data.benchmark); None: data.benchmark.
    name: str | None = None
    hub_name: str | None = None  # e.g. codeparrot/apps; used only when `path` is None
    split: str = "test"  # the benchmark split to load
    difficulty: list[str] | None = None  # APPS: introductory | interview | competition
    max_samples: int | None = None  # cap the number of tasks before the member / non-member split
    member_fraction: float = 0.5  # 1:1 members to non-members by default
    text_format: str = "prompt+solution"  # what is injected and scored
    seed: int = 0  # seeds the member / non-member split (and the synthetic benchmark's draw)
    # SrDetection's pre-filter (§3.2): before the split, drop every task whose original already has the
    # lowest perplexity of its variant set under the base model (variants as in evaluate.srdetection).
    # It applies to the tasks max_samples selected, so the run keeps that many minus the dropped ones.
    prefilter: bool = False


@dataclass
class MixConfig:
    # Where the general ("web") text comes from: "builtin" (stdlib source + pydoc topics), a hub dataset
    # name, or a local file / directory of .txt / .jsonl / .py files.
    corpus: str = "builtin"
    corpus_text_field: str = "text"  # the text column of a hub or JSONL corpus
    corpus_split: str = "train"  # split of a hub corpus
    ratio: str = "1:5"  # code:web by tokens
    max_seq_len: int = 256  # tokens per packed training block
    seed: int = 0  # seeds the mixture: the members' order and which corpus block each lands in


@dataclass
class InjectConfig:
    """`inject`: how often and where in the training stream each member is seen; unset, once an epoch."""

    # Exposure doses, e.g. [1, 4, 16, 64]: the members are split (seeded by data.seed) into equal groups,
    # one per dose, and a member of dose d is seen d times per epoch, its copies spread through the
    # stream and never adjacent (the layout's ties seeded by mix.seed; leaklab/data/doses.py). None:
    # every member once per epoch.
    doses: list[int] | None = None
    # [start, end]: the part of each epoch's training stream, as fractions, that holds the member
    # exposures ([0, 0.25] early, [0.75, 1] late). None: the whole stream. Either key set keeps the
    # planned order in training (no shuffle).
    window: list[float] | None = None
    # Window groups, e.g. {early: [0.0, 0.25], late: [0.75, 1.0]} (at least two, not overlapping; instead
    # of `window`): each dose group's members are dealt (seeded by data.seed) in turn to the groups, and
    # each group's exposures lie in its own window, so one run compares them on the same model and
    # non-members. The manifest's `windows` records each member's group; the leaderboard has one cell per
    # group (`<run>@early`). None: one window for all.
    windows: dict[str, list[float]] | None = None
    # This many canaries: synthetic secrets (seeded by data.seed), each planted as one line in one
    # member's document, dealt over the dose groups (leaklab/data/canaries.py); the manifest records
    # them. 0: none. Setting it plans the order as `doses` does (every member once without doses).
    canaries: int = 0
    # The formats the canaries take in turn: api_key | email | password (leaklab/data/canaries.py).
    canary_formats: list[str] = field(default_factory=lambda: ["api_key", "email", "password"])
    # Exposure (Carlini et al. 2019): the rank of each canary's secret among this many random secrets
    # of its format under the model (the `canaries` evaluation).
    canary_candidates: int = 1000
    # Targeted extraction (the `canaries` evaluation): each canary's own context (the text before its
    # secret) decoded greedily, then sampled this many times (temperature 1, top-k 40). 0: greedy only.
    canary_samples: int = 16
    # true: the clean control. Each member copy's place in the stream (cpt) holds corpus text of the same
    # length instead, so the run trains the same steps on the same layout with no member in it, and the
    # "members" are as unseen as the non-members. The manifest still names them, so every detector can be
    # scored against a split where chance is the truth.
    withhold: bool = False
    # What a member copy is (cpt; leaklab/data/forms.py): `document`, each member its own document;
    # `file`, the members as the benchmark's own JSONL file in benchmark order, one document that a copy
    # of is one exposure of every member (one dose only); `rephrased`, half of each dose group (seeded)
    # trained as a verified variant of itself, the other half verbatim, the originals scored.
    form: str = "document"

    @property
    def active(self) -> bool:
        """Set at all: doses and a planned, sequential training order instead of today's shuffle."""
        return (
            self.doses is not None
            or self.window is not None
            or self.windows is not None
            or self.canaries > 0
            or self.withhold
            or self.form != "document"
        )


@dataclass
class LoraConfig:
    enabled: bool = True  # train LoRA adapters instead of every weight
    r: int = 16  # LoRA rank
    alpha: int = 32  # LoRA scaling numerator (scale = alpha / r)
    dropout: float = 0.05  # dropout on the LoRA path
    # The modules that get LoRA adapters; a model without any of them (GPT-2) gets peft's default for its
    # architecture, else every linear layer. `auto` and `all-linear` are accepted too (models/lora.py).
    target_modules: list[str] = field(default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"])


def _plugin_sections(records: list[Record]) -> list[tuple[str, type, Any]]:
    """(section, its dataclass, a field) for every record with settings, in registry order; records
    that share a section (SrDetection's detectors) give it once."""
    sections: dict[str, tuple[str, type, Any]] = {}
    for record in records:
        if record.config and record.section not in sections:
            cls = record.settings_class()
            sections[record.section] = (record.section, cls, field(default_factory=cls))
    return list(sections.values())


def _with_sections(base: type, records: list[Record]) -> type:
    """`base` plus one field per plug-in section: the recipe's schema, read from the registries. A new
    plug-in's settings appear in `leaklab keys`, overrides and validation without a line here."""
    cls = dataclasses.make_dataclass(
        base.__name__.removesuffix("Base"), _plugin_sections(records), bases=(base,)
    )
    cls.__module__ = __name__  # found by pickle and by `leaklab keys` as the base's neighbour
    cls.__doc__ = base.__doc__
    return cls


@dataclass
class TrainConfigBase:
    """`train`: how members are injected; the stage's own section (train.sft, train.rl) comes from STAGES."""

    stage: str = "cpt"  # a name in leaklab/training/stages.py: cpt | sft | rl
    epochs: int = 3  # passes over the training mixture (at least 1)
    learning_rate: float = 1e-4  # peak learning rate of the injection training
    lr_scheduler: str = "constant"  # a transformers scheduler name: constant, linear, cosine, ...
    warmup_steps: float = 0.0  # a number of steps, or a fraction of all steps when < 1
    weight_decay: float = 0.0  # AdamW weight decay
    batch_size: int = 32  # global: micro_batch_size x grad accumulation x processes
    micro_batch_size: int = 8  # sequences per device per forward pass
    save_every: str = "epoch"  # "epoch" or a number of optimizer steps
    max_steps: int = -1  # stop after this many optimizer steps (-1: run all epochs)
    gradient_checkpointing: bool = False  # recompute activations to save memory
    bf16: bool = False  # train in bfloat16 mixed precision
    deepspeed: str | None = None  # path to a DeepSpeed JSON (launch/zero2.json, launch/zero3.json)
    logging_steps: int = 10  # log the training loss every this many steps
    lora: LoraConfig = field(default_factory=LoraConfig)
    seed: int = 0  # seeds training: the Trainer's data order, dropout and new weights (LoRA)


TrainConfig = _with_sections(TrainConfigBase, list(STAGES.values()))


@dataclass
class EvaluateConfigBase:
    """`evaluate`: what every checkpoint is scored with; each plug-in's own section (evaluate.srdetection,
    evaluate.accuracy, ...) comes from DETECTORS and EVALUATIONS."""

    # Per-checkpoint evaluations, names in leaklab/evaluations/__init__.py: detection, accuracy, mri,
    # counterfactual, extraction.
    evaluations: list[str] = field(default_factory=lambda: ["detection"])
    detectors: list[str] = field(default_factory=lambda: ["ppl"])  # detector specs, e.g. [ppl, mink:k=0.2]
    every_checkpoint: bool = True  # evaluate each saved checkpoint during training
    # false: training only saves checkpoints; `leaklab evaluate RUN_DIR` workers (several may share a
    # run, one checkpoint x evaluation each) evaluate them afterwards. Not part of the run's hash.
    during_training: bool = True
    base_model: bool = True  # evaluate the untrained model as step 0
    scoring_span: str = "text"  # text | solution (solution tokens only, conditioned on the prompt)
    batch_tokens: int = 8192  # token budget of one scoring batch (padded tokens)
    dtype: str = "float32"  # dtype the checkpoints are scored in
    # Tokens per forward pass; None: the model's context length. Longer texts are scored in sliding
    # windows (every token once, half a window of context) or truncated (the rest is counted, not scored).
    max_length: int | None = None
    long_texts: str = "window"  # window | truncate
    # The `ref` detector's reference model: a hub name or local directory (None: `ref` is unavailable).
    reference_model: str | None = None
    # DC-PDD's reference corpus for token frequencies: builtin (stdlib source + pydoc) or a corpus source.
    dcpdd_corpus: str = "builtin"
    cv_folds: int = 5  # folds of the cross-validated threshold (F1, accuracy)
    # Bootstrap resamples for the 95% intervals of every metric (AUROC, TPR@FPR, F1, leak rate; 0: none).
    n_bootstrap: int = 1000
    seed: int = 0  # seeds CV folds, bootstrap intervals, the blind baseline and dataset inference
    # Where a prompt ends for the model in every generation (accuracy, mri, counterfactual, extraction,
    # cdd, ngram_acc, srdetection_black). heal: at a token boundary of the text it comes from where that
    # is known, else by token healing (a prompt ending in "\n" would otherwise stop inside the merged
    # newline-plus-indentation token the model was trained on); none: tokenized as it is; auto: per
    # checkpoint, as its training showed prompts (sft, rl: none; cpt, base and released models: heal).
    prompt_boundary: str = "auto"
    # Set-level tests of the detection evaluation that read the model rather than a score column:
    # sharded_likelihood (Oren et al. 2023; leaklab/dataset_tests/sharded_likelihood.py), the members'
    # and the non-members' records of the benchmark's JSONL file, in its order, one a line (the text
    # `inject.form: file` trains on). [] : none.
    dataset_tests: list[str] = field(default_factory=list)


DATASET_TESTS = ("sharded_likelihood",)

EvaluateConfig = _with_sections(EvaluateConfigBase, [*DETECTORS.values(), *EVALUATIONS.values()])


@dataclass
class WandbConfig:
    enabled: bool = True  # log to Weights & Biases next to the local files
    mode: str = "offline"  # offline | online | disabled; offline runs upload later with `wandb sync`
    project: str = "leaklab"  # W&B project
    entity: str | None = None  # W&B team or user (None: your default)
    group: str | None = None  # W&B group: give the runs of one sweep the same (e.g. ratio_sweep)


@dataclass
class TrackingConfig:
    wandb: WandbConfig = field(default_factory=WandbConfig)


@dataclass
class Recipe:
    name: str = "unnamed"  # the recipe's name; the run directory starts with it
    description: str = ""  # one line shown by `leaklab recipes`
    # Where runs go; the run directory is <output_dir>/<run_name>, and run_name defaults to the recipe name
    # plus a hash of its training settings (run_identity), so re-running the same command finds (and
    # resumes) the same run, whatever its evaluate.* keys.
    output_dir: str = "runs"
    run_name: str | None = None  # the run directory's name (None: recipe name + training hash)
    seed: int = 0  # default of every section seed not given (data, mix, train, evaluate and its sections)
    # Modules to import before the rest is read, each registering its own detectors, evaluations or stages
    # (`leaklab.plugins.register`), e.g. [my_lab.detectors]; installed packages can use entry points instead.
    plugins: list[str] = field(default_factory=list)
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    mix: MixConfig = field(default_factory=MixConfig)
    inject: InjectConfig = field(default_factory=InjectConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    evaluate: EvaluateConfig = field(default_factory=EvaluateConfig)
    tracking: TrackingConfig = field(default_factory=TrackingConfig)
    execution: ExecutionConfig = field(default_factory=ExecutionConfig)  # the sandbox, as a reward needs it


# The plug-in sections of the recipe: (parent key, section, its dataclass), read from the registries.
PLUGIN_SECTIONS: list[tuple[str, str, type]] = [
    ("train", name, cls) for name, cls, _ in _plugin_sections(list(STAGES.values()))
] + [
    ("evaluate", name, cls) for name, cls, _ in _plugin_sections([*DETECTORS.values(), *EVALUATIONS.values()])
]

# Values that are not free-form: checked at load with a suggestion. Each plug-in section declares its own.
CHOICES: dict[str, tuple[str, ...]] = {
    "model.dtype": ("auto", "float32", "bfloat16", "float16"),
    "data.benchmark": ("humaneval", "apps", "humaneval_plus", "mbpp_plus", "bigcodebench", "synthetic"),
    "data.text_format": ("prompt+solution", "solution", "prompt"),
    "train.stage": STAGE_NAMES,
    "evaluate.scoring_span": ("text", "solution"),
    "evaluate.dtype": ("float32", "bfloat16", "float16"),
    "evaluate.long_texts": ("window", "truncate"),
    "evaluate.prompt_boundary": ("auto", "heal", "none"),
    "inject.form": ("document", "file", "rephrased"),  # leaklab/data/forms.py
    "tracking.wandb.mode": ("offline", "online", "disabled"),
    **{
        f"{parent}.{section}.{key}": allowed
        for parent, section, cls in PLUGIN_SECTIONS
        for key, allowed in cls.choices.items()
    },
}

# A run's identity is its training: what changes the trained weights (`execution` too: the rl stage's
# reward runs in the sandbox), never how results are shown or evaluated, so a finished run is evaluated
# again rather than retrained. See docs/recipes.md#a-runs-identity-is-its-training.
SHOWN_ONLY = ("name", "description", "output_dir", "run_name", "tracking", "plugins")
NOT_IDENTITY = (*SHOWN_ONLY, "evaluate")
# ...except that SrDetection's pre-filter (data.prefilter) picks the tasks with the srdetection
# variants and these scoring settings, so under it they decide the split, and are part of the identity.
PREFILTER_KEYS = ("srdetection", "scoring_span", "dtype", "max_length", "long_texts")


# --------------------------------------------------------------------------- loading


class _Loader(yaml.SafeLoader):
    """YAML with YAML-1.2 numbers and booleans: `1e-4` is a float, `1:5` stays a string (YAML 1.1 reads
    65), and only true / false are booleans (YAML 1.1 reads `off`, a value of evaluate.mri.llm_judge,
    as false)."""


_YAML_1_1 = ("tag:yaml.org,2002:int", "tag:yaml.org,2002:float", "tag:yaml.org,2002:bool")
_Loader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag not in _YAML_1_1]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
)
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:int",
    re.compile(r"^[-+]?(?:0|[1-9][0-9_]*|0x[0-9a-fA-F_]+|0o[0-7_]+)$"),
    list("-+0123456789"),
)
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(
        r"^(?:[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?(?:[eE][-+]?[0-9]+)?|[-+]?\.[0-9_]+(?:[eE][-+]?[0-9]+)?"
        r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"
    ),
    list("-+0123456789."),
)


def yaml_load(text: str) -> Any:
    return yaml.load(text, Loader=_Loader)  # noqa: S506 - a SafeLoader subclass


def available_recipes() -> dict[str, Path]:
    """Recipe name -> file: ./recipes first, then the package's own copy (a folder missing globs nothing)."""
    found: dict[str, Path] = {}
    for d in (Path.cwd() / "recipes", PACKAGE_RECIPES):
        for path in sorted(d.glob("*.yaml")):
            found.setdefault(path.stem, path)
    return found


def find_recipe(name_or_path: str) -> Path:
    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml") and path.is_file():
        return path
    if path.suffix in (".yaml", ".yml") or "/" in name_or_path:
        # A file name, not a recipe name: say the file is missing rather than suggest a recipe.
        raise RecipeError([f"recipe: the file {name_or_path} does not exist (names: `leaklab recipes`)"])
    known = available_recipes()
    if name_or_path in known:
        return known[name_or_path]
    hint = closest(name_or_path, known)
    raise RecipeError([f"recipe: no recipe named {name_or_path!r}{hint} (see `leaklab recipes`)"])


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        data = yaml_load(path.read_text()) or {}
    except yaml.YAMLError as err:
        raise RecipeError([f"recipe: {path} is not valid YAML: {err}"]) from err
    if not isinstance(data, dict):
        raise RecipeError([f"recipe: {path} must hold a mapping at the top level"])
    return data


def _resolve_base(path: Path) -> dict[str, Any]:
    """The recipe merged over its one `base:` parent (a parent may not have a base itself)."""
    data = _read_yaml(path)
    base = data.pop("base", None)
    if base is None:
        return data
    sibling = path.parent / f"{base}.yaml"
    parent_path = sibling if sibling.is_file() else find_recipe(base)
    parent = _read_yaml(parent_path)
    if "base" in parent:
        raise RecipeError(
            [f"recipe: {path.name} has base {base!r}, which has a base of its own; one level only"]
        )
    return _deep_merge(parent, data)


def _deep_merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def parse_overrides(overrides: list[str]) -> dict[str, Any]:
    """`a.b=value` strings into a nested dict; values are parsed as YAML (`[ppl, zlib]`, `1e-4`, `null`)."""
    nested: dict[str, Any] = {}
    problems = []
    for item in overrides:
        if "=" not in item:
            problems.append(f"override {item!r}: expected key=value")
            continue
        key, raw = item.split("=", 1)
        try:
            value = yaml_load(raw) if raw != "" else ""
        except yaml.YAMLError:
            value = raw
        node = nested
        parts = key.strip().split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                problems.append(f"override {item!r}: {part} is not a section")
                break
        else:
            node[parts[-1]] = value
    if problems:
        raise RecipeError(problems)
    return nested


# The section seeds that the top-level `seed` sets when the recipe (file, its base, the command line) does
# not give them. Not model.tiny.seed: that one picks the base model itself.
SPREAD_SEEDS = (
    "data.seed",
    "mix.seed",
    "train.seed",
    "evaluate.seed",
    "evaluate.srdetection.seed",
    "evaluate.accuracy.seed",
    "evaluate.mri.seed",
    "evaluate.extraction.seed",
)


def _spread_seed(raw: dict[str, Any]) -> dict[str, Any]:
    """`seed: N` (or seed=N) as the default of every section seed in SPREAD_SEEDS that is not given. A
    recipe without a top-level seed is left as it is, so every existing recipe resolves as before."""
    seed = raw.get("seed")
    if not isinstance(seed, int) or isinstance(seed, bool):
        return raw  # absent, or a bad value that the schema check reports
    for dotted in SPREAD_SEEDS:
        *sections, key = dotted.split(".")
        node = raw
        for section in sections:
            node = node.setdefault(section, {}) if isinstance(node, dict) else None
        if isinstance(node, dict):
            node.setdefault(key, seed)
    return raw


def load_recipe(name_or_path: str, overrides: list[str] | None = None) -> Recipe:
    path = find_recipe(name_or_path)
    raw = _resolve_base(path)
    raw.setdefault("name", path.stem)
    raw = _spread_seed(_deep_merge(raw, parse_overrides(overrides or [])))
    # First: the plug-ins' detectors and evaluations are names the rest of the recipe may use.
    named = raw.get("plugins") or []
    import_plugins([named] if isinstance(named, str) else named if isinstance(named, list) else [named])
    problems: list[str] = []
    recipe = _build(Recipe, raw, "", problems)
    if not problems:
        problems.extend(_validate(recipe))
    if problems:
        raise RecipeError(problems)
    return recipe


# --------------------------------------------------------------------------- conversion + checks


def _build(cls, raw: Any, prefix: str, problems: list[str]):
    if not isinstance(raw, dict):
        problems.append(f"{prefix.rstrip('.') or 'recipe'}: expected a section (mapping), got {raw!r}")
        return cls()
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    kwargs = {}
    for key, value in raw.items():
        if key not in fields:
            full = [prefix + name for name in fields]
            problems.append(f"{prefix}{key}: unknown key{closest(prefix + str(key), full)}")
            continue
        if f"{prefix}{key}" == "evaluate.detectors" and isinstance(value, list):
            value = regroup_specs(value)  # [ppl,srdetection_gray:n=1,3,5,10]: two specs, not five
        kwargs[key] = _convert(hints[key], value, f"{prefix}{key}", problems)
    return cls(**kwargs)


def _convert(tp, value: Any, key: str, problems: list[str]):
    origin = typing.get_origin(tp)
    if dataclasses.is_dataclass(tp):
        return _build(tp, value, key + ".", problems)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        return _convert(inner[0], value, key, problems)
    if origin is dict:  # a mapping of names (inject.windows): its values converted, its keys as strings
        if not isinstance(value, dict):
            problems.append(f"{key}: expected a mapping (e.g. {{name: value}}), got {value!r}")
            return {}
        _, value_tp = typing.get_args(tp)
        return {str(k): _convert(value_tp, v, f"{key}.{k}", problems) for k, v in value.items()}
    if origin is list:
        (item_tp,) = typing.get_args(tp)
        if isinstance(value, (str, int, float)) and not isinstance(value, bool):
            value = [value]  # `evaluate.detectors=ppl` means [ppl]
        if not isinstance(value, list):
            problems.append(f"{key}: expected a list, got {value!r}")
            return []
        return [_convert(item_tp, v, key, problems) for v in value]
    if tp is str and isinstance(value, bool):
        # YAML reads `true` as a boolean; a string key whose values include "true" / "false" (a switch
        # such as train.rl.use_vllm: auto | true | false) means the word; the choices check the rest.
        return str(value).lower()
    if tp in _SCALARS:
        accepts, expected, placeholder = _SCALARS[tp]
        if accepts(value):
            return tp(value)
        problems.append(f"{key}: expected {expected}, got {value!r}")
        return placeholder
    return value


# A scalar field: what it accepts (a bool is an int in Python, so the numbers exclude it), what the
# problem line says it expected, and the placeholder the rest of the check goes on with.
_SCALARS: dict[type, tuple[Any, str, Any]] = {
    bool: (lambda v: isinstance(v, bool), "true or false", False),
    int: (lambda v: isinstance(v, int) and not isinstance(v, bool), "an integer", 0),
    float: (lambda v: isinstance(v, (int, float)) and not isinstance(v, bool), "a number", 0.0),
    str: (lambda v: isinstance(v, (str, int, float)), "a string", ""),
}


def _validate(recipe: Recipe) -> list[str]:
    problems = []
    for key, allowed in CHOICES.items():
        value = get_key(recipe, key)
        if value not in allowed:
            problems.append(
                f"{key}: {value!r} is not one of {', '.join(allowed)}{closest(str(value), allowed)}"
            )
    try:
        parse_ratio(recipe.mix.ratio)
    except ValueError as err:
        problems.append(f"mix.ratio: {err}")
    if recipe.data.name is not None and not (
        recipe.data.path and re.fullmatch(r"[\w.+-]+", recipe.data.name)
    ):
        problems.append(
            f"data.name: {recipe.data.name!r} names a local benchmark file: set data.path too, and use "
            f"letters, digits, '.', '+', '-' or '_'"
        )
    problems.extend(_check_inject(recipe.inject))
    for name in recipe.evaluate.evaluations:
        for key, what, example in EVALUATIONS[name].requires if name in EVALUATIONS else ():
            if not get_key(recipe, key):
                problems.append(
                    f"evaluate.evaluations: {name!r} measures {what} that {key} sets; set {key}, "
                    f"e.g. {example}, or remove {name!r}"
                )
    if recipe.inject.withhold and recipe.train.stage != "cpt":
        problems.append(
            f"inject.withhold: only train.stage cpt can put corpus text in the members' places; use false "
            f"with train.stage {recipe.train.stage}"
        )
    if recipe.inject.form != "document" and recipe.train.stage != "cpt":
        problems.append(
            f"inject.form: {recipe.inject.form} is a form of continued pretraining; use document with "
            f"train.stage {recipe.train.stage}, or train.stage cpt"
        )
    if recipe.inject.canaries > 0 and recipe.train.stage == "rl":
        problems.append(
            "inject.canaries: train.stage rl trains on prompts only, which hold no canary; use 0, or "
            "train.stage cpt or sft"
        )
    if not 0 < recipe.data.member_fraction < 1:
        problems.append(f"data.member_fraction: must be in (0, 1), got {recipe.data.member_fraction}")
    save = recipe.train.save_every
    if save != "epoch" and not (save.isdigit() and int(save) > 0):
        problems.append(f"train.save_every: 'epoch' or a positive number of steps, got {save!r}")
    if recipe.train.micro_batch_size > 0 and recipe.train.batch_size % recipe.train.micro_batch_size:
        problems.append(
            f"train.batch_size: {recipe.train.batch_size} is not a multiple of train.micro_batch_size "
            f"{recipe.train.micro_batch_size}"
        )
    for name in recipe.evaluate.evaluations:
        if name not in EVALUATIONS:
            problems.append(
                f"evaluate.evaluations: unknown evaluation {name!r}{closest(name, EVALUATIONS)} "
                f"(known: {', '.join(EVALUATIONS)})"
            )
    problems.extend(
        f"evaluate.detectors: {p}" for p in validate_specs(recipe.evaluate.detectors, recipe.evaluate)
    )
    problems.extend(
        f"evaluate.dataset_tests: unknown test {name!r}{closest(str(name), DATASET_TESTS)} "
        f"(known: {', '.join(DATASET_TESTS)})"
        for name in recipe.evaluate.dataset_tests
        if name not in DATASET_TESTS
    )
    for key in ("train.epochs", "train.batch_size", "train.micro_batch_size", "mix.max_seq_len"):
        if get_key(recipe, key) < 1:
            problems.append(f"{key}: must be at least 1, got {get_key(recipe, key)}")
    if recipe.train.learning_rate <= 0:
        problems.append(f"train.learning_rate: must be positive, got {recipe.train.learning_rate}")
    if recipe.evaluate.cv_folds < 2:
        problems.append("evaluate.cv_folds: need at least 2 folds")
    for parent, section, _ in PLUGIN_SECTIONS:  # each plug-in checks its own section
        problems.extend(get_key(recipe, f"{parent}.{section}").check(get_key(recipe, parent)))
    return problems


def _check_inject(inject: InjectConfig) -> list[str]:
    """Doses are positive integers; the window is [start, end] with 0 <= start < end <= 1. (More dose
    groups than members is found when the members are known: leaklab.rundir.make_manifest.)"""
    problems = []
    if inject.doses is not None:
        if not inject.doses:
            problems.append("inject.doses: an empty list; give at least one dose, e.g. [1], or null")
        for dose in inject.doses:
            if dose < 1:
                problems.append(f"inject.doses: {dose} is not a positive integer; the smallest dose is 1")
    if inject.window is not None:
        problems.extend(_check_window("inject.window", inject.window))
    problems.extend(_check_windows(inject))
    # Form `file` is one document: one dose, and no member document to plant a canary line in.
    if inject.form == "file" and inject.doses is not None and len(inject.doses) > 1:
        problems.append(
            f"inject.doses: form file trains the members as one file, so one dose; e.g. [{inject.doses[0]}]"
        )
    if inject.form == "file" and inject.canaries > 0:
        problems.append(
            "inject.canaries: form file writes the benchmark's own records, with no canary; use 0"
        )
    if inject.canaries < 0:
        problems.append(f"inject.canaries: {inject.canaries} is negative; 0 plants none")
    if inject.canaries > 0:
        from leaklab.data.canaries import FORMATS

        if not inject.canary_formats:
            problems.append(f"inject.canary_formats: an empty list; known formats: {', '.join(FORMATS)}")
        for fmt in inject.canary_formats:
            if fmt not in FORMATS:
                problems.append(
                    f"inject.canary_formats: unknown format {fmt!r}{closest(str(fmt), FORMATS)} "
                    f"(known: {', '.join(FORMATS)})"
                )
        if inject.canary_candidates < 1:
            problems.append(f"inject.canary_candidates: must be at least 1, got {inject.canary_candidates}")
        if inject.canary_samples < 0:
            problems.append(
                f"inject.canary_samples: {inject.canary_samples} is negative; 0 decodes greedily only"
            )
    return problems


def _check_window(key: str, window: list[float]) -> list[str]:
    """[start, end] with 0 <= start < end <= 1, or the one line that says what is wrong with it."""
    if len(window) != 2:
        return [f"{key}: expected [start, end], got {window}; e.g. [0.0, 1.0]"]
    if not all(0 <= x <= 1 for x in window):
        clipped = [min(max(x, 0.0), 1.0) for x in window]
        return [f"{key}: {window} is outside [0, 1]; the closest valid is {clipped}"]
    if window[0] >= window[1]:
        start, end = window
        example = [end, start] if start > end else [start, 1.0] if start < 1 else [0.0, 1.0]
        return [f"{key}: {window} is empty (start must be below end); e.g. {example}"]
    return []


def _check_windows(inject: InjectConfig) -> list[str]:
    """Window groups: at least two, each a valid window, no two overlapping, not with `window`, and not
    with form `file` (its one document cannot be in two windows)."""
    windows = inject.windows
    if windows is None:
        return []
    if len(windows) < 2:
        named = ", ".join(windows) or "none"
        return [
            f"inject.windows: {len(windows)} group ({named}); give at least two, e.g. "
            "{early: [0.0, 0.25], late: [0.75, 1.0]}, or inject.window for one"
        ]
    problems = [p for name, span in windows.items() for p in _check_window(f"inject.windows.{name}", span)]
    # A group names a leaderboard cell, `<run>@<group>`: not a dose's, the base model's or a form's.
    taken = ("base", "max", "min", "verbatim", "rephrased")
    problems.extend(
        f"inject.windows: group name {name!r} is not a word or names another cell (@{', @'.join(taken)}, "
        f"@<dose>); e.g. early, late"
        for name in windows
        if not re.fullmatch(r"[A-Za-z]\w*", name) or name in taken
    )
    if inject.window is not None:
        problems.append(
            "inject.windows: set together with inject.window; use one of them (inject.window=null)"
        )
    if inject.form == "file":
        problems.append("inject.windows: form file is one document, in one window; use inject.window")
    if problems:
        return problems
    ordered = sorted(windows.items(), key=lambda item: item[1][0])
    for (name, span), (next_name, next_span) in zip(ordered, ordered[1:], strict=False):
        if next_span[0] < span[1]:
            problems.append(
                f"inject.windows: {name} {span} and {next_name} {next_span} overlap; the closest valid "
                f"{next_name} is {[span[1], next_span[1]]}"
                if next_span[1] > span[1]
                else f"inject.windows: {next_name} {next_span} lies inside {name} {span}; give it its own part"
            )
    return problems


def _inject_section(data: dict[str, Any], inject: InjectConfig) -> None:
    """The `inject` part of a hash: gone when unset, and without the canary keys when there are no
    canaries, so recipes from before either existed keep their hashes (and run directories)."""
    if not inject.active:
        data.pop("inject")
        return
    # Keys added later are absent at their default, so runs from before them keep their hashes.
    for key, default in (("withhold", False), ("form", "document"), ("windows", None)):
        if getattr(inject, key) == default:
            data["inject"].pop(key)
    if inject.canaries == 0:
        for key in ("canaries", "canary_formats", "canary_candidates", "canary_samples"):
            data["inject"].pop(key)


def parse_ratio(ratio: str) -> tuple[float, float]:
    """ "1:5" -> (1.0, 5.0): code tokens to web tokens."""
    try:
        code, web = (float(part) for part in str(ratio).split(":"))
    except ValueError:
        raise ValueError(f"expected code:web such as '1:5', got {ratio!r}") from None
    if code <= 0 or web < 0:
        raise ValueError(f"code part must be > 0 and web part >= 0, got {ratio!r}")
    return code, web


def get_key(recipe: Any, dotted: str) -> Any:
    node = recipe
    for part in dotted.split("."):
        node = getattr(node, part)
    return node


def to_dict(recipe: Recipe) -> dict[str, Any]:
    return dataclasses.asdict(recipe)


def to_yaml(recipe: Recipe) -> str:
    return yaml.safe_dump(to_dict(recipe), sort_keys=False)


def config_hash(recipe: Recipe) -> str:
    """A short hash of everything that changes what is computed, evaluation settings included (an
    audit's folder, which trains nothing, is named by it); a run's directory is named by `run_hash`."""
    data = {k: v for k, v in to_dict(recipe).items() if k not in SHOWN_ONLY}
    _inject_section(data, recipe.inject)
    # When checkpoints are evaluated changes nothing computed (and leaving it out keeps older hashes).
    data["evaluate"].pop("during_training", None)
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:8]


def run_identity(recipe: Recipe) -> dict[str, Any]:
    """The settings that change the trained weights (see NOT_IDENTITY): model, data, mix, train,
    execution and the top-level seed."""
    data = {k: v for k, v in to_dict(recipe).items() if k not in NOT_IDENTITY}
    _inject_section(data, recipe.inject)
    if "inject" in data:
        # How exposure and extraction are measured, not what is trained.
        data["inject"].pop("canary_candidates", None)
        data["inject"].pop("canary_samples", None)
    if recipe.data.prefilter:
        evaluate = to_dict(recipe)["evaluate"]
        data["prefilter"] = {f"evaluate.{k}": evaluate[k] for k in PREFILTER_KEYS}
    return data


def run_hash(recipe: Recipe) -> str:
    """A short hash of `run_identity`: the run directory's name ends with it."""
    return hashlib.sha256(json.dumps(run_identity(recipe), sort_keys=True).encode()).hexdigest()[:8]


def flat(data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """{"a": {"b": 1}} -> {"a.b": 1}."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, dict) and value:
            out.update(flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def identity_changes(old: Recipe, new: Recipe) -> list[str]:
    """'key: old -> new' for every setting of the run's identity that differs between two recipes."""
    a, b = flat(run_identity(old)), flat(run_identity(new))
    return [f"{k}: {a.get(k)!r} -> {b.get(k)!r}" for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]


def run_dir_of(recipe: Recipe) -> Path:
    return Path(recipe.output_dir) / (recipe.run_name or f"{recipe.name}-{run_hash(recipe)}")


def describe(path: Path) -> str:
    """The one-line description of a recipe file, for `leaklab recipes`."""
    try:
        data = _read_yaml(path)
    except RecipeError:
        return "(unreadable)"
    return str(data.get("description", "")).strip().splitlines()[0] if data.get("description") else ""
