"""Language models of the zoo at varying sequence lengths (issue: dynamic
shapes): two traces (static, then dynamic), comparisons of the length
kept as size-relation guards (Note [Size relations]), every later length
run by a compiled instance of the dynamic graph (Note [Size instances]),
never by the eager replay, or, for generate()'s decoding step, by its
static regions compiled once (Note [Static regions]); outputs equal to
eager at every length."""
import pytest
import torch

import kiln
from zoo_models import build, tensors_of

# Up to the zoo configs' 64 positions: the dynamic trace's sample points
# (2x and 3x the length) pass them, and BERT's slice of its position
# buffer is then guarded within it (Note [Slices past a buffer]).
LENGTHS = [12, 40, 60, 14, 21, 40, 60]


@pytest.mark.cpu_semantics("model zoo tier: CPU, fp32")
@pytest.mark.parametrize("name", ["hf-gpt2", "hf-llama", "hf-bert", "hf-distilbert", "hf-t5-encoder"])
def test_forward_at_varying_lengths(name):
    model, (tokens,), _ = build(name)
    model.eval()
    # Without CPU kernels (a build without LLVM) inductor replays CPU
    # graphs through torch; aot_eager still decomposes each size instance.
    kernels = kiln._C.cpu_kernels_available() and kiln.config.cpu_kernels
    compiled = kiln.compile(model, backend="inductor" if kernels else "aot_eager")
    with torch.no_grad():
        for length in LENGTHS:
            ids = torch.randint(0, 100, (tokens.shape[0], length))
            got, want = tensors_of(compiled(ids)), tensors_of(model(ids))
            assert len(got) == len(want) > 0
            for a, b in zip(got, want):
                torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)
    s = kiln.stats()
    assert s["traces"] == 2 and s["graph_breaks"] == 0, s
    # 12 is the static trace's; 40, 60, 14 and 21 each get an instance.
    assert s["size_instances"] == 4, s
    assert s["prim_fallbacks"] == 0 and s["eager_runs"] == 0, s
    assert s["kernels"] > 0 or not kernels, s


@pytest.mark.cpu_semantics("model zoo tier: CPU, fp32")
@pytest.mark.skipif(not kiln._C.cpu_kernels_available(), reason="compiles CPU kernels: needs kiln built with LLVM")
@pytest.mark.parametrize("name", ["hf-gpt2", "hf-llama"])
def test_later_lengths_compile_no_kernels(name):
    # Their kernels differ between lengths only in outer loops and GEMM rows
    # (Note [Run-time outer layout], Note [GEMM rows at run time]): the
    # first instance compiles the kernels every later length runs.
    model, (tokens,), _ = build(name)
    model.eval()
    kiln._C.clear_kernel_memory_cache()  # earlier tests compiled these kernels
    compiled = kiln.compile(model)
    with torch.no_grad():
        for i, length in enumerate([12, 40, 60, 14, 21, 33]):
            ids = torch.randint(0, 100, (tokens.shape[0], length))
            got, want = tensors_of(compiled(ids)), tensors_of(model(ids))
            for a, b in zip(got, want):
                torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)
            if i == 1:
                after_first_instance = kiln.stats()
    s = kiln.stats()

    def made(stats):  # compiled now, or loaded from a disk cache of another process
        return stats["kernels_compiled"] + stats["kernel_cache_hits_disk"]

    assert made(after_first_instance) > 0, after_first_instance
    assert made(s) == made(after_first_instance), s
    assert s["size_instances"] == 5 and s["eager_runs"] == 0 and s["prim_fallbacks"] == 0, s


@pytest.mark.cpu_semantics("model zoo tier: CPU, fp32")
def test_training_with_labels_at_varying_batch_sizes():
    # GPT2LMHeadModel's loss from labels= calls logger.warning_once
    # (Note [Deferred logging]): no graph break, no recompile per call.
    import copy

    model, _, _ = build("hf-gpt2")
    model.train()
    reference = copy.deepcopy(model)
    kernels = kiln._C.cpu_kernels_available() and kiln.config.cpu_kernels
    compiled = kiln.compile(model, backend="inductor" if kernels else "aot_eager")
    for batch in [4, 6, 8, 5, 6]:
        ids = torch.randint(0, 100, (batch, 16))
        model.zero_grad()
        reference.zero_grad()
        loss = compiled(ids, labels=ids).loss
        expected = reference(ids, labels=ids).loss
        torch.testing.assert_close(loss, expected, rtol=1e-4, atol=1e-4)
        loss.backward()
        expected.backward()
        for p, q in zip(model.parameters(), reference.parameters()):
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5)
    s = kiln.stats()
    assert s["traces"] == 2 and s["graph_breaks"] == 0 and s["eager_runs"] == 0, s
    assert s["size_instances"] == 3 and s["prim_fallbacks"] == 0, s


@pytest.mark.cpu_semantics("model zoo tier: CPU, fp32")
@pytest.mark.parametrize("wrapped", [False, True], ids=["forward", "wrapped-forward"])
@pytest.mark.parametrize("name", ["hf-gpt2", "hf-llama"])
def test_generate_keeps_its_traces_across_calls(name, wrapped):
    # Each generate() call makes a new DynamicCache (Note [Objects guarded
    # by type]) and its attention mask is one longer than the cache (Note
    # [Shifted sample points]): two traces (prefill; the first decoding
    # step, whose new KV cache carries the length that changed and so is
    # traced dynamic: Note [Sizes that change together]), none added by
    # later calls. A forward wrapped in a (*args, **kwargs) function (a
    # timing or logging wrapper) makes generate() pass the mask and cache
    # as keywords of a frame that views the mask as (batch, -1) and turns
    # it to bool before comparing its length with the cache's: those dims
    # stay exact (Note [Exact dims through shape rules]).
    import copy

    model, (tokens,), _ = build(name)
    model.eval()
    compiled_model = copy.deepcopy(model)
    kernels = kiln._C.cpu_kernels_available() and kiln.config.cpu_kernels
    compiled = kiln.compile(compiled_model.forward, backend="inductor" if kernels else "aot_eager")
    if wrapped:
        def forward(*args, **kwargs):
            return compiled(*args, **kwargs)

        compiled_model.forward = forward
    else:
        compiled_model.forward = compiled
    ids = tokens[:1, :8]
    kwargs = dict(attention_mask=torch.ones_like(ids), max_new_tokens=10, min_new_tokens=10, do_sample=False,
                  pad_token_id=0)
    with torch.no_grad():
        want = model.generate(ids, **kwargs)
        first = compiled_model.generate(ids, **kwargs)
        after_first = kiln.stats()
        second = compiled_model.generate(ids, **kwargs)
    assert torch.equal(first, want) and torch.equal(second, want)
    s = kiln.stats()
    assert after_first["traces"] == 2, after_first
    assert s["traces"] == after_first["traces"] and s["graph_breaks"] == 0 and s["eager_runs"] == 0, s
    # The decoding step works at static sizes but for the cache's cat,
    # attention and the mask: its static regions compile once, no length
    # compiles (Note [Static regions]).
    if kernels:
        assert s["static_regions"] > 0 and s["size_instances"] == 0, s


@pytest.mark.cpu_semantics("model zoo tier: CPU, fp32")
def test_seq2seq_generate_hands_the_encoder_output_to_each_step():
    # T5's generate() runs the encoder once and passes its output object
    # (a ModelOutput: a dataclass over OrderedDict) to every decoder step,
    # which reads it through len() and [0]: guarded by its type and keys,
    # not its identity (Note [Dict-backed objects]), so a second call keeps
    # the first call's traces. Three traces: the first step (empty cache),
    # the second (cache length 1, specialized as every size 1 is), then the
    # dynamic one.
    import copy

    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.T5Config(vocab_size=100, d_model=64, d_kv=16, d_ff=128, num_layers=2, num_decoder_layers=2,
                                   num_heads=4, decoder_start_token_id=0, pad_token_id=0, eos_token_id=1,
                                   dropout_rate=0.0)
    model = transformers.T5ForConditionalGeneration(config).eval()
    compiled_model = copy.deepcopy(model)
    kernels = kiln._C.cpu_kernels_available() and kiln.config.cpu_kernels
    compiled_model.forward = kiln.compile(compiled_model.forward, backend="inductor" if kernels else "aot_eager")
    ids = torch.randint(2, 100, (1, 12))
    kwargs = dict(attention_mask=torch.ones_like(ids), max_new_tokens=10, min_new_tokens=10, do_sample=False)
    with torch.no_grad():
        want = model.generate(ids, **kwargs)
        assert torch.equal(compiled_model.generate(ids, **kwargs), want)
        after_first = kiln.stats()
        assert torch.equal(compiled_model.generate(ids, **kwargs), want)
    s = kiln.stats()
    assert after_first["traces"] == 3, after_first
    assert s["traces"] == 3 and s["graph_breaks"] == 0 and s["eager_runs"] == 0, s


@pytest.mark.cpu_semantics("model zoo tier: CPU, fp32")
@pytest.mark.parametrize("name", ["hf-gpt2", "hf-llama"])
def test_batched_generate_with_left_padding(name):
    # Two prompts, the second left-padded: the mask utilities take their
    # padding path at every step; two traces, tokens equal to eager.
    import copy

    model, (tokens,), _ = build(name)
    model.eval()
    compiled_model = copy.deepcopy(model)
    kernels = kiln._C.cpu_kernels_available() and kiln.config.cpu_kernels
    compiled_model.forward = kiln.compile(compiled_model.forward, backend="inductor" if kernels else "aot_eager")
    ids = tokens[:2, :8].clone()
    mask = torch.ones_like(ids)
    ids[1, :3], mask[1, :3] = 0, 0
    kwargs = dict(attention_mask=mask, max_new_tokens=10, min_new_tokens=10, do_sample=False, pad_token_id=0)
    with torch.no_grad():
        want = model.generate(ids, **kwargs)
        for _ in range(2):
            assert torch.equal(compiled_model.generate(ids, **kwargs), want)
    s = kiln.stats()
    assert s["traces"] == 2 and s["graph_breaks"] == 0 and s["eager_runs"] == 0, s


@pytest.mark.cpu_semantics("model zoo tier: CPU, fp32")
@pytest.mark.parametrize("name", ["hf-gpt2", "hf-llama", "hf-bert"])
def test_serving_batch_sizes_compile_twice(name):
    # A serving loop over batch sizes 1..32 with attention masks: the
    # static trace, then one dynamic trace that also holds at batch 1
    # (Note [The size-one point]): no recompile after the second size.
    model, _, _ = build(name)
    model.eval()
    kernels = kiln._C.cpu_kernels_available() and kiln.config.cpu_kernels
    compiled = kiln.compile(model, backend="inductor" if kernels else "aot_eager")
    with torch.no_grad():
        for batch in [5, 9, 1, 25, 3, 32, 1, 17]:
            ids = torch.randint(0, 100, (batch, 16))
            mask = torch.ones(batch, 16, dtype=torch.long)
            mask[0, :3] = 0
            got = tensors_of(compiled(ids, attention_mask=mask))
            want = tensors_of(model(ids, attention_mask=mask))
            assert len(got) == len(want) > 0
            for a, b in zip(got, want):
                torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)
    s = kiln.stats()
    assert s["traces"] == 2 and s["recompiles"] == 1 and s["graph_breaks"] == 0, s
    assert s["size_instances"] == 6 and s["prim_fallbacks"] == 0 and s["eager_runs"] == 0, s


@pytest.mark.cpu_semantics("model zoo tier: CPU, fp32")
@pytest.mark.parametrize("name", ["hf-mistral", "hf-gemma2", "hf-gemma3"])
def test_sliding_window_generate_counts_tokens_in_a_dynamic_int(name):
    # Their cache layers count the tokens seen in a Python int
    # (`cumulative_length`), which sizes the attention mask: traced as a
    # dynamic int (Note [Dynamic ints]) rather than one trace per step up to
    # the cache limit. Two traces, none added by a second call.
    import copy

    from library_models import build as build_library

    model, args, kwargs = build_library(name)
    model.eval()
    compiled_model = copy.deepcopy(model)
    kernels = kiln._C.cpu_kernels_available() and kiln.config.cpu_kernels
    compiled_model.forward = kiln.compile(compiled_model.forward, backend="inductor" if kernels else "aot_eager")
    ids = (args[0] if args else kwargs["input_ids"])[:1, :8]
    gen = dict(attention_mask=torch.ones_like(ids), max_new_tokens=12, min_new_tokens=12, do_sample=False,
               pad_token_id=0)
    with torch.no_grad():
        want = model.generate(ids, **gen)
        for _ in range(2):
            assert torch.equal(compiled_model.generate(ids, **gen), want)
    s = kiln.stats()
    assert s["traces"] == 2 and s["graph_breaks"] == 0 and s["eager_runs"] == 0, s
    if kernels:
        assert s["static_regions"] > 0, s


@pytest.mark.cpu_semantics("model zoo tier: CPU, fp32")
def test_sliding_window_that_fills_up_during_generate():
    # A window of 12 and 30 new tokens: the count crosses the window while
    # decoding. The trace at 8 tokens guards "not full" (its sample points
    # straddle the window, Note [Dynamic ints]); the first full step traces
    # once more, the cache then kept as a window-sized slice once more.
    import copy

    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.MistralConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4,
                                        num_key_value_heads=2, intermediate_size=128, vocab_size=100,
                                        sliding_window=12)
    model = transformers.MistralForCausalLM(config).eval()
    compiled_model = copy.deepcopy(model)
    compiled_model.forward = kiln.compile(compiled_model.forward)
    ids = torch.randint(1, 100, (1, 8))
    gen = dict(attention_mask=torch.ones_like(ids), max_new_tokens=30, min_new_tokens=30, do_sample=False,
               pad_token_id=0)
    with torch.no_grad():
        want = model.generate(ids, **gen)
        assert torch.equal(compiled_model.generate(ids, **gen), want)
        after_first = kiln.stats()
        assert torch.equal(compiled_model.generate(ids, **gen), want)
    s = kiln.stats()
    assert after_first["traces"] <= 4 and s["traces"] == after_first["traces"], s
    assert s["graph_breaks"] == 0 and s["eager_runs"] == 0, s


@pytest.mark.cpu_semantics("model zoo tier: CPU, fp32")
def test_denoising_loop_with_int_timesteps_traces_twice():
    # A scheduler loop passes the UNet a Python int timestep that changes
    # every step: a dynamic int (Note [Dynamic ints]) from the second
    # value on, its time embedding replayed between static regions,
    # rather than a trace per step up to the cache limit.
    import copy

    from zoo_models import build_or_skip

    model, (sample, _), kwargs = build_or_skip(build, "diffusers-unet2d_condition")
    model.eval()
    compiled_model = copy.deepcopy(model)
    compiled_model.forward = kiln.compile(compiled_model.forward)
    with torch.no_grad():
        for t in (999, 979, 959, 939, 919, 899, 879, 859, 839, 819):
            want = model(sample, t, **kwargs).sample
            torch.testing.assert_close(compiled_model(sample, t, **kwargs).sample, want, rtol=1e-4, atol=1e-4)
    s = kiln.stats()
    assert s["traces"] == 2 and s["graph_breaks"] == 0 and s["eager_runs"] == 0, s
