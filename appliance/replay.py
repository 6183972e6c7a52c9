"""The `appliance` entry point, with replay of a pure command's answer: `validate`, `render`, `rules` and `profiles`
(not `--host`) print again what they printed last time when nothing they read has changed since.

Their answer is a function of the arguments, the environment, the host's uname and the files they read. A run
records what it read (an audit hook sees every open and directory listing; os.stat, os.lstat and os.access are
wrapped to see existence checks) and what it printed, keyed by the rest. A later run with the same key checks every
recorded file (modules and installed packages by stat, as Python's own bytecode cache does; the appliance's data by
content; directories by their names) and, if all match, replays stdout, stderr and the exit status without
importing pydantic (issue 38, P10: benchmarks/cli_latency.py measures both paths).

A run is not recorded when it writes or removes a file, starts a process, opens a socket, changes directory, reads
stdin, touches the real stream's file descriptor, or ends in anything but exit status 0, 1 or 2."""

from __future__ import annotations

import contextlib
import marshal
import os
import stat
import sys
from typing import Any

from appliance.fastdigest import blake2b

PURE = frozenset({"validate", "render", "rules", "profiles"})
"""Commands whose answer depends only on what the recorder sees. `config` is left out: it reads the host's memory."""
IMPURE_FLAGS = frozenset({"--host"})
"""`profiles --host` probes the GPU and memory through interfaces that no audit event names."""
FORMAT = 1
KEEP = 64
"""Entries kept; the oldest are removed past this (~100 KB each: a command's dependencies, ~560 paths)."""
VOLATILE_ENV = frozenset({"_", "OLDPWD"})
"""Set by the shell per command or directory change; nothing the appliance reads."""
CONTENT_LIMIT = 8 << 20
"""Data files up to this size are compared by content; larger ones by stat."""
REPLAYABLE = (0, 1, 2)
_WRITES = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
_TAINTING = ("subprocess.", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty",
             "socket.", "os.remove", "os.rename", "os.rmdir", "os.mkdir", "os.chmod", "os.chown", "os.truncate",
             "os.utime", "os.symlink", "os.link", "os.kill", "os.chdir", "os.fchdir", "shutil.", "tempfile.",
             "ctypes.", "sqlite3.", "urllib.", "http.client.", "webbrowser.", "os.startfile")


def main() -> int:
    argv = sys.argv[1:]
    command = next((a for a in argv if not a.startswith("-")), None)
    # argparse takes an unambiguous prefix of a flag (`--ho` for `--host`)
    impure = any(len(a) > 3 and flag.startswith(a) for a in argv for flag in IMPURE_FLAGS)
    if command not in PURE or impure or "-" in argv or sys.stdout is None or sys.stderr is None:
        return _run_cli(argv)
    try:
        from appliance.paths import appliance_home

        entry = os.path.join(appliance_home(), "replay", _key(argv) + ".marshal")
    except (OSError, RuntimeError):  # a working folder that is gone, a user without a home: no replay, the command
        return _run_cli(argv)
    replayed = _replay(entry)
    if replayed is not None:
        return replayed
    return _Recorder(argv, entry).run()


def _run_cli(argv: list[str]) -> int:
    from appliance.cli import main as cli_main

    return cli_main(argv)


def _key(argv: list[str]) -> str:
    env = sorted((k, v) for k, v in os.environ.items() if k not in VOLATILE_ENV)
    ttys = tuple(os.isatty(fd) for fd in (0, 1, 2))
    # a table and argparse's help fit the terminal (shutil.get_terminal_size asks the descriptor, unseen by the hook)
    size = tuple(os.get_terminal_size(1)) if ttys[1] else tuple(os.get_terminal_size(2)) if ttys[2] else ()
    basis = (FORMAT, sys.executable, sys.version, tuple(sys.path), tuple(os.uname()), os.getcwd(), argv, env, ttys,
             size)
    return blake2b(marshal.dumps(basis), digest_size=20).hexdigest()


def _loaded_before() -> list[str]:
    """The files of the modules already imported when the recorder starts (this one, appliance.paths, the standard
    library's start-up modules): the hook cannot see their reads, so they are dependencies from the start."""
    return [f for f in (getattr(m, "__file__", None) for m in list(sys.modules.values())) if isinstance(f, str)]


def _stat_signature(path: str, *, follow: bool = True) -> Any:
    try:
        st = os.stat(path) if follow else os.lstat(path)
    except OSError:
        return None
    if stat.S_ISDIR(st.st_mode):
        return ("d", st.st_ino)
    return (stat.S_IFMT(st.st_mode), st.st_size, st.st_mtime_ns, st.st_ino)


def _listing_signature(path: str) -> Any:
    try:
        names = sorted(os.listdir(path))
    except OSError:
        return None
    return blake2b("\0".join(names).encode("utf-8", "surrogateescape")).hexdigest()


def _installed_roots() -> tuple[str, ...]:
    return tuple({os.path.join(p, "") for p in (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix)})


def _read_signature(path: str, roots: tuple[str, ...]) -> Any:
    """An installed package or module by stat (as Python's bytecode cache is checked); anything else (a profile,
    versions.json, a facts file) by content, since an edit within the clock's tick keeps the stat; a file that is not
    regular (a FIFO, a device) by stat alone."""
    sig = _stat_signature(path)
    if sig is None or sig[0] == "d" or not stat.S_ISREG(sig[0]) or sig[1] > CONTENT_LIMIT \
            or path.startswith(roots) or path.endswith((".py", ".pyc", ".so")):
        return sig  # a FIFO or device is never read here: it could block, or be gone
    try:
        with open(path, "rb") as f:
            return blake2b(f.read()).hexdigest()
    except OSError:
        return None


def _signature(kind: str, path: str, roots: tuple[str, ...]) -> Any:
    if kind == "read":
        return _read_signature(path, roots)
    if kind == "list":
        return _listing_signature(path)
    return _stat_signature(path, follow=kind == "stat")


def _replay(entry: str) -> int | None:
    try:
        with open(entry, "rb") as f:
            fmt, deps, chunks, code = marshal.load(f)
    except (OSError, EOFError, ValueError, TypeError):
        return None
    if fmt != FORMAT:
        return None
    roots = _installed_roots()
    for kind, path, sig in deps:
        if _signature(kind, path, roots) != sig:
            return None
    streams = (sys.stdout, sys.stderr)
    try:
        for fd, text in chunks:
            streams[fd - 1].write(text)
        for stream in streams:
            stream.flush()
    except BrokenPipeError:
        # as the CLI does: `appliance render … | head`, the reader left
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    return int(code)


class _Tee:
    """A text stream that passes writes on and keeps them; anything beyond text writes (the binary buffer, the file
    descriptor) makes the run unrecordable."""

    _PLAIN = frozenset({"flush", "isatty", "encoding", "errors", "writable", "closed", "name", "mode", "newlines",
                        "line_buffering", "readable", "seekable"})

    def __init__(self, real: Any, fd: int, recorder: _Recorder) -> None:
        self._real, self._fd, self._recorder = real, fd, recorder

    def write(self, text: str) -> int:
        if self._recorder.recording:
            self._recorder.chunks.append((self._fd, text))
        return self._real.write(text)

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:
        if name not in self._PLAIN:
            self._recorder.taint()
        return getattr(self._real, name)


class _Stdin:
    def __init__(self, real: Any, recorder: _Recorder) -> None:
        self._real, self._recorder = real, recorder

    def __getattr__(self, name: str) -> Any:
        self._recorder.taint()
        return getattr(self._real, name)


class _Recorder:
    def __init__(self, argv: list[str], entry: str) -> None:
        self.argv, self.entry = argv, entry
        self.recording = False
        self.tainted = False
        self.deps: dict[tuple[str, str], Any] = {}
        self.roots = _installed_roots()
        self.chunks: list[tuple[int, str]] = []

    def taint(self) -> None:
        self.tainted = True

    def _note(self, kind: str, path: Any) -> None:
        if isinstance(path, int):  # a descriptor: its path was noted when it was opened
            return
        try:
            path = os.path.abspath(os.fsdecode(path))
        except (TypeError, ValueError):
            self.taint()
            return
        self._sign(kind, path)
        folder, name = os.path.split(path)
        if kind == "read" and name.endswith(".pyc") and os.path.basename(folder) == "__pycache__":
            # the import system checks the bytecode against its source's stat without an audit event: an edited
            # source must miss as it makes Python recompile
            self._sign("stat", os.path.join(os.path.dirname(folder), name.split(".", 1)[0] + ".py"))

    def _sign(self, kind: str, path: str) -> None:
        """A dependency's signature when the command first meets it (the recorder's own reads unrecorded): the save
        signs it again, and a file that changed in between (an editor's save during the run) makes the run
        unrecordable, since what was printed may follow either version."""
        if (kind, path) in self.deps:
            return
        was, self.recording = self.recording, False
        try:
            self.deps[(kind, path)] = _signature(kind, path, self.roots)
        finally:
            self.recording = was

    def _hook(self) -> Any:
        """The audit hook: called for every audited operation (thousands per command: each compile, exec, id()),
        so a closure over locals and one dict lookup decide; an event's class is worked out once."""
        events: dict[str, str] = {}
        note, taint = self._note, self.taint

        def audit(event: str, args: tuple[Any, ...]) -> None:
            what = events.get(event)
            if what is None:
                what = events[event] = ("open" if event == "open" else "list" if event in ("os.listdir", "os.scandir")
                                        else "taint" if event.startswith(_TAINTING) else "")
            if not what or not self.recording:
                return
            if what == "open":
                path, mode, flags = args
                if (mode is not None and any(c in mode for c in "wax+")) or (mode is None and flags & _WRITES):
                    taint()
                else:
                    note("read", path)
            elif what == "list":
                note("list", args[0] if args[0] is not None else ".")
            else:
                taint()

        return audit

    def _watch(self, name: str, kind: str) -> Any:
        real = getattr(os, name)

        def watched(path: Any, *args: Any, **kwargs: Any) -> Any:
            if self.recording:
                if kwargs.get("dir_fd") is not None:  # relative to a descriptor: not a path to check again
                    self.taint()
                else:
                    self._note("lstat" if kwargs.get("follow_symlinks") is False else kind, path)
            return real(path, *args, **kwargs)

        setattr(os, name, watched)
        return real

    def run(self) -> int:
        sys.addaudithook(self._hook())
        stats = {name: self._watch(name, kind) for name, kind in (("stat", "stat"), ("lstat", "lstat"),
                                                                   ("access", "stat"))}
        streams = sys.stdout, sys.stderr, sys.stdin
        sys.stdout, sys.stderr = _Tee(streams[0], 1, self), _Tee(streams[1], 2, self)  # type: ignore[assignment]
        sys.stdin = _Stdin(streams[2], self)  # type: ignore[assignment]
        for path in _loaded_before():
            self._note("read", path)
        self.recording = True
        code: Any = None
        try:
            code = _run_cli(self.argv)
        except SystemExit as exc:
            code = exc.code if exc.code is not None else 0
            raise
        finally:
            self.recording = False
            sys.stdout, sys.stderr, sys.stdin = streams
            for name, real in stats.items():
                setattr(os, name, real)
            if not self.tainted and type(code) is int and code in REPLAYABLE:
                self._save(code)
        return code

    def _save(self, code: int) -> None:
        deps = [(kind, path, sig) for (kind, path), sig in self.deps.items()]
        if any(_signature(kind, path, self.roots) != sig for kind, path, sig in deps):
            return  # a file changed while the command ran
        from appliance.redact import redact

        # the output passed the one redaction; a path or an argument could carry a secret (a token as a profile
        # name): such a run is not written down
        said = "\n".join([*self.argv, *(path for _, path, _ in deps), *(text for _, text in self.chunks)])
        if redact(said) != said:
            return
        folder = os.path.dirname(self.entry)
        temp = f"{self.entry}.{os.getpid()}.tmp"
        try:
            os.makedirs(folder, mode=0o700, exist_ok=True)
            with open(os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb") as f:
                marshal.dump((FORMAT, deps, self.chunks, code), f)
            os.replace(temp, self.entry)
            _prune(folder)
        except OSError:  # a read-only or full home: the answer was given, only its replay is lost
            with contextlib.suppress(OSError):
                os.unlink(temp)


def _prune(folder: str) -> None:
    entries = [e for e in os.scandir(folder) if e.name.endswith(".marshal")]
    if len(entries) <= KEEP:
        return
    entries.sort(key=lambda e: e.stat().st_mtime_ns)
    for old in entries[:len(entries) - KEEP]:
        with contextlib.suppress(OSError):
            os.unlink(old.path)
