"""Megatron's layout of TinyGPT as data: which parameter is split how (and no more: each rank's
slice is notebook 05's exercise 2)."""
import nanoparallel.lessons.tensor_parallel as tensor_parallel
from nanoparallel.lessons.models import GPTConfig, TinyGPT
from nanoparallel.lessons.tensor_parallel import split_of


def test_every_tinygpt_parameter_has_its_megatron_split():
    names = dict(TinyGPT(GPTConfig(n_layer=1)).named_parameters())
    splits = {n: split_of(n) for n in names}
    assert {n for n, s in splits.items() if s == "column"} == {
        f"blocks.0.{m}.{p}" for m in ("attn.q", "attn.k", "attn.v", "mlp.fc") for p in ("weight", "bias")}
    assert {n for n, s in splits.items() if s == "row"} == {
        f"blocks.0.{m}.{p}" for m in ("attn.proj", "mlp.proj") for p in ("weight", "bias")}
    assert splits["wte.weight"] is None and splits["blocks.0.ln_1.weight"] is None


def test_the_engine_does_not_slice_the_shards_an_exercise_asks_for():
    # a student can import the engine: a function returning a rank's shard would answer 05's exercise 2
    public = {n for n in vars(tensor_parallel) if not n.startswith("_")}
    assert not public & {"megatron_shard", "shard_state", "shard", "unshard"}
    assert callable(tensor_parallel.split_of)
