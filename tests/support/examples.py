"""Replaying an example's README: its ```console blocks are commands (`$ ...`) and their output.

A block's output is what the command printed (stdout and stderr, in order), with the machine's
paths and ports written as a reader's would be (`$PWD` for the repository root,
`~/.cache/rtenv` for the store, `127.0.0.1:6379` for the cluster); a last line `(exit N)` shows
a non-zero exit code. `RTENV_UPDATE_EXAMPLES=1` rewrites the blocks from a real run.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"

_BLOCK = re.compile(r"^```console\n(.*?)^```", re.S | re.M)
_EXIT = re.compile(r"^\(exit (\d+)\)$")
_COLOUR = re.compile(r"\x1b\[[0-9;]*m")  # Ray's CLI logger colours even a pipe
# what differs between two runs of the same command: timings, Ray's job ids and log timestamps,
# and store keys that hash the interpreter (its exact version and path differ between machines)
_VOLATILE = [
    # cache ls's created / last used, with the table's padding (its width follows the value)
    (re.compile(r"\b\d+[smhd] ago\b *"), "<time> ago "),
    (re.compile(r"\b\d+(?:\.\d+)? ?(?:ms|s)\b"), "<time>"),
    (re.compile(r"/entries/[a-z]+_[0-9a-f]+/"), "/entries/<key>/"),
    (re.compile(r"\b(pip|uv)://[0-9a-f]{32}\b"), r"\1://<key>"),  # cache ls's uri/key
    (re.compile(r"raysubmit_\w+"), "raysubmit_<id>"),
    (re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+"), "<timestamp>"),
    (re.compile(r"\b[0-9a-f]{12}\b"), "<node id>"),  # Ray node ids, as rtenv shows them
    (re.compile(r"\b(?:\d{1,3}\.){3}\d{1,3}\b(?!:)"), "<node ip>"),  # a node's own address
]


@dataclass
class Step:
    command: str
    output: list[str] = field(default_factory=list)
    exit_code: int = 0


def readme_steps(text: str) -> list[Step]:
    """The commands of every ```console block, each with the output and exit code shown."""
    steps: list[Step] = []
    for block in _BLOCK.finditer(text):
        lines = block.group(1).splitlines()
        i = 0
        while i < len(lines):
            line = lines[i]
            i += 1
            if line.startswith("$ "):
                command = line[2:]
                while command.endswith("\\") and i < len(lines):  # continuation lines
                    command = command[:-1] + " " + lines[i].strip()
                    i += 1
                steps.append(Step(command))
            elif steps and (m := _EXIT.match(line)):
                steps[-1].exit_code = int(m.group(1))
            elif steps:
                steps[-1].output.append(line)
    return steps


def comparable(lines: list[str]) -> list[str]:
    """Output lines with the volatile parts masked, blank lines dropped, in sorted order (parallel
    tasks, such as one per Slurm node, print in any order)."""
    out = []
    for line in lines:
        masked = line
        for pattern, repl in _VOLATILE:
            masked = pattern.sub(repl, masked)
        if masked.strip():
            out.append(masked.rstrip())
    return sorted(out)


def write_block_outputs(text: str, results: list[Step]) -> str:
    """`text` with every ```console block's outputs replaced by `results` (in step order)."""
    it = iter(results)

    def block(match: re.Match[str]) -> str:
        body: list[str] = []
        for step in readme_steps(f"```console\n{match.group(1)}```\n"):
            result = next(it)
            body.append(f"$ {_wrap(match.group(1), step.command)}")
            body.extend(line.rstrip() for line in result.output)
            if result.exit_code:
                body.append(f"(exit {result.exit_code})")
        return "```console\n" + "\n".join(body) + "\n```"

    return _BLOCK.sub(block, text)


def _wrap(block: str, command: str) -> str:
    """The command as the block writes it (keeping its continuation lines)."""
    lines = block.splitlines()
    for i, line in enumerate(lines):
        if not line.startswith("$ "):
            continue
        text, j = line[2:], i + 1
        raw = [line[2:]]
        while text.endswith("\\") and j < len(lines):
            text = text[:-1] + " " + lines[j].strip()
            raw.append(lines[j])
            j += 1
        if text == command:
            return "\n".join(raw)
    return command


@dataclass
class Sandbox:
    """A copy of one example folder under `root` (the repository root as its commands see it),
    a PATH whose `rtenv` is this checkout's, the substitutions that turn this machine's
    paths and ports into the README's (`subs`, in output) and the README's into this run's
    (`aliases`, in commands: a port the README names that this run had to pick free)."""

    root: Path
    env: dict[str, str]
    subs: list[tuple[str, str]] = field(default_factory=list)
    aliases: list[tuple[str, str]] = field(default_factory=list)

    @classmethod
    def create(cls, tmp: Path, folders: list[str], env: dict[str, str]) -> Sandbox:
        root = tmp / "repo"
        for name in folders:
            shutil.copytree(EXAMPLES / name, root / "examples" / name, symlinks=True)
        shutil.copy(ROOT / ".pre-commit-hooks.yaml", root / ".pre-commit-hooks.yaml")
        bindir = tmp / "bin"
        bindir.mkdir()
        rtenv = bindir / "rtenv"
        rtenv.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m rtenv_cli "$@"\n')
        rtenv.chmod(0o755)
        full = dict(env)
        full["PATH"] = f"{bindir}:{Path(sys.executable).parent}:{env.get('PATH', '')}"
        full["PYTHONPATH"] = str(ROOT)  # this checkout's rtenv_cli
        full["PYTHONUNBUFFERED"] = "1"  # stdout and stderr in the order a terminal shows them
        subs = [(str(root), "$PWD")]
        if env.get("RTENV_HOME"):
            subs.insert(0, (env["RTENV_HOME"], "~/.cache/rtenv"))
        return cls(root, full, subs)

    def normalize(self, text: str) -> str:
        text = _COLOUR.sub("", text)
        for old, new in self.subs:
            text = text.replace(old, new)
        return text

    def run(self, command: str, timeout: float = 180) -> Step:
        shown = command
        for readme, real in self.aliases:
            command = command.replace(readme, real)
        proc = subprocess.run(["bash", "-c", command], cwd=self.root, env=self.env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              timeout=timeout, check=False)
        lines = self.normalize(proc.stdout).splitlines()
        return Step(shown, lines, proc.returncode)
