"""Deep syntax trees (generated and unrolled code) cost nothing but their size: no walk over a tree recurses
on its depth, nothing climbs it parent by parent from deep inside (tree-sitter finds each parent from the
root), and a failure while reading one kernel costs that kernel only, with a diagnostic on its name."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import pytest_lsp
from cuda_agent.agent import targets as targets_module
from cuda_agent.agent.spec import parse as parse_module
from cuda_agent.agent.targets import load_targets
from cuda_agent.server.diagnostics import SKIPPED_CODE, spec_diagnostics
from cuda_agent.server.documents import analyse
from lsprotocol import types
from pytest_lsp import ClientServerConfig, LanguageClient, client_capabilities

from tests.server_support import SERVE, SERVER_ENV, diagnostics_for, make_recording_client, open_document

DEPTH = 10_000  # ten times Python's recursion limit: any recursive walk fails
SAXPY = """
__global__ void saxpy(const float* x, float* y, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
"""
ONE_LINE_KERNEL = (
    "__global__ void deep(const float* x, float* y, int n) "
    "{ int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = x[i]; }\n"
)


def _kernel(body: str, before: str = "") -> str:
    return (
        before + "__global__ void deep(const float* x, float* y, int n) {\n"
        "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
        f"    if (i < n) {{\n{body}\n    }}\n}}\n" + SAXPY
    )


def _launching_main(launch: str) -> str:
    return (
        SAXPY + "int main() {\n    int n = 1024;\n    float *x, *y;\n"
        "    cudaMalloc(&x, n * sizeof(float));\n    cudaMalloc(&y, n * sizeof(float));\n"
        f"    {launch}\n}}\n"
    )


def deep_sources(n: int) -> dict[str, str]:
    """A file per construct nested `n` deep, each beside an ordinary kernel (saxpy)."""
    return {
        "sum": _kernel("y[i] = x[i] + " + " + ".join(["1"] * n) + ";"),
        "right_nested_sum": _kernel("y[i] = " + "(1 + " * n + "x[i]" + ")" * n + ";"),
        "parentheses": _kernel("y[i] = " + "(" * n + "x[i]" + ")" * n + ";"),
        "braces": _kernel("{" * n + "y[i] = x[i];" + "}" * n),
        "ifs": _kernel("if (i < n) " * n + "y[i] = x[i];"),
        "loops": _kernel("for (int k = 0; k < 1; ++k) " * n + "y[i] = x[i];"),
        "conditionals": _kernel("y[i] = " + "i > 0 ? x[i] : " * n + "x[i];"),
        "subscripts": _kernel("y[i] = x[" + "(int)x[" * n + "i" + "]" * n + "];"),
        "calls": _kernel(
            "y[i] = " + "f(" * n + "x[i]" + ")" * n + ";", "__device__ float f(float v) { return v; }\n"
        ),
        "namespaces": "namespace a { " * n + ONE_LINE_KERNEL + " }" * n + SAXPY,
        "preprocessor": "#if 1\n" * n + ONE_LINE_KERNEL + "#endif\n" * n + SAXPY,
        "launch_in_blocks": _launching_main(
            "{" * n + "saxpy<<<(n + 255) / 256, 256>>>(x, y, 2.0f, n);" + "}" * n
        ),
        "allocation_factors": _launching_main(
            "float* z; cudaMalloc(&z, n * " + " * ".join(["1"] * n) + " * sizeof(float));\n"
            "    saxpy<<<(n + 255) / 256, 256>>>(x, y, 2.0f, n);"
        ),
    }


@pytest.mark.parametrize("construct", sorted(deep_sources(1)))
def test_a_construct_nested_ten_thousand_deep_is_read_like_any_other(construct: str, tmp_path: Path) -> None:
    source = deep_sources(DEPTH)[construct]
    path = tmp_path / f"{construct}.cu"
    path.write_text(source)
    start = time.perf_counter()
    files = load_targets(path, source)
    seconds = time.perf_counter() - start
    names = [t.kernel.name for t in files.targets]
    assert names[-1] == "saxpy" and set(names) <= {"deep", "saxpy"}
    assert all(t.spec is not None and not t.skipped for t in files.targets), [t.note for t in files.targets]
    # Before: RecursionError, or 5-25 s climbing parents (quadratic in the depth); now about a second.
    assert seconds < 15, f"{construct}: {seconds:.1f} s"


def test_the_namespaces_around_a_deep_kernel_are_all_found(tmp_path: Path) -> None:
    source = deep_sources(DEPTH)["namespaces"]
    deep = load_targets(tmp_path / "k.cu", source).find("deep")
    assert deep is not None and deep.kernel.namespace == "::".join(["a"] * DEPTH)


def test_spec_toml_nested_too_deep_is_a_spec_error_on_its_comment(tmp_path: Path) -> None:
    arrays = "/* cuda-agent\n[sizes]\nn = 1024\nextra = " + "[" * DEPTH + "]" * DEPTH + "\n*/\n"
    dotted = "/* cuda-agent\n[sizes]\nn = 1024\n" + ".".join(["a"] * DEPTH) + " = 1\n*/\n"
    for spec in (arrays, dotted):
        files = load_targets(tmp_path / "k.cu", spec + ONE_LINE_KERNEL + SAXPY)
        assert files.spec_errors and all(e.kernel == "deep" for e in files.spec_errors)
        assert files.find("deep").spec is None  # type: ignore[union-attr]
        assert files.find("saxpy").spec is not None  # type: ignore[union-attr]
    nested = load_targets(tmp_path / "k.cu", arrays + ONE_LINE_KERNEL).spec_errors
    assert "nest too deep" in nested[0].message


WRITTEN_SPEC = """/* cuda-agent
[sizes]
n = 1024
[args]
x = { role = "input", dtype = "float32", shape = ["n"] }
y = { role = "output", dtype = "float32", shape = ["n"] }
n = { role = "scalar", dtype = "int32", value = "n" }
[launch]
block = [128]
grid = ["ceil_div(n, block.x)"]
*/
"""


def _unique_kernels() -> tuple[str, str]:
    """Two kernels no earlier test has read (inference is kept per kernel text)."""
    tag = uuid.uuid4().hex[:8]
    broken, fine = f"broken_{tag}", f"fine_{tag}"
    text = "".join(
        f"__global__ void {name}(const float* x, float* y, int n) {{\n"
        "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n    if (i < n) y[i] = x[i];\n}\n"
        for name in (broken, fine)
    )
    return text, broken


def test_a_failure_inferring_one_kernel_costs_that_kernel_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    text, broken = _unique_kernels()
    infer = targets_module.infer_spec

    def failing(kernel, *args, **kwargs):  # type: ignore[no-untyped-def]
        if kernel.name == broken:
            raise RecursionError("maximum recursion depth exceeded")
        return infer(kernel, *args, **kwargs)

    monkeypatch.setattr(targets_module, "infer_spec", failing)
    analysis, _ = analyse(tmp_path / "k.cu", text, 1)
    by_name = {t.kernel.name: t for t in analysis.targets.targets}
    assert len(by_name) == 2
    assert by_name[broken].spec is None and "spec inference skipped" in by_name[broken].skipped
    assert "nest too deep" in by_name[broken].skipped and "Traceback" not in by_name[broken].skipped
    other = next(t for name, t in by_name.items() if name != broken)
    assert other.spec is not None and not other.skipped
    found = spec_diagnostics(analysis)
    skipped = [d for d in found if d.code == SKIPPED_CODE]
    assert len(skipped) == 1 and skipped[0].severity == types.DiagnosticSeverity.Warning
    name_line = by_name[broken].kernel.name_span.start_line
    assert skipped[0].range.start.line == name_line and skipped[0].message.startswith(broken)


def test_a_failure_reading_one_spec_comment_costs_that_spec_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    text, broken = _unique_kernels()
    kernels = text.split("__global__")
    text = WRITTEN_SPEC + "__global__" + kernels[1] + WRITTEN_SPEC + "__global__" + kernels[2]
    build = parse_module.build_spec

    def failing(data, kernel):  # type: ignore[no-untyped-def]
        if kernel.name == broken:
            raise ValueError("a bug")
        return build(data, kernel)

    monkeypatch.setattr(parse_module, "build_spec", failing)
    files = load_targets(tmp_path / "k.cu", text)
    assert len(files.spec_errors) == 1
    assert files.spec_errors[0].kernel == broken and files.spec_errors[0].line == 0
    assert "this spec was skipped" in files.spec_errors[0].message
    by_name = {t.kernel.name: t for t in files.targets}
    assert by_name[broken].spec is None  # broken, not replaced by an inferred one
    other = next(t for name, t in by_name.items() if name != broken)
    assert other.spec is not None and not other.spec.inferred


def test_check_on_a_deep_file_reports_every_kernel_without_a_traceback(tmp_path: Path) -> None:
    path = tmp_path / "deep.cu"
    sources = deep_sources(2_000)
    path.write_text(sources["sum"].replace(SAXPY, "") + sources["namespaces"].replace("deep(", "nested("))
    done = subprocess.run(
        [sys.executable, "-m", "cuda_agent", "check", str(path)],
        capture_output=True, text=True, timeout=300, env=SERVER_ENV,
    )  # fmt: skip
    output = done.stdout + done.stderr
    # Before: RecursionError reading the namespaces (a traceback, exit 1, no kernel checked).
    assert "Traceback" not in output and "RecursionError" not in output, output[-2000:]
    for name in ("deep", "nested", "saxpy"):
        assert f"{name}: spec inferred" in output, output[-2000:]


@pytest_lsp.fixture(
    config=ClientServerConfig(
        server_command=SERVE, server_env=SERVER_ENV, client_factory=make_recording_client
    )
)
async def client(lsp_client: LanguageClient):
    await lsp_client.initialize_session(
        types.InitializeParams(capabilities=client_capabilities("visual-studio-code"))
    )
    yield
    await lsp_client.shutdown_session()


async def test_the_server_answers_for_every_kernel_of_a_deep_file(client: LanguageClient, tmp_path: Path):
    sources = deep_sources(DEPTH)
    text = (
        sources["sum"].replace(SAXPY, "")
        + sources["conditionals"].replace(SAXPY, "").replace("deep(", "chain(")
        + sources["namespaces"].replace("deep(", "nested(")
    )
    uri = (tmp_path / "deep.cu").as_uri()
    open_document(client, uri, text)
    await diagnostics_for(client, uri, 1, timeout_s=60)
    lenses = await client.text_document_code_lens_async(
        types.CodeLensParams(text_document=types.TextDocumentIdentifier(uri=uri))
    )
    kernels = load_targets(tmp_path / "deep.cu", text).targets
    assert [t.kernel.name for t in kernels] == ["deep", "chain", "nested", "saxpy"]
    # Each has its lenses (before, the namespaces' RecursionError left the whole file without any).
    assert {lens.range.start.line for lens in lenses} == {t.kernel.name_span.start_line for t in kernels}
    hover = await client.text_document_hover_async(
        types.HoverParams(
            text_document=types.TextDocumentIdentifier(uri=uri), position=types.Position(line=0, character=18)
        )
    )
    assert hover is not None and "deep" in str(hover.contents)
    actions = await client.text_document_code_action_async(
        types.CodeActionParams(
            text_document=types.TextDocumentIdentifier(uri=uri),
            range=types.Range(
                start=types.Position(line=0, character=18), end=types.Position(line=0, character=18)
            ),
            context=types.CodeActionContext(diagnostics=[]),
        )
    )
    assert actions is not None
