"""An elastic job on Docker: a host container that died of anything but a user error (exit 1-3) or the time limit
(5) is started again, at most elastic max_restarts times per host; torchrun in the other containers re-forms the group
with it (operators/launch/docker/launcher.py calls this from its wait)."""

from __future__ import annotations

from typing import Any, Callable, Mapping

from training_runtime.errors import MAX_RUN_EXCEEDED

from operators.launch.base import USER_EXIT_CODES, LaunchRequest, LineCallback


def restart_lost(
    client: Any,
    request: LaunchRequest,
    failed: list[str],
    states: Mapping[str, Mapping[str, Any]],
    restarts: dict[str, int],
    on_line: LineCallback,
    on_restart: Callable[[str], None] | None = None,
) -> bool:
    """Start the failed containers again (`docker start`: the same name, address and job root) and count it in
    `restarts`; False when one may not be (not elastic, a user error or the time limit, its restarts used up): the job
    then fails as without elastic. `on_restart(name)` follows the restarted container's log on."""
    elastic = request.elastic
    if not elastic:
        return False
    limit = int(elastic.get("max_restarts", 0))
    for name in failed:
        code = states[name].get("ExitCode")
        if code in USER_EXIT_CODES or code == MAX_RUN_EXCEEDED:
            return False
        if restarts.get(name, 0) >= limit:
            on_line(f"[docker] elastic: {name} lost again (exit code {code}) after {limit} restart(s): max_restarts "
                    "is used up")
            return False
    for name in failed:
        restarts[name] = restarts.get(name, 0) + 1
        state = states[name]
        why = f"exit code {state.get('ExitCode')}" + (", OOMKilled" if state.get("OOMKilled") else "")
        on_line(f"[docker] elastic: {name} lost ({why}); starting its container again")
        client.start(name)
        if on_restart is not None:
            on_restart(name)
        on_line(f"[docker] elastic: {name} restarted (restart {restarts[name]} of this host, at most {limit}); the "
                "group re-forms with it and resumes from the last checkpoint")
    return True
