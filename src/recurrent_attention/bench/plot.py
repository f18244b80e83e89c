"""One PNG of the efficiency benchmark: operator time vs N, streaming state bytes and time vs N."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt


def plot_bench(report: dict, path: str | Path) -> Path:
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    by_path: dict[str, list[tuple[int, float]]] = {}
    for row in report["operator"]:
        if row["seconds"] is not None:
            by_path.setdefault(row["path"], []).append((row["n"], row["seconds"]))
    for name, pts in sorted(by_path.items()):
        axes[0].plot(*zip(*pts, strict=True), marker="o", label=name)
    axes[0].set(
        xscale="log",
        yscale="log",
        xlabel="N tokens",
        ylabel="fwd+bwd seconds",
        title=f"Aaren paths vs causal SDPA\n{report['operator_shape']}",
    )
    by_model: dict[str, list[dict]] = {}
    for row in report["streaming"]:
        by_model.setdefault(row["model"], []).append(row)
    for name, rows in sorted(by_model.items()):
        ns = [r["n"] for r in rows]
        axes[1].plot(ns, [r["state_bytes"] / 2**20 for r in rows], marker="o", label=name)
        axes[2].plot(ns, [r["cumulative_s"] for r in rows], marker="o", label=name)
    axes[1].set(
        xscale="log", yscale="log", xlabel="tokens streamed", ylabel="state MiB", title="Streaming state size"
    )
    axes[2].set(
        xscale="log",
        yscale="log",
        xlabel="tokens streamed",
        ylabel="cumulative seconds",
        title="Streaming time",
    )
    for ax in axes:
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    fig.suptitle(f"{report['device']}; streaming model: {report['stream_model']}", fontsize=9)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
