"""pagellm: vLLM's offline Python interface over the pagellm C library.

    from pagellm import LLM, SamplingParams
    llm = LLM("stories260K.bin", tokenizer="tok512.model")
    for out in llm.generate(["Once upon a time"], SamplingParams(temperature=0.8, max_tokens=64)):
        print(out.outputs[0].text)

The library (libpagellm.so) is found through $PAGELLM_LIBRARY, beside the package (where
meson install put it), or the system loader path.
"""
from ._lib import (BackendError, EngineClosedError, FormatError, InvalidArgumentError,
                   LibraryNotFoundError, NotFoundError, OutOfMemoryError, PagellmError,
                   PagellmIOError, QueueFullError, TooLongError, UnsupportedError,
                   library_path)
from .engine import EngineArgs, LLMEngine
from .llm import LLM
from .outputs import (CompletionOutput, Logprob, Metrics, ModelInfo, RequestMetrics,
                      RequestOutput, StepOutput, StreamDelta)
from .reply import Reply, parse_reply
from .sampling_params import GuidedDecodingParams, SamplingParams, StructuredOutputsParams
from .tokenizer import Tokenizer

__version__ = "0.1.0"


def library_version() -> str:
    """The loaded libpagellm's version ("0.1.0")."""
    from ._lib import lib
    return lib().pl_version().decode()


__all__ = ["LLM", "LLMEngine", "EngineArgs", "SamplingParams", "StructuredOutputsParams",
           "GuidedDecodingParams", "Reply", "parse_reply", "RequestOutput", "CompletionOutput",
           "Logprob", "RequestMetrics", "StreamDelta", "StepOutput", "Metrics", "ModelInfo",
           "Tokenizer", "PagellmError", "InvalidArgumentError", "OutOfMemoryError",
           "PagellmIOError", "FormatError", "UnsupportedError", "NotFoundError",
           "TooLongError", "QueueFullError", "BackendError", "EngineClosedError",
           "LibraryNotFoundError", "library_path", "library_version", "__version__"]
