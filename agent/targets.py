"""From a .cu file to the kernels that can be run: discovery, the spec (written or inferred), problems."""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path

from cuda_agent.agent.kernels import EarlierRead, Kernel, KernelPositions, find_kernels
from cuda_agent.agent.memo import BoundedMemo
from cuda_agent.agent.parsing import TextEdit, parse_cuda
from cuda_agent.agent.spec import (
    KernelSpec,
    SpecError,
    SpecResolveError,
    complete_sizes,
    infer_spec,
    parse_specs,
    resolve,
)
from cuda_agent.agent.spec.elsewhere import Neighbours, infer_from_elsewhere
from cuda_agent.agent.spec.expressions import referenced_names
from cuda_agent.agent.spec.program import (
    ProgramHost,
    ProgramPoint,
    read_partial_point,
    read_program_points,
    spec_from_points,
    with_program_launch,
)
from cuda_agent.agent.spec.resolve import instantiation
from cuda_agent.sandbox.plan import LaunchPlan, Problem
from tree_sitter import Tree

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class KernelTarget:
    path: Path
    source: str
    kernel: Kernel
    spec: KernelSpec | None  # None: no spec written and none could be inferred
    note: str = ""  # "spec inferred from the 1-D element-wise pattern", or why there is no spec
    # Set when reading this kernel failed (a bug of ours, not the user's): what was skipped and why, said
    # on the kernel's name; the file's other kernels are read as usual.
    skipped: str = ""

    @property
    def name_expression(self) -> str:
        """What to compile and look up: the instantiation for templates (at the spec's block, for an
        argument that follows it: `rms_norm<block.x>` is `rms_norm<256>`), else the name."""
        return self.name_expression_at(self.spec.launch.block if self.spec else None)

    def name_expression_at(self, block: Sequence[int] | None, source: str | None = None) -> str:
        """The name expression of a candidate run with `block`, whose file is `source`: the instantiation
        its own file's spec writes (what a user applying it gets; the launch tuner may have rewritten a
        template argument with the block), with the arguments that follow the block evaluated at `block`.
        This target's spec when the candidate's file has none for the kernel."""
        spec = self.spec
        if spec is None or spec.instantiate is None:
            return self.kernel.name
        if source is not None and source != self.source:
            own = load_targets(self.path, source, infer=False).find(self.kernel.name)
            if own is not None and own.spec is not None and own.spec.instantiate is not None:
                spec = own.spec
        try:
            return instantiation(spec, tuple(block) if block else None) or self.kernel.name
        except SpecResolveError:  # that block breaks an argument (a division by zero): the compile says so
            return spec.instantiate

    @property
    def compilable(self) -> bool:
        """Whether it can be compiled by name: a template only through its spec's `instantiate`."""
        if not self.kernel.name:
            return False
        if self.kernel.template_parameters:
            return bool(self.spec and self.spec.instantiate)
        return True


# A kernel's inferred spec and note, with the KernelPositions it was read as (an `id` alone may be reused).
InferredSpec = tuple[KernelPositions, KernelSpec | None, str]


@dataclass(frozen=True)
class FileTargets:
    path: Path
    source: str
    targets: tuple[KernelTarget, ...]
    spec_errors: tuple[SpecError, ...]
    # What the host code said, for the next edit's load_targets (earlier_file): kept when it cannot change.
    host_facts: HostFacts | None = field(default=None, compare=False, repr=False)
    # The specs inferred for this text's kernels, for the next edit's load_targets: by `id(kernel.read)`
    # (the same KernelPositions while the kernel's text is unchanged, wherever an edit moved it).
    inferred: Mapping[int, InferredSpec] = field(default_factory=dict, compare=False, repr=False)

    def find(self, name: str | None) -> KernelTarget | None:
        if name is None:
            return self.targets[0] if len(self.targets) == 1 else None
        return next((t for t in self.targets if t.kernel.name == name), None)


# Inference from the signature reads only the kernel's own text (and the file's type aliases), so its
# answer is kept per definition text: the language server re-analyses a file on every edit, and a
# 5,000-line file re-inferred every kernel (~0.3 s). Inference from the program reads the host code too:
# it is kept per kernel text and the digest of what it reads (the file-level declarations, the functions
# launching the kernel and their callers), so an edit re-infers only the kernels it can change. Those
# digests depend only on the file without its kernels, and are kept per that text: an edit inside a kernel
# (the common case) finds them there without looking at the launches again.
_INFERRED: BoundedMemo[tuple[object, ...], tuple[KernelSpec | None, str]] = BoundedMemo()
_POINTS: BoundedMemo[tuple[bytes, bytes], tuple[tuple[ProgramPoint, ...], str]] = BoundedMemo()
_PARTIAL_POINTS: BoundedMemo[tuple[bytes, bytes], tuple[ProgramPoint | None]] = BoundedMemo()
_HOST_FACTS: BoundedMemo[bytes, HostFacts] = BoundedMemo(64)
_DECLARATIONS = frozenset(
    {"preproc_def", "preproc_function_def", "declaration", "type_definition", "alias_declaration",
     "namespace_definition", "linkage_specification", "preproc_if", "preproc_ifdef", "preproc_else",
     "preproc_elif", "preproc_include", "ERROR"}
)  # fmt: skip


@dataclass(frozen=True)
class HostFacts:
    """What the file's host side says for inference, and where it says it: per launched kernel the digest of
    what inference from the program reads, the type aliases, and the byte ranges of those reads."""

    dependencies: dict[str, bytes]
    typedefs: dict[str, str]
    relevant: tuple[tuple[int, int], ...]
    launchers: frozenset[str]  # host functions that launch kernels

    @cached_property
    def _launcher_names(self) -> frozenset[bytes]:
        return frozenset(name.encode() for name in self.launchers)

    def after(self, earlier: EarlierRead, data: bytes, tree: Tree) -> HostFacts | None:
        """These facts for the text after `earlier`'s edit, if the edit cannot have changed them (typing in
        a comment, in a kernel, in a host function that launches nothing and calls no launcher), but for
        the lines of what they describe, moved by an edit above it: then with digests of their own, since
        what inference says cites lines ("at line 20") and the memos keep its answers by digest."""
        edit = earlier.edit
        if changes_token_marks(edit, data):
            return None
        if any(start < edit.old_end and edit.start < end for start, end in self.relevant):
            return None
        moves_lines = edit.lines_by != 0 and any(start >= edit.start for start, _ in self.relevant)
        delta = edit.new_end - edit.old_end
        for start, end in (*earlier.changed, (edit.start, edit.new_end)):
            node = tree.root_node.descendant_for_byte_range(start, max(start, end - 1))
            while node is not None and node.parent is not None and node.parent.type != "translation_unit":
                node = node.parent
            if node is None:
                return None
            if node.type == "translation_unit":
                # A line typed or removed between declarations changes no token; anything else there, the
                # whole file changed shape.
                edited = (start, end) == (edit.start, edit.new_end)
                if edited and _blank(edit.replaced) and _blank(data[start:end]):
                    continue
                return None
            if node.type in _DECLARATIONS:
                return None
            text = data[node.start_byte : node.end_byte]
            if not self._launcher_names.isdisjoint(_IDENTIFIER.findall(text)):
                return None  # a new call of a launcher: a new calling context
            if b"<<<" in text:
                return None  # a launch whose function this edit may make or unmake (a `}` typed early)
        shifted = tuple((s, e) if e <= edit.start else (s + delta, e + delta) for s, e in self.relevant)
        if not moves_lines:
            return replace(self, relevant=shifted)
        moved = f"{edit.old_end_line}:{edit.lines_by}".encode()
        dependencies = {
            name: hashlib.blake2b(digest + moved, digest_size=16).digest()
            for name, digest in self.dependencies.items()
        }
        return replace(self, relevant=shifted, dependencies=dependencies)


_IDENTIFIER = re.compile(rb"[A-Za-z_][A-Za-z0-9_]*")


def _blank(data: bytes) -> bool:
    return not data.strip(b" \t\r\n")


# Quotes, block-comment marks and `<<<`: an edit that adds or removes one can retokenise everything after
# it (a printf's string left open swallows the next call of a launcher; a launch appears), far from it.
_TOKEN_MARKS = (re.compile(b'"'), re.compile(b"'"), re.compile(rb"/\*"), re.compile(rb"\*/"),
                re.compile(b"(?=<<<)"))  # fmt: skip


def changes_token_marks(edit: TextEdit, data: bytes) -> bool:
    """Whether the edit that made `data` changed how many of each token mark the text holds. Counted in the
    edit's bytes and the two on each side, where every mark the edit touched lies, not in the whole file
    (five counts over a 50,000-line file took 7 ms an edit)."""
    before, after = data[max(0, edit.start - 2) : edit.start], data[edit.new_end : edit.new_end + 2]
    old, new = before + edit.replaced + after, data[max(0, edit.start - 2) : edit.new_end + 2]
    return any(len(mark.findall(old)) != len(mark.findall(new)) for mark in _TOKEN_MARKS)


class _Host:
    """The file's host side, read only as far as kernels without a spec need it."""

    def __init__(
        self, text: str, data: bytes, tree: Tree, kernels: Sequence[Kernel], earlier: EarlierRead | None,
        previous: HostFacts | None,
    ) -> None:  # fmt: skip
        self.text, self.data, self.tree = text, data, tree
        self._program: ProgramHost | None = None
        reused = previous.after(earlier, data, tree) if previous is not None and earlier is not None else None
        # Whether these are `previous` (what inferring from them said is said still), and whether the edit
        # moved the lines they describe (what it said cites lines that moved; `after` gave them digests of
        # their own).
        self.carried = reused is not None
        self.lines_moved = False
        if reused is not None and previous is not None:
            self.lines_moved = reused.dependencies is not previous.dependencies
        if reused is not None:
            self.facts = reused
            return
        pieces, position = [], 0
        for kernel in sorted(kernels, key=lambda k: k.start_byte):
            pieces.append(data[position : kernel.start_byte])
            # Its line count stays: the host code's lines, which the inferred specs cite, move with it.
            pieces.append(str(data.count(b"\n", kernel.start_byte, kernel.end_byte)).encode())
            position = max(position, kernel.end_byte)
        pieces.append(data[position:])
        digest = hashlib.blake2b(b"\0".join(pieces), digest_size=16).digest()
        facts = _HOST_FACTS.get_or_make(digest, self._facts)
        # Kept per host text, whose positions move with every edit above: the ranges must be this text's.
        self.facts = facts if self._program is not None else replace(facts, relevant=self._program_ranges())

    def _facts(self) -> HostFacts:
        program = self.program()
        dependencies = {name: program.dependencies(name) for name in program.launched}
        return HostFacts(dependencies, program.typedefs, tuple(program.relevant), program.launchers)

    def _program_ranges(self) -> tuple[tuple[int, int], ...]:
        program = self.program()
        for name in program.launched:
            program.dependencies(name)
        return tuple(program.relevant)

    @property
    def dependencies(self) -> dict[str, bytes]:
        return self.facts.dependencies

    @property
    def typedefs(self) -> dict[str, str]:
        return self.facts.typedefs

    def program(self) -> ProgramHost:
        if self._program is None:
            self._program = ProgramHost(self.tree, self.data)
        return self._program


def _inferred(
    kernel: Kernel, text: str, data: bytes, tree: Tree, host: _Host
) -> tuple[KernelSpec | None, str]:
    own = data[kernel.start_byte : kernel.end_byte]
    typedefs = host.typedefs
    dependencies = host.dependencies.get(kernel.name)
    if dependencies is None:
        aliases = tuple(sorted(typedefs.items()))
        return _INFERRED.get_or_make(
            ("signature", own, aliases), lambda: infer_spec(kernel, text, tree, typedefs)
        )

    def from_program() -> tuple[KernelSpec | None, str]:
        # What the launches say depends on the signature and the host code, not the body: an edit inside
        # the body finds it kept and only reads the body again (roles).
        signature = data[kernel.start_byte : kernel.body_span.start_byte]
        reads = (signature, dependencies)
        points, why = _POINTS.get_or_make(reads, lambda: read_program_points(kernel, host.program()))
        spec = None
        if points:
            spec, why = spec_from_points(kernel, tree, points, typedefs)
        if spec is not None:
            return spec, spec.inference_note
        signature_spec, note = infer_spec(kernel, text, tree, typedefs)
        if signature_spec is None:
            return None, f"{note}; and from the program: {why}"
        # Kept like the points (a 1-tuple: the memo keeps no None): reading the program for it made an edit
        # in such a kernel's body cost a pass over the whole file's host code.
        partial = (
            _PARTIAL_POINTS.get_or_make(reads, lambda: (read_partial_point(kernel, host.program()),))[0]
            if not points
            else None
        )
        if partial is not None and partial.unknown:
            merged = with_program_launch(signature_spec, partial)
            if merged is not signature_spec:
                return merged, merged.inference_note
        note = f"{note} (not from the program: {why})"
        return replace(signature_spec, inference_note=note), note

    return _INFERRED.get_or_make(("program", own, dependencies), from_program)


def load_targets(
    path: Path,
    source: str | None = None,
    tree: Tree | None = None,
    earlier: EarlierRead | None = None,
    earlier_file: FileTargets | None = None,
    infer: bool = True,
) -> FileTargets:
    """The file's kernels with their specs. `tree`: the source's parse when the caller has one (the
    language server reparses incrementally after an edit); `earlier`: the kernels before that edit, and
    `earlier_file` what was found in that text (its host facts and inferred specs are kept where the edit
    cannot have changed them). `infer=False`: written specs only (a caller re-reading a candidate keeps the
    original's inferred spec, and need not pay for reading the host code again)."""
    text = path.read_text(encoding="utf-8", errors="replace") if source is None else source
    data = text.encode("utf-8")
    tree = tree or parse_cuda(data)  # once: inference reads every kernel from it (a parse each was quadratic)
    kernels = find_kernels(data, tree, earlier)
    specs, errors = parse_specs(data, kernels, tree)
    failed = {e.kernel for e in errors if e.kernel}
    targets = []
    inference = _Inference(path, text, data, tree, kernels, earlier, earlier_file)
    for kernel in kernels:
        spec = specs.get(kernel.name)
        note = skipped = ""
        if spec is None and kernel.name in failed:
            note = "its spec has errors (see above)"
        elif spec is None and not infer:
            note = "no spec written (not inferred here)"
        elif spec is None:
            try:
                spec, reason = inference.infer(kernel)
            except Exception as error:  # our bug, not the user's: it costs this kernel only
                note = skipped = skipped_because(kernel, "spec inference", error)
            else:
                note = (
                    spec.inference_note
                    if spec
                    else f"no spec: {reason}; add a /* cuda-agent ... */ spec comment"
                )
        targets.append(KernelTarget(path, text, kernel, spec, note, skipped))
    return FileTargets(path, text, tuple(targets), tuple(errors), inference.host_facts, inference.inferred)


def skipped_because(kernel: Kernel, step: str, error: Exception) -> str:
    """What a failure inside our own reading of one kernel says on its name; the traceback goes to the log
    (stderr) at debug level, the one-line reason at warning level."""
    logger.warning("%s of %s skipped: %s: %s", step, kernel.name or "a kernel", type(error).__name__, error)
    logger.debug("%s of %s failed", step, kernel.name, exc_info=error)
    why = "its expressions or blocks nest too deep" if isinstance(error, RecursionError) else str(error)[:200]
    return (
        f"{step} skipped for this kernel: it failed inside cuda-agent ({type(error).__name__}: {why}); "
        "the file's other kernels are unaffected; write a /* cuda-agent ... */ spec comment to run it"
    )


class _Inference:
    """Inferring the specs of a file's kernels: the host code and the neighbouring files are read once, when
    a kernel first needs them (and a failure to read them is kept, and raised for each kernel that does).

    After an edit, a kernel whose text is unchanged keeps the spec inferred for it in the text before,
    while the host code's facts are the same: that is what inference reads besides the kernel. Kept by the
    file rather than only in the memos keyed by each kernel's bytes, which cost a copy and a hash of every
    kernel on each edit, and which a file with more kernels than they hold emptied on every edit."""

    def __init__(
        self, path: Path, text: str, data: bytes, tree: Tree, kernels: Sequence[Kernel],
        earlier: EarlierRead | None, earlier_file: FileTargets | None,
    ) -> None:  # fmt: skip
        self.path, self.text, self.data, self.tree = path, text, data, tree
        self._kernels, self._earlier = kernels, earlier
        self._earlier_host = earlier_file.host_facts if earlier_file is not None else None
        self._earlier_inferred = earlier_file.inferred if earlier_file is not None else {}
        self._host: _Host | Exception | None = None
        self._neighbours: Neighbours | None = None  # the files next to it that launch kernels
        self.inferred: dict[int, InferredSpec] = {}
        self._kept_inferred: Mapping[int, InferredSpec] | None = None  # see _kept

    @property
    def host_facts(self) -> HostFacts | None:
        return self._host.facts if isinstance(self._host, _Host) else self._earlier_host

    def host(self) -> _Host:
        if self._host is None:
            try:
                self._host = _Host(
                    self.text, self.data, self.tree, self._kernels, self._earlier, self._earlier_host
                )
            except Exception as error:
                self._host = error
        if isinstance(self._host, Exception):
            raise self._host
        return self._host

    def infer(self, kernel: Kernel) -> tuple[KernelSpec | None, str]:
        """(spec, note) or (None, why not), as `infer_spec` says; raises what a bug raises."""
        host = self.host()
        self._neighbours = self._neighbours or Neighbours(self.path)
        elsewhere = kernel.name not in host.dependencies and bool(self._neighbours.launching(kernel.name))
        if not elsewhere:
            kept = self._kept(host).get(id(kernel.read))
            if kept is not None and kept[0] is kernel.read:
                if host.lines_moved and self._earlier is not None:
                    kept = _with_lines_moved(kept, self._earlier.edit)  # None: it cites an edited line
                if kept is not None:
                    self.inferred[id(kernel.read)] = kept
                    return kept[1], kept[2]
        spec, reason = _inferred(kernel, self.text, self.data, self.tree, host)
        if elsewhere:
            # Nothing here launches it: a header's kernel, launched from the .cu next to it.
            found, why = infer_from_elsewhere(self._neighbours, kernel, self.tree, host.program())
            spec, reason = (found, why) if found is not None else (spec, f"{reason}; elsewhere: {why}")
        else:  # what other files say is read again each time: they may have changed on disk
            self.inferred[id(kernel.read)] = (kernel.read, spec, reason)
        return spec, reason

    def _kept(self, host: _Host) -> Mapping[int, InferredSpec]:
        """The specs inferred in the text before the edit, if the host code's facts are those they were
        inferred with (the same objects: kept by HostFacts.after or the memo); else none."""
        if self._kept_inferred is None:
            earlier = self._earlier_host
            same = earlier is not None and earlier.dependencies is host.dependencies
            same = same and earlier is not None and earlier.typedefs is host.typedefs
            self._kept_inferred = self._earlier_inferred if host.carried or same else {}
        return self._kept_inferred


_CITED_LINE = re.compile(r"\bline (\d+)")


def _with_lines_moved(found: InferredSpec, edit: TextEdit) -> InferredSpec | None:
    """A spec inferred before `edit`, citing the lines where what it cites is now; None if it cites one of
    the lines the edit changed (where it cannot tell what moved)."""
    read, spec, note = found
    moved_note = _lines_moved(note, edit)
    if moved_note is None:
        return None
    if spec is not None:
        spec_note = _lines_moved(spec.inference_note, edit)
        if spec_note is None:
            return None
        if spec_note != spec.inference_note:
            spec = replace(spec, inference_note=spec_note)
    return read, spec, moved_note


def _lines_moved(text: str, edit: TextEdit) -> str | None:
    """`text` with each "line N" it cites (1-based) after the edit moved by the edit's lines, or None if it
    cites a line the edit changed."""
    unclear = False

    def moved(cited: re.Match[str]) -> str:
        nonlocal unclear
        row = int(cited[1]) - 1
        if row > edit.old_end_line:
            return f"line {row + 1 + edit.lines_by}"
        unclear = unclear or row >= edit.start_line
        return cited[0]

    text = _CITED_LINE.sub(moved, text)
    return None if unclear else text


# The second automatic point keeps at most this power of two of each size: multiples of 4 (vector loads),
# of 32 (a warp, a tile) and up to 256 stay; a kernel that needs more (or no tail handling past a block
# of 256) is not checked at a made-up size.
KEPT_POWER_OF_TWO = 256


def automatic_verify_points(spec: KernelSpec) -> list[dict[str, int]]:
    """The sizes to verify at besides the benchmark when the spec names none, in the order to try them.

    Each size whose expression uses no other size (`4096`, `"1 << 26"`, `"4096 * 4"`) is made about a
    third, and sizes written over others are re-derived from those. First an odd size, so that a kernel
    that only works at the benchmark size, or only at a multiple of its block, fails; then (for an
    original kernel that itself fails at the odd one) a size that keeps each size's power-of-two factor up
    to KEPT_POWER_OF_TWO (a multiple of 4 for vector loads stays one), still smaller than the benchmark.
    Points that equal the benchmark (tiny sizes) or that the spec cannot be evaluated at are left out."""
    independent = [
        name
        for name, value in spec.sizes.items()
        if not referenced_names(spec.size_expressions.get(name, value), spec.sizes.keys())
    ]
    points: list[dict[str, int]] = []
    for shrink in (_odd_third, _third_keeping_power_of_two):
        try:
            point = complete_sizes(spec, {name: shrink(spec.sizes[name]) for name in independent})
            resolve(spec, point)
        except SpecResolveError:
            continue  # the spec cannot run there (a shape that reaches 0, a division by zero)
        if point != spec.sizes and point not in points:
            points.append(point)
    return points


def _odd_third(value: int) -> int:
    """About a third, odd: 4096 -> 1365, 1 << 26 -> 22369621; 0, 1 and 2 stay."""
    return (value // 3) | 1 if value > 2 else value


def _third_keeping_power_of_two(value: int) -> int:
    """About a third with the same power-of-two factor (capped at KEPT_POWER_OF_TWO and at the third
    itself): 1 << 26 -> 22369536 (256 × odd), 4096 -> 1280, 1000 -> 328 (8 × 41); 0, 1 and 2 stay."""
    third = value // 3
    if third < 1:
        return value
    kept = min(value & -value, KEPT_POWER_OF_TWO, 1 << (third.bit_length() - 1))
    return kept * ((third // kept) | 1)


def problems_for(
    spec: KernelSpec,
    block: tuple[int, ...] | None = None,
    verify_points: Sequence[Mapping[str, int]] | None = None,
) -> tuple[tuple[Problem, ...], tuple[LaunchPlan, ...], bool]:
    """The benchmark problem first, then the verification sizes: `verify_points` when given (complete
    size points, e.g. one of `automatic_verify_points`), else the spec's `[verify] sizes`, else the first
    automatic point. The flag says the extra size was derived automatically (the caller tries the next
    automatic point, or none, with a note, if the original kernel itself fails there)."""
    size_sets: list[dict[str, int]] = [dict(spec.sizes)]
    automatic = verify_points is None and not spec.verify_sizes
    if verify_points is not None:
        extra = [dict(point) for point in verify_points]
    elif automatic:
        extra = automatic_verify_points(spec)[:1]
    else:
        extra = [complete_sizes(spec, s) for s in spec.verify_sizes]
    size_sets += [s for s in extra if s != spec.sizes]
    problems, launches = [], []
    for sizes in size_sets:
        problem, launch = resolve(spec, sizes, block)
        problems.append(problem)
        launches.append(launch)
    return tuple(problems), tuple(launches), automatic and len(size_sets) > 1


def with_block(spec: KernelSpec, block: Sequence[int]) -> KernelSpec:
    return replace(spec, launch=replace(spec.launch, block=tuple(block)))
