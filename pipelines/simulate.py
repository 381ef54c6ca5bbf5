"""``dcaudit simulate``: run a controlled response-space experiment as a registered run.

The experiments need no data (they are seeded simulations), so the run's inputs are empty and its
spec is the experiment's resolved config; the package holds metrics / choice / completion tables.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, replace
from typing import TYPE_CHECKING

import pyarrow as pa

from dcaudit import defaults
from dcaudit.audits.controlled import EXPERIMENTS, SOURCE
from dcaudit.config import Settings
from dcaudit.errors import SpecError
from dcaudit.pipelines.runner import RunResult, execute_run

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

    from dcaudit.storage import PackageWriter


def simulation_config(experiment: str, seeds: int | None = None, geometries: int | None = None) -> DataclassInstance:
    """The experiment's config with the paper's defaults, ``seeds`` overriding its seed count.

    ``geometries`` (acquisition only) adds the spread over re-drawn geometries, which the paper lacks.
    """
    if experiment not in EXPERIMENTS:
        raise SpecError(f"unknown experiment {experiment!r}; choose one of {sorted(EXPERIMENTS)}")
    config_cls, _, seed_field = EXPERIMENTS[experiment]
    cfg = config_cls()
    if seeds is not None:
        # the replay's and completion's cap, checked before anything is drawn: 2**31 seeds grew to tens of GB
        if isinstance(seeds, bool) or not isinstance(seeds, int) or not 1 <= seeds <= defaults.MAX_SEEDS:
            raise SpecError(f"simulate {experiment}: seeds must be from 1 to {defaults.MAX_SEEDS}, got {seeds!r}")
        cfg = replace(cfg, **{seed_field: seeds})
    if geometries:
        if experiment != "acquisition":
            raise SpecError("--geometries (a positive count) applies to the acquisition experiment only")
        # each geometry is re-drawn from seed geometry_seed + i: a seed count like --seeds
        if isinstance(geometries, bool) or not isinstance(geometries, int) or not 0 <= geometries <= defaults.MAX_SEEDS:
            raise SpecError(f"simulate {experiment}: geometries must be from 0 to {defaults.MAX_SEEDS}, "
                            f"got {geometries!r}")
        cfg = replace(cfg, geometries=geometries)
    return cfg


def run_simulation(settings: Settings, experiment: str, seeds: int | None = None,
                   geometries: int | None = None) -> RunResult:
    cfg = simulation_config(experiment, seeds, geometries)
    _, fn, seed_field = EXPERIMENTS[experiment]
    payload = {"experiment": experiment, "config": asdict(cfg)}
    spec_hash = hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()

    def compute(writer: PackageWriter) -> tuple[dict[str, pa.Table], dict[str, object]]:  # noqa: ARG001 - written whole
        tables = fn(cfg)
        notes = [f"{experiment}: {getattr(cfg, seed_field)} {seed_field.replace('_', ' ')} "
                 "(the paper's seeds, docs/reference.md; numpy default_rng)"]
        return tables, {"source": SOURCE, "notes": notes}

    return execute_run(settings, name=f"simulate-{experiment}", spec_payload=payload, spec_hash=spec_hash,
                       inputs={}, compute=compute)
