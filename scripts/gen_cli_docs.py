#!/usr/bin/env python3
"""Writes docs/cli.md and docs/pagellm.1 from what the built pagellm prints for --help.

usage: scripts/gen_cli_docs.py [--check] [PAGELLM] [DOCS_DIR]
  PAGELLM   the built command (default: build/tools/pagellm beside this script's tree)
  DOCS_DIR  where cli.md and pagellm.1 live (default: docs/ of this tree)
  --check   write nothing; print a diff and exit 1 when either file differs from what
            would be written (the meson test `cli_docs` runs this)

The commands are found, not listed here: those in `pagellm --help`'s "commands:" section
and the subcommands `pagellm bench --help` names, each documented by its own --help text.
A flag block ("engine flags:" ...) that several commands print identically is written once,
under "Flags shared by several commands", and referred to from each command.
"""
import difflib
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

REGENERATE = "scripts/gen_cli_docs.py build/tools/pagellm"

# Text that is not a flag's: the same in both files.
SHARED_NOTE = "A flag's default, where it has one, ends its line in [brackets]."
DESCRIPTION = """pagellm runs LLaMA-family decoder models (llama2.c checkpoints, Hugging Face
safetensors directories of Llama, Mistral, Qwen2 and Qwen3, GGUF files, or seeded dummy
weights) on many requests at once, with continuous batching and a paged KV cache. generate
runs prompts and chats and prints their completions; chat talks with a chat model in the
terminal; tokenize and detokenize show what the tokenizer and the chat template make of a text
or a chat; bench measures throughput, latency and this machine's ceilings; profile shows where
a workload's time goes; quantize writes a model as a GGUF file in another weight type; serve
answers OpenAI-compatible HTTP requests; doctor comm measures the all-reduces of tensor
parallelism (a model split over threads or over the ranks of `mpirun -n N pagellm ...`)."""

EXIT_STATUS = [
    ("0", "success; for serve, also a stop on SIGTERM/SIGINT after its drain"),
    ("1", "a runtime failure (a model that cannot load, a refused or failed request, an "
          "engine error); the message is on stderr"),
    ("2", "a usage error: a bad flag or value, or a prompts file that does not parse; the "
          "message names the flag, or the file and line"),
    ("130", "generate was interrupted (SIGINT): what ran was aborted and printed (chat goes on "
            "after a SIGINT: it stops only the reply being generated)"),
]
ENVIRONMENT = [
    ("PAGELLM_API_KEY", "serve requires this key (as --api-key does) when it is set and not empty"),
    ("OMPI_ALLOW_RUN_AS_ROOT, OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "both set to 1 let Open MPI's "
     "mpirun start pagellm as root (tensor parallelism; docs/distributed.md)"),
    ("OPENBLAS_CORETYPE", "kept when set; on AMD CPUs with AVX-512 pagellm sets it to SkylakeX "
                          "and runs itself again (Debian's OpenBLAS 0.3.21 does not know Zen 4/5)"),
]


def help_text(exe, args):
    p = subprocess.run([exe] + args + ["--help"], capture_output=True, text=True, timeout=60)
    if p.returncode != 0 or not p.stdout.strip():
        sys.exit(f"gen_cli_docs: `pagellm {' '.join(args)} --help` failed (exit "
                 f"{p.returncode}): {p.stderr.strip()}")
    return p.stdout.rstrip("\n")


def listed(text, section=None):
    """Names in a help text's two-space-indented "  name   description" lines (after the
    line `section` when given)."""
    if section:
        text = text.split(section, 1)[1] if section in text else ""
    return re.findall(r"^  ([a-z][a-z-]*)  ", text, re.M)


def commands(exe):
    """[(args, help text)] for every command and bench and doctor subcommand, in help
    order."""
    top = help_text(exe, [])
    out = [([], top)]
    for cmd in listed(top, "commands:"):
        if cmd in ("help", "version"):
            continue
        text = help_text(exe, [cmd])
        out.append(([cmd], text))
        if cmd in ("bench", "doctor"):
            for sub in listed(text):
                out.append(([cmd, sub], help_text(exe, [cmd, sub])))
    return out


FLAG_HEADER = re.compile(r"^([a-z][a-z ]*) flags(?: \[default\])?:$")


def split_blocks(text):
    """The help text as [(name or None, lines)]: each "X flags:" block runs to the next such
    header, a blank line or the end."""
    blocks, cur_name, cur = [], None, []
    for line in text.split("\n"):
        m = FLAG_HEADER.match(line)
        if m or (cur_name and not line.strip()):
            if cur:
                blocks.append((cur_name, cur))
            cur_name, cur = (m.group(1), [line]) if m else (None, [line])
            continue
        cur.append(line)
    if cur:
        blocks.append((cur_name, cur))
    return blocks


def shared_blocks(cmds):
    """Flag blocks that at least two commands print identically: {name: lines}."""
    seen = {}
    for _, text in cmds:
        for name, lines in split_blocks(text):
            if name:
                seen.setdefault((name, "\n".join(lines)), 0)
                seen[(name, "\n".join(lines))] += 1
    shared = {}
    for (name, body), count in seen.items():
        if count >= 2 and name not in shared:
            shared[name] = body.split("\n")
    return shared


def command_parts(text, shared):
    """The help text with shared blocks replaced: [(kind, payload)], kind "text" (lines) or
    "ref" (a shared block's name)."""
    parts = []
    for name, lines in split_blocks(text):
        if name in shared and lines == shared[name]:
            parts.append(("ref", name))
        elif parts and parts[-1][0] == "text":
            parts[-1][1].extend(lines)
        else:
            parts.append(("text", list(lines)))
    return [(k, p) for k, p in parts if k == "ref" or "\n".join(p).strip()]


def title(args):
    return "pagellm" + "".join(" " + a for a in args)


def anchor(s):
    return re.sub(r"[^a-z0-9 -]", "", s.lower()).replace(" ", "-")


def strip_blank_edges(lines):
    while lines and not lines[0].strip():
        lines = lines[1:]
    while lines and not lines[-1].strip():
        lines = lines[:-1]
    return lines


# ------------------------------------------------------------------------------------------
# Markdown
# ------------------------------------------------------------------------------------------

def markdown(version, cmds, shared):
    out = ["# The pagellm command line", "",
           f"pagellm {version}. This page and the man page `docs/pagellm.1` (installed as "
           "`pagellm(1)`) are generated from the built command's `--help` texts by "
           "`scripts/gen_cli_docs.py`: do not edit them by hand. After changing a flag or a "
           "help text, regenerate both with one command:", "",
           "```sh", REGENERATE, "```", "",
           "The test `cli_docs` (suite `unit`) fails while either file differs from what "
           "`pagellm` prints.", "", DESCRIPTION.replace("\n", " "), ""]
    out += ["## Commands", ""]
    for args, _ in cmds:
        out.append(f"- [`{title(args)}`](#{anchor(title(args))})")
    out.append(f"- [Flags shared by several commands](#{anchor('Flags shared by several commands')})")
    out += ["- [Exit status](#exit-status)", "- [Environment](#environment)", ""]
    for args, text in cmds:
        out += [f"## {title(args)}", ""]
        for kind, payload in command_parts(text, shared):
            if kind == "ref":
                out += [f"{payload.capitalize()} flags: see "
                        f"[{payload} flags](#{anchor(payload + ' flags')}).", ""]
            else:
                out += ["```text"] + strip_blank_edges(payload) + ["```", ""]
    out += ["## Flags shared by several commands", "", SHARED_NOTE, ""]
    for name, lines in shared.items():
        out += [f"### {name} flags", "", "```text"] + lines[1:] + ["```", ""]
    out += ["## Exit status", "", "| status | meaning |", "| --- | --- |"]
    out += [f"| {code} | {what} |" for code, what in EXIT_STATUS]
    out += ["", "## Environment", ""]
    out += [f"- `{name}`: {what}." for name, what in ENVIRONMENT]
    return "\n".join(out) + "\n"


# ------------------------------------------------------------------------------------------
# roff (man 7 man)
# ------------------------------------------------------------------------------------------

def roff_escape(s):
    s = s.replace("\\", "\\e").replace("-", "\\-")
    return "\\&" + s if s.startswith((".", "'")) else s


def roff_block(lines):
    return [".PP", ".nf", ".RS 2"] + [roff_escape(l) for l in strip_blank_edges(lines)] + \
           [".RE", ".fi"]


def manpage(version, cmds, shared):
    top = cmds[0][1].split("\n")
    tagline = top[0].split(" - ", 1)[1] if " - " in top[0] else "LLM inference"
    out = [f'.\\" Generated by scripts/gen_cli_docs.py from pagellm --help: do not edit.',
           f'.\\" Regenerate: {REGENERATE}',
           f'.TH PAGELLM 1 "" "pagellm {version}" "User Commands"',
           ".SH NAME", f"pagellm \\- {roff_escape(tagline)}",
           ".SH SYNOPSIS", ".B pagellm", ".I COMMAND", "[flags]",
           ".SH DESCRIPTION"] + [roff_escape(l) for l in DESCRIPTION.split("\n")] + [
           ".PP", "Below, each command as its own", ".B \\-\\-help", "prints it."]
    out += [".SH COMMANDS"]
    for args, text in cmds:
        out += [f'.SS "{roff_escape(title(args))}"']
        for kind, payload in command_parts(text, shared):
            if kind == "ref":
                out += [".PP", f"{roff_escape(payload.capitalize())} flags: see",
                        ".B SHARED FLAGS", "below."]
            else:
                out += roff_block(payload)
    out += [".SH SHARED FLAGS", roff_escape(SHARED_NOTE)]
    for name, lines in shared.items():
        out += [f'.SS "{roff_escape(name)} flags"'] + roff_block(lines[1:])
    out += [".SH EXIT STATUS"]
    for code, what in EXIT_STATUS:
        out += [".TP", f".B {code}", roff_escape(what)]
    out += [".SH ENVIRONMENT"]
    for name, what in ENVIRONMENT:
        out += [".TP", f".B {name}", roff_escape(what)]
    out += [".SH SEE ALSO",
            "docs/cli.md, docs/api.md and docs/benchmarks.md in the source tree; the C API in",
            ".IR pagellm.h ."]
    return "\n".join(out) + "\n"


# ------------------------------------------------------------------------------------------

def main(argv):
    check = "--check" in argv
    args = [a for a in argv if a != "--check"]
    if len(args) > 2 or any(a.startswith("-") for a in args):
        print(__doc__.strip().split("\n\n")[1])
        return 2
    exe = args[0] if args else os.path.join(ROOT, "build", "tools", "pagellm")
    docs = args[1] if len(args) > 1 else os.path.join(ROOT, "docs")
    v = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=60)
    m = re.match(r"pagellm (\S+)\n", v.stdout)
    if v.returncode != 0 or not m:
        sys.exit(f"gen_cli_docs: `{exe} --version` printed {v.stdout!r} (exit {v.returncode})")
    version = m.group(1)
    cmds = commands(exe)
    shared = shared_blocks(cmds)
    files = {os.path.join(docs, "cli.md"): markdown(version, cmds, shared),
             os.path.join(docs, "pagellm.1"): manpage(version, cmds, shared)}
    stale = []
    for path, text in files.items():
        try:
            with open(path, encoding="utf-8") as f:
                old = f.read()
        except FileNotFoundError:
            old = ""
        if old == text:
            continue
        stale.append(path)
        if check:
            sys.stdout.writelines(difflib.unified_diff(
                old.splitlines(True), text.splitlines(True), path, "from --help", n=2))
        else:
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
            print(f"wrote {path}")
    if check and stale:
        print(f"\n{', '.join(stale)} differ from what `pagellm --help` prints: run {REGENERATE}")
        return 1
    if check:
        print("docs/cli.md and docs/pagellm.1 match --help")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
