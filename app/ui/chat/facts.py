"""The quiet line under each answer: what the reply cost and how it ended.

Plain text from a reply's stats dict (:class:`~models.engine.ChatStats` fields, as the
conversation store keeps them), so it reads the same live and after reopening.
"""

from __future__ import annotations

from typing import Optional

# Why a reply ended, when it is worth saying; "crashed" is the GUI's own marker for a
# reply cut short by the engine process dying.
_ENDINGS = {"cancelled": "stopped", "length": "hit the token limit",
            "context_full": "context full", "crashed": "cut short: the engine crashed"}


def facts_line(stats: Optional[dict]) -> str:
    """``"0.21 s to first token · prefill 812 tok/s · decode 64.0 tok/s · 96 tokens (40
    thinking) · …"``."""
    if not stats:
        return ""
    parts = []
    ending = _ENDINGS.get(stats.get("stop_reason", ""))
    if stats.get("stop_reason") == "crashed":
        return ending
    if stats.get("time_to_first_token"):
        parts.append(f"{stats['time_to_first_token']:.2f} s to first token")
    if stats.get("prefill_tokens_per_second"):
        parts.append(f"prefill {stats['prefill_tokens_per_second']:,.0f} tok/s")
    if stats.get("decode_tokens_per_second"):
        parts.append(f"decode {stats['decode_tokens_per_second']:,.1f} tok/s")
    tokens = f"{stats.get('completion_tokens', 0):,} tokens"
    if stats.get("reasoning_tokens"):
        tokens += f" ({stats['reasoning_tokens']:,} thinking)"
    parts.append(tokens)
    reused = stats.get("prompt_tokens_reused", 0)
    if stats.get("session_restored"):
        parts.append(f"restored {reused:,} tokens from disk")
    elif reused:
        parts.append(f"reused {reused:,} cached tokens")
    images, encoded = stats.get("images", 0), stats.get("images_encoded", 0)
    if images:
        word = "picture" if images == 1 else "pictures"
        parts.append(f"{images} {word}, {encoded} encoded in {stats.get('image_encode_seconds', 0.0):.2f} s"
                     if encoded else f"{images} {word} from the cache")
    if stats.get("session_notice"):
        parts.append(stats["session_notice"].rstrip("."))
    if stats.get("draft_tokens"):
        parts.append(f"speculative: {stats.get('accepted_tokens', 0)}/{stats['draft_tokens']} "
                     f"accepted ({stats.get('acceptance_rate', 0):.0%})")
    if stats.get("valid") is not None:
        parts.append("valid JSON" if stats["valid"] else "invalid JSON")
        if stats.get("closed_at_budget"):
            parts.append("closed at the token budget")
    if ending:
        parts.append(ending)
    return " · ".join(parts)
