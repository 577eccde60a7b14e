"""Kernel discovery: every `__global__` function and `<<<>>>` launch site in a CUDA file, via tree-sitter.

INTERFACE ONLY (being implemented): the dataclasses below are fixed; `find_kernels` and `find_launch_sites`
are to be written.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Span:
    """A source range. Lines and columns are 0-based; columns are UTF-8 byte offsets in the line."""

    start_byte: int
    end_byte: int
    start_line: int
    start_column: int
    end_line: int
    end_column: int


@dataclass(frozen=True)
class Parameter:
    name: str
    type: str  # base type as written, without const/pointer: "float", "half", "T"
    is_pointer: bool
    is_const: bool  # const pointee (for pointers) or const value
    is_restrict: bool
    text: str  # the parameter as written
    span: Span


@dataclass(frozen=True)
class TemplateParameter:
    name: str
    kind: str  # "type" (typename/class T) or "value" (int BLOCK)
    text: str


@dataclass(frozen=True)
class LaunchSite:
    kernel: str  # the called name, without template arguments
    template_arguments: str | None  # "float, 256" for k<float, 256><<<...>>>
    config: tuple[str, ...]  # grid, block[, shared bytes[, stream]] as written
    arguments: tuple[str, ...]
    span: Span  # the whole call expression
    config_span: Span  # the text between <<< and >>>


@dataclass(frozen=True)
class Kernel:
    name: str
    parameters: tuple[Parameter, ...]
    template_parameters: tuple[TemplateParameter, ...]
    extern_c: bool
    launch_bounds: str | None  # the text inside __launch_bounds__(...)
    span: Span  # the whole definition, template<...> and specifiers included
    body_span: Span  # the compound statement { ... }
    name_span: Span
    has_errors: bool  # tree-sitter recovered from a syntax error inside it
