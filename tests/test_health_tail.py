"""The incremental tailer: whole lines only, partial lines held back, rotation and truncation safe,
bounded chunks whatever the size of the log."""

from __future__ import annotations

import os
from pathlib import Path

from appliance.health.tail import LogTailer


def read(tailer: LogTailer) -> bytes:
    return b"".join(tailer.poll())


def append(path: Path, data: bytes) -> None:
    with path.open("ab") as f:
        f.write(data)


def test_a_missing_log_reads_as_nothing_until_it_appears(tmp_path):
    log = tmp_path / "vllm.log"
    tailer = LogTailer(log)
    assert read(tailer) == b""
    append(log, b"one\n")
    assert read(tailer) == b"one\n"


def test_only_new_whole_lines_are_returned_and_a_partial_line_waits_for_its_newline(tmp_path):
    log = tmp_path / "vllm.log"
    append(log, b"one\ntw")
    tailer = LogTailer(log)
    assert read(tailer) == b"one\n"
    assert read(tailer) == b""
    append(log, b"o\nthr")
    assert read(tailer) == b"two\n"
    append(log, b"ee\n")
    assert read(tailer) == b"three\n"


def test_pending_shows_the_line_still_being_drawn_and_leaves_it_to_arrive_whole(tmp_path):
    """A progress bar (tqdm redraws with \r, no newline until it closes): what the start-up tracker reads live."""
    log = tmp_path / "vllm.log"
    tailer = LogTailer(log)
    assert tailer.pending == b""
    append(log, b"start\nshards:  10% | 1/10\r")
    assert read(tailer) == b"start\n"
    assert tailer.pending == b"shards:  10% | 1/10\r"
    append(log, b"shards:  50% | 5/10\r")
    assert read(tailer) == b"" and tailer.pending.endswith(b"5/10\r")
    append(log, b"shards: 100% | 10/10\n")
    assert read(tailer) == b"shards:  10% | 1/10\rshards:  50% | 5/10\rshards: 100% | 10/10\n"
    assert tailer.pending == b""


def test_flush_returns_the_last_line_of_a_finished_file_without_a_newline(tmp_path):
    log = tmp_path / "vllm.log"
    log.write_bytes(b"a\nlast")
    tailer = LogTailer(log)
    assert read(tailer) == b"a\n"
    assert tailer.flush() == b"last"


def test_truncation_restarts_at_the_beginning(tmp_path):
    log = tmp_path / "vllm.log"
    log.write_bytes(b"old line 1\nold line 2\n")
    tailer = LogTailer(log)
    read(tailer)
    log.write_bytes(b"new\n")  # `>` on restart: smaller than our offset
    assert read(tailer) == b"new\n"
    assert tailer.truncations == 1


def test_a_copytruncate_that_regrew_past_our_offset_is_still_seen_as_new_content(tmp_path):
    log = tmp_path / "vllm.log"
    log.write_bytes(b"first run line\n")
    tailer = LogTailer(log)
    read(tailer)
    log.write_bytes(b"second run, a longer first line\nand more\n")  # same inode, size > old offset
    assert read(tailer) == b"second run, a longer first line\nand more\n"
    assert tailer.truncations == 1


def test_rotation_reads_the_old_file_to_its_end_then_the_new_one_from_its_start(tmp_path):
    log = tmp_path / "vllm.log"
    log.write_bytes(b"a\n")
    tailer = LogTailer(log)
    assert read(tailer) == b"a\n"
    append(log, b"b\nunfinished")
    os.rename(log, tmp_path / "vllm.log.1")  # supervisord / logrotate rename
    log.write_bytes(b"c\n")
    assert read(tailer) == b"b\nunfinished\nc\n"
    assert tailer.rotations == 1
    append(log, b"d\n")
    assert read(tailer) == b"d\n"


def test_a_log_removed_without_a_successor_keeps_the_old_handle_until_one_appears(tmp_path):
    log = tmp_path / "vllm.log"
    log.write_bytes(b"a\n")
    tailer = LogTailer(log)
    read(tailer)
    log.unlink()
    assert read(tailer) == b""
    log.write_bytes(b"fresh\n")
    assert read(tailer) == b"fresh\n"


def test_chunks_are_bounded_whatever_the_log_size(tmp_path):
    log = tmp_path / "vllm.log"
    line = b"x" * 99 + b"\n"
    log.write_bytes(line * 50_000)  # 5 MB
    tailer = LogTailer(log, chunk_size=64 * 1024, max_line=4096)
    sizes = [len(c) for c in tailer.poll()]
    assert sum(sizes) == 5_000_000
    assert max(sizes) <= 64 * 1024 + 4096
    assert all(c % 100 == 0 for c in sizes)  # whole lines only


def test_an_endless_line_is_passed_on_in_pieces_instead_of_buffered_without_bound(tmp_path):
    log = tmp_path / "vllm.log"
    log.write_bytes(b"y" * 100_000)
    tailer = LogTailer(log, chunk_size=8192, max_line=16384)
    chunks = list(tailer.poll())
    assert chunks and max(len(c) for c in chunks) <= 8192 + 16384 + 1
    assert len(tailer.flush()) <= 16384
