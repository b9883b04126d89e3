"""soft_spatial.infra.dirlock.OutputLock against real holders: another process holds it (refused at
once, naming it, nothing created), it ends cleanly (the lock file goes with it) or is SIGKILLed
(the kernel drops the flock; the file left behind is reused and then removed)."""
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from soft_spatial.infra.dirlock import DirLockedError, OutputLock

ROOT = Path(__file__).resolve().parents[2]
HOLD = ("import sys; from soft_spatial.infra.dirlock import OutputLock\n"
        "with OutputLock(sys.argv[1]):\n"
        "    print('held', flush=True); sys.stdin.read()\n")


def _holder(out: Path) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(out)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, cwd=ROOT)
    assert proc.stdout.readline() == "held\n"
    return proc


@pytest.mark.parametrize("ends", ["cleanly", "SIGKILL"])
def test_an_output_lock_refuses_a_second_holder_and_goes_with_the_first(tmp_path, ends):
    out = tmp_path / "export"
    lock = tmp_path / ".export.lock"
    holder = _holder(out)
    try:
        before = sorted(tmp_path.iterdir())
        with pytest.raises(DirLockedError, match=f"export output {out} is in use by pid {holder.pid} "):
            OutputLock(out, "export output").acquire()
        assert sorted(tmp_path.iterdir()) == before == [lock]  # nothing created, OUT neither
        if ends == "cleanly":
            holder.stdin.close()
        else:
            holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=60)
    finally:
        holder.kill()
        holder.wait()
        holder.stdout.close()
        if holder.stdin:
            holder.stdin.close()
    assert lock.exists() == (ends == "SIGKILL")  # a killed holder leaves the file, unlocked
    with OutputLock(out, "export output") as mine:
        assert f"pid {os.getpid()} " in lock.read_text() and mine.subject == out
    assert not lock.exists() and not out.exists()


def test_a_directory_output_that_is_a_file_is_refused_naming_the_setting(tmp_path):
    """Issue 55 item 16: DirLock's mkdir raised a bare FileExistsError (NotADirectoryError under a
    file). `check_dir_path` names the setting; the lock names its output where no caller checked."""
    from soft_spatial.infra.dirlock import DirLock, NotADirectoryOutput, check_dir_path
    (tmp_path / "file").write_text("x")
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    for path, what in ((tmp_path / "file", "is an existing file"),
                       (tmp_path / "file" / "a" / "b", f"lies under {tmp_path / 'file'}, an existing file"),
                       (tmp_path / "dangling", "is an existing file")):
        with pytest.raises(NotADirectoryOutput, match=f"^output_dir={path} {what}, not a directory: "
                                                      f"choose another output_dir"):
            check_dir_path(path, "output_dir")
        with pytest.raises(NotADirectoryOutput, match=f"^training run directory {path} "):
            DirLock(path, "training run directory").acquire()
    check_dir_path(tmp_path / "new" / "deeper", "out")  # to be made: accepted
    check_dir_path(tmp_path, "out")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dangling", "file"]
