"""homa.grpc with real generated code: the .proto files in protos/ are compiled with
grpcio-tools at test time, and the same servicer is served over grpc.aio (TCP) and over
homa.grpc.aio; every check runs the same client code against both and expects the same
answers."""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import json
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

grpc = pytest.importorskip("grpc")
grpc_tools = pytest.importorskip("grpc_tools")

import homa.grpc  # noqa: E402
import homa.grpc.aio  # noqa: E402
from conftest import SLACK, free_port  # noqa: E402

#: Homa's socket options for these tests (see conftest.SLACK), as channel and server options.
OPTIONS = [(f"homa.{k}", v) for k, v in SLACK.items()]

PROTOS = Path(__file__).parent / "protos"
#: The Open Inference Protocol's subset, which the embedding example serves too.
EXAMPLE_PROTOS = Path(__file__).parents[1] / "examples" / "protos"


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The modules grpcio-tools generates from protos/ (imported from a temporary dir)."""
    from grpc_tools import protoc

    out = tmp_path_factory.mktemp("generated")
    for proto in (PROTOS / "homatest.proto", EXAMPLE_PROTOS / "inference.proto"):
        args = ["protoc", f"-I{proto.parent}", f"--python_out={out}", f"--grpc_python_out={out}"]
        assert protoc.main([*args, str(proto)]) == 0, proto
    sys.path.insert(0, str(out))
    try:
        names = ("homatest_pb2", "homatest_pb2_grpc", "inference_pb2", "inference_pb2_grpc")
        yield {n: importlib.import_module(n) for n in names}
    finally:
        sys.path.remove(str(out))


def probe_servicer(g: Any) -> Any:
    pb = g["homatest_pb2"]

    class Probe(g["homatest_pb2_grpc"].ProbeServicer):  # type: ignore[misc]
        async def Echo(self, request: Any, context: Any) -> Any:
            seen = [f"{k}={v!r}" for k, v in context.invocation_metadata() if k.startswith("x-")]
            context.set_trailing_metadata([("x-trailer", "t1"), ("x-bytes-bin", b"\x00\xff")])
            return pb.EchoReply(data=request.data, metadata=seen)

        async def Fail(self, request: Any, context: Any) -> Any:
            code = next(c for c in grpc.StatusCode if c.value[0] == request.code)
            await context.abort(code, request.details)

        async def Raise(self, request: Any, context: Any) -> Any:
            raise ValueError("the servicer broke")

        async def Sleep(self, request: Any, context: Any) -> Any:
            remaining = context.time_remaining()
            await asyncio.sleep(request.millis / 1000)
            return pb.EchoReply(time_remaining=-1.0 if remaining is None else remaining)

    return Probe()


def inference_servicer(g: Any) -> Any:
    pb = g["inference_pb2"]

    class Inference(g["inference_pb2_grpc"].GRPCInferenceServiceServicer):  # type: ignore[misc]
        async def ServerLive(self, request: Any, context: Any) -> Any:
            return pb.ServerLiveResponse(live=True)

        async def ModelInfer(self, request: Any, context: Any) -> Any:
            # "Doubling" model: each raw input's bytes, twice.
            out = pb.ModelInferResponse(model_name=request.model_name, id=request.id)
            for tensor, raw in zip(request.inputs, request.raw_input_contents):
                out.outputs.add(name=tensor.name + "_out", datatype=tensor.datatype, shape=tensor.shape)
                out.raw_output_contents.append(raw + raw)
            return out

    return Inference()


@contextlib.asynccontextmanager
async def serving_both(generated: Any) -> AsyncIterator[Callable[..., Awaitable[tuple[Any, Any]]]]:
    """Serves the servicers over grpc.aio and homa.grpc.aio; yields `run(client)`, which
    calls `client(channel)` with a channel to each and returns both outcomes: the result,
    or the error's (code, details)."""
    servers, channels = [], []
    for module, options in ((grpc.aio, []), (homa.grpc.aio, OPTIONS)):
        server = module.server(options=options)
        generated["homatest_pb2_grpc"].add_ProbeServicer_to_server(probe_servicer(generated), server)
        generated["inference_pb2_grpc"].add_GRPCInferenceServiceServicer_to_server(
            inference_servicer(generated), server
        )
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        servers.append(server)
        channels.append(module.insecure_channel(f"127.0.0.1:{port}", options=options))

    async def run(client: Callable[[Any], Awaitable[Any]]) -> tuple[Any, Any]:
        outcomes = []
        for channel in channels:
            try:
                outcomes.append(await client(channel))
            except grpc.aio.AioRpcError as e:
                outcomes.append((e.code(), e.details()))
        return outcomes[0], outcomes[1]

    try:
        yield run
    finally:
        for channel in channels:
            await channel.close()
        for server in servers:
            await server.stop(None)


def test_a_unary_call_and_metadata_both_ways(run: Callable[[Any], Any], generated: Any) -> None:
    async def main() -> None:
        async with serving_both(generated) as both:
            pb, stubs = generated["homatest_pb2"], generated["homatest_pb2_grpc"]

            async def client(channel: Any) -> Any:
                call = stubs.ProbeStub(channel).Echo(
                    pb.EchoRequest(data=b"hello"), metadata=[("x-user", "ada"), ("x-id-bin", b"\x01\x02")]
                )
                reply = await call
                trailing = [(k, v) for k, v in await call.trailing_metadata() if k.startswith("x-")]
                return reply.data, list(reply.metadata), trailing, await call.code()

            tcp, over_homa = await both(client)
            assert over_homa == tcp
            data, seen, trailing, code = over_homa
            assert data == b"hello" and code == grpc.StatusCode.OK
            assert seen == ["x-user='ada'", "x-id-bin=b'\\x01\\x02'"]
            assert trailing == [("x-trailer", "t1"), ("x-bytes-bin", b"\x00\xff")]

    run(main())


@pytest.mark.parametrize("code", [c for c in grpc.StatusCode if c != grpc.StatusCode.OK])
def test_every_status_code_and_its_details(run: Callable[[Any], Any], generated: Any, code: Any) -> None:
    async def main() -> None:
        async with serving_both(generated) as both:
            pb, stubs = generated["homatest_pb2"], generated["homatest_pb2_grpc"]
            details = f"failed as {code.name}: ünïcode, 100% and\nnewline"

            async def client(channel: Any) -> Any:
                return await stubs.ProbeStub(channel).Fail(pb.FailRequest(code=code.value[0], details=details))

            tcp, over_homa = await both(client)
            assert over_homa == tcp == (code, details)

    run(main())


def test_a_servicer_exception_is_unknown(run: Callable[[Any], Any], generated: Any) -> None:
    async def main() -> None:
        async with serving_both(generated) as both:
            pb, stubs = generated["homatest_pb2"], generated["homatest_pb2_grpc"]

            async def client(channel: Any) -> Any:
                return await stubs.ProbeStub(channel).Raise(pb.EchoRequest())

            tcp, over_homa = await both(client)
            assert over_homa == tcp
            assert tcp == (grpc.StatusCode.UNKNOWN, "Unexpected <class 'ValueError'>: the servicer broke")

    run(main())


def test_the_deadline_reaches_the_servicer_and_ends_the_call(run: Callable[[Any], Any], generated: Any) -> None:
    async def main() -> None:
        async with serving_both(generated) as both:
            pb, stubs = generated["homatest_pb2"], generated["homatest_pb2_grpc"]

            async def in_time(channel: Any) -> Any:
                reply = await stubs.ProbeStub(channel).Sleep(pb.SleepRequest(millis=1), timeout=5.0)
                # (grpc.aio's clock may read a few milliseconds over.)
                return 4.0 < reply.time_remaining <= 5.1

            assert await both(in_time) == (True, True)

            async def late(channel: Any) -> Any:
                return await stubs.ProbeStub(channel).Sleep(pb.SleepRequest(millis=2000), timeout=0.2)

            tcp, over_homa = await both(late)
            assert over_homa[0] == tcp[0] == grpc.StatusCode.DEADLINE_EXCEEDED

    run(main())


def test_a_cancelled_call_raises_cancelled_error(run: Callable[[Any], Any], generated: Any) -> None:
    async def main() -> None:
        async with serving_both(generated) as both:
            pb, stubs = generated["homatest_pb2"], generated["homatest_pb2_grpc"]

            async def client(channel: Any) -> Any:
                call = stubs.ProbeStub(channel).Sleep(pb.SleepRequest(millis=2000))
                await asyncio.sleep(0.05)
                call.cancel()
                try:
                    await call
                except asyncio.CancelledError:
                    return "cancelled", await call.code()
                return "answered"

            tcp, over_homa = await both(client)
            assert over_homa == tcp == ("cancelled", grpc.StatusCode.CANCELLED)

    run(main())


def test_open_inference_protocol_calls(run: Callable[[Any], Any], generated: Any) -> None:
    async def main() -> None:
        async with serving_both(generated) as both:
            pb, stubs = generated["inference_pb2"], generated["inference_pb2_grpc"]
            request = pb.ModelInferRequest(model_name="double", id="42")
            request.inputs.add(name="x", datatype="FP32", shape=[2, 3])
            request.raw_input_contents.append(bytes(range(24)))

            async def client(channel: Any) -> Any:
                stub = stubs.GRPCInferenceServiceStub(channel)
                live = await stub.ServerLive(pb.ServerLiveRequest())
                reply = await stub.ModelInfer(request)
                return live.live, reply.model_name, reply.id, list(reply.outputs[0].shape), reply.raw_output_contents[0]

            tcp, over_homa = await both(client)
            assert over_homa == tcp == (True, "double", "42", [2, 3], bytes(range(24)) * 2)

    run(main())


def test_failures_of_the_transport_as_grpc_statuses(run: Callable[[Any], Any], generated: Any) -> None:
    async def main() -> None:
        pb, stubs = generated["homatest_pb2"], generated["homatest_pb2_grpc"]
        # Nobody serves there: UNAVAILABLE.
        async with homa.grpc.aio.insecure_channel("127.0.0.1:31999") as channel:
            with pytest.raises(grpc.RpcError) as caught:
                await stubs.ProbeStub(channel).Echo(pb.EchoRequest(data=b"x"), timeout=5)
            assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
        # Over Homa's per-message limit: RESOURCE_EXHAUSTED, nothing sent.
        server = homa.grpc.aio.server(options=OPTIONS)
        stubs.add_ProbeServicer_to_server(probe_servicer(generated), server)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        async with homa.grpc.aio.insecure_channel(f"127.0.0.1:{port}", options=OPTIONS) as channel:
            with pytest.raises(grpc.RpcError) as caught:
                await stubs.ProbeStub(channel).Echo(pb.EchoRequest(data=bytes(2_000_000)))
            assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            # Streaming methods are not carried: a clear error naming the method.
            with pytest.raises(NotImplementedError, match="/homatest.Probe/Updates"):
                stubs.ProbeStub(channel).Updates(pb.EchoRequest())
        await server.stop(None)

    run(main())


def test_the_blocking_channel(run: Callable[[Any], Any], generated: Any) -> None:
    async def main() -> None:
        pb, stubs = generated["homatest_pb2"], generated["homatest_pb2_grpc"]
        server = homa.grpc.aio.server(options=OPTIONS)
        stubs.add_ProbeServicer_to_server(probe_servicer(generated), server)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()

        def blocking() -> Any:
            with homa.grpc.insecure_channel(f"127.0.0.1:{port}", options=OPTIONS) as channel:
                stub = stubs.ProbeStub(channel)
                reply = stub.Echo(pb.EchoRequest(data=b"sync"), metadata=[("x-a", "1")])
                try:
                    stub.Fail(pb.FailRequest(code=grpc.StatusCode.NOT_FOUND.value[0], details="no"))
                except grpc.RpcError as e:
                    return reply.data, list(reply.metadata), e.code(), e.details()
            return None

        result = await asyncio.get_running_loop().run_in_executor(None, blocking)
        assert result == (b"sync", ["x-a='1'"], grpc.StatusCode.NOT_FOUND, "no")
        await server.stop(None)

    run(main())


def test_grpc_so_reuseport_lets_servers_share_a_port(run: Callable[[Any], Any], generated: Any) -> None:
    """grpcio's option, as its multiprocessing example passes it: servers (here two in one
    process) share the port and both serve; a server without it cannot join them."""

    async def main() -> None:
        pb, stubs = generated["homatest_pb2"], generated["homatest_pb2_grpc"]
        port = free_port()
        servers = []
        for n in range(2):

            class Tagged(stubs.ProbeServicer):  # type: ignore[misc,name-defined]
                async def Echo(self, request: Any, context: Any, tag: bytes = bytes([n])) -> Any:
                    return pb.EchoReply(data=tag)

            server = homa.grpc.aio.server(options=[*OPTIONS, ("grpc.so_reuseport", 1)])
            stubs.add_ProbeServicer_to_server(Tagged(), server)
            assert server.add_insecure_port(f"127.0.0.1:{port}") == port
            await server.start()
            servers.append(server)
        with pytest.raises(homa.PortInUseError):
            homa.grpc.aio.server(options=OPTIONS).add_insecure_port(f"127.0.0.1:{port}")
        # 32 channels, each its own Homa socket: the kernel gives each server some.
        answered = set()
        for _ in range(32):
            async with homa.grpc.aio.insecure_channel(f"127.0.0.1:{port}", options=OPTIONS) as channel:
                answered.add((await stubs.ProbeStub(channel).Echo(pb.EchoRequest())).data)
        assert answered == {b"\x00", b"\x01"}
        for server in servers:
            await server.stop(None)

    run(main())


def test_the_framing_vectors() -> None:
    """conformance/vectors/grpc.json: each frame decodes to its fields and encodes back to
    its bytes; each invalid one is refused."""
    from conftest import CONFORMANCE

    from homa.grpc import _wire

    doc = json.loads((CONFORMANCE / "vectors" / "grpc.json").read_text())

    def metadata(entries: Any) -> Any:
        if entries is None:
            return None
        return [(k, bytes.fromhex(v) if k.endswith("-bin") else v) for k, v in entries]

    for case in doc["cases"]:
        f = case["frame"]
        message = None if f["message_hex"] is None else bytes.fromhex(f["message_hex"])
        frame = _wire.Frame(
            f["stream_id"],
            f["sequence"],
            f["is_request"],
            metadata(f["initial_metadata"]),
            metadata(f["trailing_metadata"]),
            message,
        )
        data = bytes.fromhex(case["hex"])
        assert _wire.encode(frame) == data, case["id"]
        got = _wire.decode(data)
        assert (got.stream_id, got.sequence, got.is_request) == (
            frame.stream_id,
            frame.sequence,
            frame.is_request,
        ), case["id"]
        assert got.initial_metadata == frame.initial_metadata, case["id"]
        assert got.trailing_metadata == frame.trailing_metadata, case["id"]
        assert (None if got.message is None else bytes(got.message)) == message, case["id"]
    for case in doc["invalid"]:
        with pytest.raises(_wire.FrameError):
            _wire.decode(bytes.fromhex(case["hex"]))
