"""From a .cu file to the kernels that can be run: discovery, the spec (written or inferred), problems."""

from __future__ import annotations

import bisect
import hashlib
import logging
import operator
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path

from cuda_agent.agent.kernels import (
    EarlierRead,
    Kernel,
    KernelBlock,
    KernelPositions,
    KernelRun,
    KernelRuns,
    StaleTree,
    find_kernels,
)
from cuda_agent.agent.memo import BoundedMemo, MadeOnRead
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
from cuda_agent.agent.spec.headers import Header, local_headers
from cuda_agent.agent.spec.infer import integer_defines
from cuda_agent.agent.spec.program import (
    ProgramHost,
    ProgramPoint,
    read_partial_point,
    read_program_points,
    spec_from_points,
    with_program_launch,
)
from cuda_agent.agent.spec.resolve import instantiation
from cuda_agent.agent.spec.source import marker_offsets, markers_after_edit
from cuda_agent.agent.spec.validate import split_template_arguments
from cuda_agent.agent.spec.written_out import called_helpers
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
        argument that follows it: `rms_norm<block.x>` is `rms_norm<256>`), else the name; qualified with
        the kernel's namespaces (`ops::scale`), as the lookup starts at the global scope."""
        return self.name_expression_at(self.spec.launch.block if self.spec else None)

    def name_expression_at(self, block: Sequence[int] | None, source: str | None = None) -> str:
        """The name expression of a candidate run with `block`, whose file is `source`: the instantiation
        its own file's spec writes (what a user applying it gets; the launch tuner may have rewritten a
        template argument with the block), with the arguments that follow the block evaluated at `block`.
        This target's spec when the candidate's file has none for the kernel."""
        spec = self.spec
        if spec is None or spec.instantiate is None:
            return self.kernel.qualified_name
        if source is not None and source != self.source:
            own = load_targets(self.path, source, infer=False).find(self.kernel.name)
            if own is not None and own.spec is not None and own.spec.instantiate is not None:
                spec = own.spec
        try:
            expression = instantiation(spec, tuple(block) if block else None) or self.kernel.name
        except SpecResolveError:  # that block breaks an argument (a division by zero): the compile says so
            expression = spec.instantiate
        return _qualified(expression, self.kernel)

    def template_values(self) -> dict[str, str] | None:
        """A template kernel's parameters as its spec instantiates it (`scale_rows<256, float>` for
        `template <int D, typename T>`: {"D": "256", "T": "float"}; an argument the launch sets, `block.x`,
        is `blockDim.x` in the kernel); None where the spec does not name them all."""
        kernel, spec = self.kernel, self.spec
        instantiate = spec.instantiate if spec is not None else None
        if not kernel.template_parameters or instantiate is None or "<" not in instantiate:
            return None
        given = split_template_arguments(instantiate[instantiate.index("<") + 1 : instantiate.rindex(">")])
        if len(given) != len(kernel.template_parameters):
            return None
        return {
            p.name: re.sub(r"\bblock\.([xyz])\b", r"blockDim.\1", value.strip())
            for p, value in zip(kernel.template_parameters, given, strict=True)
        }

    @property
    def compilable(self) -> bool:
        """Whether it can be compiled by name: a template only through its spec's `instantiate`."""
        if not self.kernel.name:
            return False
        if self.kernel.template_parameters:
            return bool(self.spec and self.spec.instantiate)
        return True


def _qualified(expression: str, kernel: Kernel) -> str:
    """`expression` (`scale<float>`) with the kernel's namespaces before its name (`ops::scale<float>`)
    where written without them: a spec may name the kernel as its own namespace does."""
    if not kernel.namespace or expression.partition("<")[0].strip() != kernel.name:
        return expression
    return f"{kernel.namespace}::{expression.strip()}"


# A kernel's inferred spec and note, with the KernelPositions it was read as (an `id` alone may be reused).
InferredSpec = tuple[KernelPositions, KernelSpec | None, str]


@dataclass(frozen=True)
class FileTargets:
    path: Path
    source: str
    # A tuple; after an edit in the language server a TargetList, equal to the tuple a fresh read gives.
    targets: Sequence[KernelTarget]
    spec_errors: tuple[SpecError, ...]
    # What the host code said, for the next edit's load_targets (earlier_file): kept when it cannot change.
    host_facts: HostFacts | None = field(default=None, compare=False, repr=False)
    # The specs inferred for this text's kernels, for the next edit's load_targets: by `id(kernel.read)`
    # (the same KernelPositions while the kernel's text is unchanged, wherever an edit moved it).
    inferred: Mapping[int, InferredSpec] = field(default_factory=dict, compare=False, repr=False)
    # Where the spec comments' marker occurs, for the next edit's (only the edit's surroundings are searched).
    spec_markers: tuple[int, ...] | None = field(default=None, compare=False, repr=False)

    def find(self, name: str | None) -> KernelTarget | None:
        if name is None:
            return self.targets[0] if len(self.targets) == 1 else None
        return self.named(name)

    def named(self, name: str) -> KernelTarget | None:
        """The first kernel called `name` (by a TargetList's index of names, without making the others)."""
        if isinstance(self.targets, TargetList):
            return self.targets.named(name)
        return next((t for t in self.targets if t.kernel.name == name), None)


@dataclass(frozen=True)
class _Found:
    """What one analysis found for a block of kernels: their targets, the spec inferred for each (None where
    none was: a written or a broken spec, a failure, a spec from another file), and which of them
    (ascending) have none: after an edit those are read again, unless their written spec still stands.
    `since`: how many line moves of its TargetList's `moves` its notes already count."""

    targets: tuple[KernelTarget, ...]
    inferred: tuple[InferredSpec | None, ...]
    not_inferred: tuple[int, ...]
    since: int = 0

    @cached_property
    def cited(self) -> list[tuple[int, int]]:
        """(0-based line, index) of each line an inferred spec's notes cite ("at line 20"), in line order."""
        found = []
        for at, entry in enumerate(self.inferred):
            if entry is not None:
                texts = (entry[2], entry[1].inference_note) if entry[1] is not None else (entry[2],)
                found += [(int(row) - 1, at) for text in texts for row in _CITED_LINE.findall(text)]
        return sorted(found)

    @cached_property
    def by_read(self) -> dict[int, list[int]]:
        """The indices of the kernels by the id of their KernelPositions."""
        found: dict[int, list[int]] = {}
        for at, target in enumerate(self.targets):
            found.setdefault(id(target.kernel.read), []).append(at)
        return found


def _found(targets: Sequence[KernelTarget], inferred: Mapping[int, InferredSpec], since: int = 0) -> _Found:
    """`targets` (made by load_targets, with `inferred` its record of what it inferred) as found."""
    entries = tuple(_inferred_entry(inferred, target) for target in targets)
    not_inferred = tuple(at for at, entry in enumerate(entries) if entry is None)
    return _Found(tuple(targets), entries, not_inferred, since)


class TargetList(MadeOnRead[KernelTarget]):
    """The targets of a text after an edit: each kernel's target as the analysis that read it found it,
    made for this text when asked for (its kernel moved, this source, the spec written for it now if any,
    the lines its inferred spec cites moved by the edits since): an edit then costs what it changed, not a
    target for each of the file's thousands of kernels. Equal to the tuple of targets a fresh read of the
    same text gives. `moves`: the edits that moved lines an inferred spec may cite, in order."""

    def __init__(
        self, path: Path, source: str, kernels: KernelRuns, specs: Mapping[str, KernelSpec],
        failed: frozenset[str], moves: tuple[TextEdit, ...] = (),
    ) -> None:  # fmt: skip
        super().__init__()
        self.path, self.source, self.kernels = path, source, kernels
        self.specs, self.failed, self.moves = specs, failed, moves

    def __len__(self) -> int:
        return len(self.kernels)

    def _make(self, index: int) -> KernelTarget:
        run, at = self.kernels.locate(index)
        found = run.block.payload
        assert isinstance(found, _Found)
        return self._made_for(found, at, self.kernels[index])

    def __iter__(self) -> Iterator[KernelTarget]:
        for index in range(len(self)):
            yield self[index]

    def _made_for(self, found: _Found, at: int, kernel: Kernel) -> KernelTarget:
        """The block's target `at` (of an earlier text) for this text, as load_targets would make it now."""
        target, name = found.targets[at], kernel.name
        if name in self.specs:
            spec, note, skipped = self.specs[name], "", ""
        elif name in self.failed:
            spec, note, skipped = None, BROKEN_SPEC_NOTE, ""
        elif found.since < len(self.moves) and (entry := self.entry(found, at)) is not None:
            spec, note, skipped = entry[1], _inferred_note(entry[1], entry[2]), ""
        else:
            spec, note, skipped = target.spec, target.note, target.skipped
        if (
            target.source is self.source
            and target.kernel is kernel
            and target.spec is spec
            and target.note == note
        ):
            return target
        return KernelTarget(self.path, self.source, kernel, spec, note, skipped)

    def entry(self, found: _Found, at: int) -> InferredSpec | None:
        """The spec inferred for the block's kernel `at`, citing the lines where what it cites is now."""
        entry = found.inferred[at]
        for move in self.moves[found.since :] if entry is not None else ():
            moved = _with_lines_moved(entry, move)
            assert moved is not None, "a kernel whose spec cites an edited line is inferred again"
            entry = moved
        return entry

    def written(self, name: str) -> bool:
        """Whether kernels of that name have their spec written in this text (well or not)."""
        return name in self.specs or name in self.failed

    def named(self, name: str) -> KernelTarget | None:
        index = next(self.kernels.named(name), None)
        return None if index is None else self[index]

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence) or isinstance(other, str):
            return NotImplemented
        return len(self) == len(other) and all(map(operator.eq, self, other))

    def __hash__(self) -> int:
        return hash(tuple(self))

    def __repr__(self) -> str:
        return f"TargetList({list(self)!r})"


class _InferredView(Mapping[int, InferredSpec]):
    """A TargetList's inferred specs by the id of their kernel's KernelPositions (FileTargets.inferred), each
    citing the lines of this text: looked up, not made for every kernel after each edit."""

    def __init__(self, targets: TargetList) -> None:
        self.targets = targets

    def __getitem__(self, key: int) -> InferredSpec:
        for run in self.targets.kernels.runs:
            found = run.block.payload
            assert isinstance(found, _Found)
            for at in found.by_read.get(key, ()):
                entry = self.targets.entry(found, at) if run.lo <= at < run.hi else None
                if entry is not None:
                    return entry
        raise KeyError(key)

    def __iter__(self) -> Iterator[int]:
        for run in self.targets.kernels.runs:
            found = run.block.payload
            assert isinstance(found, _Found)
            for at in range(run.lo, run.hi):
                if found.inferred[at] is not None:
                    yield id(found.targets[at].kernel.read)

    def __len__(self) -> int:
        return sum(1 for _ in self)


def _inferred_note(spec: KernelSpec | None, reason: str) -> str:
    """A target's note for what inferring its spec said."""
    return spec.inference_note if spec else f"no spec: {reason}; add a /* cuda-agent ... */ spec comment"


BROKEN_SPEC_NOTE = "its spec has errors (see above)"


# Inference from the signature reads only the kernel's own text (and the file's type aliases), so its
# answer is kept per definition text: the language server re-analyses a file on every edit, and a
# 5,000-line file re-inferred every kernel (~0.3 s). Inference from the program reads the host code too:
# it is kept per kernel text and the digest of what it reads (the file-level declarations, the functions
# launching the kernel and their callers), so an edit re-infers only the kernels it can change. Those
# digests depend only on the file without its kernels, and are kept per that text: an edit inside a kernel
# (the common case) finds them there without looking at the launches again.
_INFERRED: BoundedMemo[tuple[object, ...], tuple[KernelSpec | None, str]] = BoundedMemo()
# What a kernel alone says (`infer_spec`), by its text, the aliases and the #defines it names: room for
# every kernel of a big file, whose edits read them all again in order (a smaller memo would lose each
# one just before it is asked for).
_FROM_SIGNATURE: BoundedMemo[tuple[object, ...], tuple[KernelSpec | None, str]] = BoundedMemo(16384)
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
        if earlier.inert:
            return self._shifted(edit.start, edit.new_end - edit.old_end)  # only a comment changed
        if changes_token_marks(edit, data):
            return None
        if _overlaps(self.relevant, edit.start, edit.old_end):
            return None
        shifted = self._shifted(edit.start, edit.new_end - edit.old_end)
        if any(_overlaps(shifted.relevant, start, end) for start, end in earlier.changed):
            return None  # what inference reads changed its syntax (a brace typed early swallows a #define)
        moves_lines = edit.lines_by != 0 and any(start >= edit.start for start, _ in self.relevant)
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
        if not moves_lines:
            return shifted
        moved = f"{edit.old_end_line}:{edit.lines_by}".encode()
        dependencies = {
            name: hashlib.blake2b(digest + moved, digest_size=16).digest()
            for name, digest in self.dependencies.items()
        }
        return replace(shifted, dependencies=dependencies)

    def _shifted(self, at: int, delta: int) -> HostFacts:
        """These facts with the ranges after byte `at` moved by `delta` (an edit there), the launchers'
        names kept (made again for each edit, they took a millisecond of it in a 50,000-line file)."""
        relevant = tuple([(s, e) if e <= at else (s + delta, e + delta) for s, e in self.relevant])
        moved = replace(self, relevant=relevant)
        if "_launcher_names" in self.__dict__:
            moved.__dict__["_launcher_names"] = self._launcher_names
        return moved


def _overlaps(ranges: Sequence[tuple[int, int]], start: int, end: int) -> bool:
    """Whether a range overlaps [start, end): a loop, which took half the time of `any` over a generator
    for the 2,000 ranges of a 50,000-line file."""
    for low, high in ranges:  # noqa: SIM110 (see above)
        if low < end and start < high:
            return True
    return False


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
        previous: HostFacts | None, headers: Callable[[], tuple[Header, ...]] = tuple,
    ) -> None:  # fmt: skip
        self.text, self.data, self.tree = text, data, tree
        self.headers: tuple[Header, ...] = ()
        self._program: ProgramHost | None = None
        if earlier is not None and earlier.inert and previous is None:
            raise StaleTree("host facts to read")
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
            if kernel.has_errors:
                # a kernel the parser recovered from may span host code after it (a launcher, its
                # launch), which the program still reads: its bytes count as the host's
                continue
            pieces.append(data[position : kernel.start_byte])
            # Its line count stays: the host code's lines, which the inferred specs cite, move with it.
            pieces.append(str(data.count(b"\n", kernel.start_byte, kernel.end_byte)).encode())
            position = max(position, kernel.end_byte)
        pieces.append(data[position:])
        # what the file's own headers define is the host code's too (sizes, element types); read only
        # here, where the facts are not carried over from the text before an edit
        self.headers = headers()
        pieces += [str(header.path).encode() + b"\0" + header.data for header in self.headers]
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
            for header in self.headers:  # the file's own definitions win (`include` keeps them)
                self._program.include(ProgramHost(parse_cuda(header.data), header.data))
        return self._program


def _inferred(
    kernel: Kernel,
    text: str,
    data: bytes,
    tree: Tree,
    host: _Host,
    headers: tuple[bytes, ...] = (),
    path: Path | None = None,
) -> tuple[KernelSpec | None, str]:
    own = data[kernel.start_byte : kernel.end_byte]
    typedefs = host.typedefs
    dependencies = host.dependencies.get(kernel.name)
    # What the kernel alone says: its text, the type aliases and the #defines it names, the file's or its
    # own headers' (a TILE, the sizes of a kernel without size parameters). Kept by those, so that a big
    # file's kernels that an edit only moved are not read again.
    aliases = tuple(sorted(typedefs.items()))
    defined = integer_defines(tree, headers)
    words = {word.decode() for word in _IDENTIFIER.findall(own)}
    named = tuple(sorted((name, defined[name]) for name in words & defined.keys()))

    helpers = called_helpers(tree, kernel.name, words)  # read written out where the kernel is refused

    def from_signature() -> tuple[KernelSpec | None, str]:
        return _FROM_SIGNATURE.get_or_make(
            (own, aliases, named, helpers), lambda: infer_spec(kernel, text, tree, typedefs, headers, path)
        )

    if dependencies is None:
        return from_signature()

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
        signature_spec, note = from_signature()
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
    data: bytes | None = None,
) -> FileTargets:
    """The file's kernels with their specs. `tree`: the source's parse when the caller has one (the
    language server reparses incrementally after an edit); `earlier`: the kernels before that edit, and
    `earlier_file` what was found in that text (its host facts and inferred specs are kept where the edit
    cannot have changed them). `infer=False`: written specs only (a caller re-reading a candidate keeps the
    original's inferred spec, and need not pay for reading the host code again). `data`: the source's
    bytes, when the caller has them."""
    text = path.read_text(encoding="utf-8", errors="replace") if source is None else source
    data = text.encode("utf-8") if data is None else data
    tree = tree or parse_cuda(data)  # once: inference reads every kernel from it (a parse each was quadratic)
    kernels = find_kernels(data, tree, earlier)
    markers = _spec_markers(data, earlier, earlier_file)
    specs, errors = parse_specs(data, kernels, tree, markers)
    failed = frozenset(e.kernel for e in errors if e.kernel)
    inference = _Inference(path, text, data, tree, kernels, earlier, earlier_file)
    reader = _Reader(path, text, specs, failed, inference, infer)
    if isinstance(kernels, KernelRuns) and infer:
        after = _targets_after_edit(reader, kernels, earlier_file)
        targets: Sequence[KernelTarget] = after
        inferred: Mapping[int, InferredSpec] = _InferredView(after)
    else:
        targets, inferred = tuple(map(reader.target, kernels)), inference.inferred
    return FileTargets(path, text, targets, tuple(errors), inference.host_facts, inferred, markers)


def _spec_markers(
    data: bytes, earlier: EarlierRead | None, earlier_file: FileTargets | None
) -> tuple[int, ...]:
    if earlier is None or earlier_file is None or earlier_file.spec_markers is None:
        return tuple(marker_offsets(data))
    edit = earlier.edit
    return tuple(markers_after_edit(earlier_file.spec_markers, data, edit.start, edit.old_end, edit.new_end))


class _Reader:
    """One kernel's target: its written spec, else why it has none, else the spec inferred for it."""

    def __init__(
        self, path: Path, text: str, specs: Mapping[str, KernelSpec], failed: frozenset[str],
        inference: _Inference, infer: bool,
    ) -> None:  # fmt: skip
        self.path, self.text, self.specs, self.failed = path, text, specs, failed
        self.inference, self.infer = inference, infer

    def target(self, kernel: Kernel) -> KernelTarget:
        spec = self.specs.get(kernel.name)
        note = skipped = ""
        if spec is None and kernel.name in self.failed:
            note = BROKEN_SPEC_NOTE
        elif spec is None and not self.infer:
            note = "no spec written (not inferred here)"
        elif spec is None:
            try:
                spec, reason = self.inference.infer(kernel)
            except StaleTree:
                raise
            except Exception as error:  # our bug, not the user's: it costs this kernel only
                note = skipped = skipped_because(kernel, "spec inference", error)
            else:
                note = _inferred_note(spec, reason)
        return KernelTarget(self.path, self.text, kernel, spec, note, skipped)

    def block(self, kernels: Sequence[Kernel], since: int) -> KernelBlock:
        """The kernels' targets made now, as a block for the next edit."""
        targets = tuple(map(self.target, kernels))
        return KernelBlock(kernels, _found(targets, self.inference.inferred, since))

    def kept(self, name: str) -> bool:
        """Whether a kernel of that name has its spec written now (well or not): then a target found
        before stands, with that spec."""
        return name in self.specs or name in self.failed


def _inferred_entry(inferred: Mapping[int, InferredSpec], target: KernelTarget) -> InferredSpec | None:
    """The spec inferred for the target's kernel as read, if its target holds one inferred for it."""
    entry = inferred.get(id(target.kernel.read))
    return entry if entry is not None and entry[0] is target.kernel.read else None


# A TargetList of more runs than this, or whose targets' notes wait for more line moves than MAX_MOVES, is
# made into one block (every target made once): each run costs a little on every read, and an edit adds
# one or two; each move waiting costs every target made.
MAX_RUNS = 48
MAX_MOVES = 16


def _targets_after_edit(reader: _Reader, kernels: KernelRuns, earlier_file: FileTargets | None) -> TargetList:
    """The targets of an edited text: where what was inferred before stands (the edit did not change the
    host code's facts), each run of kernels the edit left alone keeps the targets found before, their
    notes' lines moved when read, and only the kernels read anew (and those whose spec must be found again:
    one citing a line the edit changed) get targets made now; else every kernel's target is made now."""
    inference, moves, again = reader.inference, (), None
    if inference.keeps_earlier():
        if earlier_file is not None and isinstance(earlier_file.targets, TargetList):
            moves = earlier_file.targets.moves
        move = inference.moved_lines()
        again = _found_again(reader, kernels, moves, move)
        moves += (move,) if move is not None else ()
    if inference.inert and (again is None or again or _has_fresh(kernels)):
        raise StaleTree("targets to find anew")
    pieces: list[KernelRun] = []
    group: list[Kernel] = []  # kernels whose targets are made now, in a block of their own
    for number, run in enumerate(kernels.runs):
        first, count = kernels.first_of(number), run.hi - run.lo
        if again is None or run.block.payload is None:
            cuts = list(range(first, first + count))
        else:
            cuts = again[bisect.bisect_left(again, first) : bisect.bisect_left(again, first + count)]
        start = first
        for cut in [*cuts, first + count]:
            if start < cut:
                if group:
                    pieces.append(_run_of(reader.block(group, len(moves))))
                    group = []
                pieces.append(run.moved(0, 0, run.lo + start - first, run.lo + cut - first))
            if cut < first + count:
                group.append(kernels[cut])
            start = cut + 1
    if group:
        pieces.append(_run_of(reader.block(group, len(moves))))
    made = TargetList(reader.path, reader.text, KernelRuns(pieces), reader.specs, reader.failed, moves)
    return _compacted(made) if len(made.kernels.runs) > MAX_RUNS or _waiting(made) > MAX_MOVES else made


def _waiting(targets: TargetList) -> int:
    """The most line moves a target's notes wait for."""
    sinces = [
        run.block.payload.since for run in targets.kernels.runs if isinstance(run.block.payload, _Found)
    ]
    return len(targets.moves) - min(sinces, default=len(targets.moves))


def _has_fresh(kernels: KernelRuns) -> bool:
    return any(run.block.payload is None for run in kernels.runs)


def _run_of(block: KernelBlock) -> KernelRun:
    return KernelRun(block, 0, len(block.kernels))


def _found_again(
    reader: _Reader, kernels: KernelRuns, moves: tuple[TextEdit, ...], move: TextEdit | None
) -> list[int]:
    """The kept kernels (by index, ascending) whose earlier target does not stand: one without an inferred
    spec whose written spec is gone, one that a file next to this one now launches, and one whose inferred
    spec cites a line that `move` (the edit, which moved lines after it) changed."""
    again = set()
    for number, run in enumerate(kernels.runs):
        found = run.block.payload
        if not isinstance(found, _Found):
            continue
        first, not_inferred = kernels.first_of(number), found.not_inferred
        for at in not_inferred[
            bisect.bisect_left(not_inferred, run.lo) : bisect.bisect_left(not_inferred, run.hi)
        ]:
            if not reader.kept(run.block.kernels[at].name):
                again.add(first + at - run.lo)
        if move is not None:
            again.update(first + at - run.lo for at in _citing(found, moves, move) if run.lo <= at < run.hi)
    for name in reader.inference.launched_elsewhere():
        if not reader.kept(name):
            again.update(kernels.named(name))
    return sorted(again)


def _citing(found: _Found, moves: tuple[TextEdit, ...], move: TextEdit) -> list[int]:
    """The block's kernels whose inferred spec cites a line `move` changed, where their lines are before it
    (after `moves` since the block's), found by bisection over the lines they cite."""
    waiting, cited = moves[found.since :], found.cited
    low = _first(len(cited), lambda i: _row_now(cited[i][0], waiting) >= move.start_line)
    high = _first(len(cited), lambda i: _row_now(cited[i][0], waiting) > move.old_end_line)
    return [at for _, at in cited[low:high]]


def _row_now(row: int, moves: Sequence[TextEdit]) -> int:
    """Where a (0-based) line is after `moves`, as _lines_moved moves what cites it; a line one of them
    changed stays at its first line (what cites it was inferred again), so the answer keeps the order."""
    for move in moves:
        if row > move.old_end_line:
            row += move.lines_by
        elif row >= move.start_line:
            row = move.start_line
    return row


def _first(count: int, holds: Callable[[int], bool]) -> int:
    """The first index below `count` where `holds` (false, then true), else count."""
    low, high = 0, count
    while low < high:
        middle = (low + high) // 2
        low, high = (low, middle) if holds(middle) else (middle + 1, high)
    return low


def _compacted(targets: TargetList) -> TargetList:
    """The same targets in one block, each made, with no line moves waiting."""
    made, entries = tuple(targets), []
    for run in targets.kernels.runs:
        found = run.block.payload
        assert isinstance(found, _Found)
        for at in range(run.lo, run.hi):
            # A target holding its written spec has lost the one inferred before it.
            written = targets.written(run.block.kernels[at].name)
            entries.append(None if written else targets.entry(found, at))
    not_inferred = tuple(at for at, entry in enumerate(entries) if entry is None)
    block = KernelBlock([target.kernel for target in made], _Found(made, tuple(entries), not_inferred))
    return TargetList(
        targets.path, targets.source, KernelRuns([_run_of(block)]), targets.specs, targets.failed
    )


def kernel_runs(found: FileTargets) -> KernelRuns:
    """The file's kernels as runs whose blocks carry their targets: what the next edit's load_targets
    keeps (`EarlierRead.kernels`)."""
    if isinstance(found.targets, TargetList):
        return found.targets.kernels
    targets = tuple(found.targets)
    return KernelRuns.of([target.kernel for target in targets], _found(targets, found.inferred))


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
        self._headers: tuple[Header, ...] | None = None  # see _local_headers
        self.inferred: dict[int, InferredSpec] = {}
        self._kept_inferred: Mapping[int, InferredSpec] | None = None  # see _kept

    @property
    def inert(self) -> bool:
        """Whether the tree was not parsed again after the edit (EarlierRead.inert)."""
        return self._earlier is not None and self._earlier.inert

    @property
    def host_facts(self) -> HostFacts | None:
        return self._host.facts if isinstance(self._host, _Host) else self._earlier_host

    def host(self) -> _Host:
        if self._host is None:
            try:
                self._host = _Host(
                    self.text, self.data, self.tree, self._kernels, self._earlier, self._earlier_host,
                    self._local_headers,
                )  # fmt: skip
            except StaleTree:
                raise
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
        headers = self._header_texts()
        spec, reason = _inferred(kernel, self.text, self.data, self.tree, host, headers, self.path)
        if elsewhere:
            # Nothing here launches it: a header's kernel, launched from the .cu next to it.
            found, why = infer_from_elsewhere(self._neighbours, kernel, self.tree, host.program())
            spec, reason = (found, why) if found is not None else (spec, f"{reason}; elsewhere: {why}")
        else:  # what other files say is read again each time: they may have changed on disk
            self.inferred[id(kernel.read)] = (kernel.read, spec, reason)
        return spec, reason

    def _local_headers(self) -> tuple[Header, ...]:
        """The file's own headers, read once a text: the host code and every kernel's inference ask."""
        if self._headers is None:
            self._headers = local_headers(self.path, self.data)
        return self._headers

    def _header_texts(self) -> tuple[bytes, ...]:
        return tuple(header.data for header in self._local_headers())

    def _kept(self, host: _Host) -> Mapping[int, InferredSpec]:
        """The specs inferred in the text before the edit, if the host code's facts are those they were
        inferred with (the same objects: kept by HostFacts.after or the memo); else none."""
        if self._kept_inferred is None:
            self._kept_inferred = self._earlier_inferred if self._same_facts(host) else {}
        return self._kept_inferred

    def _same_facts(self, host: _Host) -> bool:
        earlier = self._earlier_host
        same = earlier is not None and earlier.dependencies is host.dependencies
        return host.carried or (same and earlier is not None and earlier.typedefs is host.typedefs)

    def keeps_earlier(self) -> bool:
        """Whether every spec inferred in the text before the edit stands as it was inferred (but for the
        lines it cites, which moved_lines says how to move): the host code's facts are those it was
        inferred with."""
        if self._earlier is None:
            return False
        try:
            host = self.host()
        except StaleTree:
            raise
        except Exception:  # each kernel then says so, as inferring it raises the same
            return False
        return self._same_facts(host)

    def moved_lines(self) -> TextEdit | None:
        """The edit, if it moved lines that what was inferred before cites (host facts carried)."""
        host = self._host
        moved = isinstance(host, _Host) and host.lines_moved and self._earlier is not None
        return self._earlier.edit if moved and self._earlier is not None else None

    def launched_elsewhere(self) -> frozenset[str]:
        """The kernels that files next to this one launch and this file's host code does not: their specs
        come from those files, read again each time."""
        self._neighbours = self._neighbours or Neighbours(self.path)
        return self._neighbours.names() - self.host().dependencies.keys()


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


def reloaded_target(original: KernelTarget, source: str, name: str | None = None) -> KernelTarget | None:
    """A rewrite's file (`source`, its kernel `name`, the original's by default) as a target, as the user
    would have it after applying the rewrite. A file without a written spec keeps the original's
    (inferred) spec rather than re-inferring one from the rewritten kernel, which may read differently."""
    reloaded = load_targets(original.path, source, infer=False).find(name or original.kernel.name)
    if reloaded is None or original.spec is None:
        return None
    if reloaded.spec is None and not original.spec.inferred:
        return None  # the rewrite's written spec no longer parses: nothing sound to build on
    if reloaded.spec is None or reloaded.spec.inferred:
        reloaded = replace(reloaded, spec=original.spec)
    return reloaded
