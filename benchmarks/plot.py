"""The plot of CPU time against host size that
:mod:`benchmarks.nova_compare` writes (matplotlib; none without it)."""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from benchmarks.common import shape_label


def plot(results: list[dict[str, Any]], path: Path, daemon: bool) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    labels = [shape_label(r["shape"]) for r in results]
    x = range(len(results))
    fig, ax = plt.subplots(figsize=(8, 6))
    series = [
        ("vgpu_driver, steady refresh", "o-", ("ours", "cpu")),
        ("vgpu_driver, first refresh", "s--", ("ours", "first_cpu")),
        (
            "vgpu_driver, guest scan (once: init_host or first bind)",
            "d-.",
            ("ours", "scan_cpu"),
        ),
    ]
    if all(r["ours"]["cpu_in_nova_tree"] for r in results):
        series.append(
            (
                "vgpu_driver, steady refresh on Nova's ProviderTree",
                "o:",
                ("ours", "cpu_in_nova_tree"),
            )
        )
    if all(r["nova"] for r in results):
        series += [
            (
                "Nova 34.0.0 periodic (_update_provider_tree_for_vgpu)",
                "^-",
                ("nova", "cpu"),
            ),
            (
                "Nova 34.0.0 guest scan at every spawn",
                "v:",
                ("nova", "spawn_scan_cpu"),
            ),
        ]
    for label, style, (side, key) in series:
        values = [r[side][key] for r in results]
        ax.plot(
            x,
            [
                statistics.median(v) if isinstance(v, list) else v
                for v in values
            ],
            style,
            label=label,
        )
    ax.set_yscale("log")
    ax.set_xticks(list(x), labels, rotation=20, fontsize="small")
    ax.set_xlabel(
        "host: pGPUs / mdevs / guests, T18: 18 types per pGPU "
        "(libvirt test driver)"
    )
    ax.set_ylabel("CPU ms per call (median)")
    ax.set_title(
        "vGPU provider refresh: CPU time against host size"
        + ("\n(libvirt calls served by libvirtd)" if daemon else "")
    )
    ax.grid(True, which="both", alpha=0.3)
    # below the axes: no line hides under it
    ax.legend(
        loc="upper center",
        bbox_to_anchor=(0.5, -0.3),
        ncol=2,
        fontsize="small",
    )
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    return True
