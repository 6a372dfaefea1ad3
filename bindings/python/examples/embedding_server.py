"""An Open Inference Protocol server answering ``ModelInfer`` with sentence embeddings from a
real model (embedding_model.py), over grpc.aio (TCP) and over Homa at once: the same
servicer, added to both servers, unchanged.

    python embedding_server.py --grpc-port 50051 --homa-port 4000

Input: a BYTES tensor ``text`` (the sentences). Output: an FP32 tensor ``embedding`` of shape
[sentences, 384], in ``raw_output_contents``, and the model's time in the response parameter
``compute_us``."""

from __future__ import annotations

import argparse
import asyncio
import signal
import time
from typing import Any

import grpc
import oip
from embedding_model import DIMENSIONS, Model

import homa.grpc.aio

MODEL_NAME = "all-MiniLM-L6-v2"


def servicer(pb: Any, pb_grpc: Any, model: Model) -> Any:
    class Embedding(pb_grpc.GRPCInferenceServiceServicer):  # type: ignore[misc]
        async def ServerLive(self, request: Any, context: Any) -> Any:
            return pb.ServerLiveResponse(live=True)

        async def ModelInfer(self, request: Any, context: Any) -> Any:
            if request.model_name != MODEL_NAME:
                await context.abort(grpc.StatusCode.NOT_FOUND, f"no model {request.model_name!r}")
            if len(request.inputs) != 1 or request.inputs[0].datatype != "BYTES":
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "one BYTES input: the texts")
            texts = [t.decode() for t in oip.unpack_bytes(request.raw_input_contents[0])]
            start = time.perf_counter()
            vectors = model.embed(texts)
            reply = pb.ModelInferResponse(model_name=MODEL_NAME, id=request.id)
            # How long the model took: the client compares its latencies with it.
            reply.parameters["compute_us"].int64_param = round((time.perf_counter() - start) * 1e6)
            reply.outputs.add(name="embedding", datatype="FP32", shape=[len(texts), DIMENSIONS])
            reply.raw_output_contents.append(vectors.tobytes())
            return reply

    return Embedding()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--grpc-port", type=int, default=50051)
    parser.add_argument("--homa-port", type=int, default=4000)
    args = parser.parse_args()
    pb, pb_grpc = oip.generated()
    serving = servicer(pb, pb_grpc, Model())
    servers = []
    for module, port in ((grpc.aio, args.grpc_port), (homa.grpc.aio, args.homa_port)):
        server = module.server()
        pb_grpc.add_GRPCInferenceServiceServicer_to_server(serving, server)
        server.add_insecure_port(f"{args.host}:{port}")
        await server.start()
        servers.append(server)
    print(f"listening on {args.host}: grpc {args.grpc_port}, homa {args.homa_port}", flush=True)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGINT, stop.set)
    await stop.wait()
    for server in servers:
        await server.stop(1.0)
    print("stopped")


if __name__ == "__main__":
    asyncio.run(main())
