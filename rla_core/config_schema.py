"""The run configuration's schema: a class per section, each field with its default, bounds and the description
`rla config` lists. Loading, overrides and run comparison: rla_core/config.py (it re-exports every class)."""
# Over 400 lines: one declaration per config key and nothing else; a section per class, all in one place.
from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class ModelSpec(_Section):
    """A causal LM: a local HF directory (`path`) or a tiny one built from the fields below."""

    path: str | None = Field(None, description="local HF causal-LM directory; None builds a tiny model")
    arch: Literal["qwen2", "llama"] = Field("qwen2", description="transformers architecture of the tiny model")
    hidden_size: int = Field(96, gt=0, description="tiny model width; must be divisible by num_heads")
    num_layers: int = Field(3, gt=0, description="tiny model transformer layers")
    num_heads: int = Field(4, gt=0, description="tiny model attention heads (as many key/value heads)")
    intermediate_size: int = Field(256, gt=0, description="tiny model MLP width")
    max_positions: int = Field(1024, gt=0, description="tiny model context length (tokens); training drops "
                               "samples whose prompt + response is longer")


class ModelsConfig(_Section):
    vocab_size: int = Field(1200, gt=50, description="size of the tokenizer trained in-process")
    policy: ModelSpec = Field(ModelSpec(), description="the policy that plays the tasks")
    judge: ModelSpec = Field(ModelSpec(), description="the reward model that judges each policy step")
    environment: ModelSpec = Field(ModelSpec(hidden_size=64, num_layers=2),
                                   description="the model that rewrites tasks (environment.rewriter=llm)")
    dtype: Literal["auto", "float32", "bfloat16"] = Field(
        "auto", description="arithmetic of sampling, warm-start and updates (weights stay float32 for the "
        "optimizer); auto = bfloat16 for a pretrained model on a CPU/GPU with native bfloat16, else float32 "
        "(tiny models: float32)")

    device: Literal["auto", "cpu", "cuda"] = Field(
        "auto", description="where the transformers engine and the torch trainer run the models; auto = cuda "
        "when torch sees a GPU, else cpu (vLLM and DeepSpeed place models themselves)")

    def torch_device(self) -> str:
        from rla_core.models.precision import default_device

        return default_device() if self.device == "auto" else self.device

    def compute_dtype(self, role: str, device: str | None = None):
        """The torch dtype `role`'s forward passes run in (rla_core/models/precision.py)."""
        from rla_core.models.precision import resolve

        return resolve(self.dtype, getattr(self, role).path is not None, device or self.torch_device())


class RunConfig(_Section):
    name: str = Field("quickstart", description="run folder under output_dir; also the MLflow run name and the "
                      "object-store key")
    seed: int = Field(0, description="base seed of every random choice: tasks, model init, stage sampling")
    output_dir: str = Field("runs", description="folder that holds the run folders")
    iterations: int = Field(5, ge=0, description="RL iterations after the warm-start; raising it extends a "
                            "finished run")
    eval_every: int = Field(0, ge=0, description="evaluate held-out every k iterations; 0 = only at the end")
    keep_checkpoints: int | None = Field(None, ge=1, description="trained checkpoints of each role kept in the run "
                                         "folder (the newest N; older model/ folders are deleted at commit, "
                                         "restorable from DVC when versioned); None = keep all")
    torch_threads: int = Field(0, ge=0, description="torch CPU threads of this process; 0 = torch default")
    deterministic: bool = Field(True, description="torch's deterministic algorithms in every stage: with 2+ CPU "
                                "threads an update otherwise differs run to run in the last bits, so a resumed or "
                                "reproduced iteration would not match its record (warn-only where an op has none)")


class EnvironmentConfig(_Section):
    name: str = Field("household", description="registered environment family that generates and plays tasks")
    train_slots: int = Field(64, gt=0, description="seed slots in the task store")
    heldout_tasks: int = Field(200, gt=0, description="held-out tasks generated from the run seed (no heldout_file)")
    heldout_file: str | None = Field(
        None, description="JSONL of held-out tasks (e.g. data/household/heldout.jsonl), the same for every run "
        "and seed; None = generate heldout_tasks from the run seed")
    reserved_files: list[str] = Field(
        default_factory=list, description="other task files (e.g. a dev split) whose games are never trained on")
    knobs: dict[str, Any] = Field(default_factory=dict, description="seed difficulty knobs (env-specific)")
    adapt: bool = Field(True, description="environment adaptation on/off (ablation switch)")
    alpha_low: float = Field(0.2, ge=0, le=1, description="α_low: a task with success rate <= this is rewritten "
                             "easier; a harder rewrite is accepted only at >= this")
    alpha_high: float = Field(0.8, ge=0, le=1, description="α_high: a task with success rate >= this is "
                              "rewritten harder; an easier rewrite is accepted only at <= this")
    attempts: int = Field(3, gt=0, description="A: rewrite attempts per task")
    rewriter: Literal["procedural", "llm"] = Field(
        "procedural", description="who rewrites tasks: procedural = rule-based knob changes, llm = the "
        "environment model")
    rewrite_prompt: Literal["compact", "full"] = Field(
        "compact", description="llm rewriter prompt: compact = goal, knobs, plan length and feedback, answered "
        "as {knobs, seed} (what the tiny warm-started environment model learns); full = the schema and the "
        "whole spec JSON, answered as a spec (for real LLMs)")
    rewrite_temperature: float = Field(0.7, ge=0, description="llm rewriter sampling temperature; 0 = greedy "
                                       "(0.7: 95-99 % valid answers from the tiny warm-started model, 1.0: 72-79 %)")
    rewrite_max_new_tokens: int = Field(128, gt=0, description="llm rewriter answer length cap (tokens)")

    @model_validator(mode="after")
    def _band(self) -> "EnvironmentConfig":
        if not self.alpha_low < self.alpha_high:
            raise ValueError("environment.alpha_low must be < environment.alpha_high")
        return self


class VllmConfig(_Section):
    """The vLLM rollout backend (rollout.backend = "vllm"); also serves the judge and environment model."""

    tensor_parallel_size: int = Field(1, gt=0, description="GPUs each engine shards the model over")
    enable_prefix_caching: bool = Field(True, description="reuse the KV cache of shared prompt prefixes")
    gpu_memory_utilization: float = Field(0.85, gt=0, le=1, description="fraction of GPU memory the engine "
                                          "may reserve")
    dtype: str = Field("auto", description="engine weight dtype: auto | bfloat16 | float16 | float32")
    max_model_len: int | None = Field(None, gt=0, description="engine context length (tokens); None = the model's "
                                      "max positions")
    enforce_eager: bool = Field(False, description="run eagerly, without CUDA graphs")
    weight_sync: Literal["load_weights", "sleep_wake", "rebuild"] = Field(
        "load_weights",
        description="how new policy weights reach the engine; every mode falls back to rebuild on failure",
    )


class RolloutConfig(_Section):
    backend: str = Field("transformers", description="rollout engine: transformers | vllm")
    vllm: VllmConfig = Field(VllmConfig(), description="vLLM engine options (backend = vllm)")
    tasks_per_iteration: int = Field(32, gt=0, description="K: tasks rolled out per iteration")
    candidates: Literal["within_k", "on_top"] = Field(
        "within_k", description="where last iteration's rewrite candidates go: within_k = they count towards K "
        "(K tasks in total: rows with and without adaptation spend equal compute); on_top = added on top of K "
        "(the paper; runs written before this key existed)")
    n: int = Field(8, gt=0, description="N trajectories per task")
    max_steps: int = Field(12, gt=0, description="H: at most this many policy turns")
    temperature: float = Field(1.0, ge=0, description="policy sampling temperature in rollouts")
    max_new_tokens: int = Field(6, gt=0, description="policy answer length cap per turn (tokens)")
    batch_size: int = Field(256, gt=0, description="episodes generated together")
    history_turns: int = Field(3, ge=0, description="past turns shown in the prompt")
    sampler: Literal["inverse_cdf", "multinomial"] = Field(
        "inverse_cdf", description="how the transformers engine draws a token (policy, judge and environment model): "
        "inverse_cdf = one uniform draw per row against the cumulative probabilities; multinomial = "
        "torch.multinomial, one random number per vocabulary entry, 4x slower per decode step here. Same "
        "distribution, different draws; runs written before this key existed used multinomial (load_run_config)")
    decode_attention: Literal["auto", "model", "matmul"] = Field(
        "auto", description="the transformers engine's attention for each new token: model = the model's own "
        "(sdpa); matmul = two batched matmuls over a float32 KV cache (rla_core/rollout/decode_attention.py; "
        "1.9x faster decode steps for SmolLM2 in bfloat16, other samples); auto = matmul for pretrained models, "
        "model for the tiny ones. Runs written before this key existed used model")

    drop_finished: Literal["auto"] | bool = Field(
        "auto", description="the transformers engine drops rows that have ended from the decode batch once a "
        "quarter of them has (a chunk stops decoding every row until its longest one ends): true; false; auto = on "
        "where the model computes in bfloat16, where it gives the same ids and log-probs to the bit (measured on "
        "SmolLM2), off in float32, where smaller matmuls round otherwise. Runs written before this key existed "
        "used false")

    prefix_reuse: bool = Field(
        False, description="multi-turn settings, transformers engine: each turn's prefill copies the keys and "
        "values of the prompt's common prefix with the same episode's previous prompt (the chat head, the goal, "
        "earlier turns) instead of computing them again (rla_core/rollout/prefix_reuse.py). Not exact: the "
        "prefix's states come from another pass, so samples change in the last bits; off by default")

    @model_validator(mode="after")
    def _prefix_reuse_backend(self) -> "RolloutConfig":
        if self.prefix_reuse and self.backend != "transformers":
            raise ValueError(f"rollout.prefix_reuse needs rollout.backend transformers, not {self.backend!r} "
                             "(vLLM caches prompt prefixes by itself)")
        return self

    def decode_attention_for(self, pretrained: bool) -> str:
        if self.decode_attention == "auto":
            return "matmul" if pretrained else "model"
        return self.decode_attention


class JudgeConfig(_Section):
    m: int = Field(3, gt=0, description="judge samples per step")
    temperature: float = Field(1.0, ge=0, description="judge sampling temperature")
    max_new_tokens: int = Field(12, gt=0, description="judge verdict length cap (tokens)")
    batch_size: int = Field(256, gt=0, description="judge prompts generated together")
    train: bool = Field(True, description="judge training on/off (ablation switch)")
    outcome_balance: bool = Field(
        False, description="beyond the paper: weight the judge's consistency rewards so that steps of "
        "successful and failed runs count equally inside a task (counters the drift towards -1)")


class RewardConfig(_Section):
    step_weight: float = Field(1.0, ge=0, description="λ in R = O + λ·mean S; 0 = outcome only")


class DeepSpeedConfig(_Section):
    """The DeepSpeed trainer backend (train.backend = "deepspeed")."""

    zero_stage: int = Field(2, ge=0, le=3, description="ZeRO stage: 0 off, 1 optimizer state, 2 + gradients, "
                            "3 + parameters sharded")
    offload_optimizer: bool = Field(False, description="ZeRO-Offload: optimizer state on CPU (stage >= 1)")
    offload_params: bool = Field(False, description="ZeRO-Infinity: parameters on CPU (stage 3)")
    bf16: bool = Field(False, description="train in bfloat16 mixed precision")
    warmup_steps: int = Field(0, ge=0, description="WarmupLR steps; 0 = constant lr")
    launcher: Literal["inprocess", "torchrun", "deepspeed"] = Field(
        "inprocess", description="inprocess = one rank in this process; else a multi-rank launch"
    )
    num_procs: int = Field(1, gt=0, description="ranks per node for torchrun/deepspeed launches")
    num_nodes: int = Field(1, gt=0, description="nodes of a deepspeed launch")
    hostfile: str | None = Field(None, description="DeepSpeed hostfile for multi-node launches")
    master_port: int = Field(29500, gt=0, lt=65536, description="rendezvous port of the process group (in-process: "
                             "a free one if busy)")

    @model_validator(mode="after")
    def _offload(self) -> "DeepSpeedConfig":
        if self.offload_params and self.zero_stage != 3:
            raise ValueError("train.deepspeed.offload_params needs zero_stage 3")
        if self.offload_optimizer and self.zero_stage == 0:
            raise ValueError("train.deepspeed.offload_optimizer needs zero_stage >= 1")
        return self


class TrainConfig(_Section):
    backend: str = Field("torch", description="trainer backend: torch | deepspeed")
    deepspeed: DeepSpeedConfig = Field(DeepSpeedConfig(), description="DeepSpeed options (backend = deepspeed)")
    lr: float = Field(3e-4, gt=0, description="policy learning rate (AdamW)")
    judge_lr: float = Field(2e-4, gt=0, description="judge learning rate (AdamW)")
    clip_eps: float = Field(0.2, gt=0, description="ε: the probability ratio is clipped to [1 - ε, 1 + ε]")
    kl_beta: float = Field(0.01, ge=0, description="β: weight of the KL penalty towards π_ref")
    kl_clamp: float | None = Field(10.0, gt=0, description="per-token bound on the k3 KL estimator (no "
                                   "gradient above it); None = unbounded")
    reference: Literal["old", "initial"] = Field(
        "old", description="π_ref of the KL term: old = the model before this update, initial = its warm-start")
    old_logprobs: Literal["recompute", "rollout"] = Field(
        "recompute", description="log π_old: recomputed before the first step, or the log-probs the generation "
        "recorded (same weights, one forward pass less; numbers equal up to float rounding)")
    trainable: str = Field("all", pattern=r"^(all|last_layers:[1-9][0-9]*|lora:[1-9][0-9]*)$",
                           description="weights an update trains (and the warm-start): all; last_layers:N (the last "
                           "N decoder blocks, final norm, output head); lora:R (rank-R adapters on every linear "
                           "layer of every block, merged into the weights when saved)")
    stop_gradient: bool = Field(
        False, description="trainable = last_layers:N: true = no gradient below the lowest trained block (its "
        "input is detached), so the frozen blocks cost one forward pass (4-5x less backward on SmolLM2) but a "
        "tied head/input embedding loses the input side of its gradient; false = the exact gradient, which runs "
        "down through the frozen blocks into a tied input embedding (on the dev split it gave the better SmolLM2 "
        "coding warm start in 2 of 2 seeds: docs/design.md)")
    minibatch_size: int = Field(256, gt=0, description="at most this many samples per optimizer step")
    optimizer_steps: int | None = Field(
        None, gt=0, description="exactly this many optimizer steps per update, the samples split evenly "
        "among them (equal steps whatever the data size); None = as many as minibatch_size needs")
    exact_steps: bool = Field(
        True, description="an update takes exactly optimizer_steps steps (else the minibatch_size count) whenever "
        "it has that many samples: where keeping same-prompt groups whole would leave fewer mini-batches (3 coding "
        "problems with mixed outcomes for 4 steps), the samples are cut into equal consecutive parts and a group "
        "may straddle two; false = groups stay whole and the update may take fewer steps (runs written before "
        "this key)")
    micro_batch_size: int = Field(64, gt=0, description="samples per forward; GAS = ceil(mini/micro)")
    max_samples: int | None = Field(
        None, gt=0, description="cap on each model's training samples per iteration (a uniform random subset); "
        "None = all. Ablation rows use one cap so that their updates are the same size")
    max_optimizer_steps: int | None = Field(
        None, gt=0, description="cap on optimizer steps per model per iteration; None = one pass over all samples")
    grad_clip: float = Field(1.0, gt=0, description="max global gradient norm per optimizer step")
    weight_decay: float = Field(0.0, ge=0, description="AdamW weight decay")


class CodingConfig(_Section):
    """The coding setting (environment.name = coding): programs, unit tests and the sandbox."""

    tests_per_problem: int = Field(8, gt=0, description="U: unit tests the judge writes per problem")
    judge_test_weight: float = Field(0.0, ge=0, description="λ: add λ·(fraction of the judge's tests a program "
                                     "passes) to its reward; 0 = ground-truth tests only (the paper's code)")
    judge_alpha_high: float | None = Field(
        None, ge=0, le=1, description="the judge's training data takes problems with environment.alpha_low ≤ acc ≤ "
        "this; 1.0 adds the problems every program solved, where a test scores +1 if correct, else −1 (the W-empty "
        "case of the separation reward); None = environment.alpha_high, the same band as the policy's (the paper)")
    memory_mb: int = Field(512, gt=16, description="sandbox address-space limit per test run (MiB)")
    processes: int = Field(32, gt=0, description="sandbox process limit per program")
    output_bytes: int = Field(65536, gt=0, description="sandbox cap on a test run's stdout and stderr")
    workers: int = Field(0, ge=0, description="sandbox pool size; 0 = the machine's CPU count")
    demo_ops: list[int] = Field(default_factory=lambda: [1, 2, 3], description="pipeline lengths of the "
                                "procedural warm-start demonstrations")
    demo_tests: int = Field(2, gt=0, description="demonstration unit tests per warm-start problem (judge)")
    judge_work: bool = Field(False, description="the judge's demonstration tests carry their computation, one "
                             "operation per line, between input and output (for real pretrained judges, which get the "
                             "output right far more often step by step); raise judge.max_new_tokens with it")
    benchmark_problems: int = Field(40, ge=0, description="held-out problems of the fixed judge benchmark "
                                    "(reference program + mutants per problem), and as many dev problems of its "
                                    "dev counterpart when eval.dev_file is set; 0 = none")


class TextWorldConfig(_Section):
    """TextWorld games (environment.name = textworld): building them and what the models see of them."""

    workers: int = Field(0, ge=0, description="processes that build games in parallel; 0 = the machine's CPU "
                         "count (at most 4)")
    observation_chars: int = Field(400, gt=20, description="cap on one cleaned observation (characters)")
    goal_chars: int = Field(400, gt=20, description="cap on the cleaned objective shown as the goal (characters)")
    games_archive: str | None = Field(
        None, description="tar.xz of built games unpacked into the run's games/ (e.g. data/textworld/games.tar.xz, "
        "the held-out and dev games `rla data build` ships), so they are not built again; None = build all")


class BootstrapConfig(_Section):
    demos: int = Field(600, ge=0, description="oracle demonstration episodes for the policy warm-start")
    corpus_walks: int = Field(200, ge=1, description="noisy oracle walks whose prompts train the tokenizer")
    corpus_specs: int = Field(50, ge=0, description="generated task specs (JSON) in the tokenizer corpus")
    corpus_rewrites: int = Field(50, ge=0, description="tasks whose compact rewrite prompts and answers are in the "
                                 "tokenizer corpus")
    policy_steps: int = Field(300, ge=0, description="optimizer steps of the policy's warm-start")
    judge_steps: int = Field(150, ge=0, description="optimizer steps of the judge's warm-start on oracle step "
                             "labels")
    batch_size: int = Field(32, gt=0, description="samples per warm-start optimizer step (every model)")
    lr: float = Field(1e-3, gt=0, description="learning rate of the policy and judge warm-starts")
    bad_action_rate: float = Field(0.35, ge=0, le=1, description="random actions mixed into judge data")
    judge_policy_tasks: int = Field(
        0, ge=0, description="the games: fresh tasks (no reserved game; nor the seed slots' with "
        "exclude_train_games) played once each by the warm-started policy at rollout.temperature, every step "
        "labelled by the oracle, added to the judge's warm-start labels before balancing (its mistakes are a "
        "model's, not uniformly random commands); 0: oracle walks only. The policy is trained first")
    policy_dagger_tasks: int = Field(
        0, ge=0, description="DAgger, one round: after policy_steps, the warm-started policy plays this many fresh "
        "tasks (no reserved game; nor the seed slots' with exclude_train_games) once each at "
        "policy_dagger_temperature; every state it visited, labelled with the oracle's command from there, joins "
        "the demonstrations, and the policy trains policy_dagger_steps more steps on both (the states its own "
        "mistakes lead to, e.g. the cycles greedy play ends in, which oracle walks never reach). Household and "
        "TextWorld; 0 = no round")
    policy_dagger_steps: int = Field(0, ge=0, description="optimizer steps of the DAgger round (with "
                                     "policy_dagger_tasks)")
    policy_dagger_temperature: float = Field(
        0.0, ge=0, description="sampling temperature of the DAgger round's episodes; 0 = greedy, the play whose "
        "repeated-action cycles the round is for")
    exclude_train_games: bool = Field(
        False, description="the policy demonstrations and judge labels avoid the seed slots' games (by content "
        "hash), so RL trains on games the warm-start never saw; matters when slots and demonstrations share a "
        "small pool (environment.knobs.pool)")
    environment_tasks: int = Field(
        96, ge=0, description="environment.rewriter=llm with a tiny environment model: fresh tasks played by the "
        "warm-started policy and judged, whose critic feedback and procedural rewrites (both directions) are "
        "the environment model's warm-start pairs")
    environment_steps: int = Field(300, ge=0, description="optimizer steps of the environment model's warm-start")
    environment_lr: float = Field(
        2e-3, gt=0, description="learning rate of the environment model's warm-start: at 1e-3 and 300 steps the "
        "tiny model's answers depended on the init seed (sampled at temperature 1, 21-45% matched the procedural "
        "rewrite vs 64-70% at 2e-3)")


class EvalConfig(_Section):
    # Sampled, like the rollouts RL optimises: the greedy policy of a tiny model flips with small changes of
    # its probabilities, and its success moved opposite to the sampled one in our runs (docs/results.md).
    episodes_per_task: int = Field(2, gt=0, description="episodes per held-out task")
    temperature: float = Field(1.0, ge=0, description="policy sampling temperature on held-out tasks; 0 = greedy")
    greedy_at_end: bool = Field(True, description="also a greedy pass (heldout_greedy/*) at the warm-start "
                                "and the last evaluation")
    judge_m: int = Field(1, gt=0, description="judge samples per held-out step (p+/p- are per sample)")
    judge_benchmark: str | None = Field(
        None, description="JSONL of fixed oracle-labelled steps (e.g. data/household/judge_benchmark.jsonl) "
        "scored at every evaluation; None = no benchmark")
    benchmark_m: int = Field(2, gt=0, description="judge samples per benchmark step")
    # Model selection reads the dev split only: held-out scores are reported, never used to choose.
    dev_file: str | None = Field(
        None, description="task file of the dev split (e.g. data/household/dev.jsonl; coding: a problem file), "
        "played at every evaluation (dev/*; its games are never trained on); the registry's `best` alias ranks "
        "versions by it. None = no dev evaluation and no `best` alias (never a held-out fallback)")
    dev_episodes_per_task: int = Field(1, gt=0, description="episodes (coding: programs) per dev task, at "
                                       "eval.temperature")
    dev_judge_benchmark: str | None = Field(
        None, description="household/TextWorld: JSONL of oracle-labelled steps of the dev split (e.g. "
        "data/household/judge_benchmark_dev.jsonl), scored at every evaluation (dev/bench_*); the judge's `best` "
        "ranks by its balanced accuracy. Coding builds its dev benchmark from eval.dev_file at seed time. "
        "None = none")
    dev_benchmark_m: int = Field(1, gt=0, description="judge samples per dev benchmark step")
    reuse_judge_scores: bool = Field(True, description="reuse the run's earlier scoring of the same judge (exact)")


class TrackingConfig(_Section):
    mlflow_uri: str | None = Field(None, description="MLflow tracking URI; None = sqlite file under the run folder")
    artifact_location: str | None = Field(
        None, description="MLflow artifact root for a new experiment, e.g. s3://bucket/mlflow; None = MLflow's default"
    )
    experiment: str = Field("rlanything", description="MLflow experiment that holds the runs")
    register_models: bool = Field(True, description="register each trained checkpoint in the MLflow model "
                                  "registry")


class VersioningConfig(_Section):
    dvc: bool = Field(True, description="version each iteration's task store, batches and checkpoints with DVC")
    remote: str | None = Field(None, description="DVC remote URL; None = a local folder beside the run")


class GatesConfig(_Section):
    enabled: bool = Field(True, description="data-quality gates before training; a failed gate stops the "
                          "iteration")


class StorageConfig(_Section):
    """Where stage outputs live besides the local run folder (local | s3 through boto3)."""

    backend: Literal["local", "s3"] = Field(
        "local", description="local = the run folder only; s3 = also mirrored to an S3 bucket")
    bucket: str | None = Field(None, description="S3 bucket (required when backend is s3)")
    prefix: str = Field("rlanything", description="key prefix; objects go under <prefix>/<run name>/")
    endpoint_url: str | None = Field(None, description="S3-compatible endpoint (MinIO, moto); None = AWS")
    region: str | None = Field(None, description="S3 region; None = boto3's default")

    @model_validator(mode="after")
    def _bucket(self) -> "StorageConfig":
        if self.backend == "s3" and not self.bucket:
            raise ValueError("storage.bucket is required when storage.backend is s3")
        return self


class OrchestrationConfig(_Section):
    """Routing of GPU stages to a Prefect work pool; None runs every stage in the iteration's process."""

    gpu_deployment: str | None = Field(
        None, description="'<flow>/<deployment>' that runs one stage on the GPU pool, e.g. rla-stage/gpu"
    )
    gpu_stages: list[str] = Field(
        default_factory=lambda: ["rollout", "judge", "train_policy", "train_judge"],
        description="stages sent to gpu_deployment when it is set",
    )


class Config(_Section):
    run: RunConfig = Field(RunConfig(), description="run identity, seed and length")
    models: ModelsConfig = Field(ModelsConfig(), description="tokenizer and the policy, judge and environment models")
    environment: EnvironmentConfig = Field(EnvironmentConfig(), description="tasks and their adaptation")
    rollout: RolloutConfig = Field(RolloutConfig(), description="policy episodes per iteration")
    judge: JudgeConfig = Field(JudgeConfig(), description="step judging by the reward model")
    reward: RewardConfig = Field(RewardConfig(), description="how outcome and step rewards combine")
    train: TrainConfig = Field(TrainConfig(), description="policy and judge RL updates")
    coding: CodingConfig = Field(CodingConfig(), description="the coding setting (environment.name = coding)")
    textworld: TextWorldConfig = Field(TextWorldConfig(), description="TextWorld games (environment.name = "
                                       "textworld)")
    bootstrap: BootstrapConfig = Field(BootstrapConfig(), description="supervised warm-start before RL")
    eval: EvalConfig = Field(EvalConfig(), description="held-out evaluation")
    tracking: TrackingConfig = Field(TrackingConfig(), description="MLflow tracking")
    versioning: VersioningConfig = Field(VersioningConfig(), description="DVC versioning of run outputs")
    gates: GatesConfig = Field(GatesConfig(), description="data-quality gates")
    storage: StorageConfig = Field(StorageConfig(), description="where stage outputs are stored")
    orchestration: OrchestrationConfig = Field(OrchestrationConfig(), description="where stages run")

    @model_validator(mode="after")
    def _dagger(self) -> "Config":
        boot = self.bootstrap
        if bool(boot.policy_dagger_tasks) != bool(boot.policy_dagger_steps):
            raise ValueError(f"bootstrap.policy_dagger_tasks ({boot.policy_dagger_tasks}) and policy_dagger_steps "
                             f"({boot.policy_dagger_steps}) go together: both 0, or both > 0")
        if boot.policy_dagger_tasks and self.environment.name == "coding":
            raise ValueError("bootstrap.policy_dagger_tasks: the DAgger round is for multi-turn games (household, "
                             "TextWorld); a coding problem is one turn, so there are no visited states to label")
        return self

    @model_validator(mode="after")
    def _judge_band(self) -> "Config":
        high = self.coding.judge_alpha_high
        if high is not None and high < self.environment.alpha_high:
            raise ValueError(f"coding.judge_alpha_high ({high:g}) must be at least environment.alpha_high "
                             f"({self.environment.alpha_high:g}): it widens the judge's band, it cannot narrow it")
        return self
