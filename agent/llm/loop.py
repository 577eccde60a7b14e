"""The LLM proposer's loop: the model proposes through tools, the engine compiles, verifies and times, the
model reads the results and revises, until a budget runs out or it stops improving.

One session per kernel, after the offline search (seeded with its best). Every candidate goes through
`Engine.evaluate`, the same path as the offline proposers', and comes back as a CandidateResult: the
caller puts them in the same pool, where only verified, measured-faster candidates can win. A failing API
(after the SDK's retries) or unreadable replies end the session with the reason; they never raise.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from cuda_agent.agent.candidates import CandidateResult
from cuda_agent.agent.engine import Baseline, Engine
from cuda_agent.agent.llm.pricing import cost_usd, price_of
from cuda_agent.agent.llm.prompt import (
    COMPILE,
    COMPILE_AND_TEST,
    GPU_PROPERTIES,
    ORIGINAL_PROFILE,
    TOOLS,
    first_message,
    system_prompt,
    tried_row,
)
from cuda_agent.agent.llm.providers import ChatProvider, MalformedReply, ProviderError, Reply
from cuda_agent.agent.llm.reports import baseline_text, compile_text, gpu_text, result_text
from cuda_agent.agent.llm.settings import LlmSettings
from cuda_agent.agent.llm.submission import Submission, build_candidate, read_submission
from cuda_agent.agent.llm.transcript import ToolCall, Turn, Usage, transcript_json
from cuda_agent.agent.search import best_of
from cuda_agent.sandbox.reports import DeviceInfo

MALFORMED_RETRIES = 2  # a reply that cannot be read is asked for again this many times


@dataclass
class LlmSession:
    """One model's work on one kernel: the conversation, its cost, and why it ended."""

    provider: str
    model: str
    system: str = ""
    turns: list[Turn] = field(default_factory=list)
    results: list[CandidateResult] = field(default_factory=list)
    replies: int = 0  # model turns answered
    max_turns: int = 0
    usage: Usage = field(default_factory=Usage)
    cost_usd: float = 0.0
    price_note: str = ""
    stop_reason: str = ""
    seconds: float = 0.0
    model_seconds: float = 0.0  # waiting for the model, retries included
    # Per model turn, the loop's own time: the tools (compile, verify, time) and the bookkeeping.
    overhead_s: list[float] = field(default_factory=list)

    @property
    def proposer(self) -> str:
        return f"llm:{self.model}"

    def transcript(self) -> tuple[dict[str, Any], ...]:
        return transcript_json(self.system, self.turns)

    def summary(self) -> str:
        u = self.usage
        cost = f"est. ${self.cost_usd:.2f}" + (f" ({self.price_note})" if self.price_note else "")
        return (
            f"LLM {self.model}: {self.replies} turn(s), {len(self.results)} candidate(s), "
            f"{u.prompt_tokens:,} tokens in ({u.cache_read_tokens:,} from cache) / {u.output_tokens:,} out, "
            f"{cost}; " + (f"stopped: {self.stop_reason}" if self.stop_reason else "still running")
        )


@dataclass
class _State:
    """What the loop keeps between turns."""

    best: CandidateResult | None
    since_best: int = 0
    submitted: int = 0


def run_session(
    engine: Engine,
    baseline: Baseline,
    settings: LlmSettings,
    provider: ChatProvider,
    prior: Sequence[CandidateResult] = (),
    on_result: Callable[[CandidateResult], None] | None = None,
    on_turn: Callable[[LlmSession], None] | None = None,
    keep_going: Callable[[], bool] = lambda: True,
    clock: Callable[[], float] = time.monotonic,
) -> LlmSession:
    """Run the loop for `baseline`'s kernel. `prior`: the offline search's results (the prompt shows them;
    the model must beat their best). `on_turn` is called before each model turn, `on_result` after each
    candidate (progress, and a new best shown at once)."""
    device = engine.gpu
    assert device is not None and baseline.usable, "the LLM loop needs a GPU and a usable baseline"
    budget = settings.budget
    price = price_of(settings.provider, provider.model)
    session = LlmSession(
        provider=provider.name,
        model=provider.model,
        system=system_prompt(baseline, device, prior, budget.turns),
        turns=[Turn("user", first_message(baseline.target))],
        max_turns=budget.turns,
        price_note=price.note,
    )
    state = _State(best=best_of(prior))
    start = clock()
    last_turn_cost = 0.0
    while True:
        stop = _budget_stop(session, settings, clock() - start, last_turn_cost, state)
        if stop is None and not keep_going():
            stop = "cancelled"
        if stop is not None:
            session.stop_reason = stop
            break
        turn_start = clock()
        session.replies += 1
        if on_turn is not None:
            on_turn(session)
        reply = _ask(provider, session, clock)
        if isinstance(reply, str):
            session.stop_reason = reply
            break
        spent_before = session.cost_usd
        session.usage += reply.usage
        session.cost_usd = cost_usd(price, session.usage)
        last_turn_cost = session.cost_usd - spent_before
        model_s = session.turns[-1].seconds
        if reply.tool_calls:
            for call in reply.tool_calls:
                _answer(engine, baseline, device, prior, session, state, call, reply, on_result, clock)
        elif reply.stop == "max_tokens":
            cut = (
                f"Your reply was cut off at the output limit. Send the rewrite in a {COMPILE_AND_TEST} call, "
                "with shorter code and less prose."
            )
            session.turns.append(Turn("user", cut))
        else:
            session.stop_reason = "the model declined" if reply.stop == "refusal" else "the model finished"
            session.overhead_s.append(clock() - turn_start - model_s)
            break
        session.overhead_s.append(clock() - turn_start - model_s)
    session.seconds = clock() - start
    return session


def _budget_stop(
    session: LlmSession, settings: LlmSettings, elapsed: float, last_turn_cost: float, state: _State
) -> str | None:
    budget = settings.budget
    if session.replies >= budget.turns:
        return f"turn limit ({budget.turns})"
    if elapsed >= budget.seconds:
        return f"time budget ({budget.seconds:g} s) spent"
    if session.usage.total >= budget.tokens:
        return f"token budget ({budget.tokens:,}) spent"
    if session.cost_usd >= budget.cost_usd:
        return f"cost budget (${budget.cost_usd:.2f}) spent"
    if session.cost_usd + last_turn_cost > budget.cost_usd:
        return f"another turn would pass the cost budget (${budget.cost_usd:.2f})"
    if budget.patience and state.since_best >= budget.patience:
        return f"no better candidate in the last {state.since_best}"
    return None


def _ask(provider: ChatProvider, session: LlmSession, clock: Callable[[], float]) -> Reply | str:
    """The model's next reply, appended to the conversation; or why there is none (the stop reason)."""
    problems = []
    for _ in range(1 + MALFORMED_RETRIES):
        asked = clock()
        try:
            reply = provider.reply(session.system, session.turns, TOOLS)
        except ProviderError as exc:
            session.model_seconds += clock() - asked
            return f"the model's API failed: {exc}"
        except MalformedReply as exc:
            session.model_seconds += clock() - asked
            problems.append(str(exc))
            continue
        except Exception as exc:  # an SDK failure we do not know: the offline results must still count
            session.model_seconds += clock() - asked
            return f"the model's API failed: {type(exc).__name__}: {exc}"
        seconds = clock() - asked
        session.model_seconds += seconds
        session.turns.append(
            Turn(
                "assistant",
                reply.text,
                reply.tool_calls,
                usage=reply.usage,
                seconds=seconds,
                reasoning=reply.reasoning,
            )
        )
        return reply
    return f"the model's replies could not be read ({len(problems)} tries): {problems[-1]}"


def _answer(
    engine: Engine,
    baseline: Baseline,
    device: DeviceInfo,
    prior: Sequence[CandidateResult],
    session: LlmSession,
    state: _State,
    call: ToolCall,
    reply: Reply,
    on_result: Callable[[CandidateResult], None] | None,
    clock: Callable[[], float],
) -> None:
    """Run one tool call and append its result turn; a candidate's result goes to `on_result`."""
    started = clock()
    result: CandidateResult | None = None
    is_error = True
    if call.input is None:
        text = f"could not read the arguments of {call.name}: {call.problem}"
    elif call.name == COMPILE_AND_TEST:
        text, result = _compile_and_test(engine, baseline, session, state, call.input)
        is_error = result is None
    elif call.name == COMPILE:
        text, is_error = _compile_only(engine, baseline, session, call.input)
    elif call.name == GPU_PROPERTIES:
        text, is_error = gpu_text(device), False
    elif call.name == ORIGINAL_PROFILE:
        tried = [tried_row(r) for r in (*prior, *session.results)] or ["nothing yet"]
        text, is_error = baseline_text(baseline) + "\n\ncandidates so far:\n" + "\n".join(tried), False
    else:
        text = f"there is no tool {call.name!r}; the tools are {', '.join(t.name for t in TOOLS)}"
    if is_error and reply.stop == "max_tokens":
        text += "\n(your reply was cut off at the output limit: send shorter code)"
    text += "\n" + _status_line(session, state)
    session.turns.append(
        Turn(
            "tool",
            text,
            tool_call_id=call.id,
            tool_name=call.name,
            is_error=is_error,
            seconds=clock() - started,
        )
    )
    if result is not None and on_result is not None:
        on_result(result)


def _compile_and_test(
    engine: Engine, baseline: Baseline, session: LlmSession, state: _State, arguments: dict[str, Any]
) -> tuple[str, CandidateResult | None]:
    submission = read_submission(arguments, baseline.spec.launch)
    if isinstance(submission, list):
        return _refused(submission), None
    state.submitted += 1
    built = build_candidate(baseline, submission, session.proposer, state.submitted)
    if isinstance(built, list):
        return _refused(built), None
    best_before = state.best.speedup if state.best is not None else None
    (result,) = engine.evaluate(baseline, [built.candidate])
    session.results.append(result)
    if result.faster and (state.best is None or (result.speedup or 0.0) > (state.best.speedup or 0.0)):
        state.best, state.since_best = result, 0
    else:
        state.since_best += 1
    return result_text(result, built.first_line, str(baseline.target.path), best_before), result


def _compile_only(
    engine: Engine, baseline: Baseline, session: LlmSession, arguments: dict[str, Any]
) -> tuple[str, bool]:
    submission = read_submission(
        {k: v for k, v in arguments.items() if k in ("kernel_source", "flags")}, baseline.spec.launch
    )
    if isinstance(submission, list):
        return _refused(submission), True
    built = build_candidate(baseline, Submission(submission.code, baseline.spec.launch, submission.flags, ""),
                            session.proposer, 0)  # fmt: skip
    if isinstance(built, list):
        return _refused(built), True
    compiled = engine.compile(baseline.target, built.candidate.source, built.candidate)
    text = compile_text(compiled, built.candidate.source, built.first_line, str(baseline.target.path))
    return text, not compiled.ok


def _refused(problems: list[str]) -> str:
    return "refused, nothing was compiled or run:\n" + "\n".join(f"- {p}" for p in problems)


def _status_line(session: LlmSession, state: _State) -> str:
    best = "none faster yet"
    if state.best is not None:
        who = "yours" if state.best.candidate.proposer == session.proposer else "the offline search's"
        best = f"{state.best.speedup:.2f}x ({who}: {state.best.candidate.description})"
    return (
        f"[turn {session.replies} of {session.max_turns}; est. ${session.cost_usd:.2f} spent; "
        f"best so far: {best}]"
    )
