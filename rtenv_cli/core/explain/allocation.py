"""An allocation request (`--num-gpus`, `--gpus`, `--resource ...`) turned into raylet slot ids."""

from __future__ import annotations

import math
from dataclasses import dataclass

from rtenv_cli.core.errors import UsageError


@dataclass(frozen=True)
class ResourceRequest:
    """One accelerator resource of an allocation.

    `slots` are the raylet's slot indices (Ray's own ids; on a node started with a preset
    visible list they index into it). `assumed` is True when rtenv picked them first-fit.
    """

    resource: str
    amount: float
    slots: tuple[int, ...]
    assumed: bool

    def to_dict(self) -> dict[str, object]:
        return {"resource": self.resource, "amount": self.amount, "slots": list(self.slots),
                "assumed": self.assumed}


MAX_SLOTS = 4096  # accelerators of one node; a larger request cannot be placed (nor listed)


def first_fit(amount: float) -> tuple[int, ...]:
    """Slots an idle node hands out: lowest free first; a fraction takes one whole slot."""
    if amount <= 0:
        return ()
    if amount > MAX_SLOTS:
        raise UsageError(f"{amount:g} accelerators: no node has more than {MAX_SLOTS}",
                         hint="request what one worker needs, e.g. --num-gpus 1")
    if amount < 1:
        return (0,)
    return tuple(range(math.ceil(amount)))


def parse_ids(text: str, what: str) -> tuple[int, ...]:
    body = text.strip().strip("[]")
    if not body:
        return ()
    try:
        ids = tuple(int(p) for p in body.split(",") if p.strip())
    except ValueError:
        raise UsageError(f"{what}: ids must be integers, got {text!r}",
                         hint="give Ray's slot ids, e.g. 0,1") from None
    if any(i < 0 or i >= MAX_SLOTS for i in ids) or len(set(ids)) != len(ids):
        raise UsageError(f"{what}: ids must be distinct, >= 0 and < {MAX_SLOTS}, got "
                         f"{text[:80]!r}")
    return ids


# Ray keeps resource quantities as 64-bit integers of 1/10000 units (RESOURCE_UNIT_SCALING):
# a larger amount cannot be represented (Ray's own check overflows on it)
MAX_AMOUNT = (2**63 - 1) // 10000


def check_amount(value: float, what: str) -> float:
    """`value` as a resource quantity Ray can hold: finite, >= 0, within Ray's fixed point."""
    if not 0 <= value <= MAX_AMOUNT:  # NaN fails both comparisons
        raise UsageError(f"{what} must be a finite number between 0 and {MAX_AMOUNT}, "
                         f"got {value!r}", hint=f"e.g. {what} 1 or {what} 0.5")
    return value


def parse_amount(text: str, what: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise UsageError(f"{what}: not a number: {text!r}") from None
    return check_amount(value, what)


def request_from_ids(resource: str, ids: tuple[int, ...]) -> ResourceRequest:
    return ResourceRequest(resource, float(len(ids)), ids, assumed=False)


def request_from_amount(resource: str, amount: float) -> ResourceRequest:
    return ResourceRequest(resource, amount, first_fit(amount), assumed=amount > 0)


def parse_resource_arg(text: str) -> ResourceRequest:
    """`NAME=AMOUNT` (e.g. `TPU=4`, `NPU=0.5`) or `NAME=IDS` (`neuron_cores=0,1`, `HPU=[3]`).

    A bare number is an amount; a comma or brackets make it an id list.
    """
    name, sep, value = text.partition("=")
    name = name.strip()
    if not sep or not name or not value.strip():
        raise UsageError(f"--resource {text!r}: expected NAME=AMOUNT or NAME=IDS",
                         hint="e.g. --resource neuron_cores=2 or --resource TPU=[0,1]")
    value = value.strip()
    if "," in value or value.startswith("["):
        return request_from_ids(name, parse_ids(value, f"--resource {name}"))
    return request_from_amount(name, parse_amount(value, f"--resource {name}"))
