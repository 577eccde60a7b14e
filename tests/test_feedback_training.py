"""The exports train as they are: a log written by real searches (the recorded GPU worker's answers, an LLM
session, a PyTorch timing, users' decisions) is exported, each file is loaded with `datasets`, and TRL takes
one optimisation step on each: DPOTrainer and RewardTrainer on the preferences, GRPOTrainer on the rewards
(its reward function reads our reward column), SFTTrainer on the LLM trajectories. The model is a tiny
randomly initialised Llama built from a config, the tokenizer trained here on the exported text: no
downloads (HF_HUB_OFFLINE=1), CPU only."""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing is fetched: the model and tokenizer are made here
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("WANDB_DISABLED", "true")

try:
    import datasets
    import torch
    import transformers
    import trl
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
except ImportError as exc:  # the test extra installs them, and CI requires them (CUDA_AGENT_E2E_REQUIRED=1)
    if os.environ.get("CUDA_AGENT_E2E_REQUIRED") == "1":
        raise
    pytest.skip(f"{exc.name} is not installed (pip install -e '.[test]')", allow_module_level=True)

from cuda_agent.agent.candidate_log import CandidateLog
from cuda_agent.agent.feedback import append_record
from cuda_agent.agent.feedback_export import ExportSummary, export
from cuda_agent.agent.llm.settings import LlmSettings
from cuda_agent.agent.optimize import optimize
from cuda_agent.agent.targets import load_targets
from cuda_agent.sandbox.protocol import TorchTimingResult
from cuda_agent.sandbox.reports import TimingReport

from tests.llm_engine import recorded_engine, recording_with_rejection
from tests.llm_scripted import ScriptedApi, recorded_session
from tests.repository_support import KERNELS
from tests.repository_support import RECORDING as REPOSITORY_RECORDING
from tests.test_feedback import record

ROOT = Path(__file__).resolve().parents[1]
MAX_LENGTH = 4096  # tokens: a whole kernel file and its spec fit, as the datasets hold them


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, ExportSummary]:
    folder = tmp_path_factory.mktemp("training")
    log = folder / "feedback.jsonl"
    saxpy = load_targets(ROOT / "examples" / "elementwise.cu").find("saxpy")
    assert saxpy is not None
    with recorded_engine(recording_with_rejection(folder, 512), recorder=CandidateLog(log)) as engine:
        outcome = optimize(engine, saxpy, budget_s=30)
        timed = TorchTimingResult(TimingReport("eager", 0.100, 0.099, 0.101, 50),
                                  TimingReport("compiled", 0.070, 0.069, 0.071, 50))  # fmt: skip
        engine.recorder.torch(outcome.baseline, timed, engine.gpu)  # as Engine.time_torch on a GPU
    with ScriptedApi(recorded_session()) as api, recorded_engine(recorder=CandidateLog(log)) as engine:
        optimize(engine, saxpy, ("llm",), llm=LlmSettings(base_url=api.base_url, api_key="test-key"))
    with recorded_engine(REPOSITORY_RECORDING, recorder=CandidateLog(log)) as engine:
        for name in ("axpy.cu", "activations.cu", "clamp.cuh"):
            for target in load_targets(KERNELS / name).targets:
                if target.spec is not None:
                    optimize(engine, target, ("launch-config",), budget_s=30)
    for suggestion in (record("a"), record("b"), record("a", "accepted"), record("b", "rejected")):
        append_record(log, suggestion)
    out = folder / "out"
    return out, export(log, out)


def load(path: Path) -> datasets.Dataset:
    kind = "parquet" if path.suffix == ".parquet" else "json"
    return datasets.load_dataset(kind, data_files=str(path), split="train")


def test_every_export_loads_with_datasets_with_the_columns_trainers_read(
    exported: tuple[Path, ExportSummary],
) -> None:
    out, summary = exported
    assert summary.samples > 20 and summary.trajectories == 1 and summary.pairs["user"] == 1
    assert set(summary.rewards) == {-1, 1, 2, 3}  # saxpy's PyTorch times give the +2 and +3 milestones
    for name in ("preferences", "rewards", "trajectories"):
        as_json, as_parquet = load(out / f"{name}.jsonl"), load(out / f"{name}.parquet")
        assert as_json.num_rows == as_parquet.num_rows > 0
        assert as_json.column_names == as_parquet.column_names
    preferences = load(out / "preferences.parquet")
    assert {"prompt", "chosen", "rejected", "source"} <= set(preferences.column_names)
    assert set(preferences["source"]) == {"measured", "user"}
    rewards = load(out / "rewards.parquet")
    assert {"prompt", "completion", "reward", "speedup"} <= set(rewards.column_names)
    assert sorted(set(rewards["reward"])) == [-1, 1, 2, 3]
    verl = load(out / "verl.parquet")
    assert verl.column_names == ["data_source", "prompt", "ability", "reward_model", "extra_info"]
    row = verl[0]
    assert row["prompt"][0]["role"] == "user" and row["reward_model"]["style"] == "rule"
    truth = json.loads(row["reward_model"]["ground_truth"])
    assert truth["torch_eager_ms"] == 0.100 and truth["torch_compile_ms"] == 0.070
    assert row["extra_info"]["best_reward"] == 3
    (session,) = load(out / "trajectories.parquet")
    assert session["messages"][0]["role"] == "system" and session["messages"][2]["tool_calls"]
    card = (out / "README.md").read_text()
    assert "NVIDIA H200" in card and "| +3 |" in card and "preference pairs" in card


def tokenizer_for(texts: Iterator[str]) -> transformers.PreTrainedTokenizerFast:
    """A byte-level BPE trained on the exported text, with a plain chat template."""
    bpe = Tokenizer(models.BPE(unk_token="<unk>"))
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=2000, special_tokens=["<unk>", "<pad>", "<s>", "</s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )  # fmt: skip
    bpe.train_from_iterator(texts, trainer)
    tokenizer = transformers.PreTrainedTokenizerFast(
        tokenizer_object=bpe, unk_token="<unk>", pad_token="<pad>", bos_token="<s>", eos_token="</s>"
    )
    tokenizer.chat_template = (
        "{% for m in messages %}<s>{{ m['role'] }}\n{{ m['content'] }}"
        "{% for c in m['tool_calls'] or [] %}\n{{ c['function']['name'] }}({{ c['function']['arguments'] }})"
        "{% endfor %}</s>\n{% endfor %}{% if add_generation_prompt %}<s>assistant\n{% endif %}"
    )
    return tokenizer


@pytest.fixture(scope="module")
def tokenizer(exported: tuple[Path, ExportSummary]) -> transformers.PreTrainedTokenizerFast:
    out, _ = exported
    rewards = load(out / "rewards.parquet")
    return tokenizer_for(iter([*rewards["prompt"][:3], *rewards["completion"]]))


def tiny_model(
    tokenizer: transformers.PreTrainedTokenizerFast, scores: bool = False
) -> transformers.PreTrainedModel:
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=MAX_LENGTH,
        pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id, num_labels=1,
    )  # fmt: skip
    if scores:
        return transformers.LlamaForSequenceClassification(config)
    return transformers.LlamaForCausalLM(config)


def one_step(folder: Path) -> dict[str, Any]:
    return {
        "output_dir": str(folder), "max_steps": 1, "per_device_train_batch_size": 2, "learning_rate": 1e-3,
        "report_to": [], "use_cpu": True, "save_strategy": "no", "logging_steps": 1, "disable_tqdm": True,
    }  # fmt: skip


def changed(before: dict[str, torch.Tensor], model: torch.nn.Module) -> bool:
    return any(not torch.equal(before[name], p.detach()) for name, p in model.named_parameters())


def weights(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {name: p.detach().clone() for name, p in model.named_parameters()}


def test_dpo_and_reward_trainers_take_a_step_on_the_preferences(
    exported: tuple[Path, ExportSummary], tokenizer: transformers.PreTrainedTokenizerFast, tmp_path: Path
) -> None:
    out, _ = exported
    pairs = load(out / "preferences.parquet")
    model = tiny_model(tokenizer)
    before = weights(model)
    dpo = trl.DPOTrainer(
        model=model, ref_model=copy.deepcopy(model), train_dataset=pairs, processing_class=tokenizer,
        args=trl.DPOConfig(**one_step(tmp_path / "dpo"), max_length=MAX_LENGTH),
    )  # fmt: skip
    assert dpo.train().global_step == 1 and changed(before, model)

    scorer = tiny_model(tokenizer, scores=True)
    before = weights(scorer)
    reward = trl.RewardTrainer(
        model=scorer, train_dataset=load(out / "preferences.jsonl"), processing_class=tokenizer,
        args=trl.RewardConfig(**one_step(tmp_path / "reward"), max_length=MAX_LENGTH),
    )  # fmt: skip
    assert reward.train().global_step == 1 and changed(before, scorer)


def test_grpo_takes_a_step_with_a_reward_function_reading_the_reward_column(
    exported: tuple[Path, ExportSummary], tokenizer: transformers.PreTrainedTokenizerFast, tmp_path: Path
) -> None:
    out, _ = exported
    rewards = load(out / "rewards.parquet")
    seen: list[float] = []

    def milestone(completions: list[str], reward: list[int], **_: Any) -> list[float]:
        # The row's milestone reward (what its logged candidate earned; a real run would compile, verify and
        # time each generation as the engine did), a thousandth a character as a tie-break: the generations
        # of a tiny untrained model then differ in reward, and the step has a gradient.
        seen.extend(reward)
        return [r + 0.001 * len(generated) for generated, r in zip(completions, reward, strict=True)]

    model = tiny_model(tokenizer)
    before = weights(model)
    grpo = trl.GRPOTrainer(
        model=model, reward_funcs=milestone, train_dataset=rewards, processing_class=tokenizer,
        args=trl.GRPOConfig(**one_step(tmp_path / "grpo"), num_generations=2, max_completion_length=24,
                            temperature=1.5),
    )  # fmt: skip
    assert grpo.train().global_step == 1
    assert seen and set(seen) <= {-1, 1, 2, 3} and changed(before, model)


def test_sft_takes_a_step_on_the_llm_trajectories(
    exported: tuple[Path, ExportSummary], tokenizer: transformers.PreTrainedTokenizerFast, tmp_path: Path
) -> None:
    out, _ = exported
    sessions = load(out / "trajectories.jsonl")
    model = tiny_model(tokenizer)
    before = weights(model)
    sft = trl.SFTTrainer(
        model=model, train_dataset=sessions, processing_class=tokenizer,
        args=trl.SFTConfig(**{**one_step(tmp_path / "sft"), "per_device_train_batch_size": 1},
                           max_length=MAX_LENGTH),
    )  # fmt: skip
    assert sft.train().global_step == 1 and changed(before, model)
