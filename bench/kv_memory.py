"""What a KV cache type (--cache-type-k/-v) costs and saves: for each type, a process of its own loads the target at
a long context, writes a short answer plainly, and prints its peak memory and speed, beside the cache's size as the
metadata says it (Model.kv_bytes_per_token). Run alone.

    bench/kv_memory.py -m TARGET.gguf [--ctx 32768] [--types f16,q8_0]
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys

CHILD = """
import json, resource, sys
import edgespec
path, ctx, kv = sys.argv[1], int(sys.argv[2]), sys.argv[3]
with edgespec.Engine.load(path, n_ctx=ctx, kv_cache=kv, n_threads=2) as e:
    r = e.generate(e.tokenize("Write a haiku about caches.", chat_format=True), max_tokens=48, speculative=False)
    cache = e.model.kv_bytes_per_token() * e.target.n_ctx
print(json.dumps({"kv": kv, "peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "cache_mib": cache / 2**20, "tok_s": r.stats.tokens_per_s}))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("--ctx", type=int, default=32768)
    ap.add_argument("--types", default="f16,q8_0")
    a = ap.parse_args()
    print(f"# bench/kv_memory.py -m {a.model} --ctx {a.ctx} --types {a.types}")
    print(f"{'type':<6} {'cache MiB':>9} {'peak RSS MiB':>12} {'tok/s':>6}")
    for kv in a.types.split(","):
        out = subprocess.run([sys.executable, "-c", CHILD, a.model, str(a.ctx), kv], capture_output=True, text=True)
        if out.returncode:
            sys.exit(f"{kv}: {out.stderr.strip().splitlines()[-1]}")
        r = json.loads(out.stdout.strip().splitlines()[-1])
        print(f"{kv:<6} {r['cache_mib']:>9.0f} {r['peak_mib']:>12.0f} {r['tok_s']:>6.1f}")


if __name__ == "__main__":
    main()
