"""The efficiency benchmark's PNGs: operator time, per-token step cost, state size, training rate
(bench.png: Aaren's bars, linear attention's marks where the report has it), and Aaren's Figure 5 as
measured here (figure5.png)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from recurrent_attention.bench.training import NO_MIXING, TARGET_SPEEDUP, aaren_speedups


def plot_bench(report: dict, path: str | Path) -> Path:
    fig, axes = plt.subplots(1, 4, figsize=(20, 4.4))
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
        title=f"Aaren operator vs causal SDPA\n{report['operator_shape']}",
    )
    by_model: dict[tuple[str, int], list[dict]] = {}
    for row in report["steps"]:
        by_model.setdefault((row["model"], row["batch"]), []).append(row)
    for (name, batch), rows in sorted(by_model.items()):
        timed = [r for r in rows if r["us_per_token"] is not None]
        style = "-" if batch == 1 else "--"
        if timed:
            ns, us = [r["n"] for r in timed], [r["us_per_token"] for r in timed]
            axes[1].plot(ns, us, style, marker="o", label=f"{name}, batch {batch}")
        axes[2].plot(
            [r["n"] for r in rows],
            [r["state_bytes"] / 2**20 for r in rows],
            style,
            marker="o",
            label=f"{name}, batch {batch}",
        )
    axes[1].set(
        xscale="log",
        yscale="log",
        xlabel="tokens already in the state",
        ylabel="µs per token",
        title=f"Per-token step ({report['stream_model']})",
    )
    axes[2].set(
        xscale="log", yscale="log", xlabel="tokens in the state", ylabel="state MiB", title="State size"
    )
    speedups = {f: s for f, s in aaren_speedups(report["training"]).items() if s is not None}
    bars = axes[3].bar(
        list(speedups), list(speedups.values()), color="tab:orange", label="Aaren / Transformer"
    )
    axes[3].bar_label(bars, fmt="%.2fx", fontsize=7, label_type="center")
    ceilings = {f: c for f, c in aaren_speedups(report["training"], NO_MIXING).items() if f in speedups}
    if any(c is not None for c in ceilings.values()):
        axes[3].scatter(
            [f for f, c in ceilings.items() if c is not None],
            [c for c in ceilings.values() if c is not None],
            marker="_",
            s=400,
            color="black",
            zorder=3,
            label="ceiling: Aaren without token mixing",
        )
    linear = aaren_speedups(report["training"], "linear_attention")
    linear = {f: r for f, r in linear.items() if r is not None}
    if linear:
        axes[3].scatter(
            list(linear),
            list(linear.values()),
            marker="x",
            color="tab:blue",
            zorder=3,
            label="linear attention / Transformer",
        )
    axes[3].axhline(
        TARGET_SPEEDUP, color="black", linestyle="--", linewidth=1, label=f"target: {TARGET_SPEEDUP}x"
    )
    axes[3].set(ylabel="training steps/s, Aaren / Transformer", title="Training rate, CPU preset (real data)")
    for ax in axes:
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    return _save(fig, report, f"Aaren kernels: {report.get('kernels', 'PyTorch')}", path)


def _save(fig: plt.Figure, report: dict, detail: str, path: str | Path) -> Path:
    """Title the figure with the commit, device and ``detail``, write it to ``path`` and close it."""
    provenance = f"commit {report['commit'][:12]}; " if report.get("commit") else ""
    fig.suptitle(f"{provenance}{report['device']}; {detail}", fontsize=9)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_stream_costs(report: dict, path: str | Path) -> Path:
    """Figure 5: cumulative time and memory of N token-by-token steps, one line per model and form."""
    fig, (time_ax, memory_ax) = plt.subplots(1, 2, figsize=(11, 4.4))
    by_model: dict[str, list[dict]] = {}
    for row in report["stream"]:
        by_model.setdefault(row["model"], []).append(row)
    for name, rows in by_model.items():
        ns = [r["n"] for r in rows]
        (line,) = time_ax.plot(ns, [r["seconds"] for r in rows], marker="o", markersize=3, label=name)
        memory_ax.plot(
            ns, [r["state_bytes"] / 2**20 for r in rows], color=line.get_color(), label=f"{name}: state"
        )
        peaks = [(r["n"], r["peak_bytes"] / 2**20) for r in rows if r["peak_bytes"]]
        if peaks:
            memory_ax.plot(
                *zip(*peaks, strict=True), "--", color=line.get_color(), label=f"{name}: peak growth"
            )
    time_ax.set(
        xscale="log",
        yscale="log",
        xlabel="tokens streamed (N)",
        ylabel="cumulative seconds",
        title="Time of N steps (batch 1)",
    )
    memory_ax.set(
        xscale="log",
        yscale="log",
        xlabel="tokens streamed (N)",
        ylabel="MiB",
        title="Memory: state held, peak resident growth",
    )
    for ax in (time_ax, memory_ax):
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    return _save(fig, report, report["stream_model"], path)
