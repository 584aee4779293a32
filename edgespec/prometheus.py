"""`GET /metrics`: a serving engine's counters and gauges in Prometheus' text format."""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .batch import BatchEngine


def text(e: BatchEngine | None) -> str:
    """The metrics of a server's engine (None while it loads) in Prometheus' text format."""
    m = e.metrics if e is not None else {}
    lines = []

    def put(name, kind, help_, samples):
        lines.append(f"# HELP edgespec_{name} {help_}")
        lines.append(f"# TYPE edgespec_{name} {kind}")
        for labels, value in samples:
            lines.append(f"edgespec_{name}{labels} {value}")

    put("requests_total", "counter", "Requests accepted.", [("", m.get("requests", 0))])
    put("prompt_tokens_total", "counter", "Prompt tokens of accepted requests.", [("", m.get("prompt_tokens", 0))])
    put("generated_tokens_total", "counter", "Tokens generated.", [("", m.get("generated_tokens", 0))])
    put("drafted_tokens_total", "counter", "Tokens proposed, by proposer.",
        [(f'{{proposer="{p}"}}', m.get(f"drafted_{p}", 0)) for p in ("draft", "lookup", "grammar")])
    put("accepted_tokens_total", "counter", "Proposed tokens the target accepted, by proposer.",
        [(f'{{proposer="{p}"}}', m.get(f"accepted_{p}", 0)) for p in ("draft", "lookup", "grammar")])
    drafted = sum(m.get(f"drafted_{p}", 0) for p in ("draft", "lookup", "grammar"))
    accepted = sum(m.get(f"accepted_{p}", 0) for p in ("draft", "lookup", "grammar"))
    put("acceptance_rate", "gauge", "Accepted over proposed tokens.", [("", accepted / drafted if drafted else 0)])
    spec_rounds = m.get("rounds_speculative", 0)
    put("mean_accepted_length", "gauge", "Accepted tokens per speculative round.",
        [("", accepted / spec_rounds if spec_rounds else 0)])
    put("rounds_total", "counter", "Sequence rounds, speculative or plain, by why.",
        [(f'{{reason="{k[len("rounds_reason_"):]}"}}', v) for k, v in sorted(m.items())
         if k.startswith("rounds_reason_")])
    put("rounds_speculative_total", "counter", "Sequence rounds that verified drafted tokens.", [("", spec_rounds)])
    put("rounds_plain_total", "counter", "Sequence rounds without drafted tokens.", [("", m.get("rounds_plain", 0))])
    put("active_sequences", "gauge", "Sequences being generated.", [("", e.n_active if e else 0)])
    put("queued_requests", "gauge", "Requests waiting for a sequence.", [("", e.n_queued if e else 0)])
    steps = m.get("steps", 0)
    put("steps_total", "counter", "Target decodes (one per step, all sequences' rows).", [("", steps)])
    put("batch_rows_total", "counter", "Rows in all target decodes.", [("", m.get("batch_rows", 0))])
    put("batch_rows_last", "gauge", "Rows in the last target decode.", [("", m.get("last_batch_rows", 0))])
    put("step_seconds_total", "counter", "Time in steps (decide, draft, decode, verify).", [("", m.get("step_s", 0.0))])
    put("decide_seconds_total", "counter", "Time spent choosing each sequence's draft length.",
        [("", m.get("decide_s", 0.0))])
    put("phase_seconds_total", "counter", "Time in steps by phase: decide (draft lengths), draft (proposals), verify "
        "(the target's decode; over rpc-servers the network waits are inside it), accept.",
        [(f'{{phase="{p}"}}', m.get(f"{p}_s", 0.0)) for p in ("decide", "draft", "verify", "accept")])
    put("rpc_servers", "gauge", "rpc-servers the target is split over (0: all on this machine).",
        [("", len(e.model.rpc) if e is not None else 0)])
    put("prompt_rows_total", "counter", "Prompt tokens decoded within steps, beside the sequences' rows.",
        [("", m.get("prompt_rows", 0))])
    return "\n".join(lines) + "\n"
