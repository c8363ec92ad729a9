"""memplan: will this training config fit on my GPU?

The engine of the memplan command line, in process. Each function takes what the command takes:
a training config path (``config=``), flags as keyword arguments with underscores
(``seq_len=4096`` for ``--seq-len 4096``, ``bf16=True`` for ``--bf16``) or a dict
(``args={...}``), and returns the data ``memplan COMMAND --format json`` prints, as Python
objects. ``str()`` of a result is the text the command prints.

    >>> import memplan
    >>> p = memplan.plan(config="configs/examples/hf-trl-sft-lora.yaml", gpu="h100-sxm")
    >>> p["recommendation"]["micro_batch"], p["recommendation"]["grad_accum"]
"""

from __future__ import annotations

import json
import os
from typing import Any, Iterable, Mapping, Optional

from . import _memplan

__all__ = ["estimate", "plan", "check", "models", "gpus", "schema", "version", "MemplanError", "Result"]


class MemplanError(Exception):
    """What the command line prints after ``memplan: error:``, with its parts as attributes.

    ``file`` and ``line`` say where in a config the bad value is (``None`` when not a file's),
    ``suggestion`` is the fix or did-you-mean, ``exit_code`` the CLI's exit code and ``kind``
    ``"arguments"`` (a keyword memplan does not know, a value of the wrong type), ``"run"`` (the
    command failed: a file, a name, a config) or ``"usage"`` (the flags did not parse).
    """

    def __init__(self, message: str, *, file: Optional[str] = None, line: Optional[int] = None,
                 suggestion: str = "", exit_code: int = 2, kind: str = "run", text: str = ""):
        self.message = message
        self.file = file
        self.line = line
        self.suggestion = suggestion
        self.exit_code = exit_code
        self.kind = kind
        super().__init__(text or message)


class Result(dict):
    """The command's JSON as a dict; ``str()`` is the text the command prints."""

    text: str = ""
    exit_code: int = 0

    def __str__(self) -> str:  # print(memplan.plan(...)) shows what `memplan plan` shows
        return self.text


def _arguments(args: Optional[Mapping[str, Any]], config: Any, kwargs: Mapping[str, Any]) -> dict:
    merged: dict = dict(args or {})
    merged.update(kwargs)
    if config is not None:
        if isinstance(config, (str, os.PathLike)):
            merged["config"] = os.fspath(config)
        else:
            merged["config"] = [os.fspath(c) for c in config]
    return merged


def _raise(code: int, err: str, error: Optional[dict]) -> None:
    if error is not None:
        raise MemplanError(error["message"], file=error["file"], line=error["line"], suggestion=error["suggestion"],
                           exit_code=code, kind=error["kind"], text=error["text"])
    message = err.strip()
    if message.startswith("memplan: error: "):
        message = message[len("memplan: error: "):]
    message = message.split("\n")[0]
    raise MemplanError(message, exit_code=code, kind="usage" if code >= 100 else "run", text=message)


def _call(command: str, arguments: dict) -> Result:
    code, out, err, error = _memplan.call(command, json.dumps(arguments))
    # 0: fits, 1: does not fit (still an answer); anything else is an error.
    if error is not None or code not in (0, 1):
        _raise(code, err, error)
    result = Result(json.loads(out))
    result.exit_code = code
    tcode, text, _, _ = _memplan.call(command, json.dumps(arguments), "text")
    result.text = text
    return result


def estimate(config: Any = None, *, args: Optional[Mapping[str, Any]] = None, **kwargs: Any) -> Result:
    """``memplan estimate``: the peak-memory breakdown of one training step (with ``gpu=``, whether it fits)."""
    return _call("estimate", _arguments(args, config, kwargs))


def plan(config: Any = None, *, args: Optional[Mapping[str, Any]] = None, **kwargs: Any) -> Result:
    """``memplan plan``: the largest micro-batch that fits, grad-accum, tiers, and fixes when nothing fits."""
    return _call("plan", _arguments(args, config, kwargs))


def check(*files: Any, config: Any = None, args: Optional[Mapping[str, Any]] = None, **kwargs: Any) -> Result:
    """``memplan check FILE...``: whether each training config fits (``result["results"]``, one per file)."""
    arguments = _arguments(args, config, kwargs)
    if files:
        arguments["files"] = [os.fspath(f) for f in files]
    return _call("check", arguments)


def models(filter: Optional[str] = None) -> Result:  # noqa: A002 - the CLI's name
    """``memplan models``: the built-in catalog."""
    return _call("models", {"filter": filter} if filter else {})


def gpus() -> Result:
    """``memplan gpus``: the GPU profiles ``gpu=`` accepts."""
    return _call("gpus", {})


def schema(command: str) -> dict:
    """The JSON Schema of a command's keyword arguments (what the MCP server lists)."""
    return json.loads(_memplan.tool_input_schema(command))


def version() -> str:
    """What ``memplan --version`` prints."""
    return _memplan.version()
