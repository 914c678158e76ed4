# Type hints of einsummable.llama (docs/generation.md, docs/python.md).
import os
from typing import Any, Dict, List, Mapping, Optional, Sequence, Set, Union

import numpy
import numpy.typing

from ._core import Program

_Path = Union[str, "os.PathLike[str]"]
_Ids = Union[Sequence[int], numpy.typing.NDArray[numpy.integer[Any]]]

__all__: List[str]

def read_config(config: Union[_Path, Mapping[str, Any]]) -> Dict[str, Any]: ...

class Llama:
    files: List[str]
    config: Dict[str, Any]
    cfg: Dict[str, Any]
    dm: int
    H: int
    KV: int
    D: int
    FF: int
    V: int
    L: int
    eps: float
    theta: float
    tied: bool
    act: str
    eos: Set[int]
    max_len: int
    device: List[int]
    chunk: int
    dtype: str
    file_dtype: str
    quantization: Optional[str]
    qdtype: str
    allow_unused: bool
    window: int
    last_stats: Optional[Dict[str, Union[int, float]]]
    def __init__(self, files: Union[_Path, Sequence[_Path]], config: Union[_Path, Mapping[str, Any]],
                 device: Optional[Sequence[int]] = ..., max_len: Optional[int] = ...,
                 backend: Optional[str] = ..., prefill_chunk: int = ...,
                 strategy: Optional[str] = ..., dtype: Optional[str] = ...,
                 allow_unused: bool = ..., quantization: Optional[str] = ...) -> None: ...
    def step(self, ids: _Ids, pos: _Ids) -> numpy.typing.NDArray[numpy.float32]: ...
    def prefill(self, ids: Union[Sequence[Sequence[int]], numpy.typing.NDArray[numpy.integer[Any]]],
                pos: _Ids) -> numpy.typing.NDArray[numpy.float32]: ...
    def logits(self, prompts: Sequence[_Ids]) -> List[numpy.typing.NDArray[numpy.float32]]: ...
    def generate(self, prompt_ids: Sequence[_Ids], max_new_tokens: int = ...,
                 temperature: float = ..., top_k: Optional[int] = ..., seed: Optional[int] = ...,
                 eos_token_id: Union[None, int, Sequence[int]] = ...) -> List[List[int]]: ...
    def close(self) -> None: ...
    def __enter__(self) -> "Llama": ...
    def __exit__(self, *exc: object) -> None: ...

def load(files: Union[_Path, Sequence[_Path]], config: Union[_Path, Mapping[str, Any]],
         device: Optional[Sequence[int]] = ..., max_len: Optional[int] = ...,
         backend: Optional[str] = ..., prefill_chunk: int = ..., strategy: Optional[str] = ...,
         dtype: Optional[str] = ..., allow_unused: bool = ...,
         quantization: Optional[str] = ...) -> Llama: ...
