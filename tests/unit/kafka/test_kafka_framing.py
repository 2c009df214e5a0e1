import struct

import pytest

from vdl.net.kafka.framing import FrameDecoder, FrameTooLarge, frame


def framed(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def test_single_frame_in_one_feed() -> None:
    dec = FrameDecoder(1024)
    out = dec.feed(framed(b"hello"))
    assert [bytes(f) for f in out] == [b"hello"]
    assert dec.buffered == 0


def test_coalesced_frames_in_one_feed() -> None:
    dec = FrameDecoder(1024)
    data = framed(b"a") + framed(b"") + framed(b"ccc") + framed(b"dd")[:3]
    out = dec.feed(data)
    assert [bytes(f) for f in out] == [b"a", b"", b"ccc"]
    assert [bytes(f) for f in dec.feed(framed(b"dd")[3:])] == [b"dd"]


def test_byte_by_byte_feed() -> None:
    payloads = [b"x" * 7, b"", b"yz" * 100]
    stream = b"".join(framed(p) for p in payloads)
    dec = FrameDecoder(1024)
    got: list[bytes] = []
    for i in range(len(stream)):
        got.extend(bytes(f) for f in dec.feed(stream[i : i + 1]))
    assert got == payloads


@pytest.mark.parametrize("chunk", [1, 3, 4, 5, 17, 4096])
def test_split_at_every_chunk_size(chunk: int) -> None:
    payloads = [bytes([i]) * (i * 13) for i in range(20)]
    stream = b"".join(framed(p) for p in payloads)
    dec = FrameDecoder(1 << 20)
    got: list[bytes] = []
    for i in range(0, len(stream), chunk):
        got.extend(bytes(f) for f in dec.feed(stream[i : i + chunk]))
    assert got == payloads


def test_frame_within_one_chunk_is_not_copied() -> None:
    data = framed(b"payload")
    out = FrameDecoder(100).feed(data)
    assert out[0].obj is data


def test_large_frame_in_many_chunks() -> None:
    payload = bytes(range(256)) * 4096  # 1 MiB
    stream = framed(payload)
    dec = FrameDecoder(2 << 20)
    got = []
    for i in range(0, len(stream), 65536):
        got.extend(dec.feed(stream[i : i + 65536]))
    assert len(got) == 1 and got[0] == payload


def test_mutable_input_is_copied() -> None:
    buf = bytearray(framed(b"abc"))
    out = FrameDecoder(100).feed(buf)
    buf[4:7] = b"zzz"
    assert bytes(out[0]) == b"abc"


def test_oversize_raises_immediately() -> None:
    dec = FrameDecoder(10)
    with pytest.raises(FrameTooLarge) as info:
        dec.feed(struct.pack(">i", 11))  # no payload needed to refuse
    assert info.value.size == 11


def test_negative_size_raises() -> None:
    with pytest.raises(FrameTooLarge):
        FrameDecoder(10).feed(struct.pack(">i", -5))


def test_oversize_after_good_frames_keeps_them() -> None:
    dec = FrameDecoder(10)
    with pytest.raises(FrameTooLarge) as info:
        dec.feed(framed(b"ok") + struct.pack(">i", 1000))
    assert [bytes(f) for f in info.value.frames] == [b"ok"]


def test_limit_is_inclusive() -> None:
    assert [bytes(f) for f in FrameDecoder(3).feed(framed(b"abc"))] == [b"abc"]


def test_frame_prefixes_total_size() -> None:
    parts: list[bytes | memoryview] = [b"ab", memoryview(b"cde"), b""]
    out = frame(parts)
    assert b"".join(out) == struct.pack(">i", 5) + b"abcde"
    assert out[1:] == parts


def test_large_frame_is_received_into_its_own_buffer() -> None:
    payload = bytes(range(256)) * 4096  # 1 MiB
    stream = framed(payload) + framed(b"next")
    dec = FrameDecoder(2 << 20)
    assert dec.feed(stream[:65536]) == []  # starts the frame's own buffer
    got: list[memoryview] = []
    at = 65536
    while (target := dec.direct_buffer()) is not None:
        n = min(len(target), 100_000)
        target[:n] = stream[at : at + n]  # what recv_into does
        at += n
        got.extend(dec.direct_received(n))
    assert len(got) == 1 and got[0] == payload
    assert not got[0].readonly  # owned by this frame alone: may be modified in place
    assert [bytes(f) for f in dec.feed(stream[at:])] == [b"next"]
    assert dec.buffered == 0


def test_frames_sharing_a_chunk_are_read_only() -> None:
    out = FrameDecoder(1 << 20).feed(framed(b"a" * 70_000) + framed(b"b"))
    assert [len(f) for f in out] == [70_000, 1]
    assert all(f.readonly for f in out)
    assert FrameDecoder(1 << 20).direct_buffer() is None


def test_feed_completes_a_frame_collected_in_its_own_buffer() -> None:
    payload = b"z" * 100_000
    stream = framed(payload) + framed(b"tail")
    dec = FrameDecoder(1 << 20)
    assert dec.feed(stream[:1000]) == []
    out = dec.feed(bytearray(stream[1000:]))
    assert [bytes(f) for f in out] == [payload, b"tail"]
    assert not out[0].readonly


def test_an_announced_huge_frame_is_not_allocated_before_it_arrives() -> None:
    dec = FrameDecoder(100 << 20)
    assert dec.feed(struct.pack(">i", 50 << 20) + b"x" * 1000) == []
    assert dec.direct_buffer() is None  # 50 MiB promised, 1000 bytes sent
    assert dec.feed(b"x" * (26 << 20)) == []
    target = dec.direct_buffer()  # over half has arrived: the rest goes direct
    assert target is not None and len(target) == (50 << 20) - 1000 - (26 << 20)


def test_direct_received_checks_its_count() -> None:
    dec = FrameDecoder(1 << 20)
    with pytest.raises(ValueError):
        dec.direct_received(1)


def test_limit_can_be_raised_between_reads() -> None:
    dec = FrameDecoder(8)
    assert [bytes(f) for f in dec.feed(framed(b"small"))] == [b"small"]
    with pytest.raises(FrameTooLarge):
        dec.feed(framed(b"x" * 9))
    dec = FrameDecoder(8)
    dec.limit = 64
    assert [bytes(f) for f in dec.feed(framed(b"x" * 9))] == [b"x" * 9]
    with pytest.raises(ValueError):
        dec.limit = -1
