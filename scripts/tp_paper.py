#!/usr/bin/env python3
"""The on-paper figures of docs/distributed.md: what tensor parallelism's all-reduces cost per
token and per decode step for 7B and 70B models at TP 2/4/8 over NVLink and InfiniBand.

usage: scripts/tp_paper.py

Model per decode step of B sequences (Megatron: two all-reduces per layer, each of B x hidden
activations): 2 L all-reduces, each taking alpha + S x 2 (N - 1) / N / BW, where S is the
payload (B x hidden x bytes per element), 2 (N - 1) / N what a ring (or reduce-scatter +
all-gather, as pagellm's dist/ does) moves per rank, BW the link's effective one-way
bandwidth and alpha the fixed cost of one all-reduce. The inputs are stated below, each with
where it comes from; change them and run again.
"""

MODELS = {  # layers, hidden, weight bytes (bf16)
    "7B (Llama 2 7B)": (32, 4096, 13.5e9),
    "70B (Llama 2/3 70B)": (80, 8192, 141e9),
}
LINKS = {
    # alpha (s), effective one-way bandwidth (B/s)
    # NVLink 4 (H100 SXM): 450 GB/s per direction per GPU; ~360 GB/s is what an all-reduce
    # gets on the wire. alpha: NCCL's small-message all-reduce on 8 x H100, 22 us, and
    # vLLM's custom all-reduce, 6 us (vLLM PR #8558's measurements).
    "NVLink (H100), NCCL": (22e-6, 360e9),
    "NVLink (H100), custom all-reduce": (6e-6, 360e9),
    # InfiniBand NDR, one 400 Gb/s port per GPU: 50 GB/s per direction, ~45 GB/s effective;
    # alpha: a ring's N - 1 network hops plus NCCL's launch, ~20 us.
    "InfiniBand NDR 400G": (20e-6, 45e9),
}
HBM = 3.35e12  # H100 SXM memory bandwidth: the floor of a decode step that reads the weights


def main():
    print("Bytes of all-reduce per token (the payload: 2 x layers x hidden x element size)\n")
    print("| model | bf16 (vLLM) | f32 (pagellm) | sent per rank, TP 2 / 4 / 8 (bf16) |")
    print("| --- | --- | --- | --- |")
    for name, (L, d, _) in MODELS.items():
        p = 2 * L * d * 2
        sent = " / ".join(f"{p * 2 * (n - 1) / n / 2**20:.2f} MiB" for n in (2, 4, 8))
        print(f"| {name} | {p / 2**20:.2f} MiB | {2 * p / 2**20:.2f} MiB | {sent} |")
    for B in (1, 64):
        print(f"\nCommunication per decode step, batch {B} (bf16), against the step's weight "
              f"reads at {HBM / 1e12:.2f} TB/s\n")
        print("| model | link | TP 2 | TP 4 | TP 8 |")
        print("| --- | --- | --- | --- | --- |")
        for name, (L, d, w) in MODELS.items():
            for link, (alpha, bw) in LINKS.items():
                cells = []
                for n in (2, 4, 8):
                    s = B * d * 2
                    t = 2 * L * (alpha + s * 2 * (n - 1) / n / bw)
                    mem = w / n / HBM
                    cells.append(f"{t * 1e3:.2f} ms ({t / (t + mem) * 100:.0f}%)")
                print(f"| {name} | {link} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
