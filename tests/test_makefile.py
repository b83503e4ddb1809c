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


def test_make_test_checks_the_layers_and_the_types_before_pytest(tmp_path):
    # make -n prints the recipe without running it: the checks CI relies on come first, so an upward
    # import or a type error fails the build before the suite runs.
    done = subprocess.run(["make", "--no-print-directory", "-n", "test", f"VENV={tmp_path / 'venv'}"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    layers = next(index for index, line in enumerate(lines) if line.endswith("/bin/lint-imports --no-cache"))
    types = next(index for index, line in enumerate(lines) if line.endswith("/bin/mypy --config-file mypy.ini"))
    tests = next(index for index, line in enumerate(lines) if " -m pytest" in line)
    assert layers < types < tests
    assert (ROOT / "mypy.ini").exists()


def test_make_test_fast_runs_the_same_checks_and_leaves_out_only_the_marked_slow_tests(tmp_path):
    done = subprocess.run(["make", "--no-print-directory", "-n", "test-fast", f"VENV={tmp_path / 'venv'}"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert any(line.endswith("/bin/lint-imports --no-cache") for line in lines)
    assert any(line.endswith("/bin/mypy --config-file mypy.ini") for line in lines)
    [pytest_line] = [line for line in lines if " -m pytest" in line]
    left_out = pytest_line.split('-m "', 1)[1].split('"')[0]
    markers = left_out.replace("not ", "").split(" and ")
    assert markers == ["browser", "faults", "served", "slow"]
    declared = (ROOT / "pytest.ini").read_text()
    assert all(f"\n    {marker}: " in declared for marker in markers)
