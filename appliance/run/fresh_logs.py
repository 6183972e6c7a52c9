"""Each `appliance run` starts its programs' logs empty; the previous run's are kept beside them.

supervisord appends to a log that is already there, and a run folder is reused from run to run (the default is
`$APPLIANCE_HOME/run/<profile>`, a container's is a volume). Left so, the log tail (`tail -n +1 -F`) would print
every earlier run to stdout again at each start, up to the engine log's 200 MB cap, and the exporter would read
the earlier runs before this one's first line. So, just before supervisord starts, each program's log moves aside
under the names supervisord's own size rotation gives it (`vllm.log` -> `vllm.log.1` -> `vllm.log.2`), as many as
it keeps (render/supervisord.py, LOG_BACKUPS); the oldest goes.
"""

from __future__ import annotations

import os
from pathlib import Path

from appliance.errors import ApplianceError
from appliance.render.supervisord import LOG_BACKUPS, RunFiles


def start_fresh_logs(files: RunFiles, field: str = "--run-dir") -> list[Path]:
    """Move each program's log in `files`' run folder aside (see the module). Returns the logs that held an earlier
    run, each now at `<log>.1`. ApplianceError naming `field` and the path when one cannot be moved."""
    moved: list[Path] = []
    for program, backups in LOG_BACKUPS.items():
        log = files.program_log(program)
        if not log.exists():
            continue
        try:
            for n in range(backups - 1, 0, -1):
                older = _backup(log, n)
                if older.exists():
                    os.replace(older, _backup(log, n + 1))
            os.replace(log, _backup(log, 1))
        except OSError as exc:
            raise ApplianceError(
                f"{field}: cannot move the last run's log {log} aside: {exc.strerror}", field=field, value=str(log),
                fix=f"make the run folder {files.run_dir} writable by this user, or point {field} at another",
                reason="each run starts its own log, so the log tail and the exporter read this run only",
            ) from None
        moved.append(log)
    return moved


def _backup(log: Path, n: int) -> Path:
    return log.with_name(f"{log.name}.{n}")
