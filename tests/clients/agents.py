"""The command-line agents the suite drives: where each is installed, how it is pointed at a base URL with a
key, and the one tool of its own the tool round trip makes it call.

Each runs unchanged, from npm at a pinned version, in a temporary home and working directory of its own,
with its telemetry, update checks and other traffic off (the machine may reach the package registries and
nothing else) and its own non-interactive "yes" to running tools."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

REPO = Path(__file__).resolve().parents[2]
INSTALL_ROOT = REPO / ".clients"
LOCKS = Path(__file__).resolve().parent / "npm"
MODEL = "local-chat"
RUN_SECONDS = 150


@dataclass(frozen=True)
class Outcome:
    """One run of a client: its exit status, output and how long it took."""

    returncode: int
    stdout: str
    stderr: str
    seconds: float

    def describe(self) -> str:
        return f"exit {self.returncode} after {self.seconds:.1f}s\n--- stdout\n{self.stdout[-3000:]}\n" \
               f"--- stderr\n{self.stderr[-3000:]}"


@dataclass(frozen=True)
class Cli:
    """One agent CLI: its npm package at a pinned version and how it is run."""

    name: str
    package: str
    version: str
    binary: str
    tool: str  # the client's own tool the round trip asks for (the name it sends in `tools`)
    command: Callable[["Cli", str, str, Path], tuple[list[str], dict[str, str]]]
    # opencode joins its message arguments, quoting each that holds a space: the prompt goes word by word, as
    # a user types it on the command line.
    prompt_in_words: bool = False

    @property
    def prefix(self) -> Path:
        return INSTALL_ROOT / f"{self.name}-{self.version}"

    @property
    def executable(self) -> Path:
        return self.prefix / "node_modules" / ".bin" / self.binary

    @property
    def installed_version(self) -> str | None:
        manifest = self.prefix / "node_modules" / self.package / "package.json"
        try:
            return str(json.loads(manifest.read_text())["version"])
        except (OSError, ValueError, KeyError):
            return None

    @property
    def lock(self) -> Path:
        """The committed package.json and package-lock.json this version installs from."""
        return LOCKS / f"{self.name}-{self.version}"

    def install(self) -> None:
        """Installs the pinned version into its own prefix (nothing to do when it is already there): `npm ci`
        from the committed lock file, so every run gets the same dependency tree. A version without a lock
        yet (a bump) is installed by `npm install --save-exact` and its new lock file kept for committing."""
        if self.installed_version == self.version and self.executable.exists():
            return
        self.prefix.mkdir(parents=True, exist_ok=True)
        npm = ["npm", "--no-audit", "--no-fund", "--loglevel=error"]
        if (self.lock / "package-lock.json").exists():
            for name in ("package.json", "package-lock.json"):
                shutil.copyfile(self.lock / name, self.prefix / name)
            done = subprocess.run([*npm, "ci"], cwd=self.prefix, capture_output=True, text=True, timeout=900)
            if done.returncode != 0:
                # npm ci refuses a lock that does not list every platform's optional package, which npm leaves
                # out when the registry lacks one (opencode's); `npm install` then takes the same pinned tree.
                done = subprocess.run([*npm, "install"], cwd=self.prefix, capture_output=True, text=True,
                                      timeout=900)
            if done.returncode != 0:
                raise RuntimeError(f"npm could not install {self.package}@{self.version}:\n{done.stderr[-2000:]}")
            return
        (self.prefix / "package.json").write_text(json.dumps({"private": True}))
        subprocess.run([*npm, "install", "--save-exact", f"{self.package}@{self.version}"], cwd=self.prefix,
                       check=True, capture_output=True, text=True, timeout=900)
        self.lock.mkdir(parents=True, exist_ok=True)
        for name in ("package.json", "package-lock.json"):
            shutil.copyfile(self.prefix / name, self.lock / name)

    def run(self, base: str, secret: str, prompt: str, place: Path) -> Outcome:
        """Runs the client once against `base` with `secret`, in `place` (its home and working directory)."""
        home, work, scratch = place / "home", place / "work", place / "tmp"
        for folder in (home, work, scratch):  # Gemini CLI writes its error reports to the temporary folder
            folder.mkdir(parents=True, exist_ok=True)
        args, env = self.command(self, base, secret, home)
        environment = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "LANG": "C.UTF-8",
                       "TERM": "dumb", "NO_COLOR": "1", "CI": "1", "TMPDIR": str(scratch),
                       "XDG_CONFIG_HOME": str(home / ".config"), "XDG_CACHE_HOME": str(home / ".cache"),
                       "XDG_DATA_HOME": str(home / ".local" / "share"),
                       "XDG_STATE_HOME": str(home / ".local" / "state"), **env}
        started = time.monotonic()
        try:
            words = prompt.split() if self.prompt_in_words else [prompt]
            done = subprocess.run([str(self.executable), *args, *words], cwd=work, env=environment,
                                  capture_output=True, text=True, timeout=RUN_SECONDS, stdin=subprocess.DEVNULL,
                                  start_new_session=True)
        except subprocess.TimeoutExpired as expired:
            return Outcome(-1, _text(expired.stdout), _text(expired.stderr) + f"\n(timed out after {RUN_SECONDS}s)",
                           time.monotonic() - started)
        return Outcome(done.returncode, done.stdout, done.stderr, time.monotonic() - started)


def _text(value: str | bytes | None) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value or ""


def _claude(cli: Cli, base: str, secret: str, home: Path) -> tuple[list[str], dict[str, str]]:
    env = {"ANTHROPIC_BASE_URL": base, "ANTHROPIC_API_KEY": secret, "ANTHROPIC_MODEL": MODEL,
           "ANTHROPIC_SMALL_FAST_MODEL": MODEL, "ANTHROPIC_DEFAULT_HAIKU_MODEL": MODEL,
           "ANTHROPIC_DEFAULT_SONNET_MODEL": MODEL, "ANTHROPIC_DEFAULT_OPUS_MODEL": MODEL,
           "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_AUTOUPDATER": "1", "DISABLE_TELEMETRY": "1",
           "DISABLE_ERROR_REPORTING": "1", "DISABLE_BUG_COMMAND": "1", "CLAUDE_CONFIG_DIR": str(home / ".claude"),
           # --dangerously-skip-permissions is refused as root outside a declared sandbox; the test's temporary
           # home and working directory are that sandbox.
           "IS_SANDBOX": "1"}
    return ["--dangerously-skip-permissions", "--model", MODEL, "--max-turns", "4", "-p"], env


def _codex(cli: Cli, base: str, secret: str, home: Path, *, websockets: bool = False) -> tuple[list[str],
                                                                                              dict[str, str]]:
    # With supports_websockets (as Codex's own OpenAI provider has it) Codex first asks for GET /v1/responses
    # with Upgrade: websocket and goes on over HTTP on a 426.
    provider = (f'{{name="gateway", base_url="{base}/v1", env_key="GATEWAY_API_KEY", wire_api="responses", '
                f'supports_websockets={str(websockets).lower()}, request_max_retries=0, stream_max_retries=0}}')
    codex_home = home / ".codex"
    codex_home.mkdir(parents=True, exist_ok=True)
    args = ["exec", "--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox", "--color", "never",
            "-c", "model_provider=gateway", "-c", f"model_providers.gateway={provider}",
            "-c", "analytics.enabled=false", "-c", "check_for_update_on_startup=false",
            "-c", "otel.exporter=\"none\"", "-m", MODEL]
    return args, {"GATEWAY_API_KEY": secret, "CODEX_HOME": str(codex_home), "RUST_LOG": "error"}


def _codex_dialling_websockets(cli: Cli, base: str, secret: str, home: Path) -> tuple[list[str], dict[str, str]]:
    return _codex(cli, base, secret, home, websockets=True)


def _gemini(cli: Cli, base: str, secret: str, home: Path) -> tuple[list[str], dict[str, str]]:
    settings = home / ".gemini" / "settings.json"
    settings.parent.mkdir(parents=True, exist_ok=True)
    settings.write_text(json.dumps({
        "privacy": {"usageStatisticsEnabled": False}, "telemetry": {"enabled": False},
        "general": {"disableAutoUpdate": True, "disableUpdateNag": True, "enableAutoUpdate": False,
                    "enableAutoUpdateNotification": False},
        "security": {"auth": {"selectedType": "gemini-api-key"}, "folderTrust": {"enabled": False}},
        "ide": {"enabled": False}}))
    env = {"GOOGLE_GEMINI_BASE_URL": base, "GEMINI_API_KEY": secret, "GEMINI_CLI_NO_RELAUNCH": "true",
           "GEMINI_TELEMETRY_ENABLED": "false", "GEMINI_CLI_TRUST_WORKSPACE": "true"}
    return ["--yolo", "--skip-trust", "-m", MODEL, "-o", "text", "-p"], env


def _opencode(cli: Cli, base: str, secret: str, home: Path) -> tuple[list[str], dict[str, str]]:
    config = {"$schema": "https://opencode.ai/config.json", "autoupdate": False, "share": "disabled",
              "model": f"gateway/{MODEL}", "small_model": f"gateway/{MODEL}",
              "provider": {"gateway": {"npm": "@ai-sdk/openai-compatible", "name": "Gateway",
                                       "options": {"baseURL": f"{base}/v1", "apiKey": secret},
                                       "models": {MODEL: {"name": MODEL, "tool_call": True}}}},
              "permission": {"bash": "allow", "edit": "allow", "webfetch": "deny"}}
    env = {"OPENCODE_CONFIG_CONTENT": json.dumps(config), "OPENCODE_DISABLE_MODELS_FETCH": "1",
           "OPENCODE_DISABLE_AUTOUPDATE": "1", "OPENCODE_DISABLE_LSP_DOWNLOAD": "1",
           "OPENCODE_DISABLE_DEFAULT_PLUGINS": "1", "OPENCODE_DISABLE_SHARE": "1",
           "OPENCODE_DISABLE_CLAUDE_CODE": "1"}
    return ["run", "--pure", "--auto", "-m", f"gateway/{MODEL}", "--format", "json"], env


CLIS = {
    "claude-code": Cli("claude-code", "@anthropic-ai/claude-code", "2.1.332", "claude", "Bash", _claude),
    "codex": Cli("codex", "@openai/codex", "0.171.0", "codex", "exec_command", _codex),
    "gemini-cli": Cli("gemini-cli", "@google/gemini-cli", "0.61.0", "gemini", "run_shell_command", _gemini),
    "opencode": Cli("opencode", "opencode-ai", "1.18.33", "opencode", "bash", _opencode,
                    prompt_in_words=True),
}


# Codex configured as its OpenAI provider is: WebSocket first, HTTP after the gateway's 426.
CODEX_WEBSOCKETS = replace(CLIS["codex"], command=_codex_dialling_websockets)


def npm_available() -> str | None:
    """None when npm can reach its registry; else why not (the reason a skipped test gives)."""
    if shutil.which("npm") is None:
        return "npm is not installed"
    try:
        subprocess.run(["npm", "ping", "--loglevel=error"], check=True, capture_output=True, timeout=60)
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
        return f"the npm registry cannot be reached ({exc})"
    return None
