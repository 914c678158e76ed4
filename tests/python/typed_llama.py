"""tests/python/typed_llama.py — a user script with type hints that loads a
checkpoint with es.llama and generates; test_typing.py runs `mypy --strict`
on it (issue 34). Run: typed_llama.py MODEL_DIR."""

import sys
from typing import Any, Dict, List

import numpy as np
import numpy.typing as npt

import einsummable as es


def run(d: str) -> List[List[int]]:
    cfg: Dict[str, Any] = es.llama.read_config(d + "/config.json")
    model: es.llama.Llama = es.llama.load([d + "/model.safetensors"], d + "/config.json",
                                          device=[0, 1], max_len=32, prefill_chunk=4)
    with model:
        lg: List[npt.NDArray[np.float32]] = model.logits([[1, 2, 3]])
        assert lg[0].shape == (3, int(cfg["vocab"]))
        step: npt.NDArray[np.float32] = model.step(np.array([5], np.int32), [3])
        assert step.shape == (1, model.V)
        return model.generate([[1, 2, 3], [4]], max_new_tokens=3, temperature=0.0)


if __name__ == "__main__":
    print(run(sys.argv[1]))
