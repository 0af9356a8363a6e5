"""Canaries: synthetic secrets with a known ground truth, planted in member documents (`inject.canaries`).

Each canary is one line of Python, `<prefix><secret>"`, its secret a seeded random string of one of
FORMATS. Canaries are dealt in turn to the dose groups and, within one, to its members in a seeded
order, so a canary is seen exactly as often as its member. The manifest records each one: the ground
truth leaklab/memorization/canaries.py measures against. See docs/evaluations.md#canaries.
"""

from __future__ import annotations

import dataclasses
import random
import string
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

# Fixed word lists for e-mail secrets: <word>.<word><2 digits>@<domain>.
_WORDS = (
    "amber", "birch", "cedar", "delta", "ember", "falcon", "garnet", "harbor",
    "indigo", "juniper", "kestrel", "lumen", "maple", "nova", "onyx", "pine",
)  # fmt: skip
_DOMAINS = ("example.com", "example.org", "mail.test", "corp.invalid", "dev.test", "acme.example")
# No quote or backslash: the secret sits inside a "..." literal as is.
_PASSWORD_ALPHABET = string.ascii_letters + string.digits + "!#$%&*+-=?@^_"


def _api_key(rng: random.Random) -> str:
    return "".join(rng.choice(string.ascii_letters + string.digits) for _ in range(24))


def _email(rng: random.Random) -> str:
    return f"{rng.choice(_WORDS)}.{rng.choice(_WORDS)}{rng.randrange(100):02d}@{rng.choice(_DOMAINS)}"


def _password(rng: random.Random) -> str:
    return "".join(rng.choice(_PASSWORD_ALPHABET) for _ in range(12))


@dataclass(frozen=True)
class Format:
    prefix: str  # the line up to the secret: the context the secret is scored after
    draw: Callable[[random.Random], str]  # a secret of this format
    pattern: str  # a regular expression every secret of this format matches (for tests and readers)


FORMATS: dict[str, Format] = {
    "api_key": Format('API_KEY = "sk-', _api_key, r"[A-Za-z0-9]{24}"),
    "email": Format('CONTACT_EMAIL = "', _email, r"[a-z]+\.[a-z]+[0-9]{2}@[a-z.]+"),
    "password": Format('DB_PASSWORD = "', _password, r"[A-Za-z0-9!#$%&*+\-=?@^_]{12}"),
}


@dataclass(frozen=True)
class Canary:
    id: str
    format: str
    prefix: str
    secret: str
    member: str | None = None  # the task id whose document holds it
    dose: int | None = None  # its member's dose

    @property
    def line(self) -> str:
        return f'{self.prefix}{self.secret}"'

    def as_dict(self) -> dict:
        return {**asdict(self), "line": self.line}

    @classmethod
    def from_dict(cls, data: dict) -> Canary:
        return cls(**{k: data[k] for k in ("id", "format", "prefix", "secret", "member", "dose")})


def draw_secret(fmt: str, rng: random.Random) -> str:
    return FORMATS[fmt].draw(rng)


def generate_canaries(n: int, formats: Sequence[str], seed: int) -> list[Canary]:
    """`n` canaries, the i-th of format formats[i % len(formats)], secrets drawn with `seed` (all
    distinct)."""
    rng = random.Random(f"inject.canaries:{seed}")
    canaries, seen = [], set()
    for i in range(n):
        fmt = formats[i % len(formats)]
        secret = draw_secret(fmt, rng)
        while secret in seen:
            secret = draw_secret(fmt, rng)
        seen.add(secret)
        canaries.append(Canary(f"canary-{i:03d}", fmt, FORMATS[fmt].prefix, secret))
    return canaries


def assign_canaries(canaries: list[Canary], doses: dict[str, int], seed: int) -> list[Canary]:
    """Each canary with its member and dose: dealt in turn to the dose groups (ascending dose), and
    within a group to its members in a seeded order (a member gets a second canary only when its group
    has more canaries than members)."""
    groups: dict[int, list[str]] = {}
    for task_id in sorted(doses):
        groups.setdefault(doses[task_id], []).append(task_id)
    rng = random.Random(f"inject.canaries.members:{seed}")
    for members in groups.values():
        rng.shuffle(members)
    order = sorted(groups)
    out = []
    for i, canary in enumerate(canaries):
        dose = order[i % len(order)]
        members = groups[dose]  # the (i // len(order))-th canary this group is dealt
        out.append(dataclasses.replace(canary, member=members[i // len(order) % len(members)], dose=dose))
    return out


def plan_canaries(n: int, formats: Sequence[str], doses: dict[str, int], seed: int) -> list[dict]:
    """The manifest's `canaries`: generated and assigned to the members of `doses` (task id -> dose)."""
    return [c.as_dict() for c in assign_canaries(generate_canaries(n, formats, seed), doses, seed)]


def plant(text: str, lines: Sequence[str]) -> str:
    """`text` with `lines` inserted before its first non-empty line, at that line's indentation."""
    if not lines:
        return text
    rows = text.split("\n")
    at = next((i for i, row in enumerate(rows) if row.strip()), len(rows))
    indent = rows[at][: len(rows[at]) - len(rows[at].lstrip())] if at < len(rows) else ""
    return "\n".join([*rows[:at], *(indent + line for line in lines), *rows[at:]])


def canary_lines(manifest: dict) -> dict[str, list[str]]:
    """task id -> the canary lines planted in its document (empty without `inject.canaries`)."""
    lines: dict[str, list[str]] = {}
    for canary in manifest.get("canaries") or []:
        lines.setdefault(canary["member"], []).append(canary["line"])
    return lines


def canary_exposures(manifest: dict, exposures: dict[str, int]) -> dict[str, int]:
    """canary id -> the times its line was seen in one epoch: its member's exposures as counted in the
    built training data (each copy of the member's document holds the line once)."""
    return {c["id"]: int(exposures.get(c["member"], 0)) for c in manifest.get("canaries") or []}
