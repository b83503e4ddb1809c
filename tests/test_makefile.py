"""`make run` on a fresh machine: it says what it is doing before each slow step, pip's install above all."""
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_setup_says_what_it_installs_before_pip_runs(tmp_path):
    # A virtualenv whose python only reports how it was called: pip's steps, without a network or a wait.
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    python = venv / "bin" / "python"
    python.write_text('#!/bin/sh\necho "ran: python $*"\n')
    python.chmod(0o755)
    done = subprocess.run(["make", "--no-print-directory", "setup", f"VENV={venv}"], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stdout.splitlines() if not line.startswith(str(venv))]  # make's echo of commands
    installing = next(index for index, line in enumerate(lines) if line.startswith("installing requirements.txt"))
    pip = next(index for index, line in enumerate(lines) if line.startswith("ran: python -m pip install")
               and "-r requirements.txt" in line)
    assert installing < pip and "the first time" in lines[installing]
    assert lines[pip + 1] == "requirements installed" and (venv / ".installed").exists()
    # Installed once: the next run skips pip and says nothing about it.
    again = subprocess.run(["make", "--no-print-directory", "setup", f"VENV={venv}"], cwd=ROOT, capture_output=True,
                           text=True, timeout=60)
    assert again.returncode == 0 and "pip" not in again.stdout and "installing" not in again.stdout
