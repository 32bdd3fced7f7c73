"""zsh and fish really completing with completions/rtenv.{zsh,fish}, as tests/test_completions.py
drives bash: each line is typed into the shell and TAB pressed (zsh: an interactive zsh on a
pseudo-terminal, its `compadd` recording every match; fish: `complete -C`, fish's own "what would
TAB offer"). One shell process completes a whole batch of lines."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MARK = "__RTENV_DONE__"

# sourced by the interactive zsh: compinit with DIR first on $fpath; a `compadd` that appends
# every match it adds to $out (calls that only compute matches, -O/-A/-D, pass through); a TAB
# widget that runs complete-word and then appends a marker (comppostfuncs is reset after each)
ZSH_SETUP = r"""
fpath=($dir $fpath); autoload -Uz compinit; compinit -u -D
compadd() {
  if (( ${@[(I)-[[:alpha:]]#[OAD]*]} )); then builtin compadd "$@"; return; fi
  local -a __hits
  builtin compadd -A __hits "$@"
  (( $#__hits )) && print -rl -- $__hits >> $out
  builtin compadd "$@"
}
__done() { print -r -- MARK >> $out; }
__tab() { comppostfuncs=(__done); zle complete-word; }
zle -N __tab; bindkey '^I' __tab
""".replace("MARK", "__RTENV_DONE__")
# zsh -f -c ZSH_DRIVER zsh OUT DIR SETUP LINE...: types each LINE and TAB into an interactive zsh
# on a pseudo-terminal (zpty), waiting for each line's marker (bounded at 60 s) before the next
ZSH_DRIVER = r"""
out=$1 dir=$2 setup=$3; shift 3
zmodload zsh/zpty || exit 3
zpty z zsh -f -i
zpty -w z "out=${(q)out} dir=${(q)dir}; source ${(q)setup}"
integer done=0
for line in "$@"; do
  zpty -wn z "$line"$'\t'
  (( done++ ))
  repeat 3000; do
    [[ -f $out ]] && (( $(grep -c __RTENV_DONE__ $out) >= done )) && break
    zpty -rt z junk 2>/dev/null
    sleep 0.02
  done
  zpty -wn z $'\C-u'
done
zpty -d z
"""


def shell(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        pytest.skip(f"{name} is not installed here (apt-get install {name}; .ci/run installs it)")
    return found


def _batches(text: str) -> list[list[str]]:
    out: list[list[str]] = [[]]
    for line in text.splitlines():
        if line == MARK:
            out.append([])
        elif line and line not in out[-1]:
            out[-1].append(line)
    return out[:-1]


def zsh_complete(lines: list[str], tmp_path: Path, cwd: Path | None = None) -> list[list[str]]:
    """Per line, the matches zsh's TAB offers."""
    functions = tmp_path / "zsh-functions"
    functions.mkdir(exist_ok=True)
    shutil.copy(ROOT / "completions" / "rtenv.zsh", functions / "_rtenv")
    out = tmp_path / "zsh-matches.txt"
    out.unlink(missing_ok=True)
    setup = tmp_path / "zsh-setup.zsh"
    setup.write_text(ZSH_SETUP)
    subprocess.run([shell("zsh"), "-f", "-c", ZSH_DRIVER, "zsh", str(out), str(functions),
                    str(setup), *lines], check=True, cwd=cwd, timeout=60 * len(lines) + 30,
                   capture_output=True)
    found = _batches(out.read_text())
    assert len(found) == len(lines), found
    return found


def fish_complete(lines: list[str], cwd: Path | None = None) -> list[list[str]]:
    """Per line, the values fish's TAB offers (`complete -C`, descriptions dropped)."""
    script = (f"source '{ROOT / 'completions' / 'rtenv.fish'}'; "
              f"for l in $argv; complete -C\"$l\"; echo {MARK}; end")
    out = subprocess.run([shell("fish"), "-N", "-c", script, *lines], check=True, cwd=cwd,
                         capture_output=True, text=True, timeout=60).stdout
    found = [[v.split("\t", 1)[0] for v in batch] for batch in _batches(out)]
    assert len(found) == len(lines), found
    return found
