"""The bootstrap engine: every level and metric of a cell for many resamples at once, each resample redrawing the
test and the calibration items (each split within itself, per option count K) and refitting what is fitted (the test
prior, the frozen calibration prior, L1's temperature); and the stratified jackknife that gives BCa its acceleration.

A cell may mix option counts: its items are held per K (:class:`KGroup`), levels are computed per K, padded to the
largest K with ``-inf`` and concatenated; L1 fits one temperature per layout group on all K groups together.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from anyjev.numbers.levels import LevelInputs, levels_resampled
from anyjev.numbers.logprobs import log_softmax
from anyjev.numbers.metrics import metrics_batch
from anyjev.numbers.options import EvaluationOptions
from anyjev.numbers.temperature import fit_log_temperature

CHUNK_FLOATS = 3_000_000  # floats per array in one chunk of resamples (memory bound, ~24 MB)


@dataclass
class KGroup:
    """The test and calibration items of one option count K, with the positions of its test items."""

    k: int
    inputs: LevelInputs
    test_pos: np.ndarray
    gold: np.ndarray
    prior_source: str = "items"

    def uses_calib(self, with_l1: bool) -> bool:
        """Whether this K's calibration items enter its levels (L1, or the frozen prior of an adaptive cell)."""
        return with_l1 or self.prior_source == "calibration"


def _pad(lp: np.ndarray, kmax: int) -> np.ndarray:
    if lp.shape[-1] == kmax:
        return lp
    out = np.full(lp.shape[:-1] + (kmax,), -np.inf)
    out[..., : lp.shape[-1]] = lp
    return out


Index = list[tuple[np.ndarray, np.ndarray | None]]  # per K group: test rows (B, n_test), calibration rows or None


def replicates(groups: list[KGroup], idx: Index, with_l1: bool,
               options: EvaluationOptions) -> tuple[dict[str, dict[str, np.ndarray]], np.ndarray, dict[str, np.ndarray]]:
    """Levels of every resample, K groups padded and concatenated: ``{level: {g: (B, N, Kmax)}}``, gold ``(B, N)``,
    and ``log T`` per layout group ``(B,)``. One temperature per layout group is fitted on all K groups."""
    kmax = max(g.k for g in groups)
    per = [levels_resampled(grp.inputs, it, ic, options, fit=False, prior_source=grp.prior_source)
           for grp, (it, ic) in zip(groups, idx, strict=True)]
    layout_groups = list(groups[0].inputs.test)
    levels = {name: {g: np.concatenate([_pad(r.levels[name][g], kmax) for r in per], axis=1) for g in layout_groups}
              for name in per[0].levels}
    gold = np.concatenate([grp.gold[it] for grp, (it, _) in zip(groups, idx, strict=True)], axis=1)
    log_t: dict[str, np.ndarray] = {}
    if with_l1:
        levels["L1"] = {}
        for g in layout_groups:
            cal = np.concatenate([_pad(r.calib_l0[g], kmax) for r in per if g in r.calib_l0], axis=1)
            cal_gold = np.concatenate([grp.inputs.calib_gold[ic] for grp, (_, ic) in zip(groups, idx, strict=True)
                                       if ic is not None and ic.shape[1]], axis=1)
            log_t[g] = fit_log_temperature(cal, cal_gold)
            frozen = np.concatenate([_pad(r.frozen_l0[g], kmax) for r in per], axis=1)
            levels["L1"][g] = log_softmax(frozen / np.exp(log_t[g])[:, None, None])
    return levels, gold, log_t


def metric_replicates(groups: list[KGroup], idx: Index, with_l1: bool,
                      options: EvaluationOptions) -> tuple[dict[str, dict[str, np.ndarray]], dict[str, np.ndarray]]:
    """Every metric of every level for each resample (chunked over resamples to bound memory)."""
    b = idx[0][0].shape[0]
    per_resample = sum(g.inputs.size_per_resample() for g in groups)
    chunk = max(1, CHUNK_FLOATS // max(per_resample, 1))
    values: dict[str, dict[str, list[np.ndarray]]] = {}
    temps: dict[str, list[np.ndarray]] = {}
    for lo in range(0, b, chunk):
        part = [(it[lo:lo + chunk], None if ic is None else ic[lo:lo + chunk]) for it, ic in idx]
        levels, gold, log_t = replicates(groups, part, with_l1, options)
        for name, lv in levels.items():
            m = metrics_batch(lv["fwd"], gold, lv.get("rev"))
            for metric, v in m.items():
                values.setdefault(name, {}).setdefault(metric, []).append(v)
        for g, v in log_t.items():
            temps.setdefault(g, []).append(v)
    return ({name: {m: np.concatenate(v) for m, v in d.items()} for name, d in values.items()},
            {g: np.concatenate(v) for g, v in temps.items()})


def calib_rows(groups: list[KGroup], with_l1: bool) -> list[bool]:
    """Per K group, whether its calibration items are resampled (they enter its levels: :meth:`KGroup.uses_calib`)."""
    return [grp.uses_calib(with_l1) for grp in groups]


def identity_index(groups: list[KGroup], calib: list[bool], rows: int = 1) -> Index:
    """Every item once, in file order (the point), ROWS times; calibration rows for the groups CALIB marks."""
    out = []
    for grp, with_calib in zip(groups, calib, strict=True):
        it = np.broadcast_to(np.arange(grp.inputs.n_test), (rows, grp.inputs.n_test))
        ic = np.broadcast_to(np.arange(grp.inputs.n_calib), (rows, grp.inputs.n_calib)) if with_calib else None
        out.append((it, ic))
    return out


def jackknife_index(groups: list[KGroup], calib: list[bool]) -> list[Index]:
    """Leave-one-out rows, one index per stratum (split x K) of at least 2 items: the stratum's rows leave each of its
    items out once, every other stratum keeps all of its items."""
    strata = []
    for j, (grp, with_calib) in enumerate(zip(groups, calib, strict=True)):
        for split, n in (("test", grp.inputs.n_test), ("calib", grp.inputs.n_calib if with_calib else 0)):
            if n < 2:
                continue
            loo = np.array([np.delete(np.arange(n), i) for i in range(n)])
            idx = identity_index(groups, calib, rows=n)
            it, ic = idx[j]
            idx[j] = (loo, ic) if split == "test" else (it, loo)
            strata.append(idx)
    return strata


def cell_order(groups: list[KGroup]) -> np.ndarray:
    """Permutation that puts K-group-concatenated test items back into cell order."""
    return np.argsort(np.concatenate([g.test_pos for g in groups]), kind="stable")


def resample_index(groups: list[KGroup], calib: list[bool], options: EvaluationOptions) -> Index:
    """Bootstrap rows per K group (``options.n_boot`` of them, seeded by ``options.bootstrap_seed``): test indices
    ``(n_boot, n_test)`` and calibration indices for the groups CALIB marks, each stratum resampled within itself,
    rows sorted so the streaming prior keeps the scored order."""
    rng = np.random.default_rng(options.bootstrap_seed)
    idx = []
    for grp, with_calib in zip(groups, calib, strict=True):
        it = np.sort(rng.integers(0, grp.inputs.n_test, size=(options.n_boot, grp.inputs.n_test)), axis=1)
        ic = (np.sort(rng.integers(0, grp.inputs.n_calib, size=(options.n_boot, grp.inputs.n_calib)), axis=1)
              if with_calib else None)
        idx.append((it, ic))
    return idx
