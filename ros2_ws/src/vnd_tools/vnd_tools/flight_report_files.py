"""The files of a flight report: ``report.json``, the ``report.md`` summary table and the
``report.png`` figure, written from a :class:`~vnd_tools.flight_report.FlightReport`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from vnd_core.recovery import WINDOW_S, moving_rmse

from vnd_tools import flight_report
from vnd_tools.flight_report import FlightReport

if TYPE_CHECKING:
    from matplotlib.axes import Axes


def write_json(report: FlightReport, path: Path) -> Path:
    """report.json (strict JSON: no NaN)."""
    path.write_text(json.dumps(report.data, indent=2, allow_nan=False) + "\n")
    return path


def summary_table(data: dict[str, Any]) -> str:
    """The per-phase table and the headline figures, as plain text."""
    lines = [
        f"{'phase':<10} {'start s':>8} {'end s':>8} {'RMSE m':>8} {'recovery s':>11} "
        f"{'settled m':>10}"
    ]
    for p in data["phases"]:
        lines.append(
            f"{p['name']:<10} {p['start_s']:>8.1f} {p['end_s']:>8.1f} "
            f"{_fmt(p['rmse_m'], 4):>8} {_fmt(p['recovery_s'], 2):>11} "
            f"{_fmt(p.get('steady_rmse_m'), 4):>10}"
        )
    imp = data.get("improvement")
    if imp:
        change = imp["reduction"]
        word = "lower" if change >= 0 else "higher"
        lines.append(
            f"{imp['phase']} again vs first: RMSE {_fmt(imp['last_rmse_m'], 4)} m vs "
            f"{_fmt(imp['first_rmse_m'], 4)} m ({100 * abs(change):.0f}% {word})"
        )
    for key, label in (("against_base", "the base bundle"), ("against_start", "the start bundle")):
        for row in data.get(key) or []:
            change = row["reduction"]
            word = "lower" if change >= 0 else "higher"
            lines.append(
                f"{row['phase']} (last, from {row['start_s']:.0f} s) vs {label}: RMSE "
                f"{_fmt(row['rmse_m'], 4)} m vs {_fmt(row['base_rmse_m'], 4)} m "
                f"({100 * abs(change):.0f}% {word})"
            )
    lat = data["control_latency_ms"]
    lines.append(
        f"control latency p50 {_fmt(lat['p50'], 3)} ms, p99 {_fmt(lat['p99'], 3)} ms "
        f"({lat['samples']} ticks); missed ticks {data['missed_ticks']}"
    )
    host = data.get("host_cpu") or {}
    if host.get("sampled"):
        lines.append(_host_line(host))
    stalls = data.get("host_stalls") or {}
    if stalls.get("probed") and stalls.get("probe"):
        lines.append(_stall_line(stalls))
    forces = data.get("force_input")
    if forces:
        per_phase = ", ".join(
            f"{f['name']} {_fmt(f['read_n'], 2)} / {_fmt(f['true_n'], 2)} N "
            f"(RMS difference {_fmt(f['rms_difference_n'], 2)} N)"
            for f in forces
            if f["samples"]
        )
        lines.append(f"force observer, estimate / true, mean magnitude: {per_phase}")
    updates = data["model_updates"]
    pushes = ", ".join(
        f"v{u['version']}{' (policy)' if u.get('kind') == 'policy' else ''} decided "
        f"{_fmt(u['decided_s'], 1)} s active {_fmt(u['active_s'], 1)} s"
        for u in updates
    )
    improved = sum(u.get("kind") == "policy" for u in updates)
    lines.append(
        f"new bundles: {len(updates)} ({len(updates) - improved} model updates, {improved} "
        "policy-only)" + (f": {pushes}" if pushes else "")
    )
    if data.get("vehicle_crashed"):
        lines.append(
            "WARNING: the simulated vehicle crashed (reported at scenario time "
            f"{_fmt(data.get('crash_reported_s'), 1)} s): later phases do not measure control"
        )
    if data.get("model_push_median_s") is not None:
        lines.append(
            f"model push median (decision -> active in both nodes): "
            f"{data['model_push_median_s']:.3f} s"
        )
    return "\n".join(lines)


def _host_line(host: dict[str, Any]) -> str:
    """The host's steal and the control latency in windows with and without it."""
    quiet, steal = host["quiet"], host["steal"]
    window = f"{host['window_s']:.0f}-s windows"
    return (
        f"host CPU steal {100 * host['steal_fraction']:.1f}% of the flight; "
        f"{window} with < {100 * host['quiet_below_steal']:.0f}% steal: {quiet['windows']}, "
        f"p99 {_fmt(quiet['p99_ms'], 3)} ms, {quiet['late_ticks']} late ticks; "
        f"others (steal up to {_fmt_pct(steal['max_steal'])}): {steal['windows']}, "
        f"p99 {_fmt(steal['p99_ms'], 3)} ms, {steal['late_ticks']} late ticks; "
        f"late ticks during steal: {host['late_ticks_during_steal']} of {host['late_ticks']}"
    )


def _stall_line(stalls: dict[str, Any]) -> str:
    """What the per-CPU probe saw the host take, and how many late ticks it explains."""
    lost = ", ".join(
        f"CPU {cpu} {cpu_stats['stall_total_ms']:.0f} ms in {cpu_stats['stalls']} "
        f"(longest {cpu_stats['longest_ms']:.1f} ms)"
        for cpu, cpu_stats in stalls["probe"].items()
    )
    line = (
        f"host stalls (per-CPU SCHED_FIFO 99 probe, wake-ups >= 1 ms late): {lost}; "
        f"policy ticks > 1.5 periods apart: {stalls['late_ticks']}, "
        f"{stalls['late_ticks_with_host_stall']} with the host taking a CPU for at least half "
        "the delay"
    )
    if "late_ticks_stack" not in stalls or "foreign_realtime_processes" not in stalls:
        return line
    foreign = stalls["foreign_realtime_processes"]
    busiest = "; ".join(
        f"pid {p['pid']} FIFO/RR {p['priority']} {p['cpu_s']:.1f} s CPU ({p['command'][:60]})"
        for p in foreign[:3]
    )
    return (
        f"{line}, {stalls['late_ticks_with_foreign_realtime']} with other processes' real-time "
        f"threads taking as much CPU, {stalls['late_ticks_stack']} the stack's own; other "
        f"real-time processes: {busiest or 'none'}"
    )


def _fmt_pct(share: float | None) -> str:
    return "-" if share is None else f"{100 * share:.1f}%"


def _fmt(value: float | None, digits: int) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def write_markdown(report: FlightReport, path: Path, title: str) -> Path:
    """report.md: the summary table, the definitions and the figure."""
    data = report.data
    definitions = (flight_report.__doc__ or "").split(
        "Definitions (also written into report.md):", 1
    )[-1]
    text = [
        f"# {title}",
        "",
        "```",
        summary_table(data),
        "```",
        "",
        f"Latency method: {data['control_latency_ms']['method']}",
        "",
        "## Definitions",
        "",
        "\n".join(
            line.strip() if not line.startswith("  ") else line[2:]
            for line in definitions.strip().splitlines()
        ),
        "",
        "![position error, phases, model updates and latent trajectory](report.png)",
        "",
    ]
    path.write_text("\n".join(text))
    return path


def plot_report(report: FlightReport, path: Path, title: str) -> Path:
    """report.png: position error over time with phases shaded and model updates marked;
    latent trajectory (PCA of z) coloured by phase."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    data = report.data
    names = list(dict.fromkeys(p["name"] for p in data["phases"]))
    colours = {name: plt.get_cmap("tab10")(i) for i, name in enumerate(names)}
    fig, (ax_err, ax_z) = plt.subplots(
        2, 1, figsize=(11, 9), gridspec_kw={"height_ratios": [1.0, 1.1]}
    )
    _plot_error(ax_err, report, colours)
    _plot_latents(ax_z, report, colours)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _plot_error(ax: Axes, report: FlightReport, colours: dict[str, Any]) -> None:
    data = report.data
    for phase in data["phases"]:
        ax.axvspan(phase["start_s"], phase["end_s"], color=colours[phase["name"]], alpha=0.12)
        ax.text(
            (phase["start_s"] + phase["end_s"]) / 2,
            0.98,
            phase["name"],
            transform=ax.get_xaxis_transform(),
            ha="center",
            va="top",
            fontsize=9,
        )
    if len(report.error_t_s):
        ax.plot(report.error_t_s, report.error_m, lw=0.6, color="0.4", label="|p - p_ref|")
        ax.plot(
            report.error_t_s,
            moving_rmse(report.error_t_s, report.error_m, WINDOW_S),
            lw=1.4,
            color="C3",
            label="1-s moving RMSE",
        )
    for update in data["model_updates"]:
        if update["active_s"] is not None:
            ax.axvline(update["active_s"], color="C2", lw=1.0, ls="--")
            ax.text(
                update["active_s"],
                0.88,
                f" v{update['version']}",
                color="C2",
                transform=ax.get_xaxis_transform(),
                fontsize=8,
            )
    if data.get("crash_reported_s") is not None:
        ax.axvline(data["crash_reported_s"], color="k", lw=1.5)
        ax.text(
            data["crash_reported_s"],
            0.78,
            " crash reported",
            transform=ax.get_xaxis_transform(),
            fontsize=8,
        )
    forces = [
        (report.disturbance_t_s, report.disturbance_n, "-", "C0", "|disturbance force|"),
        (
            report.force_input_t_s,
            report.force_input_n,
            "--",
            "C1",
            "|force the observer estimated|",
        ),
    ]
    shown = [force for force in forces if len(force[0])]
    twin = ax.twinx() if shown else None
    for t_s, force_n, style, colour, label in shown:
        assert twin is not None  # made when anything is shown
        twin.plot(
            t_s,
            np.linalg.norm(force_n, axis=1),
            lw=0.8,
            ls=style,
            color=colour,
            alpha=0.7,
            label=label,
        )
    if twin is not None:
        twin.set_ylabel("external force [N]", color="C0")
    ax.set_xlabel("scenario time [s]")
    ax.set_ylabel("position error [m]")
    ax.set_title("tracking error (dashed green: model update active in encoder and policy)")
    handles, labels = ax.get_legend_handles_labels()
    if twin is not None:
        more_handles, more_labels = twin.get_legend_handles_labels()
        handles, labels = handles + more_handles, labels + more_labels
    # below the axes: phase labels and model-update markers stay readable
    ax.legend(
        handles,
        labels,
        loc="upper center",
        bbox_to_anchor=(0.5, -0.14),
        ncol=3,
        fontsize=8,
        frameon=False,
    )


def _plot_latents(ax: Axes, report: FlightReport, colours: dict[str, Any]) -> None:
    z = report.latent_z
    if len(z) < 3:
        ax.text(0.5, 0.5, "no valid latents recorded", ha="center", transform=ax.transAxes)
        return
    centred = z - z.mean(axis=0)
    _, singular, vt = np.linalg.svd(centred, full_matrices=False)
    pcs = centred @ vt[:2].T
    explained = singular[:2] ** 2 / max(float(np.sum(singular**2)), 1e-12)
    phases = report.data["phases"]
    for index, phase in enumerate(phases):
        inside = (report.latent_t_s >= phase["start_s"]) & (report.latent_t_s < phase["end_s"])
        label = phase["name"] if phase["name"] not in [p["name"] for p in phases[:index]] else None
        ax.scatter(
            pcs[inside, 0],
            pcs[inside, 1] if pcs.shape[1] > 1 else 0 * pcs[inside, 0],
            s=3,
            color=colours[phase["name"]],
            alpha=0.5,
            label=label,
        )
    ax.set_xlabel(f"PC1 ({100 * explained[0]:.0f}% var)")
    if len(explained) > 1:
        ax.set_ylabel(f"PC2 ({100 * explained[1]:.0f}% var)")
    ax.set_title("latent trajectory: PCA of z over the flight, coloured by phase")
    ax.legend(markerscale=4, fontsize=8)
