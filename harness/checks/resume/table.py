"""check-resume's table: one text line per loader x storage x sampler x way of resuming (the rows
that measuring.py writes to resume.jsonl)."""
from __future__ import annotations


def _seconds(value, verified: bool = True) -> str:
    if value is None:
        return "-"
    return f"{value:.3f}" if verified else f"{value:.3f}?"


def table(rows: list[dict]) -> list[str]:
    """check-resume's rows as text lines: one per loader x storage x sampler x way of resuming."""
    head = (f"{'loader':<8} {'storage':<10} {'sampler':<15} {'resume':<8} {'first batch s warm':>18} "
            f"{'cold':>7} {'stop':>7} {'repeated':>8} {'dropped':>7} {'order':>6}  resumable state")
    out = [head]
    for r in rows:
        stop = f"{r['stop_batches']}/{r['epoch_batches']}"
        out.append(f"{r['loader']:<8} {r['storage']:<10} {r['sampler']:<15} {r['method']:<8} "
                   f"{_seconds(r['first_batch_warm_s']):>18} "
                   f"{_seconds(r['first_batch_cold_s'], r['cold_verified']):>7} {stop:>7} {r['repeated']:>8} "
                   f"{r['dropped']:>7} {'same' if r['same_order'] else 'moved':>6}  {r['resumable']}")
    out.append("stop: batches read before the stop / the epoch's batches (one rank); repeated, dropped: samples "
               "against the uninterrupted epoch; order: the stopped + resumed order the same as the uninterrupted "
               "one; cold: files dropped from the page cache, '?' where the drop was not verified")
    return out
