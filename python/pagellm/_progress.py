"""The progress bar of LLM.generate / LLM.chat: tqdm when it is installed, else a plain one,
and only when standard error is a terminal."""
from __future__ import annotations

import sys
import time
from typing import Optional


class _Plain:
    """'Processed prompts: 12/32 [00:03, 4.1 it/s, 130 output tok/s]' redrawn in place."""

    def __init__(self, total: int, desc: str):
        self.total = total
        self.desc = desc
        self.n = 0
        self.out_tokens = 0
        self.start = time.monotonic()
        self.last_draw = 0.0
        self._draw(force=True)

    def update(self, n: int, out_tokens: int) -> None:
        self.n += n
        self.out_tokens += out_tokens
        self._draw(force=self.n >= self.total)

    def _draw(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self.last_draw < 0.1:
            return
        self.last_draw = now
        dt = max(now - self.start, 1e-9)
        m, s = divmod(int(dt), 60)
        sys.stderr.write(f"\r{self.desc}: {self.n}/{self.total} [{m:02d}:{s:02d}, "
                         f"{self.n / dt:.2f} it/s, {self.out_tokens / dt:.1f} output tok/s]")
        sys.stderr.flush()

    def close(self) -> None:
        self._draw(force=True)
        sys.stderr.write("\n")
        sys.stderr.flush()


class _Tqdm:
    def __init__(self, total: int, desc: str, tqdm):
        self.bar = tqdm(total=total, desc=desc, dynamic_ncols=True,
                        postfix="est. speed output: 0.00 toks/s")
        self.out_tokens = 0
        self.start = time.monotonic()

    def update(self, n: int, out_tokens: int) -> None:
        self.out_tokens += out_tokens
        dt = max(time.monotonic() - self.start, 1e-9)
        self.bar.postfix = f"est. speed output: {self.out_tokens / dt:.2f} toks/s"
        self.bar.update(n)

    def close(self) -> None:
        self.bar.close()


def progress(use_tqdm: bool, total: int, desc: str = "Processed prompts") -> Optional[object]:
    """A bar with update(prompts_done, output_tokens) and close(), or None when use_tqdm is
    false or standard error is not a terminal."""
    if not use_tqdm or total == 0:
        return None
    try:
        if not sys.stderr.isatty():
            return None
    except (AttributeError, ValueError):
        return None
    try:
        from tqdm import tqdm  # optional
    except ImportError:
        return _Plain(total, desc)
    return _Tqdm(total, desc, tqdm)
