"""What applying one item produced, and how an action says it failed."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ItemOutcome:
    succeeded: bool
    output: str = ""  # the tail of a command's output, or what a file action did
    exit_code: int | None = None
    error: str = ""  # why it failed, for the operator
    duration: float = 0.0  # seconds the attempt took
    kubeconfig: str | None = None  # the item's kubeconfigFrom file, once it succeeded
    outputs: dict[str, str] | None = None  # the item's declared outputs, once it succeeded


class ItemFailed(Exception):
    """An action could not do its job; the message is what the operator sees."""

    def __init__(self, message: str, exit_code: int | None = None, output: str = "") -> None:
        super().__init__(message)
        self.exit_code = exit_code
        self.output = output

