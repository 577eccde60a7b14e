"""Read the specs written in a .cu file: `/* cuda-agent ... */` comments holding TOML.

`parse_specs` finds the comments (tree-sitter-cuda), decodes them (tomllib), attaches each to its kernel
and validates it (`validate.py`). Every error is placed on the offending token in the .cu file: TOML syntax
errors from tomllib's position, semantic ones through the key path located with tree-sitter-toml.
"""

from __future__ import annotations

import bisect
import logging
import re
import sys
from collections.abc import Sequence
from dataclasses import replace
from operator import attrgetter

from cuda_agent.agent.kernels import Kernel, KernelPositions, Span, shifted
from cuda_agent.agent.memo import BoundedMemo
from cuda_agent.agent.spec.checks import Issue
from cuda_agent.agent.spec.expressions import suggest
from cuda_agent.agent.spec.locate import TomlLocator
from cuda_agent.agent.spec.model import KernelSpec, KeyPath, SpecError, SpecResolveError
from cuda_agent.agent.spec.resolve import complete_sizes, resolve
from cuda_agent.agent.spec.source import LineIndex, SpecComment, find_spec_comments
from cuda_agent.agent.spec.validate import build_spec
from tree_sitter import Tree

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

logger = logging.getLogger(__name__)
_TOML_POSITION = re.compile(r"\s*\(at line (\d+), column (\d+)\)$")


def parse_specs(
    source: str | bytes,
    kernels: Sequence[Kernel],
    tree: Tree | None = None,
    markers: Sequence[int] | None = None,
) -> tuple[dict[str, KernelSpec], list[SpecError]]:
    """The valid specs by kernel name, and every error found in any spec comment of `source`. `kernels`:
    the file's, in source order (as `find_kernels` gives them).

    A kernel whose spec has errors is absent from the dict; its errors carry its name (SpecError.kernel),
    so a caller can tell "spec broken" (show the errors, do not run) from "no spec" (infer one).
    `tree`: the file's tree-sitter parse when the caller has one (as for `find_kernels`); `markers`: where
    the spec comments' marker occurs in it (source.marker_offsets), when the caller knows.
    """
    data = source.encode() if isinstance(source, str) else source
    index = LineIndex(data)
    specs: dict[str, KernelSpec] = {}
    claimed: dict[str, SpecComment] = {}  # kernel name -> the comment that holds its spec
    errors: list[SpecError] = []
    for comment in find_spec_comments(data, tree, index, markers):
        try:
            kernel, spec, spec_errors = _parse_known(comment, kernels, index)
        except Exception as error:  # our bug: it costs this spec only, said where the comment starts
            logger.warning("a spec comment was skipped: %s: %s", type(error).__name__, error)
            logger.debug("reading a spec comment failed", exc_info=error)
            kernel, spec = _kernel_after(comment, kernels), None
            message = (
                f"this spec was skipped: reading it failed inside cuda-agent ({type(error).__name__}: "
                f"{error}); the file's other specs are unaffected"
            )
            spec_errors = [_at_span(comment.marker, message, kernel.name if kernel else None)]
        if kernel is not None and kernel.name in claimed:
            first = claimed[kernel.name].span.start_line + 1
            errors.append(
                _at_span(
                    comment.marker,
                    f"'{kernel.name}' already has a spec (line {first}); one spec per kernel",
                    kernel.name,
                )
            )
            continue
        if kernel is not None:
            claimed[kernel.name] = comment
        errors.extend(spec_errors)
        if spec is not None and not spec_errors:
            specs[spec.kernel] = spec
    return specs, sorted(errors, key=lambda error: (error.line, error.column))


# A spec comment's answer, by its text, its lines' first columns and the kernel it describes as that
# kernel was read (`Kernel.read`: the same object while the kernel is unchanged): the language server
# re-reads the file on each edit, and a spec took 0.6 ms to parse, validate and resolve. Kept at the
# comment's position then; an answer for a comment that moved is shifted with it.
_PARSED: BoundedMemo[
    tuple[str, tuple[int, ...], KernelPositions | None], tuple[Span, KernelSpec | None, list[SpecError]]
] = BoundedMemo()
_NAMES_ITS_KERNEL = re.compile(r"^\s*kernel\s*=", re.MULTILINE)


def _parse_known(
    comment: SpecComment, kernels: Sequence[Kernel], index: LineIndex
) -> tuple[Kernel | None, KernelSpec | None, list[SpecError]]:
    """`_parse_one`, answered from memory for a comment that describes the kernel after it (one that
    names its kernel picks it among all of them, and a kernel with syntax errors is read anew each time)."""
    following = _kernel_after(comment, kernels)
    if _NAMES_ITS_KERNEL.search(comment.toml) or (following is not None and following.has_errors):
        return _parse_one(comment, kernels, index)
    columns = tuple(column for _, column in comment.origins)
    key = (comment.toml, columns, following.read if following else None)
    at, spec, errors = _PARSED.get_or_make(
        key, lambda: (comment.span, *_parse_one(comment, kernels, index)[1:])
    )
    bytes_by, lines_by = comment.span.start_byte - at.start_byte, comment.span.start_line - at.start_line
    if (bytes_by, lines_by) == (0, 0):
        return following, spec, errors
    moved_errors = [replace(e, line=e.line + lines_by, end_line=e.end_line + lines_by) for e in errors]
    if spec is None:
        return following, None, moved_errors

    def moved(span: Span | None) -> Span | None:
        return shifted(span, (bytes_by, lines_by)) if span is not None else None

    spec = replace(
        spec,
        span=moved(spec.span),
        block_span=moved(spec.block_span),
        value_spans={path: shifted(span, (bytes_by, lines_by)) for path, span in spec.value_spans.items()},
    )
    return following, spec, moved_errors


def _parse_one(
    comment: SpecComment, kernels: Sequence[Kernel], index: LineIndex
) -> tuple[Kernel | None, KernelSpec | None, list[SpecError]]:
    """One comment: its kernel (None when unknown), its spec (None when it has errors) and its errors."""
    following = _kernel_after(comment, kernels)
    try:
        data = tomllib.loads(comment.toml)
    except tomllib.TOMLDecodeError as error:
        # Still the following kernel's spec: it is not run, and not replaced by an inferred one.
        return (
            following,
            None,
            [_toml_syntax_error(comment, str(error), following.name if following else None)],
        )
    except RecursionError:  # tomllib reads arrays and inline tables inside each other by recursion
        message = "the spec's arrays or tables nest too deep to read (a few levels are all a spec needs)"
        return following, None, [_at_span(comment.marker, message, following.name if following else None)]
    locator = TomlLocator(comment.toml)

    def located(issue: Issue, kernel_name: str | None) -> SpecError:
        return _locate(comment, locator, issue, kernel_name)

    name = data.get("kernel")
    if name is not None:
        if not isinstance(name, str):
            message = 'kernel is a name in quotes: kernel = "softmax"'
            return None, None, [located(Issue(("kernel",), message), None)]
        kernel = _kernel_named(name, comment, kernels)
        if kernel is None:
            names = [k.name for k in kernels]
            message = f"no __global__ kernel named '{name}' in this file{suggest(name, names)}"
            return None, None, [located(Issue(("kernel",), message), None)]
    elif following is None:
        message = 'no __global__ kernel follows this spec: move it above its kernel or add kernel = "name"'
        return None, None, [_at_span(comment.marker, message, None)]
    else:
        kernel = following

    spec, issues = build_spec(data, kernel)
    errors = [located(issue, kernel.name) for issue in issues]
    if spec is None:
        return kernel, None, errors
    value_spans = {path: _file_span(comment, locator, path, index) for path in locator.values}
    spec = replace(
        spec, span=comment.span, block_span=value_spans.get(("launch", "block")), value_spans=value_spans
    )
    errors.extend(_check_resolves(spec))
    return kernel, spec, errors


def _kernel_after(comment: SpecComment, kernels: Sequence[Kernel]) -> Kernel | None:
    """The first kernel that starts after the comment ends, by bisection: a file with a spec above each of
    its thousands of kernels looked through all of them for each spec, on every edit."""
    index = bisect.bisect_left(kernels, comment.span.end_byte, key=attrgetter("start_byte"))
    return kernels[index] if index < len(kernels) else None


def _kernel_named(name: str, comment: SpecComment, kernels: Sequence[Kernel]) -> Kernel | None:
    """The kernel of that name, preferring the first after the comment (overloads share a name)."""
    named = [kernel for kernel in kernels if kernel.name == name]
    after = [kernel for kernel in named if kernel.start_byte >= comment.span.end_byte]
    return next(iter(after or named), None)


def _check_resolves(spec: KernelSpec) -> list[SpecError]:
    """Evaluate the whole spec at the benchmark sizes and at each verify size, so what would only fail
    when run (a grid beyond CUDA's limits, a shape that reaches 0, a division by zero) is an error now."""
    try:
        resolve(spec)
    except SpecResolveError as failure:
        return [failure.error]  # located at the failing expression
    errors = []
    for position, overrides in enumerate(spec.verify_sizes):
        try:
            resolve(spec, complete_sizes(spec, overrides))
        except SpecResolveError as failure:
            message = f"at verify sizes {_label(overrides)}: {failure.error.message}"
            entry = spec.value_spans.get(("verify", "sizes", position))
            errors.append(
                _at_span(entry, message, spec.kernel) if entry else replace(failure.error, message=message)
            )
    return errors


def _label(sizes: dict[str, int]) -> str:
    return " ".join(f"{name}={value}" for name, value in sizes.items())


def _at_span(span: Span, message: str, kernel: str | None) -> SpecError:
    return SpecError(message, span.start_line, span.start_column, span.end_line, span.end_column, kernel)


def _toml_syntax_error(comment: SpecComment, message: str, kernel: str | None) -> SpecError:
    """tomllib says "Invalid value (at line 2, column 5)": 1-based line and character column in the TOML."""
    match = _TOML_POSITION.search(message)
    text = _TOML_POSITION.sub("", message)
    if match is None:  # "at end of document" and the like
        last = len(comment.origins) - 1
        line, column = comment.to_file(last, len(comment.toml.split("\n")[last].encode()))
        return SpecError(f"TOML syntax error in spec: {text}", line, column, line, column + 1, kernel)
    row, column_chars = int(match.group(1)) - 1, int(match.group(2)) - 1
    toml_line = comment.toml.split("\n")[row] if row < len(comment.origins) else ""
    byte_column = len(toml_line[:column_chars].encode())
    line, column = comment.to_file(row, byte_column)
    end = column + max(1, len(toml_line[column_chars : column_chars + 1].encode()))
    return SpecError(f"TOML syntax error in spec: {text}{_toml_hint(text)}", line, column, line, end, kernel)


def _toml_hint(message: str) -> str:
    if message.startswith("Invalid value"):
        return ' (strings need quotes: cols = "rows * 2")'
    if "overwrite" in message:
        return " (a key is set twice)"
    return ""


def _locate(comment: SpecComment, locator: TomlLocator, issue: Issue, kernel: str | None) -> SpecError:
    found = locator.find(issue.path, key=issue.key)
    if found is None:
        return _at_span(comment.marker, issue.message, kernel)
    ((start_row, start_col), (end_row, end_col)), node = found
    if issue.within is not None and not issue.key:
        inner = _string_content_start(node)
        if inner is not None:  # point inside the string at the bad token
            start_col, end_col = start_col + inner + issue.within[0], start_col + inner + issue.within[1]
            end_row = start_row
    line, column = comment.to_file(start_row, start_col)
    end_line, end_column = comment.to_file(end_row, end_col)
    return SpecError(issue.message, line, column, end_line, end_column, kernel)


def _string_content_start(node: object) -> int | None:
    """Bytes from a string node's start to its content; None when offsets inside it would not match the
    decoded text (escapes, several lines) or when it is not a string."""
    if getattr(node, "type", None) != "string":
        return None
    raw: bytes = node.text or b""  # type: ignore[attr-defined]
    if b"\n" in raw or (raw.startswith(b'"') and b"\\" in raw):
        return None
    return 3 if raw[:3] in (b'"""', b"'''") else 1


def _file_span(comment: SpecComment, locator: TomlLocator, path: KeyPath, index: LineIndex) -> Span:
    node = locator.values[path]
    start = comment.to_file(node.start_point.row, node.start_point.column)
    end = comment.to_file(node.end_point.row, node.end_point.column)
    return index.span(start, end)
