"""Every error neurarch raises on purpose.

Each class subclasses both :class:`NeurarchError` and the stdlib error it
resembles, and carries the fields a caller needs (the path, the field name,
the model id).  The CLI turns any ``NeurarchError`` into one line on stderr and
exit code 2; anything else is a bug and is shown in full only with ``--debug``.
"""

from __future__ import annotations

MAX_MESSAGE = 600  # characters; a library's message can quote a whole config


def one_line(text: str, limit: int = MAX_MESSAGE) -> str:
    """``text`` as one line: its lines joined by spaces, cut to ``limit`` characters.

    Library errors wrapped at a stage often span lines (transformers' strict
    config validation puts the reason on a second line); users get one line.
    """
    line = " ".join(part.strip() for part in str(text).splitlines() if part.strip())
    return line if len(line) <= limit else line[: limit - 3] + "..."


def first_line(text: str, limit: int = 300) -> str:
    """The first non-empty line of ``text``, cut to ``limit`` characters.

    How a report names the error of a section that failed: the type and the
    message's headline (the lines after it are a library's detail or traceback).
    """
    lines = [ln.strip() for ln in str(text).strip().splitlines() if ln.strip()]
    line = lines[0] if lines else ""
    return line if len(line) <= limit else line[: limit - 1] + "…"


class NeurarchError(Exception):
    """Base class: a problem with the user's input or environment, not a bug.

    Its message is always one line (see :func:`one_line`).
    """

    exit_code = 2

    def __str__(self) -> str:
        return one_line(super().__str__())


class SourceNotFoundError(NeurarchError, FileNotFoundError):
    """A model spec matched no local path, catalog entry, hub repo or factory."""

    def __init__(self, spec: str, detail: str = ""):
        self.spec = spec
        msg = f"no model found for {spec!r}"
        if detail:
            msg += f": {detail}"
        super().__init__(msg)


class ConfigError(NeurarchError, ValueError):
    """A config file that cannot be used: malformed JSON, unknown model type, bad field."""

    def __init__(self, message: str, path: str | None = None, field: str | None = None):
        self.path = path
        self.field = field
        super().__init__(message)


class LimitError(ConfigError):
    """A size outside what neurarch will simulate (zero, negative or absurd)."""


class RemoteCodeError(NeurarchError, PermissionError):
    """The config needs code from the model repo, and the user did not allow it."""

    def __init__(self, model_id: str, reason: str):
        self.model_id = model_id
        super().__init__(f"{model_id} needs remote code ({reason}); neurarch never runs it unless you pass --trust-remote-code")


class HubError(NeurarchError, ConnectionError):
    """The Hugging Face Hub could not be reached or refused the request."""

    def __init__(self, repo_id: str, detail: str):
        self.repo_id = repo_id
        super().__init__(f"hub: {repo_id}: {detail}")


class BuildError(NeurarchError, RuntimeError):
    """The model class could not be constructed from the config."""


class InputError(NeurarchError, ValueError):
    """An option out of range, or input shape options that do not fit the model.

    ``field`` names the option (``seq_len``, ``lora_rank`` ...) where one is to blame.
    """

    def __init__(self, message: str, field: str | None = None):
        self.field = field
        super().__init__(message)


class TraceTimeout(NeurarchError, TimeoutError):
    """The trace took longer than the time limit."""


class UnknownRuleError(NeurarchError, KeyError):
    """A verifier rule id (``--disable ID``) that no registered rule has."""

    def __init__(self, rule_id: str, known: list[str] | tuple[str, ...] = ()):
        import difflib

        self.rule_id = rule_id
        close = difflib.get_close_matches(rule_id, list(known), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else "; `neurarch-trace checks` lists them"
        self.message = f"unknown rule id {rule_id!r}{hint}"
        super().__init__(self.message)

    def __str__(self) -> str:  # KeyError would quote the whole message
        return self.message


class VisionUnavailableError(NeurarchError, ImportError):
    """timm or torchvision is not installed (or does not import beside this torch)."""

    def __init__(self, library: str, detail: str):
        self.library = library
        super().__init__(f"{library} is not available ({detail})")
