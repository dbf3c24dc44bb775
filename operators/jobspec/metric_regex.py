"""The metric expressions of a spec (`metric_definitions[].Regex`), compiled by RE2 (PyPI `google-re2`).

Why RE2, not Python's `re`: an expression is the tenant's and the worker (or the triggerer) runs it against every
line of the job's log. `re` backtracks: `(?:a+)+(\\d)` against a 27-character line held a CPU for 16 s, each added
character doubling it, and the launch loop could check nothing meanwhile. RE2 never backtracks: a search costs time
linear in the text (times the expression's size), whatever the expression. Its syntax is the one SageMaker's
examples use (`loss: ([0-9\\.]+)`, `Train_loss=(.*?);`, `\\d`, `\\s`, `(?P<name>...)`, `(?i)`); what only a
backtracking engine can do (lookaround, backreferences, possessive quantifiers) is refused in validate_spec with
one line naming the field.

The bounds the matching keeps (operators/tracking/metrics.py applies them; docs/templates.md says them):
- MAX_LINE_CHARS: a line is matched in its first 4096 characters (the rest is shown in the log, not matched);
- MAX_MATCHES_PER_LINE: at most 16 values per definition and line (each further search would scan the rest of the
  line again: 16 bound a line's cost to 16 scans of it);
- MAX_PROGRAM_BYTES: each expression's compiled program and its DFA cache take at most 1 MiB of the worker's memory
  (64 definitions: 64 MiB); an expression too large for that is refused.
"""

from __future__ import annotations

import re2

MAX_LINE_CHARS = 4096
MAX_MATCHES_PER_LINE = 16
MAX_PROGRAM_BYTES = 1 << 20
SYNTAX_URL = "https://github.com/google/re2/wiki/Syntax"

Pattern = re2._Regexp  # what compile_metric_regex returns (the module names no public class for it)


class MetricRegexError(ValueError):
    """An expression RE2 cannot compile (or that has no capture group); the message says why, in one line."""


def _options() -> re2.Options:
    options = re2.Options()
    options.max_mem = MAX_PROGRAM_BYTES
    options.log_errors = False  # RE2 would print the tenant's expression to the worker's stderr
    return options


def compile_metric_regex(expression: str) -> Pattern:
    """The compiled expression; MetricRegexError when RE2 cannot compile it or it captures nothing."""
    try:
        pattern = re2.compile(expression, _options())
    except re2.error as err:
        reason = err.args[0] if err.args else "invalid expression"
        if isinstance(reason, bytes):
            reason = reason.decode("utf-8", "replace")
        if "too large" in reason:
            raise MetricRegexError(f"is too large for the metric engine (RE2, at most {MAX_PROGRAM_BYTES >> 20} "
                                   "MiB compiled): use fewer or smaller repetitions") from None
        raise MetricRegexError(f"RE2 cannot compile it ({reason}): metric expressions run on RE2, in linear time, "
                               f"so lookaround and backreferences are not available (syntax: {SYNTAX_URL})") from None
    if pattern.groups < 1:
        raise MetricRegexError("needs one capture group holding the value, e.g. loss=([0-9.]+)")
    return pattern
