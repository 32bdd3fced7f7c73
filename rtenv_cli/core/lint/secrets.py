"""Is an env_vars entry a secret? Decided by the value's shape, and by the name *and* the value.

1. A value in a known credential format is a secret whatever its name: Hugging Face `hf_`,
   OpenAI/Anthropic `sk-`, Stripe `sk_live_`, GitHub `ghp_`/`github_pat_`, GitLab `glpat-`,
   AWS `AKIA`/`ASIA`, Slack `xox?-`, Google `AIza`/`ya29.`, npm, PyPI, JWTs, PEM private keys,
   and URLs carrying a password (`postgres://user:pw@host`).
2. Otherwise the name must say secret: one of its words (split at `_`, `-`, `.` and camelCase)
   is TOKEN, KEY, SECRET, PASSWORD, CREDENTIALS, AUTH ..., and none says the value is a setting
   about secrets rather than one (`*_TOKEN_LIMIT`, `MAX_TOKENS`, `SSH_KEY_PATH`,
   `TOKENIZERS_PARALLELISM`, `HF_TOKEN_FILE`, `KEY_PREFIX`, `AUTH_TYPE` ...).
3. And the value must look like one: not a boolean, a number, a path, a URL without a password,
   a `$VAR`/`${VAR}` reference (what the hint recommends), a placeholder (`<token>`, `xxx`,
   `changeme`, `your key`; `hf_xxxx` or `sk-...` is no secret even in a credential's shape)
   or shorter than 4 characters. For passwords and secrets that is enough; a token
   or key that is a plain lower-case word (`AUTH: basic`, `PARTITION_KEY: user_id`) is a
   setting, not a credential.
"""

from __future__ import annotations

import re

CREDENTIAL_FORMATS = (  # patterns that recognise secrets, not secrets
    r"^(?:hf_[A-Za-z0-9]{16,}|sk-[A-Za-z0-9_-]{16,}|[sr]k_(?:live|test)_[A-Za-z0-9]{16,}|"
    r"gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}|glpat-[A-Za-z0-9_-]{16,}|"
    r"(?:AKIA|ASIA)[0-9A-Z]{16}|xox[baprs]-[A-Za-z0-9-]{10,}|"
    r"eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]+|AIza[0-9A-Za-z_-]{30,}|ya29\.[0-9A-Za-z_-]{20,}|"
    r"npm_[A-Za-z0-9]{30,}|pypi-AgE[A-Za-z0-9_-]{20,}|-----BEGIN [A-Z ]*PRIVATE KEY-----|"
    r"[a-z][a-z0-9+.-]*://[^/\s:@]+:[^/\s@]+@)"
)
PASSWORD_WORDS = frozenset({"PASSWORD", "PASSWORDS", "PASSWD", "PASS", "PASSPHRASE", "SECRET",
                            "SECRETS", "PW"})
TOKEN_WORDS = frozenset({"TOKEN", "KEY", "KEYS", "APIKEY", "PRIVATEKEY", "ACCESSKEY",
                         "SECRETKEY", "AUTHTOKEN", "CREDENTIAL", "CREDENTIALS", "CREDS", "AUTH",
                         "COOKIE", "BEARER"})
# a word that makes the variable a setting about secrets, not a secret
SETTING_WORDS = frozenset({
    "LIMIT", "LIMITS", "MAX", "MIN", "COUNT", "NUM", "SIZE", "LEN", "LENGTH", "BUDGET", "TTL",
    "TIMEOUT", "EXPIRY", "EXPIRES", "EXPIRATION", "LIFETIME", "FILE", "PATH", "DIR", "URL",
    "URI", "ENDPOINT", "HOST", "PORT", "TYPE", "MODE", "METHOD", "ENABLED", "ENABLE",
    "DISABLE", "DISABLED", "REGION", "NAME", "ID", "PREFIX", "SUFFIX", "HEADER", "FORMAT",
    "ALGORITHM", "ALG", "VERSION", "PARALLELISM", "FIELD", "KIND", "SCOPE", "SCOPES", "USER",
    "USERNAME", "LOCATION", "PROVIDER", "VAR", "ENV", "ARN", "REF", "NAMESPACE", "MOUNT",
    "VOLUME", "TABLE", "BUCKET", "LEVEL", "STRATEGY", "REQUIRED", "ROTATION", "INTERVAL",
})
_MIN_LEN = 4
_MAX_PLAIN_NUMBER = 10  # digits: a longer number may be an account secret
_BOOLEANS = frozenset({"true", "false", "yes", "no", "on", "off", "none", "null", "nil",
                       "enabled", "disabled", "0", "1"})
_PLACEHOLDER = (r"<[^>]*>|\{\{?[^}]*\}\}?|\[[^\]]*\]|(.)\1{2,}|\.\.\.|todo|tbd|changeme|"
                r"change[_-]?me|replace[_-]?me|your[ _-].*|dummy|example|placeholder|redacted|"
                r"n/?a|unset|empty")
# a placeholder anywhere in the value: "<your key>", "sk-xxxx", "hf_...", "put your token here"
_PLACEHOLDER_PART = r"\byour\b|(?:^|[^a-z])here$|x{4,}|\*{3,}|\.{3}|<[^>]*>"
_PLACEHOLDER_HINTS = ("your", "here", "xxxx", "***", "...", "<")  # one is in every match


def name_words(name: str) -> set[str]:
    """`HF_TOKEN` -> {HF, TOKEN}; `hfApiKey` -> {HF, API, KEY}."""
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", name)
    return {w.upper() for w in re.split(r"[^A-Za-z0-9]+", spaced) if w}


def name_suggests_secret(name: str) -> bool:
    words = name_words(name)
    return bool(words & (PASSWORD_WORDS | TOKEN_WORDS)) and not words & SETTING_WORDS


def is_credential(value: str) -> bool:
    """A value in a known credential format (whatever the variable is called)."""
    return re.match(CREDENTIAL_FORMATS, value.strip()) is not None


def _plain_setting(value: str) -> bool:
    """Booleans, numbers, paths, URLs without a password, references and placeholders."""
    v = value.strip()
    lower = v.lower()
    return (len(v) < _MIN_LEN or v.startswith("$") or lower in _BOOLEANS
            or (re.fullmatch(r"[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?", v) is not None
                and len(v) <= _MAX_PLAIN_NUMBER)
            or v.startswith(("/", "./", "../", "~/")) or re.match(r"[A-Za-z]:[\\/]", v) is not None
            or re.match(r"[a-z][a-z0-9+.-]*://", lower) is not None
            or re.fullmatch(_PLACEHOLDER, lower) is not None)


def is_secret(name: str, value: object) -> bool:
    """Whether `name: value` in env_vars holds a secret (see the module docstring)."""
    if not isinstance(value, str) or not value.strip():
        return False
    lower = value.strip().lower()
    # substrings first: validate compiles no regex for a file without a placeholder
    if any(part in lower for part in _PLACEHOLDER_HINTS) and \
            re.search(_PLACEHOLDER_PART, lower) is not None:
        return False  # an obvious placeholder, even in a credential's shape (`hf_xxxx`)
    if is_credential(value):
        return True
    words = name_words(name)
    if _plain_setting(value) or words & SETTING_WORDS:
        return False
    if words & PASSWORD_WORDS:
        return True
    return bool(words & TOKEN_WORDS) and re.fullmatch(r"[a-z][a-z_.-]*", value.strip()) is None
