"""Integer index expressions as polynomials over named atoms: the algebra the kernel analysis uses.

A `Form` is a sum of integer-weighted products of atoms (`2*row*C + c - 1`). Atoms are the things the
analysis does not look inside: the thread builtins (`threadIdx.x`), parameters, loop variables, and
opaque values (a load from memory, a division, a call), each opaque atom remembering which base atoms
it depends on, so that "does this differ between neighbouring threads" still has an answer. Two spellings
of one index give one form: `(idx / T) * T + idx % T` is `idx`, `row * C + c` is `c + C * row`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

Monomial = tuple[str, ...]  # sorted atom names; () is the constant term

THREAD_ATOMS = frozenset(
    f"{name}.{axis}" for name in ("threadIdx", "blockIdx", "blockDim", "gridDim") for axis in "xyz"
)
LANE = "threadIdx.x"  # what neighbouring threads of a warp differ in (for an x extent of 32 or more)


@dataclass(frozen=True)
class Form:
    """A polynomial with integer coefficients over atoms."""

    terms: Mapping[Monomial, int] = field(default_factory=dict)

    @staticmethod
    def constant(value: int) -> Form:
        return Form({(): value} if value else {})

    @staticmethod
    def atom(name: str) -> Form:
        return Form({(name,): 1})

    def __add__(self, other: Form) -> Form:
        terms = dict(self.terms)
        for monomial, coefficient in other.terms.items():
            terms[monomial] = terms.get(monomial, 0) + coefficient
        return Form({m: c for m, c in terms.items() if c})

    def __neg__(self) -> Form:
        return Form({m: -c for m, c in self.terms.items()})

    def __sub__(self, other: Form) -> Form:
        return self + (-other)

    def __mul__(self, other: Form) -> Form:
        terms: dict[Monomial, int] = {}
        for ma, ca in self.terms.items():
            for mb, cb in other.terms.items():
                key = tuple(sorted(ma + mb))
                terms[key] = terms.get(key, 0) + ca * cb
        return Form({m: c for m, c in terms.items() if c})

    def is_constant(self) -> bool:
        return all(not m for m in self.terms)

    def value(self) -> int | None:
        """The integer, when the form is a constant."""
        return self.terms.get((), 0) if self.is_constant() else None

    def atoms(self) -> set[str]:
        return {a for m in self.terms for a in m}

    def coefficient(self, atom: str) -> Form | None:
        """d(self)/d(atom) when the form is affine in the atom (no term holds it twice), else None."""
        result: dict[Monomial, int] = {}
        for monomial, c in self.terms.items():
            count = monomial.count(atom)
            if count > 1:
                return None
            if count == 1:
                rest = list(monomial)
                rest.remove(atom)
                result[tuple(rest)] = result.get(tuple(rest), 0) + c
        return Form({m: c for m, c in result.items() if c})

    def without(self, atom: str) -> Form:
        """The terms that do not hold the atom."""
        return Form({m: c for m, c in self.terms.items() if atom not in m})

    def substitute(self, atom: str, replacement: Form) -> Form:
        result = Form()
        for monomial, c in self.terms.items():
            term = Form.constant(c)
            for a in monomial:
                term = term * (replacement if a == atom else Form.atom(a))
            result = result + term
        return result

    def text(self) -> str:
        """C-like text, highest-degree terms first: `C*row + c - 1`."""
        if not self.terms:
            return "0"
        parts: list[str] = []
        for monomial in sorted(self.terms, key=lambda m: (-len(m), m)):
            c = self.terms[monomial]
            body = "*".join(monomial)
            magnitude = abs(c)
            term = body if body and magnitude == 1 else (f"{magnitude}*{body}" if body else str(magnitude))
            parts.append(("- " if c < 0 else "+ ") + term)
        text = " ".join(parts)
        return text[2:] if text.startswith("+ ") else "-" + text[2:]


@dataclass
class Atoms:
    """The opaque atoms made so far: name -> the base atoms it depends on (parameters, builtins, loop
    variables, `memory` for loads). Base atoms depend on themselves."""

    depends: dict[str, frozenset[str]] = field(default_factory=dict)
    # division atom -> (numerator, denominator, the matching remainder atom), for `recombine`
    splits: dict[str, tuple[Form, Form, str]] = field(default_factory=dict)
    # division and remainder atoms -> ("/" or "%", numerator, denominator), for ranges (reach.py)
    operations: dict[str, tuple[str, Form, Form]] = field(default_factory=dict)

    def opaque(self, key: str, inputs: Iterable[Form], memory: bool = False) -> Form:
        """One atom for a value the algebra does not model, keyed by its canonical text."""
        name = f"⟨{key}⟩"
        if name not in self.depends:
            roots: set[str] = {"memory"} if memory else set()
            for form in inputs:
                roots |= self.roots(form)
            self.depends[name] = frozenset(roots)
        return Form.atom(name)

    def roots(self, form: Form) -> set[str]:
        """The base atoms the form depends on."""
        found: set[str] = set()
        for atom in form.atoms():
            found |= self.depends.get(atom, frozenset({atom}))
        return found


def exact_quotient(numerator: Form, denominator: Form) -> Form | None:
    """`numerator / denominator` when the denominator is one term that divides every term exactly
    (`B*NH*T*T / (T*T)` is `B*NH`); None otherwise."""
    if len(denominator.terms) != 1:
        return None
    ((factors, scale),) = denominator.terms.items()
    result: dict[Monomial, int] = {}
    for monomial, coefficient in numerator.terms.items():
        rest = list(monomial)
        for factor in factors:
            if factor not in rest:
                return None
            rest.remove(factor)
        if coefficient % scale:
            return None
        result[tuple(rest)] = coefficient // scale
    return Form(result)


def quotient(numerator: Form, denominator: Form, atoms: Atoms) -> Form:
    """`numerator / denominator` (integer division): exact when every term divides, or both are numbers
    (C truncates toward zero: `MASK_DIM / 2` is 3), else an atom."""
    d = denominator.value()
    n = numerator.value()
    if n is not None and d:
        return Form.constant(abs(n) // abs(d) * (1 if (n < 0) == (d < 0) else -1))
    if d is not None and d != 0 and all(c % d == 0 for c in numerator.terms.values()):
        return Form({m: c // d for m, c in numerator.terms.items()})
    key = f"({numerator.text()}) / ({denominator.text()})"
    atoms.splits[f"⟨{key}⟩"] = (numerator, denominator, f"⟨({numerator.text()}) % ({denominator.text()})⟩")
    atoms.operations[f"⟨{key}⟩"] = ("/", numerator, denominator)
    return atoms.opaque(key, (numerator, denominator))


def remainder(numerator: Form, denominator: Form, atoms: Atoms) -> Form:
    d = denominator.value()
    n = numerator.value()
    if n is not None and d:  # C's sign: the numerator's
        return Form.constant(abs(n) % abs(d) * (1 if n >= 0 else -1))
    if d is not None and d != 0 and all(c % d == 0 for c in numerator.terms.values()):
        return Form()
    key = f"({numerator.text()}) % ({denominator.text()})"
    atoms.operations[f"⟨{key}⟩"] = ("%", numerator, denominator)
    return atoms.opaque(key, (numerator, denominator))


def recombine(form: Form, atoms: Atoms) -> Form:
    """`(x / d) * d + x % d` -> `x` wherever both halves of one split appear with the same weight: an
    index taken apart into (row, column) and put back together is the index it came from."""
    for _ in range(len(form.terms) + 1):
        step = _recombine_once(form, atoms)
        if step is None:
            return form
        form = step
    return form


def _recombine_once(form: Form, atoms: Atoms) -> Form | None:
    present = form.atoms()
    for name, (numerator, denominator, mod_name) in atoms.splits.items():
        if name not in present or mod_name not in present or len(denominator.terms) != 1:
            continue
        ((factors, scale),) = denominator.terms.items()
        for monomial, c in form.terms.items():
            if name not in monomial or c % scale:
                continue
            outer = list(monomial)
            outer.remove(name)
            if any(outer.count(f) < factors.count(f) for f in set(factors)):
                continue
            for f in factors:
                outer.remove(f)
            weight = c // scale
            mod_monomial = tuple(sorted([*outer, mod_name]))
            if form.terms.get(mod_monomial) != weight:
                continue
            split = Form({monomial: c}) + Form({mod_monomial: weight})
            return form - split + Form({tuple(sorted(outer)): weight}) * numerator
    return None
