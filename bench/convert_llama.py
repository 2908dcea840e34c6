"""Converting a ~1B-parameter bfloat16 Llama both ways, beside copying the same bytes.

Writes a random Llama (hidden 2048, 16 layers, 32 heads / 8 kv heads, SwiGLU 8192, vocab 32000:
1.1B parameters, 2.2 GB in bfloat16) as sharded safetensors, then times, each in a fresh process:
``cp -r`` of that folder (the floor: reading and writing the same bytes), Hugging Face ->
plugtrain (``hf_to_plugtrain`` + the checkpoint file) and plugtrain -> Hugging Face
(``export_hf``). Each child reports its own peak RSS, shown beside the model's size and its
largest shard. Goal: at most 3x the copy; peak RSS at most the model plus one shard plus 10 %.

    python bench/convert_llama.py [--layers 16] [--shard-size 1GB] [--dir /tmp/convert-bench]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

CHILD = r"""
import json, resource, sys, time
from pathlib import Path
direction, source, target, shard = sys.argv[1:5]
start = time.perf_counter()
import torch
from plugtrain.conversion import export_hf, hf_to_plugtrain
from plugtrain.conversion.plugtrain_files import read_model_state
from plugtrain.discovery.loading import get_registry
from plugtrain.train.checkpointing.storage.archive import save_checkpoint
import plugtrain_models.families, plugtrain_models.converters.llama
get_registry()
imported = time.perf_counter()
if direction == "to-plugtrain":
    converted = hf_to_plugtrain(source)
    save_checkpoint(target, {"model": converted.state})
    Path(target + ".keys.json").write_text(json.dumps(converted.model_keys))
else:
    keys = json.loads(Path(source + ".keys.json").read_text())
    export_hf(read_model_state(source), "llama", keys, target, shard_size=shard)
done = time.perf_counter()
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps({"imports": imported - start, "seconds": done - imported, "peak_rss": peak}))
"""


def write_model(folder: Path, layers: int, shard_size: str) -> tuple[int, int]:
    """A random bfloat16 Llama as sharded safetensors; (bytes, largest shard's bytes)."""
    import torch

    from plugtrain.conversion.hf_files import ShardedWriter, parse_size

    hidden, heads, kv, ffn, vocab = 2048, 32, 8, 8192, 32000
    head_dim = hidden // heads
    generator = torch.Generator().manual_seed(0)

    def tensor(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=generator).mul_(0.02).to(torch.bfloat16)

    with ShardedWriter(folder, parse_size(shard_size), safetensors=True) as writer:
        writer.add("model.embed_tokens.weight", tensor(vocab, hidden))
        for n in range(layers):
            p = f"model.layers.{n}."
            writer.add(p + "self_attn.q_proj.weight", tensor(hidden, hidden))
            writer.add(p + "self_attn.k_proj.weight", tensor(kv * head_dim, hidden))
            writer.add(p + "self_attn.v_proj.weight", tensor(kv * head_dim, hidden))
            writer.add(p + "self_attn.o_proj.weight", tensor(hidden, hidden))
            writer.add(p + "mlp.gate_proj.weight", tensor(ffn, hidden))
            writer.add(p + "mlp.up_proj.weight", tensor(ffn, hidden))
            writer.add(p + "mlp.down_proj.weight", tensor(hidden, ffn))
            writer.add(p + "input_layernorm.weight", torch.ones(hidden, dtype=torch.bfloat16))
            writer.add(
                p + "post_attention_layernorm.weight", torch.ones(hidden, dtype=torch.bfloat16)
            )
        writer.add("model.norm.weight", torch.ones(hidden, dtype=torch.bfloat16))
        writer.add("lm_head.weight", tensor(vocab, hidden))
        config = {
            "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": vocab,
            "hidden_size": hidden, "intermediate_size": ffn, "num_hidden_layers": layers,
            "num_attention_heads": heads, "num_key_value_heads": kv,
            "max_position_embeddings": 4096, "rms_norm_eps": 1e-5, "rope_theta": 500000.0,
            "tie_word_embeddings": False, "dtype": "bfloat16",
        }  # fmt: skip
        writer.staged("config.json").write_text(json.dumps(config))
    shards = list(folder.glob("*.safetensors"))
    return sum(p.stat().st_size for p in shards), max(p.stat().st_size for p in shards)


def child(direction: str, source: Path, target: Path, shard: str) -> dict[str, float]:
    result = subprocess.run(
        [sys.executable, "-c", CHILD, direction, str(source), str(target), shard],
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(result.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layers", type=int, default=16)
    parser.add_argument("--shard-size", default="1GB")
    parser.add_argument("--dir", type=Path, default=Path("/tmp/convert-bench"))
    args = parser.parse_args()
    shutil.rmtree(args.dir, ignore_errors=True)
    args.dir.mkdir(parents=True)
    hf = args.dir / "hf"
    model_bytes, shard_bytes = write_model(hf, args.layers, args.shard_size)
    subprocess.run(["sync"], check=False)

    start = time.perf_counter()
    subprocess.run(["cp", "-r", str(hf), str(args.dir / "copy")], check=True)
    subprocess.run(["sync"], check=False)
    copy_seconds = time.perf_counter() - start
    shutil.rmtree(args.dir / "copy")

    mdl = args.dir / "model_to_plugtrain.mdl"
    to_plugtrain = child("to-plugtrain", hf, mdl, args.shard_size)
    to_hf = child("to-hf", mdl, args.dir / "model_to_plugtrain_to_hf", args.shard_size)

    gb = 1e9
    print(f"model {model_bytes / gb:.2f} GB in bfloat16, largest shard {shard_bytes / gb:.2f} GB")
    print("(x cp: the conversion alone, after the imports, beside cp -r of the folder + sync)")
    print(
        f"{'step':<18}{'imports s':>10}{'convert s':>10}{'x cp':>7}{'peak RSS GB':>13}"
        f"{'x (model+shard)':>17}"
    )
    bound = model_bytes + shard_bytes
    print(f"{'cp -r + sync':<18}{'':>10}{copy_seconds:>10.2f}{1.0:>7.2f}")
    for name, row in (("hf -> plugtrain", to_plugtrain), ("plugtrain -> hf", to_hf)):
        print(
            f"{name:<18}{row['imports']:>10.2f}{row['seconds']:>10.2f}"
            f"{row['seconds'] / copy_seconds:>7.2f}{row['peak_rss'] / gb:>13.2f}"
            f"{row['peak_rss'] / bound:>17.2f}"
        )
    shutil.rmtree(args.dir, ignore_errors=True)


if __name__ == "__main__":
    main()
