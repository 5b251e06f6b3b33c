#!/usr/bin/env python3
"""Every command in the README and docs/ runs as written.

Each ```sh block of README.md and docs/*.md runs through bash, block by block in document order,
in a scratch folder laid out like a checkout: `tessera` is on the PATH (and at
build/release/src/cli/tessera), configs/ holds the shipped model and cluster files, and the config
files the commands name (configs/default.toml, configs/moe.toml, run.toml) are the shipped ones
with a tiny model, so a training command finishes in a second. Then each complete training command
written inline in the prose (`tessera train --config ...`, `tessera launch -n 4 -- train --config
...`, without placeholders such as `N` or `...`) runs too, into a run folder of its own. What a command needs is there as the README assumes
it: the demo's run in runs/default (what scripts/demo.sh leaves), a folder of texts (my_texts/), a
note (notes.txt), a tokenizer (llama/tokenizer.model).

A few blocks cannot run here and are skipped, each with its reason (SKIPPED below): scripts that
install, build or benchmark for minutes, a Slurm batch script, jobs on hosts that do not exist
(those run with --dry-run instead, which still parses every argument). `[--option]` in a command
means "optionally": the command runs without it.

Usage: documented_commands.py <tessera executable> <source tree>
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

# Blocks that are not run, by a word of their first command, and why.
SKIPPED = {
    "scripts/demo.sh": "installs packages and builds (the demo's run is prepared here instead)",
    "scripts/test.sh": "installs packages, builds and runs the whole suite (this test is part of it)",
    "scripts/install-deps.sh": "installs Debian packages",
    "scripts/fuzz.sh": "fuzzes for minutes",
    "build/fuzz/": "replays a fuzz finding (needs the fuzz build and a finding)",
    "cmake": "builds the project (the test runs inside that build)",
    "bench/": "benchmarks take minutes on purpose",
    "build/release/bench/": "benchmarks take minutes on purpose",
    "RUNS=": "benchmarks take minutes on purpose",
    "SVG=": "benchmarks take minutes on purpose",
    "#!/bin/bash": "a Slurm batch script (sbatch is not here)",
    "scripts/cluster.sh": "makes network namespaces (tests/dist/test_cluster.cpp runs the cluster)",
}

# Commands that start jobs on other machines run with --dry-run.
MULTI_HOST = re.compile(r"tessera launch (.*?)(--hosts|--hostfile)")

TINY = """
[model]
arch = "gpt2"
n_layer = 2
n_head = 2
n_embd = 32
seq_len = 32

[data]
dir = "data/kjv"

[train]
steps = 3
batch_size = 16
micro_batch_size = 16
out_dir = "runs/default"
eval_every = 0
eval_batches = 1
sample_tokens = 8
sample_prompt = "And God said"

[optim]
warmup_steps = 1

[checkpoint]
keep = 2

[log]
every = 1
progress = "plain"
peak_gflops = 100
"""

# configs/moe.toml as shipped (every block's MLP as 4 experts, top-1, batch 16 in one microbatch)
# on the tiny model.
MOE = TINY.replace('out_dir = "runs/default"', 'out_dir = "runs/moe"').replace(
    "seq_len = 32\n", "seq_len = 32\nmoe_experts = 4\nmoe_top_k = 1\nmoe_capacity_factor = 1.25\n")

# run.toml: a user's own config, for the commands that start it on 4 ranks.
RUN = TINY.replace('out_dir = "runs/default"', 'out_dir = "runs/run"').replace(
    "micro_batch_size = 16", "micro_batch_size = 4") + "\n[parallel]\ndp = 4\n"


def blocks(path):
    text = open(path, encoding="utf-8").read()
    for m in re.finditer(r"```sh\n(.*?)```", text, re.S):
        yield m.group(1)


# A training command written inline: complete, with no placeholder (a capital letter standing for a
# value, "FILE", "...", "…", "[optional]").
INLINE = re.compile(r"`(tessera (?:launch -n \d+ -- )?train --config [^`]*)`")
PLACEHOLDER = re.compile(r"…|\.\.\.|\[|\b[A-Z]\b|\bFILE\b|/")


def inline_commands(path):
    text = re.sub(r"```.*?```", "", open(path, encoding="utf-8").read(), flags=re.S)
    for n, m in enumerate(INLINE.finditer(text.replace("\n", " "))):
        command = " ".join(m.group(1).split())
        if PLACEHOLDER.search(command.replace("configs/", "configs_")):
            continue
        if "--train.out_dir" not in command:
            command += f" --train.out_dir runs/inline_{n}"
        yield command


def skip_reason(block):
    first = next((line.strip() for line in block.splitlines() if line.strip() and not line.strip().startswith("# ")),
                 "")
    for word, reason in SKIPPED.items():
        if first.startswith(word):
            return reason
    if "srun " in block or "sbatch" in block:
        return "Slurm (not here)"
    if "bench/" in block:
        return "benchmarks take minutes on purpose"
    return None


def runnable(block):
    out = []
    for line in block.splitlines():
        line = re.sub(r"\s\[--[^\]]*\]", "", line)  # [--optional arguments]
        if MULTI_HOST.search(line) and "--dry-run" not in line:
            line = line.replace("tessera launch ", "tessera launch --dry-run ", 1)
        out.append(line)
    return "\n".join(out) + "\n"


def prepare(scratch, tessera, source):
    bin_dir = os.path.join(scratch, "bin")
    os.makedirs(bin_dir)
    os.symlink(tessera, os.path.join(bin_dir, "tessera"))
    os.makedirs(os.path.join(scratch, "build/release/src/cli"))
    os.symlink(tessera, os.path.join(scratch, "build/release/src/cli/tessera"))
    shutil.copytree(os.path.join(source, "configs"), os.path.join(scratch, "configs"))
    with open(os.path.join(scratch, "configs/default.toml"), "w") as f:
        f.write(TINY)
    with open(os.path.join(scratch, "configs/moe.toml"), "w") as f:
        f.write(MOE)
    with open(os.path.join(scratch, "run.toml"), "w") as f:
        f.write(RUN)
    # A user's texts: the King James Bible (Debian's bible-kjv, installed with the other dependencies).
    os.makedirs(os.path.join(scratch, "my_texts"))
    with open(os.path.join(scratch, "my_texts", "kjv.txt"), "w") as f:
        subprocess.run(["bible", "-f", "Gen1:1-Rev22:21"], stdout=f, check=True)
    with open(os.path.join(scratch, "notes.txt"), "w") as f:
        f.write(open(os.path.join(scratch, "my_texts", "kjv.txt")).read()[:400000])
    env = dict(os.environ, PATH=bin_dir + os.pathsep + os.environ["PATH"], OMP_NUM_THREADS="1",
               OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1")
    # What scripts/demo.sh leaves: the King James Bible prepared and the default run trained.
    for command in ("tessera data prepare --input kjv --out data/kjv --vocab-size 4096",
                    "tessera train --config configs/default.toml"):
        run(command, scratch, env, "demo")
    os.makedirs(os.path.join(scratch, "llama"))
    shutil.copy(os.path.join(scratch, "data/kjv/tokenizer.model"), os.path.join(scratch, "llama/tokenizer.model"))
    return env


def run(script, cwd, env, where):
    p = subprocess.run(["bash", "-eo", "pipefail", "-c", script], cwd=cwd, env=env, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=600)
    return p.returncode, p.stdout


def main():
    tessera, source = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    failures, ran, skipped = [], 0, 0
    with tempfile.TemporaryDirectory(prefix="tessera_documented_") as root:
        base = os.path.join(root, "base")
        os.makedirs(base)
        env = prepare(base, tessera, source)
        env["PATH"] = env["PATH"].replace(base, "{scratch}")
        docs = [os.path.join(source, "README.md")] + sorted(
            os.path.join(source, "docs", f) for f in os.listdir(os.path.join(source, "docs")) if f.endswith(".md"))
        for path in docs:
            name = os.path.relpath(path, source)
            # Each document runs in a checkout of its own; docs/data.md, which prepares the
            # datasets, in one where the demo has not run yet.
            scratch = os.path.join(root, name.replace("/", "_"))
            shutil.copytree(base, scratch, symlinks=True)
            if name == "docs/data.md":
                shutil.rmtree(os.path.join(scratch, "data"))
                shutil.rmtree(os.path.join(scratch, "runs"))
            doc_env = dict(env, PATH=env["PATH"].replace("{scratch}", scratch))
            for block in blocks(path):
                reason = skip_reason(block)
                if reason:
                    skipped += 1
                    print(f"skip {name}: {block.splitlines()[0][:70]} ({reason})")
                    continue
                ran += 1
                code, output = run(runnable(block), scratch, doc_env, name)
                status = "ok" if code == 0 else f"FAILED (exit {code})"
                print(f"{status:<18} {name}: {block.strip().splitlines()[0][:90]}")
                if code != 0:
                    failures.append((name, block, output))
            for command in inline_commands(path):
                ran += 1
                code, output = run(command + "\n", scratch, doc_env, name)
                status = "ok" if code == 0 else f"FAILED (exit {code})"
                print(f"{status:<18} {name} (inline): {command[:90]}")
                if code != 0:
                    failures.append((name, command, output))
    for name, block, output in failures:
        print(f"\n==== {name} ====\n{block}\n---- output ----\n{output[-3000:]}")
    print(f"\n{ran} blocks ran, {skipped} skipped, {len(failures)} failed")
    return 1 if failures or ran == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
